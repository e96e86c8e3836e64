//! What answering a poll needs besides the state ([`Assembler`]): each
//! resource's JSON with its config sources pointed at a REST target
//! (memoised per content and target), and the memo of assembled bodies
//! (`body_memo.rs`). This is all the serving side needs of rendering;
//! decoding and rendering what upstreams send is the
//! [`Intake`](super::Intake)'s, which the serving side never holds.

use bytes::Bytes;
use moka::sync::Cache;

use super::body_memo::Bodies;
use super::intake::{RENDER_MEMO_ENTRIES, RENDER_MEMO_IDLE};
use super::resource::{idle_memo, Digest, Resource};
use crate::xds::rewrite::{rewrite_config_sources, RestTarget};
use crate::xds::{Codec, JsonError};

/// Rewrites for REST targets and assembled bodies, both remembered. Cheap
/// to clone: the memos are shared.
#[derive(Clone)]
pub struct Assembler {
    codec: Codec,
    /// By content, the number of types it was served opaque for (which
    /// only falls, as the pool learns them) and target.
    rewritten: Cache<(Digest, usize, RestTarget), Bytes>,
    bodies: Bodies,
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler").finish_non_exhaustive()
    }
}

impl Assembler {
    /// An assembler with the default bounds of the body memo.
    #[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
    pub fn new(codec: Codec) -> Assembler {
        Assembler::with_body_capacity(codec, crate::config::MemoryShares::default().bodies)
    }

    /// An assembler whose body memo holds at most `bytes` (tests of
    /// eviction; none at all for the benchmarks' pipeline,
    /// `upstream/pipeline.rs`).
    pub fn with_body_capacity(codec: Codec, bytes: u64) -> Assembler {
        Assembler {
            codec,
            rewritten: idle_memo(RENDER_MEMO_ENTRIES, RENDER_MEMO_IDLE),
            bodies: Bodies::with_capacity(bytes),
        }
    }

    /// The codec (for what the REST face parses and renders itself).
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    pub fn bodies(&self) -> &Bodies {
        &self.bodies
    }

    /// The resource's JSON with ADS/self config sources pointed at `target`.
    pub fn rewritten(&self, resource: &Resource, target: &RestTarget) -> Result<Bytes, JsonError> {
        if resource.kind.delta_only() {
            return self.rewritten_unmemoised(resource, target);
        }
        let key = (resource.digest, resource.opaque.len(), target.clone());
        if let Some(hit) = self.rewritten.get(&key) {
            return Ok(hit);
        }
        let json = self.rewritten_unmemoised(resource, target)?;
        self.rewritten.insert(key, json.clone());
        Ok(json)
    }

    /// [`rewritten`](Self::rewritten), worked out and kept nowhere (a
    /// `do_not_cache` resource).
    pub fn rewritten_unmemoised(
        &self,
        resource: &Resource,
        target: &RestTarget,
    ) -> Result<Bytes, JsonError> {
        if resource.kind.delta_only() {
            // Tooling reads these; no REST Envoy follows their config sources.
            return Ok(resource.json.clone());
        }
        let type_url = resource.kind.type_url();
        let codec = self.codec.snapshot();
        let Some(bytes) = rewrite_config_sources(&codec, type_url, &resource.payload, target)?
        else {
            return Ok(resource.json.clone());
        };
        let json = codec.render_any(type_url, &bytes)?;
        Ok(match &resource.variant {
            // Rewritten inside the wrapper carrying its constraints.
            Some(variant) => variant.wrap(&json),
            None => json,
        })
    }
}
