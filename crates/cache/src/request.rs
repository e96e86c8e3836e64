//! REST discovery requests as the gateway reads them, and the memo of
//! parsed request bodies.
//!
//! A polling Envoy sends a byte-identical body (~77 KB, mostly its node's
//! extension list) on every poll until its version changes, and parsing it is
//! the biggest per-request cost. Bodies are looked up by a fast hash of
//! samples of their bytes ([`memo_key`]) and confirmed byte for byte; a body
//! whose key another holds is kept under a seeded hash of all its bytes
//! ([`find`]), so the two do not evict each other. The memo is bounded by what
//! its entries hold ([`ParsedRequest::held_bytes`]: body *and* parse). A body
//! is kept around its node, interned ([`super::node_json`]): one Envoy's name
//! sets share one copy of it.
//!
//! After a version change every poll is a new body, differing from the
//! client's previous one only in its `version_info` (and nonce): a second memo
//! keys parses by their [`Frame`], the body without those values. A POSTed
//! body is looked up as the chunks it was read in ([`BodyChunks`]), never
//! joined on a hit.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use moka::sync::Cache;

use super::client_key::{names_hash, ClientKey, ClientNode, SubscriptionKey};
use super::identity::IdentityKey;
use super::node_json::{NodeJson, NodeJsons};
use super::request_chunks::{feed_sampled, sampled_len, BodyChunks};
use super::request_frame::Frame;
use super::state::{names_digest, Names};
use crate::config::SessionKey;
use crate::xds::dynamic_parameters::Parameters;
use crate::xds::{DiscoveryRequestView, ErrorDetailView, LocatorView, RequestError};

/// A body not seen again for this long is dropped. Every poll after a version
/// change is a new body, so without a time bound the memo would fill to its
/// bound with bodies no client sends any more; a client polls well within it.
const MEMO_IDLE: std::time::Duration = std::time::Duration::from_secs(60);
/// Bytes at each end of a body that [`memo_key`] hashes in full. An Envoy's
/// polls differ within a few hundred bytes of an end (its version and node id
/// first, its names, type and nonce last).
const KEY_EDGE: usize = 1024;
/// Between the edges, `KEY_SAMPLE` bytes are hashed every `KEY_STRIDE`.
const KEY_STRIDE: usize = 2048;
const KEY_SAMPLE: usize = 32;
/// [`KEY_EDGE`], [`KEY_STRIDE`] and [`KEY_SAMPLE`], as [`feed_sampled`] takes them.
const KEY_SHAPE: [usize; 3] = [KEY_EDGE, KEY_STRIDE, KEY_SAMPLE];

/// The memo key of a body: its length, its first and last [`KEY_EDGE`] bytes,
/// and samples between them (a hit is confirmed on every byte anyway).
fn memo_key(body: &[u8]) -> u64 {
    sampled_key(&[body])
}

/// Whether `a` and `b` share `memo_key` (for `bench_support`).
pub fn share_a_key(a: &[u8], b: &[u8]) -> bool {
    memo_key(a) == memo_key(b)
}

/// [`memo_key`] of bytes in pieces ([`feed_sampled`] of each).
fn sampled_key(pieces: &[&[u8]]) -> u64 {
    let room = pieces.iter().map(|p| sampled_len(p.len(), KEY_SHAPE)).sum();
    let mut taken = Vec::with_capacity(room);
    for piece in pieces {
        feed_sampled(&mut taken, &[piece], piece.len(), KEY_SHAPE);
    }
    xxhash_rust::xxh3::xxh3_64(&taken)
}

/// What a memo holds that `same` looks for, under its `sampled` key or, when
/// another entry holds that key, under the key of all its bytes (`whole`,
/// asked only then); and the key an entry for it goes under.
fn find<V>(
    memo: &Cache<u64, V>,
    sampled: u64,
    whole: impl FnOnce() -> u64,
    same: impl Fn(&V) -> bool,
) -> (Option<V>, u64)
where
    V: Clone + Send + Sync + 'static,
{
    let Some(held) = memo.get(&sampled) else {
        return (None, sampled);
    };
    if same(&held) {
        return (Some(held), sampled);
    }
    let whole = whole();
    (memo.get(&whole).filter(|held| same(held)), whole)
}

/// A request body as the memo keeps it: around its node, interned.
#[derive(Debug, Clone)]
struct Body {
    before: Bytes,
    node: Option<Arc<NodeJson>>,
    after: Bytes,
}

impl Body {
    fn whole(body: Bytes) -> Body {
        Body {
            before: body,
            node: None,
            after: Bytes::new(),
        }
    }

    fn new(body: Bytes, node: Option<(usize, usize)>, nodes: &NodeJsons) -> Body {
        let Some((at, len)) = node else {
            return Body::whole(body);
        };
        Body {
            // Copies: slices would keep the whole body's buffer alive.
            before: Bytes::copy_from_slice(&body[..at]),
            node: Some(nodes.intern(body.slice(at..at + len))),
            after: Bytes::copy_from_slice(&body[at + len..]),
        }
    }

    fn node(&self) -> &[u8] {
        self.node.as_ref().map_or(&[], |n| n.bytes())
    }

    fn len(&self) -> usize {
        self.before.len() + self.node().len() + self.after.len()
    }

    /// Whether `body` has these bytes.
    fn is(&self, body: &[u8]) -> bool {
        let (before, node) = (self.before.len(), self.node().len());
        body.len() == self.len()
            && body[..before] == self.before[..]
            && body[before..before + node] == *self.node()
            && body[before + node..] == self.after[..]
    }

    /// Whether the bytes `chunks` hold are these.
    fn is_chunks(&self, chunks: &BodyChunks) -> bool {
        chunks.equals(&[&self.before[..], self.node(), &self.after[..]])
    }

    /// The parts of its pieces that make up `range` of the body, in order.
    fn slice(&self, range: std::ops::Range<usize>) -> Option<Vec<&[u8]>> {
        if range.end > self.len() || range.start > range.end {
            return None;
        }
        let mut parts = Vec::with_capacity(3);
        let mut at = 0;
        for piece in [&self.before[..], self.node(), &self.after[..]] {
            let (start, end) = (range.start.max(at), range.end.min(at + piece.len()));
            if start < end {
                parts.push(&piece[start - at..end - at]);
            }
            at += piece.len();
        }
        Some(parts)
    }

    /// `body`, sharing `node`, which lies at `at` in it.
    fn around(body: &Bytes, node: Option<(&Arc<NodeJson>, usize)>) -> Option<Body> {
        let Some((node, at)) = node else {
            return Some(Body::whole(body.clone()));
        };
        let end = at.checked_add(node.bytes().len())?;
        let held = Body {
            before: Bytes::copy_from_slice(body.get(..at)?),
            after: Bytes::copy_from_slice(body.get(end..)?),
            node: Some(node.clone()),
        };
        // The caller's frames matched byte for byte around the values, so
        // the node is where the shift put it: checked again in test builds
        // only (a second comparison of the whole body on the hot path).
        debug_assert!(held.is(body), "the node is not where the frame puts it");
        Some(held)
    }

    /// Bytes held of its own (an interned node is not).
    fn own_bytes(&self) -> usize {
        let node = self.node.as_ref().filter(|n| !n.interned());
        self.before.len() + node.map_or(0, |n| n.bytes().len()) + self.after.len()
    }
}

/// What the gateway reads of one `DiscoveryRequest` body. Immutable.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    body: Body,
    version_info: String,
    type_url: String,
    names: Names,
    node_id: String,
    node_cluster: String,
    user_agent_name: String,
    node_bytes: usize,
    identity: IdentityKey,
    /// Who it is as a client ([`ClientKey`] without the address).
    client_node: ClientNode,
    /// Its names, hashed once (a [`SubscriptionKey`]'s part).
    names_hash: u64,
    /// Its names' SHA-256 (`state::names_digest`), made once.
    names_digest: [u8; 32],
    /// Made from a GET's query: never an Envoy, whatever its node says,
    /// and never the same subscriber as a POSTing client of its node.
    via_get: bool,
    /// The client's NACK of what it was served, if it sent one.
    error_detail: Option<Box<ErrorDetailView>>,
    /// The dynamic parameters its `resource_locators` carry (xDS TP2): they
    /// choose its variants, and are part of its identity.
    parameters: Arc<Parameters>,
    /// Whether its names go with more than one set of parameters, which the
    /// gateway does not serve.
    mixed_parameters: bool,
}

/// The one set of dynamic parameters a request's names go with (a plain
/// name goes with none), and whether there is more than one.
fn locator_parameters(names: &[String], locators: &[LocatorView]) -> (Parameters, bool) {
    let mut sets = locators.iter().map(|l| &l.dynamic_parameters);
    let Some(first) = sets.next() else {
        return (Parameters::new(), false);
    };
    let mixed = sets.any(|other| other != first) || (!names.is_empty() && !first.is_empty());
    (first.clone(), mixed)
}

impl ParsedRequest {
    fn parse(
        body: Bytes,
        session_key: SessionKey,
        nodes: &NodeJsons,
        via_get: bool,
    ) -> Result<ParsedRequest, RequestError> {
        let view = DiscoveryRequestView::parse(&body)?;
        let node_span = view.node.as_ref().map(|n| (n.json_at, n.json_bytes));
        let (parameters, mixed_parameters) =
            locator_parameters(&view.resource_names, &view.resource_locators);
        let identity =
            IdentityKey::of(view.node.as_ref(), session_key).with_parameters(&parameters);
        let (node_id, node_cluster, user_agent_name, node_bytes) = view
            .node
            .map(|n| (n.id, n.cluster, n.user_agent_name, n.json_bytes))
            .unwrap_or_default();
        // A locator is its name; its parameters are the request's.
        let mut names = view.resource_names;
        names.extend(view.resource_locators.into_iter().map(|l| l.name));
        let names = Names::from_request(names);
        let client_node = ClientNode::of(
            &identity,
            &node_id,
            &node_cluster,
            &user_agent_name,
            via_get,
        );
        Ok(ParsedRequest {
            body: Body::new(body, node_span, nodes),
            version_info: view.version_info,
            type_url: view.type_url,
            names_hash: names_hash(&names),
            names_digest: names_digest(&names),
            names,
            node_id,
            node_cluster,
            user_agent_name,
            node_bytes,
            identity,
            client_node,
            via_get,
            error_detail: view.error_detail.map(Box::new),
            parameters: Arc::new(parameters),
            mixed_parameters,
        })
    }

    /// The parse of `body`, whose `frame` is this parse's body's: this request
    /// presenting `body`'s version (nothing else can differ); `None` if the
    /// two do not fit together after all.
    fn reframed(&self, body: &Bytes, frame: &Frame) -> Option<ParsedRequest> {
        let version = frame.version(body);
        let node = match &self.body.node {
            Some(node) => {
                // The version is the first member, before the node: the
                // node moves by the change in the version's length (a
                // plain string's bytes are its text).
                let at = self.body.before.len();
                let at = match version {
                    Some(v) => at.checked_sub(self.version_info.len())? + v.len(),
                    None => at,
                };
                Some((node, at))
            }
            None => None,
        };
        Some(ParsedRequest {
            body: Body::around(body, node)?,
            version_info: version.map_or_else(|| self.version_info.clone(), str::to_owned),
            ..self.clone()
        })
    }

    /// Whether an Envoy may have sent it: its node says `envoy` and it was
    /// POSTed. Only an Envoy's empty version says "I rejected what you
    /// sent" (curl, scripts and every GET present none by design).
    pub fn may_be_envoy(&self) -> bool {
        !self.via_get && self.user_agent_name == "envoy"
    }

    /// The same request presenting `version` instead (a watch, after each
    /// body it was sent, or resuming from `Last-Event-ID`).
    pub fn presenting(&self, version: &str) -> ParsedRequest {
        ParsedRequest {
            version_info: version.to_owned(),
            error_detail: None,
            ..self.clone()
        }
    }

    /// The same request asking only for `names` (a part of a federated
    /// request, routed to the upstream that owns those names).
    pub fn narrowed(&self, names: Names) -> ParsedRequest {
        ParsedRequest {
            names_hash: names_hash(&names),
            names_digest: names_digest(&names),
            names,
            ..self.clone()
        }
    }

    /// The request's `node` JSON as received, if it has one.
    pub fn node_json(&self) -> Option<&[u8]> {
        self.body.node.as_ref().map(|n| &n.bytes()[..])
    }

    /// [`node_json`](Self::node_json), shared (for decoding on another thread).
    pub fn node_json_bytes(&self) -> Option<Bytes> {
        self.body.node.as_ref().map(|n| n.bytes().clone())
    }

    /// The client's NACK, if the request is one: it rejected what it was
    /// served and still holds [`version_info`](Self::version_info).
    pub fn error_detail(&self) -> Option<&ErrorDetailView> {
        self.error_detail.as_deref()
    }

    /// The version the client presents (empty on its first poll).
    pub fn version_info(&self) -> &str {
        &self.version_info
    }

    /// The body's `type_url` (empty when it does not say).
    pub fn type_url(&self) -> &str {
        &self.type_url
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The SHA-256 of [`names`](Self::names), made once per parse.
    pub fn names_digest(&self) -> &[u8; 32] {
        &self.names_digest
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn node_cluster(&self) -> &str {
        &self.node_cluster
    }

    /// The dynamic parameters its locators carry (empty: none).
    pub fn parameters(&self) -> &Arc<Parameters> {
        &self.parameters
    }

    /// Whether its names go with more than one set of dynamic parameters.
    pub fn mixes_parameters(&self) -> bool {
        self.mixed_parameters
    }

    /// Bytes of the request's `node` JSON (0 without a node).
    pub fn node_bytes(&self) -> usize {
        self.node_bytes
    }

    /// `node.user_agent_name` (`envoy` for Envoy).
    pub fn user_agent_name(&self) -> &str {
        &self.user_agent_name
    }

    /// The client that sent it from `remote` (see [`ClientKey`]).
    pub fn client(&self, remote: Option<IpAddr>) -> ClientKey {
        ClientKey::new(self.client_node, remote)
    }

    /// That client's subscription to these names: what rejection
    /// bookkeeping counts polls under.
    pub fn subscription(&self, remote: Option<IpAddr>) -> SubscriptionKey {
        self.client(remote).subscribing(self.names_hash)
    }

    pub fn identity(&self) -> &IdentityKey {
        &self.identity
    }

    /// About what this parse holds in memory (what the memo weighs it by).
    pub fn held_bytes(&self) -> usize {
        std::mem::size_of::<ParsedRequest>()
            + self.body.own_bytes()
            + self.names.held_bytes()
            + self.version_info.capacity()
            + self.type_url.capacity()
            + self.node_id.capacity()
            + self.node_cluster.capacity()
            + self.user_agent_name.capacity()
            + self.error_detail.as_ref().map_or(0, |e| {
                std::mem::size_of::<ErrorDetailView>() + e.message.capacity()
            })
    }
}

/// What a memo holds now: entries and their weight.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoSize {
    pub entries: u64,
    pub bytes: u64,
}

/// Bodies seen recently and what they parsed to.
#[derive(Debug, Clone)]
pub struct ParsedRequests {
    memo: Cache<u64, Arc<ParsedRequest>>,
    /// Parses by the frame of their body (see [`Frame`]).
    frames: Cache<u64, Framed>,
    /// The seed of the keys of all of a body's bytes ([`find`]): random,
    /// so that no client can choose bodies that share one.
    whole_seed: u64,
    session_key: SessionKey,
    nodes: Arc<NodeJsons>,
    /// Bodies parsed in full (not found, not reframed), for tests.
    #[cfg(test)]
    full_parses: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug, Clone)]
struct Framed {
    frame: Arc<Frame>,
    parsed: Arc<ParsedRequest>,
}

impl ParsedRequests {
    pub fn new(session_key: SessionKey) -> ParsedRequests {
        let shares = crate::config::MemoryShares::default();
        ParsedRequests::with_capacities(session_key, shares.parsed, shares.nodes)
    }

    /// A memo holding at most `bytes` of parses and `nodes` bytes of the
    /// nodes it interns.
    pub fn with_capacities(session_key: SessionKey, bytes: u64, nodes: u64) -> ParsedRequests {
        // The frames' entries share their parses with the memo's: weighed alike.
        fn weighed<V: Clone + Send + Sync + 'static>(
            bytes: u64,
            parse: fn(&V) -> &ParsedRequest,
        ) -> Cache<u64, V> {
            Cache::builder()
                .max_capacity(bytes)
                .time_to_idle(MEMO_IDLE)
                .weigher(move |_, v: &V| u32::try_from(parse(v).held_bytes()).unwrap_or(u32::MAX))
                .build()
        }
        ParsedRequests {
            memo: weighed(bytes, |parsed: &Arc<ParsedRequest>| parsed),
            frames: weighed(bytes, |framed: &Framed| &framed.parsed),
            whole_seed: rand::random(),
            session_key,
            nodes: Arc::new(NodeJsons::with_cap(
                usize::try_from(nodes).unwrap_or(usize::MAX),
            )),
            #[cfg(test)]
            full_parses: Arc::default(),
        }
    }

    /// The seeded xxh3 of `pieces`, one after the other ([`find`]'s
    /// `whole`; a GET's is told apart as its sampled key is).
    fn whole_key<'a>(&self, pieces: impl IntoIterator<Item = &'a [u8]>) -> u64 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::with_seed(self.whole_seed);
        for piece in pieces {
            hasher.update(piece);
        }
        hasher.digest()
    }

    /// What the memo holds now (pending evictions done first).
    #[cfg(any(test, feature = "test-support"))]
    pub fn held(&self) -> MemoSize {
        self.memo.run_pending_tasks();
        MemoSize {
            entries: self.memo.entry_count(),
            bytes: self.memo.weighted_size(),
        }
    }

    /// The parse of a POSTed `body`, from the memo when the same bytes
    /// were seen. Bad bodies are not remembered.
    pub fn parse(&self, body: Bytes) -> Result<Arc<ParsedRequest>, RequestError> {
        self.parse_as(body, false)
    }

    /// [`parse`](Self::parse) of a body read in `chunks`: a memo hit is found
    /// and confirmed on the chunks; anything else joins them and parses.
    pub fn parse_chunks(&self, chunks: BodyChunks) -> Result<Arc<ParsedRequest>, RequestError> {
        let (hit, key) = find(
            &self.memo,
            chunks.sampled_key(KEY_SHAPE),
            || self.whole_key(chunks.pieces()),
            |hit| !hit.via_get && hit.body.is_chunks(&chunks),
        );
        if let Some(hit) = hit {
            return Ok(hit);
        }
        // The keys of the joined bytes are the chunks' (one definition of
        // each), and the memo was just asked: neither is done again.
        self.parse_missed(chunks.into_bytes(), key, false)
    }

    /// [`parse`](Self::parse) of the `body` a GET's query stands for, as a
    /// GET (see `ParsedRequest::via_get`).
    pub fn parse_get(&self, body: Bytes) -> Result<Arc<ParsedRequest>, RequestError> {
        self.parse_as(body, true)
    }

    fn parse_as(&self, body: Bytes, via_get: bool) -> Result<Arc<ParsedRequest>, RequestError> {
        // A GET's parse of the same bytes is another entry.
        let flag = u64::from(via_get);
        let (hit, key) = find(
            &self.memo,
            memo_key(&body) ^ flag,
            || self.whole_key([&body[..]]) ^ flag,
            |hit| hit.via_get == via_get && hit.body.is(&body),
        );
        if let Some(hit) = hit {
            return Ok(hit);
        }
        self.parse_missed(body, key, via_get)
    }

    /// [`parse_as`](Self::parse_as) on a miss: through the memo of frames, or
    /// parsed now; remembered under `key` either way.
    fn parse_missed(
        &self,
        body: Bytes,
        key: u64,
        via_get: bool,
    ) -> Result<Arc<ParsedRequest>, RequestError> {
        let framed = Frame::of(&body).map(|frame| {
            let flag = u64::from(via_get);
            let (known, key) = find(
                &self.frames,
                frame.key(&body, sampled_key) ^ flag,
                || frame.key(&body, |pieces| self.whole_key(pieces.iter().copied())) ^ flag,
                |known| {
                    known.parsed.via_get == via_get
                        && frame.same_as(&body, &known.frame, |r| known.parsed.body.slice(r))
                },
            );
            (Arc::new(frame), known, key)
        });
        let reframed = framed
            .as_ref()
            .and_then(|(frame, known, _)| known.as_ref()?.parsed.reframed(&body, frame));
        let parsed = match reframed {
            Some(parsed) => Arc::new(parsed),
            None => {
                #[cfg(test)]
                self.full_parses
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let parsed = Arc::new(ParsedRequest::parse(
                    body,
                    self.session_key,
                    &self.nodes,
                    via_get,
                )?);
                if let Some((frame, _, key)) = framed {
                    let entry = Framed {
                        frame,
                        parsed: parsed.clone(),
                    };
                    self.frames.insert(key, entry);
                }
                parsed
            }
        };
        self.memo.insert(key, parsed.clone());
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ParsedRequest {
        /// The whole body (a copy).
        pub fn body(&self) -> Vec<u8> {
            [
                &self.body.before[..],
                self.body.node(),
                &self.body.after[..],
            ]
            .concat()
        }
    }

    impl ParsedRequests {
        /// A memo holding at most `bytes` (weighed by [`ParsedRequest::held_bytes`]).
        pub fn with_capacity(session_key: SessionKey, bytes: u64) -> ParsedRequests {
            let nodes = crate::config::MemoryShares::default().nodes;
            ParsedRequests::with_capacities(session_key, bytes, nodes)
        }
    }

    #[test]
    fn same_bytes_share_a_parse_and_different_bytes_do_not() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let a = Bytes::from_static(br#"{"version_info":"1","node":{"id":"n"}}"#);
        let b = Bytes::from_static(br#"{"version_info":"2","node":{"id":"n"}}"#);
        let first = memo.parse(a.clone()).unwrap();
        assert!(Arc::ptr_eq(&first, &memo.parse(a).unwrap()));
        let other = memo.parse(b).unwrap();
        assert_eq!(other.version_info(), "2");
        assert_eq!(first.identity(), other.identity());
        assert!(memo.parse(Bytes::from_static(b"[]")).is_err());
    }

    /// A large body as Envoy writes one: version first, a big node, names last.
    fn envoy_like(version: &str, padding: &str, name: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"version_info":"{version}","node":{{"id":"n","metadata":{{"pad":"{padding}"}}}},"resource_names":["{name}"]}}"#
        ))
    }

    #[test]
    fn large_bodies_differing_anywhere_get_their_own_parse() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let padding = "x".repeat(40_000);
        let first = memo.parse(envoy_like("1", &padding, "a")).unwrap();
        // The same bytes: the same parse.
        assert!(Arc::ptr_eq(
            &first,
            &memo.parse(envoy_like("1", &padding, "a")).unwrap()
        ));
        // Differing at the edges: another key, another parse.
        assert_eq!(
            memo.parse(envoy_like("2", &padding, "a"))
                .unwrap()
                .version_info(),
            "2"
        );
        let named_b = memo.parse(envoy_like("1", &padding, "b")).unwrap();
        assert_eq!(named_b.names(), &Names::Named(["b".to_owned()].into()));
        // Differing only between the samples: the same key, told apart by
        // the comparison.
        let mut middle = padding.clone().into_bytes();
        middle[20_000 + KEY_SAMPLE + 1] = b'y';
        let middle = String::from_utf8(middle).unwrap();
        let a = envoy_like("1", &padding, "a");
        let b = envoy_like("1", &middle, "a");
        assert_eq!(
            memo_key(&a),
            memo_key(&b),
            "the test must hit between samples"
        );
        let other = memo.parse(b.clone()).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.body(), &b[..]);
        assert!(
            Arc::ptr_eq(
                first.body.node.as_ref().unwrap(),
                named_b.body.node.as_ref().unwrap()
            ),
            "bodies around one node share it"
        );
    }

    /// Bodies naming thousands of resources parse to
    /// several times their size; the memo counts the parse, so what it holds
    /// stays within its bound (it held about four times the bound when it
    /// weighed bodies alone).
    #[test]
    fn the_memo_weighs_a_parse_by_what_it_holds() {
        let bound = 1 << 20;
        let memo = ParsedRequests::with_capacity(SessionKey::Node, bound);
        let mut held = 0;
        for i in 0..60 {
            let names: Vec<String> = (0..1000).map(|n| format!("c{}", i * 1000 + n)).collect();
            let body = serde_json::json!({"node": {"id": "n"}, "resource_names": names});
            let parsed = memo.parse(body.to_string().into()).unwrap();
            assert!(parsed.held_bytes() > 2 * parsed.body().len());
            held += parsed.held_bytes() as u64;
        }
        assert!(held > 3 * bound, "the test must overflow the bound");
        let now = memo.held();
        assert!(now.bytes <= bound, "{now:?}");
        assert!(now.entries < 60, "{now:?}");
        let kept = now.bytes / now.entries;
        assert!(kept > 40_000, "an entry weighs its parse: {now:?}");
    }

    /// The bodies of one Envoy's name sets share its node; each
    /// entry weighs the bytes around it.
    #[test]
    fn name_sets_around_one_node_hold_it_once() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let padding = "x".repeat(40_000);
        let parsed: Vec<_> = (0..100)
            .map(|i| {
                memo.parse(envoy_like("1", &padding, &format!("c{i}")))
                    .unwrap()
            })
            .collect();
        assert!(parsed.iter().all(|p| Arc::ptr_eq(
            p.body.node.as_ref().unwrap(),
            parsed[0].body.node.as_ref().unwrap()
        )));
        let now = memo.held();
        assert_eq!(now.entries, 100);
        assert!(now.bytes < 100 * 1024, "{now:?}");
        assert_eq!(
            memo.nodes.live_bytes(),
            parsed[0].node_json().unwrap().len()
        );
        assert!(parsed[7].node_json().unwrap().ends_with(b"}"));
    }
}

/// The memo of frames, against a full parse.
#[cfg(test)]
mod frame_tests {
    use super::*;
    use rand::{Rng, RngCore};

    /// Every field a parse is read by, and the body it holds.
    fn same(a: &ParsedRequest, b: &ParsedRequest) -> bool {
        a.body().as_slice() == b.body().as_slice()
            && a.version_info == b.version_info
            && a.type_url == b.type_url
            && a.names == b.names
            && a.node_id == b.node_id
            && a.node_cluster == b.node_cluster
            && a.user_agent_name == b.user_agent_name
            && a.node_bytes == b.node_bytes
            && a.identity == b.identity
            && a.client_node == b.client_node
            && a.names_hash == b.names_hash
            && a.names_digest == b.names_digest
            && a.via_get == b.via_get
            && a.node_json() == b.node_json()
    }

    /// How many bodies `memo` has parsed in full.
    fn full_parses(memo: &ParsedRequests) -> u64 {
        memo.full_parses.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Two Envoy-like bodies of one length that differ only between the
    /// samples (one node id, metadata differing in the middle): they share
    /// a sampled key and a sampled frame key, at `version`.
    fn sharing_a_key(version: &str) -> (Bytes, Bytes) {
        let pad = "x".repeat(40_000);
        let mut other = pad.clone().into_bytes();
        other[20_000 + KEY_SAMPLE + 1] = b'y';
        let other = String::from_utf8(other).unwrap();
        let body = |pad: &str| {
            Bytes::from(format!(
                r#"{{"version_info":"{version}","node":{{"id":"n","metadata":{{"pad":"{pad}"}}}},"resource_names":["a"],"type_url":"t","response_nonce":"n{version}"}}"#
            ))
        };
        let (a, b) = (body(&pad), body(&other));
        assert_eq!(
            memo_key(&a),
            memo_key(&b),
            "the test must hit between samples"
        );
        let frame_key = |body: &Bytes| Frame::of(body).unwrap().key(body, sampled_key);
        assert_eq!(frame_key(&a), frame_key(&b));
        (a, b)
    }

    /// Two clients whose bodies share a key each keep their parse: they
    /// used to evict each other's on every poll, a full parse a poll.
    #[test]
    fn bodies_sharing_a_key_each_keep_their_parse() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let (a, b) = sharing_a_key("1");
        let first_a = memo.parse(a.clone()).unwrap();
        let first_b = memo.parse(b.clone()).unwrap();
        assert_eq!(full_parses(&memo), 2);
        for _ in 0..3 {
            assert!(Arc::ptr_eq(&first_a, &memo.parse(a.clone()).unwrap()));
            // In chunks, found under the key its joined bytes were kept at.
            let mut chunks = BodyChunks::default();
            for range in [0..7, 7..30_000, 30_000..b.len()] {
                chunks.push(b.slice(range));
            }
            assert!(Arc::ptr_eq(&first_b, &memo.parse_chunks(chunks).unwrap()));
        }
        assert_eq!(full_parses(&memo), 2, "a poll of either was parsed again");
        assert_eq!(first_a.body(), &a[..]);
        assert_eq!(first_b.body(), &b[..]);
        // A GET's parse of the same bytes is still its own entry.
        let got = memo.parse_get(b.clone()).unwrap();
        assert!(got.via_get && !Arc::ptr_eq(&got, &first_b));
        assert!(Arc::ptr_eq(&got, &memo.parse_get(b).unwrap()));
    }

    /// And after a change, each is reframed from its own frame: no parse.
    #[test]
    fn bodies_sharing_a_frame_key_each_keep_their_frame() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let (a, b) = sharing_a_key("1");
        memo.parse(a).unwrap();
        memo.parse(b).unwrap();
        let (a, b) = sharing_a_key("2");
        let (new_a, new_b) = (
            memo.parse(a.clone()).unwrap(),
            memo.parse(b.clone()).unwrap(),
        );
        assert_eq!(
            full_parses(&memo),
            2,
            "a body after the change was parsed again"
        );
        for (parsed, body) in [(new_a, a), (new_b, b)] {
            assert_eq!(parsed.body(), &body[..]);
            let fresh =
                ParsedRequest::parse(body, SessionKey::Node, &NodeJsons::default(), false).unwrap();
            assert!(same(&parsed, &fresh));
        }
    }

    /// A poll after a change: the same frame, another version: no parse,
    /// the node shared, and the answer a parse would give.
    #[test]
    fn a_body_differing_only_in_its_version_and_nonce_is_not_parsed_again() {
        let memo = ParsedRequests::new(SessionKey::Node);
        let pad = "x".repeat(40_000);
        let body = |version: &str, nonce: &str| {
            Bytes::from(format!(
                r#"{{"version_info":"{version}","node":{{"id":"n","user_agent_name":"envoy","metadata":{{"pad":"{pad}"}}}},"resource_names":["a"],"type_url":"t","response_nonce":"{nonce}"}}"#
            ))
        };
        let first = memo.parse(body("1", "a")).unwrap();
        let second = memo.parse(body("v-22", "bb")).unwrap();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.version_info(), "v-22");
        assert!(Arc::ptr_eq(
            first.body.node.as_ref().unwrap(),
            second.body.node.as_ref().unwrap()
        ));
        let fresh = ParsedRequest::parse(
            body("v-22", "bb"),
            SessionKey::Node,
            &NodeJsons::default(),
            false,
        )
        .unwrap();
        assert!(same(&second, &fresh));
        // And it is remembered whole: the same bytes again are a hit.
        assert!(Arc::ptr_eq(
            &second,
            &memo.parse(body("v-22", "bb")).unwrap()
        ));
    }

    /// Property: whatever a body is, the memo answers it as a fresh parse
    /// would (the same error, or the same request), whichever frames were
    /// parsed before. Bodies are Envoy's, with other versions and nonces
    /// (plain, escaped, quoted, control characters, not UTF-8), and with a
    /// byte changed, added or removed anywhere. A fresh seed each run,
    /// printed; `XDS_FRAME_SEED` replays one.
    #[test]
    fn the_frame_memo_answers_as_a_fresh_parse_would() {
        let (seed, mut rng) = xds_gateway_base::testing::seeded_rng("XDS_FRAME_SEED", "frame memo");
        let corpus = xds_gateway_base::testing::envoy_requests();
        let memo = ParsedRequests::new(SessionKey::Node);
        let values: &[&[u8]] = &[
            b"",
            b"2",
            b"v~abc",
            b"\xc3\xa9t\xc3\xa9",
            b"a\\\"b",
            b"\\u0031",
            b"a\tb",
            b"\xff",
            b"\"",
            b"\\",
            b"x\"}",
            b"1\",\"version_info\":\"2",
        ];
        let mut reframed = 0;
        for case in 0..1500 {
            let base = &corpus[rng.random_range(0..corpus.len())];
            let text = String::from_utf8_lossy(base).into_owned();
            let body_of = |version: &[u8], nonce: Option<&[u8]>| -> Vec<u8> {
                let rest = text
                    .strip_prefix(r#"{"version_info":"1""#)
                    .map(str::to_owned)
                    .unwrap_or_else(|| text[1..].to_owned());
                let mut out = b"{\"version_info\":\"".to_vec();
                out.extend_from_slice(version);
                out.push(b'"');
                if !rest.starts_with(',') && !rest.starts_with('}') {
                    out.push(b',');
                }
                out.extend_from_slice(rest.as_bytes());
                if let Some(nonce) = nonce {
                    out.pop();
                    out.extend_from_slice(b",\"response_nonce\":\"");
                    out.extend_from_slice(nonce);
                    out.extend_from_slice(b"\"}");
                }
                out
            };
            let pick = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
                if rng.random_bool(0.5) {
                    values[rng.random_range(0..values.len())].to_vec()
                } else {
                    let mut v = vec![0u8; rng.random_range(0..12)];
                    rng.fill_bytes(&mut v);
                    v.iter()
                        .map(|b| {
                            if rng.random_bool(0.8) {
                                b'a' + b % 26
                            } else {
                                *b
                            }
                        })
                        .collect()
                }
            };
            let (version, nonce) = (pick(&mut rng), rng.random_bool(0.5).then(|| pick(&mut rng)));
            let mut body = body_of(&version, nonce.as_deref());
            if rng.random_bool(0.3) && !body.is_empty() {
                let at = rng.random_range(0..body.len());
                match rng.random_range(0..3) {
                    0 => body[at] = rng.random(),
                    1 => body.insert(at, b"\"\\{}[],:x 0"[rng.random_range(0..11)]),
                    _ => {
                        body.remove(at);
                    }
                }
            }
            let via_get = rng.random_bool(0.1);
            let body = Bytes::from(body);
            let fresh = ParsedRequest::parse(
                body.clone(),
                SessionKey::Node,
                &NodeJsons::default(),
                via_get,
            );
            let frames_before = memo.frames.entry_count();
            let memoised = memo.parse_as(body.clone(), via_get);
            match (&fresh, &memoised) {
                (Ok(f), Ok(m)) => {
                    assert!(
                        same(f, m),
                        "seed {seed} case {case}: the memo's parse presents {:?}, a fresh one {:?}",
                        m.version_info(),
                        f.version_info()
                    );
                    if memo.frames.entry_count() == frames_before {
                        reframed += 1;
                    }
                }
                (Err(f), Err(m)) => {
                    assert_eq!(f.to_string(), m.to_string(), "seed {seed} case {case}")
                }
                _ => panic!(
                    "seed {seed} case {case}: fresh {:?}, memo {:?}, body {}",
                    fresh.as_ref().map(|p| p.version_info().to_owned()),
                    memoised.as_ref().map(|p| p.version_info().to_owned()),
                    String::from_utf8_lossy(&body[..body.len().min(120)])
                ),
            }
        }
        println!("frame memo: {reframed} of 1500 answered without a parse");
        assert!(
            reframed > 100,
            "seed {seed}: the memo of frames was hardly used ({reframed})"
        );
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use rand::Rng;

    /// [`memo_key`] of the bytes `chunks` hold, joined (without joining them).
    fn chunks_key(chunks: &BodyChunks) -> u64 {
        chunks.sampled_key(KEY_SHAPE)
    }

    fn chunked(body: &Bytes, rng: &mut rand::rngs::StdRng) -> BodyChunks {
        let mut chunks = BodyChunks::default();
        let mut at = 0;
        while at < body.len() {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(0..16),
                1 => rng.random_range(0..5000),
                2 => 16_384,
                _ => body.len(),
            };
            let end = (at + len).min(body.len());
            chunks.push(body.slice(at..end));
            at = end;
        }
        if rng.random_bool(0.1) {
            chunks.push(Bytes::new());
        }
        chunks
    }

    /// Property: a body read in chunks, cut anywhere, has the key of its
    /// joined bytes, and the memo answers it as it answers those bytes: the
    /// memo's parse when they were seen before, else what a fresh parse
    /// gives (the same error, or the same request), never the parse of a
    /// body that differs in one byte (between the key's samples or not).
    /// A fresh seed each run, printed; `XDS_CHUNK_SEED` replays one.
    #[test]
    fn chunks_are_answered_as_their_joined_bytes() {
        let (seed, mut rng) = xds_gateway_base::testing::seeded_rng("XDS_CHUNK_SEED", "chunk memo");
        let corpus = xds_gateway_base::testing::envoy_requests();
        let memo = ParsedRequests::new(SessionKey::Node);
        let mut hits = 0;
        for case in 0..600 {
            let mut body = corpus[rng.random_range(0..corpus.len())].clone();
            let seen_before = rng.random_bool(0.5);
            if seen_before {
                let _ = memo.parse(Bytes::from(body.clone()));
            }
            if rng.random_bool(0.4) && !body.is_empty() {
                let at = rng.random_range(0..body.len());
                match rng.random_range(0..3) {
                    0 => body[at] = body[at].wrapping_add(rng.random_range(1..=255)),
                    1 => {
                        let inserted = b"\"\\{}[],:x 0";
                        body.insert(at, inserted[rng.random_range(0..inserted.len())])
                    }
                    _ => {
                        body.remove(at);
                    }
                }
            }
            let body = Bytes::from(body);
            let chunks = chunked(&body, &mut rng);
            assert_eq!(chunks.len(), body.len(), "seed {seed} case {case}");
            assert_eq!(
                chunks_key(&chunks),
                memo_key(&body),
                "seed {seed} case {case}: the key of the chunks is not that of their bytes"
            );
            let earlier = memo.memo.get(&memo_key(&body));
            let fresh =
                ParsedRequest::parse(body.clone(), SessionKey::Node, &NodeJsons::default(), false);
            let answered = memo.parse_chunks(chunks);
            match (&fresh, &answered) {
                (Ok(f), Ok(a)) => {
                    assert!(
                        a.body.is(&body) && a.version_info() == f.version_info(),
                        "seed {seed} case {case}: the memo answered another body's parse"
                    );
                    assert_eq!(a.names(), f.names(), "seed {seed} case {case}");
                    assert_eq!(
                        a.names_digest(),
                        f.names_digest(),
                        "seed {seed} case {case}"
                    );
                    assert_eq!(a.node_id(), f.node_id(), "seed {seed} case {case}");
                    assert_eq!(a.node_json(), f.node_json(), "seed {seed} case {case}");
                    assert_eq!(a.type_url(), f.type_url(), "seed {seed} case {case}");
                    if let Some(earlier) = earlier.filter(|e| e.body.is(&body)) {
                        assert!(Arc::ptr_eq(&earlier, a), "seed {seed} case {case}");
                        hits += 1;
                    }
                }
                (Err(f), Err(a)) => {
                    assert_eq!(f.to_string(), a.to_string(), "seed {seed} case {case}")
                }
                _ => panic!(
                    "seed {seed} case {case}: fresh {:?}, chunks {:?}",
                    fresh.as_ref().map(|p| p.version_info().to_owned()),
                    answered.as_ref().map(|p| p.version_info().to_owned()),
                ),
            }
        }
        println!("chunk memo: {hits} of 600 answered by an earlier parse");
        assert!(hits > 50, "seed {seed}: the memo was hardly hit ({hits})");
    }
}
