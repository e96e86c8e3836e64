//! The config history (`/debug/history`) and diffs (`/debug/diff`) of issue
//! 24, against control planes whose own logs say what they sent:
//!
//! - the history holds exactly the sequence of responses the scripted ADS
//!   server (`support/fake_ads.rs`) logged sending: each accepted one as a
//!   version with the resources it added, modified and removed, each NACKed
//!   one with the `error_detail` the server logged receiving; it outlives
//!   the session idling out; a version's content is served while held;
//! - the JSON-lines file (`--history-file`) has the same events;
//! - the byte bound evicts the oldest versions first;
//! - two nodes whose go-control-plane snapshots differ in one field of one
//!   cluster (inside a decoded `Any`) are told apart by exactly that cluster
//!   and that path; the resources shown parse with protobuf's reference
//!   JSON (`json_format` + `xds-protos`); two held versions of one node
//!   compare too; a principal that may not see both nodes gets a 403;
//! - bad input: an unknown type, a version not held.
//!
//! The gateway runs in process on loopback port 0.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/json_reference.rs"]
mod json_reference;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use fake_ads::FakeAds;
use gateway::{get_with_token, http_request, Reply};
use go_peer::GoControlPlane;
use inproc::InProcess;
use process::{eventually, require_python};
use rest::{bounded, CDS};
use xds_gateway::config::Config;
use xds_gateway::xds::Codec;

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(20);
const HTTP: Duration = Duration::from_secs(10);

/// A cluster as JSON: `name`, its connect timeout, and `extra` fields.
fn cluster_json(name: &str, timeout: &str, extra: Value) -> Value {
    let mut cluster =
        json!({"@type": CDS, "name": name, "type": "STATIC", "connect_timeout": timeout});
    if let (Some(cluster), Some(extra)) = (cluster.as_object_mut(), extra.as_object()) {
        cluster.extend(extra.clone());
    }
    cluster
}

/// JSON → the `Any` a control plane sends.
fn any(codec: &Codec, json: &Value) -> Any {
    let parsed = codec
        .parse_any(json.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{json}"));
    Any {
        type_url: parsed.type_url,
        value: parsed.value,
    }
}

/// One REST poll of clusters by `node`, with `token` when given.
async fn poll(port: u16, node: &str, token: Option<&str>) -> Reply {
    let body = json!({"node": {"id": node, "cluster": "test-cluster"}}).to_string();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth));
    }
    http_request(
        port,
        http::Method::POST,
        "/v3/discovery:clusters",
        &headers,
        body,
        HTTP,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Polls until `node` is served upstream version `version`.
async fn poll_until(port: u16, node: &str, token: Option<&str>, version: &str) {
    let served = eventually(WAIT, Duration::from_millis(50), || async {
        let reply = poll(port, node, token).await;
        let got = reply.json()["versionInfo"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        got.starts_with(&format!("{version}~")).then_some(())
    })
    .await;
    assert!(served.is_some(), "{node} was never served {version}");
}

async fn admin_get(gw: &InProcess, path: &str, token: Option<&str>) -> Reply {
    get_with_token(gw.admin_port, path, token, HTTP)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts a google.rpc.Status body of `code` with `status`; its message.
fn assert_status(reply: &Reply, status: u16, code: i64, what: &str) -> String {
    assert_eq!(reply.status, status, "{what}: {}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], code, "{what}: {body}");
    body["message"].as_str().unwrap_or_default().to_owned()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Added, modified and removed names from `old` to `new` (name → content).
fn expected_changes(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let added = new
        .keys()
        .filter(|n| !old.contains_key(*n))
        .cloned()
        .collect();
    let modified = new
        .iter()
        .filter(|(n, c)| old.get(*n).is_some_and(|o| o != *c))
        .map(|(n, _)| n.clone())
        .collect();
    let removed = old
        .keys()
        .filter(|n| !new.contains_key(*n))
        .cloned()
        .collect();
    (added, modified, removed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_holds_exactly_what_the_upstream_pushed_and_outlives_the_session() {
    bounded(TEST_TIMEOUT, async {
        let codec = Codec::embedded();
        let ads = FakeAds::start().await;
        // Each version: cluster name → connect timeout. v3 breaks Envoy's
        // rule (a zero connect timeout): the gateway NACKs it.
        let versions: [(&str, &[(&str, &str)]); 4] = [
            ("v1", &[("a", "1s"), ("b", "1s")]),
            ("v2", &[("a", "1s"), ("b", "2s"), ("c", "1s")]),
            ("v3", &[("a", "1s"), ("b", "2s"), ("bad", "0s")]),
            ("v4", &[("b", "2s"), ("c", "1s")]),
        ];
        let contents: BTreeMap<&str, BTreeMap<String, String>> = versions
            .iter()
            .map(|(v, list)| {
                let map = list
                    .iter()
                    .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
                    .collect();
                (*v, map)
            })
            .collect();
        let set = |version: &str| {
            let list = versions.iter().find(|(v, _)| *v == version).unwrap().1;
            let resources = list
                .iter()
                .map(|(n, t)| any(&codec, &cluster_json(n, t, json!({}))))
                .collect();
            ads.set(CDS, version, resources);
        };
        set("v1");
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("history.jsonl");
        let config = Config {
            upstream: Some(ads.url()),
            idle_timeout: Duration::from_secs(2),
            history_file: Some(file.clone()),
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        let port = gw.rest_port;
        poll_until(port, "n1", None, "v1").await;
        set("v2");
        poll_until(port, "n1", None, "v2").await;
        set("v3");
        let nacked = eventually(WAIT, Duration::from_millis(50), || async {
            ads.requests()
                .into_iter()
                .find(|r| r.type_url == CDS && r.error_detail.is_some())
        })
        .await
        .expect("the gateway NACKed v3");
        set("v4");
        poll_until(port, "n1", None, "v4").await;

        // The session idles out; its history stays.
        let idled = eventually(WAIT, Duration::from_millis(200), || async {
            let sessions = admin_get(&gw, "/debug/sessions", None).await.json();
            sessions["sessions"]
                .as_array()
                .is_some_and(|s| s.is_empty())
                .then_some(())
        })
        .await;
        assert!(idled.is_some(), "the session never idled out");
        let path = "/debug/history?node=n1&type=clusters";
        let before = admin_get(&gw, path, None).await;
        assert_eq!(before.status, 200, "{}", before.text());
        // A new session (a new stream) is served v4 again.
        poll_until(port, "n1", None, "v4").await;
        let streams = ads.streams_opened();
        assert!(streams >= 2, "a second stream after idling: {streams}");

        let history = admin_get(&gw, path, None).await;
        assert_eq!(history.status, 200, "{}", history.text());
        let history = history.json();
        let timelines = history["timelines"].as_array().expect("timelines");
        assert_eq!(timelines.len(), 1, "one identity: {history}");
        assert_eq!(timelines[0]["cluster"], "test-cluster");
        let events = timelines[0]["events"].as_array().expect("events");
        let before_events = before.json()["timelines"][0]["events"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(
            before_events >= 4,
            "held while no session was: {}",
            before.text()
        );

        // Against the server's own log: every response it sent, in order,
        // is one event; NACKed ones (a request with its nonce on its stream
        // carrying an error) are NACK events with the detail it received.
        let requests = ads.requests();
        let sent: Vec<_> = ads
            .responses()
            .into_iter()
            .filter(|r| r.type_url == CDS)
            .collect();
        assert_eq!(events.len(), sent.len(), "{history}\n{sent:?}");
        let mut held: BTreeMap<String, String> = BTreeMap::new();
        for (event, response) in events.iter().zip(&sent) {
            let nack = requests.iter().find(|r| {
                r.stream == response.stream
                    && r.type_url == CDS
                    && r.nonce == response.nonce
                    && r.error_detail.is_some()
            });
            assert_eq!(event["upstream_version"], response.version_info, "{event}");
            assert_eq!(event["nonce"], response.nonce, "{event}");
            match nack {
                Some(nack) => {
                    assert_eq!(event["event"], "nack", "{event}");
                    assert_eq!(
                        event["error_detail"].as_str(),
                        nack.error_detail.as_deref(),
                        "{event}"
                    );
                }
                None => {
                    assert_eq!(event["event"], "version", "{event}");
                    let new = &contents[response.version_info.as_str()];
                    let (added, modified, removed) = expected_changes(&held, new);
                    assert_eq!(strings(&event["added"]), added, "{event}");
                    assert_eq!(strings(&event["modified"]), modified, "{event}");
                    assert_eq!(strings(&event["removed"]), removed, "{event}");
                    assert_eq!(event["resources"], new.len(), "{event}");
                    held = new.clone();
                }
            }
        }
        let kinds: Vec<(&str, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().unwrap_or_default(),
                    e["upstream_version"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("version", "v1"),
                ("version", "v2"),
                ("nack", "v3"),
                ("version", "v4"),
                ("version", "v4"),
            ],
            "{history}"
        );
        assert!(
            nacked
                .error_detail
                .as_deref()
                .is_some_and(|d| d.contains("bad")),
            "{nacked:?}"
        );
        // The version after idling is compared with the one before it.
        assert_eq!(events[4]["since"], events[3]["version"], "{history}");

        // The JSON-lines file has the same events, with whose they are.
        let lines = eventually(WAIT, Duration::from_millis(50), || async {
            let text = std::fs::read_to_string(&file).ok()?;
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).expect("a JSON line"))
                .collect();
            (lines.len() >= events.len()).then_some(lines)
        })
        .await
        .expect("the history file has every event");
        assert_eq!(lines.len(), events.len(), "{lines:?}");
        for (line, event) in lines.iter().zip(events) {
            assert_eq!(line["node_id"], "n1");
            assert_eq!(line["cluster"], "test-cluster");
            assert_eq!(line["type"], "clusters");
            assert_eq!(line["identity"], timelines[0]["identity"]);
            let mut fields = line.as_object().cloned().unwrap_or_default();
            for whose in ["node_id", "cluster", "type", "identity"] {
                fields.remove(whose);
            }
            assert_eq!(&Value::Object(fields), event, "the line of {event}");
        }

        // A version's content, by the gateway's version or the upstream's.
        let v2 = events[1]["version"].as_str().expect("a gateway version");
        let shown = admin_get(&gw, &format!("{path}&version={}", urlencoding(v2)), None).await;
        assert_eq!(shown.status, 200, "{}", shown.text());
        let shown = shown.json();
        assert_eq!(shown["response"]["versionInfo"], v2, "{shown}");
        let names: Vec<&str> = shown["response"]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(shown["response"]["resources"][1]["connectTimeout"], "2s");
        let by_upstream = admin_get(&gw, &format!("{path}&version=v1"), None).await;
        assert_eq!(by_upstream.json()["event"]["version"], events[0]["version"]);

        // Bad input.
        let message = assert_status(
            &admin_get(&gw, "/debug/history?node=n1&type=clusterz", None).await,
            400,
            3,
            "an unknown type",
        );
        assert!(message.contains("clusterz"), "{message}");
        let message = assert_status(
            &admin_get(&gw, &format!("{path}&version=v9"), None).await,
            404,
            5,
            "a version never served",
        );
        assert!(message.contains("not held"), "{message}");
        assert_status(
            &admin_get(&gw, "/debug/history?node=nobody&type=clusters", None).await,
            404,
            5,
            "a node without history",
        );
        assert_status(
            &admin_get(&gw, "/debug/history?type=clusters", None).await,
            400,
            3,
            "no node",
        );
        // What v2 changed: the version held before it against it.
        let v2_changes = admin_get(&gw, "/debug/diff?node=n1&to=v2&type=clusters", None)
            .await
            .json();
        assert_eq!(v2_changes["a"]["upstream_version"], "v1", "{v2_changes}");
        assert_eq!(strings(&v2_changes["only_in_b"]), ["c"], "{v2_changes}");
        assert_eq!(v2_changes["differing"][0]["name"], "b", "{v2_changes}");
        // A version a client was served (its digest covers the rewrite of
        // config sources) is found by its upstream part.
        let served = poll(port, "n1", None).await.json()["versionInfo"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let found = admin_get(
            &gw,
            &format!("{path}&version={}", urlencoding(&served)),
            None,
        )
        .await;
        assert_eq!(
            found.json()["event"]["upstream_version"],
            "v4",
            "{}",
            found.text()
        );
        assert_status(
            &admin_get(&gw, "/debug/diff?node=n1&from=v1&to=v9&type=clusters", None).await,
            404,
            5,
            "a diff with a version not held",
        );
        // Two held versions of one node.
        let diff = admin_get(&gw, "/debug/diff?node=n1&from=v1&to=v4&type=clusters", None)
            .await
            .json();
        assert_eq!(strings(&diff["only_in_a"]), ["a"], "{diff}");
        assert_eq!(strings(&diff["only_in_b"]), ["c"], "{diff}");
        assert_eq!(diff["differing"][0]["name"], "b", "{diff}");
        assert_eq!(
            diff["differing"][0]["fields"],
            json!([{"path": "$.connectTimeout", "a": "1s", "b": "2s"}])
        );
        gw.stop().await;
    })
    .await;
}

/// Percent-encodes a query value (`~` and the digits are safe; the rest of
/// a gateway version is ASCII letters, digits and punctuation).
fn urlencoding(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_evicts_the_oldest_versions_first() {
    bounded(TEST_TIMEOUT, async {
        let codec = Codec::embedded();
        let ads = FakeAds::start().await;
        // One cluster of about 20 KB (held twice: its JSON and its
        // protobuf bytes), new in every version: a version costs ~40 KB, so
        // 150,000 bytes hold three and not four.
        let big = |version: &str| {
            let blob = format!("{version}{}", "x".repeat(20_000));
            let metadata = json!({"metadata": {"filter_metadata": {"test": {"blob": blob}}}});
            vec![any(&codec, &cluster_json("big", "1s", metadata))]
        };
        ads.set(CDS, "v1", big("v1"));
        let config = Config {
            upstream: Some(ads.url()),
            history_max_bytes: 150_000,
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        poll_until(gw.rest_port, "n1", None, "v1").await;
        for i in 2..=6 {
            let version = format!("v{i}");
            ads.set(CDS, &version, big(&version));
            poll_until(gw.rest_port, "n1", None, &version).await;
        }
        let sent: Vec<String> = ads
            .responses()
            .into_iter()
            .map(|r| r.version_info)
            .collect();
        assert_eq!(sent, ["v1", "v2", "v3", "v4", "v5", "v6"]);
        let history = admin_get(&gw, "/debug/history?node=n1&type=clusters", None)
            .await
            .json();
        let held: Vec<&str> = history["timelines"][0]["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|e| e["upstream_version"].as_str())
            .collect();
        assert_eq!(held, ["v4", "v5", "v6"], "the newest three: {history}");
        let (bytes, max) = (&history["held_bytes"], &history["max_bytes"]);
        assert!(
            bytes.as_u64() <= max.as_u64() && max == 150_000,
            "{history}"
        );
        let message = assert_status(
            &admin_get(&gw, "/debug/history?node=n1&type=clusters&version=v1", None).await,
            404,
            5,
            "an evicted version",
        );
        assert!(message.contains("evicted"), "{message}");
        gw.stop().await;
    })
    .await;
}

const ADMIN: &str = "admin-token-6a1f";
const FLEET: &str = "fleet-token-93c2";
const TEAM_A: &str = "team-a-token-08d7";

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Admin token; `fleet` may fetch every `node-*`; `team-a` only `node-a`.
fn policy() -> String {
    format!(
        r#"[admin]
token-sha256 = ["{admin}"]

[[principal]]
name = "fleet"
token-sha256 = ["{fleet}"]
[[principal.allow]]
nodes = ["node-*"]
clusters = ["*"]

[[principal]]
name = "team-a"
token-sha256 = ["{team}"]
[[principal.allow]]
nodes = ["node-a"]
clusters = ["*"]
types = ["clusters"]
"#,
        admin = sha(ADMIN),
        fleet = sha(FLEET),
        team = sha(TEAM_A),
    )
}

/// A cluster whose upstream TLS (a decoded `Any`) names `sni`.
fn tls_cluster(name: &str, sni: &str) -> Value {
    cluster_json(
        name,
        "1s",
        json!({"transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": sni
            }
        }}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diff_of_two_nodes_names_exactly_the_cluster_and_field_that_differ() {
    const TEST: &str = "a_diff_of_two_nodes_names_exactly_the_cluster_and_field_that_differ";
    bounded(TEST_TIMEOUT, async {
        let python = require_python(TEST);
        let cp = GoControlPlane::start(TEST);
        let shared = [tls_cluster("shared", "s.example"), cluster_json("plain", "3s", json!({}))];
        let snapshot = |sni: &str| {
            let mut list = shared.to_vec();
            list.push(tls_cluster("differs", sni));
            list
        };
        cp.set_snapshot("node-a", "a1", &[(CDS, snapshot("a.example"))])
            .await;
        cp.set_snapshot("node-b", "b1", &[(CDS, snapshot("b.example"))])
            .await;
        let dir = tempfile::tempdir().expect("a temp dir");
        let policy_path = dir.path().join("policy.toml");
        std::fs::write(&policy_path, policy()).expect("write the policy");
        let gw = InProcess::start(
            Config {
                upstream: Some(cp.upstream()),
                auth_policy: Some(policy_path),
                ..Config::default()
            }
            .validate()
            .expect("a valid configuration"),
        )
        .await;
        poll_until(gw.rest_port, "node-a", Some(FLEET), "a1").await;
        poll_until(gw.rest_port, "node-b", Some(FLEET), "b1").await;

        let path = "/debug/diff?node=node-a&with=node-b&type=clusters";
        let reply = admin_get(&gw, path, Some(ADMIN)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let diff = reply.json();
        assert_eq!(diff["only_in_a"], json!([]), "{diff}");
        assert_eq!(diff["only_in_b"], json!([]), "{diff}");
        assert_eq!(diff["identical"], 2, "{diff}");
        let differing = diff["differing"].as_array().expect("differing");
        assert_eq!(differing.len(), 1, "{diff}");
        assert_eq!(differing[0]["name"], "differs");
        assert_eq!(
            differing[0]["fields"],
            json!([{"path": "$.transportSocket.typedConfig.sni", "a": "a.example", "b": "b.example"}]),
            "{diff}"
        );
        assert_eq!(diff["a"]["upstream_version"], "a1");
        assert_eq!(diff["b"]["upstream_version"], "b1");

        // The resources shown are protobuf's reference JSON: json_format
        // parses them (their Anys decoded by type) and writes them back the
        // same.
        let shown: Vec<Value> = vec![differing[0]["a"].clone(), differing[0]["b"].clone()];
        let results = json_reference::reference(
            &python,
            &[json!({"op": "roundtrip", "items": shown.clone()})],
        );
        let results = results[0]["results"].as_array().expect("results").clone();
        assert_eq!(results.len(), 2);
        for (ours, theirs) in shown.iter().zip(&results) {
            assert!(theirs.get("error").is_none(), "python: {theirs}\nours: {ours}");
            let theirs: Value = serde_json::from_str(theirs["json"].as_str().unwrap_or("null"))
                .unwrap_or_else(|e| panic!("python's JSON: {e}"));
            assert_eq!(&theirs, ours, "python writes the resource otherwise");
        }

        // The text form, like diff -u.
        let text = admin_get(&gw, &format!("{path}&format=text"), Some(ADMIN)).await;
        assert_eq!(text.status, 200);
        assert!(text.header("content-type").unwrap_or_default().starts_with("text/plain"));
        let text = text.text();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().any(|l| l.starts_with("--- a/clusters/differs\tnode node-a")), "{text}");
        assert!(lines.iter().any(|l| l.starts_with("+++ b/clusters/differs\tnode node-b")), "{text}");
        let hunk = lines
            .iter()
            .position(|l| *l == "@@ $.transportSocket.typedConfig.sni @@")
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(lines[hunk + 1..hunk + 3], ["-\"a.example\"", "+\"b.example\""], "{text}");

        // Authorization per node: team-a sees node-a, not node-b.
        let history_a = "/debug/history?node=node-a&type=clusters";
        assert_eq!(admin_get(&gw, history_a, Some(TEAM_A)).await.status, 200);
        let message = assert_status(
            &admin_get(&gw, path, Some(TEAM_A)).await,
            403,
            7,
            "team-a diffing node-a with node-b",
        );
        assert!(message.contains("node-b"), "{message}");
        assert_status(
            &admin_get(&gw, "/debug/history?node=node-b&type=clusters", Some(TEAM_A)).await,
            403,
            7,
            "team-a reading node-b's history",
        );
        assert_status(
            &admin_get(&gw, "/debug/history?node=node-a&type=listeners", Some(TEAM_A)).await,
            403,
            7,
            "team-a reading a type it may not fetch",
        );
        assert_eq!(admin_get(&gw, path, Some(FLEET)).await.status, 200, "fleet sees both");
        assert_eq!(admin_get(&gw, path, None).await.status, 401, "no credential");
        assert_eq!(admin_get(&gw, path, Some("wrong")).await.status, 401);

        // Two versions of one node: a2 changes the field back and drops a
        // cluster.
        let mut a2 = snapshot("b.example");
        a2.retain(|c| c["name"] != "plain");
        cp.set_snapshot("node-a", "a2", &[(CDS, a2)]).await;
        poll_until(gw.rest_port, "node-a", Some(FLEET), "a2").await;
        let versions = admin_get(
            &gw,
            "/debug/diff?node=node-a&from=a1&to=a2&type=clusters",
            Some(ADMIN),
        )
        .await
        .json();
        assert_eq!(versions["only_in_a"], json!(["plain"]), "{versions}");
        assert_eq!(versions["only_in_b"], json!([]), "{versions}");
        assert_eq!(versions["differing"][0]["fields"][0]["path"], "$.transportSocket.typedConfig.sni");
        // ... and now the two nodes are served alike.
        let alike = admin_get(&gw, path, Some(ADMIN)).await.json();
        assert_eq!(alike["differing"], json!([]), "{alike}");
        assert_eq!(alike["only_in_b"], json!(["plain"]), "{alike}");
        gw.stop().await;
    })
    .await;
}
