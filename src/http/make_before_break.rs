//! Make-before-break for REST clients (`--make-before-break`): a new
//! version of route configurations or listeners is held back from a client
//! until the clusters it sends traffic to were served to that client.
//!
//! Over ADS one stream orders every type, and a control plane pushes
//! clusters before the routes that name them. A REST client polls each type
//! on its own: an Envoy can take a route configuration naming a cluster its
//! CDS poll has not brought yet, and answers requests for it with 503 `NC`
//! until it does. A cluster counts as served to a client when the latest
//! body of one of its CDS subscriptions held it (the client book keeps
//! which resources each body was made from) and, for an EDS cluster, when
//! the latest body of one of its EDS subscriptions held the cluster's
//! endpoints: Envoy warms an EDS cluster, and keeps it from requests, until
//! they come.
//!
//! What is held back: a body of routes or listeners that names such a
//! cluster, when the cluster is in the node's current clusters (a cluster
//! the control plane does not serve cannot come, and is not waited for;
//! where the source knows no per-node clusters, federation and fetch, every
//! unserved one is waited for). It is answered 304 at the version the
//! client presented, and a long poll waits on until the clusters are served
//! (looking again every [`RECHECK`]). Never held back:
//! - a poll presenting no version (a 304 would not end Envoy's initial
//!   fetch),
//! - a poll through a proxy that names no client (it is not one client),
//! - a version held back from this subscription for the whole
//!   `--make-before-break` already: it is then served, logged and counted.
//!
//! A watch stream is neither held back nor counts as served.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use tracing::{debug, warn};

use super::asked::Answered;
use crate::cache::{Answer, ParsedRequest, SubscriptionKey, TypeState};
use crate::log_escape::Escaped;
use crate::metrics::Metrics;
use crate::observe::ClientBook;
use crate::store::Polled;
use crate::xds::references::{clusters_named, endpoints_name};
use crate::xds::ResourceType;

/// How often a long poll held back looks again whether what it waits for
/// was served (the client's other polls do not change this type's state).
pub(super) const RECHECK: Duration = Duration::from_millis(50);

/// Versions held back at once, across every client (each entry is a key and
/// an instant).
const WITHHELD_KEPT: u64 = 64 * 1024;

/// One version held back from one subscription.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WithheldKey {
    kind: ResourceType,
    subscription: SubscriptionKey,
    version: String,
}

/// The make-before-break rule and since when each version has been held
/// back.
#[derive(Debug)]
pub(super) struct MakeBeforeBreak {
    /// How long a version may be held back; zero: never.
    limit: Duration,
    withheld: Cache<WithheldKey, Instant>,
}

impl MakeBeforeBreak {
    /// The rule, holding versions back for at most `limit` (zero: off).
    pub(super) fn new(limit: Duration) -> MakeBeforeBreak {
        MakeBeforeBreak {
            limit,
            withheld: Cache::builder()
                .max_capacity(WITHHELD_KEPT)
                .time_to_idle(limit.max(Duration::from_secs(1)) * 2)
                .build(),
        }
    }

    /// Whether the client book keeps the resources of each body.
    pub(super) fn on(&self) -> bool {
        !self.limit.is_zero()
    }

    /// The answer `poll` gets instead of `answer` (from `polled`): a 304 at
    /// the version it presented while the body names clusters its client
    /// was not served; `None`: `answer` stands.
    pub(super) fn instead(
        &self,
        book: &ClientBook,
        metrics: &Metrics,
        poll: &Answered<'_>,
        polled: &Polled,
        answer: &Answer,
    ) -> Option<Answer> {
        let request = poll.request;
        let presented = request.version_info();
        if !self.on()
            || !matches!(poll.kind, ResourceType::Routes | ResourceType::Listeners)
            || !matches!(answer, Answer::Body { .. })
            || presented.is_empty()
            || !poll.remote.is_one_client()
        {
            return None;
        }
        let remote = poll.remote.ip();
        let key = WithheldKey {
            kind: poll.kind,
            subscription: request.subscription(remote),
            version: answer.version().to_owned(),
        };
        let clusters = polled.sibling(ResourceType::Clusters);
        let named = polled
            .selected(request.names())
            .flat_map(|r| clusters_named(poll.kind, &r.payload));
        let missing = unserved(book, request, remote, named, clusters.as_deref());
        if missing.is_empty() {
            self.withheld.invalidate(&key);
            return None;
        }
        let now = Instant::now();
        let since = self.withheld.get_with(key.clone(), || now);
        let node = Escaped(request.node_id());
        if now.duration_since(since) >= self.limit {
            self.withheld.invalidate(&key);
            metrics.withheld_overdue(poll.kind);
            warn!(
                %node, kind = %poll.kind, version = %Escaped(answer.version()),
                missing = ?missing, limit = ?self.limit,
                "served a version naming clusters this REST client was not served: \
                 held back for as long as --make-before-break allows"
            );
            return None;
        }
        metrics.withheld(poll.kind);
        debug!(
            %node, kind = %poll.kind, version = %Escaped(answer.version()), missing = ?missing,
            "held back a version naming clusters this REST client was not served yet"
        );
        Some(Answer::NotModified {
            version: presented.to_owned(),
        })
    }
}

/// Of the clusters `named`, those `request`'s client (from `remote`) was
/// not served, or not the endpoints of; with `clusters`, the node's
/// current ones, only those it holds.
fn unserved(
    book: &ClientBook,
    request: &ParsedRequest,
    remote: Option<std::net::IpAddr>,
    named: impl Iterator<Item = String>,
    clusters: Option<&TypeState>,
) -> Vec<String> {
    let named: BTreeSet<String> = named.collect();
    named
        .into_iter()
        .filter(|name| clusters.is_none_or(|state| state.resources.contains_key(name)))
        .filter(|name| {
            let Some(cluster) = book.holds(request, remote, ResourceType::Clusters, name) else {
                return true;
            };
            endpoints_name(&cluster.payload).is_some_and(|endpoints| {
                book.holds(request, remote, ResourceType::Endpoints, &endpoints)
                    .is_none()
            })
        })
        .collect()
}
