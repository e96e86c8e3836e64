//! End to end: a real Envoy 1.40 polling the gateway over REST xDS, the
//! gateway streaming ADS from a scripted control plane that emits ADS-style
//! config (`ads: {}` config sources everywhere, as Istio does).
//!
//! All on 127.0.0.1: a backend HTTP server; the fake ADS control plane
//! (`support/fake_ads.rs`) serving a Cluster `backend` (EDS over `ads`), its
//! ClusterLoadAssignment, a Listener whose HttpConnectionManager takes
//! `local_route` over RDS from `ads`, and that RouteConfiguration; the
//! gateway binary; and Envoy, whose bootstrap polls LDS and CDS from the
//! gateway (static cluster `xds_cluster`). The gateway must rewrite every
//! `ads: {}` into a REST source pointing at `xds_cluster`, or Envoy rejects
//! the Cluster and the Listener.
//!
//! Phases, each bounded:
//! 1. Envoy applies CDS, EDS, LDS and RDS (admin `/stats`: every
//!    update_success at least 1, every update_rejected 0), holds only the
//!    rewritten REST config sources, and a GET through the dynamic listener
//!    reaches the backend.
//! 2. The control plane changes the route (version "2": a direct_response
//!    for `/changed`); Envoy serves it through the listener.
//! 3. The control plane adds an invalid Listener (address "not-an-ip":
//!    valid protobuf, rejected by Envoy) at version "2". Envoy rejects it
//!    (lds update_rejected at least 1) and keeps polling with version "1";
//!    the gateway reports it (`xds_gateway_suspected_rejections_total` for
//!    listeners at least 1 on its admin `/metrics`, and none for the other
//!    types), and the old listener still routes.
//!
//!    The admin listener's answers then match `openapi/admin.yaml`, and its
//!    status page, loaded in headless chromium, shows the node, its
//!    versions and the suspected rejection (screenshot kept in
//!    `target/tmp/artifacts/`).
//!
//! A second test checks that EDS
//! clusters catching up after a version bump are not taken for a rejection.
//!
//! Finally the requests the control plane received are checked: one stream,
//! the node, the names Envoy asked for, ACKs of every version, no NACK.
//!
//! The resources are `support/envoy.rs`'s JSON fixtures with `ads: {}`
//! config sources; that module also starts Envoy and the gateway and reads
//! Envoy's `/stats`.

#[path = "support/admin_views.rs"]
mod admin_views;
#[path = "support/browser.rs"]
mod browser;
#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use envoy_types::pb::google::protobuf::Any;
use serde_json::Value;
use xds_gateway::xds::Codec;

use envoy::{
    Envoy, CHANGE_TIMEOUT, CLA_TYPE, CLUSTER_TYPE, CONVERGE_TIMEOUT, FIXTURE_SUBSCRIPTIONS,
    LISTENER_TYPE, POLL_INTERVAL, RDS_STATS, ROUTE_TYPE,
};
use fake_ads::FakeAds;
use process::{eventually, free_port, get_until, http_get, ChildGuard};

const TEST: &str = "envoy_gateway";
const NODE_ID: &str = "envoy-gateway-test";
const BACKEND_BODY: &str = "hello from backend";
const CHANGED_BODY: &str = "changed upstream";

/// What an ADS control plane writes for every dynamic resource.
const ADS_SOURCE: &str = r#"{"ads": {}, "resource_api_version": "V3"}"#;
const SUSPECTED: &str = "xds_gateway_suspected_rejections_total";

/// JSON → the `Any` the control plane sends.
fn any(codec: &Codec, json: &str) -> Any {
    let parsed = codec
        .parse_any(json.as_bytes())
        .unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{json}"));
    Any {
        type_url: parsed.type_url,
        value: parsed.value,
    }
}

fn cluster(codec: &Codec, name: &str) -> Any {
    any(codec, &envoy::cluster_json(name, ADS_SOURCE))
}

fn cla(codec: &Codec, name: &str, backend_port: u16) -> Any {
    any(codec, &envoy::cla_json(name, backend_port))
}

/// A listener on `address:port` whose HCM takes `local_route` over ADS.
fn listener(codec: &Codec, name: &str, address: &str, port: u16) -> Any {
    any(
        codec,
        &envoy::listener_json(name, address, port, ADS_SOURCE),
    )
}

/// `local_route`: "/" to `backend`; with `changed`, also a direct response
/// for the path "/changed".
fn route(codec: &Codec, changed: bool) -> Any {
    let direct = changed.then_some(("/changed", CHANGED_BODY));
    any(codec, &envoy::route_json(direct))
}

/// The value of a Prometheus/OpenMetrics sample `name{...labels...} value`
/// whose labels contain `label`.
fn metric_value(text: &str, name: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Every process and port of one run.
struct Harness {
    envoy: Envoy,
    gateway: ChildGuard,
    ads: FakeAds,
    envoy_admin: u16,
    gateway_admin: u16,
    listener_port: u16,
}

impl Harness {
    /// Starts the gateway (upstream: `ads`) and then Envoy (polling the
    /// gateway), logging to `dir`; `listener_port` is only reported.
    async fn start(envoy_bin: &Path, dir: &Path, ads: FakeAds, listener_port: u16) -> Harness {
        Harness::start_with(envoy_bin, dir, ads, listener_port, &[]).await
    }

    /// [`start`](Self::start) with `extra` gateway flags.
    async fn start_with(
        envoy_bin: &Path,
        dir: &Path,
        ads: FakeAds,
        listener_port: u16,
        extra: &[&str],
    ) -> Harness {
        // The gateway.
        let mut flags = vec!["--rejection-threshold", "2"];
        flags.extend_from_slice(extra);
        let refresh = Duration::from_millis(200);
        let spawned = envoy::start_gateway(&ads.url(), refresh, &flags, true, dir).await;
        let (gateway, gateway_port, gateway_admin) = (spawned.guard, spawned.port, spawned.admin);

        // Envoy.
        let envoy_admin = free_port();
        let bootstrap = envoy::rest_bootstrap(NODE_ID, envoy_admin, gateway_port);
        let envoy = Envoy::start(envoy_bin, dir, &bootstrap);
        let base_id = envoy.base_id;
        eprintln!(
            "{TEST}: envoy pid {} base-id {base_id} admin :{envoy_admin} listener \
             :{listener_port}; gateway pid {} :{gateway_port} admin :{gateway_admin}; ads {}",
            envoy.id(),
            gateway.id(),
            ads.addr()
        );
        Harness {
            envoy,
            gateway,
            ads,
            envoy_admin,
            gateway_admin,
            listener_port,
        }
    }

    /// Panics (logs printed by the guards) if a child has exited.
    fn check_alive(&mut self) {
        self.envoy.assert_running();
        self.gateway.assert_running();
    }

    /// Envoy's counters whose names start with one of `prefixes`.
    async fn stat_values(&mut self, prefixes: &[&str]) -> BTreeMap<String, u64> {
        self.check_alive();
        envoy::counters(self.envoy_admin, prefixes).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_follows_ads_config_through_the_gateway() {
    envoy::run_bounded(TEST, run).await;
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let started = Instant::now();
    let codec = Codec::embedded();
    let backend_port = envoy::serve(Router::new().fallback(|| async { BACKEND_BODY })).await;
    let listener_port = free_port();

    let ads = FakeAds::start().await;
    ads.set(CLUSTER_TYPE, "1", vec![cluster(&codec, "backend")]);
    ads.set(CLA_TYPE, "1", vec![cla(&codec, "backend", backend_port)]);
    let good_listener = listener(&codec, "listener_0", "127.0.0.1", listener_port);
    ads.set(LISTENER_TYPE, "1", vec![good_listener.clone()]);
    ads.set(ROUTE_TYPE, "1", vec![route(&codec, false)]);

    let mut h = Harness::start(&envoy_bin, &dir, ads, listener_port).await;
    eprintln!("{TEST}: backend :{backend_port}");

    // 1. Everything applied, nothing rejected, traffic reaches the backend.
    let phase = Instant::now();
    let stats = converge(&mut h).await;
    for line in &stats {
        eprintln!("{TEST}: {line}");
    }
    let body = get_200(&mut h, "/anything", CONVERGE_TIMEOUT, |b| b == BACKEND_BODY).await;
    assert_eq!(body, BACKEND_BODY);
    check_rewritten_sources(&mut h).await;
    eprintln!(
        "{TEST}: phase 1 (initial config applied, backend reached) took {:.1?} ({:.1?} since start)",
        phase.elapsed(),
        started.elapsed()
    );

    // 2. A route change upstream reaches Envoy.
    let phase = Instant::now();
    h.ads.set(ROUTE_TYPE, "2", vec![route(&codec, true)]);
    let body = get_200(&mut h, "/changed", CHANGE_TIMEOUT, |b| b == CHANGED_BODY).await;
    assert_eq!(body, CHANGED_BODY);
    let rds = h.stat_values(&[&format!("{RDS_STATS}.")]).await;
    eprintln!(
        "{TEST}: phase 2 (route version 2 served through the listener) took {:.1?}; {rds:?}",
        phase.elapsed()
    );
    assert!(
        rds.get(&format!("{RDS_STATS}.update_success"))
            .is_some_and(|n| *n >= 2),
        "{rds:?}"
    );
    assert_eq!(
        rds.get(&format!("{RDS_STATS}.update_rejected"))
            .copied()
            .unwrap_or(0),
        0,
        "{rds:?}"
    );

    // 3. An invalid listener upstream: Envoy rejects, the gateway notices.
    let phase = Instant::now();
    let bad_port = free_port();
    h.ads.set(
        LISTENER_TYPE,
        "2",
        vec![
            good_listener,
            listener(&codec, "listener_bad", "not-an-ip", bad_port),
        ],
    );
    let (lds_rejected, suspected) = rejection_seen(&mut h).await;
    eprintln!(
        "{TEST}: phase 3 (rejection) took {:.1?}: envoy listener_manager.lds.update_rejected: \
         {lds_rejected}; gateway {SUSPECTED}{{type=\"listeners\"}}: {suspected}",
        phase.elapsed()
    );
    // Envoy kept its last good listener.
    let body = get_200(&mut h, "/anything", CHANGE_TIMEOUT, |b| b == BACKEND_BODY).await;
    assert_eq!(body, BACKEND_BODY);
    // The admin's client view shows this Envoy: its listeners a suspected
    // rejection of version 2, its clusters in step.
    let client = envoy_in_client_view(h.gateway_admin).await;
    let lds = &client["types"]["listeners"];
    assert_eq!(lds["suspected_rejections"], 1, "{client}");
    let detail = &lds["detail"][0];
    assert_eq!(detail["state"], "suspected rejection", "{client}");
    assert_eq!(detail["upstream_version"], "2", "{client}");
    assert!(
        detail["why"]
            .as_str()
            .is_some_and(|w| w.contains("rejected the newer one")),
        "{client}"
    );
    let cds = &client["types"]["clusters"];
    assert_eq!(cds["in_step"], cds["subscriptions"], "{client}");
    assert_eq!(client["user_agent"], "envoy", "{client}");
    assert_eq!(client["remote"], "127.0.0.1", "{client}");
    // /debug/config: what this node is served, as its Envoy gets it (EDS
    // sources rewritten to the Host it sends).
    let (status, body) = http_get(h.gateway_admin, &format!("/debug/config?node={NODE_ID}"))
        .await
        .unwrap_or_else(|e| panic!("/debug/config: {e}"));
    assert_eq!(status, 200, "{body}");
    let dump: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let host = dump["config_sources_rewritten_for"]
        .as_str()
        .unwrap_or_default();
    assert!(!host.is_empty(), "{body}");
    let of = |kind: &str| {
        dump["configs"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .map(|c| c["response"].clone())
            .unwrap_or_else(|| panic!("no {kind} in /debug/config: {body}"))
    };
    let cds = of("clusters");
    assert_eq!(
        cds["versionInfo"], client["types"]["clusters"]["detail"][0]["current"],
        "{body}"
    );
    let cds_text = cds.to_string();
    assert!(
        cds_text.contains("apiConfigSource") && cds_text.contains(host),
        "EDS sources not rewritten for {host}: {cds_text}"
    );
    assert!(of("listeners")["resources"]
        .as_array()
        .is_some_and(|r| !r.is_empty()));
    // ?name= narrows to one resource, in the types that have it.
    let first = cds["resources"][0]["name"].as_str().unwrap_or_default();
    let (status, one) = http_get(
        h.gateway_admin,
        &format!("/debug/config?node={NODE_ID}&name={first}"),
    )
    .await
    .unwrap_or_else(|e| panic!("/debug/config&name: {e}"));
    assert_eq!(status, 200, "{one}");
    let one: Value = serde_json::from_str(&one).unwrap_or_else(|e| panic!("{e}: {one}"));
    let clusters: Vec<&Value> = one["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] == "clusters")
        .collect();
    assert_eq!(clusters.len(), 1, "{one}");
    let resources = clusters[0]["response"]["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(resources.len(), 1, "{one}");
    assert_eq!(resources[0]["name"], first, "{one}");
    assert!(
        one["configs"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["type"] != "listeners")),
        "a type without {first:?} is left out: {one}"
    );
    check_csds(h.gateway_admin).await;
    check_admin_answers(h.gateway_admin).await;
    check_status_page(h.gateway_admin, &dir, &client).await;
    for (path, status) in [
        ("/debug/config".to_owned(), 400),
        ("/debug/config?node=nobody".to_owned(), 404),
        (format!("/debug/config?node={NODE_ID}&type=nope"), 400),
    ] {
        let (got, body) = http_get(h.gateway_admin, &path)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, status, "{path}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert!(error["message"].is_string(), "{path}: {body}");
    }
    let after = h
        .stat_values(&["listener_manager.lds.", "cluster_manager.cds."])
        .await;
    eprintln!("{TEST}: final lds/cds stats: {after:?}");

    // 4. What the control plane saw.
    check_upstream_requests(&h.ads);
    let metrics = http_get(h.gateway_admin, "/metrics")
        .await
        .map(|(_, text)| text)
        .unwrap_or_default();
    for kind in ["clusters", "endpoints", "routes"] {
        let label = format!("type=\"{kind}\"");
        // Exported at 0 from the start (issue 40): no line, or 0.
        assert_eq!(
            metric_value(&metrics, SUSPECTED, &label).unwrap_or(0.0),
            0.0,
            "Envoy applied every {kind} update, yet the gateway suspected a rejection:\n{metrics}"
        );
    }
    for line in metrics.lines().filter(|l| {
        l.starts_with("xds_gateway_suspected")
            || l.starts_with("xds_gateway_upstream_")
            || l.starts_with("xds_gateway_requests_total")
    }) {
        eprintln!("{TEST}: gateway metric {line}");
    }
    h.envoy.print_warnings(TEST);
    eprintln!("{TEST}: total {:.1?}", started.elapsed());
}

/// Waits for update_success >= 1 and update_rejected == 0 on CDS, EDS, LDS
/// and RDS; returns the observed lines.
async fn converge(h: &mut Harness) -> Vec<String> {
    let admin = h.envoy_admin;
    let watched = &FIXTURE_SUBSCRIPTIONS;
    let stats = envoy::wait_for_updates(
        admin,
        watched,
        1,
        CONVERGE_TIMEOUT,
        || h.check_alive(),
        || true,
    )
    .await
    .unwrap_or_else(|last| {
        panic!(
            "Envoy did not apply CDS/EDS/LDS/RDS within {CONVERGE_TIMEOUT:?}; last \
                     /stats:\n{last}\nupstream requests: {:#?}",
            h.ads.requests()
        )
    });
    envoy::update_lines(&stats, watched)
}

/// GETs `path` through Envoy's listener until a 200 whose body passes `ok`.
async fn get_200(h: &mut Harness, path: &str, timeout: Duration, ok: fn(&str) -> bool) -> String {
    let port = h.listener_port;
    let found = get_until(port, path, timeout, POLL_INTERVAL, || h.check_alive(), ok).await;
    match found {
        Ok(body) => body,
        Err(last) => {
            let stats = http_get(h.envoy_admin, "/stats?filter=update_").await;
            panic!(
                "GET {path} through Envoy's listener did not give the expected 200 within \
                 {timeout:?}; last: {last}\nenvoy stats: {stats:?}"
            )
        }
    }
}

/// Every `eds_config` and `config_source` in Envoy's dynamic clusters and
/// listeners (its `/config_dump`) is the REST source the gateway writes:
/// back to `xds_cluster` (the Host Envoy sent), every 200ms.
async fn check_rewritten_sources(h: &mut Harness) {
    fn collect<'a>(value: &'a Value, out: &mut Vec<(&'a str, &'a Value)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if key == "eds_config" || key == "config_source" {
                        out.push((key, child));
                    }
                    collect(child, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
            _ => {}
        }
    }
    h.check_alive();
    let (status, text) = http_get(h.envoy_admin, "/config_dump")
        .await
        .unwrap_or_else(|e| panic!("envoy /config_dump: {e}"));
    assert_eq!(status, 200, "envoy /config_dump: {text}");
    let dump: Value = serde_json::from_str(&text).expect("config_dump is JSON");
    let configs = dump["configs"].as_array().expect("config_dump configs");
    let dynamic: Vec<&Value> = configs
        .iter()
        .flat_map(|c| [&c["dynamic_active_clusters"], &c["dynamic_listeners"]])
        .filter(|v| !v.is_null())
        .collect();
    let mut sources = Vec::new();
    for section in &dynamic {
        collect(section, &mut sources);
    }
    let kinds: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
    assert!(
        kinds.contains(&"eds_config") && kinds.contains(&"config_source"),
        "config sources of the dynamic cluster and listener not found: {kinds:?}\n{text}"
    );
    let want = serde_json::json!({
        "api_type": "REST",
        "transport_api_version": "V3",
        "cluster_names": ["xds_cluster"],
        "refresh_delay": "0.200s",
        "request_timeout": "10s",
    });
    for (key, source) in &sources {
        assert!(source.get("ads").is_none(), "{key} still ADS: {source}");
        assert_eq!(source["api_config_source"], want, "{key}: {source}");
        assert_eq!(source["resource_api_version"], "V3", "{key}: {source}");
    }
    eprintln!(
        "{TEST}: envoy holds {} rewritten config sources ({kinds:?}), each {want}",
        sources.len()
    );
}

/// Waits for Envoy's lds update_rejected >= 1 and the gateway's suspected
/// rejections for listeners >= 1; returns both.
/// CSDS for the REST Envoy, asked by grpcio with the xds-protos stubs
/// (FetchClientStatus and one StreamClientStatus round trip) and as JSON at
/// `/debug/client_status`: its listeners NACKED (it rejected version 2) with
/// the inferred reason, its cluster ACKED with the resource attached.
async fn check_csds(gateway_admin: u16) {
    let python = process::require_python(TEST);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/csds_client.py");
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(&python)
            .arg(&script)
            .arg(gateway_admin.to_string())
            .args(["--node", NODE_ID, "--stream"])
            .env("PYTHONPATH", script.parent().unwrap_or(Path::new(".")))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("csds_client.py did not finish within 30 s"))
    .unwrap_or_else(|e| panic!("csds_client.py: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "csds_client.py: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(answers.len(), 2, "fetch and one stream answer: {stdout}");
    let (_, json) = http_get(
        gateway_admin,
        &format!("/debug/client_status?node={NODE_ID}"),
    )
    .await
    .unwrap_or_else(|e| panic!("/debug/client_status: {e}"));
    let json: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    for answer in answers.iter().chain([&json]) {
        let configs = &answer["config"];
        assert_eq!(configs.as_array().map(Vec::len), Some(1), "{answer}");
        assert_eq!(configs[0]["node"]["id"], NODE_ID, "{answer}");
        let find = |type_url: &str, name: &str| {
            configs[0]["genericXdsConfigs"]
                .as_array()
                .and_then(|c| {
                    c.iter()
                        .find(|c| c["typeUrl"] == type_url && c["name"] == name)
                })
                .cloned()
                .unwrap_or_else(|| panic!("no {name} of {type_url}: {answer}"))
        };
        let bad = find(LISTENER_TYPE, "listener_bad");
        assert_eq!(bad["clientStatus"], "NACKED", "{bad}");
        assert_eq!(bad["configStatus"], "ERROR", "{bad}");
        assert!(
            bad["errorState"]["details"]
                .as_str()
                .is_some_and(|d| d.contains("rejected")),
            "{bad}"
        );
        let backend = find(CLUSTER_TYPE, "backend");
        assert_eq!(backend["clientStatus"], "ACKED", "{backend}");
        assert_eq!(backend["xdsConfig"]["@type"], CLUSTER_TYPE, "{backend}");
    }
}

/// Every admin view, answered while this test's Envoy polls (one update
/// rejected), matches `openapi/admin.yaml`: the page and the JSON views, and
/// the documented errors.
async fn check_admin_answers(gateway_admin: u16) {
    let answers = admin_views::check_against_openapi(
        TEST,
        gateway_admin,
        &[
            "/",
            "/healthz",
            "/readyz",
            "/metrics",
            "/debug/sessions",
            "/debug/clients?pretty",
            &format!("/debug/config?node={NODE_ID}"),
            &format!("/debug/config?node={NODE_ID}&type=listeners&pretty"),
            "/debug/config",
            "/debug/config?node=nobody",
            "/debug/client_status",
            &format!("/debug/client_status?node={NODE_ID}&pretty"),
            "/debug/client_status?nope=1",
        ],
        &[],
    )
    .await;
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 200, 200, 200, 400, 404, 200, 200, 400],
        "{answers:?}"
    );
}

/// The admin status page in a real browser (headless chromium): the
/// gateway ready, this Envoy's session and its listeners a suspected
/// rejection with the versions `client` (its `/debug/clients` entry) has,
/// and a config link that works. The screenshot stays in
/// `target/tmp/artifacts/`.
async fn check_status_page(gateway_admin: u16, dir: &Path, client: &Value) {
    let screenshot = browser::artifact("envoy_gateway-status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let url = format!("http://127.0.0.1:{gateway_admin}/");
    let dom = browser::render(TEST, &url, &screenshot, &dir.join("chromium-profile")).await;
    let detail = &client["types"]["listeners"]["detail"][0];
    let (presented, current) = (
        detail["presented"].as_str().unwrap_or_default(),
        detail["current"].as_str().unwrap_or_default(),
    );
    assert!(
        presented.starts_with("1~") && current.starts_with("2~"),
        "{client}"
    );
    for expected in [
        "<title>xds-gateway status</title>".to_owned(),
        "id=\"readiness\" class=\"ok\">ready<".to_owned(),
        format!("<tr class=\"session\" data-node=\"{NODE_ID}\">"),
        format!("<tr class=\"client\" data-node=\"{NODE_ID}\" data-type=\"listeners\">"),
        "data-state=\"suspected rejection\"".to_owned(),
        format!("presents <code>{presented}</code>, served <code>{current}</code>"),
        "it rejected the newer one".to_owned(),
        format!("Node <code>{NODE_ID}</code> (127.0.0.1): suspected rejection of listeners"),
        "<meta http-equiv=\"refresh\" content=\"5\">".to_owned(),
    ] {
        assert!(
            dom.contains(&expected),
            "{TEST}: the status page lacks {expected:?}; chromium's DOM:\n{dom}"
        );
    }
    // Its clusters are in step: no suspected rejection of them.
    assert!(!dom.contains("suspected rejection of clusters"), "{dom}");
    // The page's link to this node's listeners answers that config.
    let href = format!("/debug/config?node={NODE_ID}&amp;type=listeners&amp;pretty");
    assert!(dom.contains(&format!("href=\"{href}\"")), "{dom}");
    let (status, body) = http_get(gateway_admin, &href.replace("&amp;", "&"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("listener_bad"), "{body}");
    let png = std::fs::read(&screenshot)
        .unwrap_or_else(|e| panic!("{TEST}: no screenshot {}: {e}", screenshot.display()));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{TEST}: not a screenshot of a page"
    );
    eprintln!("{TEST}: status page screenshot: {}", screenshot.display());
}

/// This test's Envoy as the gateway's `/debug/clients` shows it.
async fn envoy_in_client_view(gateway_admin: u16) -> Value {
    let (status, body) = http_get(gateway_admin, "/debug/clients?pretty")
        .await
        .unwrap_or_else(|e| panic!("/debug/clients: {e}"));
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let clients = view["clients"].as_array().cloned().unwrap_or_default();
    clients
        .into_iter()
        .find(|c| c["node_id"] == NODE_ID)
        .unwrap_or_else(|| panic!("no client of node {NODE_ID}: {body}"))
}

async fn rejection_seen(h: &mut Harness) -> (u64, f64) {
    let (envoy_admin, gateway_admin) = (h.envoy_admin, h.gateway_admin);
    let last = Mutex::new(String::from("(nothing observed)"));
    let last = &last;
    let found = eventually(CHANGE_TIMEOUT, POLL_INTERVAL, || {
        h.check_alive();
        async move {
            let (_, stats) = http_get(envoy_admin, "/stats?filter=listener_manager.lds")
                .await
                .ok()?;
            let rejected = envoy::parse_stats(&stats)
                .get("listener_manager.lds.update_rejected")
                .copied()
                .unwrap_or(0);
            let (_, metrics) = http_get(gateway_admin, "/metrics").await.ok()?;
            let suspected = metric_value(&metrics, SUSPECTED, r#"type="listeners""#);
            *last.lock().unwrap() = format!(
                "envoy:\n{stats}\ngateway {SUSPECTED} lines:\n{}",
                metrics
                    .lines()
                    .filter(|l| l.contains("suspected"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            let suspected = suspected?;
            (rejected >= 1 && suspected >= 1.0).then_some((rejected, suspected))
        }
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "the rejected listener was not seen within {CHANGE_TIMEOUT:?} (wanted envoy \
             lds update_rejected >= 1 and gateway {SUSPECTED}{{type=\"listeners\"}} >= 1); \
             last:\n{}",
            last.lock().unwrap()
        )
    })
}

/// The gateway's conversation with the control plane: one stream carrying
/// Envoy's node, the names Envoy asked for, ACKs of every served version, no
/// NACK (every resource was valid protobuf; the gateway does not forward
/// suspected rejections unless told to).
fn check_upstream_requests(ads: &FakeAds) {
    let requests = ads.requests();
    assert_eq!(
        ads.streams_opened(),
        1,
        "one Envoy node should make one upstream stream; requests: {requests:#?}"
    );
    let first = requests.first().expect("no upstream request");
    assert_eq!(first.node_id.as_deref(), Some(NODE_ID), "{first:?}");
    for r in &requests {
        assert!(r.error_detail.is_none(), "unexpected NACK upstream: {r:?}");
    }
    let expect = [
        (CLUSTER_TYPE, &[][..], &["1"][..]),
        (CLA_TYPE, &["backend"][..], &["1"][..]),
        (LISTENER_TYPE, &[][..], &["1", "2"][..]),
        (ROUTE_TYPE, &["local_route"][..], &["1", "2"][..]),
    ];
    for (type_url, names, versions) in expect {
        let of_type: Vec<_> = requests.iter().filter(|r| r.type_url == type_url).collect();
        assert!(!of_type.is_empty(), "no upstream request for {type_url}");
        for r in &of_type {
            assert_eq!(r.names, names, "{type_url}: subscribed names: {r:?}");
        }
        for version in versions {
            assert!(
                of_type
                    .iter()
                    .any(|r| r.version_info == *version && !r.nonce.is_empty()),
                "{type_url}: version {version} never ACKed: {of_type:#?}"
            );
        }
    }
    let summary: BTreeMap<&str, usize> = requests.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.type_url.rsplit('.').next().unwrap_or(""))
            .or_default() += 1;
        m
    });
    eprintln!(
        "{TEST}: upstream: {} stream(s), {} requests {summary:?}",
        ads.streams_opened(),
        requests.len()
    );
}

/// The control plane's very first listeners hold one Envoy rejects (an
/// address that is not an IP: no protoc-gen-validate rule catches it, Envoy
/// refuses it when it builds the listener). Envoy keeps presenting the
/// empty version; the gateway sees that as the rejection it is and, with
/// `--forward-rejections`, NACKs it upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_first_version_is_seen_and_nacked() {
    envoy::run_bounded(
        "a_rejected_first_version_is_seen_and_nacked",
        run_first_rejection,
    )
    .await;
}

async fn run_first_rejection(envoy_bin: PathBuf, dir: PathBuf) {
    let codec = Codec::embedded();
    let ads = FakeAds::start().await;
    ads.set(CLUSTER_TYPE, "1", Vec::new());
    let bad_port = free_port();
    ads.set(
        LISTENER_TYPE,
        "1",
        vec![listener(&codec, "listener_bad", "not-an-ip", bad_port)],
    );
    let mut h =
        Harness::start_with(&envoy_bin, &dir, ads, bad_port, &["--forward-rejections"]).await;
    let (lds_rejected, suspected) = rejection_seen(&mut h).await;
    eprintln!(
        "a_rejected_first_version_is_seen_and_nacked: envoy lds update_rejected {lds_rejected}, \
         gateway suspected {suspected}"
    );
    let stats = h
        .stat_values(&["listener_manager.lds.update_success"])
        .await;
    assert_eq!(
        stats.values().sum::<u64>(),
        0,
        "Envoy never applied a listener update: {stats:?}"
    );
    let nacked = eventually(CHANGE_TIMEOUT, POLL_INTERVAL, || {
        let requests = h.ads.requests();
        async move {
            requests
                .into_iter()
                .find(|r| r.type_url == LISTENER_TYPE && r.error_detail.is_some())
        }
    })
    .await
    .expect("no NACK of the rejected first listeners upstream");
    assert_eq!(nacked.version_info, "", "{nacked:?}");
    let detail = nacked.error_detail.unwrap_or_default();
    assert!(detail.contains("probably rejected"), "{detail}");
    let client = envoy_in_client_view(h.gateway_admin).await;
    let detail = &client["types"]["listeners"]["detail"][0];
    assert_eq!(detail["state"], "suspected rejection", "{client}");
    assert_eq!(detail["presented"], "", "{client}");
    assert!(
        detail["why"]
            .as_str()
            .is_some_and(|w| w.contains("rejected its first config")),
        "{client}"
    );
    // The views with a NACK sent upstream still match their schemas, and
    // the session shows it.
    let answers = admin_views::check_against_openapi(
        "a_rejected_first_version_is_seen_and_nacked",
        h.gateway_admin,
        &[
            "/debug/sessions",
            "/debug/clients",
            "/debug/client_status",
            "/",
        ],
        &[],
    )
    .await;
    let sessions: Value = serde_json::from_str(&answers[0].1).unwrap_or_default();
    assert_eq!(
        sessions["sessions"][0]["types"]["listeners"]["last_reply"]["kind"], "NACK",
        "{sessions}"
    );
    assert!(
        answers[3].1.contains("NACK of listeners"),
        "{}",
        answers[3].1
    );
}

/// EDS clusters in [`eds_catch_up_is_not_a_suspected_rejection`].
const EDS_CLUSTERS: usize = 5;
/// Version bumps of the ClusterLoadAssignments there.
const EDS_BUMPS: u32 = 3;

/// Envoy polls EDS once per cluster (one REST subscription per cluster, each
/// naming its own cluster), and all of them share one upstream subscription
/// and version in the gateway. After a version bump that every cluster
/// applies, the clusters that poll before catching up present the old
/// version once each: that is catching up, not rejecting, and must not be
/// reported as a suspected rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eds_catch_up_is_not_a_suspected_rejection() {
    const NAME: &str = "eds_catch_up_is_not_a_suspected_rejection";
    envoy::run_bounded(NAME, run_eds_catch_up).await;
}

async fn run_eds_catch_up(envoy_bin: PathBuf, dir: PathBuf) {
    let codec = Codec::embedded();
    let backend_port = envoy::serve(Router::new().fallback(|| async { BACKEND_BODY })).await;
    let names: Vec<String> = (0..EDS_CLUSTERS).map(|i| format!("backend_{i}")).collect();
    // Each version changes every assignment (its overprovisioning factor):
    // an unchanged one would be a 304 to every cluster, not an update.
    let clas = |codec: &Codec, version: u32| -> Vec<Any> {
        names
            .iter()
            .map(|n| {
                let mut json: Value =
                    serde_json::from_str(&envoy::cla_json(n, backend_port)).expect("CLA JSON");
                json["policy"] = serde_json::json!({"overprovisioning_factor": 140 + version});
                any(codec, &json.to_string())
            })
            .collect()
    };
    let ads = FakeAds::start().await;
    ads.set(
        CLUSTER_TYPE,
        "1",
        names.iter().map(|n| cluster(&codec, n)).collect(),
    );
    ads.set(CLA_TYPE, "1", clas(&codec, 1));
    ads.set(LISTENER_TYPE, "1", Vec::new());
    let mut h = Harness::start(&envoy_bin, &dir, ads, 0).await;
    eds_applied(&mut h, &names, 1).await;
    for bump in 1..=EDS_BUMPS {
        let phase = Instant::now();
        let version = (bump + 1).to_string();
        h.ads.set(CLA_TYPE, &version, clas(&codec, bump + 1));
        eds_applied(&mut h, &names, u64::from(bump) + 1).await;
        eprintln!(
            "{TEST}: EDS version {version} applied by all {EDS_CLUSTERS} clusters in {:.1?}",
            phase.elapsed()
        );
    }
    // Two more poll rounds of every cluster, all presenting the current version.
    let eds_polls = |metrics: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("xds_gateway_requests_total{") && l.contains(r#"type="endpoints""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let admin = h.gateway_admin;
    let gateway_metrics = || async move {
        http_get(admin, "/metrics")
            .await
            .unwrap_or_else(|e| panic!("gateway /metrics: {e}"))
            .1
    };
    let rounds = eds_polls(&gateway_metrics().await) + 2.0 * EDS_CLUSTERS as f64;
    let metrics = eventually(CHANGE_TIMEOUT, POLL_INTERVAL, || async {
        let metrics = gateway_metrics().await;
        (eds_polls(&metrics) >= rounds).then_some(metrics)
    })
    .await
    .unwrap_or_else(|| panic!("Envoy did not poll EDS twice more within {CHANGE_TIMEOUT:?}"));
    let suspected = metric_value(&metrics, SUSPECTED, r#"type="endpoints""#).unwrap_or(0.0);
    let stats = h.stat_values(&["cluster.backend_"]).await;
    let rejected: u64 = stats
        .iter()
        .filter(|(k, _)| k.ends_with(".update_rejected"))
        .map(|(_, v)| v)
        .sum();
    eprintln!(
        "{TEST}: envoy EDS update_rejected over {EDS_CLUSTERS} clusters: {rejected}; gateway \
         {SUSPECTED}{{type=\"endpoints\"}}: {suspected}"
    );
    assert_eq!(
        rejected, 0,
        "Envoy really rejected an EDS update: {stats:?}"
    );
    assert_eq!(
        suspected,
        0.0,
        "the gateway suspected a rejection although Envoy applied every EDS version \
         (update_rejected 0 on all {EDS_CLUSTERS} clusters); gateway log:\n{}",
        h.gateway
            .log_text()
            .lines()
            .filter(|l| l.contains("suspected rejection"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Waits until every cluster in `names` has update_success >= `updates` and
/// update_rejected == 0.
async fn eds_applied(h: &mut Harness, names: &[String], updates: u64) {
    let prefixes: Vec<String> = names.iter().map(|n| format!("cluster.{n}")).collect();
    let watched: Vec<(&str, &str)> = names
        .iter()
        .zip(&prefixes)
        .map(|(n, p)| (n.as_str(), p.as_str()))
        .collect();
    let admin = h.envoy_admin;
    let before = || h.check_alive();
    if let Err(last) =
        envoy::wait_for_updates(admin, &watched, updates, CONVERGE_TIMEOUT, before, || true).await
    {
        panic!(
            "not every EDS cluster applied {updates} updates within {CONVERGE_TIMEOUT:?}; \
             last stats:\n{last}"
        );
    }
}
