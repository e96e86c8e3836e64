//! The render memo ([`Intake`]): every upstream resource decoded and
//! rendered once per content version, across responses and sessions.
//!
//! A resource is identified by (type, SHA-256 of its protobuf bytes): an
//! update in which one of N resources changed costs one decode and render.
//! Renders for REST clients are the `Assembler`'s (`assembler.rs`).
//!
//! The delta-only types (VHDS, LEDS) are named by their delta `Resource`
//! wrapper, so they are kept and rendered in it: the digest is of the
//! wrapper, so two resources with the same body and different names never
//! share a memo entry, and a REST answer keeps every name.
//!
//! Key material (`xds::keys`) is taken out here unless keys are served
//! (`--allow-secrets`): what the intake keeps is what every view after it
//! serves (REST answers, memos, config history, admin views, CSDS). The
//! digest stays that of the bytes as sent, so a rotated key is a new version.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
use moka::sync::Cache;
use prometheus_client::metrics::counter::Counter;
use sha2::{Digest as _, Sha256};

use super::opaque_types::{OpaqueHeld, OpaqueTypes};
use super::resource::{
    idle_memo, name_of, Digest, Resource, ResourceError, WrapperName, RESOURCE_WRAPPER,
};
use super::resource_set::{IntoResourceSet, ResourceMap, ResourceSet, SharedAnswers};
use crate::log_escape::Escaped;
use crate::xds::dynamic_parameters::Variant;
use crate::xds::keys;
use crate::xds::opaque::unknown_types;
use crate::xds::{Codec, JsonError, ResourceType, Validator, OPAQUE_TYPE_URL};

/// How many rendered resources the memo keeps (and, in the assembler,
/// resources rewritten for REST targets).
pub(super) const RENDER_MEMO_ENTRIES: u64 = 200_000;

/// How long a render nobody looked up stays in the memo, so that contents no
/// state holds any more do not stay until the entry bound; what a state still
/// holds lives on in the state, and a miss costs one render.
pub(super) const RENDER_MEMO_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// Decodes, checks and renders upstream resources, remembering every
/// render by digest, and the sets whole upstream answers decoded to. What
/// answering a poll needs is the [`Assembler`](super::Assembler)'s.
#[derive(Clone)]
pub struct Intake {
    codec: Codec,
    plain: Cache<(ResourceType, Digest), Arc<Resource>>,
    /// The sets upstream answers decoded to, shared by the sessions that
    /// receive the same answer.
    answers: SharedAnswers,
    /// Envoy's field rules, checked on every new resource (`--validate`).
    validator: Option<Arc<Validator>>,
    /// Counts resources decoded in full, checked and rendered (memo misses).
    rendered: Counter,
    /// Counts those of them served with an opaque `Any`.
    rendered_opaque: Counter,
    /// Whether key material is served as sent (`--allow-secrets`); else it
    /// is taken out.
    serve_keys: bool,
    /// Counts resources rendered with key material taken out.
    keys_taken_out: Counter,
    /// Each type the gateway had no descriptor for, and how many resources
    /// of a new content held it: what `/readyz` names.
    opaque_types: OpaqueTypes,
    /// The largest upstream answer (encoded bytes) a session's stream has
    /// read: what each stream may hold at once while it reads and decodes
    /// one, which the sessions' admission weighs.
    largest_answer: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intake").finish_non_exhaustive()
    }
}

impl Intake {
    /// An intake that checks every resource against Envoy's field rules.
    pub fn new(codec: Codec) -> Intake {
        Intake {
            codec,
            plain: idle_memo(RENDER_MEMO_ENTRIES, RENDER_MEMO_IDLE),
            answers: SharedAnswers::default(),
            validator: None,
            rendered: Counter::default(),
            rendered_opaque: Counter::default(),
            serve_keys: false,
            keys_taken_out: Counter::default(),
            opaque_types: OpaqueTypes::default(),
            largest_answer: Arc::default(),
        }
        .validating(true)
    }

    /// Notes that a session's stream read an answer of `bytes` (encoded).
    pub fn note_answer(&self, bytes: usize) {
        self.largest_answer.fetch_max(bytes, Ordering::Relaxed);
    }

    /// The largest answer a session's stream has read, in bytes.
    pub fn largest_answer(&self) -> usize {
        self.largest_answer.load(Ordering::Relaxed)
    }

    /// Whether key material is served as sent (`--allow-secrets`).
    pub fn serving_keys(mut self, on: bool) -> Intake {
        self.serve_keys = on;
        self
    }

    /// Counts the resources rendered with key material taken out.
    pub fn counting_keys_taken_out(mut self, counter: Counter) -> Intake {
        self.keys_taken_out = counter;
        self
    }

    /// Whether key material was found at `paths` of resource `name`, and
    /// taken out when keys are not served (counted and logged: the paths,
    /// never the keys).
    fn noted_keys(&self, kind: ResourceType, name: &str, paths: &[String]) -> bool {
        if paths.is_empty() {
            return false;
        }
        if !self.serve_keys {
            self.keys_taken_out.inc();
            tracing::warn!(
                type_url = %Escaped(kind.type_url()),
                name = %Escaped(name),
                fields = %Escaped(paths.join(", ")),
                "key material taken out of a resource: --allow-secrets is off"
            );
        }
        true
    }

    /// `message` (the resource `name`, as `payload`) with its key material
    /// taken out unless keys are served: the payload to keep, and whether it
    /// holds key material as sent.
    fn keys_of(
        &self,
        codec: &Codec,
        kind: ResourceType,
        name: &str,
        message: &mut prost_reflect::DynamicMessage,
        payload: Bytes,
    ) -> (Bytes, bool) {
        let paths = keys::key_material(codec.descriptors(), message, !self.serve_keys);
        let held = self.noted_keys(kind, name, &paths);
        match held && !self.serve_keys {
            true => (keys::encoded(codec.descriptors(), message), false),
            false => (payload, held),
        }
    }

    /// Whether resources are checked against Envoy's field rules.
    pub fn validating(mut self, on: bool) -> Intake {
        self.validator = on.then(|| Arc::new(Validator::new(self.codec.pool())));
        self
    }

    /// Counts its renders with `rendered`, and those served with an opaque
    /// `Any` with `opaque` (metrics).
    pub fn counting(mut self, rendered: Counter, opaque: Counter) -> Intake {
        self.rendered = rendered;
        self.rendered_opaque = opaque;
        self
    }

    /// Where it notes each type it had no descriptor for (for `/readyz`).
    pub fn opaque_types(&self) -> &OpaqueTypes {
        &self.opaque_types
    }

    /// `unknown`, the types a resource of a new content is served opaque
    /// for, counted and noted (held in the record while the resource lives).
    fn noted(&self, unknown: impl IntoIterator<Item = String>) -> OpaqueHeld {
        let unknown: Box<[String]> = unknown.into_iter().collect();
        if !unknown.is_empty() {
            self.rendered_opaque.inc();
        }
        self.opaque_types.note(unknown)
    }

    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// The sets upstream answers decoded to (`SharedAnswers`).
    pub fn answers(&self) -> &SharedAnswers {
        &self.answers
    }

    /// The rendered resource for `payload` of `kind`: from the memo, or
    /// decoded, checked against Envoy's rules and rendered now (only good
    /// ones are remembered). Once per content, however many sessions decode
    /// it at the same time (a SotW push brings it to every session at once):
    /// the first renders, the others wait for its result (`try_get_with`).
    pub fn resource(
        &self,
        kind: ResourceType,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        let digest: Digest = Sha256::digest(&payload).into();
        self.resource_of(kind, digest, payload, None)
    }

    /// [`resource`](Self::resource), rendered for the caller alone and
    /// kept in no memo: a resource the upstream marked `do_not_cache`.
    pub fn resource_unshared(
        &self,
        kind: ResourceType,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        let digest: Digest = Sha256::digest(&payload).into();
        self.render(kind, digest, payload, None)
    }

    /// [`resource`](Self::resource) of an extra `kind` that a delta upstream
    /// named `name` (whatever its name fields say): its digest covers the
    /// name, so two names never share a render.
    pub fn resource_named(
        &self,
        kind: ResourceType,
        name: String,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        let mut hasher = Sha256::new();
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&payload);
        let digest: Digest = hasher.finalize().into();
        self.resource_of(kind, digest, payload, Some(name))
    }

    /// `resource` as the variant of its name under `constraints` (xDS TP2):
    /// `resource` itself when they set nothing. Its JSON is the wrapper
    /// carrying name and constraints around the shared render; its digest
    /// covers both, so a variant is never taken for another.
    pub fn variant(
        &self,
        resource: Arc<Resource>,
        constraints: DynamicParameterConstraints,
    ) -> Result<Arc<Resource>, ResourceError> {
        let codec = self.codec.snapshot();
        let Some(variant) = Variant::of(&codec, &resource.name, constraints)? else {
            return Ok(resource);
        };
        let mut hasher = Sha256::new();
        hasher.update(b"variant");
        hasher.update(resource.digest);
        hasher.update(variant.encoded());
        Ok(Arc::new(Resource {
            kind: resource.kind,
            name: resource.name.clone(),
            aliases: resource.aliases.clone(),
            digest: hasher.finalize().into(),
            payload: resource.payload.clone(),
            json: variant.wrap(&resource.json),
            opaque: self.noted(resource.opaque.iter().cloned()),
            holds_keys: resource.holds_keys,
            variant: Some(Box::new(variant)),
        }))
    }

    /// [`resource`](Self::resource) of a payload whose digest is known. A
    /// render served opaque whose types the pool has learned since is
    /// rendered again.
    fn resource_of(
        &self,
        kind: ResourceType,
        digest: Digest,
        payload: Bytes,
        name: Option<String>,
    ) -> Result<Arc<Resource>, ResourceError> {
        let key = (kind, digest);
        if let Some(hit) = self.plain.get(&key) {
            if !self.outdated(&hit) {
                return Ok(hit);
            }
            self.plain.invalidate(&key);
        }
        self.plain
            .try_get_with(key, || self.render(kind, digest, payload, name))
            .map_err(|e| (*e).clone())
    }

    /// Whether `resource` was served opaque for a type the pool now knows.
    pub fn outdated(&self, resource: &Resource) -> bool {
        let descriptors = self.codec.descriptors();
        resource.opaque.iter().any(|t| descriptors.knows(t))
    }

    /// `set` with each resource [`outdated`](Self::outdated) rendered
    /// again (but a delta-only type's, whose wrapper's version is not held,
    /// and one that no longer renders); `set` itself when none is.
    pub fn refreshed(&self, set: Arc<ResourceSet>) -> Arc<ResourceSet> {
        let stale = |r: &Arc<Resource>| !r.kind.delta_only() && self.outdated(r);
        if !set.has_opaque() || !set.values().any(stale) {
            return set;
        }
        let fresh: ResourceMap = set
            .iter()
            .map(|(name, r)| {
                let again = stale(r).then(|| self.rendered_again(r).ok()).flatten();
                (name.clone(), again.unwrap_or_else(|| Arc::clone(r)))
            })
            .collect();
        fresh.into_set()
    }

    /// `resource` rendered again (a variant: its resource, wrapped again).
    fn rendered_again(&self, resource: &Resource) -> Result<Arc<Resource>, ResourceError> {
        let (payload, name) = (resource.payload.clone(), Some(resource.name.clone()));
        let Some(variant) = &resource.variant else {
            return self.resource_of(resource.kind, resource.digest, payload, name);
        };
        let digest: Digest = Sha256::digest(&resource.payload).into();
        let inner = self.resource_of(resource.kind, digest, payload, name)?;
        self.variant(inner, variant.constraints().clone())
    }

    /// [`resource`](Self::resource) on a memo miss; named `name`, else as
    /// its name fields say.
    fn render(
        &self,
        kind: ResourceType,
        digest: Digest,
        payload: Bytes,
        name: Option<String>,
    ) -> Result<Arc<Resource>, ResourceError> {
        let type_url = kind.type_url();
        if kind.delta_only() {
            let reason = "a delta-only type is named by its delta Resource wrapper";
            return Err(JsonError::decode(type_url, reason).into());
        }
        let name = match (name, name_of(kind, &payload)) {
            (Some(name), _) => name,
            (None, Some(name)) => name.into_owned(),
            // An added type's resource without its name fields is named by
            // its content: no client of such a type refuses it for that.
            (None, None) if kind.is_extra() => format!("sha256:{}", hex::encode(&digest[..8])),
            (None, None) => {
                let reason = format!("resource has no name (fields {:?})", kind.name_fields());
                return Err(JsonError::decode(type_url, reason).into());
            }
        };
        // One pool throughout, however the shared one grows meanwhile.
        let codec = self.codec.snapshot();
        let (json, payload, opaque, holds_keys) = if kind.is_extra()
            && !codec.descriptors().knows(type_url)
        {
            // An added type whose descriptors the gateway has not (yet):
            // served whole, as an opaque Any, until they come; one named
            // as a carrier of key material has its bytes taken out unless
            // keys are served.
            let found = match keys::names_a_carrier(type_url) {
                true => vec!["(the whole resource)".to_owned()],
                false => Vec::new(),
            };
            let holds_keys = self.noted_keys(kind, &name, &found);
            if holds_keys && !self.serve_keys {
                let json = codec.render_any(OPAQUE_TYPE_URL, &keys::taken_out_any(type_url))?;
                (json, Bytes::new(), OpaqueHeld::default(), false)
            } else {
                let json = codec.render_opaque(type_url, &payload)?;
                (json, payload, self.noted([type_url.to_owned()]), holds_keys)
            }
        } else {
            let mut message = self.checked(&codec, kind, &payload, &name)?;
            let (payload, holds_keys) = self.keys_of(&codec, kind, &name, &mut message, payload);
            let json = codec.render_resource(type_url, &message)?;
            (
                json,
                payload,
                self.noted(unknown_types(codec.descriptors(), &message)),
                holds_keys,
            )
        };
        Ok(Arc::new(Resource {
            kind,
            name,
            aliases: Vec::new(),
            digest,
            payload,
            json,
            opaque,
            holds_keys,
            variant: None,
        }))
    }

    /// The rendered resource for `payload` of a delta-only `kind`, named as
    /// its delta wrapper says, rendered inside that wrapper.
    pub fn delta_named(
        &self,
        kind: ResourceType,
        wrapper: WrapperName,
        payload: Bytes,
    ) -> Result<Arc<Resource>, ResourceError> {
        use envoy_types::pb::envoy::service::discovery::v3::Resource as Wrapper;
        use envoy_types::pb::google::protobuf::Any;
        use prost::Message as _;
        let wrapped = |payload: &[u8]| {
            Wrapper {
                name: wrapper.name.clone(),
                aliases: wrapper.aliases.clone(),
                version: wrapper.version.clone(),
                resource: Some(Any {
                    type_url: kind.type_url().to_owned(),
                    value: payload.to_vec(),
                }),
                ..Wrapper::default()
            }
            .encode_to_vec()
        };
        let encoded = wrapped(&payload);
        let digest: Digest = Sha256::digest(&encoded).into();
        self.plain
            .try_get_with((kind, digest), || {
                let codec = self.codec.snapshot();
                let mut message = self.checked(&codec, kind, &payload, &wrapper.name)?;
                let (kept, holds_keys) =
                    self.keys_of(&codec, kind, &wrapper.name, &mut message, payload.clone());
                let json = match kept == payload {
                    true => codec.render_any(RESOURCE_WRAPPER, &encoded)?,
                    false => codec.render_any(RESOURCE_WRAPPER, &wrapped(&kept))?,
                };
                Ok(Arc::new(Resource {
                    kind,
                    name: wrapper.name.clone(),
                    aliases: wrapper.aliases.clone(),
                    digest,
                    payload: kept,
                    json,
                    opaque: self.noted(unknown_types(codec.descriptors(), &message)),
                    holds_keys,
                    variant: None,
                }))
            })
            .map_err(|e: Arc<ResourceError>| (*e).clone())
    }

    /// `payload` decoded as `kind`, checked against Envoy's field rules when
    /// validating.
    fn checked(
        &self,
        codec: &Codec,
        kind: ResourceType,
        payload: &[u8],
        name: &str,
    ) -> Result<prost_reflect::DynamicMessage, ResourceError> {
        self.rendered.inc();
        let message = codec.decode_any(kind.type_url(), payload)?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Intake {
        /// Resources rendered so far (decoded in full, checked, rendered).
        pub fn rendered(&self) -> u64 {
            self.rendered.get()
        }
    }

    /// A intake, and the payload of a Cluster `c1` with `connect_timeout`.
    fn intake_and_cluster(connect_timeout: &str) -> (Intake, Bytes) {
        let codec = Codec::embedded();
        let payload = crate::test_states::cluster_payload(&codec, "c1", connect_timeout);
        (Intake::new(codec), payload)
    }

    #[test]
    fn renders_once_per_digest() {
        let (r, payload) = intake_and_cluster("1s");
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
        let (r, payload) = intake_and_cluster("7s");
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

    /// A Cluster `c1` whose TLS context holds `key` inline.
    fn cluster_with_key(codec: &Codec, key: &str) -> Bytes {
        let json = serde_json::json!({
            "@type": ResourceType::Clusters.type_url(),
            "name": "c1",
            "transport_socket": {"name": "tls", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"tls_certificates": [{"private_key": {"inline_string": key}}]}}}
        });
        Bytes::from(codec.parse_any(json.to_string().as_bytes()).unwrap().value)
    }

    fn holds(bytes: &[u8], key: &str) -> bool {
        bytes.windows(key.len()).any(|w| w == key.as_bytes())
    }

    #[test]
    fn key_material_is_taken_out_of_what_is_kept_unless_keys_are_served() {
        let codec = Codec::embedded();
        let payload = cluster_with_key(&codec, "the-private-key");
        let taken = Intake::new(codec.clone())
            .resource(ResourceType::Clusters, payload.clone())
            .unwrap();
        assert!(!holds(&taken.payload, "the-private-key"));
        assert!(!holds(&taken.json, "the-private-key"));
        assert!(holds(&taken.json, crate::xds::REDACTED));
        assert!(!taken.holds_keys, "nothing left to hide");
        let digest: Digest = Sha256::digest(&payload).into();
        assert_eq!(taken.digest, digest, "the digest of the bytes as sent");
        let served = Intake::new(codec)
            .serving_keys(true)
            .resource(ResourceType::Clusters, payload.clone())
            .unwrap();
        assert_eq!(served.payload, payload);
        assert!(holds(&served.json, "the-private-key"));
        assert!(served.holds_keys);
    }

    #[test]
    fn a_bad_resource_is_an_error_every_time_and_not_remembered() {
        let r = Intake::new(Codec::embedded());
        // Named "c1", then field 2 (`alt_stat_name`, a string) as a varint.
        let garbage = Bytes::from_static(&[0x0a, 0x02, b'c', b'1', 0x10, 0x05]);
        for _ in 0..2 {
            assert!(r.resource(ResourceType::Clusters, garbage.clone()).is_err());
        }
        assert_eq!(r.rendered(), 2, "a failure is tried again, not memoised");
    }
}
