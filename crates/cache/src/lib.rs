//! What the gateway knows now: per (node identity, type) versioned states,
//! resources rendered once per content version, assembled response bodies,
//! parsed request bodies and who sent them (the client key). What was
//! served to whom is `observe`'s, which reads this and is never named here.
//! No network I/O, no HTTP.

#![warn(unreachable_pub)]

// The crates below, under the names the modules use.
use xds_gateway_base::{log_escape, sync};
use xds_gateway_config as config;
use xds_gateway_xds as xds;

mod assembler;
mod body;
mod body_memo;
mod by_name;
mod client_addr;
mod client_key;
mod identity;
mod intake;
mod node_json;
mod opaque_types;
mod payload_index;
mod request;
mod request_chunks;
mod request_frame;
mod resource;
mod resource_errors;
mod resource_set;
mod state;
#[cfg(any(test, feature = "test-support"))]
pub mod test_states;

pub use assembler::Assembler;
pub use body::JsonBody;
pub use by_name::{by_name, Paired};
pub use client_addr::ClientAddr;
pub use client_key::{ClientKey, SubscriptionKey};
pub use identity::IdentityKey;
pub use intake::Intake;
pub use opaque_types::{Opaque, OpaqueTypes};
#[cfg(any(test, feature = "test-support"))]
pub use request::MemoSize;
pub use request::{share_a_key, ParsedRequest, ParsedRequests};
pub use request_chunks::BodyChunks;
pub use resource::{idle_memo, Resource, ResourceError, WrapperName, RESOURCE_WRAPPER};
pub use resource_errors::{ReportedError, ResourceErrorView, ResourceErrors, NOT_FOUND};
pub use resource_set::{IntoResourceSet, ResourceMap, ResourceSet, Taken};
pub use state::{same_selection, upstream_version, Answer, Coverage, Names, TypeState};
