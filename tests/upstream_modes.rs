//! The gateway binary in its other upstream modes, against the reference
//! control plane (`tests/support/ads_server.py`): delta ADS
//! (`--upstream-mode delta`), unary Fetch (`--upstream-mode fetch`), the
//! HDS/CSDS pass-through, and the switches that disable services.
//!
//! Every test starts its own control plane and `xds-gateway` on free
//! loopback ports (both killed when the test ends, pass or fail) and is
//! bounded by [`TEST_TIMEOUT`]. Python comes from `XDS_GATEWAY_PYTHON` or the
//! crate's `.venv/bin/python`; without either the tests fail, saying how to
//! install it.

#[path = "support/process.rs"]
mod process;

#[path = "support/gateway.rs"]
mod gateway;

#[path = "support/rest.rs"]
mod rest;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use gateway::{metric_sum, ControlPlane, Gateway, Reply};
use process::eventually;
use rest::{
    assert_error, assert_nack_detail, assert_ok, bounded, cluster, main_cases, nacks_above, named,
    names_of, node, other_cases, request, stats_until, upstream_of, upstream_part, version_of,
    with_control_plane, Case, CDS, EDS, LDS, RDS,
};

/// No test may take longer than this in total.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`stats_until`] waits for the control plane to show something.
const STATS_WAIT: Duration = Duration::from_secs(15);

const DELTA: &[&str] = &["--upstream-mode", "delta"];

/// A served version whose upstream part is a delta digest: 16 lowercase
/// hex digits.
fn assert_digest_version(version: &str, what: &str) {
    let version = upstream_part(version);
    assert!(
        version.len() == 16
            && version
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{what}: {version:?} is not a 16-hex-digit digest"
    );
}

/// The delta requests the control plane recorded for `type_url`.
fn delta_requests_of<'a>(
    stats: &'a Value,
    type_url: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    stats["delta_requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |r| r["type_url"] == type_url)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Whether a delta request of `type_url` subscribed exactly `names`.
fn subscribed(stats: &Value, type_url: &str, names: &[&str]) -> bool {
    delta_requests_of(stats, type_url).any(|r| strings(&r["subscribe"]) == names)
}

/// Whether a delta request of `type_url` unsubscribed `name`.
fn unsubscribed(stats: &Value, type_url: &str, name: &str) -> bool {
    delta_requests_of(stats, type_url).any(|r| strings(&r["unsubscribe"]).iter().any(|n| n == name))
}

fn fetches(stats: &Value, type_url: &str) -> u64 {
    stats["fetches"][type_url].as_u64().unwrap_or(0)
}

/// Polls until the gateway serves something other than `old` for `names`
/// (presenting `old`), and returns it; every reply on the way must be a
/// 200 or a 304.
async fn next_version(gw: &Gateway, n: &Value, endpoint: &str, old: &str, names: &[&str]) -> Reply {
    eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async move {
            let reply = gw.discover(endpoint, &request(n, old, names)).await;
            assert!(
                reply.status == 200 || reply.status == 304,
                "{endpoint}: {} {}",
                reply.status,
                reply.text()
            );
            (reply.status == 200 && version_of(&reply) != old).then_some(reply)
        },
    )
    .await
    .unwrap_or_else(|| panic!("{endpoint}: never left version {old}"))
}

/// Canonical JSON of each resource, by name.
fn by_name(canonical: &[Value]) -> std::collections::BTreeMap<String, Value> {
    canonical
        .iter()
        .map(|c| {
            let name = c
                .get("name")
                .or_else(|| c.get("clusterName"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            (name, c.clone())
        })
        .collect()
}

/// Sets every case's snapshot, then checks each is served with exactly
/// protobuf's canonical JSON of the expected resources, and that presenting
/// the served version gets a 304. Returns the served versions.
async fn check_cases(cp: &ControlPlane, gw: &Gateway, n: &Value, cases: &[Case]) -> Vec<String> {
    let mut canonical = Vec::new();
    for case in cases {
        let version = format!("{}-7", case.endpoint);
        canonical.push(by_name(
            &cp.set(case.type_url, &version, &case.upstream).await,
        ));
    }
    let mut versions = Vec::new();
    for (case, canonical) in cases.iter().zip(&canonical) {
        let endpoint = case.endpoint;
        let started = Instant::now();
        let reply = gw.discover(endpoint, &request(n, "", &case.asked)).await;
        let elapsed = started.elapsed();
        assert_ok(&reply, endpoint);
        // A name that does not exist upstream is answered at once, not
        // after --first-response-timeout.
        assert!(
            elapsed < Duration::from_secs(3),
            "{endpoint}: took {elapsed:?}"
        );
        let body = reply.json();
        assert_eq!(body["typeUrl"], json!(case.type_url), "{endpoint}");
        assert_eq!(names_of(&reply), case.expected, "{endpoint}: names");
        for got in body["resources"].as_array().unwrap() {
            let name = got
                .get("name")
                .or_else(|| got.get("clusterName"))
                .and_then(Value::as_str)
                .unwrap();
            assert_eq!(
                Some(got),
                canonical.get(name),
                "{endpoint}: not protobuf's canonical JSON"
            );
        }
        let version = version_of(&reply);
        let again = gw
            .discover(endpoint, &request(n, &version, &case.asked))
            .await;
        assert_eq!(again.status, 304, "{endpoint}: {}", again.text());
        versions.push(version);
    }
    versions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_mode_serves_the_main_types() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let gw = Gateway::start(&cp.upstream(), DELTA).await;
        let n = node("delta-types");
        let versions = check_cases(cp, &gw, &n, &main_cases()).await;
        for version in &versions {
            assert_digest_version(version, "delta version");
        }
        // The session publishes a response, then ACKs it: a REST answer can
        // come before the control plane has the ACK.
        let stats = stats_until(cp, STATS_WAIT, "an ACK of every type", |s| {
            [LDS, RDS, CDS, EDS]
                .iter()
                .all(|t| delta_requests_of(s, t).any(|r| r["kind"] == "ack"))
        })
        .await;
        assert_eq!(stats["delta_streams_total"], 1, "{stats}");
        assert_eq!(stats["streams_total"], 1, "only the delta stream: {stats}");
        assert_eq!(
            stats["requests"].as_array().map(Vec::len),
            Some(0),
            "no SotW request: {stats}"
        );
        assert!(subscribed(&stats, LDS, &["*"]), "{stats}");
        assert!(subscribed(&stats, CDS, &["*"]), "{stats}");
        assert!(
            subscribed(&stats, RDS, &["local_route", "missing"]),
            "{stats}"
        );
        assert!(subscribed(&stats, EDS, &["backend", "nope"]), "{stats}");
        let first = &stats["delta_requests"][0];
        assert_eq!(
            first["has_node"], true,
            "node on the first request: {stats}"
        );
        assert_eq!(first["node_id"], "delta-types", "{stats}");
        assert_eq!(first["kind"], "subscribe", "{stats}");
        for type_url in [LDS, RDS, CDS, EDS] {
            assert!(
                delta_requests_of(&stats, type_url).any(|r| r["kind"] == "ack"),
                "{type_url} never ACKed: {stats}"
            );
            assert!(
                delta_requests_of(&stats, type_url).all(|r| r["error_detail"].is_null()),
                "{type_url} NACKed: {stats}"
            );
        }
        let metrics = gw.metrics().await;
        assert!(
            metric_sum(&metrics, "xds_gateway_upstream_acks_total") >= 4.0,
            "{metrics}"
        );
        assert_eq!(
            metric_sum(&metrics, "xds_gateway_upstream_nacks_total"),
            0.0
        );
        assert_eq!(
            metric_sum(&metrics, "xds_gateway_upstream_streams_open"),
            1.0,
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_removal_upstream_disappears_and_changes_the_version() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a"), cluster("b")]).await;
        cp.set(EDS, "e1", &[named(EDS, "a"), named(EDS, "b")]).await;
        let gw = Gateway::start(&cp.upstream(), DELTA).await;
        let n = node("delta-removal");
        let cds = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&cds, "CDS");
        assert_eq!(names_of(&cds), ["a", "b"]);
        let v1 = version_of(&cds);
        let eds = gw
            .discover("endpoints", &request(&n, "", &["a", "b"]))
            .await;
        assert_ok(&eds, "EDS");
        assert_eq!(names_of(&eds), ["a", "b"]);
        let e1 = version_of(&eds);

        cp.set(CDS, "v2", &[cluster("a")]).await;
        cp.set(EDS, "e2", &[named(EDS, "a")]).await;
        let cds2 = next_version(&gw, &n, "clusters", &v1, &[]).await;
        assert_eq!(names_of(&cds2), ["a"], "b is gone");
        let v2 = version_of(&cds2);
        assert_digest_version(&v2, "after the removal");
        let eds2 = next_version(&gw, &n, "endpoints", &e1, &["a", "b"]).await;
        assert_eq!(names_of(&eds2), ["a"], "b is gone");
        let again = gw.discover("clusters", &request(&n, &v2, &[])).await;
        assert_eq!(again.status, 304, "{}", again.text());

        // The same resources again: the same (deterministic) version.
        cp.set(CDS, "v3", &[cluster("a"), cluster("b")]).await;
        let cds3 = next_version(&gw, &n, "clusters", &v2, &[]).await;
        assert_eq!(names_of(&cds3), ["a", "b"]);
        assert_eq!(version_of(&cds3), v1, "version is a digest of what is held");
        // A changed resource changes it.
        let mut changed = cluster("a");
        changed["connect_timeout"] = json!("2s");
        cp.set(CDS, "v4", &[changed, cluster("b")]).await;
        let cds4 = next_version(&gw, &n, "clusters", &v1, &[]).await;
        assert_eq!(cds4.json()["resources"][0]["connectTimeout"], "2s");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_subscriptions_follow_the_rest_names() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(
            EDS,
            "e1",
            &[named(EDS, "a"), named(EDS, "b"), named(EDS, "c")],
        )
        .await;
        let gw = Gateway::start(
            &cp.upstream(),
            &["--upstream-mode", "delta", "--idle-timeout", "1s"],
        )
        .await;
        let n = node("delta-names");
        let a = gw.discover("endpoints", &request(&n, "", &["a"])).await;
        assert_ok(&a, "a");
        assert_eq!(names_of(&a), ["a"]);
        let stats = cp.stats().await;
        assert!(subscribed(&stats, EDS, &["a"]), "{stats}");

        let ab = gw
            .discover("endpoints", &request(&n, "", &["a", "b"]))
            .await;
        assert_ok(&ab, "a+b");
        assert_eq!(names_of(&ab), ["a", "b"]);
        let stats = cp.stats().await;
        assert!(subscribed(&stats, EDS, &["b"]), "b added: {stats}");

        // Only b is asked for from now on: a is unsubscribed once no client
        // asked for it within the idle timeout, and b keeps being served.
        let b_version = std::cell::RefCell::new(String::new());
        let stats = eventually(Duration::from_secs(15), Duration::from_millis(200), || {
            let (gw, n, cp, b_version) = (&gw, &n, &cp, &b_version);
            async move {
                let version = b_version.borrow().clone();
                let reply = gw
                    .discover("endpoints", &request(n, &version, &["b"]))
                    .await;
                match reply.status {
                    200 => {
                        assert_eq!(names_of(&reply), ["b"]);
                        *b_version.borrow_mut() = version_of(&reply);
                    }
                    304 => {}
                    other => panic!("b: {other} {}", reply.text()),
                }
                let stats = cp.stats().await;
                unsubscribed(&stats, EDS, "a").then_some(stats)
            }
        })
        .await
        .expect("a was never unsubscribed");
        assert!(!unsubscribed(&stats, EDS, "b"), "{stats}");
        // Asking for a again subscribes it again.
        let before = delta_requests_of(&cp.stats().await, EDS).count();
        let a = gw.discover("endpoints", &request(&n, "", &["a"])).await;
        assert_ok(&a, "a again");
        assert_eq!(names_of(&a), ["a"]);
        let stats = cp.stats().await;
        assert!(
            delta_requests_of(&stats, EDS)
                .skip(before)
                .any(|r| strings(&r["subscribe"]) == ["a"]),
            "a resubscribed: {stats}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_reconnect_presents_initial_resource_versions() {
    let test = "delta_reconnect_presents_initial_resource_versions";
    let cp = ControlPlane::start(test);
    bounded(TEST_TIMEOUT, async {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        cp.set(EDS, "e1", &[named(EDS, "x")]).await;
        let gw = Gateway::start(&cp.upstream(), DELTA).await;
        let n = node("delta-restart");
        let cds = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&cds, "CDS");
        let v = version_of(&cds);
        let eds = gw.discover("endpoints", &request(&n, "", &["x"])).await;
        assert_ok(&eds, "EDS");
        let w = version_of(&eds);
        let port = cp.ads_port;
        drop(cp);

        // Clients that had state keep getting 200/304, never an error,
        // while the control plane is away and after it is back.
        let check = |reply: &Reply, version: &str, what: &str| match reply.status {
            304 => {}
            200 => assert_eq!(version_of(reply), version, "{what}"),
            other => panic!("{what}: {other} {}", reply.text()),
        };
        for _ in 0..5 {
            check(
                &gw.discover("clusters", &request(&n, &v, &[])).await,
                &v,
                "CDS, control plane down",
            );
            check(
                &gw.discover("endpoints", &request(&n, &w, &["x"])).await,
                &w,
                "EDS, control plane down",
            );
            let fresh = gw.discover("clusters", &request(&n, "", &[])).await;
            assert_ok(&fresh, "a client without a version, control plane down");
            assert_eq!(fresh.body, cds.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let cp = ControlPlane::start_on(test, port, &[]);
        cp.set(CDS, "v1", &[cluster("a")]).await;
        cp.set(EDS, "e1", &[named(EDS, "x")]).await;
        let stats = stats_until(
            &cp,
            STATS_WAIT,
            "a resubscription with initial versions",
            |s| {
                let has = |type_url: &str, name: &str| {
                    delta_requests_of(s, type_url).any(|r| {
                        r["initial_resource_versions"][name]
                            .as_str()
                            .is_some_and(|v| !v.is_empty())
                    })
                };
                has(CDS, "a") && has(EDS, "x")
            },
        )
        .await;
        let first = &stats["delta_requests"][0];
        assert_eq!(first["has_node"], true, "{stats}");
        assert_eq!(first["node_id"], "delta-restart", "{stats}");
        let cds_first = delta_requests_of(&stats, CDS).next().unwrap();
        assert_eq!(strings(&cds_first["subscribe"]), ["*"], "{stats}");
        let eds_first = delta_requests_of(&stats, EDS).next().unwrap();
        assert_eq!(strings(&eds_first["subscribe"]), ["x"], "{stats}");

        // Same resources upstream: nothing changed for the clients.
        for _ in 0..5 {
            check(
                &gw.discover("clusters", &request(&n, &v, &[])).await,
                &v,
                "CDS, control plane back",
            );
            check(
                &gw.discover("endpoints", &request(&n, &w, &["x"])).await,
                &w,
                "EDS, control plane back",
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // And the new control plane's changes come through.
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        let reply = next_version(&gw, &n, "clusters", &v, &[]).await;
        assert_eq!(names_of(&reply), ["a", "b"]);
        let stats = cp.stats().await;
        assert!(stats["delta_streams_total"].as_u64() >= Some(1), "{stats}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_undecodable_update_is_nacked_whole_and_the_last_state_kept() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "good", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), DELTA).await;
        let n = node("delta-nack");
        let good = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&good, "first poll");
        let v = version_of(&good);

        // A changed, undecodable resource (field 1, length-delimited, with a
        // truncated length varint) and a new good one in one response.
        let before = cp.stats().await["nacks"].as_u64().unwrap_or(0);
        cp.set_raw(
            CDS,
            "bad",
            &[("a", CDS, b"\x0a\xff\xff\xff"), ("b", CDS, b"\x0a\x01b")],
        )
        .await;
        let stats = nacks_above(cp, STATS_WAIT, "a delta NACK", before).await;
        let nack = delta_requests_of(&stats, CDS)
            .find(|r| r["kind"] == "nack")
            .unwrap_or_else(|| panic!("no NACK: {stats}"));
        assert_nack_detail(nack);
        let metrics = gw.metrics().await;
        assert!(
            metric_sum(&metrics, "xds_gateway_upstream_nacks_total") >= 1.0,
            "{metrics}"
        );

        // Nothing of the rejected response was applied, not even the good b.
        let same = gw.discover("clusters", &request(&n, &v, &[])).await;
        assert_eq!(same.status, 304, "{}", same.text());
        let again = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&again, "after the NACK");
        assert_eq!(again.body, good.body, "the last good state is served");

        // A good update after the bad one is taken.
        cp.set(CDS, "fixed", &[cluster("a"), cluster("b")]).await;
        let fixed = next_version(&gw, &n, "clusters", &v, &[]).await;
        assert_eq!(names_of(&fixed), ["a", "b"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_forwards_a_suspected_rejection_as_a_nack() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Gateway::start(
            &cp.upstream(),
            &[
                "--upstream-mode",
                "delta",
                "--rejection-threshold",
                "2",
                "--forward-rejections",
            ],
        )
        .await;
        let n = node("delta-rejecting");
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        let v1 = version_of(&first);
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        let second = next_version(&gw, &n, "clusters", &v1, &[]).await;
        let v2 = version_of(&second);
        // The client keeps presenting v1: it rejected v2.
        for _ in 0..3 {
            let reply = gw.discover("clusters", &request(&n, &v1, &[])).await;
            assert_ok(&reply, "stale poll");
            assert_eq!(version_of(&reply), v2);
        }
        let stats = nacks_above(cp, STATS_WAIT, "a forwarded NACK", 0).await;
        let nack = delta_requests_of(&stats, CDS)
            .find(|r| !r["error_detail"].is_null())
            .unwrap_or_else(|| panic!("no NACK: {stats}"));
        assert_eq!(nack["kind"], "nack", "carries the latest nonce: {nack}");
        let message = nack["error_detail"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&v1) && message.contains(&v2), "{nack}");
        assert!(
            strings(&nack["subscribe"]).is_empty() && strings(&nack["unsubscribe"]).is_empty(),
            "a NACK changes no subscription: {nack}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_without_absence_signals_settles_and_proves_wildcards() {
    with_control_plane(&["--no-absent"], TEST_TIMEOUT, async |cp| {
        cp.set(EDS, "e1", &[named(EDS, "a")]).await;
        cp.set(CDS, "v1", &[cluster("a"), cluster("b")]).await;
        let gw = Gateway::start(&cp.upstream(), DELTA).await;
        let n = node("delta-settle");
        let timed = |endpoint: &'static str, version: String, names: &'static [&'static str]| {
            let (gw, n) = (&gw, &n);
            async move {
                let started = Instant::now();
                let reply = gw.discover(endpoint, &request(n, &version, names)).await;
                (reply, started.elapsed())
            }
        };
        // The first response answers the first subscription: "ghost" is absent.
        let (reply, elapsed) = timed("endpoints", String::new(), &["a", "ghost"]).await;
        assert_ok(&reply, "a+ghost");
        assert_eq!(names_of(&reply), ["a"]);
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
        // A name added later gets no answer upstream: it settles once.
        let (reply, elapsed) = timed("endpoints", String::new(), &["a", "ghost2"]).await;
        assert_ok(&reply, "a+ghost2");
        assert_eq!(names_of(&reply), ["a"]);
        assert!(
            elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_millis(4500),
            "settled in {elapsed:?}"
        );
        let version = version_of(&reply);
        let (reply, elapsed) = timed("endpoints", version, &["a", "ghost2"]).await;
        assert_eq!(reply.status, 304, "{}", reply.text());
        assert!(
            elapsed < Duration::from_millis(1000),
            "only once: {elapsed:?}"
        );

        // Named first, then a wildcard: b (never named) proves the wildcard.
        let (reply, _) = timed("clusters", String::new(), &["a"]).await;
        assert_ok(&reply, "CDS a");
        assert_eq!(names_of(&reply), ["a"]);
        let (reply, elapsed) = timed("clusters", String::new(), &[]).await;
        assert_ok(&reply, "CDS wildcard");
        assert_eq!(names_of(&reply), ["a", "b"]);
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
        let stats = cp.stats().await;
        assert!(subscribed(&stats, CDS, &["*"]), "{stats}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_mode_serves_every_type() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        // A TTL of 1 ms: each poll asks the upstream.
        let gw = Gateway::start(
            &cp.upstream(),
            &[
                "--upstream-mode",
                "fetch",
                "--allow-secrets",
                "--fetch-cache-ttl",
                "1ms",
            ],
        )
        .await;
        let n = node("fetch-types");
        let cases: Vec<Case> = main_cases().into_iter().chain(other_cases()).collect();
        let versions = check_cases(cp, &gw, &n, &cases).await;
        for (case, version) in cases.iter().zip(&versions) {
            assert_eq!(
                upstream_part(version),
                format!("{}-7", case.endpoint),
                "fetch mode serves the upstream's version"
            );
        }
        let stats = cp.stats().await;
        for case in &cases {
            // One fetch for the first poll, one for the 304.
            assert_eq!(
                fetches(&stats, case.type_url),
                2,
                "{}: {stats}",
                case.endpoint
            );
        }
        assert_eq!(stats["streams_total"], 0, "no ADS stream: {stats}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_up_to_date_is_a_304_in_both_styles() {
    with_control_plane(&["--up-to-date-style", "rust"], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        // A TTL of 1 ms: each poll asks the upstream.
        let gw = Gateway::start(
            &cp.upstream(),
            &["--upstream-mode", "fetch", "--fetch-cache-ttl", "1ms"],
        )
        .await;
        for style in ["rust", "go"] {
            let config = cp.configure(json!({"up_to_date_style": style})).await;
            assert_eq!(config["up_to_date_style"], style);
            // A node per style: a session per identity.
            let n = node(&format!("fetch-{style}"));
            let first = gw.discover("clusters", &request(&n, "", &[])).await;
            assert_ok(&first, style);
            assert_eq!(upstream_of(&first), "v1");
            let same = gw
                .discover("clusters", &request(&n, &version_of(&first), &[]))
                .await;
            assert_eq!(same.status, 304, "{style}: {}", same.text());
            assert!(same.body.is_empty(), "{style}");
            // An older version gets the snapshot.
            let old = gw.discover("clusters", &request(&n, "v0", &[])).await;
            assert_ok(&old, style);
            assert_eq!(upstream_of(&old), "v1");
        }
        let stats = cp.stats().await;
        assert_eq!(fetches(&stats, CDS), 6, "{stats}");
        let up_to_date = stats["fetch_requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["version_info"] == "v1")
            .count();
        // The session presents the version it holds: after the first
        // fetch of each style, both later polls' fetches are up to date.
        assert_eq!(up_to_date, 4, "two up-to-date fetches per style: {stats}");

        // Other upstream errors are not a 304.
        let reply = gw
            .discover("endpoints", &request(&node("fetch-go"), "e1", &["a"]))
            .await;
        assert_error(&reply, 503, "no EDS snapshot upstream");
    })
    .await;
}

/// An upstream that answers every `Fetch*` in full (no "up to date"
/// answer): the gateway still answers 304 to a client presenting what it
/// was served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_from_an_upstream_without_up_to_date_answers_is_still_304() {
    with_control_plane(&["--up-to-date-style", "never"], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        cp.set(EDS, "e1", &[named(EDS, "a")]).await;
        let gw = Gateway::start(
            &cp.upstream(),
            &["--upstream-mode", "fetch", "--fetch-cache-ttl", "1ms"],
        )
        .await;
        let n = node("fetch-always-full");
        let all_fetches = |stats: &Value| fetches(stats, CDS) + fetches(stats, EDS);
        for (endpoint, names) in [("clusters", &[][..]), ("endpoints", &["a"][..])] {
            let first = gw.discover(endpoint, &request(&n, "", names)).await;
            assert_ok(&first, endpoint);
            let before = all_fetches(&cp.stats().await);
            for _ in 0..3 {
                let again = gw
                    .discover(endpoint, &request(&n, &version_of(&first), names))
                    .await;
                assert_eq!(again.status, 304, "{endpoint}: {}", again.text());
            }
            let after = all_fetches(&cp.stats().await);
            // The upstream was asked (and answered in full): the 304 is the gateway's.
            assert!(
                after > before,
                "the upstream was not asked: {before} → {after}"
            );
        }
    })
    .await;
}

/// Polls of one session share its fetches: the ones asking during a call
/// share it, and what it brought stands for the TTL, whatever version a
/// client presents; new names or another node are a fetch of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fetch_mode_coalesces_identical_polls() {
    with_control_plane(&["--fetch-delay-ms", "300"], TEST_TIMEOUT, async |cp| {
        cp.set(EDS, "e1", &[named(EDS, "a"), named(EDS, "b")]).await;
        let gw = Gateway::start(
            &cp.upstream(),
            &["--upstream-mode", "fetch", "--fetch-cache-ttl", "10s"],
        )
        .await;
        let burst = |n: usize, version: String, names: &'static [&'static str]| {
            let port = gw.port;
            async move {
                let polls: Vec<_> = (0..n)
                    .map(|_| {
                        let body = request(&node("coalesce"), &version, names).to_string();
                        tokio::spawn(async move {
                            gateway::discover_on(port, "endpoints", body).await.unwrap()
                        })
                    })
                    .collect();
                let mut replies = Vec::new();
                for poll in polls {
                    replies.push(poll.await.unwrap());
                }
                replies
            }
        };
        let replies = burst(50, String::new(), &["a"]).await;
        for reply in &replies {
            assert_ok(reply, "coalesced poll");
            assert_eq!(reply.body, replies[0].body);
        }
        assert_eq!(names_of(&replies[0]), ["a"]);
        let stats = cp.stats().await;
        assert_eq!(fetches(&stats, EDS), 1, "50 polls, one fetch: {stats}");
        // Within the TTL the answer is reused.
        for reply in burst(10, String::new(), &["a"]).await {
            assert_eq!(reply.body, replies[0].body);
        }
        assert_eq!(fetches(&cp.stats().await, EDS), 1);

        // Whatever version a client presents: the session's state stands.
        for reply in burst(10, version_of(&replies[0]), &["a"]).await {
            assert_eq!(reply.status, 304, "{}", reply.text());
        }
        assert_eq!(fetches(&cp.stats().await, EDS), 1);
        // Names the session did not ask for are a new fetch.
        let ab = burst(10, String::new(), &["a", "b"]).await;
        for reply in &ab {
            assert_ok(reply, "a+b");
            assert_eq!(names_of(reply), ["a", "b"]);
        }
        assert_eq!(fetches(&cp.stats().await, EDS), 2);
        // And another node.
        let other = gw
            .discover("endpoints", &request(&node("other"), "", &["a"]))
            .await;
        assert_ok(&other, "another node");
        assert_eq!(fetches(&cp.stats().await, EDS), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hds_and_csds_pass_through_as_json_both_ways() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        // SotW mode (the default): the pass-through does not need a session.
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let hds_request = json!({
            "health_check_request": {
                "node": {"id": "hds-node", "cluster": "c"},
                "capability": {"health_check_protocols": ["HTTP", "TCP"]}
            }
        });
        let reply = gw
            .post_raw("/v3/discovery:health_check", &[], hds_request.to_string())
            .await;
        assert_ok(&reply, "HDS");
        let canned = cp.canned().await;
        assert_eq!(
            reply.json(),
            canned["health_check"],
            "HDS answer as canonical JSON"
        );
        assert!(
            reply.text().contains("\"clusterHealthChecks\""),
            "{}",
            reply.text()
        );

        let csds_request = json!({
            "node": {"id": "csds-node", "cluster": "c"},
            "excludeResourceContents": true
        });
        let reply = gw
            .post_raw("/v3/discovery:client_status", &[], csds_request.to_string())
            .await;
        assert_ok(&reply, "CSDS");
        let body = reply.json();
        assert_eq!(body["config"][0]["node"]["id"], "csds-node", "{body}");
        let xds_config = &body["config"][0]["genericXdsConfigs"][0]["xdsConfig"];
        assert_eq!(xds_config["@type"], CDS, "a nested Any keeps @type: {body}");
        assert_eq!(xds_config["connectTimeout"], "1s", "{body}");

        let stats = cp.stats().await;
        let hds = &stats["hds_requests"];
        assert_eq!(hds.as_array().map(Vec::len), Some(1), "{stats}");
        assert_eq!(hds[0]["node_id"], "hds-node", "{stats}");
        assert_eq!(
            hds[0]["health_check_protocols"],
            json!(["HTTP", "TCP"]),
            "{stats}"
        );
        let csds = &stats["csds_requests"];
        assert_eq!(csds.as_array().map(Vec::len), Some(1), "{stats}");
        assert_eq!(csds[0]["node_id"], "csds-node", "{stats}");
        assert_eq!(csds[0]["exclude_resource_contents"], true, "{stats}");
        assert_eq!(body, csds[0]["response"], "CSDS answer as canonical JSON");
        assert_eq!(stats["streams_total"], 0, "no session was needed: {stats}");

        // A body that is not the request message is a 400, not a call.
        let reply = gw
            .post_raw("/v3/discovery:client_status", &[], "not json")
            .await;
        assert_error(&reply, 400, "bad CSDS body");
        assert_eq!(
            cp.stats().await["csds_requests"].as_array().map(Vec::len),
            Some(1)
        );
    })
    .await;
}

#[tokio::test]
async fn pass_through_is_501_with_a_snapshot_source() {
    bounded(TEST_TIMEOUT, async {
        // No --upstream: the embedded demo snapshot.
        let gw = Gateway::start_with_args(&[]).await;
        for (path, body) in [
            (
                "/v3/discovery:health_check",
                json!({"health_check_request": {"node": {"id": "n"}}}),
            ),
            ("/v3/discovery:client_status", json!({"node": {"id": "n"}})),
        ] {
            let reply = gw.post_raw(path, &[], body.to_string()).await;
            let message = assert_error(&reply, 501, path);
            assert!(message.contains("--upstream"), "{path}: {message}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_services_are_unimplemented_and_fail_cleanly() {
    with_control_plane(&["--no-delta", "--no-fetch"], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let flags =
            |mode: &'static str| ["--upstream-mode", mode, "--first-response-timeout", "500ms"];
        let upstream = cp.upstream();
        let (delta_flags, fetch_flags, sotw_flags) =
            (flags("delta"), flags("fetch"), flags("sotw"));
        let (delta, fetch, sotw) = tokio::join!(
            Gateway::start(&upstream, &delta_flags),
            Gateway::start(&upstream, &fetch_flags),
            Gateway::start(&upstream, &sotw_flags),
        );
        let n = node("disabled");
        let reply = delta.discover("clusters", &request(&n, "", &[])).await;
        assert_error(&reply, 503, "delta mode, no delta upstream");
        let reply = fetch.discover("clusters", &request(&n, "", &[])).await;
        let message = assert_error(&reply, 503, "fetch mode, no fetch upstream");
        assert!(message.contains("Unimplemented"), "{message}");
        let reply = sotw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&reply, "SotW still served");
        assert_eq!(upstream_of(&reply), "v1");
        let stats = cp.stats().await;
        assert!(
            stats["unimplemented"]["delta"].as_u64() >= Some(1),
            "{stats}"
        );
        assert!(
            stats["unimplemented"]["fetch"].as_u64() >= Some(1),
            "{stats}"
        );
        assert_eq!(stats["unimplemented"]["sotw"], 0, "{stats}");

        // Switched at run time.
        cp.configure(json!({"no_fetch": false})).await;
        let reply = fetch.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&reply, "fetch enabled at run time");
    })
    .await;
}

/// Fetch mode keeps a session per node, as the stream modes do: the admin
/// shows it, and while the upstream fails its polls are served the
/// session's state marked stale, with the upstream's error in the view;
/// once the upstream answers again the mark goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_mode_sessions_serve_stale_and_show_the_upstreams_error() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Gateway::start(
            &cp.upstream(),
            &["--upstream-mode", "fetch", "--fetch-cache-ttl", "1ms"],
        )
        .await;
        let n = node("fetch-session");
        let session = async || {
            let sessions = gw.admin_json("/debug/sessions").await;
            let list = sessions["sessions"].as_array().cloned().unwrap_or_default();
            list.into_iter()
                .find(|s| s["node_id"] == "fetch-session")
                .unwrap_or_else(|| panic!("no session: {sessions}"))
        };
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        assert_eq!(first.header("x-xds-gateway-stale-since"), None);
        let view = session().await;
        assert!(
            view["source"]
                .as_str()
                .unwrap_or_default()
                .contains("(fetch)"),
            "{view}"
        );
        assert_eq!(view["types"]["clusters"]["version"], "v1", "{view}");
        assert!(view["stale_since"].is_null(), "{view}");

        cp.configure(json!({"no_fetch": true})).await;
        let stale = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&stale, "a poll while the upstream fails");
        assert_eq!(upstream_of(&stale), "v1");
        assert!(
            stale.header("x-xds-gateway-stale-since").is_some(),
            "not marked stale"
        );
        let view = session().await;
        assert!(view["stale_since"].is_string(), "{view}");
        let error = view["last_error"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("Unimplemented"), "{view}");

        cp.configure(json!({"no_fetch": false})).await;
        let fresh = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&fresh, "a poll once the upstream answers again");
        assert_eq!(fresh.header("x-xds-gateway-stale-since"), None);
        let view = session().await;
        assert!(
            view["stale_since"].is_null() && view["last_error"].is_null(),
            "{view}"
        );
    })
    .await;
}

/// The readyz `source` line of a gateway (it names the mode in use).
async fn readyz_source(gw: &Gateway) -> String {
    let reply = gw.readyz().await.unwrap_or_else(|e| panic!("{e}"));
    reply.json()["source"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `--upstream-mode auto` picks delta, else SotW, else fetch, by what the
/// upstream answers UNIMPLEMENTED to, and serves in the mode it picked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_picks_delta_then_sotw_then_fetch() {
    let test = "auto_mode_picks_delta_then_sotw_then_fetch";
    for (flags, expected) in [
        (&[][..], "delta"),
        (&["--no-delta"][..], "sotw"),
        (&["--no-delta", "--no-sotw"][..], "fetch"),
    ] {
        let cp = ControlPlane::start_with(test, flags);
        bounded(TEST_TIMEOUT, async {
            cp.set(CDS, "v1", &[cluster("a")]).await;
            let gw = Gateway::start(&cp.upstream(), &["--upstream-mode", "auto"]).await;
            let n = node("auto");
            let reply = eventually(Duration::from_secs(15), Duration::from_millis(100), || {
                let (gw, n) = (&gw, &n);
                async move {
                    let reply = gw.discover("clusters", &request(n, "", &[])).await;
                    (reply.status == 200).then_some(reply)
                }
            })
            .await
            .unwrap_or_else(|| panic!("{flags:?}: never served\n{}", gw.log_text()));
            if expected == "delta" {
                assert_digest_version(&version_of(&reply), "auto → delta");
            } else {
                assert_eq!(upstream_of(&reply), "v1");
            }
            assert_eq!(names_of(&reply), ["a"]);
            let source = readyz_source(&gw).await;
            assert!(
                source.contains(&format!("({expected})")),
                "{flags:?}: {source}"
            );
            let stats = cp.stats().await;
            match expected {
                "delta" => assert!(stats["streams_total"].as_u64() >= Some(1), "{stats}"),
                "fetch" => assert!(fetches(&stats, CDS) >= 1, "{stats}"),
                _ => {}
            }
            assert!(
                gw.log_text().contains("upstream mode chosen by probing"),
                "{}",
                gw.log_text()
            );
        })
        .await;
    }
}
