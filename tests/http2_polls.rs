//! Envoy's REST polls over HTTP/2, as an Envoy whose xDS cluster speaks
//! HTTP/2 sends them: many 77 KB POSTs on one connection in the clear, their
//! DATA frames interleaved. The gateway reads such a connection ahead
//! (`src/read_ahead.rs`: one large read serves h2's 8 KiB ones), so what
//! it reads for one stream must reach that stream and no other: every
//! stream is answered exactly as the same poll over HTTP/1.1, 200 for an
//! old version and 304 for the current one. Against the gateway run in
//! process on the demo snapshot.

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
    http::Request::post(format!("http://127.0.0.1:{port}/v3/discovery:clusters"))
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

/// The answers to `bodies`, all sent at once on one HTTP/2 connection
/// (prior knowledge, in the clear), in the order of `bodies`.
async fn over_http2(port: u16, bodies: Vec<Bytes>) -> Vec<Answer> {
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(connect(port).await))
        .await
        .expect("HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let polls: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let mut sender = sender.clone();
            let request = post(port, body);
            tokio::spawn(async move {
                let response = sender.send_request(request).await?;
                Ok::<_, hyper::Error>(answer(response).await)
            })
        })
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
