//! Watch streams (`?watch`) end to end, in process, against scripted
//! sessions with tokio's paused clock: the first event, one event per new
//! version, resuming, heartbeats, coalescing for a reader that falls behind,
//! the bound on open watches, the drain, and the parameters a watch refuses.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::scripted;
use crate::config::Config;
use crate::http::{router, Gateway};
use crate::xds::ResourceType;

const CDS: ResourceType = ResourceType::Clusters;
const EDS: ResourceType = ResourceType::Endpoints;

fn cluster(name: &str, timeout: &str) -> Value {
    json!({"@type": CDS.type_url(), "name": name, "connect_timeout": timeout})
}

fn cla(name: &str, port: u16) -> Value {
    json!({"@type": EDS.type_url(), "cluster_name": name, "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
    ]}]})
}

/// An open watch's response body, read frame by frame.
struct Stream {
    body: Body,
}

impl Stream {
    /// The next frame, if one comes within `within` (of paused time).
    async fn next_within(&mut self, within: Duration) -> Option<Bytes> {
        match tokio::time::timeout(within, self.body.frame()).await {
            Ok(Some(Ok(frame))) => frame.into_data().ok(),
            Ok(None) => None,
            Ok(Some(Err(e))) => panic!("body error: {e}"),
            Err(_) => None,
        }
    }

    /// The next frame, which must come within a second.
    async fn next(&mut self) -> String {
        let frame = self
            .next_within(Duration::from_secs(1))
            .await
            .expect("a frame within 1 s");
        String::from_utf8(frame.to_vec()).expect("UTF-8 frame")
    }

    /// Asserts nothing is sent for `quiet`.
    async fn assert_quiet(&mut self, quiet: Duration) {
        if let Some(frame) = self.next_within(quiet).await {
            panic!(
                "expected nothing, got {:?}",
                String::from_utf8_lossy(&frame)
            );
        }
    }

    /// Whether the stream has ended (within a second).
    async fn ended(&mut self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), self.body.frame()).await,
            Ok(None)
        )
    }
}

/// One SSE event: (id, event name, data as JSON).
fn sse_event(frame: &str) -> (Option<String>, String, Value) {
    let (mut id, mut name, mut data) = (None, String::new(), Value::Null);
    assert!(frame.ends_with("\n\n"), "{frame:?}");
    for line in frame.trim_end().lines() {
        let (field, value) = line.split_once(": ").unwrap_or((line, ""));
        match field {
            "id" => id = Some(value.to_owned()),
            "event" => name = value.to_owned(),
            "data" => data = serde_json::from_str(value).expect("data is JSON"),
            other => panic!("unexpected field {other:?} in {frame:?}"),
        }
    }
    (id, name, data)
}

fn version_of(data: &Value) -> String {
    data["versionInfo"].as_str().unwrap_or_default().to_owned()
}

fn upstream_of(data: &Value) -> String {
    let version = version_of(data);
    version.split('~').next().unwrap_or_default().to_owned()
}

/// `GET path` with `headers`: the status, and the stream or the error body.
async fn open(
    gw: &Arc<Gateway>,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(axum::http::HeaderMap, Stream), (StatusCode, axum::http::HeaderMap, Value)> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(gw, request.body(Body::empty()).unwrap()).await
}

async fn send(
    gw: &Arc<Gateway>,
    request: Request<Body>,
) -> Result<(axum::http::HeaderMap, Stream), (StatusCode, axum::http::HeaderMap, Value)> {
    let response = router(gw.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    if status != StatusCode::OK {
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        return Err((status, headers, serde_json::from_slice(&body).unwrap()));
    }
    Ok((
        headers,
        Stream {
            body: response.into_body(),
        },
    ))
}

const SSE: (&str, &str) = ("accept", "text/event-stream");
const WATCH_CDS: &str = "/v3/discovery:clusters?node=n&watch";

#[tokio::test(start_paused = true)]
async fn sse_sends_the_current_state_then_each_new_version_once() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (headers, mut stream) = open(&gw, WATCH_CDS, &[SSE]).await.unwrap();
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["vary"], "Accept");
    assert_eq!(stream.next().await, "retry: 1000\n\n");
    let (id, name, data) = sse_event(&stream.next().await);
    assert_eq!(name, "discovery_response");
    assert_eq!(upstream_of(&data), "v1");
    assert_eq!(id.as_deref(), Some(version_of(&data).as_str()));
    assert_eq!(data["resources"][0]["name"], "a");
    assert_eq!(data["typeUrl"], CDS.type_url());
    stream.assert_quiet(Duration::from_secs(5)).await;

    for (version, timeout) in [("v2", "2s"), ("v3", "3s"), ("v4", "4s")] {
        script.set(CDS, version, &[cluster("a", timeout)]).await;
        let (id, _, data) = sse_event(&stream.next().await);
        assert_eq!(upstream_of(&data), version);
        assert_eq!(id.as_deref(), Some(version_of(&data).as_str()));
        assert_eq!(data["resources"][0]["connectTimeout"], timeout);
        stream.assert_quiet(Duration::from_secs(1)).await;
    }
    let metrics = gw.metrics.encode();
    assert!(
        metrics.contains("xds_gateway_watches_open 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("xds_gateway_watch_events_total{type=\"clusters\"} 4\n"),
        "{metrics}"
    );
    drop(stream);
    assert!(gw.metrics.encode().contains("xds_gateway_watches_open 0\n"));
}

#[tokio::test(start_paused = true)]
async fn ndjson_is_one_response_per_line() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    for (path, headers) in [
        (WATCH_CDS.to_owned(), &[][..]),
        (format!("{WATCH_CDS}&format=ndjson"), &[SSE][..]),
        (
            WATCH_CDS.to_owned(),
            &[("accept", "application/x-ndjson")][..],
        ),
    ] {
        let (headers, mut stream) = open(&gw, &path, headers).await.unwrap();
        assert_eq!(headers["content-type"], "application/x-ndjson", "{path}");
        let line = stream.next().await;
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        let data: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(upstream_of(&data), "v1", "{path}");
    }
}

#[tokio::test(start_paused = true)]
async fn resuming_at_the_current_version_sends_nothing_until_it_changes() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (_, mut first) = open(&gw, WATCH_CDS, &[SSE]).await.unwrap();
    first.next().await;
    let (current, _, _) = sse_event(&first.next().await);
    let current = current.unwrap();

    // Last-Event-ID (what EventSource sends when it reconnects) wins over
    // the URL's version, and `version=` alone resumes too.
    let stale = format!("{WATCH_CDS}&version=old");
    let current_in_url = format!("{WATCH_CDS}&version={current}&format=ndjson");
    let resumed = [
        open(&gw, &stale, &[SSE, ("last-event-id", current.as_str())]).await,
        open(&gw, &current_in_url, &[]).await,
    ];
    let mut streams = Vec::new();
    for opened in resumed {
        let (_, mut stream) = opened.unwrap();
        if let Some(frame) = stream.next_within(Duration::from_secs(1)).await {
            assert_eq!(&frame[..], b"retry: 1000\n\n");
        }
        stream.assert_quiet(Duration::from_secs(5)).await;
        streams.push(stream);
    }
    script.set(CDS, "v2", &[cluster("a", "2s")]).await;
    let (_, _, data) = sse_event(&streams[0].next().await);
    assert_eq!(upstream_of(&data), "v2");
    let data: Value = serde_json::from_str(&streams[1].next().await).unwrap();
    assert_eq!(upstream_of(&data), "v2");

    // A stale Last-Event-ID gets the current state at once.
    let (_, mut behind) = open(&gw, WATCH_CDS, &[SSE, ("last-event-id", current.as_str())])
        .await
        .unwrap();
    behind.next().await;
    let (_, _, data) = sse_event(&behind.next().await);
    assert_eq!(upstream_of(&data), "v2");
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_a_quiet_stream_busy() {
    let (gw, script) = scripted(Config {
        watch_heartbeat: Duration::from_secs(5),
        ..Config::default()
    });
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (_, mut sse) = open(&gw, WATCH_CDS, &[SSE]).await.unwrap();
    let path = format!("{WATCH_CDS}&format=ndjson");
    let (_, mut ndjson) = open(&gw, &path, &[]).await.unwrap();
    sse.next().await;
    sse.next().await;
    ndjson.next().await;
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        let frame = sse.next_within(Duration::from_secs(6)).await.unwrap();
        assert_eq!(&frame[..], b": heartbeat\n\n");
        let frame = ndjson.next_within(Duration::from_secs(6)).await.unwrap();
        assert_eq!(&frame[..], b"\n");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(15) && elapsed < Duration::from_secs(16),
        "{elapsed:?}"
    );
}

/// A reader that stops reading holds one state, not a queue: when it reads
/// again, the next event is the latest version, and the only one.
#[tokio::test(start_paused = true)]
async fn a_reader_that_falls_behind_gets_only_the_latest_state() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v0", &[cluster("a", "1s")]).await;
    let (_, mut stream) = open(&gw, &format!("{WATCH_CDS}&format=ndjson"), &[])
        .await
        .unwrap();
    stream.next().await;
    for i in 1..=50 {
        script
            .set(CDS, &format!("v{i}"), &[cluster("a", &format!("{i}s"))])
            .await;
    }
    let data: Value = serde_json::from_str(&stream.next().await).unwrap();
    assert_eq!(upstream_of(&data), "v50");
    stream.assert_quiet(Duration::from_secs(5)).await;
}

/// The same 304 rules as a poll: a watch of one EDS cluster hears nothing
/// when only another cluster changes.
#[tokio::test(start_paused = true)]
async fn a_change_the_client_would_get_304_for_sends_nothing() {
    let (gw, script) = scripted(Config::default());
    script.set(EDS, "v1", &[cla("a", 1), cla("b", 1)]).await;
    let path = "/v3/discovery:endpoints?node=n&names=a&watch";
    let (_, mut stream) = open(&gw, path, &[]).await.unwrap();
    let first: Value = serde_json::from_str(&stream.next().await).unwrap();
    assert_eq!(first["resources"].as_array().map(Vec::len), Some(1));
    script.set(EDS, "v2", &[cla("a", 1), cla("b", 2)]).await;
    stream.assert_quiet(Duration::from_secs(5)).await;
    script.set(EDS, "v3", &[cla("a", 3), cla("b", 2)]).await;
    let next: Value = serde_json::from_str(&stream.next().await).unwrap();
    assert_eq!(upstream_of(&next), "v3");
    let port = &next["resources"][0]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"]
        ["socketAddress"]["portValue"];
    assert_eq!(port, 3);
}

/// A watcher has no next poll to present what it was sent: it stands in
/// step once sent a version (not "catching up" forever), also after a change.
#[tokio::test(start_paused = true)]
async fn a_watcher_stands_in_step_in_the_client_book() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (_, mut stream) = open(&gw, WATCH_CDS, &[]).await.unwrap();
    stream.next().await;
    script.set(CDS, "v2", &[cluster("a", "2s")]).await;
    stream.next().await;
    let nodes = gw.clients.nodes();
    let subscription = &nodes[0].subscriptions[0];
    assert!(
        subscription.current.starts_with("v2~"),
        "{}",
        subscription.current
    );
    assert_eq!(
        subscription.standing,
        crate::observe::Standing::InStep,
        "{:?}",
        subscription.standing
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_body_can_be_watched() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let body = json!({"node": {"id": "n"}, "version_info": ""});
    let request = Request::post("/v3/discovery:clusters?watch")
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (_, mut stream) = send(&gw, request).await.unwrap();
    stream.next().await;
    let (_, _, data) = sse_event(&stream.next().await);
    assert_eq!(upstream_of(&data), "v1");
}

#[tokio::test(start_paused = true)]
async fn watches_are_bounded() {
    let (gw, script) = scripted(Config {
        max_watches: 1,
        ..Config::default()
    });
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (_, first) = open(&gw, WATCH_CDS, &[]).await.unwrap();
    let (status, headers, body) = open(&gw, WATCH_CDS, &[]).await.err().unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body["code"], 14);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-watches")),
        "{body}"
    );
    // Plain polls are not watches.
    let poll = router(gw.clone())
        .oneshot(
            Request::get("/v3/discovery:clusters?node=n")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(poll.status(), StatusCode::OK);
    drop(first);
    assert!(open(&gw, WATCH_CDS, &[]).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn draining_ends_open_watches_and_refuses_new_ones() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    let (_, mut sse) = open(&gw, WATCH_CDS, &[SSE]).await.unwrap();
    let (_, mut ndjson) = open(&gw, WATCH_CDS, &[]).await.unwrap();
    sse.next().await;
    sse.next().await;
    ndjson.next().await;
    gw.drain.begin();
    assert!(sse
        .next()
        .await
        .starts_with(": the gateway is shutting down"));
    assert!(sse.ended().await);
    assert!(ndjson.ended().await);
    assert!(gw.metrics.encode().contains("xds_gateway_watches_open 0\n"));
    let (status, headers, body) = open(&gw, WATCH_CDS, &[]).await.err().unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{body}"
    );
}

#[tokio::test(start_paused = true)]
async fn parameters_that_do_not_fit_a_watch_are_400s() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a", "1s")]).await;
    for (query, needle) in [
        ("&wait=5s", "wait"),
        ("&pretty", "pretty"),
        ("&format=yaml", "sse or ndjson"),
    ] {
        let path = format!("{WATCH_CDS}{query}");
        let (status, _, body) = open(&gw, &path, &[]).await.err().unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(body["code"], 3, "{path}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(needle)),
            "{path}: {body}"
        );
    }
    let (status, _, body) = open(&gw, "/v3/discovery:clusters?node=n&watch=maybe", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, body) = open(&gw, "/v3/discovery:clusters?node=n&format=ndjson", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("?watch")),
        "{body}"
    );
}
