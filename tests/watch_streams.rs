//! Watch streams (`?watch`) over real HTTP, with the reference control plane
//! (`tests/support/ads_server.py`) changing config: every version in order
//! and nothing twice, `Last-Event-ID` resume, heartbeats, the watch limit, a
//! reader that stops reading, the drain at shutdown, and a real SSE client
//! nobody here wrote (sseclient-py over requests, `tests/support/sse_client.py`).
//!
//! The gateway runs in process on kernel-chosen loopback ports; the control
//! plane and the Python client are child processes killed when the test
//! ends. Every test is bounded by [`TEST_TIMEOUT`].

#[path = "support/process.rs"]
mod process;

#[path = "support/gateway.rs"]
mod gateway;

#[path = "support/rest.rs"]
mod rest;

#[path = "support/inproc.rs"]
mod inproc;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use gateway::ControlPlane;
use inproc::InProcess;
use process::{eventually, http_get, require_python, ChildGuard};
use rest::{upstream_part, with_control_plane, CDS};
use xds_gateway::config::Config;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an event may take to arrive after its push.
const EVENT_WAIT: Duration = Duration::from_secs(10);
const WATCH: &str = "/v3/discovery:clusters?node=watcher&watch";
const SSE: (&str, &str) = ("accept", "text/event-stream");

/// Cluster `a` at version `i` (its content changes with `i`, so each
/// version is a new answer, not a 304).
fn cluster_at(i: u32) -> Value {
    json!({"@type": CDS, "name": "a", "type": "STATIC", "connect_timeout": format!("{}s", i + 1)})
}

async fn push(cp: &ControlPlane, i: u32) {
    cp.set(CDS, &format!("v{i}"), &[cluster_at(i)]).await;
}

/// The in-process gateway in front of `cp`.
async fn gateway_of(cp: &ControlPlane, config: Config) -> InProcess {
    let config = Config {
        upstream: Some(cp.upstream()),
        ..config
    }
    .validate()
    .expect("a valid configuration");
    InProcess::start(config).await
}

/// What a watch stream sends, one SSE block or NDJSON line at a time.
#[derive(Debug)]
enum Frame {
    Comment(String),
    Retry,
    Event {
        id: Option<String>,
        data: Value,
    },
    /// An NDJSON line (empty: a heartbeat).
    Line(String),
}

impl Frame {
    /// The upstream version of an event (`v7`), if this is one.
    fn version(&self) -> Option<String> {
        let data = match self {
            Frame::Event { data, .. } => data.clone(),
            Frame::Line(line) if !line.is_empty() => serde_json::from_str(line).ok()?,
            _ => return None,
        };
        data["versionInfo"]
            .as_str()
            .or_else(|| data["systemVersionInfo"].as_str())
            .map(|v| upstream_part(v).to_owned())
    }
}

/// One open watch, read as it streams.
struct Watcher {
    status: u16,
    headers: http::HeaderMap,
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
    separator: &'static [u8],
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl Watcher {
    async fn open(port: u16, path: &str, headers: &[(&str, &str)]) -> Watcher {
        let stream = inproc::connect(port).await;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP/1.1 handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut request = http::Request::get(path).header("host", format!("127.0.0.1:{port}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(request.body(Empty::<Bytes>::new()).unwrap())
            .await
            .expect("the watch's response head");
        let headers = response.headers().clone();
        let sse = headers
            .get("content-type")
            .is_some_and(|v| v == "text/event-stream");
        Watcher {
            status: response.status().as_u16(),
            headers,
            body: response.into_body(),
            buffer: Vec::new(),
            separator: if sse { b"\n\n" } else { b"\n" },
            conn,
        }
    }

    /// The next frame within `within`; `None` when none came or the stream ended.
    async fn frame_within(&mut self, within: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(at) = find(&self.buffer, self.separator) {
                let block: Vec<u8> = self.buffer.drain(..at + self.separator.len()).collect();
                let text = String::from_utf8(block).expect("UTF-8");
                return Some(parse(&text[..at], self.separator.len() == 2));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame()).await;
            match frame {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                _ => return None,
            }
        }
    }

    /// The next event (skipping `retry:` and heartbeats), within [`EVENT_WAIT`].
    async fn event(&mut self) -> Frame {
        loop {
            let frame = self
                .frame_within(EVENT_WAIT)
                .await
                .expect("an event within EVENT_WAIT");
            if frame.version().is_some() {
                return frame;
            }
        }
    }

    /// Asserts no event comes within `quiet` (heartbeats are fine).
    async fn assert_no_event(&mut self, quiet: Duration) {
        let deadline = tokio::time::Instant::now() + quiet;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.frame_within(left).await {
                None => return,
                Some(frame) => assert!(frame.version().is_none(), "unexpected {frame:?}"),
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(block: &str, sse: bool) -> Frame {
    if !sse {
        return Frame::Line(block.to_owned());
    }
    if let Some(comment) = block.strip_prefix(':') {
        return Frame::Comment(comment.trim().to_owned());
    }
    if block.starts_with("retry:") {
        return Frame::Retry;
    }
    let (mut id, mut data) = (None, Value::Null);
    for line in block.lines() {
        match line.split_once(": ") {
            Some(("id", value)) => id = Some(value.to_owned()),
            Some(("event", name)) => {
                assert!(name == "discovery_response" || name == "changes", "{name}")
            }
            Some(("data", value)) => data = serde_json::from_str(value).expect("data is JSON"),
            _ => panic!("unexpected SSE line {line:?}"),
        }
    }
    Frame::Event { id, data }
}

/// The number in `v<n>`.
fn index(version: &str) -> u32 {
    version
        .strip_prefix('v')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a pushed version: {version}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_every_version_in_order_and_nothing_twice() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let gw = gateway_of(cp, Config::default()).await;
        let mut watch = Watcher::open(gw.rest_port, WATCH, &[SSE]).await;
        assert_eq!(watch.status, 200);
        assert_eq!(watch.headers["content-type"], "text/event-stream");
        let first = watch.event().await;
        assert_eq!(first.version().as_deref(), Some("v0"));
        let Frame::Event { id, data } = &first else {
            unreachable!()
        };
        assert_eq!(id.as_deref(), data["versionInfo"].as_str(), "id = version");

        // One push at a time: each is one event, the pushed version.
        for i in 1..=10 {
            push(cp, i).await;
            assert_eq!(watch.event().await.version(), Some(format!("v{i}")));
        }
        // A burst: in order, never twice, ending at the last one.
        for i in 11..=30 {
            push(cp, i).await;
        }
        let mut seen = Vec::new();
        while seen.last() != Some(&30) {
            let version = watch.event().await.version().unwrap();
            seen.push(index(&version));
        }
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]) && seen[0] >= 11,
            "out of order or twice: {seen:?}"
        );
        watch.assert_no_event(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_resumes_without_resending() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let gw = gateway_of(cp, Config::default()).await;
        let Frame::Event { id: Some(v0), .. } = Watcher::open(gw.rest_port, WATCH, &[SSE])
            .await
            .event()
            .await
        else {
            panic!("no id on the first event")
        };
        let mut resumed =
            Watcher::open(gw.rest_port, WATCH, &[SSE, ("last-event-id", v0.as_str())]).await;
        assert_eq!(resumed.status, 200);
        resumed.assert_no_event(Duration::from_secs(1)).await;
        push(cp, 1).await;
        assert_eq!(resumed.event().await.version().as_deref(), Some("v1"));
        // Reconnecting from an older id: the current state at once.
        let mut behind =
            Watcher::open(gw.rest_port, WATCH, &[SSE, ("last-event-id", v0.as_str())]).await;
        assert_eq!(behind.event().await.version().as_deref(), Some("v1"));
        // NDJSON resumes from ?version=.
        let Frame::Event { id: Some(v1), .. } = Watcher::open(gw.rest_port, WATCH, &[SSE])
            .await
            .event()
            .await
        else {
            panic!("no id")
        };
        let path = format!("{WATCH}&format=ndjson&version={v1}");
        let mut ndjson = Watcher::open(gw.rest_port, &path, &[]).await;
        assert_eq!(ndjson.headers["content-type"], "application/x-ndjson");
        ndjson.assert_no_event(Duration::from_secs(1)).await;
        push(cp, 2).await;
        assert_eq!(ndjson.event().await.version().as_deref(), Some("v2"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_arrive_while_nothing_changes() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let config = Config {
            watch_heartbeat: Duration::from_millis(200),
            ..Config::default()
        };
        let gw = gateway_of(cp, config).await;
        let mut sse = Watcher::open(gw.rest_port, WATCH, &[SSE]).await;
        let mut ndjson = Watcher::open(gw.rest_port, &format!("{WATCH}&format=ndjson"), &[]).await;
        sse.event().await;
        ndjson.event().await;
        for _ in 0..3 {
            let frame = sse.frame_within(EVENT_WAIT).await;
            assert!(
                matches!(&frame, Some(Frame::Comment(c)) if c == "heartbeat"),
                "{frame:?}"
            );
            let frame = ndjson.frame_within(EVENT_WAIT).await;
            assert!(
                matches!(&frame, Some(Frame::Line(l)) if l.is_empty()),
                "{frame:?}"
            );
        }
    })
    .await;
}

/// A watch is a request in flight for as long as it streams: the idle
/// connection bound (--keep-alive-timeout, then --header-read-timeout to
/// finish) does not close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_outlives_the_keep_alive_timeout() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let config = Config {
            keep_alive_timeout: Duration::from_millis(500),
            header_read_timeout: Duration::from_millis(500),
            watch_heartbeat: Duration::from_millis(200),
            ..Config::default()
        };
        let gw = gateway_of(cp, config).await;
        let mut watch = Watcher::open(gw.rest_port, WATCH, &[SSE]).await;
        watch.event().await;
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            let frame = watch.frame_within(EVENT_WAIT).await;
            assert!(
                matches!(&frame, Some(Frame::Comment(c)) if c == "heartbeat"),
                "after {:?}: {frame:?} (the connection was closed as idle)",
                started.elapsed()
            );
        }
        push(cp, 1).await;
        assert_eq!(watch.event().await.version().as_deref(), Some("v1"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_limit_answers_a_json_503() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let config = Config {
            max_watches: 2,
            watch_heartbeat: Duration::from_millis(100),
            ..Config::default()
        };
        let gw = gateway_of(cp, config).await;
        let mut first = Watcher::open(gw.rest_port, WATCH, &[]).await;
        let mut second = Watcher::open(gw.rest_port, WATCH, &[]).await;
        first.event().await;
        second.event().await;
        let mut third = Watcher::open(gw.rest_port, WATCH, &[]).await;
        assert_eq!(third.status, 503);
        assert_eq!(third.headers["retry-after"], "1");
        assert_eq!(third.headers["content-type"], "application/json");
        let body = third
            .body
            .frame()
            .await
            .unwrap()
            .unwrap()
            .into_data()
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], 14);
        assert!(
            body["message"].as_str().unwrap().contains("--max-watches"),
            "{body}"
        );
        let (_, metrics) = http_get(gw.admin_port, "/metrics").await.unwrap();
        assert!(
            metrics.contains("xds_gateway_watches_open 2\n"),
            "{metrics}"
        );

        // A client that goes away frees its place (found at the next
        // heartbeat's write at the latest).
        drop(first);
        let reopened = eventually(EVENT_WAIT, Duration::from_millis(50), || async {
            let watch = Watcher::open(gw.rest_port, WATCH, &[]).await;
            (watch.status == 200).then_some(watch)
        })
        .await;
        assert!(reopened.is_some(), "the closed watch's place was not freed");
    })
    .await;
}

/// Cluster `a` at version `i`, ~300 KB: the kernel's socket buffers (4 MB
/// at most for sending here) hold a dozen such events, not forty.
fn big(i: u32) -> Value {
    let padding = "x".repeat(300_000);
    json!({"@type": CDS, "name": "a", "type": "STATIC",
           "connect_timeout": format!("{}s", i + 1),
           "metadata": {"filter_metadata": {"pad": {"pad": padding}}}})
}

/// An SSE watch on a raw socket with a small receive buffer, not read yet.
async fn unread_watch(port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(([127, 0, 0, 1], port).into()).await.unwrap();
    let head = format!("GET {WATCH}&format=sse HTTP/1.1\r\nHost: x\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// A reader that stops reading is not queued for: when it reads again it
/// gets what the connection buffered and then the latest version, far
/// fewer events than versions pushed, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_gets_the_latest_not_a_backlog() {
    const PUSHES: u32 = 40;
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v0", &[big(0)]).await;
        let gw = gateway_of(cp, Config::default()).await;
        let mut stream = unread_watch(gw.rest_port).await;
        for i in 1..=PUSHES {
            cp.set(CDS, &format!("v{i}"), &[big(i)]).await;
        }
        // The gateway has the last version before the reader reads again.
        let last = format!("\"versionInfo\":\"v{PUSHES}~");
        let path = "/v3/discovery:clusters?node=watcher";
        eventually(EVENT_WAIT, Duration::from_millis(50), || async {
            let (_, body) = http_get(gw.rest_port, path).await.ok()?;
            body.contains(&last).then_some(())
        })
        .await
        .expect("the gateway has the last version");
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while find(&raw, last.as_bytes()).is_none() {
            let n = tokio::time::timeout(EVENT_WAIT, stream.read(&mut buf))
                .await
                .expect("the stream goes on")
                .unwrap();
            assert!(n > 0, "the stream ended");
            raw.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&raw);
        let seen: Vec<u32> = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|id| index(upstream_part(id)))
            .collect();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&PUSHES));
        assert!(
            seen.len() <= (PUSHES / 2) as usize,
            "{} events for {PUSHES} versions: a backlog was kept: {seen:?}",
            seen.len()
        );
    })
    .await;
}

/// A reader that stops reading for good is closed once nothing more can be
/// written to it (the kernel's buffers are full and no heartbeat gets out
/// for two heartbeats), and its watch slot is freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_never_reads_again_is_closed_and_frees_its_slot() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        cp.set(CDS, "v0", &[big(0)]).await;
        let config = Config {
            max_watches: 1,
            watch_heartbeat: Duration::from_millis(200),
            header_read_timeout: Duration::from_secs(1),
            ..Config::default()
        };
        let gw = gateway_of(cp, config).await;
        let mut stalled = unread_watch(gw.rest_port).await;
        let open = |n: u32| {
            let port = gw.admin_port;
            async move {
                let (_, metrics) = http_get(port, "/metrics").await.ok()?;
                metrics
                    .contains(&format!("xds_gateway_watches_open {n}\n"))
                    .then_some(())
            }
        };
        eventually(EVENT_WAIT, Duration::from_millis(20), || open(1))
            .await
            .expect("the watch is open");
        for i in 1..=40 {
            cp.set(CDS, &format!("v{i}"), &[big(i)]).await;
        }
        eventually(EVENT_WAIT, Duration::from_millis(50), || open(0))
            .await
            .expect("the stalled watch's slot is freed");
        let next = Watcher::open(gw.rest_port, WATCH, &[]).await;
        assert_eq!(next.status, 200, "a new watch takes the freed slot");
        // The stalled connection was closed: what was buffered, then the end.
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match tokio::time::timeout(EVENT_WAIT, stalled.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => break,
                Ok(Ok(_)) => continue,
                Err(_) => panic!("the stalled connection is still open"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_watches() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let config = Config {
            drain_timeout: Duration::from_secs(30),
            ..Config::default()
        };
        let gw = gateway_of(cp, config).await;
        let mut sse = Watcher::open(gw.rest_port, WATCH, &[SSE]).await;
        let mut ndjson = Watcher::open(gw.rest_port, WATCH, &[]).await;
        sse.event().await;
        ndjson.event().await;
        let started = std::time::Instant::now();
        let stopping = tokio::spawn(gw.stop());
        let frame = sse.frame_within(EVENT_WAIT).await;
        assert!(
            matches!(&frame, Some(Frame::Comment(c)) if c.contains("shutting down")),
            "{frame:?}"
        );
        assert!(
            sse.frame_within(EVENT_WAIT).await.is_none(),
            "the SSE stream ended"
        );
        assert!(
            ndjson.frame_within(EVENT_WAIT).await.is_none(),
            "the NDJSON stream ended"
        );
        stopping.await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the watches held the drain ({:?})",
            started.elapsed()
        );
    })
    .await;
}

/// `?changes` against the control plane's own resources: each event lists
/// exactly the resources added or modified (as protobuf's canonical JSON of
/// what was pushed) and the names removed; a poll presenting an older
/// version gets the changes since it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_list_exactly_what_the_upstream_added_modified_and_removed() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        let c = |name: &str, seconds: u32| {
            json!({"@type": CDS, "name": name, "type": "STATIC", "connect_timeout": format!("{seconds}s")})
        };
        let pushes = [
            vec![c("a", 1), c("b", 1), c("c", 1)],
            vec![c("a", 1), c("b", 2), c("d", 1)],
            vec![c("b", 2), c("d", 3), c("e", 1)],
            vec![c("b", 2), c("d", 3), c("e", 1)],
            vec![c("f", 1)],
        ];
        let mut canonical = Vec::new();
        canonical.push(cp.set(CDS, "v0", &pushes[0]).await);
        let gw = gateway_of(cp, Config::default()).await;
        let mut watch = Watcher::open(gw.rest_port, &format!("{WATCH}&changes"), &[SSE]).await;
        let changes = |frame: Frame| match frame {
            Frame::Event { data, .. } => data,
            other => panic!("not an event: {other:?}"),
        };
        let first = changes(watch.event().await);
        assert_eq!(first["fullState"], true);
        assert_eq!(first["resources"].as_array().unwrap().len(), 3);
        let v0 = first["systemVersionInfo"].as_str().unwrap().to_owned();
        for (i, push) in pushes.iter().enumerate().skip(1) {
            canonical.push(cp.set(CDS, &format!("v{i}"), push).await);
            if pushes[i] == pushes[i - 1] {
                continue; // the same resources: a 304 for a poll, no event for a watch
            }
            let got = changes(watch.event().await);
            assert_eq!(got["fullState"], false, "{got}");
            assert_eq!(upstream_part(got["systemVersionInfo"].as_str().unwrap()), format!("v{i}"));
            let (changed, removed) = expected_changes(&canonical[i - 1], &canonical[i]);
            let got_changed: Vec<(String, Value)> = got["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["name"].as_str().unwrap().to_owned(), r["resource"].clone()))
                .collect();
            assert_eq!(got_changed, changed, "v{i}: added or modified");
            assert_eq!(got["removedResources"], json!(removed), "v{i}: removed");
        }
        // A poll presenting v0 gets everything that changed since v0.
        let (_, body) = http_get(
            gw.rest_port,
            &format!("/v3/discovery:clusters?node=watcher&changes&version={v0}"),
        )
        .await
        .unwrap();
        let since_v0: Value = serde_json::from_str(&body).unwrap();
        let (changed, removed) = expected_changes(&canonical[0], canonical.last().unwrap());
        assert_eq!(since_v0["resources"].as_array().unwrap().len(), changed.len(), "{since_v0}");
        assert_eq!(since_v0["removedResources"], json!(removed));
    })
    .await;
}

/// What changed from `old` to `new` (protobuf's canonical JSON of each
/// resource, as the control plane returned it): the (name, resource)
/// added or modified, and the names removed, both in name order.
fn expected_changes(old: &[Value], new: &[Value]) -> (Vec<(String, Value)>, Vec<String>) {
    let by_name = |list: &[Value]| -> std::collections::BTreeMap<String, Value> {
        list.iter()
            .map(|r| (r["name"].as_str().unwrap().to_owned(), r.clone()))
            .collect()
    };
    let (old, new) = (by_name(old), by_name(new));
    let changed = new
        .iter()
        .filter(|(name, r)| old.get(*name) != Some(r))
        .map(|(name, r)| (name.clone(), r.clone()))
        .collect();
    let removed = old
        .keys()
        .filter(|n| !new.contains_key(*n))
        .cloned()
        .collect();
    (changed, removed)
}

/// sseclient-py (over requests) reads the stream: ids, event names and data
/// as it parses them, and `Last-Event-ID` as it sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_sse_client_reads_every_version_and_resumes() {
    with_control_plane(&[], TEST_TIMEOUT, async |cp| {
        push(cp, 0).await;
        let gw = gateway_of(cp, Config::default()).await;
        let url = format!("http://127.0.0.1:{}{WATCH}", gw.rest_port);
        let mut client = PythonClient::start(&url, 3, None);
        let head = client.line().await;
        assert_eq!(head["status"], 200, "{head}");
        assert_eq!(head["content_type"], "text/event-stream", "{head}");
        let mut last_id = String::new();
        for i in 0..3 {
            if i > 0 {
                push(cp, i).await;
            }
            let event = client.line().await;
            assert_eq!(event["event"], "discovery_response", "{event}");
            assert_eq!(event["id"], event["version"], "{event}");
            let version = event["version"].as_str().unwrap();
            assert_eq!(upstream_part(version), format!("v{i}"), "{event}");
            assert_eq!(event["names"], json!(["a"]), "{event}");
            last_id = version.to_owned();
        }
        let mut resumed = PythonClient::start(&url, 1, Some(&last_id));
        assert_eq!(resumed.line().await["status"], 200);
        push(cp, 3).await;
        let event = resumed.line().await;
        assert_eq!(
            upstream_part(event["version"].as_str().unwrap()),
            "v3",
            "resumed at v2, so v2 is not sent again: {event}"
        );
    })
    .await;
}

/// `tests/support/sse_client.py`, its output read line by line.
struct PythonClient {
    _guard: ChildGuard,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl PythonClient {
    fn start(url: &str, count: u32, last_event_id: Option<&str>) -> PythonClient {
        let python = require_python("sse_client.py");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sse_client.py");
        let mut command = Command::new(python);
        command.arg(script).arg(url).arg(count.to_string());
        if let Some(id) = last_event_id {
            command.arg(id);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run sse_client.py");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        PythonClient {
            _guard: ChildGuard::new("sse_client.py", child),
            lines,
        }
    }

    /// Its next line, as JSON, within [`EVENT_WAIT`].
    async fn line(&mut self) -> Value {
        let line = tokio::time::timeout(EVENT_WAIT, self.lines.recv())
            .await
            .expect("sse_client.py printed nothing within EVENT_WAIT")
            .expect("sse_client.py exited early (see its stderr above)");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }
}
