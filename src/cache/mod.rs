//! What the gateway knows now: per (node identity, type) versioned states,
//! resources rendered once per content version, assembled response bodies,
//! parsed request bodies and who sent them (the client key). What was
//! served to whom is `observe`'s, which reads this and is never named here.
//! No network I/O, no HTTP.

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
#[cfg(test)]
pub(crate) mod test_states;

pub(crate) use assembler::Assembler;
pub(crate) use body::JsonBody;
pub(crate) use by_name::{by_name, Paired};
pub(crate) use client_addr::ClientAddr;
pub(crate) use client_key::{ClientKey, SubscriptionKey};
pub(crate) use identity::IdentityKey;
pub(crate) use intake::Intake;
pub(crate) use opaque_types::{Opaque, OpaqueTypes};
#[cfg(test)]
pub(crate) use request::MemoSize;
pub(crate) use request::{share_a_key, ParsedRequest, ParsedRequests};
pub(crate) use request_chunks::BodyChunks;
pub(crate) use resource::{idle_memo, Resource, ResourceError, WrapperName, RESOURCE_WRAPPER};
pub(crate) use resource_errors::{ReportedError, ResourceErrorView, ResourceErrors, NOT_FOUND};
pub(crate) use resource_set::{IntoResourceSet, ResourceMap, ResourceSet, Taken};
pub(crate) use state::{same_selection, upstream_version, Answer, Coverage, Names, TypeState};
