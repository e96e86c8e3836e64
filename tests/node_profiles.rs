//! Node profiles for GETs (issue 24): `GET ?profile=NAME&node=ID` presents
//! the profile's node, and is exactly the request a POST of that node is.
//!
//! - Against go-control-plane keying its snapshots by a node metadata field
//!   (`--node-hash-metadata CLUSTER_ID`): a profile-based GET (a profile of
//!   the `--config` file's `[[profile]]` tables, one of a `--node-profiles`
//!   file in the `/config_dump` bootstrap form, and one-off inline
//!   `?metadata=`) gets byte for byte the body the same node POSTed gets,
//!   through the same session; the profile's metadata decides the
//!   snapshot, and a plain `?node=ID` GET gets another one.
//! - The auth policy binds a profile-made node as it binds a POSTed one:
//!   for every case, the GET's status is the POST's (403 where the
//!   principal may not present that node, whatever the profile says).
//! - Bad input is a 400 `google.rpc.Status` naming the parameter: an
//!   unknown profile, metadata that is not a JSON object, a malformed
//!   locality or user agent.
//! - A real Envoy's node, copied out of its `/config_dump` into a
//!   `--node-profiles` file, makes a GET that joins that Envoy's own
//!   session and is answered at the version the Envoy holds; the Envoy is a
//!   subscriber on the status page, a curl GET a one-shot reader.
//!
//! The gateway runs in process on kernel-chosen loopback ports (as a child
//! process beside the real Envoy); the peer and Envoy are child processes,
//! killed when the test ends.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/go_peer.rs"]
mod go_peer;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;
#[path = "support/rest.rs"]
mod rest;

use std::time::Duration;

use serde_json::{json, Value};

use gateway::{http_request, Reply};
use go_peer::GoControlPlane;
use inproc::InProcess;
use rest::{bounded, cluster, names_of, CDS};
use sha2::{Digest, Sha256};
use xds_gateway::config::{Config, ProfileTable};

const TIMEOUT: Duration = Duration::from_secs(15);
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// `%`-encodes everything but unreserved characters (a query value).
fn encode(value: &str) -> String {
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

async fn get(port: u16, path: &str, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    http_request(
        port,
        http::Method::GET,
        path,
        &headers,
        bytes::Bytes::new(),
        TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn post(port: u16, kind: &str, body: &Value, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(auth.iter().map(|a| ("authorization", a.as_str())));
    http_request(
        port,
        http::Method::POST,
        &format!("/v3/discovery:{kind}"),
        &headers,
        body.to_string(),
        TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The node an Istio sidecar of `cluster_id` sends (as its bootstrap has it).
fn sidecar(cluster_id: &str) -> Value {
    json!({
        "id": "sidecar~10.0.0.1~template.default~default.svc.cluster.local",
        "cluster": "reviews.default",
        "metadata": {
            "CLUSTER_ID": cluster_id,
            "ISTIO_VERSION": "1.23.2",
            "NAMESPACE": "default",
            "LABELS": {"app": "reviews", "version": "v1"},
            "ENVOY_PROMETHEUS_PORT": 15090,
        },
        "locality": {"region": "us-east1", "zone": "us-east1-b"},
        "userAgentName": "envoy",
        "userAgentBuildVersion": {"version": {"majorNumber": 1, "minorNumber": 31, "patch": 2}},
    })
}

/// `node` with its id (and cluster, if given) replaced: the node a GET of
/// its profile with `?node=id` presents. An Istio proxy's node whose id
/// names a pod (`TYPE~IP~POD.NAMESPACE~DOMAIN`) presents that pod: its
/// `INSTANCE_IPS`, `NAME` and `NAMESPACE` (issue 37; docs/usage.md).
fn with_id(node: &Value, id: &str, cluster: Option<&str>) -> Value {
    let mut node = node.clone();
    node["id"] = json!(id);
    let parts: Vec<&str> = id.split('~').collect();
    if let (Some(metadata), [_, ip, proxy, _]) = (node["metadata"].as_object_mut(), &parts[..]) {
        if metadata.contains_key("ISTIO_VERSION") {
            if let Some((pod, namespace)) = proxy.rsplit_once('.') {
                metadata.insert("INSTANCE_IPS".into(), json!(ip));
                metadata.insert("NAME".into(), json!(pod));
                metadata.insert("NAMESPACE".into(), json!(namespace));
            }
        }
    }
    if let Some(cluster) = cluster {
        node["cluster"] = json!(cluster);
    }
    node
}

/// How many sessions the gateway holds (`/debug/sessions`).
async fn sessions(admin: u16) -> usize {
    let reply = http_request(
        admin,
        http::Method::GET,
        "/debug/sessions",
        &[],
        bytes::Bytes::new(),
        TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    reply.json()["sessions"].as_array().map_or(0, Vec::len)
}

/// Issue 24's test: a profile-based GET sees exactly what the same node
/// POSTed sees, byte for byte, against go-control-plane with per-node
/// snapshots, keyed by metadata so the profile decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_get_is_the_post_of_its_node_byte_for_byte() {
    const TEST: &str = "a_profile_get_is_the_post_of_its_node_byte_for_byte";
    bounded(TEST_TIMEOUT, async {
        let cp = GoControlPlane::start_with(TEST, &["--node-hash-metadata", "CLUSTER_ID"]);
        let id = "sidecar~10.0.0.7~reviews-v1-abc.default~default.svc.cluster.local";
        cp.set_snapshot("meta:east", "east-1", &[(CDS, vec![cluster("east-reviews")])])
            .await;
        cp.set_snapshot("meta:west", "west-1", &[(CDS, vec![cluster("west-reviews"), cluster("west-ratings")])])
            .await;
        cp.set_snapshot(id, "plain-1", &[(CDS, vec![cluster("plain")])])
            .await;

        // east: a --node-profiles file as copied out of /config_dump;
        // west: a [[profile]] table of the --config file.
        let dir = tempfile::tempdir().unwrap();
        let east = sidecar("east");
        let dump = json!({"configs": [{
            "@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump",
            "bootstrap": {"node": east},
        }]});
        std::fs::write(dir.path().join("east.json"), dump.to_string()).unwrap();
        let table: ProfileTable = toml::from_str(
            r#"name = "west"
cluster = "reviews.default"
user-agent-name = "envoy"
user-agent-build-version = "1.31.2"
locality = { region = "us-west1" }
[metadata]
CLUSTER_ID = "west"
NAMESPACE = "default"
LABELS = { app = "reviews" }
"#,
        )
        .unwrap();
        let west = json!({
            "cluster": "reviews.default",
            "user_agent_name": "envoy",
            "user_agent_build_version": {"version": {"major_number": 1, "minor_number": 31, "patch": 2}},
            "locality": {"region": "us-west1"},
            "metadata": {"CLUSTER_ID": "west", "NAMESPACE": "default", "LABELS": {"app": "reviews"}},
        });
        let config = Config {
            upstream: Some(cp.upstream()),
            profiles: vec![table],
            node_profiles: Some(dir.path().to_owned()),
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        let port = gw.rest_port;

        let inline = r#"{"CLUSTER_ID":"west","NAMESPACE":"default","LABELS":{"app":"reviews"}}"#;
        let cases = [
            (
                format!("profile=east&node={}", encode(id)),
                with_id(&east, id, None),
                vec!["east-reviews"],
            ),
            (
                format!("profile=west&node={}", encode(id)),
                with_id(&west, id, None),
                vec!["west-ratings", "west-reviews"],
            ),
            // ?cluster= over the profile's: the snapshot still follows CLUSTER_ID.
            (
                format!("profile=east&node={}&cluster=canary", encode(id)),
                with_id(&east, id, Some("canary")),
                vec!["east-reviews"],
            ),
            // One-off inline metadata, no profile.
            (
                format!("node={}&metadata={}", encode(id), encode(inline)),
                json!({"id": id, "cluster": "", "metadata": serde_json::from_str::<Value>(inline).unwrap()}),
                vec!["west-ratings", "west-reviews"],
            ),
            // Without a profile the id alone decides: another snapshot.
            (
                format!("node={}", encode(id)),
                json!({"id": id, "cluster": ""}),
                vec!["plain"],
            ),
        ];
        let mut bodies = Vec::new();
        for (query, node, names) in &cases {
            let got = get(port, &format!("/v3/discovery:clusters?{query}"), None).await;
            assert_eq!(got.status, 200, "GET ?{query}: {}", got.text());
            assert_eq!(names_of(&got), *names, "GET ?{query}");
            let before = sessions(gw.admin_port).await;
            let posted = post(port, "clusters", &json!({"node": node}), None).await;
            assert_eq!(posted.status, 200, "POST {node}: {}", posted.text());
            assert_eq!(
                got.body, posted.body,
                "GET ?{query} and the POST of its node differ"
            );
            assert_eq!(got.header("etag"), posted.header("etag"), "?{query}");
            // The same node identity: the POST found the GET's session.
            assert_eq!(sessions(gw.admin_port).await, before, "?{query}: a new session");
            bodies.push(got.body);
        }
        // What the profile says matters: east, west and plain differ.
        assert_ne!(bodies[0], bodies[1]);
        assert_ne!(bodies[0], bodies[4]);
        assert_ne!(bodies[1], bodies[4]);
        // And the peer saw the profile's metadata: go-control-plane's own
        // record of the node (its id; the snapshot chosen by CLUSTER_ID).
        let stats = cp.stats().await;
        let requests = stats["requests"].as_array().cloned().unwrap_or_default();
        assert!(
            requests.iter().any(|r| r["node_id"] == id),
            "go-control-plane saw no request of {id}: {stats}"
        );
        gw.stop().await;
    })
    .await;
}

const EDGE: &str = "edge-token-5c1d";

fn policy() -> String {
    format!(
        r#"[[principal]]
name = "edge"
token-sha256 = ["{}"]
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["edge"]
"#,
        hex::encode(Sha256::digest(EDGE.as_bytes()))
    )
}

fn status_message(reply: &Reply) -> (i64, String) {
    let body = reply.json();
    (
        body["code"].as_i64().unwrap_or_default(),
        body["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// A profile never lets a principal present a node it may not: every GET
/// is answered as the POST of the node it makes; and bad node parameters
/// are 400s naming the parameter.
#[tokio::test]
async fn profiles_obey_the_policy_and_bad_parameters_are_400s() {
    let dir = tempfile::tempdir().unwrap();
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy()).unwrap();
    let profiles_dir = dir.path().join("profiles");
    std::fs::create_dir(&profiles_dir).unwrap();
    let edge = json!({"id": "edge-1", "cluster": "edge", "user_agent_name": "envoy", "metadata": {"role": "edge"}});
    let mesh = json!({"node": {"id": "edge-2", "cluster": "mesh", "metadata": {"role": "mesh"}}});
    std::fs::write(profiles_dir.join("edge.json"), edge.to_string()).unwrap();
    std::fs::write(profiles_dir.join("mesh.json"), mesh.to_string()).unwrap();
    let gw = InProcess::start(Config {
        auth_policy: Some(policy_path),
        node_profiles: Some(profiles_dir),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    let mesh = mesh["node"].clone();

    for (query, node, allowed) in [
        (
            "profile=edge&node=edge-7",
            with_id(&edge, "edge-7", None),
            true,
        ),
        // The profile's own id when no node= is given.
        ("profile=edge", edge.clone(), true),
        (
            "profile=edge&node=core-1",
            with_id(&edge, "core-1", None),
            false,
        ),
        // The profile's cluster is bound too, until ?cluster= says another.
        ("profile=mesh", mesh.clone(), false),
        (
            "profile=mesh&node=edge-7",
            with_id(&mesh, "edge-7", None),
            false,
        ),
        (
            "profile=mesh&node=edge-7&cluster=edge",
            with_id(&mesh, "edge-7", Some("edge")),
            true,
        ),
        (
            "profile=edge&cluster=mesh",
            with_id(&edge, "edge-1", Some("mesh")),
            false,
        ),
    ] {
        let path = format!("/v3/discovery:listeners?{query}");
        let got = get(port, &path, Some(EDGE)).await;
        let posted = post(port, "listeners", &json!({"node": node}), Some(EDGE)).await;
        let expected = if allowed { 200 } else { 403 };
        assert_eq!(got.status, expected, "GET ?{query}: {}", got.text());
        assert_eq!(posted.status, expected, "POST {node}: {}", posted.text());
        if allowed {
            assert_eq!(got.body, posted.body, "?{query}");
        } else {
            let (code, message) = status_message(&got);
            assert_eq!(code, 7, "{message}");
            assert!(
                message.contains("edge") && message.contains(node["id"].as_str().unwrap()),
                "{message}"
            );
        }
        // Without a credential a profile is no way in either.
        assert_eq!(get(port, &path, None).await.status, 401, "?{query}");
    }

    for (query, param, says) in [
        ("profile=nope&node=edge-1", "profile", "\"nope\""),
        ("node=edge-1&metadata=%7B", "metadata", "not JSON"),
        (
            "node=edge-1&metadata=%5B1%5D",
            "metadata",
            "not a JSON object",
        ),
        (
            "node=edge-1&metadata=%22edge%22",
            "metadata",
            "not a JSON object",
        ),
        ("profile=edge&locality=a%2Fb%2Fc%2Fd", "locality", "REGION"),
        ("profile=edge&user_agent=%2F1.0", "user_agent", "NAME"),
        (
            "profile=edge&profiles=edge",
            "profiles",
            "unknown query parameter",
        ),
    ] {
        let reply = get(port, &format!("/v3/discovery:clusters?{query}"), Some(EDGE)).await;
        assert_eq!(reply.status, 400, "?{query}: {}", reply.text());
        let (code, message) = status_message(&reply);
        assert_eq!(code, 3, "?{query}: {message}");
        assert!(
            message.contains(param) && message.contains(says),
            "?{query}: {message}"
        );
    }
    // The unknown profile's answer lists the ones there are.
    let reply = get(port, "/v3/discovery:clusters?profile=nope", Some(EDGE)).await;
    assert!(
        status_message(&reply).1.contains("edge, mesh"),
        "{}",
        reply.text()
    );
    // An inline part over a profile: allowed, and what the POST of that node gets.
    let query = format!(
        "profile=edge&node=edge-3&locality=eu%2Feu-a&user_agent=envoy%2F1.40.0&metadata={}",
        encode(r#"{"role":"canary"}"#)
    );
    let got = get(
        port,
        &format!("/v3/discovery:listeners?{query}"),
        Some(EDGE),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    let node = json!({
        "id": "edge-3", "cluster": "edge",
        "metadata": {"role": "canary"},
        "locality": {"region": "eu", "zone": "eu-a"},
        "user_agent_name": "envoy", "user_agent_version": "1.40.0",
    });
    let posted = post(port, "listeners", &json!({"node": node}), Some(EDGE)).await;
    assert_eq!(got.body, posted.body);
    gw.stop().await;
}

/// The node of the real Envoy of [`a_real_envoys_dumped_node_joins_its_session`].
const REAL_NODE: &str = "sidecar~127.0.0.1~reviews-v1-7d8f9.bookinfo~bookinfo.svc.cluster.local";

/// [`envoy::rest_bootstrap`] with an Istio-like node: locality and metadata.
fn istio_like_bootstrap(admin: u16, xds: u16) -> String {
    envoy::rest_bootstrap(REAL_NODE, admin, xds).replacen(
        &format!("  cluster: {}\n", envoy::NODE_CLUSTER),
        &format!(
            "  cluster: {}\n  locality: {{region: us-east1, zone: us-east1-b}}\n  metadata:\n    \
             ISTIO_VERSION: \"1.23.2\"\n    CLUSTER_ID: Kubernetes\n    NAMESPACE: bookinfo\n    \
             LABELS: {{app: reviews, version: v1}}\n    ENVOY_PROMETHEUS_PORT: 15090\n",
            envoy::NODE_CLUSTER
        ),
        1,
    )
}

/// The versions a JSON value holds at key `version_info` (at any depth).
fn versions_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(v)) = map.get("version_info") {
                out.push(v.clone());
            }
            map.values().for_each(|v| versions_in(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| versions_in(v, out)),
        _ => {}
    }
}

/// For people who copy a node out of a real Envoy: its
/// `/config_dump?mask=bootstrap.node`, as the file of a profile, makes a
/// GET that the gateway takes for that very Envoy (the same session) and
/// answers at the version the Envoy holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_envoys_dumped_node_joins_its_session() {
    const TEST: &str = "a_real_envoys_dumped_node_joins_its_session";
    envoy::run_bounded(TEST, |bin, dir| async move {
        // The gateway starts only once the Envoy's node is dumped: until
        // then its port is held here, taken by binding port 0 (a port
        // picked and let go first could be taken by another test's socket
        // before it is held).
        let xds_held = std::net::TcpListener::bind(("127.0.0.1", 0))
            .unwrap_or_else(|e| panic!("hold a port for the gateway: {e}"));
        let xds = xds_held.local_addr().expect("a bound port").port();
        let (envoy_admin, gw_admin) = (process::free_port(), process::free_port());
        let envoy = envoy::Envoy::start(&bin, &dir, &istio_like_bootstrap(envoy_admin, xds));
        envoy::wait_admin(envoy_admin, "/stats?filter=server.live", "envoy").await;
        let (status, dump) = process::http_get(envoy_admin, "/config_dump?mask=bootstrap.node")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 200, "{dump}");
        let profiles = dir.join("profiles");
        std::fs::create_dir(&profiles).unwrap();
        std::fs::write(profiles.join("real-envoy.json"), &dump).unwrap();

        let (listen, admin) = (format!("127.0.0.1:{xds}"), format!("127.0.0.1:{gw_admin}"));
        let profiles_arg = profiles.to_str().unwrap().to_owned();
        let log = dir.join(envoy::GATEWAY_LOG);
        drop(xds_held);
        let _gateway = envoy::spawn_gateway(
            [
                "--listen",
                &listen,
                "--admin",
                &admin,
                "--node-profiles",
                &profiles_arg,
            ],
            false,
            &log,
        );
        // The Envoy polls (its own POSTs) until it holds the demo's clusters.
        let clusters =
            process::eventually(envoy::CONVERGE_TIMEOUT, envoy::POLL_INTERVAL, || async {
                let (_, text) =
                    process::http_get(envoy_admin, "/config_dump?resource=dynamic_active_clusters")
                        .await
                        .ok()?;
                let dump: Value = serde_json::from_str(&text).ok()?;
                let mut versions = Vec::new();
                versions_in(&dump, &mut versions);
                (!versions.is_empty()).then_some(versions)
            })
            .await
            .unwrap_or_else(|| panic!("{TEST}: the Envoy got no clusters"));
        assert_eq!(sessions(gw_admin).await, 1, "the Envoy's own session");

        // A GET of the dumped profile (its own id), sent as the Envoy sends
        // (Host: its xDS cluster): the same session, the Envoy's version.
        let got = http_request(
            xds,
            http::Method::GET,
            "/v3/discovery:clusters?profile=real-envoy",
            &[("host", "xds_cluster")],
            bytes::Bytes::new(),
            TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.status, 200, "{}", got.text());
        let version = got.json()["versionInfo"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            clusters.contains(&version),
            "GET at {version}, the Envoy holds {clusters:?}"
        );
        assert_eq!(
            sessions(gw_admin).await,
            1,
            "the GET joined the Envoy's session"
        );
        // A plain GET of the same id is another node: another session.
        let plain = get(
            xds,
            &format!("/v3/discovery:clusters?node={}", encode(REAL_NODE)),
            None,
        )
        .await;
        assert_eq!(plain.status, 200, "{}", plain.text());
        assert_eq!(
            sessions(gw_admin).await,
            2,
            "a plain GET is another identity"
        );

        // The status page's book: the Envoy subscribes (once it polls again,
        // presenting the version it holds), curl reads once.
        let roles = process::eventually(envoy::CHANGE_TIMEOUT, envoy::POLL_INTERVAL, || async {
            let (_, clients) = process::http_get(gw_admin, "/debug/clients").await.ok()?;
            let clients: Value = serde_json::from_str(&clients).ok()?;
            let roles: Vec<(String, String)> = clients["clients"]
                .as_array()?
                .iter()
                .map(|c| {
                    (
                        c["user_agent"].as_str().unwrap_or_default().to_owned(),
                        c["role"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            roles
                .contains(&("envoy".into(), "subscriber".into()))
                .then_some(roles)
        })
        .await
        .unwrap_or_else(|| panic!("{TEST}: the Envoy never showed as a subscriber"));
        assert!(roles.contains(&("".into(), "reader".into())), "{roles:?}");
        envoy.print_warnings(TEST);
    })
    .await;
}
