//! One upstream resource, decoded and rendered once per content version, and
//! the render memo that makes "once" true across responses and sessions.
//!
//! A resource is identified by (type, SHA-256 of its protobuf bytes): an
//! update in which one of N resources changed costs one decode and render; the
//! N-1 others come from the memo. Renders for REST clients (with config
//! sources rewritten) are memoised per (resource digest, target) the same way.
//!
//! The delta-only types (VHDS, LEDS) are named by their delta `Resource`
//! wrapper, not by a field of their own, so they are kept and rendered in
//! that wrapper (name, aliases, version and the resource): the digest is of
//! the wrapper, so two resources with the same body and different names
//! never share a memo entry, and a REST answer keeps every name.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use moka::sync::Cache;
use prometheus_client::metrics::counter::Counter;
use sha2::{Digest as _, Sha256};

use super::config_history::ConfigHistory;
use super::resource_set::SharedAnswers;
use super::state::Bodies;
use crate::xds::rewrite::{rewrite_config_sources, RestTarget};
use crate::xds::{Codec, JsonError, ResourceType, Validator, Violation};

/// Why a resource could not be taken.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ResourceError {
    #[error(transparent)]
    Json(#[from] JsonError),
    /// It decodes, but breaks a rule Envoy checks (so Envoy would reject it).
    #[error("{type_name} {name:?} breaks Envoy's rule at {violation}")]
    Invalid {
        type_name: &'static str,
        name: String,
        violation: Violation,
    },
}

/// SHA-256 of a resource's protobuf bytes.
pub(crate) type Digest = [u8; 32];

/// A decoded, rendered resource. Immutable; shared by every state holding it.
#[derive(Debug)]
pub(crate) struct Resource {
    pub(crate) kind: ResourceType,
    pub(crate) name: String,
    /// Other names the upstream delivered it for (VHDS `<route
    /// configuration>/<domain>` aliases); empty for every other type.
    pub(crate) aliases: Vec<String>,
    pub(crate) digest: Digest,
    /// The `Any` payload as the upstream sent it.
    pub(crate) payload: Bytes,
    /// Canonical JSON of the `Any` (`{"@type": ..., ...}`), untouched; for
    /// a delta-only type, of its `envoy.service.discovery.v3.Resource`
    /// wrapper holding it.
    pub(crate) json: Bytes,
    /// The types of the `Any`s inside it the gateway has no descriptor
    /// for, served as `xds_gateway.v1.OpaqueAny` (`xds::opaque`); almost
    /// always none.
    pub(crate) opaque: Box<[String]>,
}

/// How a delta upstream named a resource of a delta-only type.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrapperName {
    pub(crate) name: String,
    pub(crate) aliases: Vec<String>,
    /// The upstream's per-resource version.
    pub(crate) version: String,
}

/// Type URL of the delta wrapper the delta-only types are rendered in.
pub(crate) const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// How many rendered resources (plain and rewritten) the memo keeps.
const RENDER_MEMO_ENTRIES: u64 = 200_000;

/// How long a render nobody looked up stays in the memo. Without it, every
/// content an upstream ever sent stayed until the entry bound (a cluster
/// changed every second is 3,600 dead renders an hour, RSS growing for
/// days); what a state still holds lives on in the state, and a miss
/// costs one render.
const RENDER_MEMO_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// A memo of at most `entries` entries, each dropped after `idle` without
/// a lookup.
pub(crate) fn idle_memo<K, V>(entries: u64, idle: std::time::Duration) -> Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(entries)
        .time_to_idle(idle)
        .build()
}

/// Decodes and renders resources, remembering every render by digest, and
/// holds the memo of assembled response bodies and the config history
/// (what sessions publish is recorded there; the admin views read it).
#[derive(Clone)]
pub(crate) struct Renderer {
    codec: Codec,
    plain: Cache<(ResourceType, Digest), Arc<Resource>>,
    rewritten: Cache<(Digest, RestTarget), Bytes>,
    bodies: Bodies,
    /// The sets upstream answers decoded to, shared by the sessions that
    /// receive the same answer.
    answers: SharedAnswers,
    history: ConfigHistory,
    /// Envoy's field rules, checked on every new resource (`--validate`).
    validator: Option<Arc<Validator>>,
    /// Counts resources decoded in full, checked and rendered (memo misses).
    rendered: Counter,
    /// Counts those of them served with an opaque `Any`.
    rendered_opaque: Counter,
    /// Each type the gateway had no descriptor for, and how many resources
    /// of a new content held it: what `/readyz` names.
    opaque_types: Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer").finish_non_exhaustive()
    }
}

impl Renderer {
    /// A renderer that checks every resource against Envoy's field rules.
    pub(crate) fn new(codec: Codec) -> Renderer {
        Renderer::with_bodies(codec, Bodies::default()).validating(true)
    }

    /// Whether resources are checked against Envoy's field rules.
    pub(crate) fn validating(mut self, on: bool) -> Renderer {
        self.validator = on.then(|| Arc::new(Validator::new(self.codec.pool().clone())));
        self
    }

    /// Counts its renders with `rendered`, and those served with an opaque
    /// `Any` with `opaque` (metrics).
    pub(crate) fn counting(mut self, rendered: Counter, opaque: Counter) -> Renderer {
        self.rendered = rendered;
        self.rendered_opaque = opaque;
        self
    }

    /// Each type the gateway had no descriptor for, with how many resources
    /// of a new content held it.
    pub(crate) fn opaque_types(&self) -> Vec<(String, u64)> {
        let seen = crate::sync::lock(&self.opaque_types);
        seen.iter().map(|(t, n)| (t.clone(), *n)).collect()
    }

    /// The types of `message`'s `Any`s the codec does not know, noted.
    fn note_opaque(&self, message: &prost_reflect::DynamicMessage) -> Box<[String]> {
        let unknown = crate::xds::opaque::unknown_types(&self.codec, message);
        if unknown.is_empty() {
            return Box::default();
        }
        self.rendered_opaque.inc();
        let mut seen = crate::sync::lock(&self.opaque_types);
        for type_url in &unknown {
            *seen.entry(type_url.clone()).or_default() += 1;
        }
        unknown.into_iter().collect()
    }

    /// Resources rendered so far (decoded in full, checked, rendered).
    #[cfg(test)]
    pub(crate) fn rendered(&self) -> u64 {
        self.rendered.get()
    }

    /// A renderer whose body memo holds at most `bytes` (tests of eviction;
    /// none at all for the benchmarks' pipeline, `source/pipeline.rs`).
    pub(crate) fn with_body_capacity(codec: Codec, bytes: u64) -> Renderer {
        Renderer::with_bodies(codec, Bodies::with_capacity(bytes)).validating(true)
    }

    fn with_bodies(codec: Codec, bodies: Bodies) -> Renderer {
        Renderer {
            codec,
            plain: idle_memo(RENDER_MEMO_ENTRIES, RENDER_MEMO_IDLE),
            rewritten: idle_memo(RENDER_MEMO_ENTRIES, RENDER_MEMO_IDLE),
            bodies,
            answers: SharedAnswers::default(),
            history: ConfigHistory::default(),
            validator: None,
            rendered: Counter::default(),
            rendered_opaque: Counter::default(),
            opaque_types: Arc::default(),
        }
    }

    /// The same renderer, keeping `history` (`--history-max-bytes`,
    /// `--history-file`).
    pub(crate) fn with_history(mut self, history: ConfigHistory) -> Renderer {
        self.history = history;
        self
    }

    /// The config history (`config_history.rs`).
    pub(crate) fn history(&self) -> &ConfigHistory {
        &self.history
    }

    pub(crate) fn codec(&self) -> &Codec {
        &self.codec
    }

    /// The sets upstream answers decoded to ([`SharedAnswers`]).
    pub(crate) fn answers(&self) -> &SharedAnswers {
        &self.answers
    }

    /// The memo of assembled bodies.
    pub(crate) fn bodies(&self) -> &Bodies {
        &self.bodies
    }

    /// The rendered resource for `payload` of `kind`: from the memo, or
    /// decoded, checked against Envoy's rules and rendered now. Fails if the
    /// bytes do not decode, any nested `Any` names an unknown type, or a rule
    /// is broken. Only good resources are remembered.
    ///
    /// Once per content, however many sessions decode it at the same time
    /// (a SotW push brings the same new resource to every session at once,
    /// each on a blocking thread of its own): the first renders, the others
    /// wait for its result (`try_get_with`).
    pub(crate) fn resource(
        &self,
        kind: ResourceType,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        let digest: Digest = Sha256::digest(&payload).into();
        self.plain
            .try_get_with((kind, digest), || self.render(kind, digest, payload))
            .map_err(|e| (*e).clone())
    }

    /// [`resource`](Self::resource) on a memo miss.
    fn render(
        &self,
        kind: ResourceType,
        digest: Digest,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        let type_url = kind.type_url();
        if kind.delta_only() {
            return Err(JsonError::Decode {
                type_url: type_url.to_owned(),
                reason: "a delta-only type is named by its delta Resource wrapper".into(),
            }
            .into());
        }
        let name = resource_name(&payload)
            .ok_or_else(|| JsonError::Decode {
                type_url: type_url.to_owned(),
                reason: "resource has no name (field 1)".into(),
            })?
            .to_owned();
        let message = self.checked(kind, &payload, &name)?;
        let json = self.codec.render_resource(type_url, &message)?;
        Ok(Arc::new(Resource {
            kind,
            name,
            aliases: Vec::new(),
            digest,
            payload,
            json,
            opaque: self.note_opaque(&message),
        }))
    }

    /// The rendered resource for `payload` of a delta-only `kind`, named
    /// (and versioned) as its delta wrapper says: decoded and checked like
    /// any other, rendered inside an `envoy.service.discovery.v3.Resource`.
    pub(crate) fn delta_named(
        &self,
        kind: ResourceType,
        wrapper: WrapperName,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        use envoy_types::pb::envoy::service::discovery::v3::Resource as Wrapper;
        use envoy_types::pb::google::protobuf::Any;
        use prost::Message as _;
        let encoded = Wrapper {
            name: wrapper.name.clone(),
            aliases: wrapper.aliases.clone(),
            version: wrapper.version,
            resource: Some(Any {
                type_url: kind.type_url().to_owned(),
                value: payload.to_vec(),
            }),
            ..Wrapper::default()
        }
        .encode_to_vec();
        let digest: Digest = Sha256::digest(&encoded).into();
        self.plain
            .try_get_with((kind, digest), || {
                let message = self.checked(kind, &payload, &wrapper.name)?;
                let json = self.codec.render_any(RESOURCE_WRAPPER, &encoded)?;
                Ok(Arc::new(Resource {
                    kind,
                    name: wrapper.name,
                    aliases: wrapper.aliases,
                    digest,
                    payload,
                    json,
                    opaque: self.note_opaque(&message),
                }))
            })
            .map_err(|e: Arc<ResourceError>| (*e).clone())
    }

    /// `payload` decoded as `kind`, checked against Envoy's field rules when
    /// validating.
    fn checked(
        &self,
        kind: ResourceType,
        payload: &[u8],
        name: &str,
    ) -> Result<prost_reflect::DynamicMessage, ResourceError> {
        self.rendered.inc();
        let message = self.codec.decode_any(kind.type_url(), payload)?;
        if let Some(validator) = &self.validator {
            validator
                .validate(&message)
                .map_err(|violation| ResourceError::Invalid {
                    type_name: kind.message_name(),
                    name: name.to_owned(),
                    violation,
                })?;
        }
        Ok(message)
    }

    /// The resource's JSON with ADS/self config sources pointed at `target`.
    pub(crate) fn rewritten(
        &self,
        resource: &Resource,
        target: &RestTarget,
    ) -> Result<Bytes, JsonError> {
        if resource.kind.delta_only() {
            // Tooling reads these; no REST Envoy follows their config sources.
            return Ok(resource.json.clone());
        }
        let key = (resource.digest, target.clone());
        if let Some(hit) = self.rewritten.get(&key) {
            return Ok(hit);
        }
        let type_url = resource.kind.type_url();
        let json = match rewrite_config_sources(&self.codec, type_url, &resource.payload, target)? {
            Some(bytes) => self.codec.render_any(type_url, &bytes)?,
            None => resource.json.clone(),
        };
        self.rewritten.insert(key, json.clone());
        Ok(json)
    }
}

/// The resource's name: field 1 (a string) in every REST-served type
/// (`name`, or `cluster_name` for ClusterLoadAssignment), read straight from
/// the wire format without decoding the rest.
pub(crate) fn resource_name(mut buf: &[u8]) -> Option<&str> {
    use prost::encoding::{decode_key, decode_varint, WireType};
    let mut name = None;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        match wire {
            WireType::Varint => {
                decode_varint(&mut buf).ok()?;
            }
            WireType::SixtyFourBit => buf = buf.get(8..)?,
            WireType::ThirtyTwoBit => buf = buf.get(4..)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let (field, rest) = (buf.get(..len)?, buf.get(len..)?);
                if tag == 1 {
                    // Last one wins, as in protobuf.
                    name = Some(std::str::from_utf8(field).ok()?);
                }
                buf = rest;
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::Kind;

    #[test]
    fn field_one_is_the_name_of_every_served_type() {
        let codec = Codec::embedded();
        for kind in ResourceType::ALL.into_iter().filter(|k| !k.delta_only()) {
            let desc = codec.descriptor(kind.message_name()).unwrap();
            let field = desc.get_field(1).unwrap();
            assert!(matches!(field.kind(), Kind::String), "{kind}");
            assert!(
                ["name", "cluster_name"].contains(&field.name()),
                "{kind}: {}",
                field.name()
            );
        }
    }

    /// A renderer, and the payload of a Cluster `c1` with `connect_timeout`.
    fn renderer_and_cluster(connect_timeout: &str) -> (Renderer, Bytes) {
        let codec = Codec::embedded();
        let payload = crate::cache::test_states::cluster_payload(&codec, "c1", connect_timeout);
        (Renderer::new(codec), payload)
    }

    #[test]
    fn renders_once_per_digest() {
        let (r, payload) = renderer_and_cluster("1s");
        let a = r.resource(ResourceType::Clusters, payload.clone()).unwrap();
        let b = r.resource(ResourceType::Clusters, payload).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.name, "c1");
        assert_eq!(r.rendered(), 1, "the second is a memo hit");
    }

    /// The race `tests/push_work.rs` met in CI: 50 sessions decode a
    /// push's one new resource at the same time, each on a thread of its
    /// own; it is rendered once, and every session holds that one render.
    #[test]
    fn concurrent_decodes_of_one_content_render_it_once() {
        let (r, payload) = renderer_and_cluster("7s");
        let start = std::sync::Barrier::new(16);
        let renders: Vec<Arc<Resource>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        r.resource(ResourceType::Clusters, payload.clone()).unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(r.rendered(), 1, "one render for 16 decodes at once");
        assert!(renders.iter().all(|x| Arc::ptr_eq(x, &renders[0])));
    }

    #[test]
    fn a_bad_resource_is_an_error_every_time_and_not_remembered() {
        let r = Renderer::new(Codec::embedded());
        // Named "c1", then field 2 (`alt_stat_name`, a string) as a varint.
        let garbage = Bytes::from_static(&[0x0a, 0x02, b'c', b'1', 0x10, 0x05]);
        for _ in 0..2 {
            assert!(r.resource(ResourceType::Clusters, garbage.clone()).is_err());
        }
        assert_eq!(r.rendered(), 2, "a failure is tried again, not memoised");
    }

    #[test]
    fn names_from_wire_and_garbage_is_none() {
        assert_eq!(resource_name(&[0x0a, 0x01, b'x', 0x10, 0x05]), Some("x"));
        assert_eq!(resource_name(&[0x0a, 0x05, b'x']), None);
        assert_eq!(resource_name(&[0xff]), None);
        assert_eq!(resource_name(&[]), None);
    }
}
