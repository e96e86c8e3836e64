//! Envoy's REST polls over HTTP/2, as an Envoy whose xDS cluster speaks
//! HTTP/2 sends them: many 77 KB POSTs on one connection in the clear, their
//! DATA frames interleaved. The gateway reads such a connection ahead
//! (`crates/base/src/read_ahead.rs`: one large read serves h2's 8 KiB ones), so what
//! it reads for one stream must reach that stream and no other: every
//! stream is answered exactly as the same poll over HTTP/1.1, 200 for an
//! old version and 304 for the current one. Against the gateway run in
//! process on the demo snapshot.
//!
//! The gateway also runs a connection's HTTP/2 streams on the connection's
//! own task (`src/serve/streams.rs`), so polls held on one connection must
//! not keep its other streams from their answers, and a change must wake
//! every one of them.

#[path = "support/files.rs"]
mod files;
#[path = "support/inproc.rs"]
mod inproc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use inproc::{connect, InProcess};
use serde_json::Value;
use xds_gateway::config::Config;

/// How many polls go on the one HTTP/2 connection at once.
const STREAMS: usize = 48;

/// A real Envoy 1.40 CDS request (its 516-extension node) with
/// `version_info` set to `version`.
fn envoy_poll(version: &str) -> Bytes {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/bench/fixtures/envoy-1.40-cds-request.json"
    );
    let mut request: Value = serde_json::from_slice(&std::fs::read(path).expect("the fixture"))
        .expect("the fixture is JSON");
    request["version_info"] = Value::from(version);
    let body = serde_json::to_vec(&request).expect("JSON");
    assert!(body.len() > 70_000, "Envoy's poll is {} bytes", body.len());
    Bytes::from(body)
}

fn post(port: u16, body: Bytes) -> http::Request<Full<Bytes>> {
    post_to(port, "/v3/discovery:clusters", body)
}

fn post_to(port: u16, path: &str, body: Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("a request")
}

/// Status and body of each answer.
type Answer = (u16, Bytes);

async fn answer(response: http::Response<hyper::body::Incoming>) -> Answer {
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("the body");
    (status, body.to_bytes())
}

/// The answer to `body` over HTTP/1.1.
async fn over_http1(port: u16, body: Bytes) -> Answer {
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(connect(port).await))
            .await
            .expect("HTTP/1.1 handshake");
    let conn = tokio::spawn(conn);
    let answered = answer(
        sender
            .send_request(post(port, body))
            .await
            .expect("an answer"),
    )
    .await;
    conn.abort();
    answered
}

/// One HTTP/2 connection (prior knowledge, in the clear): its request
/// handle and its task.
async fn http2_connection(
    port: u16,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(connect(port).await))
        .await
        .expect("HTTP/2 handshake");
    (sender, tokio::spawn(conn))
}

/// Sends `request` on `sender`'s connection; its answer, read whole.
fn send(
    sender: &hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> tokio::task::JoinHandle<Result<Answer, hyper::Error>> {
    let mut sender = sender.clone();
    tokio::spawn(async move {
        let response = sender.send_request(request).await?;
        Ok(answer(response).await)
    })
}

/// The answers to `bodies`, all sent at once on one HTTP/2 connection
/// (prior knowledge, in the clear), in the order of `bodies`.
async fn over_http2(port: u16, bodies: Vec<Bytes>) -> Vec<Answer> {
    let (sender, conn) = http2_connection(port).await;
    let polls: Vec<_> = bodies
        .into_iter()
        .map(|body| send(&sender, post(port, body)))
        .collect();
    let mut answers = Vec::new();
    for poll in polls {
        answers.push(poll.await.expect("the poll's task").expect("an answer"));
    }
    conn.abort();
    answers
}

#[tokio::test]
async fn polls_on_one_http2_connection_are_answered_as_over_http1() {
    let gw = InProcess::start(Config::default()).await;
    let port = gw.rest_port;

    let (status, first) = over_http1(port, envoy_poll("")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&first));
    let answer: Value = serde_json::from_slice(&first).expect("a JSON answer");
    let version = answer["versionInfo"]
        .as_str()
        .expect("a version")
        .to_owned();

    // Old and current versions interleaved: each stream gets its own answer.
    let bodies: Vec<Bytes> = (0..STREAMS)
        .map(|i| envoy_poll(if i % 2 == 0 { "0" } else { &version }))
        .collect();
    let expected = [
        over_http1(port, bodies[0].clone()).await,
        over_http1(port, bodies[1].clone()).await,
    ];
    assert_eq!(expected[0], (200, first.clone()));
    assert_eq!(expected[1].0, 304);

    for round in 0..3 {
        let answers = over_http2(port, bodies.clone()).await;
        for (i, got) in answers.iter().enumerate() {
            assert!(
                *got == expected[i % 2],
                "round {round}, stream {i}: {} with {} bytes, where HTTP/1.1 gave {} with {} bytes",
                got.0,
                got.1.len(),
                expected[i % 2].0,
                expected[i % 2].1.len()
            );
        }
    }
    gw.stop().await;
}

/// Writes a snapshot of one cluster, `a`, with `connect_timeout`, whole.
fn write_cluster(dir: &std::path::Path, connect_timeout: &str) {
    let text = format!(
        "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n\
         name: a\nconnect_timeout: {connect_timeout}\n"
    );
    files::write_whole(&dir.join("clusters.yaml"), &text);
}

fn version_of(body: &[u8]) -> String {
    let answer: Value = serde_json::from_slice(body).expect("a JSON answer");
    answer["versionInfo"]
        .as_str()
        .expect("a version")
        .to_owned()
}

#[tokio::test]
async fn polls_held_on_one_http2_connection_leave_its_other_streams_free_and_all_wake() {
    const HELD: usize = 16;
    let dir = tempfile::tempdir().expect("a snapshot directory");
    write_cluster(dir.path(), "1s");
    let gw = InProcess::start(Config {
        snapshot: Some(dir.path().to_owned()),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    let (status, first) = over_http1(port, envoy_poll("")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&first));
    let version = version_of(&first);

    let (sender, conn) = http2_connection(port).await;
    let held: Vec<_> = (0..HELD)
        .map(|_| {
            let path = "/v3/discovery:clusters?wait=20s";
            send(&sender, post_to(port, path, envoy_poll(&version)))
        })
        .collect();
    // Streams after the held ones, on the same connection, are answered
    // while those are held.
    for round in 0..3 {
        let answers: Vec<_> = (0..8)
            .map(|_| send(&sender, post(port, envoy_poll("0"))))
            .collect();
        for answered in answers {
            let got = tokio::time::timeout(std::time::Duration::from_secs(10), answered)
                .await
                .unwrap_or_else(|_| {
                    panic!("round {round}: a poll behind held ones was not answered")
                })
                .expect("the poll's task")
                .expect("an answer");
            assert_eq!(got, (200, first.clone()), "round {round}");
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        held.iter().all(|h| !h.is_finished()),
        "a poll of the current version was answered before any change"
    );

    // One change wakes every held poll.
    write_cluster(dir.path(), "2s");
    for (i, h) in held.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(std::time::Duration::from_secs(10), h)
            .await
            .unwrap_or_else(|_| panic!("held poll {i}: not woken by the change"))
            .expect("the poll's task")
            .expect("an answer");
        assert_eq!(
            status,
            200,
            "held poll {i}: {}",
            String::from_utf8_lossy(&body)
        );
        assert_ne!(version_of(&body), version, "held poll {i}");
        let answer: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            answer["resources"][0]["connectTimeout"], "2s",
            "held poll {i}"
        );
    }
    conn.abort();
    gw.stop().await;
}
