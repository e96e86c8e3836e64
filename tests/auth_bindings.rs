//! What the auth policy binds, and for how long (issue 20, findings 1–3),
//! against the gateway run in process over a snapshot whose secrets are
//! layered per node and per cluster (`nodes/<id>/`, `clusters/<name>/`):
//!
//! - a rule binds both halves of a node's identity: a principal allowed
//!   node `edge-2` of cluster `edge` cannot read cluster `payments`'s layer
//!   by claiming that cluster, nor node `core-1`'s by claiming that node;
//!   a policy whose rule leaves a half open does not load;
//! - a reload that revokes a principal ends what it holds open (a watch,
//!   a held long poll, the admin's CSDS stream), and a rotated secret never
//!   reaches it; what the new policy still allows goes on;
//! - HDS and CSDS pass-through each have their own switch, and are asked
//!   only about nodes the principal's rules allow (against the reference
//!   control plane, `tests/support/ads_server.py`).

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use gateway::{http_request, ControlPlane, Reply};
use http_body_util::{BodyExt, Empty};
use inproc::InProcess;
use process::eventually;
use serde_json::json;
use sha2::{Digest, Sha256};
use xds_gateway::config::Config;

const TIMEOUT: Duration = Duration::from_secs(15);
const EDGE: &str = "edge-token-5e1c";
const CORE: &str = "core-token-90ab";
const HDS: &str = "hds-token-77aa";
const CSDS: &str = "csds-token-12fe";
const ADMIN: &str = "admin-token-3c3c";
const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A policy: `edge` may read edge-2's secrets in cluster edge, `core` may
/// read core-1's in cluster core; `hds` and `csds` hold one switch each.
fn policy(edge: &str, admin: &str) -> String {
    format!(
        r#"[admin]
token-sha256 = ["{admin}"]

[[principal]]
name = "edge"
token-sha256 = ["{edge}"]
[[principal.allow]]
nodes = ["edge-2"]
clusters = ["edge"]
types = ["secrets"]

[[principal]]
name = "core"
token-sha256 = ["{core}"]
[[principal.allow]]
nodes = ["core-1"]
clusters = ["core"]
types = ["secrets"]

[[principal]]
name = "hds"
token-sha256 = ["{hds}"]
hds = true
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["edge"]
types = ["clusters"]

[[principal]]
name = "csds"
token-sha256 = ["{csds}"]
csds = true
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["*"]
types = ["clusters"]
"#,
        admin = sha(admin),
        edge = sha(edge),
        core = sha(CORE),
        hds = sha(HDS),
        csds = sha(CSDS),
    )
}

/// One secret named `app_key` holding `value`.
fn secret_file(value: &str) -> String {
    format!("- '@type': {SECRET}\n  name: app_key\n  generic_secret: {{secret: {{inline_string: {value}}}}}\n")
}

/// A snapshot whose `app_key` differs in every layer.
fn write_snapshot(dir: &Path) {
    for (layer, value) in [
        ("", "base-key"),
        ("clusters/payments", "payments-key"),
        ("clusters/edge", "edge-cluster-key"),
        ("nodes/edge-2", "edge-2-key-1"),
        ("nodes/core-1", "core-1-key-1"),
    ] {
        let at = dir.join(layer);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("secrets.yaml"), secret_file(value)).unwrap();
    }
}

struct Setup {
    dir: tempfile::TempDir,
    gw: InProcess,
}

impl Setup {
    async fn start(upstream: Option<String>) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = dir.path().join("snapshot");
        write_snapshot(&snapshot);
        std::fs::write(dir.path().join("policy.toml"), policy(EDGE, ADMIN)).unwrap();
        let config = Config {
            snapshot: upstream.is_none().then_some(snapshot),
            upstream,
            auth_policy: Some(dir.path().join("policy.toml")),
            allow_secrets: true,
            ..Config::default()
        }
        .validate()
        .expect("a valid configuration");
        let gw = InProcess::start(config).await;
        Setup { dir, gw }
    }

    fn path(&self, file: &str) -> std::path::PathBuf {
        self.dir.path().join(file)
    }

    /// Replaces the policy and waits until the gateway has reloaded it.
    async fn reload_policy(&self, text: String) {
        let admin = self.gw.admin_port;
        let before = reloads(admin, ADMIN).await;
        std::fs::write(self.path("policy.toml"), &text).unwrap();
        let reloaded = eventually(TIMEOUT, Duration::from_millis(50), || async move {
            // The admin token may be the new one.
            let now = reloads(admin, ADMIN)
                .await
                .max(reloads(admin, "new-admin").await);
            (now > before).then_some(())
        })
        .await;
        assert!(reloaded.is_some(), "the policy was never reloaded");
    }
}

/// How many auth-policy reloads `/metrics` has counted (0 if `token` does
/// not open it).
async fn reloads(admin: u16, token: &str) -> u64 {
    let metrics = get(admin, "/metrics", Some(token)).await;
    let prefix = "xds_gateway_reloads_total{file=\"auth-policy\",result=\"ok\"} ";
    metrics
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

async fn get(port: u16, path: &str, token: Option<&str>) -> Reply {
    gateway::get_with_token(port, path, token, TIMEOUT)
        .await
        .unwrap()
}

async fn post(port: u16, path: &str, token: &str, body: serde_json::Value) -> Reply {
    let auth = format!("Bearer {token}");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
    ];
    http_request(
        port,
        http::Method::POST,
        path,
        &headers,
        body.to_string(),
        TIMEOUT,
    )
    .await
    .unwrap()
}

fn secrets_of(node: &str, cluster: &str) -> String {
    format!("/v3/discovery:secrets?node={node}&cluster={cluster}&names=app_key")
}

#[tokio::test]
async fn a_rule_binds_node_and_cluster_so_no_client_picks_another_layer() {
    let setup = Setup::start(None).await;
    let port = setup.gw.rest_port;
    let own = get(port, &secrets_of("edge-2", "edge"), Some(EDGE)).await;
    assert_eq!(own.status, 200, "{}", own.text());
    assert!(own.text().contains("edge-2-key-1"), "{}", own.text());

    // The reviewer's two reproductions: claiming another cluster for its
    // node, or another node in its cluster.
    for (node, cluster, layer) in [
        ("edge-2", "payments", "payments-key"),
        ("core-1", "edge", "core-1-key-1"),
    ] {
        let reply = get(port, &secrets_of(node, cluster), Some(EDGE)).await;
        assert_eq!(reply.status, 403, "{node}/{cluster}: {}", reply.text());
        assert_eq!(reply.json()["code"], 7, "{}", reply.text());
        assert!(!reply.text().contains(layer), "{}", reply.text());
    }
    setup.gw.stop().await;

    // A rule that names only nodes (or only clusters) does not load: the
    // gateway refuses to start with it, saying which half is open.
    for (rule, missing) in [
        ("nodes = [\"edge-2\"]", "names no clusters"),
        ("clusters = [\"edge\"]", "names no nodes"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(
            &path,
            format!(
                "[[principal]]\nname = \"p\"\ntoken-sha256 = [\"{}\"]\n[[principal.allow]]\n{rule}\ntypes = [\"secrets\"]\n",
                sha(EDGE)
            ),
        )
        .unwrap();
        let config = Config {
            auth_policy: Some(path),
            allow_secrets: true,
            ..Config::default()
        };
        let rest = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let run = xds_gateway::app::run(config, rest, admin, std::future::ready(()));
        let err = tokio::time::timeout(TIMEOUT, run)
            .await
            .expect("a refused policy is refused at once")
            .expect_err("a policy with a half-open rule must not load");
        assert!(err.to_string().contains(missing), "{err}");
    }
}

/// A watch read as it streams: everything it sent until it ended.
async fn open_watch(port: u16, path: &str, token: &str) -> hyper::body::Incoming {
    let stream = inproc::connect(port).await;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP/1.1 handshake");
    tokio::spawn(conn);
    let request = http::Request::get(path)
        .header("host", format!("127.0.0.1:{port}"))
        .header("authorization", format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .expect("the watch's head");
    assert_eq!(response.status(), 200);
    response.into_body()
}

/// What `body` sends until `needle` has arrived (panics past [`TIMEOUT`]).
async fn read_until(body: &mut hyper::body::Incoming, seen: &mut String, needle: &str) {
    let found = tokio::time::timeout(TIMEOUT, async {
        while !seen.contains(needle) {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        seen.push_str(&String::from_utf8_lossy(&data));
                    }
                }
                _ => return false,
            }
        }
        true
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "{needle:?} never came; the stream sent:\n{seen}"
    );
}

/// Everything `body` sends until it ends (panics if it does not end
/// within [`TIMEOUT`]).
async fn read_to_end(body: &mut hyper::body::Incoming, seen: &mut String) {
    let ended = tokio::time::timeout(TIMEOUT, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream is still open; it sent:\n{seen}");
}

#[tokio::test]
async fn a_reload_that_revokes_a_principal_ends_what_it_holds_open() {
    let setup = Setup::start(None).await;
    let port = setup.gw.rest_port;
    let first = get(port, &secrets_of("edge-2", "edge"), Some(EDGE)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let version = first.json()["versionInfo"].as_str().unwrap().to_owned();

    // edge watches its secret (SSE) and holds a long poll on it; core,
    // which the reload keeps, watches its own.
    let watch =
        |node: &str, cluster: &str| format!("{}&watch&format=sse", secrets_of(node, cluster));
    let mut edge_watch = open_watch(port, &watch("edge-2", "edge"), EDGE).await;
    let mut core_watch = open_watch(port, &watch("core-1", "core"), CORE).await;
    let (mut edge_seen, mut core_seen) = (String::new(), String::new());
    read_until(&mut edge_watch, &mut edge_seen, "edge-2-key-1").await;
    read_until(&mut core_watch, &mut core_seen, "core-1-key-1").await;
    let held = tokio::spawn(async move {
        let path = format!(
            "{}&version={version}&wait=60s",
            secrets_of("edge-2", "edge")
        );
        let auth = format!("Bearer {EDGE}");
        http_request(
            port,
            http::Method::GET,
            &path,
            &[("authorization", &auth)],
            Bytes::new(),
            Duration::from_secs(90),
        )
        .await
    });

    // edge's token is replaced: a new poll with it is a 401...
    setup
        .reload_policy(policy("edge-token-rotated", ADMIN))
        .await;
    let refused = get(port, &secrets_of("edge-2", "edge"), Some(EDGE)).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    // ...and the long poll it held is answered the same, now, not in 60 s.
    let held = tokio::time::timeout(TIMEOUT, held)
        .await
        .expect("the held long poll was not ended by the reload")
        .unwrap()
        .unwrap();
    assert_eq!(held.status, 401, "{}", held.text());
    assert!(held.text().contains("reloaded"), "{}", held.text());

    // The secrets rotate. The revoked watch has ended, saying why, without
    // the new secret; core's goes on and gets its new one.
    for (layer, value) in [
        ("nodes/edge-2", "edge-2-key-2"),
        ("nodes/core-1", "core-1-key-2"),
    ] {
        let file = setup.path("snapshot").join(layer).join("secrets.yaml");
        std::fs::write(file, secret_file(value)).unwrap();
    }
    read_to_end(&mut edge_watch, &mut edge_seen).await;
    assert!(edge_seen.contains("no longer authorized"), "{edge_seen}");
    assert!(!edge_seen.contains("edge-2-key-2"), "{edge_seen}");
    read_until(&mut core_watch, &mut core_seen, "core-1-key-2").await;
    setup.gw.stop().await;
}

#[tokio::test]
async fn the_admin_csds_stream_answers_no_question_after_its_token_is_revoked() {
    use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;

    let setup = Setup::start(None).await;
    let channel = tonic::transport::Endpoint::from_shared(format!(
        "http://127.0.0.1:{}",
        setup.gw.admin_port
    ))
    .unwrap()
    .connect()
    .await
    .expect("the admin listener speaks gRPC");
    let mut client = ClientStatusDiscoveryServiceClient::new(channel);
    let (questions, rx) = tokio::sync::mpsc::channel::<ClientStatusRequest>(4);
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {ADMIN}").parse().unwrap());
    questions
        .send(ClientStatusRequest::default())
        .await
        .unwrap();
    let mut answers = client
        .stream_client_status(request)
        .await
        .expect("the admin token opens CSDS")
        .into_inner();
    let first = tokio::time::timeout(TIMEOUT, answers.message())
        .await
        .unwrap();
    assert!(matches!(first, Ok(Some(_))), "{first:?}");

    setup.reload_policy(policy(EDGE, "new-admin")).await;
    questions
        .send(ClientStatusRequest::default())
        .await
        .unwrap();
    let after = tokio::time::timeout(TIMEOUT, answers.message())
        .await
        .unwrap();
    match after {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}"),
        Ok(answer) => panic!("answered after its token was revoked: {answer:?}"),
    }
    setup.gw.stop().await;
}

#[tokio::test]
async fn hds_and_csds_pass_through_each_need_their_switch_and_an_allowed_node() {
    let cp =
        ControlPlane::start("hds_and_csds_pass_through_each_need_their_switch_and_an_allowed_node");
    let setup = Setup::start(Some(cp.upstream())).await;
    let port = setup.gw.rest_port;
    let hds = |id: &str, cluster: &str| {
        json!({"health_check_request": {"node": {"id": id, "cluster": cluster},
               "capability": {"health_check_protocols": ["HTTP"]}}})
    };
    let hds_path = "/v3/discovery:health_check";
    assert_eq!(
        post(port, hds_path, HDS, hds("edge-1", "edge"))
            .await
            .status,
        200
    );
    for (token, body, why) in [
        (HDS, hds("core-1", "core"), "a node its rules do not bind"),
        (
            HDS,
            hds("edge-1", "payments"),
            "a cluster its rules do not bind",
        ),
        (CSDS, hds("edge-1", "edge"), "csds = true is not hds = true"),
        (
            HDS,
            json!({"endpoint_health_response": {"endpoints_health": []}}),
            "no node to check",
        ),
    ] {
        let reply = post(port, hds_path, token, body).await;
        assert_eq!(reply.status, 403, "{why}: {}", reply.text());
    }

    let csds_path = "/v3/discovery:client_status";
    let exact = |id: &str| json!({"node_id": {"exact": id}});
    let csds = |node: &str, matchers: Vec<serde_json::Value>| json!({"node": {"id": node}, "node_matchers": matchers});
    let own = post(port, csds_path, CSDS, csds("edge-1", vec![exact("edge-1")])).await;
    assert_eq!(own.status, 200, "{}", own.text());
    assert_eq!(
        own.json()["config"][0]["node"]["id"],
        "edge-1",
        "{}",
        own.text()
    );
    // The reference control plane answers about the asking node whatever
    // the matchers say: what it says of another node does not get through.
    let other = post(port, csds_path, CSDS, csds("core-1", vec![exact("edge-1")])).await;
    assert_eq!(other.status, 200, "{}", other.text());
    assert!(!other.text().contains("core-1"), "{}", other.text());
    for (token, body, why) in [
        (CSDS, csds("edge-1", vec![]), "no matcher: every node"),
        (
            CSDS,
            csds("edge-1", vec![exact("core-1")]),
            "a node its rules do not name",
        ),
        (
            CSDS,
            csds("edge-1", vec![json!({"node_id": {"prefix": "edge-"}})]),
            "not an exact id",
        ),
        (
            HDS,
            csds("edge-1", vec![exact("edge-1")]),
            "hds = true is not csds = true",
        ),
    ] {
        let reply = post(port, csds_path, token, body).await;
        assert_eq!(reply.status, 403, "{why}: {}", reply.text());
        assert_eq!(reply.json()["code"], 7, "{}", reply.text());
    }
    // Only the allowed questions reached the control plane.
    let stats = cp.stats().await;
    assert_eq!(
        stats["hds_requests"].as_array().map(Vec::len),
        Some(1),
        "{stats}"
    );
    assert_eq!(
        stats["csds_requests"].as_array().map(Vec::len),
        Some(2),
        "{stats}"
    );
    setup.gw.stop().await;
}
