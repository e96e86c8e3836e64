//! `deploy/grafana/xds-gateway.json`, the Grafana dashboard, checked against
//! the gateway itself:
//!
//! - it is a dashboard with a Prometheus datasource variable that every
//!   panel and query uses (no datasource hard-wired);
//! - every metric its PromQL expressions (panels and template variables)
//!   query is one the gateway exports, of the right kind: a counter queried
//!   as `NAME_total`, a histogram as `NAME_bucket`, `_sum` or `_count`, a
//!   gauge as `NAME`. What the gateway exports is read two ways, which must
//!   agree: the registry `crates/metrics/src/lib.rs` builds (every `registry.register`
//!   call and the kind of the field it registers), and the `# TYPE` lines of
//!   `/metrics` of a gateway run in process after a few polls. Both are
//!   needed: `prometheus-client` writes no `# HELP`/`# TYPE` line for a
//!   labelled family that has no sample yet, so a metric such as
//!   `xds_gateway_upstream_nacks_total` is absent from `/metrics` until the
//!   first NACK;
//! - the one metric that is not the gateway's, the container working set
//!   (the kubelet's cAdvisor; the gateway exports no process memory), is
//!   named in [`FROM_KUBELET`];
//! - the panels the operator asks for first are there: polls and the 304
//!   share, long polls and watches, sessions and upstream streams, stale
//!   and failed-over sessions, NACKs and suspected rejections, opaque
//!   resources, memory, latency.

#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;
use xds_gateway::config::Config;

const DASHBOARD: &str = "deploy/grafana/xds-gateway.json";
/// Metrics the dashboard queries that come from the kubelet (cAdvisor), not
/// from the gateway.
const FROM_KUBELET: [&str; 1] = ["container_memory_working_set_bytes"];

fn dashboard() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// Every PromQL expression: (where, expression).
fn expressions(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a target has an expr");
            out.push((format!("panel {:?}", panel["title"]), expr.to_owned()));
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if var["type"] == "query" {
            let query = var["query"]["query"]
                .as_str()
                .or_else(|| var["query"].as_str())
                .expect("a query variable's query");
            out.push((format!("variable ${}", var["name"]), query.to_owned()));
        }
    }
    out
}

/// The metric names an expression queries: every selector `name{...}`, and
/// every bare `xds_gateway_*` name (as in `label_values(NAME, label)`).
/// String literals are dropped first, so a label value is never taken for
/// a metric.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let strings = Regex::new(r#""(?:[^"\\]|\\.)*""#).unwrap();
    let expr = strings.replace_all(expr, "\"\"");
    let selector = Regex::new(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{").unwrap();
    let ours = Regex::new(r"\bxds_gateway_[a-zA-Z0-9_:]*").unwrap();
    selector
        .captures_iter(&expr)
        .map(|c| c[1].to_owned())
        .chain(ours.find_iter(&expr).map(|m| m.as_str().to_owned()))
        .collect()
}

/// `# TYPE name kind` lines of a Prometheus text exposition.
fn types(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').expect("# TYPE name kind");
            (name.to_owned(), kind.trim().to_owned())
        })
        .collect()
}

/// Whether `queried` is a series the exposition's `types` produce.
fn exported(queried: &str, types: &BTreeMap<String, String>) -> bool {
    let is = |name: &str, kind: &str| types.get(name).is_some_and(|k| k == kind);
    if is(queried, "gauge") {
        return true;
    }
    if let Some(base) = queried.strip_suffix("_total") {
        if is(base, "counter") {
            return true;
        }
    }
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        queried
            .strip_suffix(suffix)
            .is_some_and(|base| is(base, "histogram"))
    })
}

#[test]
fn the_dashboard_uses_a_prometheus_datasource_variable() {
    let dashboard = dashboard();
    let vars = dashboard["templating"]["list"]
        .as_array()
        .expect("templating");
    let ds = vars
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds["query"], "prometheus");
    let reference = format!("${{{}}}", ds["name"].as_str().unwrap());
    for panel in panels(&dashboard) {
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], reference,
            "panel {:?}",
            panel["title"]
        );
        for target in panel["targets"].as_array().expect("targets") {
            assert_eq!(target["datasource"]["uid"], reference, "{target}");
        }
    }
    for var in vars.iter().filter(|v| v["type"] == "query") {
        assert_eq!(var["datasource"]["uid"], reference, "{var}");
    }
    // Panel ids are unique (Grafana keys panels by id).
    let ids: Vec<u64> = panels(&dashboard)
        .iter()
        .map(|p| p["id"].as_u64().expect("a panel id"))
        .collect();
    let unique: BTreeSet<&u64> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "panel ids {ids:?}");
}

/// The registry `crates/metrics/src/lib.rs` builds: every registered name, prefixed,
/// with the kind of the field registered under it. A metric is registered
/// as `field: add(r, "name", "help")`, or by `r.register("name", "help",
/// field.clone())`.
fn registered() -> BTreeMap<String, String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/metrics/src/lib.rs");
    let source = std::fs::read_to_string(path).expect("crates/metrics/src/lib.rs");
    let prefix = Regex::new(r#"Registry::with_prefix\("([a-z_]+)"\)"#)
        .unwrap()
        .captures(&source)
        .expect("the registry's prefix")[1]
        .to_owned();
    let field = Regex::new(r"(?m)^\s+([a-z_]+): (?:Family<\w+, )?(Counter|Gauge|Histogram)>?,\s*$")
        .unwrap();
    let kinds: BTreeMap<&str, String> = field
        .captures_iter(&source)
        .map(|c| (c.get(1).unwrap().as_str(), c[2].to_lowercase()))
        .collect();
    let added = Regex::new(r#"([a-z_]+): add\(\s*r,\s*"([a-z_]+)""#).unwrap();
    let register =
        Regex::new(r#"register\(\s*"([a-z_]+)",\s*"(?:[^"\\]|\\.)*",\s*([a-z_]+)\.clone\(\)"#)
            .unwrap();
    let named = added
        .captures_iter(&source)
        .map(|c| (c[2].to_owned(), c[1].to_owned()));
    let named = named.chain(
        register
            .captures_iter(&source)
            .map(|c| (c[1].to_owned(), c[2].to_owned())),
    );
    let out: BTreeMap<String, String> = named
        .map(|(name, field)| {
            let kind = kinds.get(field.as_str()).unwrap_or_else(|| {
                panic!("crates/metrics/src/lib.rs: no field {field} of a known kind")
            });
            (format!("{prefix}_{name}"), kind.clone())
        })
        .collect();
    let calls = source.matches(": add(").count() + source.matches("r.register(").count();
    assert_eq!(
        out.len(),
        calls,
        "every registration of crates/metrics/src/lib.rs read: {out:?}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported_by_the_gateway() {
    let gateway = inproc::InProcess::start(Config::default()).await;
    // A few polls (a 200 and a 304) give the labelled families samples.
    let path = "/v3/discovery:clusters?node=demo";
    let (status, body) = process::http_get(gateway.rest_port, path)
        .await
        .expect("GET clusters");
    assert_eq!(status, 200, "{body}");
    let version: Value = serde_json::from_str(&body).expect("JSON");
    let version = version["versionInfo"].as_str().expect("versionInfo");
    let (status, _) = process::http_get(gateway.rest_port, &format!("{path}&version={version}"))
        .await
        .expect("GET clusters again");
    assert_eq!(status, 304);
    let (status, exposition) = process::http_get(gateway.admin_port, "/metrics")
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200, "{exposition}");
    gateway.stop().await;
    let live = types(&exposition);
    let types = registered();
    for (name, kind) in &live {
        assert_eq!(
            types.get(name),
            Some(kind),
            "/metrics has {name} ({kind}); crates/metrics/src/lib.rs as read here: {types:?}"
        );
    }
    for name in [
        "xds_gateway_requests",
        "xds_gateway_request_duration_seconds",
        "xds_gateway_sessions",
    ] {
        assert!(
            live.contains_key(name),
            "{name} not on /metrics:\n{exposition}"
        );
    }

    let dashboard = dashboard();
    let mut queried = BTreeSet::new();
    for (place, expr) in expressions(&dashboard) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{place}: no metric in {expr}");
        for name in names {
            if FROM_KUBELET.contains(&name.as_str()) {
                continue;
            }
            assert!(
                exported(&name, &types),
                "{place} queries {name}, which the gateway does not export \
                 (its metrics and kinds: {types:?})"
            );
            queried.insert(name);
        }
    }
    // The metrics the brief of the dashboard names are on it.
    for name in [
        "xds_gateway_requests_total",
        "xds_gateway_long_polls_held",
        "xds_gateway_watches_open",
        "xds_gateway_sessions",
        "xds_gateway_upstream_streams_open",
        "xds_gateway_stale_sessions",
        "xds_gateway_upstream_switches_total",
        "xds_gateway_upstream_nacks_total",
        "xds_gateway_suspected_rejections_total",
        "xds_gateway_opaque_resources_total",
        "xds_gateway_history_bytes",
        "xds_gateway_request_duration_seconds_bucket",
    ] {
        assert!(
            queried.contains(name),
            "the dashboard does not query {name}"
        );
    }
    let share = expressions(&dashboard)
        .into_iter()
        .find(|(place, _)| place.contains("304 share"))
        .expect("a 304 share panel");
    assert!(share.1.contains("status=\"304\""), "{share:?}");
}

#[test]
fn metric_names_are_read_from_selectors_and_not_from_label_values() {
    let names = metric_names(
        r#"sum by (type) (rate(xds_gateway_requests_total{job=~"$job", status="x{y"}[5m])) / label_values(xds_gateway_sessions, job)"#,
    );
    assert_eq!(
        names,
        BTreeSet::from([
            "xds_gateway_requests_total".to_owned(),
            "xds_gateway_sessions".to_owned()
        ])
    );
    let types = BTreeMap::from([
        ("xds_gateway_requests".to_owned(), "counter".to_owned()),
        ("xds_gateway_lat".to_owned(), "histogram".to_owned()),
    ]);
    assert!(exported("xds_gateway_requests_total", &types));
    assert!(
        !exported("xds_gateway_requests", &types),
        "a counter's name without _total"
    );
    assert!(exported("xds_gateway_lat_bucket", &types));
    assert!(!exported("xds_gateway_lat", &types));
}
