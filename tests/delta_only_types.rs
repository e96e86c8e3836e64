//! The delta-only types through the gateway binary, for tooling: virtual
//! hosts (VHDS, `/v3/discovery:virtual_hosts`) and LEDS endpoints
//! (`/v3/discovery:lb_endpoints`), read over REST from a delta upstream, the
//! reference control plane (`tests/support/ads_server.py`, which serves them
//! on delta streams only, with Envoy's VHDS namespace and alias semantics
//! and xdstp glob collections for LEDS).
//!
//! Each answer is checked against the control plane's own canonical JSON of
//! the resource, and every wrapper against protobuf's reference JSON mapping
//! (`json_format` with `xds-protos`). A gateway fed any other way (SotW,
//! Fetch, a snapshot) answers 501 UNIMPLEMENTED and never asks its
//! upstream for these types.
//!
//! Every test starts its own control plane and `xds-gateway` on free
//! loopback ports (both killed when the test ends, pass or fail), bounded by
//! [`TEST_TIMEOUT`].

#[path = "support/process.rs"]
mod process;

#[path = "support/gateway.rs"]
mod gateway;

#[path = "support/rest.rs"]
mod rest;

#[path = "support/json_reference.rs"]
mod json_reference;

use std::time::Duration;

use serde_json::{json, Value};

use gateway::{ControlPlane, Gateway, Reply};
use rest::{assert_error, assert_ok, names_of, node, request, stats_until, version_of};
use xds_gateway::xds::ResourceType;

const TEST_TIMEOUT: Duration = Duration::from_secs(90);
const STATS_WAIT: Duration = Duration::from_secs(15);
const VHDS: &str = ResourceType::VirtualHosts.type_url();
const LEDS: &str = ResourceType::LbEndpoints.type_url();
const WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";
const LEDS_DIR: &str = "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint";

fn virtual_host(name: &str, domain: &str) -> Value {
    json!({
        "@type": VHDS,
        "name": name,
        "domains": [domain],
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": name}}]
    })
}

fn lb_endpoint(port: u32) -> Value {
    json!({
        "@type": LEDS,
        "endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}},
        "load_balancing_weight": 1
    })
}

/// Sets the virtual hosts `(name, domain, aliases)` at `version`; returns
/// protobuf's canonical JSON of each, by name.
async fn set_virtual_hosts(
    cp: &ControlPlane,
    version: &str,
    hosts: &[(&str, &str, &[&str])],
) -> Vec<(String, Value)> {
    let resources: Vec<Value> = hosts
        .iter()
        .map(|(name, domain, _)| virtual_host(name.rsplit('/').next().unwrap(), domain))
        .collect();
    let names: Vec<&str> = hosts.iter().map(|(name, ..)| *name).collect();
    let aliases: serde_json::Map<String, Value> = hosts
        .iter()
        .map(|(name, _, aliases)| ((*name).to_owned(), json!(aliases)))
        .collect();
    let extra = json!({"names": names, "aliases": aliases});
    let canonical = cp.set_with(VHDS, version, &resources, extra).await;
    names
        .iter()
        .map(|n| (*n).to_owned())
        .zip(canonical)
        .collect()
}

/// Every element of `resources` is the delta wrapper named as expected,
/// holding the resource the control plane set (its canonical JSON), and
/// renders as protobuf's reference mapping renders it.
fn assert_wrapped(reply: &Reply, expected: &[(String, Value)]) {
    let resources = reply.json()["resources"].as_array().cloned().unwrap();
    assert_eq!(resources.len(), expected.len(), "{}", reply.text());
    for (got, (name, canonical)) in resources.iter().zip(expected) {
        assert_eq!(got["@type"], WRAPPER, "{got}");
        assert_eq!(got["name"], name.as_str(), "{got}");
        assert!(got["version"].as_str().is_some_and(|v| !v.is_empty()));
        assert_eq!(&got["resource"], canonical, "{name}");
    }
    let python = process::require_python("delta_only_types");
    let items: Vec<String> = resources.iter().map(Value::to_string).collect();
    let answers = json_reference::reference(&python, &[json!({"op": "roundtrip", "items": items})]);
    for (ours, theirs) in resources
        .iter()
        .zip(answers[0]["results"].as_array().unwrap())
    {
        let json = theirs["json"]
            .as_str()
            .unwrap_or_else(|| panic!("the reference cannot parse {ours}: {theirs}"));
        let theirs: Value = serde_json::from_str(json).unwrap();
        assert_eq!(ours, &theirs, "our wrapper JSON is not protobuf's");
    }
}

/// Whether the control plane got a delta request for `type_url`
/// subscribing `name` exactly as given.
fn subscribed_upstream(stats: &Value, type_url: &str, name: &str) -> bool {
    stats["delta_requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["type_url"] == type_url)
        .any(|r| {
            r["subscribe"]
                .as_array()
                .is_some_and(|s| s.iter().any(|n| n == name))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_hosts_are_read_by_route_configuration_and_alias() {
    rest::with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let shop: &[&str] = &["rc/shop.example"];
        let hosts = set_virtual_hosts(
            cp,
            "1",
            &[
                ("rc/shop", "shop.example", shop),
                ("rc/blog", "blog.example", &[]),
                ("other/admin", "admin.example", &[]),
            ],
        )
        .await;
        let gw = Gateway::start(&cp.upstream(), &["--upstream-mode", "delta"]).await;
        let n = node("vhds");

        // A route configuration's name stands for all of its virtual hosts.
        let all = gw
            .discover("virtual_hosts", &request(&n, "", &["rc"]))
            .await;
        assert_ok(&all, "virtual hosts of rc");
        assert_eq!(names_of(&all), ["rc/blog", "rc/shop"]);
        assert_eq!(all.json()["typeUrl"], VHDS);
        let in_rc: Vec<(String, Value)> = vec![hosts[1].clone(), hosts[0].clone()];
        assert_wrapped(&all, &in_rc);
        stats_until(cp, STATS_WAIT, "rc subscribed as is", |s| {
            subscribed_upstream(s, VHDS, "rc")
        })
        .await;
        let same = gw
            .discover("virtual_hosts", &request(&n, &version_of(&all), &["rc"]))
            .await;
        assert_eq!(same.status, 304, "{}", same.text());

        // An on-demand alias gets the virtual host it resolves to, which
        // lists the alias.
        let alias = gw
            .discover("virtual_hosts", &request(&n, "", &["rc/shop.example"]))
            .await;
        assert_ok(&alias, "alias");
        assert_eq!(names_of(&alias), ["rc/shop"]);
        assert_eq!(alias.json()["resources"][0]["aliases"], json!(shop));

        // One that resolves to nothing is answered empty (the server says
        // so), not left waiting.
        let unknown = gw
            .discover("virtual_hosts", &request(&n, "", &["rc/nowhere.example"]))
            .await;
        assert_ok(&unknown, "unresolved alias");
        assert_eq!(names_of(&unknown), Vec::<String>::new());

        // A new virtual host in rc reaches its readers.
        set_virtual_hosts(
            cp,
            "2",
            &[
                ("rc/shop", "shop.example", shop),
                ("rc/blog", "blog.example", &[]),
                ("rc/docs", "docs.example", &[]),
                ("other/admin", "admin.example", &[]),
            ],
        )
        .await;
        let (gw, n) = (&gw, &n);
        let grown = process::eventually(STATS_WAIT, Duration::from_millis(50), || async move {
            let reply = gw.discover("virtual_hosts", &request(n, "", &["rc"])).await;
            (reply.status == 200 && names_of(&reply).len() == 3).then_some(reply)
        })
        .await
        .expect("the new virtual host is served");
        assert_eq!(names_of(&grown), ["rc/blog", "rc/docs", "rc/shop"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_endpoints_are_read_by_glob_collection() {
    rest::with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let names = [
            format!("{LEDS_DIR}/c1/ep0"),
            format!("{LEDS_DIR}/c1/ep1"),
            format!("{LEDS_DIR}/c2/ep0"),
        ];
        let resources = [lb_endpoint(8000), lb_endpoint(8001), lb_endpoint(9000)];
        let canonical = cp
            .set_with(LEDS, "1", &resources, json!({"names": names}))
            .await;
        let gw = Gateway::start(&cp.upstream(), &["--upstream-mode", "delta"]).await;
        let n = node("leds");
        let glob = format!("{LEDS_DIR}/c1/*");

        let c1 = gw
            .discover("lb_endpoints", &request(&n, "", &[&glob]))
            .await;
        assert_ok(&c1, "the c1 collection");
        assert_eq!(names_of(&c1), names[..2]);
        let expected: Vec<(String, Value)> = names.iter().cloned().zip(canonical).collect();
        assert_wrapped(&c1, &expected[..2]);
        stats_until(cp, STATS_WAIT, "glob subscribed as is", |s| {
            subscribed_upstream(s, LEDS, &glob)
        })
        .await;

        // Two endpoints with the same body stay two resources.
        let one = gw
            .discover("lb_endpoints", &request(&n, "", &[&names[2]]))
            .await;
        assert_ok(&one, "one endpoint by name");
        assert_eq!(names_of(&one), [names[2].clone()]);
        let twins = [lb_endpoint(7000), lb_endpoint(7000), lb_endpoint(9000)];
        cp.set_with(LEDS, "2", &twins, json!({"names": names}))
            .await;
        let (gw, n, glob) = (&gw, &n, &glob);
        let moved = process::eventually(STATS_WAIT, Duration::from_millis(50), || async move {
            let reply = gw.discover("lb_endpoints", &request(n, "", &[glob])).await;
            let ports: Vec<Value> = reply.json()["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r["resource"]["endpoint"]["address"]["socketAddress"]["portValue"].clone())
                .collect();
            (ports == [json!(7000), json!(7000)]).then_some(reply)
        })
        .await
        .expect("both endpoints moved to port 7000");
        assert_eq!(names_of(&moved), names[..2]);
    })
    .await;
}

/// A gateway that is not fed by a delta stream refuses the delta-only
/// types with a 501 saying how to read them, and asks its upstream nothing.
async fn refused(gw: &Gateway, what: &str) {
    for (endpoint, names) in [("virtual_hosts", ["rc"]), ("lb_endpoints", ["x"])] {
        let body = request(&node("n"), "", &names);
        let body = &body;
        // An auto gateway answers 503 while it probes.
        let reply = process::eventually(STATS_WAIT, Duration::from_millis(100), || async move {
            let reply = gw.discover(endpoint, body).await;
            (reply.status != 503).then_some(reply)
        })
        .await
        .unwrap_or_else(|| panic!("{what}: still 503 after {STATS_WAIT:?}"));
        let message = assert_error(&reply, 501, what);
        assert_eq!(reply.json()["code"], 12, "UNIMPLEMENTED: {message}");
        assert!(
            message.contains("--upstream-mode delta"),
            "{what}: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_delta_upstream_serves_them() {
    rest::with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        set_virtual_hosts(cp, "1", &[("rc/shop", "shop.example", &[])]).await;
        for mode in ["sotw", "fetch"] {
            let gw = Gateway::start(&cp.upstream(), &["--upstream-mode", mode]).await;
            refused(&gw, mode).await;
        }
        // Auto mode refuses them when the upstream it found speaks SotW.
        cp.configure(json!({"no_delta": true})).await;
        let auto = Gateway::start(&cp.upstream(), &["--upstream-mode", "auto"]).await;
        refused(&auto, "auto (found sotw)").await;
        let snapshot = Gateway::start_with_args(&[]).await;
        refused(&snapshot, "snapshot").await;
        let stats = cp.stats().await;
        for list in ["requests", "delta_requests", "fetch_requests"] {
            let asked = stats[list]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["type_url"] == VHDS || r["type_url"] == LEDS);
            assert!(!asked, "asked upstream for a delta-only type: {stats}");
        }
    })
    .await;
}
