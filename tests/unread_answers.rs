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
    let dir = tempfile::tempdir().unwrap();
    write_snapshot(dir.path());
    let gw = InProcess::start(Config {
        snapshot: Some(dir.path().to_owned()),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    let path = "/v3/discovery:clusters?node=reader&format=yaml";
    // Warm: the session, the cache, one answer read whole.
    let (status, size) = inproc_get(port, path).await;
    assert_eq!(status, 200);
    assert!(size > 400_000, "the answer is {size} bytes");
    let before = rss_mib();

    let stream = connect(port).await;
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .max_concurrent_reset_streams(0)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    let _conn = tokio::spawn(conn);
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..STREAMS {
        let mut sender = sender.clone();
        let request = http::Request::get(format!("http://localhost:{port}{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        held.push(tokio::spawn(async move {
            // The head only: the body is never read.
            sender.send_request(request).await.map(|r| {
                let status = r.status().as_u16();
                (status, r)
            })
        }));
    }
    let mut responses = Vec::new();
    for h in held {
        let (status, response) = h.await.unwrap().expect("an answer head");
        if status == 503 {
            refused += 1;
        }
        responses.push(response);
    }
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
