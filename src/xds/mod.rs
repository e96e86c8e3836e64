//! Protocol vocabulary: resource types, canonical JSON, request parsing and
//! resource rewrites. No I/O.

pub mod json;
pub mod request;
pub mod resource_type;
pub mod rewrite;

pub use json::{Codec, JsonError};
pub use request::{DiscoveryRequestView, NodeView, RequestError};
pub use resource_type::{Endpoint, ResourceType};
