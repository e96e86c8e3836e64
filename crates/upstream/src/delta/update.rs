//! Delta responses as data: what one response adds, marks absent or
//! removes ([`Update`], validated as a whole), and the
//! subscribe/unsubscribe diff between two subscriptions. (The published
//! version digest is the held sets', in `upstream/held.rs`.)

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;

use super::WILDCARD;
use crate::cache::{Coverage, Intake, ReportedError, WrapperName, NOT_FOUND};
use crate::decode::{
    decode_one, decode_payload, name_and_constraints, reported_errors, ttl_of, Rejection,
};
use crate::held::HeldResource;
use crate::wire::Payload;
use crate::xds::dynamic_parameters::{matches, Parameters};
use crate::xds::ResourceType;

/// What to send to move the upstream from subscription `sent` to `want`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Diff {
    pub(super) subscribe: Vec<String>,
    pub(super) unsubscribe: Vec<String>,
}

impl Diff {
    pub(super) fn is_empty(&self) -> bool {
        self.subscribe.is_empty() && self.unsubscribe.is_empty()
    }
}

/// The subscribe/unsubscribe lists taking `sent` to `want` (`"*"` first,
/// then names in order). No interest at all is an empty `want`: everything
/// is unsubscribed.
pub(super) fn diff(sent: &Coverage, want: &Coverage) -> Diff {
    let mut out = Diff::default();
    if want.wildcard && !sent.wildcard {
        out.subscribe.push(WILDCARD.to_owned());
    }
    if sent.wildcard && !want.wildcard {
        out.unsubscribe.push(WILDCARD.to_owned());
    }
    out.subscribe
        .extend(want.names.difference(&sent.names).cloned());
    out.unsubscribe
        .extend(sent.names.difference(&want.names).cloned());
    out
}

/// A decoded response, validated as a whole (nothing applied yet).
#[derive(Debug, Default)]
pub(super) struct Update {
    /// Added or changed resources, by name.
    pub(super) added: Vec<(String, HeldResource)>,
    /// Names sent without a payload, with their version: a TTL heartbeat if
    /// the gateway holds that version, else "does not exist".
    pub(super) name_only: Vec<(String, String)>,
    /// Names the upstream says are gone (removed, or NOT_FOUND).
    pub(super) removed: Vec<String>,
    /// The TTL each added or name-only resource came with (`None`: none).
    pub(super) ttls: Vec<(String, Option<Duration>)>,
    /// What the upstream reported wrong with single resources (NOT_FOUND
    /// is in `removed` instead).
    pub(super) errors: Vec<(String, ReportedError)>,
    /// Added resources the upstream said proxies may not cache
    /// (`cache_control.do_not_cache`), each rendered for this session alone.
    pub(super) uncacheable: BTreeSet<String>,
}

/// Decodes and checks every part of `response`; the first problem rejects
/// it all (as Envoy does).
///
/// A variant (a `resource_name` with dynamic parameter constraints) whose
/// constraints do not match `parameters` answers none of the session's
/// subscriptions: left out, as is a removal naming such a variant. Of two
/// variants of one name that match, the first is kept (TP2 leaves the
/// choice undefined). A delta-only type's constraints are not read.
pub(super) fn decode_update(
    intake: &Intake,
    kind: ResourceType,
    response: DeltaDiscoveryResponse,
    parameters: &Parameters,
) -> Result<Update, Rejection> {
    let mut update = Update::default();
    let mut seen = BTreeSet::new();
    let mut variants_seen = BTreeSet::new();
    for (index, mut resource) in response.resources.into_iter().enumerate() {
        let constraints =
            name_and_constraints(&mut resource, index)?.filter(|_| !kind.delta_only());
        let wrapper_name = resource.name.clone();
        let at = |e: Rejection| Rejection::At {
            index,
            name: wrapper_name.clone(),
            reason: Box::new(e),
        };
        let ttl = ttl_of(resource.ttl.as_ref(), &wrapper_name).map_err(at)?;
        let do_not_cache = resource.cache_control.is_some_and(|c| c.do_not_cache);
        match resource.resource {
            Some(any) => {
                let payload = Payload::of(&any);
                let decoded = if kind.delta_only() {
                    if wrapper_name.is_empty() {
                        let type_name = kind.message_name();
                        return Err(Rejection::Unnamed { index, type_name });
                    }
                    let named = WrapperName {
                        name: wrapper_name.clone(),
                        aliases: resource.aliases.clone(),
                        version: resource.version.clone(),
                    };
                    decode_payload(kind, payload, |p| intake.delta_named(kind, named, p))
                } else if kind.is_extra() && !wrapper_name.is_empty() {
                    // An added type: the wrapper names it, whatever its
                    // name fields hold (a SotW answer names none).
                    let name = wrapper_name.clone();
                    decode_payload(kind, payload, |p| intake.resource_named(kind, name, p))
                } else if do_not_cache {
                    decode_payload(kind, payload, |p| intake.resource_unshared(kind, p))
                } else {
                    decode_one(intake, kind, payload)
                };
                let decoded = decoded.map_err(at)?;
                if !wrapper_name.is_empty() && wrapper_name != decoded.name {
                    return Err(Rejection::NameMismatch {
                        index,
                        wrapper: wrapper_name,
                        inner: decoded.name.clone(),
                    });
                }
                let decoded = match constraints {
                    Some(constraints) => intake
                        .variant(decoded, constraints)
                        .map_err(|e| at(e.into()))?,
                    None => decoded,
                };
                let name = decoded.name.clone();
                let encoded = decoded.variant.as_ref().map(|v| v.encoded().to_vec());
                if !variants_seen.insert((name.clone(), encoded)) {
                    return Err(Rejection::Duplicate(name));
                }
                let unmatched = decoded
                    .variant
                    .as_ref()
                    .is_some_and(|v| !v.matches(parameters));
                // Left out, or another variant of the name matched first.
                if unmatched || !seen.insert(name.clone()) {
                    continue;
                }
                update.ttls.push((name.clone(), ttl));
                if do_not_cache {
                    update.uncacheable.insert(name.clone());
                }
                update.added.push((
                    name,
                    HeldResource {
                        version: resource.version,
                        resource: decoded,
                    },
                ));
            }
            None => {
                if wrapper_name.is_empty() {
                    return Err(Rejection::Nameless(index));
                }
                if !seen.insert(wrapper_name.clone()) {
                    return Err(Rejection::Duplicate(wrapper_name));
                }
                update.ttls.push((wrapper_name.clone(), ttl));
                update.name_only.push((wrapper_name, resource.version));
            }
        }
    }
    update.errors = reported_errors(&response.resource_errors)
        .into_iter()
        .filter(|(_, e)| e.code != NOT_FOUND)
        .collect();
    let not_found = response
        .resource_errors
        .into_iter()
        .filter(|e| e.error_detail.as_ref().is_some_and(|s| s.code == NOT_FOUND))
        .filter_map(|e| e.resource_name.map(|n| n.name));
    let removed_variants = response.removed_resource_names.into_iter().filter(|n| {
        n.dynamic_parameter_constraints
            .as_ref()
            .is_none_or(|c| kind.delta_only() || matches(c, parameters))
    });
    let removed: BTreeSet<String> = response
        .removed_resources
        .into_iter()
        .chain(removed_variants.map(|n| n.name))
        .chain(not_found)
        .filter(|n| !n.is_empty())
        .collect();
    if let Some(both) = removed.iter().find(|n| seen.contains(*n)) {
        return Err(Rejection::UpdatedAndRemoved(both.clone()));
    }
    update.removed = removed.into_iter().collect();
    Ok(update)
}

/// [`decode_update`] on a blocking thread (big responses take a while).
pub(super) async fn decode_update_off_thread(
    intake: &Intake,
    kind: ResourceType,
    response: DeltaDiscoveryResponse,
    parameters: std::sync::Arc<Parameters>,
) -> Result<Update, Rejection> {
    let intake = intake.clone();
    tokio::task::spawn_blocking(move || decode_update(&intake, kind, response, &parameters))
        .await
        .unwrap_or_else(|e| Err(Rejection::Task(e.to_string())))
}
