//! xds-gateway's xDS vocabulary: the resource types and their endpoints,
//! the canonical proto3 JSON codec over Envoy's descriptors (compiled by
//! `build.rs` and grown by what the gateway learns), request views,
//! rewrites, references between resources, xdstp names and validation. No
//! I/O.
//!
//! A library crate of the workspace: the gateway names it as `crate::xds`,
//! and its `pub` items are its seam; what only this crate uses is
//! `pub(crate)`. It names nothing of the gateway.

mod canonical;
pub mod descriptors;
pub mod dynamic_parameters;
pub mod extra_types;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
mod json;
mod json_error;
pub mod keys;
pub mod learned;
pub mod membership;
mod nesting;
pub mod opaque;
pub mod plain_json;
pub mod references;
mod request;
mod resource_type;
pub mod rewrite;
mod validate;
pub mod xdstp;

pub use json::Codec;
pub use json_error::JsonError;
pub use keys::REDACTED;
pub use learned::LearnError;
pub use opaque::OPAQUE_TYPE_URL;
pub use request::{DiscoveryRequestView, ErrorDetailView, LocatorView, NodeView, RequestError};
pub use resource_type::PATH_PREFIX;
pub use resource_type::{Endpoint, ResourceType, MAX_TYPES};
pub use validate::{Validator, Violation};
