//! The descriptor pool: Envoy's whole v3 API (compiled by `build.rs` and
//! embedded), any FileDescriptorSets given with `--descriptor-set`, and the
//! files learned from upstreams at run time (checked by [`super::learned`]);
//! and the lookups of a message's descriptor by name or type URL.
//!
//! [`Descriptors`] is what the pieces under the codec are handed: they never
//! call back into the codec (`json.rs`). The pool only grows: a message keeps
//! the pool it was decoded with, and each growth bumps a generation that
//! holders of renders watch ([`Descriptors::grown`]). No I/O but reading
//! descriptor-set files at start-up.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use prost_reflect::{DescriptorPool, MessageDescriptor};
use tokio::sync::watch;

use super::json_error::JsonError;
use super::learned::{self, LearnError};
use super::resource_type::TYPE_URL_PREFIX;

/// Envoy's v3 API, compiled by build.rs.
static EMBEDDED_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptor_set.bin"));

/// The descriptor pool. Cheap to clone: clones share one pool, and see what
/// any of them learns.
#[derive(Clone, Debug)]
pub struct Descriptors {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    pool: RwLock<DescriptorPool>,
    /// How many times the pool grew after start-up.
    generation: watch::Sender<u64>,
}

impl Descriptors {
    /// The embedded Envoy API only.
    pub(crate) fn embedded() -> Descriptors {
        Descriptors::of(embedded_pool(), 0)
    }

    fn of(pool: DescriptorPool, generation: u64) -> Descriptors {
        Descriptors {
            shared: Arc::new(Shared {
                pool: RwLock::new(pool),
                generation: watch::Sender::new(generation),
            }),
        }
    }

    /// The embedded API plus the compiled FileDescriptorSets at `paths`
    /// (contrib or in-house extension types), read once at start-up.
    pub(crate) fn with_descriptor_sets(paths: &[PathBuf]) -> Result<Descriptors, JsonError> {
        let mut pool = embedded_pool();
        for path in paths {
            let bytes = std::fs::read(path).map_err(|e| descriptor_error(path, e))?;
            pool.decode_file_descriptor_set(bytes.as_slice())
                .map_err(|e| descriptor_error(path, e))?;
        }
        Ok(Descriptors::of(pool, 0))
    }

    /// The pool as it is now, fixed: what one decode-and-render uses, so
    /// that its decode and render agree while the shared pool grows.
    pub(crate) fn snapshot(&self) -> Descriptors {
        Descriptors::of(self.pool(), self.generation())
    }

    /// The descriptor pool as it is now (for rewrites and reflection).
    pub fn pool(&self) -> DescriptorPool {
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, DescriptorPool> {
        self.shared
            .pool
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn for_type_url(&self, type_url: &str) -> Result<MessageDescriptor, JsonError> {
        let name = message_name_of(type_url)?;
        self.descriptor(name).map_err(|_| JsonError::UnknownType {
            type_url: type_url.to_owned(),
        })
    }

    /// The descriptor of a fully qualified message name.
    pub fn descriptor(&self, name: &str) -> Result<MessageDescriptor, JsonError> {
        self.read()
            .get_message_by_name(name)
            .ok_or_else(|| JsonError::UnknownType {
                type_url: format!("{TYPE_URL_PREFIX}{name}"),
            })
    }

    /// Whether the pool knows the message a type URL names.
    pub fn knows(&self, type_url: &str) -> bool {
        self.for_type_url(type_url).is_ok()
    }

    /// Adds `files` (serialized `FileDescriptorProto`s an upstream sent)
    /// that `learned::admit` admits; returns how many joined.
    pub fn learn(&self, files: &[Vec<u8>]) -> Result<usize, LearnError> {
        let mut pool = self
            .shared
            .pool
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let grown = learned::admit(&pool, files)?;
        if grown.added == 0 {
            return Ok(0);
        }
        *pool = grown.pool;
        drop(pool);
        self.shared.generation.send_modify(|g| *g += 1);
        Ok(grown.added)
    }

    /// How many times the pool grew after start-up.
    pub fn generation(&self) -> u64 {
        *self.shared.generation.borrow()
    }

    /// A receiver that changes each time the pool grows.
    pub fn grown(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }
}

/// The message name of `type.googleapis.com/<name>` (any host prefix is accepted,
/// as protobuf does: the name is what follows the last `/`).
pub fn message_name_of(type_url: &str) -> Result<&str, JsonError> {
    match type_url.rsplit_once('/') {
        Some((_, name)) if !name.is_empty() => Ok(name),
        _ => Err(JsonError::MalformedTypeUrl {
            type_url: type_url.to_owned(),
        }),
    }
}

fn embedded_pool() -> DescriptorPool {
    DescriptorPool::decode(EMBEDDED_DESCRIPTOR_SET)
        .expect("build.rs validated the embedded descriptor set")
}

fn descriptor_error(path: &Path, err: impl std::fmt::Display) -> JsonError {
    JsonError::DescriptorSet {
        path: path.to_owned(),
        reason: err.to_string(),
    }
}
