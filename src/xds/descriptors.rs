//! The descriptor pool: Envoy's whole v3 API (compiled by `build.rs` and
//! embedded) plus any FileDescriptorSets given with `--descriptor-set`, and
//! the lookups of a message's descriptor by name or by an `Any`'s type URL.
//!
//! [`Descriptors`] is what the pieces under the codec (`canonical.rs`,
//! `nesting.rs`, `opaque.rs`) are handed: they look types up, and never
//! call back into the codec (`json.rs`), which holds one. No I/O but
//! reading descriptor-set files at start-up.

use std::path::{Path, PathBuf};

use prost_reflect::{DescriptorPool, MessageDescriptor};

use super::json_error::JsonError;
use super::resource_type::TYPE_URL_PREFIX;

/// Envoy's v3 API, compiled by build.rs.
static EMBEDDED_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptor_set.bin"));

/// The descriptor pool. Cheap to clone (the pool is reference counted).
#[derive(Clone, Debug)]
pub(crate) struct Descriptors {
    pool: DescriptorPool,
}

impl Descriptors {
    /// The embedded Envoy API only.
    pub(crate) fn embedded() -> Descriptors {
        let pool = DescriptorPool::decode(EMBEDDED_DESCRIPTOR_SET)
            .expect("build.rs validated the embedded descriptor set");
        Descriptors { pool }
    }

    /// The embedded API plus the compiled FileDescriptorSets at `paths`
    /// (contrib or in-house extension types), read once at start-up.
    pub(crate) fn with_descriptor_sets(paths: &[PathBuf]) -> Result<Descriptors, JsonError> {
        let mut descriptors = Descriptors::embedded();
        for path in paths {
            let bytes = std::fs::read(path).map_err(|e| descriptor_error(path, e))?;
            descriptors
                .pool
                .decode_file_descriptor_set(bytes.as_slice())
                .map_err(|e| descriptor_error(path, e))?;
        }
        Ok(descriptors)
    }

    /// The descriptor pool (for rewrites and reflection).
    pub(crate) fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// The descriptor of the message a type URL names.
    pub(crate) fn for_type_url(&self, type_url: &str) -> Result<MessageDescriptor, JsonError> {
        let name = message_name_of(type_url)?;
        self.descriptor(name).map_err(|_| JsonError::UnknownType {
            type_url: type_url.to_owned(),
        })
    }

    /// The descriptor of a fully qualified message name.
    pub(crate) fn descriptor(&self, name: &str) -> Result<MessageDescriptor, JsonError> {
        self.pool
            .get_message_by_name(name)
            .ok_or_else(|| JsonError::UnknownType {
                type_url: format!("{TYPE_URL_PREFIX}{name}"),
            })
    }
}

/// The message name of `type.googleapis.com/<name>` (any host prefix is accepted,
/// as protobuf does: the name is what follows the last `/`).
fn message_name_of(type_url: &str) -> Result<&str, JsonError> {
    match type_url.rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => Ok(name),
        _ => Err(JsonError::MalformedTypeUrl {
            type_url: type_url.to_owned(),
        }),
    }
}

fn descriptor_error(path: &Path, err: impl std::fmt::Display) -> JsonError {
    JsonError::DescriptorSet {
        path: path.to_owned(),
        reason: err.to_string(),
    }
}
