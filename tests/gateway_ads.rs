//! The gateway binary against a real SotW ADS control plane.
//!
//! Every test starts its own reference control plane
//! (`tests/support/ads_server.py`, grpcio + xds-protos, independent of the
//! gateway's code) and its own `xds-gateway` process on free loopback
//! ports, so the tests run in parallel; both processes are killed when the
//! test ends, pass or fail. Every test is bounded by [`TEST_TIMEOUT`].
//!
//! Python comes from `XDS_GATEWAY_PYTHON` (set by `scripts/test`) or the
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

use gateway::{metric_sum, ControlPlane, Gateway};
use process::eventually;
use rest::{
    assert_error, assert_nack_detail, assert_ok, bounded, cluster, corpus, main_cases, nacks_above,
    named, names_of, node, other_cases, request, stats_until, upstream_of, version_of,
    with_control_plane, Case, CDS, EDS, LDS, SDS,
};

/// No test may take longer than this in total.
const TEST_TIMEOUT: Duration = Duration::from_secs(45);
/// How long [`stats_until`] waits for the control plane to show something.
const STATS_WAIT: Duration = Duration::from_secs(10);

/// Every object with `"@type"` counted, at any depth.
fn type_markers(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.contains_key("@type")) + map.values().map(type_markers).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(type_markers).sum(),
        _ => 0,
    }
}

/// The requests the control plane recorded for `type_url`.
fn requests_of<'a>(stats: &'a Value, type_url: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    stats["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |r| r["type_url"] == type_url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_is_served_as_canonical_json() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let gw = Gateway::start(&cp.upstream(), &["--allow-secrets"]).await;
        let n = node("every-type");
        let [lds, rds, cds, eds] = main_cases();
        let [srds, sds, rtds, ecds] = other_cases();
        let cases = [lds, rds, srds, cds, eds, sds, rtds, ecds];
        for Case {
            endpoint,
            type_url,
            upstream: resources,
            asked,
            expected,
        } in cases
        {
            let version = format!("{endpoint}-7");
            let canonical = cp.set(type_url, &version, &resources).await;
            let reply = gw.discover(endpoint, &request(&n, "", &asked)).await;
            assert_ok(&reply, endpoint);
            let body = reply.json();
            assert_eq!(upstream_of(&reply), version, "{endpoint}");
            assert_eq!(body["typeUrl"], json!(type_url), "{endpoint}");
            assert!(
                body.get("version_info").is_none(),
                "{endpoint}: snake_case field: {body}"
            );
            let mut got_names = names_of(&reply);
            let mut want_names: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            got_names.sort();
            want_names.sort();
            assert_eq!(got_names, want_names, "{endpoint}: resource names");
            // Each resource is exactly protobuf's canonical JSON of it
            // (camelCase, every nested Any with "@type").
            for got in body["resources"].as_array().unwrap() {
                assert_eq!(got["@type"], json!(type_url), "{endpoint}: {got}");
                let want = canonical
                    .iter()
                    .find(|c| {
                        c.get("name").or_else(|| c.get("clusterName"))
                            == got.get("name").or_else(|| got.get("clusterName"))
                    })
                    .unwrap_or_else(|| panic!("{endpoint}: unexpected resource {got}"));
                assert_eq!(got, want, "{endpoint}: not protobuf's canonical JSON");
                let source = resources
                    .iter()
                    .find(|r| {
                        r.get("name").or_else(|| r.get("cluster_name"))
                            == got.get("name").or_else(|| got.get("clusterName"))
                    })
                    .unwrap();
                assert_eq!(
                    type_markers(got),
                    type_markers(source),
                    "{endpoint}: an Any lost its @type"
                );
            }
        }
        // camelCase, spot-checked on a nested field.
        let reply = gw.discover("clusters", &request(&n, "", &[])).await;
        let text = reply.text();
        assert!(text.contains("\"edsClusterConfig\""), "{text}");
        assert!(!text.contains("\"eds_cluster_config\""), "{text}");
    })
    .await;
}

#[tokio::test]
async fn secrets_are_forbidden_without_allow_secrets() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(SDS, "1", &[corpus("secret")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let reply = gw
            .discover("secrets", &request(&node("n"), "", &["client_cert"]))
            .await;
        let message = assert_error(&reply, 403, "secrets without --allow-secrets");
        assert!(message.contains("--allow-secrets"), "{message}");
        // Nothing was asked upstream for it.
        let stats = cp.stats().await;
        assert_eq!(requests_of(&stats, SDS).count(), 0, "{stats}");
    })
    .await;
}

#[tokio::test]
async fn not_modified_rules() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a"), cluster("b")]).await;
        cp.set(EDS, "e1", &[named(EDS, "a"), named(EDS, "b")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let n = node("not-modified");

        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        assert_eq!(upstream_of(&first), "v1");
        let v1 = version_of(&first);
        let same = gw.discover("clusters", &request(&n, &v1, &[])).await;
        assert_eq!(same.status, 304, "same version and names: {}", same.text());
        let upstream_only = gw.discover("clusters", &request(&n, "v1", &[])).await;
        assert_ok(
            &upstream_only,
            "the upstream's version is not what was served",
        );
        assert!(same.body.is_empty(), "304 with a body: {}", same.text());
        // An empty version_info never gets a 304.
        for _ in 0..2 {
            let again = gw.discover("clusters", &request(&n, "", &[])).await;
            assert_ok(&again, "empty version_info");
            assert_eq!(again.body, first.body);
        }

        let a = gw.discover("endpoints", &request(&n, "", &["a"])).await;
        assert_ok(&a, "EDS a");
        assert_eq!(names_of(&a), ["a"]);
        let va = version_of(&a);
        let a_again = gw.discover("endpoints", &request(&n, &va, &["a"])).await;
        assert_eq!(a_again.status, 304, "{}", a_again.text());
        // A client adding a name at the same version gets a 200 with it.
        let ab = gw
            .discover("endpoints", &request(&n, &va, &["a", "b"]))
            .await;
        assert_ok(&ab, "EDS a+b at the same version");
        assert_eq!(upstream_of(&ab), "e1");
        assert_eq!(names_of(&ab), ["a", "b"]);
        let vab = version_of(&ab);
        let ab_again = gw
            .discover("endpoints", &request(&n, &vab, &["b", "a"]))
            .await;
        assert_eq!(ab_again.status, 304, "{}", ab_again.text());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_is_answered_on_change_and_times_out_with_304() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let n = node("long-poll");
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        assert_eq!(upstream_of(&first), "v1");

        let held = {
            let body = request(&n, &version_of(&first), &[]).to_string();
            let port = gw.port;
            tokio::spawn(async move {
                let started = Instant::now();
                let reply = gateway::discover_on(port, "clusters?wait=10s", body)
                    .await
                    .unwrap();
                (reply, started.elapsed())
            })
        };
        let is_held = eventually(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async {
                (metric_sum(&gw.metrics().await, "xds_gateway_long_polls_held") >= 1.0)
                    .then_some(())
            },
        )
        .await;
        assert!(is_held.is_some(), "the long poll was not held");
        assert!(!held.is_finished(), "the long poll was answered while held");
        let pushed = Instant::now();
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        let (reply, elapsed) = held.await.unwrap();
        assert_ok(&reply, "held poll");
        assert_eq!(upstream_of(&reply), "v2");
        let v2 = version_of(&reply);
        assert_eq!(names_of(&reply), ["a", "b"]);
        assert!(
            pushed.elapsed() < Duration::from_secs(5),
            "answered too late after the push: {elapsed:?}"
        );

        // Nothing changes: a short wait ends in a 304.
        let started = Instant::now();
        let reply = gw
            .post_raw(
                "/v3/discovery:clusters?wait=300ms",
                &[],
                request(&n, &v2, &[]).to_string(),
            )
            .await;
        let elapsed = started.elapsed();
        assert_eq!(reply.status, 304, "{}", reply.text());
        assert!(reply.body.is_empty());
        assert!(
            elapsed >= Duration::from_millis(250),
            "not held: {elapsed:?}"
        );
        assert!(
            elapsed < Duration::from_secs(5),
            "held too long: {elapsed:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn upstream_change_is_visible_on_the_next_poll() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(LDS, "1", &[named(LDS, "l1")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let n = node("next-poll");
        let first = gw.discover("listeners", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        assert_eq!(upstream_of(&first), "1");
        let v1 = version_of(&first);
        cp.set(LDS, "2", &[named(LDS, "l1"), named(LDS, "l2")])
            .await;
        // The push travels upstream → gateway asynchronously: poll as Envoy
        // would, presenting what it has.
        let reply = eventually(Duration::from_secs(5), Duration::from_millis(50), || {
            let (gw, n, v1) = (&gw, &n, &v1);
            async move {
                let reply = gw.discover("listeners", &request(n, v1, &[])).await;
                (reply.status == 200 && upstream_of(&reply) == "2").then_some(reply)
            }
        })
        .await
        .expect("version 2 never served");
        assert_eq!(names_of(&reply), ["l1", "l2"]);
        // The ACK may reach the control plane just after the poll is served.
        let stats = stats_until(cp, STATS_WAIT, "version 2 ACKed", |stats| {
            requests_of(stats, LDS).any(|r| r["version_info"] == "2" && r["error_detail"].is_null())
        })
        .await;
        assert_eq!(stats["streams_total"], 1, "{stats}");
    })
    .await;
}

#[tokio::test]
async fn undecodable_update_is_nacked_and_the_last_good_version_served() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "good", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let n = node("nack");
        let good = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&good, "first poll");
        assert_eq!(upstream_of(&good), "good");
        let vgood = version_of(&good);

        // Field 1 (name), length-delimited, with a truncated length varint.
        cp.set_raw(CDS, "bad", &[("a", CDS, b"\x0a\xff\xff\xff")])
            .await;
        let stats = nacks_above(cp, STATS_WAIT, "a NACK of version bad", 0).await;
        let nack = requests_of(&stats, CDS)
            .find(|r| !r["error_detail"].is_null())
            .unwrap_or_else(|| panic!("no request with error_detail: {stats}"));
        assert_eq!(
            nack["version_info"], "good",
            "a NACK presents the last good version: {nack}"
        );
        assert_nack_detail(nack);
        // /debug/sessions shows the session: stream open, version good
        // served, the NACK of bad sent with its detail.
        let view = gw.admin_json("/debug/sessions").await;
        let session = view["sessions"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["node_id"] == "nack"))
            .unwrap_or_else(|| panic!("no session of node nack: {view}"))
            .clone();
        assert_eq!(session["stream"], "open", "{session}");
        assert_eq!(session["clients"], 1, "{session}");
        let cds = &session["types"]["clusters"];
        assert_eq!(cds["version"], "good", "{session}");
        assert_eq!(cds["wildcard"], true, "{session}");
        assert_eq!(cds["last_reply"]["kind"], "NACK", "{session}");
        assert_eq!(cds["last_reply"]["version"], "good", "{session}");
        assert!(cds["last_reply"]["error_detail"].is_string(), "{session}");

        for version in ["", vgood.as_str()] {
            let reply = gw.discover("clusters", &request(&n, version, &[])).await;
            if version.is_empty() {
                assert_ok(&reply, "after the NACK");
                assert_eq!(reply.body, good.body, "the last good body is served");
            } else {
                assert_eq!(reply.status, 304, "{}", reply.text());
            }
        }
        // A good update after the bad one is taken again.
        cp.set(CDS, "good2", &[cluster("a"), cluster("b")]).await;
        let reply = eventually(Duration::from_secs(5), Duration::from_millis(50), || {
            let (gw, n, vgood) = (&gw, &n, &vgood);
            async move {
                let reply = gw.discover("clusters", &request(n, vgood, &[])).await;
                (reply.status == 200 && upstream_of(&reply) == "good2").then_some(reply)
            }
        })
        .await
        .expect("good2 never served");
        assert_eq!(names_of(&reply), ["a", "b"]);
    })
    .await;
}

/// `--upstream-node-first-only`, as Envoy's `set_node_on_first_message_only`:
/// the node on the first request of the stream only (what the protocol
/// guarantees), sparing each ACK the node's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_node_goes_on_the_first_request_only_when_asked() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        cp.set(EDS, "1", &[]).await;
        let gw = Gateway::start(&cp.upstream(), &["--upstream-node-first-only"]).await;
        let reply = gw
            .discover("clusters", &request(&node("first"), "", &[]))
            .await;
        assert_ok(&reply, "clusters");
        let reply = gw
            .discover("endpoints", &request(&node("first"), "", &["a"]))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let stats = cp.stats().await;
        let requests = stats["requests"].as_array().unwrap();
        assert!(requests.len() > 1, "{stats}");
        let with_node: Vec<_> = requests.iter().filter(|r| r["has_node"] == true).collect();
        assert_eq!(with_node.len(), 1, "the first request only: {stats}");
        assert_eq!(with_node[0]["node_id"], "first");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_of_one_node_share_one_upstream_stream() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let port = gw.port;
        let clients: Vec<_> = (0..20)
            .map(|_| {
                let body = request(&node("shared"), "", &[]).to_string();
                tokio::spawn(
                    async move { gateway::discover_on(port, "clusters", body).await.unwrap() },
                )
            })
            .collect();
        let mut bodies = Vec::new();
        for client in clients {
            let reply = client.await.unwrap();
            assert_ok(&reply, "concurrent client");
            bodies.push(reply.body);
        }
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "clients got different bodies"
        );
        let stats = cp.stats().await;
        assert_eq!(stats["streams_total"], 1, "20 clients of one node: {stats}");
        let requests = stats["requests"].as_array().unwrap();
        assert!(requests.len() > 1, "{stats}");
        assert!(
            requests
                .iter()
                .all(|r| r["has_node"] == true && r["node_id"] == "shared"),
            "by default the node goes on every request, as Envoy's own client sends it \
             (java-control-plane keys each request on its own node): {stats}"
        );

        let other = gw
            .discover("clusters", &request(&node("other"), "", &[]))
            .await;
        assert_ok(&other, "another node");
        let stats = cp.stats().await;
        assert_eq!(stats["streams_total"], 2, "a second node: {stats}");
        assert_eq!(stats["streams_open"], 2, "{stats}");
    })
    .await;
}

/// Issue 38, finding 12: the node fields outside the session key are the
/// first client's, for every client of the identity; `/debug/sessions`
/// shows what the upstream was sent, and the upstream saw the same.
#[tokio::test]
async fn the_first_clients_user_agent_is_what_the_upstream_sees_and_is_shown() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let mut first = node("agents");
        first["user_agent_name"] = json!("evil");
        first["user_agent_build_version"] =
            json!({"version": {"major_number": 6, "minor_number": 6, "patch": 6}});
        first["client_features"] = json!(["feature.a"]);
        first["extensions"] = json!([{"name": "ext.one", "category": "c"}]);
        let mut later = node("agents");
        later["user_agent_name"] = json!("envoy");
        later["user_agent_version"] = json!("1.40.0");
        assert_ok(
            &gw.discover("clusters", &request(&first, "", &[])).await,
            "first",
        );
        assert_ok(
            &gw.discover("clusters", &request(&later, "", &[])).await,
            "later",
        );
        let view = gw.admin_json("/debug/sessions").await;
        let sessions = view["sessions"].as_array().expect("sessions");
        assert_eq!(sessions.len(), 1, "one identity, one session: {view}");
        assert_eq!(
            sessions[0]["node_sent"],
            json!({
                "user_agent_name": "evil",
                "user_agent_version": "6.6.6",
                "client_features": [
                    "feature.a",
                    "xds.config.supports-resource-in-sotw",
                    "xds.config.supports-resource-ttl"
                ],
                "extensions": 1,
                "left_out": []
            }),
            "{view}"
        );
        let stats = cp.stats().await;
        assert!(
            requests_of(&stats, CDS).all(|r| r["user_agent_name"] == "evil"),
            "the upstream is sent the first client's node on every request: {stats}"
        );
    })
    .await;
}

#[tokio::test]
async fn idle_session_closes_its_upstream_stream() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &["--idle-timeout", "1s"]).await;
        let reply = gw
            .discover("clusters", &request(&node("idle"), "", &[]))
            .await;
        assert_ok(&reply, "poll");
        let started = Instant::now();
        stats_until(
            cp,
            STATS_WAIT,
            "the stream closed after the idle timeout",
            |s| s["streams_total"] == 1 && s["streams_open"] == 0,
        )
        .await;
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(500),
            "closed too early: {elapsed:?}"
        );
        // Polling again opens a fresh session and stream.
        let reply = gw
            .discover("clusters", &request(&node("idle"), "", &[]))
            .await;
        assert_ok(&reply, "poll after idling out");
        let stats = cp.stats().await;
        assert_eq!(stats["streams_total"], 2, "{stats}");
    })
    .await;
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_do_not_disturb_others() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &["--max-body-bytes", "2048"]).await;
        let n = node("bad-input");
        let good = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&good, "good poll");

        // Unknown path: 404 naming the closest endpoint.
        let reply = gw
            .post_raw(
                "/v3/discovery:cluster",
                &[],
                request(&n, "", &[]).to_string(),
            )
            .await;
        let message = assert_error(&reply, 404, "unknown path");
        assert!(message.contains("/v3/discovery:clusters"), "{message}");

        // Bodies that are not a JSON object, or too big.
        let too_big = json!({"node": node("x"), "version_info": "x".repeat(4096)}).to_string();
        for (what, body, status) in [
            ("not JSON", "this is not json".to_owned(), 400),
            ("truncated JSON", "{\"node\":".to_owned(), 400),
            ("array body", "[1,2,3]".to_owned(), 400),
            ("over --max-body-bytes", too_big, 413),
        ] {
            let reply = gw.post_raw("/v3/discovery:clusters", &[], body).await;
            assert_error(&reply, status, what);
            // A good request in between is answered as before.
            let again = gw.discover("clusters", &request(&n, "", &[])).await;
            assert_ok(&again, "good poll after a bad one");
            assert_eq!(again.body, good.body, "after {what}");
        }

        // type_url contradicting the path.
        let mut contradicting = request(&n, "", &[]);
        contradicting["type_url"] = json!(LDS);
        let reply = gw.discover("clusters", &contradicting).await;
        let message = assert_error(&reply, 400, "type_url contradicting the path");
        assert!(message.contains("type_url"), "{message}");
        // A matching type_url is fine.
        let mut matching = request(&n, "", &[]);
        matching["type_url"] = json!(CDS);
        assert_ok(
            &gw.discover("clusters", &matching).await,
            "matching type_url",
        );

        // No node id: the upstream keys config on it, so no session for nobody.
        for body in [json!({}), json!({"node": {"cluster": "c"}})] {
            let reply = gw.discover("clusters", &body).await;
            let message = assert_error(&reply, 400, "no node id");
            assert!(message.contains("node id"), "{message}");
        }
        let reply = gw.get("/v3/discovery:clusters?cluster=c").await;
        assert_error(&reply, 400, "GET without ?node");

        // A bad ?wait.
        let reply = gw
            .post_raw(
                "/v3/discovery:clusters?wait=soon",
                &[],
                request(&n, "", &[]).to_string(),
            )
            .await;
        assert_error(&reply, 400, "bad wait");

        let last = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&last, "final good poll");
        assert_eq!(last.body, good.body);
        let still_304 = gw
            .discover("clusters", &request(&n, &version_of(&good), &[]))
            .await;
        assert_eq!(still_304.status, 304, "{}", still_304.text());
    })
    .await;
}

/// A resource that decodes but breaks one of Envoy's own field rules
/// (`connect_timeout` must be positive): Envoy would reject the whole
/// update, so the gateway NACKs it with the resource, field and rule, keeps
/// serving the last good state and counts it; `--validate off` serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_envoy_would_reject_is_nacked_and_not_served() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "good", &[cluster("a")]).await;
        let upstream = cp.upstream();
        let (checking, trusting) = tokio::join!(
            Gateway::start(&upstream, &[]),
            Gateway::start(&upstream, &["--validate", "off"]),
        );
        let n = node("validate");
        let good = checking.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&good, "first poll");
        assert_ok(
            &trusting
                .discover("clusters", &request(&node("trusting"), "", &[]))
                .await,
            "first poll",
        );

        let mut bad = cluster("b");
        bad["connect_timeout"] = json!("-1s");
        cp.set(CDS, "bad", &[cluster("a"), bad]).await;
        let stats = nacks_above(cp, STATS_WAIT, "a NACK of version bad", 0).await;
        let nack = requests_of(&stats, CDS)
            .find(|r| !r["error_detail"].is_null())
            .unwrap_or_else(|| panic!("no NACK: {stats}"));
        let detail = nack["error_detail"]["message"].as_str().unwrap_or_default();
        for part in ["\"b\"", "connect_timeout", "duration.gt", "greater than 0s"] {
            assert!(detail.contains(part), "NACK detail lacks {part}: {detail}");
        }
        assert_eq!(nack["version_info"], "good", "{nack}");
        let again = checking.discover("clusters", &request(&n, "", &[])).await;
        assert_eq!(again.body, good.body, "the last good state is served");
        let metrics = checking.metrics().await;
        assert!(
            metric_sum(&metrics, "xds_gateway_invalid_resources_total") >= 1.0,
            "{metrics}"
        );
        // Without validation the update is taken (and Envoy would reject it).
        let served = eventually(
            Duration::from_secs(5),
            Duration::from_millis(50),
            || async {
                let reply = trusting
                    .discover("clusters", &request(&node("trusting"), "", &[]))
                    .await;
                (upstream_of(&reply) == "bad").then_some(reply)
            },
        )
        .await
        .expect("--validate off serves the update");
        assert_eq!(names_of(&served), ["a", "b"]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_is_a_503_and_others_are_unaffected() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "1", &[cluster("a")]).await;
        let closed = process::free_port();
        let (dead_upstream, good_upstream) = (format!("grpc://127.0.0.1:{closed}"), cp.upstream());
        let flags = ["--first-response-timeout", "500ms"];
        let (dead, working) = tokio::join!(
            Gateway::start(&dead_upstream, &flags),
            Gateway::start(&good_upstream, &flags),
        );
        let n = node("unreachable");
        let started = Instant::now();
        let reply = dead.discover("clusters", &request(&n, "", &[])).await;
        let message = assert_error(&reply, 503, "unreachable upstream");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let retry_after = reply
            .header("retry-after")
            .unwrap_or_else(|| panic!("no Retry-After"));
        assert!(
            retry_after.parse::<u64>().is_ok_and(|s| s >= 1),
            "Retry-After {retry_after:?}"
        );
        assert!(message.contains(CDS), "{message}");

        let good = working.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&good, "working gateway");
        assert_eq!(upstream_of(&good), "1");
        // The dead one stays answering (and failing) without harm.
        let again = dead.discover("clusters", &request(&n, "", &[])).await;
        assert_error(&again, 503, "unreachable upstream, again");
        // /readyz says why: the session is waiting (it never had state, so
        // it is not stale), with the upstream's last error.
        let readyz = dead.readyz().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(readyz.status, 503, "{}", readyz.text());
        let body = readyz.json();
        assert_eq!(body["waiting_sessions"], 1, "{body}");
        assert_eq!(body["stale_sessions"], 0, "{body}");
        let errors = body["session_errors"].to_string();
        assert!(
            errors.contains("\\\"unreachable\\\"") && errors.contains("waiting"),
            "{body}"
        );
        assert!(errors.to_lowercase().contains("connect"), "{body}");
    })
    .await;
}

#[tokio::test]
async fn suspected_rejection_is_counted_and_nacked_upstream() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Gateway::start(
            &cp.upstream(),
            &["--rejection-threshold", "2", "--forward-rejections"],
        )
        .await;
        let n = node("rejecting");
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_eq!(upstream_of(&first), "v1");
        let v1 = version_of(&first);
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        eventually(Duration::from_secs(5), Duration::from_millis(50), || {
            let (gw, n, v1) = (&gw, &n, &v1);
            async move {
                let reply = gw.discover("clusters", &request(n, v1, &[])).await;
                (reply.status == 200 && upstream_of(&reply) == "v2").then_some(())
            }
        })
        .await
        .expect("v2 never served");
        // The client keeps presenting v1: it rejected v2.
        for _ in 0..3 {
            let reply = gw.discover("clusters", &request(&n, &v1, &[])).await;
            assert_ok(&reply, "stale poll");
            assert_eq!(upstream_of(&reply), "v2");
        }
        let metrics = gw.metrics().await;
        let suspected = metric_sum(&metrics, "xds_gateway_suspected_rejections_total");
        assert!(
            suspected >= 1.0,
            "no suspected rejection counted:\n{metrics}"
        );

        let stats = nacks_above(cp, STATS_WAIT, "a forwarded NACK", 0).await;
        let nack = requests_of(&stats, CDS)
            .find(|r| !r["error_detail"].is_null())
            .unwrap_or_else(|| panic!("no NACK: {stats}"));
        let message = nack["error_detail"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("v1") && message.contains("v2"), "{nack}");
        assert_eq!(
            nack["kind"], "nack",
            "the NACK carries the latest nonce: {nack}"
        );
    })
    .await;
}

#[tokio::test]
async fn ads_config_sources_are_rewritten_for_envoy_clients_only() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let eds_cluster = json!({
            "@type": CDS,
            "name": "backend",
            "type": "EDS",
            "connect_timeout": "1s",
            "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}}
        });
        cp.set(CDS, "1", &[eds_cluster]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let ask = |agent: &str| {
            json!({
                "version_info": "",
                "node": {"id": "rewrite", "cluster": "c", "user_agent_name": agent},
                "resource_names": []
            })
            .to_string()
        };
        let envoy = gw
            .post_raw(
                "/v3/discovery:clusters",
                &[("host", "xds_cluster")],
                ask("envoy"),
            )
            .await;
        assert_ok(&envoy, "envoy client");
        let eds_config = &envoy.json()["resources"][0]["edsClusterConfig"]["edsConfig"];
        assert!(eds_config.get("ads").is_none(), "{eds_config}");
        let api = &eds_config["apiConfigSource"];
        assert_eq!(api["apiType"], "REST", "{eds_config}");
        assert_eq!(api["clusterNames"], json!(["xds_cluster"]), "{eds_config}");
        assert_eq!(api["transportApiVersion"], "V3", "{eds_config}");

        let curl = gw
            .post_raw(
                "/v3/discovery:clusters",
                &[("host", "xds_cluster")],
                ask("curl"),
            )
            .await;
        assert_ok(&curl, "curl client");
        let eds_config = &curl.json()["resources"][0]["edsClusterConfig"]["edsConfig"];
        assert_eq!(eds_config["ads"], json!({}), "{eds_config}");
        assert!(eds_config.get("apiConfigSource").is_none(), "{eds_config}");
        // Rewritten or not, the same upstream version; the served versions
        // differ (each names what that client got).
        assert_eq!(upstream_of(&curl), upstream_of(&envoy));
        assert_ne!(version_of(&curl), version_of(&envoy));
    })
    .await;
}

/// Clients of one node asking for different names at once: each gets its
/// own names, never a response that answered an older subscription.
async fn concurrent_names(flags: &[&str]) {
    with_control_plane(flags, TEST_TIMEOUT, async |cp| {
        let names: Vec<String> = (0..12).map(|i| format!("svc{i}")).collect();
        let resources: Vec<Value> = names.iter().map(|n| named(EDS, n)).collect();
        cp.set(EDS, "e1", &resources).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let port = gw.port;
        let clients: Vec<_> = names
            .iter()
            .map(|name| {
                let body = request(&node("many-names"), "", &[name]).to_string();
                let name = name.clone();
                tokio::spawn(async move {
                    let reply = gateway::discover_on(port, "endpoints", body).await.unwrap();
                    (name, reply)
                })
            })
            .collect();
        for client in clients {
            let (name, reply) = client.await.unwrap();
            assert_ok(&reply, &name);
            assert_eq!(
                names_of(&reply),
                std::slice::from_ref(&name),
                "{name}: {}",
                reply.text()
            );
        }
        let stats = cp.stats().await;
        assert_eq!(stats["streams_total"], 1, "{stats}");
        // The upstream ends up asked for every name.
        let last = requests_of(&stats, EDS).last().cloned().unwrap_or_default();
        assert_eq!(
            last["resource_names"].as_array().map(Vec::len),
            Some(12),
            "{stats}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_of_one_node_get_their_own_names() {
    concurrent_names(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_names_with_a_strict_nonce_control_plane() {
    concurrent_names(&["--strict-nonce"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_restart_keeps_serving_and_resubscribes() {
    let test = "upstream_restart_keeps_serving_and_resubscribes";
    let cp = ControlPlane::start(test);
    bounded(TEST_TIMEOUT, async {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Gateway::start(&cp.upstream(), &[]).await;
        let n = node("restart");
        let first = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&first, "first poll");
        let v1 = version_of(&first);
        let port = cp.ads_port;
        drop(cp);

        // The control plane is gone: the last state is still served.
        let cached = gw.discover("clusters", &request(&n, "", &[])).await;
        assert_ok(&cached, "poll while the control plane is down");
        assert_eq!(cached.body, first.body);
        let same = gw.discover("clusters", &request(&n, &v1, &[])).await;
        assert_eq!(same.status, 304, "{}", same.text());

        // A new control plane where the old one was: the session reconnects,
        // presents the version it holds, and takes the new snapshot.
        let cp = ControlPlane::start_on(test, port, &[]);
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        let reply = eventually(Duration::from_secs(15), Duration::from_millis(100), || {
            let (gw, n, v1) = (&gw, &n, &v1);
            async move {
                let reply = gw.discover("clusters", &request(n, v1, &[])).await;
                (reply.status == 200 && upstream_of(&reply) == "v2").then_some(reply)
            }
        })
        .await
        .expect("v2 never served after the control plane came back");
        assert_eq!(names_of(&reply), ["a", "b"]);
        let stats = cp.stats().await;
        let first_request = &stats["requests"][0];
        assert_eq!(first_request["has_node"], true, "{stats}");
        assert_eq!(first_request["node_id"], "restart", "{stats}");
        assert_eq!(
            first_request["version_info"], "v1",
            "resubscribes presenting v1: {stats}"
        );
    })
    .await;
}
