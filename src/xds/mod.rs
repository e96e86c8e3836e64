//! Protocol vocabulary: resource types, canonical JSON, request parsing and
//! resource rewrites. No I/O.

mod canonical;
pub(crate) mod descriptors;
pub(crate) mod dynamic_parameters;
pub mod extra_types;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz;
mod json;
mod json_error;
pub(crate) mod keys;
pub(crate) mod learned;
pub(crate) mod membership;
mod nesting;
pub(crate) mod opaque;
pub(crate) mod plain_json;
pub(crate) mod references;
mod request;
mod resource_type;
pub(crate) mod rewrite;
mod validate;
pub(crate) mod xdstp;

pub use json::Codec;
pub use json_error::JsonError;
pub use keys::REDACTED;
pub use learned::LearnError;
pub use opaque::OPAQUE_TYPE_URL;
pub use request::{DiscoveryRequestView, ErrorDetailView, LocatorView, NodeView, RequestError};
pub(crate) use resource_type::PATH_PREFIX;
pub use resource_type::{Endpoint, ResourceType, MAX_TYPES};
pub use validate::{Validator, Violation};
