//! Every metric the gateway exports, by name, in one place (Prometheus text
//! format via `prometheus-client`). Other modules only call the recording
//! methods here; they never spell a metric name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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

impl PollSeries {
    /// `kind`'s series of the hits, misses and durations families.
    fn of(
        kind: ResourceType,
        (hits, misses): &(Family<TypeLabel, Counter>, Family<TypeLabel, Counter>),
        seconds: &Family<TypeLabel, Histogram>,
    ) -> PollSeries {
        let label = Metrics::label(kind);
        PollSeries {
            cache_hits: Counter::clone(&hits.get_or_create(&label)),
            cache_misses: Counter::clone(&misses.get_or_create(&label)),
            seconds: Histogram::clone(&seconds.get_or_create(&label)),
        }
    }
}

/// The gateway's metrics. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabel, Counter>,
    /// By [`ResourceType::index`]; an extra type's made when first used.
    polls: Box<[OnceLock<PollSeries>]>,
    /// The families of [`PollSeries`], for an extra type's.
    poll_families: (Family<TypeLabel, Counter>, Family<TypeLabel, Counter>),
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
    request_seconds: Family<TypeLabel, Histogram>,
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
        let requests = Family::<RequestLabel, Counter>::default();
        let cache_hits = Family::<TypeLabel, Counter>::default();
        let cache_misses = Family::<TypeLabel, Counter>::default();
        let upstream_streams_open = Gauge::default();
        let upstream_switches = Family::<SwitchLabel, Counter>::default();
        let resources_decoded = Family::<TypeLabel, Counter>::default();
        let resources_reused = Family::<TypeLabel, Counter>::default();
        registry.register(
            "upstream_resources_decoded",
            "Resources of upstream answers (SotW and delta) decoded (a memo lookup, or a render), by type",
            resources_decoded.clone(),
        );
        registry.register(
            "upstream_resources_reused",
            "Resources of upstream SotW answers taken as they were, their bytes unchanged under the same name, by type",
            resources_reused.clone(),
        );
        let delta_sets_built = Family::<TypeLabel, Counter>::default();
        let delta_sets_shared = Family::<TypeLabel, Counter>::default();
        registry.register(
            "upstream_delta_sets_built",
            "What a delta session holds after a change, built by walking all of it (a first answer, or a change no other session of the upstream made to the same set first), by type",
            delta_sets_built.clone(),
        );
        registry.register(
            "upstream_delta_sets_shared",
            "What a delta session holds after a change, found as another session of the upstream made it (the same change to the same set), in work proportional to the change, by type",
            delta_sets_shared.clone(),
        );
        let resources_rendered = Counter::default();
        registry.register(
            "resources_rendered",
            "Resources of a content not seen before: decoded in full, checked against Envoy's rules and rendered (once per content, whatever the number of sessions holding it)",
            resources_rendered.clone(),
        );
        let opaque_resources = Counter::default();
        registry.register(
            "opaque_resources",
            "Resources of a content not seen before holding an Any of a type the gateway has no descriptor for, served with that Any as an xds_gateway.v1.OpaqueAny (never NACKed; /readyz names the types; --descriptor-set renders them)",
            opaque_resources.clone(),
        );
        let redacted_resources = Counter::default();
        registry.register(
            "redacted_resources",
            "Resources of a content not seen before holding key material (an inline private key in a cluster's or listener's TLS context, a Secret of a type the gateway cannot read) that was taken out because --allow-secrets is off; the log names the fields",
            redacted_resources.clone(),
        );
        registry.register(
            "upstream_switches",
            "Session streams moved between upstreams: to a failover (reason failover) or back (reason failback)",
            upstream_switches.clone(),
        );
        let long_polls_held = Gauge::default();
        let watches_open = Gauge::default();
        let watch_events = Family::<TypeLabel, Counter>::default();
        let sessions = Gauge::default();
        let stale_sessions = Gauge::default();
        let acks = Family::<TypeLabel, Counter>::default();
        let nacks = Family::<TypeLabel, Counter>::default();
        let suspected_rejections = Family::<TypeLabel, Counter>::default();
        let client_nacks = Family::<TypeLabel, Counter>::default();
        let withheld = Family::<TypeLabel, Counter>::default();
        let withheld_overdue = Family::<TypeLabel, Counter>::default();
        let invalid_resources = Family::<TypeLabel, Counter>::default();
        let ttl_expired = Family::<TypeLabel, Counter>::default();
        let request_seconds = Family::<TypeLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.5, 14))
        });
        registry.register(
            "requests",
            "REST discovery requests by type and HTTP status",
            requests.clone(),
        );
        registry.register(
            "cache_hits",
            "Responses served from an already assembled body",
            cache_hits.clone(),
        );
        registry.register(
            "cache_misses",
            "Responses that had to be assembled or waited for",
            cache_misses.clone(),
        );
        registry.register(
            "upstream_streams_open",
            "Upstream ADS streams currently open",
            upstream_streams_open.clone(),
        );
        registry.register(
            "long_polls_held",
            "REST requests held now, waiting for a change (long polls)",
            long_polls_held.clone(),
        );
        registry.register(
            "watches_open",
            "Watch streams (?watch: SSE or NDJSON) open now",
            watches_open.clone(),
        );
        registry.register(
            "watch_events",
            "Events (new versions) sent on watch streams, by type",
            watch_events.clone(),
        );
        registry.register(
            "sessions",
            "Upstream sessions (node identities) alive",
            sessions.clone(),
        );
        registry.register(
            "stale_sessions",
            "Sessions serving their last state while the upstream stream is down",
            stale_sessions.clone(),
        );
        registry.register("upstream_acks", "ACKs sent upstream", acks.clone());
        registry.register("upstream_nacks", "NACKs sent upstream", nacks.clone());
        registry.register(
            "suspected_rejections",
            "REST clients that kept presenting an older version after a newer one was served",
            suspected_rejections.clone(),
        );
        registry.register(
            "client_nacks",
            "REST polls that NACKed what they were served (error_detail set)",
            client_nacks.clone(),
        );
        registry.register(
            "withheld_answers",
            "REST polls answered 304 instead of a new version naming clusters the client was not served yet (--make-before-break)",
            withheld.clone(),
        );
        registry.register(
            "withheld_overdue",
            "New versions served though clusters they name were not served to the client yet: held back for as long as --make-before-break allows",
            withheld_overdue.clone(),
        );
        registry.register(
            "invalid_resources",
            "Upstream updates rejected (NACKed) because a resource breaks Envoy's own field rules",
            invalid_resources.clone(),
        );
        registry.register(
            "ttl_expired_resources",
            "Resources no longer served because their upstream TTL ran out without a refresh",
            ttl_expired.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "REST request latency",
            request_seconds.clone(),
        );
        let connections_open = Family::<ListenerLabel, Gauge>::default();
        let connections_refused = Family::<ListenerLabel, Counter>::default();
        let accept_errors = Family::<ListenerLabel, Counter>::default();
        registry.register(
            "connections_open",
            "Connections open now, by listener (rest, admin)",
            connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections refused because the listener was at --max-connections",
            connections_refused.clone(),
        );
        registry.register(
            "accept_errors",
            "Failed accepts (e.g. out of file descriptors), by listener",
            accept_errors.clone(),
        );
        let reloads = Family::<ReloadLabel, Counter>::default();
        registry.register(
            "reloads",
            "Reloads of a changed file (tls, auth-policy), by result (ok, error: the previous one stays)",
            reloads.clone(),
        );
        let runtime_tasks = Gauge::default();
        registry.register(
            "runtime_tasks",
            "Tokio tasks alive in the gateway's runtime (read when /metrics is scraped)",
            runtime_tasks.clone(),
        );
        let history_bytes = Gauge::default();
        registry.register(
            "history_bytes",
            "Bytes the config history holds (bounded by --history-max-bytes; read when /metrics is scraped)",
            history_bytes.clone(),
        );
        // The label sets known in advance are written out from the start,
        // at 0: a family with no sample has no line at all, and a panel or
        // an `absent()` alert would read "no data" for "none yet". A poll's
        // own series (hits, misses, durations) are made with `polls` below.
        for kind in ResourceType::all() {
            let label = Metrics::label(kind);
            for family in [
                &resources_decoded,
                &resources_reused,
                &delta_sets_built,
                &delta_sets_shared,
                &watch_events,
                &acks,
                &nacks,
                &suspected_rejections,
                &client_nacks,
                &withheld,
                &withheld_overdue,
                &invalid_resources,
                &ttl_expired,
            ] {
                let _ = family.get_or_create(&label);
            }
        }
        for listener in LISTENERS {
            let label = ListenerLabel { listener };
            let _ = connections_open.get_or_create(&label);
            let _ = connections_refused.get_or_create(&label);
            let _ = accept_errors.get_or_create(&label);
        }
        let polls: Box<[OnceLock<PollSeries>]> = (0..MAX_TYPES).map(|_| OnceLock::new()).collect();
        let poll_families = (cache_hits, cache_misses);
        for kind in ResourceType::all() {
            let _ = polls[kind.index()].set(PollSeries::of(kind, &poll_families, &request_seconds));
        }
        Metrics {
            registry,
            reloads,
            runtime_tasks,
            history_bytes,
            connections_open,
            connections_refused,
            accept_errors,
            requests,
            polls,
            poll_families,
            upstream_streams_open,
            upstream_switches,
            resources_decoded,
            resources_reused,
            resources_rendered,
            opaque_resources,
            redacted_resources,
            delta_sets_built,
            delta_sets_shared,
            long_polls_held,
            watches_open,
            watch_events,
            sessions,
            stale_sessions,
            acks,
            nacks,
            suspected_rejections,
            client_nacks,
            withheld,
            withheld_overdue,
            invalid_resources,
            ttl_expired,
            request_seconds,
        }
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

    fn polls(&self, kind: ResourceType) -> &PollSeries {
        self.polls[kind.index()]
            .get_or_init(|| PollSeries::of(kind, &self.poll_families, &self.request_seconds))
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
        let label = Self::label(kind);
        self.resources_decoded
            .get_or_create(&label)
            .inc_by(decoded as u64);
        self.resources_reused
            .get_or_create(&label)
            .inc_by(reused as u64);
    }

    /// A delta session's held set of `kind` after a change: built anew
    /// (`built`), or found as another session made it.
    pub fn delta_set(&self, kind: ResourceType, built: bool) {
        let family = if built {
            &self.delta_sets_built
        } else {
            &self.delta_sets_shared
        };
        family.get_or_create(&Self::label(kind)).inc();
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
        self.watch_events.get_or_create(&Self::label(kind)).inc();
    }

    pub fn set_sessions(&self, n: usize) {
        self.sessions.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn set_history_bytes(&self, bytes: u64) {
        self.history_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub fn set_stale_sessions(&self, n: usize) {
        self.stale_sessions
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn ack(&self, kind: ResourceType) {
        self.acks.get_or_create(&Self::label(kind)).inc();
    }

    pub fn nack(&self, kind: ResourceType) {
        self.nacks.get_or_create(&Self::label(kind)).inc();
    }

    pub fn suspected_rejection(&self, kind: ResourceType) {
        self.suspected_rejections
            .get_or_create(&Self::label(kind))
            .inc();
    }

    /// A REST poll that NACKed what it was served.
    pub fn client_nack(&self, kind: ResourceType) {
        self.client_nacks.get_or_create(&Self::label(kind)).inc();
    }

    /// A REST poll answered 304 while its new version names clusters its
    /// client was not served yet (`--make-before-break`).
    pub fn withheld(&self, kind: ResourceType) {
        self.withheld.get_or_create(&Self::label(kind)).inc();
    }

    /// A new version served although clusters it names were not served to
    /// the client yet: it was held back for as long as it may be.
    pub fn withheld_overdue(&self, kind: ResourceType) {
        self.withheld_overdue
            .get_or_create(&Self::label(kind))
            .inc();
    }

    /// An upstream update rejected because a resource breaks Envoy's rules.
    pub fn invalid_resource(&self, kind: ResourceType) {
        self.invalid_resources
            .get_or_create(&Self::label(kind))
            .inc();
    }

    /// `count` resources of `kind` expired (their TTL ran out).
    pub fn ttl_expired(&self, kind: ResourceType, count: usize) {
        self.ttl_expired
            .get_or_create(&Self::label(kind))
            .inc_by(count as u64);
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
            self.runtime_tasks
                .set(i64::try_from(tasks).unwrap_or(i64::MAX));
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
