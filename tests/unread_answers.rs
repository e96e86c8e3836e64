//! One HTTP/2 connection that never reads (issue 38, finding 3), against
//! the gateway run in process on a snapshot whose clusters answer is
//! ~0.5 MB: a client opens `STREAMS` streams asking `format=yaml` and
//! reads none of them. Each rendered answer used to be held until the
//! connection closed, about 70 s later; now one connection holds at most
//! 64 MiB of answers its client has not read (the rest are a JSON 503),
//! and another client's poll is answered meanwhile. Measured: this
//! process's resident memory (`VmRSS`), before and while it is held.

#[path = "support/inproc.rs"]
mod inproc;

use std::time::{Duration, Instant};

use inproc::{connect, InProcess};
use xds_gateway::config::Config;

const STREAMS: usize = 300;
const CLUSTERS: usize = 1_500;

/// One test measuring this process's memory at a time.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

fn write_snapshot(dir: &std::path::Path) {
    let mut text = String::new();
    for i in 0..CLUSTERS {
        text.push_str(&format!(
            "- '@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: cluster-{i:05}-{pad}\n  type: EDS\n  connect_timeout: 1s\n  eds_cluster_config:\n    eds_config: {{ads: {{}}, resource_api_version: V3}}\n",
            pad = "p".repeat(200)
        ));
    }
    std::fs::write(dir.join("clusters.yaml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_reads_holds_a_bounded_amount() {
    let _one = MEASURING.lock().await;
    let (_dir, gw) = start_large(Config::default()).await;
    let port = gw.rest_port;
    let path = "/v3/discovery:clusters?node=reader&format=yaml";
    let size = warm(port, path).await;
    let before = rss_mib();

    let (_conn, responses, refused) = unread_streams(port, path, STREAMS).await;
    let held_rss = rss_mib();
    // Another client is answered meanwhile, promptly.
    let started = Instant::now();
    let (status, _) = inproc_get(port, "/v3/discovery:clusters?node=other").await;
    let latency = started.elapsed();
    assert_eq!(status, 200);
    eprintln!(
        "{STREAMS} unread yaml answers of {size} bytes: RSS {before} -> {held_rss} MiB, \
         {refused} refused, another poll in {latency:?}"
    );
    assert!(
        held_rss.saturating_sub(before) < 120,
        "RSS grew from {before} to {held_rss} MiB"
    );
    assert!(refused > 0, "none of {STREAMS} answers was refused");
    assert!(latency < Duration::from_secs(2), "{latency:?}");
    drop(responses);
    gw.stop().await;
}

/// Issue 38, finding 3, across connections: each of `CONNECTIONS` HTTP/2
/// connections holds `PER_CONNECTION` unread YAML answers of the same
/// version, within its own bound. Rendered per request they took a copy
/// each (about 180 MB here); rendered once and shared, one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_read_share_one_rendering() {
    const CONNECTIONS: usize = 6;
    const PER_CONNECTION: usize = 50;
    let _one = MEASURING.lock().await;
    let (_dir, gw) = start_large(Config::default()).await;
    let port = gw.rest_port;
    let path = "/v3/discovery:clusters?node=sharer&format=yaml";
    let size = warm(port, path).await;
    let before = rss_mib();
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        let (conn, responses, refused) = unread_streams(port, path, PER_CONNECTION).await;
        assert_eq!(refused, 0, "each connection is within its own bound");
        held.push((conn, responses));
    }
    let held_rss = rss_mib();
    let unshared_mib = (CONNECTIONS * PER_CONNECTION * size) >> 20;
    eprintln!(
        "{CONNECTIONS} connections x {PER_CONNECTION} unread yaml answers of {size} bytes \
         ({unshared_mib} MiB unshared): RSS {before} -> {held_rss} MiB"
    );
    assert!(
        held_rss.saturating_sub(before) < 60,
        "RSS grew from {before} to {held_rss} MiB for {unshared_mib} MiB of answers"
    );
    drop(held);
    gw.stop().await;
}

/// Issue 38, finding 3: a connection whose client stops reading an answer
/// it asked for is closed once it has written nothing for the write stall
/// timeout (two heartbeats and a header read: 3 s here), not kept with the
/// answer until the keep-alive timeout (60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_reading_is_closed_after_the_stall_timeout() {
    let config = Config {
        watch_heartbeat: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        keep_alive_timeout: Duration::from_secs(60),
        ..Config::default()
    };
    let stall = config.write_stall_timeout();
    let (_dir, gw) = start_large(config).await;
    let port = gw.rest_port;
    let path = "/v3/discovery:clusters?node=staller&format=yaml";
    let started = Instant::now();
    let (conn, responses, refused) = unread_streams(port, path, 1).await;
    assert_eq!(refused, 0);
    // Still open well before the timeout: the client may yet read.
    tokio::time::sleep(stall / 3).await;
    assert!(!conn.is_finished(), "closed after {:?}", started.elapsed());
    let ended = tokio::time::timeout(stall * 4, conn)
        .await
        .expect("the connection was still open four stall timeouts later");
    eprintln!("the client's connection ended: {ended:?}");
    let closed_after = started.elapsed();
    eprintln!("closed after {closed_after:?} (stall timeout {stall:?})");
    assert!(closed_after >= stall, "{closed_after:?}");
    drop(responses);
    gw.stop().await;
}

/// The gateway in process on a snapshot of ~0.5 MB of clusters (`config`
/// otherwise), and the snapshot's directory (removed when dropped).
async fn start_large(config: Config) -> (tempfile::TempDir, InProcess) {
    let dir = tempfile::tempdir().unwrap();
    write_snapshot(dir.path());
    let gw = InProcess::start(Config {
        snapshot: Some(dir.path().to_owned()),
        ..config
    })
    .await;
    (dir, gw)
}

/// Warms the session and the cache with one answer of `path` read whole;
/// its size.
async fn warm(port: u16, path: &str) -> usize {
    let (status, size) = inproc_get(port, path).await;
    assert_eq!(status, 200);
    assert!(size > 400_000, "the answer is {size} bytes");
    size
}

/// Opens one HTTP/2 connection and `streams` GETs of `path` on it, reading
/// only their heads: the connection's task, the responses (bodies unread,
/// with the request handle that keeps the connection open) and how many
/// were refused with a 503.
async fn unread_streams(
    port: u16,
    path: &str,
    streams: usize,
) -> (
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
    Unread,
    usize,
) {
    let stream = connect(port).await;
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_concurrent_reset_streams(0)
            // The protocol's initial windows, not hyper's 2 and 5 MB: the
            // gateway can write no more than this until the client reads.
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let mut held = Vec::new();
    for _ in 0..streams {
        let mut sender = sender.clone();
        let request = http::Request::get(format!("http://localhost:{port}{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        // The head only: the body is never read.
        held.push(tokio::spawn(
            async move { sender.send_request(request).await },
        ));
    }
    let mut responses = Vec::new();
    let mut refused = 0;
    for h in held {
        let response = h.await.unwrap().expect("an answer head");
        if response.status() == 503 {
            refused += 1;
        }
        responses.push(response);
    }
    (conn, Unread(sender, responses), refused)
}

/// Answers whose bodies are not read, and their connection's request
/// handle: while it is held, the client keeps the connection open.
#[allow(dead_code)] // held, never read
struct Unread(
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    Vec<http::Response<hyper::body::Incoming>>,
);

/// `GET path` over a connection of its own: the status and body size.
async fn inproc_get(port: u16, path: &str) -> (u16, usize) {
    use http_body_util::BodyExt;
    let stream = connect(port).await;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get(path)
        .header(http::header::HOST, "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body.len())
}
