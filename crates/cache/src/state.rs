//! What the gateway knows of one (node identity, type): the upstream's latest
//! accepted state, and the versions and bodies it serves to REST clients.
//!
//! # Served versions
//!
//! A client is served `<upstream version>~<selection digest>`: the digest
//! covers what that client was answered (the names it asked for, the rewrite
//! target, and the name and content digest of every resource). So:
//!
//! - 304 means "what you hold is what you would get": it depends on nothing
//!   this process remembers, so any replica answers alike, and an evicted
//!   memo costs a digest, never a 304.
//! - A client whose names changed gets a body (its digest changes).
//! - An EDS cluster whose endpoints did not change gets 304 even when another
//!   cluster's did (the upstream's version moved, its digest did not).
//! - An empty `version_info` never gets a 304.
//! - A resource served opaque and the same resource rendered in full, or
//!   answers telling of different `resource_errors`, are two answers.
//!
//! The upstream's part stays readable (logs, NACKs); the digest decides.
//! Assembled bodies are memoised in a byte-bounded LRU shared by all states
//! ([`Bodies`]), their resources piece by content, so node identities holding
//! the same resources share one; nothing else here mutates, so a bad request
//! cannot poison what others are served.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest as _, Sha256};

use super::assembler::Assembler;
use super::body::JsonBody;
use super::body_memo::{Assembled, Bodies};
use super::resource::Resource;
use super::resource_errors::ResourceErrors;
use super::resource_set::{IntoResourceSet, ResourceSet};
use crate::xds::rewrite::RestTarget;
use crate::xds::{membership, xdstp, JsonError, ResourceType};

/// Separates the upstream's version from the selection digest.
pub(crate) const DIGEST_SEPARATOR: char = '~';
/// Hex digits of the selection digest (48 bits: enough to tell one client's
/// versions apart, short enough to read).
const DIGEST_HEX: usize = 12;
/// The names a request asks for: everything, or a sorted, de-duplicated set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Names {
    Wildcard,
    Named(BTreeSet<String>),
}

impl Names {
    /// The names listed, `None` for the wildcard.
    pub fn asked(&self) -> Option<&BTreeSet<String>> {
        match self {
            Names::Wildcard => None,
            Names::Named(set) => Some(set),
        }
    }

    /// An empty list means wildcard (for types other than LDS/CDS the
    /// upstream decides what "all" is), and so does a list naming `*`
    /// (xDS's explicit wildcard), whatever else it names.
    pub fn from_request(names: Vec<String>) -> Names {
        if names.is_empty() || names.iter().any(|n| n == "*") {
            return Names::Wildcard;
        }
        Names::Named(names.into_iter().collect())
    }

    /// About what the names hold in memory (what byte bounds weigh them by).
    pub fn held_bytes(&self) -> usize {
        /// A `String` (24) and its B-tree slot and allocation overheads.
        const PER_NAME: usize = 48;
        match self {
            Names::Wildcard => 0,
            Names::Named(set) => set.iter().map(|n| n.capacity() + PER_NAME).sum(),
        }
    }
}

/// What upstream subscription a state answers: a snapshot of the session's
/// subscription when the state arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub wildcard: bool,
    pub names: BTreeSet<String>,
}

impl Coverage {
    /// Whether a state with this coverage can answer `names` completely.
    pub fn covers(&self, names: &Names) -> bool {
        self.wildcard || matches!(names, Names::Named(set) if set.is_subset(&self.names))
    }

    /// Whether this subscription asks for the resource `name`: under the
    /// wildcard, by name, or in a subscribed xdstp glob collection.
    pub fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name) || in_any_collection(name, &self.names)
    }

    /// Whether this subscription asks for `resource`: as [`wants`](Self::wants),
    /// or through its VHDS namespace or one of its aliases.
    pub fn wants_resource(&self, resource: &Resource) -> bool {
        self.wildcard
            || membership::wanted(
                resource.kind,
                &resource.name,
                &resource.aliases,
                &self.names,
            )
    }
}

/// Whether `name` belongs to one of the xdstp glob collections in `names`.
fn in_any_collection(name: &str, names: &BTreeSet<String>) -> bool {
    xdstp::is_xdstp(name) && names.iter().any(|glob| xdstp::in_collection(name, glob))
}

/// The digest part of a served version (`None` when it has none).
/// What follows the last [`DIGEST_SEPARATOR`] when that is [`DIGEST_HEX`]
/// hex digits: read from the end (no search: it runs several times a poll).
pub(crate) fn selection_digest(version: &str) -> Option<&str> {
    let at = version.len().checked_sub(DIGEST_HEX + 1)?;
    let bytes = version.as_bytes();
    let digest = &bytes[at + 1..];
    // Hex digits are not the separator, so this one is the last.
    (bytes[at] == DIGEST_SEPARATOR as u8 && digest.iter().all(u8::is_ascii_hexdigit))
        .then(|| &version[at + 1..])
}

/// The upstream's part of a served version (all of it when it has no digest).
pub fn upstream_version(version: &str) -> &str {
    selection_digest(version).map_or(version, |d| &version[..version.len() - d.len() - 1])
}

/// Whether two served versions hold the same selection (equal digests).
pub fn same_selection(a: &str, b: &str) -> bool {
    matches!((selection_digest(a), selection_digest(b)), (Some(x), Some(y)) if x == y)
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The client holds what it would get; `version` is what it is served at.
    NotModified { version: String },
    /// A complete `DiscoveryResponse` JSON body at `version`; `cached` if it
    /// was assembled before.
    Body {
        json: JsonBody,
        version: String,
        cached: bool,
    },
}

impl Answer {
    /// The served version (the ETag).
    pub fn version(&self) -> &str {
        match self {
            Answer::NotModified { version } | Answer::Body { version, .. } => version,
        }
    }
}

/// Unique per state: what the body memo is keyed by.
static NEXT_STATE_ID: AtomicU64 = AtomicU64::new(1);

/// The upstream's state of one type for one node identity. Immutable.
#[derive(Debug)]
pub struct TypeState {
    pub kind: ResourceType,
    /// The upstream's version.
    pub version: String,
    pub nonce: String,
    /// Shared by every state holding the same resources.
    pub resources: Arc<ResourceSet>,
    pub coverage: Coverage,
    /// What the upstream reported wrong with single resources, remembered
    /// across responses (`resource_errors`); told to REST clients.
    pub errors: Arc<ResourceErrors>,
    /// Names of the resources the upstream marked `do_not_cache`: an
    /// answer holding one is assembled for its request alone (no memo) and
    /// kept out of the config history and HTTP caches.
    pub uncacheable: Arc<BTreeSet<String>>,
    id: u64,
}

/// The SHA-256 of a request's names (each length-prefixed; the wildcard
/// as `*` with no prefix, which no prefixed list can produce). A parsed
/// request holds its own, made once ([`TypeState::answer_digested`]).
pub(crate) fn names_digest(names: &Names) -> [u8; 32] {
    let mut hasher = Sha256::new();
    match names {
        Names::Wildcard => hasher.update(b"*"),
        Names::Named(set) => {
            for name in set {
                hasher.update((name.len() as u64).to_be_bytes());
                hasher.update(name.as_bytes());
            }
        }
    }
    hasher.finalize().into()
}

impl TypeState {
    pub fn new(
        kind: ResourceType,
        version: String,
        nonce: String,
        resources: impl IntoResourceSet,
        coverage: Coverage,
    ) -> TypeState {
        TypeState {
            kind,
            version,
            nonce,
            resources: resources.into_set(),
            coverage,
            errors: Arc::default(),
            uncacheable: Arc::default(),
            id: NEXT_STATE_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// This state, `uncacheable` naming its `do_not_cache` resources.
    pub fn with_uncacheable(self, uncacheable: Arc<BTreeSet<String>>) -> TypeState {
        TypeState {
            uncacheable,
            id: NEXT_STATE_ID.fetch_add(1, Ordering::Relaxed),
            ..self
        }
    }

    /// This state without its `do_not_cache` resources (for the history).
    pub fn without_uncacheable(&self) -> TypeState {
        let kept: super::ResourceMap = self
            .resources
            .iter()
            .filter(|(name, _)| !self.uncacheable.contains(*name))
            .map(|(name, r)| (name.clone(), Arc::clone(r)))
            .collect();
        self.with_resources(kept).with_uncacheable(Arc::default())
    }

    /// Whether the answer to `names` holds a `do_not_cache` resource.
    pub fn holds_uncacheable(&self, names: &Names) -> bool {
        !self.uncacheable.is_empty()
            && self
                .select(names)
                .any(|r| self.uncacheable.contains(&r.name))
    }

    /// This state, holding `errors` (a new state).
    pub fn with_errors(self, errors: Arc<ResourceErrors>) -> TypeState {
        TypeState {
            errors,
            id: NEXT_STATE_ID.fetch_add(1, Ordering::Relaxed),
            ..self
        }
    }

    /// This state at its version, nonce and coverage, holding `resources`
    /// instead (fewer, after a TTL ran out; rendered anew).
    pub fn with_resources(&self, resources: impl IntoResourceSet) -> TypeState {
        TypeState::new(
            self.kind,
            self.version.clone(),
            self.nonce.clone(),
            resources,
            self.coverage.clone(),
        )
        .with_errors(self.errors.clone())
        .with_uncacheable(self.uncacheable.clone())
    }

    /// What tells this state from every other (states are immutable).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Answers a request that presented `presented` for `names`: 304 when
    /// it carries the digest of what it would get, else the body.
    pub fn answer(
        &self,
        assembler: &Assembler,
        names: &Names,
        presented: &str,
        target: Option<&RestTarget>,
    ) -> Result<Answer, JsonError> {
        let digest = names_digest(names);
        self.answer_digested(assembler, names, &digest, presented, target)
    }

    /// [`answer`](Self::answer) with `digest`, the `names_digest` of
    /// `names` a parsed request made once.
    pub fn answer_digested(
        &self,
        assembler: &Assembler,
        names: &Names,
        digest: &[u8; 32],
        presented: &str,
        target: Option<&RestTarget>,
    ) -> Result<Answer, JsonError> {
        debug_assert_eq!(*digest, names_digest(names), "a stale names digest");
        let body = |json, version, cached| Answer::Body {
            json,
            version,
            cached,
        };
        let bodies = assembler.bodies();
        let key = Bodies::key(self.id, digest, target);
        // An answer holding a `do_not_cache` resource is worked out and
        // assembled for this request alone: nothing looked up in or kept by
        // the body memo (nor the rewrite memo, see `join`).
        let uncacheable = self.holds_uncacheable(names);
        let memoised = (!uncacheable)
            .then(|| bodies.get(key, self.id, digest, target))
            .flatten();
        if let Some(hit) = memoised {
            if same_selection(presented, &hit.version) {
                return Ok(Answer::NotModified {
                    version: hit.version.clone(),
                });
            }
            if let Some(resources) = bodies.shared.get(&hit.piece) {
                let json = JsonBody::new(hit.head.clone(), (*resources).clone(), hit.tail.clone());
                return Ok(body(json, hit.version.clone(), true));
            }
        }
        let selection = match uncacheable {
            true => self.work_out_selection(names, target).0,
            false => self.selection(names, digest, target),
        };
        let version = self.version_told(names, selection);
        if same_selection(presented, &version) {
            // Not memoised (another replica, or evicted): still a 304.
            return Ok(Answer::NotModified { version });
        }
        let (head, tail) = self.ends(&version, names);
        if uncacheable {
            let resources = self.join(assembler, names, target)?;
            return Ok(body(JsonBody::new(head, resources, tail), version, false));
        }
        let piece = (self.kind, selection);
        let resources = bodies.shared(piece, || self.join(assembler, names, target))?;
        bodies.answers.insert(
            key,
            Arc::new(Assembled {
                state: self.id,
                names: *digest,
                target: target.cloned(),
                version: version.clone(),
                head: head.clone(),
                tail: tail.clone(),
                piece,
            }),
        );
        Ok(body(
            JsonBody::new(head, (*resources).clone(), tail),
            version,
            false,
        ))
    }

    /// The types served opaque in what a client asking `names` is answered,
    /// sorted (no walk unless the state holds such a resource).
    pub fn opaque_types(&self, names: &Names) -> Vec<String> {
        if !self.resources.has_opaque() {
            return Vec::new();
        }
        let types: BTreeSet<&String> = self.select(names).flat_map(|r| r.opaque.iter()).collect();
        types.into_iter().cloned().collect()
    }

    /// The served version of what a client asking `names` with `target` is
    /// answered: what the config history and `/debug/diff` show.
    pub fn served_version(&self, names: &Names, target: Option<&RestTarget>) -> String {
        self.version_told(names, self.selection(names, &names_digest(names), target))
    }

    /// The served version of `selection` (what a client asking `names` is
    /// answered), with the `resource_errors` it is told.
    fn version_told(&self, names: &Names, selection: [u8; 32]) -> String {
        let mut digest = hex::encode(self.errors.digest(names.asked(), selection));
        digest.truncate(DIGEST_HEX);
        format!("{}{DIGEST_SEPARATOR}{digest}", self.version)
    }

    /// The SHA-256 of what a client asking `names` with `target` is
    /// answered (names, target, each resource's name and digest): the served
    /// version's digest, and the shared piece's key. Remembered per set of
    /// resources when it walks many: every identity's state after a SotW push
    /// holds the same set, and its wildcard CDS poll the same selection.
    fn selection(
        &self,
        names: &Names,
        names_digest: &[u8; 32],
        target: Option<&RestTarget>,
    ) -> [u8; 32] {
        self.resources
            .selection(self.kind, names_digest, target, || {
                self.work_out_selection(names, target)
            })
    }

    /// [`selection`](Self::selection) and how many resources it walked.
    fn work_out_selection(&self, names: &Names, target: Option<&RestTarget>) -> ([u8; 32], usize) {
        let mut hasher = Sha256::new();
        let mut put = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        match names {
            Names::Wildcard => put(b"*"),
            Names::Named(set) => {
                put(b"names");
                for name in set {
                    put(name.as_bytes());
                }
            }
        }
        match target {
            None => put(b"untouched"),
            Some(t) => {
                put(b"rest");
                put(t.cluster_name.as_bytes());
                put(&t.refresh_delay.as_nanos().to_be_bytes());
                put(&t.request_timeout.as_nanos().to_be_bytes());
            }
        }
        let mut walked = 0;
        for resource in self.select(names) {
            put(resource.name.as_bytes());
            put(&resource.digest);
            // The same bytes rendered in full once the descriptors came
            // are another answer: its version must differ.
            for type_url in resource.opaque.iter() {
                put(b"opaque");
                put(type_url.as_bytes());
            }
            walked += 1;
        }
        (hasher.finalize().into(), walked)
    }

    /// The resources a request for `names` gets, in name order: the named
    /// ones that exist and the members of every set named (an xdstp glob
    /// collection, a VHDS namespace, an alias; see [`membership`]).
    pub fn select<'a>(
        &'a self,
        names: &'a Names,
    ) -> Box<dyn Iterator<Item = &'a Arc<Resource>> + 'a> {
        match names {
            Names::Wildcard => Box::new(self.resources.values()),
            Names::Named(set) if !set.iter().any(|n| membership::names_a_set(self.kind, n)) => {
                Box::new(set.iter().filter_map(|n| self.resources.get(n)))
            }
            // A glob collection (or a VHDS namespace or alias) names every
            // resource in it (once, in name order, even when also named on
            // its own).
            Names::Named(set) => Box::new(
                self.resources
                    .values()
                    .filter(|r| membership::wanted(self.kind, &r.name, &r.aliases, set)),
            ),
        }
    }

    /// The pre-rendered resources a request for `names` gets, joined by
    /// commas (the middle of a `DiscoveryResponse` body).
    fn join(
        &self,
        assembler: &Assembler,
        names: &Names,
        target: Option<&RestTarget>,
    ) -> Result<Bytes, JsonError> {
        let mut pieces = Vec::new();
        for resource in self.select(names) {
            pieces.push(match target {
                // Kept in no memo: the upstream said not to cache it.
                Some(t) if self.uncacheable.contains(&resource.name) => {
                    assembler.rewritten_unmemoised(resource, t)?
                }
                Some(t) => assembler.rewritten(resource, t)?,
                None => resource.json.clone(),
            });
        }
        Ok(pieces.join(&b","[..]).into())
    }

    /// The opening and closing of a body at `version` around its resources.
    /// Its `nonce` is [`NONCE_PREFIX`] and the selection digest, not the
    /// upstream's nonce: one version (one strong ETag) is one body, however
    /// often the upstream resent it. The prefix: hex digits alone may read as
    /// a number (`373350e23019` is a float to a YAML reader).
    fn ends(&self, version: &str, names: &Names) -> (Bytes, Bytes) {
        // Serialising a &str cannot fail.
        let quoted = serde_json::to_string(version).unwrap_or_else(|_| "\"\"".into());
        let head = [
            &b"{\"versionInfo\":"[..],
            quoted.as_bytes(),
            b",\"resources\":[",
        ]
        .concat();
        let nonce = selection_digest(version).unwrap_or_default();
        let mut tail = BytesMut::with_capacity(nonce.len() + 128);
        tail.put_slice(b"],\"typeUrl\":\"");
        tail.put_slice(self.kind.type_url().as_bytes());
        tail.put_slice(b"\"");
        if !nonce.is_empty() {
            // Hex digits: nothing to escape.
            tail.put_slice(b",\"nonce\":\"");
            tail.put_slice(NONCE_PREFIX.as_bytes());
            tail.put_slice(nonce.as_bytes());
            tail.put_u8(b'"');
        }
        if !self.errors.is_empty() {
            tail.put_slice(self.errors.json_member(names.asked()).as_bytes());
        }
        tail.put_u8(b'}');
        (head.into(), tail.freeze())
    }
}

/// What a REST answer's nonce starts with, before its selection digest.
pub(crate) const NONCE_PREFIX: &str = "d";

#[cfg(test)]
mod tests;
