//! Every metric the gateway exports, by name, in one place (Prometheus text
//! format via `prometheus-client`). Other modules only call the recording
//! methods here; they never spell a metric name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use std::sync::OnceLock;

use xds_gateway_xds::{ResourceType, MAX_TYPES};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabel {
    r#type: &'static str,
    status: u16,
}

/// The gateway's listeners, as the `listener` label names them.
const LISTENERS: [&str; 2] = ["rest", "admin"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabel {
    listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SwitchLabel {
    from: String,
    to: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabel {
    file: &'static str,
    result: &'static str,
}

/// Keeps a connection (or a watch stream) counted as open while it lives.
#[derive(Debug)]
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Keeps a gauge raised while it lives (see [`Metrics::long_poll_held`]).
#[derive(Debug)]
pub struct HeldGuard<'a>(&'a Gauge);

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The series every answered poll of one type moves, taken from their families
/// once: a family's lookup is a lock and a SipHash of the label, and a poll
/// moves three. They are written out at 0 from the start anyway.
#[derive(Debug)]
struct PollSeries {
    cache_hits: Counter,
    cache_misses: Counter,
    seconds: Histogram,
}

/// Registers a new `M` as `name` and returns it (a handle to what is registered).
fn add<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// Adds `by` to `family`'s series of `kind`.
fn count(family: &Family<TypeLabel, Counter>, kind: ResourceType, by: u64) {
    family.get_or_create(&Metrics::label(kind)).inc_by(by);
}

/// Sets `gauge` to `n`, or to `i64::MAX` when `n` does not fit.
fn set(gauge: &Gauge, n: impl TryInto<i64>) {
    gauge.set(n.try_into().unwrap_or(i64::MAX));
}

/// The gateway's metrics. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabel, Counter>,
    /// By [`ResourceType::index`]; an extra type's made when first used.
    polls: Box<[OnceLock<PollSeries>]>,
    /// The families of [`PollSeries`], for an extra type's.
    cache_hits: Family<TypeLabel, Counter>,
    cache_misses: Family<TypeLabel, Counter>,
    request_seconds: Family<TypeLabel, Histogram>,
    upstream_streams_open: Gauge,
    upstream_switches: Family<SwitchLabel, Counter>,
    resources_decoded: Family<TypeLabel, Counter>,
    resources_reused: Family<TypeLabel, Counter>,
    resources_rendered: Counter,
    opaque_resources: Counter,
    redacted_resources: Counter,
    delta_sets_built: Family<TypeLabel, Counter>,
    delta_sets_shared: Family<TypeLabel, Counter>,
    long_polls_held: Gauge,
    watches_open: Gauge,
    watch_events: Family<TypeLabel, Counter>,
    sessions: Gauge,
    stale_sessions: Gauge,
    acks: Family<TypeLabel, Counter>,
    nacks: Family<TypeLabel, Counter>,
    suspected_rejections: Family<TypeLabel, Counter>,
    client_nacks: Family<TypeLabel, Counter>,
    withheld: Family<TypeLabel, Counter>,
    withheld_overdue: Family<TypeLabel, Counter>,
    invalid_resources: Family<TypeLabel, Counter>,
    ttl_expired: Family<TypeLabel, Counter>,
    connections_open: Family<ListenerLabel, Gauge>,
    connections_refused: Family<ListenerLabel, Counter>,
    accept_errors: Family<ListenerLabel, Counter>,
    reloads: Family<ReloadLabel, Counter>,
    runtime_tasks: Gauge,
    history_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("xds_gateway");
        let r = &mut registry;
        let request_seconds = Family::<TypeLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.5, 14))
        });
        // Registered in the order the exposition lists them.
        let metrics = Metrics {
            resources_decoded: add(
                r,
                "upstream_resources_decoded",
                "Resources of upstream answers (SotW and delta) decoded (a memo lookup, or a render), by type",
            ),
            resources_reused: add(
                r,
                "upstream_resources_reused",
                "Resources of upstream SotW answers taken as they were, their bytes unchanged under the same name, by type",
            ),
            delta_sets_built: add(
                r,
                "upstream_delta_sets_built",
                "What a delta session holds after a change, built by walking all of it (a first answer, or a change no other session of the upstream made to the same set first), by type",
            ),
            delta_sets_shared: add(
                r,
                "upstream_delta_sets_shared",
                "What a delta session holds after a change, found as another session of the upstream made it (the same change to the same set), in work proportional to the change, by type",
            ),
            resources_rendered: add(
                r,
                "resources_rendered",
                "Resources of a content not seen before: decoded in full, checked against Envoy's rules and rendered (once per content, whatever the number of sessions holding it)",
            ),
            opaque_resources: add(
                r,
                "opaque_resources",
                "Resources of a content not seen before holding an Any of a type the gateway has no descriptor for, served with that Any as an xds_gateway.v1.OpaqueAny (never NACKed; /readyz names the types; --descriptor-set renders them)",
            ),
            redacted_resources: add(
                r,
                "redacted_resources",
                "Resources of a content not seen before holding key material (an inline private key in a cluster's or listener's TLS context, a Secret of a type the gateway cannot read) that was taken out because --allow-secrets is off; the log names the fields",
            ),
            upstream_switches: add(
                r,
                "upstream_switches",
                "Session streams moved between upstreams: to a failover (reason failover) or back (reason failback)",
            ),
            requests: add(r, "requests", "REST discovery requests by type and HTTP status"),
            cache_hits: add(r, "cache_hits", "Responses served from an already assembled body"),
            cache_misses: add(r, "cache_misses", "Responses that had to be assembled or waited for"),
            upstream_streams_open: add(r, "upstream_streams_open", "Upstream ADS streams currently open"),
            long_polls_held: add(
                r,
                "long_polls_held",
                "REST requests held now, waiting for a change (long polls)",
            ),
            watches_open: add(r, "watches_open", "Watch streams (?watch: SSE or NDJSON) open now"),
            watch_events: add(r, "watch_events", "Events (new versions) sent on watch streams, by type"),
            sessions: add(r, "sessions", "Upstream sessions (node identities) alive"),
            stale_sessions: add(
                r,
                "stale_sessions",
                "Sessions serving their last state while the upstream stream is down",
            ),
            acks: add(r, "upstream_acks", "ACKs sent upstream"),
            nacks: add(r, "upstream_nacks", "NACKs sent upstream"),
            suspected_rejections: add(
                r,
                "suspected_rejections",
                "REST clients that kept presenting an older version after a newer one was served",
            ),
            client_nacks: add(
                r,
                "client_nacks",
                "REST polls that NACKed what they were served (error_detail set)",
            ),
            withheld: add(
                r,
                "withheld_answers",
                "REST polls answered 304 instead of a new version naming clusters the client was not served yet (--make-before-break)",
            ),
            withheld_overdue: add(
                r,
                "withheld_overdue",
                "New versions served though clusters they name were not served to the client yet: held back for as long as --make-before-break allows",
            ),
            invalid_resources: add(
                r,
                "invalid_resources",
                "Upstream updates rejected (NACKed) because a resource breaks Envoy's own field rules",
            ),
            ttl_expired: add(
                r,
                "ttl_expired_resources",
                "Resources no longer served because their upstream TTL ran out without a refresh",
            ),
            request_seconds: {
                r.register("request_duration_seconds", "REST request latency", request_seconds.clone());
                request_seconds
            },
            connections_open: add(
                r,
                "connections_open",
                "Connections open now, by listener (rest, admin)",
            ),
            connections_refused: add(
                r,
                "connections_refused",
                "Connections refused because the listener was at --max-connections",
            ),
            accept_errors: add(
                r,
                "accept_errors",
                "Failed accepts (e.g. out of file descriptors), by listener",
            ),
            reloads: add(
                r,
                "reloads",
                "Reloads of a changed file (tls, auth-policy), by result (ok, error: the previous one stays)",
            ),
            runtime_tasks: add(
                r,
                "runtime_tasks",
                "Tokio tasks alive in the gateway's runtime (read when /metrics is scraped)",
            ),
            history_bytes: add(
                r,
                "history_bytes",
                "Bytes the config history holds (bounded by --history-max-bytes; read when /metrics is scraped)",
            ),
            polls: (0..MAX_TYPES).map(|_| OnceLock::new()).collect(),
            registry,
        };
        // The label sets known in advance are written out from the start,
        // at 0: a family with no sample has no line at all, and a panel or
        // an `absent()` alert would read "no data" for "none yet". A poll's
        // own series (hits, misses, durations) are made with `polls`.
        for kind in ResourceType::all() {
            let label = Metrics::label(kind);
            for family in [
                &metrics.resources_decoded,
                &metrics.resources_reused,
                &metrics.delta_sets_built,
                &metrics.delta_sets_shared,
                &metrics.watch_events,
                &metrics.acks,
                &metrics.nacks,
                &metrics.suspected_rejections,
                &metrics.client_nacks,
                &metrics.withheld,
                &metrics.withheld_overdue,
                &metrics.invalid_resources,
                &metrics.ttl_expired,
            ] {
                let _ = family.get_or_create(&label);
            }
            let _ = metrics.polls(kind);
        }
        for listener in LISTENERS {
            let label = ListenerLabel { listener };
            let _ = metrics.connections_open.get_or_create(&label);
            let _ = metrics.connections_refused.get_or_create(&label);
            let _ = metrics.accept_errors.get_or_create(&label);
        }
        metrics
    }

    fn label(kind: ResourceType) -> TypeLabel {
        TypeLabel {
            r#type: kind.short_name(),
        }
    }

    /// One finished REST request (`kind` is `None` for unknown paths).
    pub fn request(&self, kind: Option<ResourceType>, status: u16, seconds: f64) {
        let name = kind.map_or("none", ResourceType::short_name);
        self.requests
            .get_or_create(&RequestLabel {
                r#type: name,
                status,
            })
            .inc();
        match kind {
            Some(kind) => self.polls(kind).seconds.observe(seconds),
            None => self
                .request_seconds
                .get_or_create(&TypeLabel { r#type: name })
                .observe(seconds),
        }
    }

    /// `kind`'s series of the hits, misses and durations families.
    fn polls(&self, kind: ResourceType) -> &PollSeries {
        self.polls[kind.index()].get_or_init(|| {
            let label = Metrics::label(kind);
            PollSeries {
                cache_hits: Counter::clone(&self.cache_hits.get_or_create(&label)),
                cache_misses: Counter::clone(&self.cache_misses.get_or_create(&label)),
                seconds: Histogram::clone(&self.request_seconds.get_or_create(&label)),
            }
        })
    }

    pub fn cache_hit(&self, kind: ResourceType) {
        self.polls(kind).cache_hits.inc();
    }

    pub fn cache_miss(&self, kind: ResourceType) {
        self.polls(kind).cache_misses.inc();
    }

    /// An upstream answer of `kind`: `decoded` resources decoded, `reused`
    /// taken unchanged from the state it replaced.
    pub fn resources_taken(&self, kind: ResourceType, decoded: usize, reused: usize) {
        count(&self.resources_decoded, kind, decoded as u64);
        count(&self.resources_reused, kind, reused as u64);
    }

    /// A delta session's held set of `kind` after a change: built anew
    /// (`built`), or found as another session made it.
    pub fn delta_set(&self, kind: ResourceType, built: bool) {
        let family = if built {
            &self.delta_sets_built
        } else {
            &self.delta_sets_shared
        };
        count(family, kind, 1);
    }

    /// The counter of resources rendered (for the intake to count with).
    pub fn resources_rendered(&self) -> Counter {
        self.resources_rendered.clone()
    }

    /// The counter of resources rendered with an opaque `Any` (for the
    /// intake to count with).
    pub fn opaque_resources(&self) -> Counter {
        self.opaque_resources.clone()
    }

    /// The counter of resources rendered with key material taken out (for
    /// the intake to count with).
    pub fn redacted_resources(&self) -> Counter {
        self.redacted_resources.clone()
    }

    /// A session's stream moved from upstream `from` to `to`.
    pub fn upstream_switched(&self, from: &str, to: &str, failback: bool) {
        let label = SwitchLabel {
            from: from.to_owned(),
            to: to.to_owned(),
            reason: if failback { "failback" } else { "failover" },
        };
        self.upstream_switches.get_or_create(&label).inc();
    }

    pub fn stream_opened(&self) {
        self.upstream_streams_open.inc();
    }

    pub fn stream_closed(&self) {
        self.upstream_streams_open.dec();
    }

    pub fn streams_open(&self) -> i64 {
        self.upstream_streams_open.get()
    }

    /// Counts a long poll as held until the guard drops.
    pub fn long_poll_held(&self) -> HeldGuard<'_> {
        self.long_polls_held.inc();
        HeldGuard(&self.long_polls_held)
    }

    /// Counts a watch stream as open until the guard drops (the guard
    /// lives as long as the stream's body).
    pub fn watch_opened(&self) -> OpenConnection {
        let gauge = self.watches_open.clone();
        gauge.inc();
        OpenConnection(gauge)
    }

    /// One event (a new version) sent on a watch of `kind`.
    pub fn watch_event(&self, kind: ResourceType) {
        count(&self.watch_events, kind, 1);
    }

    pub fn set_sessions(&self, n: usize) {
        set(&self.sessions, n);
    }

    pub fn set_history_bytes(&self, bytes: u64) {
        set(&self.history_bytes, bytes);
    }

    pub fn set_stale_sessions(&self, n: usize) {
        set(&self.stale_sessions, n);
    }

    pub fn ack(&self, kind: ResourceType) {
        count(&self.acks, kind, 1);
    }

    pub fn nack(&self, kind: ResourceType) {
        count(&self.nacks, kind, 1);
    }

    pub fn suspected_rejection(&self, kind: ResourceType) {
        count(&self.suspected_rejections, kind, 1);
    }

    /// A REST poll that NACKed what it was served.
    pub fn client_nack(&self, kind: ResourceType) {
        count(&self.client_nacks, kind, 1);
    }

    /// A REST poll answered 304 while its new version names clusters its
    /// client was not served yet (`--make-before-break`).
    pub fn withheld(&self, kind: ResourceType) {
        count(&self.withheld, kind, 1);
    }

    /// A new version served although clusters it names were not served to
    /// the client yet: it was held back for as long as it may be.
    pub fn withheld_overdue(&self, kind: ResourceType) {
        count(&self.withheld_overdue, kind, 1);
    }

    /// An upstream update rejected because a resource breaks Envoy's rules.
    pub fn invalid_resource(&self, kind: ResourceType) {
        count(&self.invalid_resources, kind, 1);
    }

    /// `n` resources of `kind` expired (their TTL ran out).
    pub fn ttl_expired(&self, kind: ResourceType, n: usize) {
        count(&self.ttl_expired, kind, n as u64);
    }

    /// Counts a connection of `listener` as open until the guard drops.
    pub fn connection_opened(&self, listener: &'static str) -> OpenConnection {
        let gauge = self
            .connections_open
            .get_or_create(&ListenerLabel { listener })
            .clone();
        gauge.inc();
        OpenConnection(gauge)
    }

    pub fn connection_refused(&self, listener: &'static str) {
        self.connections_refused
            .get_or_create(&ListenerLabel { listener })
            .inc();
    }

    pub fn accept_error(&self, listener: &'static str) {
        self.accept_errors
            .get_or_create(&ListenerLabel { listener })
            .inc();
    }

    /// A changed `file` (tls, auth-policy) was reloaded, or failed to.
    pub fn reloaded(&self, file: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads
            .get_or_create(&ReloadLabel { file, result })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let tasks = runtime.metrics().num_alive_tasks();
            set(&self.runtime_tasks, tasks);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics unless every one of `lines` is a whole line of `text`.
    fn assert_has_lines(text: &str, lines: &[&str]) {
        for line in lines {
            assert!(
                text.lines().any(|l| l == *line),
                "{line} missing from:\n{text}"
            );
        }
    }

    /// The label sets known in advance are there before anything
    /// happens, at 0, so a dashboard reads 0 rather than "no data".
    #[test]
    fn known_label_sets_are_exported_at_zero_from_the_start() {
        let text = Metrics::new().encode();
        assert_has_lines(
            &text,
            &[
                "xds_gateway_upstream_nacks_total{type=\"clusters\"} 0",
                "xds_gateway_suspected_rejections_total{type=\"endpoints\"} 0",
                "xds_gateway_cache_hits_total{type=\"secrets\"} 0",
                "xds_gateway_connections_refused_total{listener=\"admin\"} 0",
                "xds_gateway_connections_open{listener=\"rest\"} 0",
                "xds_gateway_request_duration_seconds_count{type=\"listeners\"} 0",
            ],
        );
    }

    /// The series a poll moves, held apart from their families, are the
    /// ones exported, each under its own type's label.
    #[test]
    fn a_poll_moves_its_own_types_series() {
        let metrics = Metrics::new();
        metrics.cache_hit(ResourceType::Endpoints);
        metrics.cache_hit(ResourceType::Endpoints);
        metrics.cache_miss(ResourceType::Clusters);
        metrics.request(Some(ResourceType::Routes), 200, 0.5);
        metrics.request(None, 404, 0.5);
        let text = metrics.encode();
        assert_has_lines(
            &text,
            &[
                "xds_gateway_cache_hits_total{type=\"endpoints\"} 2",
                "xds_gateway_cache_hits_total{type=\"clusters\"} 0",
                "xds_gateway_cache_misses_total{type=\"clusters\"} 1",
                "xds_gateway_cache_misses_total{type=\"endpoints\"} 0",
                "xds_gateway_request_duration_seconds_count{type=\"routes\"} 1",
                "xds_gateway_request_duration_seconds_count{type=\"listeners\"} 0",
                "xds_gateway_request_duration_seconds_count{type=\"none\"} 1",
                "xds_gateway_requests_total{type=\"routes\",status=\"200\"} 1",
            ],
        );
    }
}
