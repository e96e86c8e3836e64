//! Decoding what arrives: the resources of an upstream response into
//! rendered [`Resource`]s (unwrapping `envoy.service.discovery.v3.Resource`
//! wrappers and keeping their TTLs and heartbeats, checking every type URL,
//! rendering memoised by digest; a response is accepted or rejected as a
//! whole, as Envoy does), and a REST request's `node` into the protobuf
//! `Node` sent upstream.
//!
//! Resources are kept unwrapped: REST clients are served the resource
//! itself (canonical JSON with its own `@type`), not the wrapper, because
//! a REST-polling Envoy ignores `ttl` and takes a heartbeat (a wrapper
//! without a resource) for an empty resource. The exception is a variant
//! (a wrapper whose `resource_name` carries dynamic parameter constraints,
//! xDS TP2): it is kept and served in a wrapper carrying its constraints,
//! as TP2 requires of a caching proxy. Of the variants of one name, a
//! session keeps the one whose constraints match its parameters (the
//! session's subscriptions all carry the same); the others answer none of
//! its subscriptions.

use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::{
    DynamicParameterConstraints, Resource as Wrapper,
};
use prost::Message;
use tracing::{debug, warn};

use super::wire::{Payload, SotwResponse};
use crate::cache::{
    Intake, IntoResourceSet, ReportedError, Resource, ResourceError, ResourceMap, ResourceSet,
    Taken, TypeState, RESOURCE_WRAPPER,
};
use crate::log_escape::Escaped;
use crate::xds::dynamic_parameters::Parameters;
use crate::xds::ResourceType;

/// Why an upstream response was rejected: the message of the NACK's
/// `error_detail` (and of the log line).
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum Rejection {
    #[error("bad Resource wrapper: {0}")]
    BadWrapper(prost::DecodeError),
    #[error("Resource wrapper without a resource")]
    EmptyWrapper,
    #[error("Resource wrapper without a resource and without a name")]
    NamelessHeartbeat,
    #[error(
        "Resource wrapper without a resource for {0:?} in a response of a new version \
         (a heartbeat repeats the version last accepted)"
    )]
    NotAHeartbeat(String),
    #[error("resource {0:?} has a negative ttl")]
    NegativeTtl(String),
    #[error("resource of type {found} in a {expected} response")]
    WrongType {
        found: String,
        expected: &'static str,
    },
    #[error(transparent)]
    Undecodable(#[from] ResourceError),
    #[error("resource {0:?} appears twice in one response")]
    Duplicate(String),
    #[error("resource {index} ({name:?}): {reason}")]
    At {
        index: usize,
        name: String,
        reason: Box<Rejection>,
    },
    #[error("resource {index} is named {wrapper:?} but carries {inner:?}")]
    NameMismatch {
        index: usize,
        wrapper: String,
        inner: String,
    },
    #[error("resource {0} has neither a name nor a payload")]
    Nameless(usize),
    #[error("resource {index} has no name (a {type_name} is named only by its delta Resource)")]
    Unnamed {
        index: usize,
        type_name: &'static str,
    },
    #[error("resource {0:?} is both updated and removed in one response")]
    UpdatedAndRemoved(String),
    #[error("decoder task failed: {0}")]
    Task(String),
    #[error(transparent)]
    Foreign(#[from] crate::store::Foreign),
}

impl Rejection {
    /// Whether a resource decoded but breaks one of Envoy's field rules.
    pub(super) fn breaks_rules(&self) -> bool {
        match self {
            Rejection::Undecodable(ResourceError::Invalid { .. }) => true,
            Rejection::At { reason, .. } => reason.breaks_rules(),
            _ => false,
        }
    }
}

/// Decodes one resource of `kind` (unwrapping a wrapper, which must carry
/// one); the error says why not.
pub(super) fn decode_one(
    intake: &Intake,
    kind: ResourceType,
    any: Payload<'_>,
) -> Result<Arc<Resource>, Rejection> {
    match decode_entry(intake, kind, any, 0)? {
        Entry::Resource { resource, .. } => Ok(resource),
        Entry::Heartbeat { .. } => Err(Rejection::EmptyWrapper),
    }
}

/// One element of a SotW response's `resources`.
#[derive(Debug)]
enum Entry {
    /// A resource, with the TTL its wrapper gave it, and whether the
    /// wrapper said proxies may not cache it (`cache_control.do_not_cache`).
    Resource {
        resource: Arc<Resource>,
        ttl: Option<Duration>,
        do_not_cache: bool,
    },
    /// A wrapper naming a resource without carrying it.
    Heartbeat { name: String, ttl: Option<Duration> },
}

/// Decodes the `index`th element of `resources`: a plain resource of
/// `kind`, or a `Resource` wrapper holding one (named as the resource is)
/// or none.
fn decode_entry(
    intake: &Intake,
    kind: ResourceType,
    any: Payload<'_>,
    index: usize,
) -> Result<Entry, Rejection> {
    if !any.is_of(RESOURCE_WRAPPER) {
        return Ok(Entry::Resource {
            resource: decode_payload(kind, any, |payload| intake.resource(kind, payload))?,
            ttl: None,
            do_not_cache: false,
        });
    }
    let mut wrapper = Wrapper::decode(any.value).map_err(Rejection::BadWrapper)?;
    let constraints = name_and_constraints(&mut wrapper, index)?;
    let ttl = ttl_of(wrapper.ttl.as_ref(), &wrapper.name)?;
    let Some(inner) = wrapper.resource else {
        if wrapper.name.is_empty() {
            return Err(Rejection::NamelessHeartbeat);
        }
        return Ok(Entry::Heartbeat {
            name: wrapper.name,
            ttl,
        });
    };
    let do_not_cache = wrapper.cache_control.is_some_and(|c| c.do_not_cache);
    let resource = decode_payload(kind, Payload::of(&inner), |payload| match do_not_cache {
        true => intake.resource_unshared(kind, payload),
        false => intake.resource(kind, payload),
    })?;
    if !wrapper.name.is_empty() && wrapper.name != resource.name {
        return Err(Rejection::NameMismatch {
            index,
            wrapper: wrapper.name,
            inner: resource.name.clone(),
        });
    }
    let resource = match constraints {
        Some(constraints) => intake.variant(resource, constraints)?,
        None => resource,
    };
    Ok(Entry::Resource {
        resource,
        ttl,
        do_not_cache,
    })
}

/// Leaves in `wrapper.name` the name of the `index`th resource, and returns
/// its variant's constraints: `resource_name` names a variant (the name and
/// its constraints) in place of `name`; both may be set only when they agree.
pub(super) fn name_and_constraints(
    wrapper: &mut Wrapper,
    index: usize,
) -> Result<Option<DynamicParameterConstraints>, Rejection> {
    let Some(named) = wrapper.resource_name.take() else {
        return Ok(None);
    };
    if wrapper.name.is_empty() {
        wrapper.name = named.name;
    } else if !named.name.is_empty() && named.name != wrapper.name {
        let wrapper = std::mem::take(&mut wrapper.name);
        return Err(Rejection::NameMismatch {
            index,
            wrapper,
            inner: named.name,
        });
    }
    Ok(named.dynamic_parameter_constraints)
}

/// A resource's TTL as a duration (`None`: no TTL).
pub(super) fn ttl_of(
    ttl: Option<&envoy_types::pb::google::protobuf::Duration>,
    name: &str,
) -> Result<Option<Duration>, Rejection> {
    let Some(ttl) = ttl else {
        return Ok(None);
    };
    let (Ok(seconds), Ok(nanos)) = (u64::try_from(ttl.seconds), u32::try_from(ttl.nanos)) else {
        return Err(Rejection::NegativeTtl(name.to_owned()));
    };
    Ok(Some(Duration::new(seconds, nanos.min(999_999_999))))
}

/// What `render` makes of the payload of `any`, which must be of `kind`,
/// given as bytes of its own, for a resource to keep (what arrives lies in
/// the upstream's frame, which a resource kept for hours must not pin).
pub(super) fn decode_payload(
    kind: ResourceType,
    any: Payload<'_>,
    render: impl FnOnce(bytes::Bytes) -> Result<Arc<Resource>, ResourceError>,
) -> Result<Arc<Resource>, Rejection> {
    if !any.is_of(kind.type_url()) {
        return Err(Rejection::WrongType {
            found: any.type_url_lossy(),
            expected: kind.type_url(),
        });
    }
    Ok(render(bytes::Bytes::copy_from_slice(any.value))?)
}

/// What a SotW response holds, decoded.
#[derive(Debug)]
pub(super) struct Decoded {
    /// Shared with every session whose answer held the same resources.
    pub(super) resources: Arc<ResourceSet>,
    /// TTLs of the resources and heartbeats that have one.
    pub(super) ttls: BTreeMap<String, Duration>,
    /// Names that only a heartbeat (a wrapper without a resource) mentions.
    pub(super) heartbeats: BTreeSet<String>,
    /// Resources taken from the state replaced, their bytes unchanged, or
    /// from the set another session decoded the same answer to.
    pub(super) reused: usize,
    /// Resources decoded (looked up in the intake's memo, or rendered).
    pub(super) decoded: usize,
    /// Names of the resources whose wrapper said `do_not_cache`.
    pub(super) uncacheable: BTreeSet<String>,
}

impl Decoded {
    /// A plain answer (no TTLs, no heartbeats) of `resources`, with what
    /// taking it cost: (decoded, reused).
    fn plain(resources: Arc<ResourceSet>, (decoded, reused): (usize, usize)) -> Decoded {
        Decoded {
            resources,
            ttls: BTreeMap::new(),
            heartbeats: BTreeSet::new(),
            reused,
            decoded,
            uncacheable: BTreeSet::new(),
        }
    }

    /// A plain answer another session took already: every resource reused.
    fn shared(resources: Arc<ResourceSet>) -> Decoded {
        let all = resources.len();
        Decoded::plain(resources, (0, all))
    }

    /// The resources of an answer that stands alone (a unary Fetch), where
    /// a heartbeat has nothing to refresh: an error; with the names of
    /// those whose wrapper said `do_not_cache`.
    pub(super) fn standalone(self) -> Result<(Arc<ResourceSet>, BTreeSet<String>), Rejection> {
        match self.heartbeats.into_iter().next() {
            Some(_) => Err(Rejection::EmptyWrapper),
            None => Ok((self.resources, self.uncacheable)),
        }
    }
}

/// A response's elements as they are taken, one by one.
#[derive(Debug, Default)]
struct Taking {
    resources: ResourceMap,
    ttls: BTreeMap<String, Duration>,
    heartbeats: BTreeSet<String>,
    reused: usize,
    decoded: usize,
    uncacheable: BTreeSet<String>,
    /// Variants left out: their constraints do not match the parameters.
    unmatched: Vec<String>,
    /// Names of which more than one variant matched: the first was kept.
    ambiguous: Vec<String>,
    /// Every variant seen (name and constraints), matched or not: the same
    /// one twice is a duplicate whatever the session's parameters.
    variants: BTreeSet<(String, Vec<u8>)>,
}

impl Taking {
    /// Adds a resource (and its TTL); a name already taken (by a resource
    /// or a heartbeat) is a duplicate. One allocation per resource without
    /// a TTL (its key).
    ///
    /// A variant whose constraints do not match `parameters` is left out;
    /// of two variants of one name that match (TP2 leaves the choice
    /// undefined), the first is kept. The same variant twice is a duplicate.
    fn take(
        &mut self,
        resource: Arc<Resource>,
        ttl: Option<Duration>,
        parameters: &Parameters,
    ) -> Result<bool, Rejection> {
        if self.heartbeats.contains(&resource.name) {
            return Err(Rejection::Duplicate(resource.name.clone()));
        }
        if let Some(variant) = &resource.variant {
            let key = (resource.name.clone(), variant.encoded().to_vec());
            if !self.variants.insert(key) {
                return Err(Rejection::Duplicate(resource.name.clone()));
            }
            if !variant.matches(parameters) {
                self.unmatched.push(resource.name.clone());
                return Ok(false);
            }
        }
        match self.resources.entry(resource.name.clone()) {
            btree_map::Entry::Occupied(taken) if same_variant(taken.get(), &resource) => {
                Err(Rejection::Duplicate(taken.key().clone()))
            }
            btree_map::Entry::Occupied(taken) => {
                self.ambiguous.push(taken.key().clone());
                Ok(false)
            }
            btree_map::Entry::Vacant(place) => {
                if let Some(ttl) = ttl {
                    self.ttls.insert(resource.name.clone(), ttl);
                }
                place.insert(resource);
                Ok(true)
            }
        }
    }

    /// Adds a heartbeat (and its TTL), under the same rule.
    fn take_heartbeat(&mut self, name: String, ttl: Option<Duration>) -> Result<(), Rejection> {
        if self.resources.contains_key(&name) || self.heartbeats.contains(&name) {
            return Err(Rejection::Duplicate(name));
        }
        if let Some(ttl) = ttl {
            self.ttls.insert(name.clone(), ttl);
        }
        self.heartbeats.insert(name);
        Ok(())
    }

    /// Takes every element of `anys`, as [`decode_all`] says.
    fn all(
        intake: &Intake,
        kind: ResourceType,
        anys: &[Payload<'_>],
        previous: Option<&TypeState>,
        parameters: &Parameters,
    ) -> Result<Taking, Rejection> {
        let mut out = Taking::default();
        for (index, &any) in anys.iter().enumerate() {
            if let Some(resource) = previous.and_then(|p| unchanged(p, kind, any)) {
                out.reused += 1;
                out.take(resource, None, parameters)?;
                continue;
            }
            out.decoded += 1;
            match decode_entry(intake, kind, any, index)? {
                Entry::Resource {
                    resource,
                    ttl,
                    do_not_cache,
                } => {
                    let name = resource.name.clone();
                    if out.take(resource, ttl, parameters)? && do_not_cache {
                        out.uncacheable.insert(name);
                    }
                }
                Entry::Heartbeat { name, ttl } => out.take_heartbeat(name, ttl)?,
            }
        }
        Ok(out)
    }

    /// What was taken, its resources a set of their own; says which
    /// variants were left out, once per response.
    fn done(self) -> Decoded {
        if let Some(first) = self.unmatched.first() {
            debug!(
                count = self.unmatched.len(),
                first = %Escaped(first),
                "variants whose dynamic parameter constraints match no subscription left out"
            );
        }
        if let Some(first) = self.ambiguous.first() {
            warn!(
                count = self.ambiguous.len(),
                first = %Escaped(first),
                "more than one variant of a name matches the session's dynamic parameters: \
                 the first in the response is served"
            );
        }
        Decoded {
            resources: self.resources.into_set(),
            ttls: self.ttls,
            heartbeats: self.heartbeats,
            reused: self.reused,
            decoded: self.decoded,
            uncacheable: self.uncacheable,
        }
    }
}

/// Whether `a` and `b` are the same variant of a name: both plain, or
/// under the same constraints.
fn same_variant(a: &Resource, b: &Resource) -> bool {
    match (&a.variant, &b.variant) {
        (None, None) => true,
        (Some(a), Some(b)) => a.encoded() == b.encoded(),
        _ => false,
    }
}

/// The resource of `previous` that `any` repeats byte for byte under the
/// same name, if so: taken as it is, with no digest, memo lookup or render
/// (a SotW push repeats every resource; most are unchanged). Wrappers are
/// always decoded (their TTLs and heartbeats matter).
fn unchanged(previous: &TypeState, kind: ResourceType, any: Payload<'_>) -> Option<Arc<Resource>> {
    if !any.is_of(kind.type_url()) || previous.resources.is_empty() {
        return None;
    }
    previous.resources.holding(kind, any.value).cloned()
}

/// Decodes every element, taking from `previous` (the state the answer
/// replaces) what it repeats unchanged; the first failure fails them all.
///
/// An answer of plain resources (no wrappers: no TTLs, no heartbeats) that
/// another session took before, byte for byte in any order, is not decoded
/// again: its set is shared (`crates/cache/src/resource_set.rs`).
pub(super) fn decode_all(
    intake: &Intake,
    kind: ResourceType,
    anys: &[Payload<'_>],
    previous: Option<&TypeState>,
    parameters: &Parameters,
) -> Result<Decoded, Rejection> {
    let Some(payloads) = plain_payloads(kind, anys.iter().copied()) else {
        return Ok(Taking::all(intake, kind, anys, previous, parameters)?.done());
    };
    let mut counts = (0, 0);
    let taken = intake.answers().take(kind, &payloads, || {
        // Plain resources: no variants, so the parameters choose nothing.
        let taken = Taking::all(intake, kind, anys, previous, parameters)?;
        counts = (taken.decoded, taken.reused);
        Ok::<_, Rejection>(taken.resources)
    });
    Ok(match taken.map_err(Arc::unwrap_or_clone)? {
        Taken::Decoded(set) => Decoded::plain(set, counts),
        Taken::Shared(set) => Decoded::shared(set),
    })
}

/// The payloads of an answer of plain resources of `kind` (no wrappers:
/// no TTLs, no heartbeats), the only answers whose sets are shared; `None`
/// for any other, or an empty one.
fn plain_payloads<'a>(
    kind: ResourceType,
    anys: impl Iterator<Item = Payload<'a>>,
) -> Option<Vec<&'a [u8]>> {
    let url = kind.type_url();
    let payloads: Vec<&[u8]> = anys
        .map(|any| any.is_of(url).then_some(any.value))
        .collect::<Option<_>>()?;
    (!payloads.is_empty()).then_some(payloads)
}

/// The largest answer whose set is looked for in place, on the stream's own
/// task (see [`decode_all_off_thread`]): hashing, looking up and comparing it
/// stays short enough for a task to run between awaits.
const SHARED_IN_PLACE_MAX: usize = 256 * 1024;

/// [`decode_all`] of `response`'s resources. An answer another session took
/// already (999 of 1,000 identities after a push) is found in place
/// (`SharedAnswers::find`), which costs less than handing it to another
/// thread; anything else goes to a blocking thread (big responses take a
/// while to render), as does a big answer.
pub(super) async fn decode_all_off_thread(
    intake: &Intake,
    kind: ResourceType,
    response: SotwResponse,
    previous: Option<Arc<TypeState>>,
    parameters: Arc<Parameters>,
) -> Result<Decoded, Rejection> {
    if response.frame_len() <= SHARED_IN_PLACE_MAX {
        let payloads = plain_payloads(kind, response.resources());
        if let Some(set) = payloads.and_then(|p| intake.answers().find(kind, &p)) {
            return Ok(Decoded::shared(set));
        }
    }
    let intake = intake.clone();
    let decode = move || {
        let anys: Vec<Payload<'_>> = response.resources().collect();
        decode_all(&intake, kind, &anys, previous.as_deref(), &parameters)
    };
    tokio::task::spawn_blocking(decode)
        .await
        .unwrap_or_else(|e| Err(Rejection::Task(e.to_string())))
}

/// A response's `resource_errors` by resource name (entries naming none
/// are dropped), bounded as `cache::ResourceErrors` keeps them.
pub(super) fn reported_errors(
    errors: &[envoy_types::pb::envoy::service::discovery::v3::ResourceError],
) -> Vec<(String, ReportedError)> {
    errors
        .iter()
        .filter_map(|e| {
            let name = e.resource_name.as_ref()?.name.clone();
            let status = e.error_detail.clone().unwrap_or_default();
            (!name.is_empty()).then(|| (name, ReportedError::new(status.code, &status.message)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::Codec;
    use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};

    fn cluster(codec: &Codec, name: &str) -> Any {
        let json = format!(
            r#"{{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"{name}","connect_timeout":"1s"}}"#
        );
        let any = codec.parse_any(json.as_bytes()).unwrap();
        Any {
            type_url: any.type_url,
            value: any.value,
        }
    }

    fn wrap(name: &str, inner: Option<Any>, ttl: Option<(i64, i32)>) -> Any {
        let wrapper = Wrapper {
            name: name.into(),
            resource: inner,
            ttl: ttl.map(|(seconds, nanos)| PbDuration { seconds, nanos }),
            ..Default::default()
        };
        Any {
            type_url: RESOURCE_WRAPPER.into(),
            value: wrapper.encode_to_vec(),
        }
    }

    /// `decode_all` of `anys`.
    fn decode_all(
        r: &Intake,
        kind: ResourceType,
        anys: Vec<Any>,
        previous: Option<&TypeState>,
    ) -> Result<Decoded, Rejection> {
        let payloads: Vec<Payload<'_>> = anys.iter().map(Payload::of).collect();
        super::decode_all(r, kind, &payloads, previous, &Parameters::new())
    }

    #[test]
    fn wrappers_give_the_resource_its_ttl_and_heartbeats_their_name() {
        let r = Intake::new(Codec::embedded());
        let c = r.codec().clone();
        let decoded = decode_all(
            &r,
            ResourceType::Clusters,
            vec![
                cluster(&c, "plain"),
                wrap(
                    "wrapped",
                    Some(cluster(&c, "wrapped")),
                    Some((2, 500_000_000)),
                ),
                wrap("", Some(cluster(&c, "nameless-wrapper")), None),
                wrap("beat", None, Some((5, 0))),
            ],
            None,
        )
        .unwrap();
        let names: Vec<&str> = decoded.resources.keys().map(String::as_str).collect();
        assert_eq!(names, ["nameless-wrapper", "plain", "wrapped"]);
        // Rendered as the resource itself, never the wrapper.
        let json = String::from_utf8(decoded.resources["wrapped"].json.to_vec()).unwrap();
        assert!(
            json.starts_with(r#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster""#),
            "{json}"
        );
        assert_eq!(decoded.ttls["wrapped"], Duration::from_millis(2500));
        assert_eq!(decoded.ttls["beat"], Duration::from_secs(5));
        assert_eq!(decoded.heartbeats, BTreeSet::from(["beat".to_owned()]));
        assert!(matches!(decoded.standalone(), Err(Rejection::EmptyWrapper)));
    }

    /// What arrives is a slice of the upstream's frame; what is kept must
    /// not be, or one resource would pin the whole frame for hours.
    #[test]
    fn resources_kept_hold_bytes_of_their_own() {
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
        let r = Intake::new(Codec::embedded());
        let c = r.codec().clone();
        let response = DiscoveryResponse {
            resources: vec![
                cluster(&c, "plain"),
                wrap("wrapped", Some(cluster(&c, "wrapped")), None),
            ],
            ..Default::default()
        };
        let frame = bytes::Bytes::from(response.encode_to_vec());
        let read = SotwResponse::parse(frame.clone()).unwrap();
        let anys: Vec<Payload<'_>> = read.resources().collect();
        let decoded =
            super::decode_all(&r, ResourceType::Clusters, &anys, None, &Parameters::new()).unwrap();
        let inside = frame.as_ptr_range();
        assert_eq!(decoded.resources.len(), 2);
        for resource in decoded.resources.values() {
            assert!(
                !inside.contains(&resource.payload.as_ptr()),
                "{}",
                resource.name
            );
        }
    }

    /// Of the variants of a name, the one the parameters match is kept;
    /// the same variant twice is a duplicate whatever the parameters.
    #[test]
    fn variants_are_chosen_by_the_parameters() {
        use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
            single_constraint::ConstraintType, SingleConstraint, Type,
        };
        use envoy_types::pb::envoy::service::discovery::v3::{
            DynamicParameterConstraints, ResourceName,
        };
        let r = Intake::new(Codec::embedded());
        let c = r.codec().clone();
        let variant = |env: &str| {
            let wrapper = Wrapper {
                resource_name: Some(ResourceName {
                    name: "a".into(),
                    dynamic_parameter_constraints: Some(DynamicParameterConstraints {
                        r#type: Some(Type::Constraint(SingleConstraint {
                            key: "env".into(),
                            constraint_type: Some(ConstraintType::Value(env.into())),
                        })),
                    }),
                }),
                resource: Some(cluster(&c, "a")),
                ..Default::default()
            };
            Any {
                type_url: RESOURCE_WRAPPER.into(),
                value: wrapper.encode_to_vec(),
            }
        };
        let params = |env: &str| -> Parameters { [("env".to_owned(), env.to_owned())].into() };
        let anys = [variant("prod"), variant("test")];
        let payloads: Vec<Payload<'_>> = anys.iter().map(Payload::of).collect();
        let kind = ResourceType::Clusters;
        let test = super::decode_all(&r, kind, &payloads, None, &params("test")).unwrap();
        let json = String::from_utf8_lossy(&test.resources["a"].json).into_owned();
        assert!(json.contains(r#""value":"test""#), "{json}");
        let none = super::decode_all(&r, kind, &payloads, None, &Parameters::new()).unwrap();
        assert!(none.resources.is_empty());
        let twice = [variant("prod"), variant("prod")];
        let payloads: Vec<Payload<'_>> = twice.iter().map(Payload::of).collect();
        let err = super::decode_all(&r, kind, &payloads, None, &params("test")).unwrap_err();
        assert!(
            matches!(err, Rejection::Duplicate(ref n) if n == "a"),
            "{err}"
        );
    }

    #[test]
    fn bad_wrappers_are_rejected() {
        let r = Intake::new(Codec::embedded());
        let c = r.codec().clone();
        let reject =
            |anys: Vec<Any>| decode_all(&r, ResourceType::Clusters, anys, None).unwrap_err();
        assert!(matches!(
            reject(vec![
                cluster(&c, "a"),
                wrap("alias", Some(cluster(&c, "b")), None)
            ]),
            Rejection::NameMismatch { index: 1, .. }
        ));
        assert!(matches!(
            reject(vec![wrap("a", Some(cluster(&c, "a")), Some((-1, 0)))]),
            Rejection::NegativeTtl(_)
        ));
        assert!(matches!(
            reject(vec![wrap("", None, None)]),
            Rejection::NamelessHeartbeat
        ));
        // A name twice, whichever forms the two take.
        for twice in [
            vec![cluster(&c, "a"), wrap("a", None, None)],
            vec![wrap("a", None, None), cluster(&c, "a")],
            vec![cluster(&c, "a"), cluster(&c, "a")],
            vec![wrap("a", None, None), wrap("a", None, None)],
        ] {
            assert!(matches!(reject(twice), Rejection::Duplicate(n) if n == "a"));
        }
        // Also when both are taken unchanged from the state replaced.
        let held = decode_all(&r, ResourceType::Clusters, vec![cluster(&c, "a")], None).unwrap();
        let state = TypeState::new(
            ResourceType::Clusters,
            "v1".into(),
            "n1".into(),
            held.resources,
            Default::default(),
        );
        assert!(matches!(
            decode_all(
                &r,
                ResourceType::Clusters,
                vec![cluster(&c, "a"), cluster(&c, "a")],
                Some(&state)
            ),
            Err(Rejection::Duplicate(n)) if n == "a"
        ));
        let bytes = Any {
            type_url: RESOURCE_WRAPPER.into(),
            value: vec![0xff],
        };
        assert!(matches!(reject(vec![bytes]), Rejection::BadWrapper(_)));
    }
}
