//! Prometheus's own Kuma service discovery (`kuma_sd_configs`: its
//! `discovery/xds` package, built from the version pinned in
//! `tests/peers/kuma/go.sum`) polling the gateway, in front of a MADS
//! control plane built on go-control-plane that serves
//! `kuma.observability.v1.MonitoringAssignment` over ADS and its own
//! service, with gRPC reflection (`support/kuma_peers.rs`). The gateway is
//! given the type (`--extra-type`) and nothing else: no descriptor set.
//!
//! - Prometheus's targets equal the control plane's assignments (labels,
//!   addresses, metrics paths), over SotW, delta and the type's own
//!   service, with no failed fetch;
//! - a change reaches Prometheus within one long poll (`fetch-timeout`), not
//!   one refresh interval;
//! - with nothing changed Prometheus gets 304s and counts skipped updates;
//! - after the control plane restarts, Prometheus keeps its targets, with no
//!   failed fetch and no reconnection storm toward the control plane;
//! - with the type configured for proto field names, a client decoding the
//!   body with a plain JSON decoder (field names as the .proto spells them,
//!   as vmagent's Go structs and Kuma's own server use) reads the same
//!   assignments Prometheus turns into its targets, and Prometheus still
//!   reads them.
//!
//! What it leaves out: Grafana Alloy (it runs this same package) and
//! vmagent itself (not a Go module built here: the plain decoder stands in
//! for it).

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/kuma_peers.rs"]
mod kuma_peers;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::time::{Duration, Instant};

use inproc::InProcess;
use kuma_peers::{KumaSd, MadsServer, MADS_TYPE};
use serde_json::{json, Value};
use xds_gateway::config::ExtraTypeSpec;
use xds_gateway::config::{Config, FieldNames, UpstreamMode, UpstreamStreams};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const SKIPPED: &str = "prometheus_sd_kuma_fetch_skipped_updates_total";
const FAILURES: &str = "prometheus_sd_kuma_fetch_failures_total";

/// Kuma's MADS type as an operator adds it: named by mesh and service.
fn mads_type() -> ExtraTypeSpec {
    ExtraTypeSpec {
        field_names: FieldNames::Json,
        name: "monitoringassignments".into(),
        type_url: MADS_TYPE.into(),
        service: Some("kuma.observability.v1.MonitoringAssignmentDiscoveryService".into()),
        stem: None,
        complete_state: true,
        wildcard_when_unnamed: true,
        name_fields: vec![2, 3],
    }
}

async fn gateway(upstream: &MadsServer, mode: UpstreamMode, streams: UpstreamStreams) -> InProcess {
    gateway_with(upstream, mode, streams, mads_type()).await
}

async fn gateway_with(
    upstream: &MadsServer,
    mode: UpstreamMode,
    streams: UpstreamStreams,
    extra: ExtraTypeSpec,
) -> InProcess {
    let config = Config {
        upstream: Some(upstream.upstream()),
        upstream_mode: mode,
        upstream_streams: streams,
        extra_types: vec![extra],
        max_wait: Duration::from_secs(60),
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

fn assignments(version: u32) -> Value {
    json!([
        {"mesh": "default", "service": "web", "labels": {"team": "a"},
         "targets": [
            {"name": "web-1", "scheme": "http", "address": "127.0.0.11:9090",
             "metrics_path": "/metrics", "labels": {"zone": "z1"}},
            {"name": format!("web-{}", version + 1), "scheme": "http",
             "address": format!("127.0.0.{}:9090", 11 + version), "metrics_path": "/metrics"}]},
        {"mesh": "default", "service": "db",
         "targets": [{"name": "db-1", "scheme": "https", "address": "127.0.0.21:9187",
                      "metrics_path": "/probe"}]}
    ])
}

/// The targets Prometheus's Kuma discovery makes of `assignments`, as its
/// documentation gives them: per target `__address__`, `instance` and
/// `__meta_kuma_dataplane` (its name), `__scheme__`, `__metrics_path__`,
/// `__meta_kuma_mesh`, `__meta_kuma_service`, and a
/// `__meta_kuma_label_<key>` per label of the assignment and the target.
fn expected_targets(assignments: &Value) -> Vec<Value> {
    let mut targets = Vec::new();
    for assignment in assignments.as_array().expect("a list") {
        for target in assignment["targets"].as_array().expect("targets") {
            let mut labels = json!({
                "__address__": target["address"],
                "instance": target["name"],
                "__meta_kuma_dataplane": target["name"],
                "__scheme__": target["scheme"],
                "__metrics_path__": target["metrics_path"],
                "__meta_kuma_mesh": assignment["mesh"],
                "__meta_kuma_service": assignment["service"],
            });
            for source in [&target["labels"], &assignment["labels"]] {
                for (key, value) in source.as_object().into_iter().flatten() {
                    labels[format!("__meta_kuma_label_{key}")] = value.clone();
                }
            }
            targets.push(labels);
        }
    }
    sorted(targets)
}

fn sorted(mut targets: Vec<Value>) -> Vec<Value> {
    targets.sort_by_key(|t| t["__address__"].to_string());
    targets
}

/// Waits until Prometheus's latest targets are `expected`; when they came.
async fn until_targets(sd: &mut KumaSd, expected: &[Value], what: &str) -> Instant {
    let found = process::eventually(Duration::from_secs(30), Duration::from_millis(50), || {
        let targets = sd.targets().map(sorted);
        let at = sd.updates().last().map(|(at, _)| *at);
        async move {
            (targets.as_deref() == Some(expected))
                .then_some(at)
                .flatten()
        }
    })
    .await;
    match found {
        Some(at) => at,
        None => {
            sd.assert_running();
            panic!(
                "{what}: Prometheus's targets are {:?}, not {expected:?}\n{}",
                sd.targets(),
                sd.log()
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_the_assignments_over_every_transport() {
    rest::bounded(TEST_TIMEOUT, async {
        let test = "prometheus_sees_the_assignments_over_every_transport";
        let mads = MadsServer::start(test);
        mads.set_assignments("v1", assignments(1)).await;
        for (mode, streams) in [
            (UpstreamMode::Sotw, UpstreamStreams::Aggregated),
            (UpstreamMode::Delta, UpstreamStreams::Aggregated),
            (UpstreamMode::Sotw, UpstreamStreams::PerType),
        ] {
            let gw = gateway(&mads, mode, streams).await;
            let server = format!("http://127.0.0.1:{}", gw.rest_port);
            let mut sd = KumaSd::start(
                test,
                &server,
                "1s",
                "5s",
                &format!("prom-{mode:?}-{streams:?}"),
            );
            until_targets(
                &mut sd,
                &expected_targets(&assignments(1)),
                &format!("{mode:?} {streams:?}"),
            )
            .await;
            assert_eq!(
                sd.metric(FAILURES).await,
                0.0,
                "{mode:?} {streams:?}: {}",
                sd.log()
            );
            drop(sd);
            gw.stop().await;
        }
        // Each transport was the one used: the per-type run on Kuma's service.
        let requests = mads.requests().await;
        let apis: std::collections::BTreeSet<String> = requests["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["api"].as_str().map(str::to_owned))
            .collect();
        assert!(
            apis.len() >= 2,
            "the ADS and MADS services were both used: {apis:?}"
        );
        let nacks = requests["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["nack"] == true)
            .count();
        assert_eq!(nacks, 0, "NACKed: {requests}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_prometheus_within_one_long_poll() {
    rest::bounded(TEST_TIMEOUT, async {
        let test = "a_change_reaches_prometheus_within_one_long_poll";
        let mads = MadsServer::start(test);
        mads.set_assignments("v1", assignments(1)).await;
        let gw = gateway(&mads, UpstreamMode::Sotw, UpstreamStreams::Aggregated).await;
        let server = format!("http://127.0.0.1:{}", gw.rest_port);
        // A refresh interval far longer than the change may take.
        let refresh = Duration::from_secs(10);
        let mut sd = KumaSd::start(test, &server, "10s", "60s", "prom-long-poll");
        until_targets(&mut sd, &expected_targets(&assignments(1)), "first").await;
        // Its next poll, at the next tick, is held by the gateway.
        process::eventually(
            Duration::from_secs(20),
            Duration::from_millis(50),
            || async {
                let (_, metrics) = process::http_get(gw.admin_port, "/metrics").await.ok()?;
                metrics
                    .lines()
                    .any(|l| l == "xds_gateway_long_polls_held 1")
                    .then_some(())
            },
        )
        .await
        .expect("Prometheus's poll held as a long poll");
        let changed = Instant::now();
        mads.set_assignments("v2", assignments(2)).await;
        let at = until_targets(
            &mut sd,
            &expected_targets(&assignments(2)),
            "after the change",
        )
        .await;
        let took = at.saturating_duration_since(changed);
        eprintln!("{test}: the change reached Prometheus in {took:?}");
        assert!(
            took < refresh / 3,
            "the change took {took:?}: a refresh interval ({refresh:?}), not one long poll"
        );
        assert_eq!(sd.metric(FAILURES).await, 0.0, "{}", sd.log());
        drop(sd);
        gw.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_assignments_are_304s_and_a_restart_keeps_the_targets() {
    rest::bounded(TEST_TIMEOUT, async {
        let test = "unchanged_assignments_are_304s_and_a_restart_keeps_the_targets";
        let mads = MadsServer::start(test);
        mads.set_assignments("v1", assignments(1)).await;
        let gw = gateway(&mads, UpstreamMode::Sotw, UpstreamStreams::Aggregated).await;
        let server = format!("http://127.0.0.1:{}", gw.rest_port);
        let mut sd = KumaSd::start(test, &server, "500ms", "500ms", "prom-steady");
        let expected = expected_targets(&assignments(1));
        until_targets(&mut sd, &expected, "first").await;
        let updates = sd.updates().len();

        // Nothing changes: every poll is a 304, counted as a skipped update.
        process::eventually(
            Duration::from_secs(20),
            Duration::from_millis(200),
            || async { (sd.metric(SKIPPED).await >= 3.0).then_some(()) },
        )
        .await
        .unwrap_or_else(|| panic!("no skipped updates counted\n{}", sd.log()));
        assert_eq!(
            sd.updates().len(),
            updates,
            "no update while nothing changed"
        );

        // The control plane restarts: Prometheus keeps its targets, and
        // neither side sees a storm.
        let before = mads.requests().await["streams_opened"]
            .as_u64()
            .unwrap_or(0);
        mads.stop_grpc().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        mads.start_grpc().await;
        // The gateway reconnects when its backoff says (a few seconds at
        // most); then a second more for any storm to show.
        let opened = || async {
            mads.requests().await["streams_opened"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(before)
        };
        process::eventually(
            Duration::from_secs(30),
            Duration::from_millis(200),
            || async { (opened().await >= 1).then_some(()) },
        )
        .await
        .expect("the gateway reconnects after the control plane's restart");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let opened = opened().await;
        assert!(
            opened <= 5,
            "{opened} streams opened toward the control plane after its restart"
        );
        assert_eq!(
            sd.targets().map(sorted),
            Some(expected.clone()),
            "targets kept"
        );
        assert_eq!(
            sd.metric(FAILURES).await,
            0.0,
            "no failed fetch\n{}",
            sd.log()
        );
        // And it still follows the control plane.
        mads.set_assignments("v2", assignments(2)).await;
        until_targets(
            &mut sd,
            &expected_targets(&assignments(2)),
            "after the restart",
        )
        .await;
        drop(sd);
        gw.stop().await;
    })
    .await;
}

/// What a plain JSON decoder with the .proto's field names reads: the
/// structs a Go or Rust client writes by hand, no protobuf runtime.
#[derive(Debug, serde::Deserialize)]
struct PlainResponse {
    version_info: String,
    type_url: String,
    resources: Vec<PlainAssignment>,
}

#[derive(Debug, serde::Deserialize)]
struct PlainAssignment {
    mesh: String,
    service: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    targets: Vec<PlainTarget>,
}

#[derive(Debug, serde::Deserialize)]
struct PlainTarget {
    name: String,
    scheme: String,
    address: String,
    metrics_path: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

impl PlainAssignment {
    /// Back to the control API's form, to map as Prometheus does.
    fn as_json(&self) -> Value {
        json!({
            "mesh": self.mesh, "service": self.service, "labels": self.labels,
            "targets": self.targets.iter().map(|t| json!({
                "name": t.name, "scheme": t.scheme, "address": t.address,
                "metrics_path": t.metrics_path, "labels": t.labels,
            })).collect::<Vec<_>>(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_json_decoder_reads_what_prometheus_reads() {
    rest::bounded(TEST_TIMEOUT, async {
        let test = "a_plain_json_decoder_reads_what_prometheus_reads";
        let mads = MadsServer::start(test);
        mads.set_assignments("v1", assignments(1)).await;
        let extra = ExtraTypeSpec {
            field_names: FieldNames::Proto,
            ..mads_type()
        };
        let gw = gateway_with(
            &mads,
            UpstreamMode::Sotw,
            UpstreamStreams::Aggregated,
            extra,
        )
        .await;
        let server = format!("http://127.0.0.1:{}", gw.rest_port);
        let mut sd = KumaSd::start(test, &server, "1s", "5s", "prom-proto-names");
        let expected = expected_targets(&assignments(1));
        until_targets(&mut sd, &expected, "Prometheus, proto field names").await;
        assert_eq!(sd.metric(FAILURES).await, 0.0, "{}", sd.log());

        // The same request, as such a client sends it.
        let request = json!({"node": {"id": "plain"}, "type_url": MADS_TYPE});
        let reply = gateway::http_request(
            gw.rest_port,
            http::Method::POST,
            "/v3/discovery:monitoringassignments?fetch-timeout=2m",
            &[("content-type", "application/json")],
            bytes::Bytes::from(request.to_string()),
            Duration::from_secs(30),
        )
        .await
        .expect("an answer");
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let plain: PlainResponse = serde_json::from_slice(&reply.body).unwrap_or_else(|e| {
            panic!(
                "a plain decoder cannot read it ({e}): {}",
                String::from_utf8_lossy(&reply.body)
            )
        });
        assert_eq!(plain.type_url, MADS_TYPE);
        assert!(!plain.version_info.is_empty());
        let read: Vec<Value> = plain
            .resources
            .iter()
            .map(PlainAssignment::as_json)
            .collect();
        assert_eq!(
            expected_targets(&Value::Array(read)),
            expected,
            "what the plain decoder read"
        );

        // A client may still ask for lowerCamelCase.
        let (status, camel) = process::http_get(
            gw.rest_port,
            "/v3/discovery:monitoringassignments?node=plain&field-names=json",
        )
        .await
        .expect("an answer");
        assert_eq!(status, 200, "{camel}");
        assert!(
            camel.contains("\"versionInfo\"") && camel.contains("\"metricsPath\""),
            "{camel}"
        );
        drop(sd);
        gw.stop().await;
    })
    .await;
}
