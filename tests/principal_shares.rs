//! Per-principal shares of the global limits (issue 20, finding 5), against
//! the gateway run in process on loopback with a policy of two principals:
//! one principal cannot fill `--max-sessions`, `--max-long-polls` or
//! `--max-watches` (503 with `Retry-After`, naming the principal and the
//! limit) while the other is still served; with a single principal the
//! share does not apply. Every load is bounded in count and time.

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::path::Path;
use std::time::Duration;

use gateway::Reply;
use inproc::{connect, send, InProcess};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use xds_gateway::config::Config;

const TIMEOUT: Duration = Duration::from_secs(15);
const WITHIN: Duration = Duration::from_secs(10);
const A: &str = "tenant-a-token-5e1f";
const B: &str = "tenant-b-token-9c2d";

fn principal(name: &str, token: &str) -> String {
    let sha = hex::encode(Sha256::digest(token.as_bytes()));
    format!(
        "[[principal]]\nname = \"{name}\"\ntoken-sha256 = [\"{sha}\"]\n[[principal.allow]]\nnodes = [\"{name}-*\"]\nclusters = [\"*\"]\n\n"
    )
}

async fn start(dir: &Path, principals: &[(&str, &str)], config: Config) -> InProcess {
    let path = dir.join("policy.toml");
    let text: String = principals.iter().map(|(n, t)| principal(n, t)).collect();
    std::fs::write(&path, text).unwrap();
    InProcess::start(Config {
        auth_policy: Some(path),
        ..config
    })
    .await
}

async fn get(port: u16, path: &str, token: &str, timeout: Duration) -> Result<Reply, String> {
    gateway::get_with_token(port, path, Some(token), timeout).await
}

async fn poll(port: u16, node: &str, token: &str) -> Reply {
    get(
        port,
        &format!("/v3/discovery:clusters?node={node}"),
        token,
        TIMEOUT,
    )
    .await
    .unwrap()
}

/// A 503 for being over a share: `Retry-After`, a `google.rpc.Status` body
/// naming the principal and the limit.
fn assert_over_share(reply: &Reply, principal: &str, limit: &str) {
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.header("retry-after").is_some(), "{:?}", reply.headers);
    let json = reply.json();
    assert_eq!(json["code"], 14, "{json}");
    let message = json["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("{principal:?}")), "{message}");
    assert!(message.contains(limit), "{message}");
    assert!(message.contains("--principal-share"), "{message}");
}

#[tokio::test]
async fn one_principal_cannot_fill_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_sessions: 4,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A), ("b", B)], config).await;
    let port = gw.rest_port;
    for node in ["a-1", "a-2"] {
        assert_eq!(poll(port, node, A).await.status, 200);
    }
    assert_over_share(&poll(port, "a-3", A).await, "a", "--max-sessions");
    // Its open sessions still answer it; the other principal opens its own.
    assert_eq!(poll(port, "a-1", A).await.status, 200);
    for node in ["b-1", "b-2"] {
        let reply = poll(port, node, B).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_lone_principal_has_no_share_to_keep() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_sessions: 2,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A)], config).await;
    for node in ["a-1", "a-2"] {
        assert_eq!(poll(gw.rest_port, node, A).await.status, 200);
    }
    gw.stop().await;
}

/// The current version of `node`'s clusters, for a long poll to hold.
async fn version(port: u16, node: &str, token: &str) -> String {
    let reply = poll(port, node, token).await;
    reply.json()["versionInfo"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn one_principal_cannot_hold_every_long_poll() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_long_polls: 2,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A), ("b", B)], config).await;
    let port = gw.rest_port;
    let held = |node: &str, version: &str| {
        format!("/v3/discovery:clusters?node={node}&version={version}&wait=20s")
    };
    let path_a = held("a-1", &version(port, "a-1", A).await);
    let first = {
        let path = path_a.clone();
        tokio::spawn(async move { get(port, &path, A, TIMEOUT * 2).await })
    };
    // Once the first is held, a second of the same principal is refused.
    let held_one = "xds_gateway_long_polls_held 1";
    gateway::wait_for_metric(gw.admin_port, held_one, WITHIN, "the first long poll").await;
    let refused = get(port, &path_a, A, TIMEOUT).await.unwrap();
    assert_over_share(&refused, "a", "--max-long-polls");
    // The other principal's long poll is held, not refused.
    let path_b = held("b-1", &version(port, "b-1", B).await);
    let other = get(port, &path_b, B, Duration::from_secs(1)).await;
    assert!(other.is_err(), "b was answered at once: {other:?}");
    first.abort();
    gw.stop().await;
}

/// Opens a watch over a raw connection; the status line it got.
async fn open_watch(port: u16, node: &str, token: &str) -> (TcpStream, String) {
    let mut stream = connect(port).await;
    let request = format!(
        "GET /v3/discovery:clusters?node={node}&watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    send(&mut stream, request.as_bytes()).await;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WITHIN, stream.read(&mut buf))
            .await
            .expect("no answer to the watch")
            .expect("read the watch");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    (stream, text.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn one_principal_cannot_hold_every_watch() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_watches: 2,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A), ("b", B)], config).await;
    let port = gw.rest_port;
    let (_a, status) = open_watch(port, "a-1", A).await;
    assert!(status.contains(" 200 "), "{status}");
    let refused = get(port, "/v3/discovery:clusters?node=a-2&watch", A, TIMEOUT)
        .await
        .unwrap();
    assert_over_share(&refused, "a", "--max-watches");
    let (_b, status) = open_watch(port, "b-1", B).await;
    assert!(status.contains(" 200 "), "b's watch: {status}");
    gw.stop().await;
}

/// A GET for `node` whose node carries ~`kib` KiB of metadata.
async fn poll_big(port: u16, node: &str, token: &str, kib: usize) -> Reply {
    let metadata = format!("%7B%22pad%22%3A%22{}%22%7D", "x".repeat(kib * 1024));
    get(
        port,
        &format!("/v3/discovery:clusters?node={node}&metadata={metadata}"),
        token,
        TIMEOUT,
    )
    .await
    .unwrap()
}

/// Issue 38, finding 6: the bytes of nodes sessions hold
/// (`--max-session-bytes`) are shared too: one principal's few large
/// sessions fill at most its share, and the other still opens sessions.
#[tokio::test]
async fn one_principal_cannot_fill_the_session_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_node_bytes: 64 * 1024,
        max_session_bytes: 200 * 1024,
        max_body_bytes: 256 * 1024,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A), ("b", B)], config).await;
    // ~40 KiB each: two fit in a's 100 KiB, the third does not.
    for node in ["a-1", "a-2"] {
        let reply = poll_big(gw.rest_port, node, A, 40).await;
        assert_eq!(reply.status, 200, "{node}: {}", reply.text());
    }
    let over = poll_big(gw.rest_port, "a-3", A, 40).await;
    assert_over_share(&over, "a", "--max-session-bytes");
    // b is still served: its share is untouched.
    for node in ["b-1", "b-2"] {
        let reply = poll_big(gw.rest_port, node, B, 40).await;
        assert_eq!(reply.status, 200, "{node}: {}", reply.text());
    }
    // a's sessions already open are still answered.
    assert_eq!(poll_big(gw.rest_port, "a-1", A, 40).await.status, 200);
    gw.stop().await;
}

/// Issue 38, finding 7: the config history and its file are shared too.
/// One principal opening node after node (each a session, each a version
/// recorded) evicts its own oldest events once it holds its share of
/// `--history-max-bytes`, and takes at most its share of each history
/// file: the other principal's history is still served, and its line is
/// still in the files.
#[tokio::test]
async fn one_principal_cannot_drain_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("history.jsonl");
    let config = Config {
        history_max_bytes: 24 * 1024,
        history_file: Some(file.clone()),
        history_file_max_bytes: 2 * 1024,
        ..Config::default()
    };
    let gw = start(dir.path(), &[("a", A), ("b", B)], config).await;
    assert_eq!(poll(gw.rest_port, "b-1", B).await.status, 200);
    for n in 0..80 {
        let node = format!("a-{n}");
        let reply = poll(gw.rest_port, &node, A).await;
        assert_eq!(reply.status, 200, "{node}: {}", reply.text());
    }
    let history = |node: &str| format!("/debug/history?node={node}&type=clusters");
    let b = get(gw.admin_port, &history("b-1"), B, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        b.status,
        200,
        "b's history after a's 80 nodes: {}",
        b.text()
    );
    let newest = get(gw.admin_port, &history("a-79"), A, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(newest.status, 200, "{}", newest.text());
    let oldest = get(gw.admin_port, &history("a-0"), A, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        oldest.status,
        404,
        "a's oldest went first: {}",
        oldest.text()
    );
    let files = || {
        let mut text = String::new();
        for n in 0..=3 {
            let path = if n == 0 {
                file.clone()
            } else {
                std::path::PathBuf::from(format!("{}.{n}", file.display()))
            };
            text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        text
    };
    // The file's writer runs on a thread of its own: wait until the files
    // stop changing (a's later lines may be dropped, over its share).
    let mut text = files();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = files();
        if now == text {
            break;
        }
        text = now;
    }
    assert!(
        text.contains("\"node_id\":\"a-"),
        "a's lines are in the files too"
    );
    assert!(
        text.contains("\"node_id\":\"b-1\""),
        "b's line was pushed out of every history file by a's: {} lines",
        text.lines().count()
    );
    gw.stop().await;
}
