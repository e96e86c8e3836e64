//! The memo of assembled response bodies ([`Bodies`]), shared by every
//! state: per answer, its version and the body's own opening and closing
//! ([`Assembled`]), and the resources pieces by content, so every node
//! identity holding the same resources shares one. `state.rs` assembles
//! the bodies and decides what they are keyed by; the intake carries the
//! memo to it. Names nothing of `cache`.

use std::sync::Arc;

use bytes::Bytes;
use moka::sync::Cache;

use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// Total bytes of answers' own parts (versions, openings, closings) kept.
const ANSWERS_BYTES: u64 = 32 * 1024 * 1024;
/// A body nobody asked for this long is dropped: a superseded state's bodies
/// would otherwise stay until the byte bound pushed them out.
const BODIES_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// One answer as memoised: its version, and the body's own pieces around
/// the resources, which are shared ([`Bodies`]).
#[derive(Debug)]
pub(super) struct Assembled {
    pub(super) state: u64,
    /// The SHA-256 of the names it answers (`names_digest` in `state.rs`), not
    /// the names: an answer for many names that match nothing is a small body,
    /// and its names would weigh far more. Collision-resistant, so a hit is
    /// still confirmed.
    pub(super) names: [u8; 32],
    pub(super) target: Option<RestTarget>,
    pub(super) version: String,
    pub(super) head: Bytes,
    pub(super) tail: Bytes,
    /// The key of its shared resources piece, looked up on every hit (a hit
    /// whose piece was evicted is assembled again): small answers never keep
    /// big pieces alive past that memo's bounds.
    pub(super) piece: SharedKey,
}

impl Assembled {
    /// What it holds of its own (what the memo weighs it by).
    pub(super) fn held_bytes(&self) -> usize {
        std::mem::size_of::<Assembled>() + self.head.len() + self.tail.len() + self.version.len()
    }
}

/// What a shared resources piece is keyed by: the type and the full
/// selection digest (`TypeState::selection`: the names asked, the rewrite
/// target, and the name and content digest of every resource selected).
pub(super) type SharedKey = (ResourceType, [u8; 32]);

/// The memo of assembled bodies, two byte-bounded LRUs: answers per (state,
/// names, target), keyed by a hash confirmed on every hit (a collision costs
/// an assembly, never a wrong body); and the resources pieces by content
/// ([`SharedKey`]), one for every node identity after the same push.
#[derive(Clone)]
pub struct Bodies {
    pub(super) answers: Cache<u64, Arc<Assembled>>,
    pub(super) shared: Cache<SharedKey, Arc<Bytes>>,
}

impl std::fmt::Debug for Bodies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bodies")
            .field("answers", &self.answers.entry_count())
            .field("shared", &self.shared.entry_count())
            .finish()
    }
}

impl Bodies {
    /// A memo holding at most `bytes` in all: of answers' own parts an
    /// eighth of it (at most [`ANSWERS_BYTES`]), and shared resources pieces
    /// the rest.
    pub(super) fn with_capacity(bytes: u64) -> Bodies {
        let answers = (bytes / 8).min(ANSWERS_BYTES);
        let bytes = bytes - answers;
        Bodies {
            answers: Cache::builder()
                .max_capacity(answers)
                .time_to_idle(BODIES_IDLE)
                .weigher(|_, a: &Arc<Assembled>| u32::try_from(a.held_bytes()).unwrap_or(u32::MAX))
                .build(),
            shared: Cache::builder()
                .max_capacity(bytes)
                .time_to_idle(BODIES_IDLE)
                .weigher(|_, piece: &Arc<Bytes>| {
                    u32::try_from(piece.len() + 96).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    pub(super) fn key(state: u64, names: &[u8; 32], target: Option<&RestTarget>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = xxhash_rust::xxh3::Xxh3::default();
        state.hash(&mut hasher);
        names.hash(&mut hasher);
        target.hash(&mut hasher);
        hasher.finish()
    }

    pub(super) fn get(
        &self,
        key: u64,
        state: u64,
        names: &[u8; 32],
        target: Option<&RestTarget>,
    ) -> Option<Arc<Assembled>> {
        self.answers
            .get(&key)
            .filter(|a| a.state == state && a.names == *names && a.target.as_ref() == target)
    }

    /// The shared resources piece of `key`, assembled by `make` if no state
    /// holding the same resources was answered before.
    pub(super) fn shared(
        &self,
        key: SharedKey,
        make: impl FnOnce() -> Result<Bytes, JsonError>,
    ) -> Result<Arc<Bytes>, JsonError> {
        if let Some(hit) = self.shared.get(&key) {
            return Ok(hit);
        }
        let piece = Arc::new(make()?);
        self.shared.insert(key, piece.clone());
        Ok(piece)
    }
}
