//! [`JsonError`]: why a message could not be converted, the one error of the
//! codec (`json.rs`) and of the pieces under it (the descriptor lookups of
//! `descriptors.rs`, the nesting bound of `nesting.rs`), each naming the type.

use std::path::PathBuf;

/// Why a message could not be converted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JsonError {
    #[error(
        "type {type_url} is not known to this gateway (add its descriptors with --descriptor-set)"
    )]
    UnknownType { type_url: String },
    #[error("type URL {type_url:?} does not have the form type.googleapis.com/<message name>")]
    MalformedTypeUrl { type_url: String },
    #[error("{type_url}: protobuf bytes do not decode: {reason}")]
    Decode { type_url: String, reason: String },
    #[error("{type_url}: cannot render as JSON: {reason}")]
    Render { type_url: String, reason: String },
    #[error("{message}: invalid JSON: {reason}")]
    Parse { message: String, reason: String },
    #[error("descriptor set {path}: {reason}")]
    DescriptorSet { path: PathBuf, reason: String },
}

impl JsonError {
    /// [`JsonError::Decode`] of `type_url`, for `reason`.
    pub fn decode(type_url: &str, reason: impl std::fmt::Display) -> JsonError {
        JsonError::Decode {
            type_url: type_url.to_owned(),
            reason: reason.to_string(),
        }
    }
}
