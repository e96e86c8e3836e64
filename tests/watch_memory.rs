//! "A watch client that stops reading costs no growing memory", measured:
//! [`WATCHERS`] clients of one node each open a `?watch` on a
//! [`CLUSTERS`]-cluster CDS (about 140 KB a version) and then never read a
//! byte, while the upstream pushes [`VERSIONS`] versions. Were the versions
//! queued per watch, the gateway would hold `WATCHERS × VERSIONS × 140 KB`
//! (≈ 170 MB here); what
//! bounds it instead (`src/http/watch/stream.rs`) is one state per watch (an
//! `Arc`, shared) and at most one rendered frame per watch beyond what the
//! connection buffers, and the kernel's socket buffers, which are not the
//! gateway's memory. The test asserts the gateway process's RSS (the
//! `xds-gateway` binary, from `/proc`) grows by less than [`RSS_BOUND_MIB`]
//! while the pushes go on, then that every stalled watch is closed by the
//! write-stall rule and its slot freed.
//!
//! Loopback only; the gateway is killed by pid when its guard drops.

#[path = "support/process.rs"]
mod process;

#[path = "support/envoy.rs"]
mod envoy;

#[path = "support/fake_ads.rs"]
mod fake_ads;

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use xds_gateway::xds::{Codec, ResourceType};

use process::{eventually, http_get};

const CDS: &str = ResourceType::Clusters.type_url();
const WATCHERS: usize = 20;
const VERSIONS: u64 = 60;
const CLUSTERS: usize = 20;
/// Each cluster's metadata string: 20 × 10 KB ≈ 200 KB a version.
const BLOB_BYTES: usize = 10_000;
/// RSS growth allowed with the watchers that do not read, over the same
/// pushes without them: one frame per watch twice over (≈ 8 MB), plus the
/// allocator's churn. A queue per watch would be ~240 MB.
const RSS_BOUND_MIB: u64 = 32;
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

fn clusters(codec: &Codec, generation: u64) -> Vec<envoy_types::pb::google::protobuf::Any> {
    (0..CLUSTERS)
        .map(|i| {
            let name = format!("watch_memory_{i:02}");
            // Bulk that is cheap to parse and render: a metadata string.
            let blob = format!("{generation:08}").repeat(BLOB_BYTES / 8);
            let json = json!({"@type": CDS, "name": name, "type": "STATIC", "connect_timeout": "1s",
                "metadata": {"filter_metadata": {"watch_memory": {"blob": blob}}},
                "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                    {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 20_000 + i}}}}]}]}});
            let any = codec
                .parse_any(json.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("fixture {json}: {e}"));
            envoy_types::pb::google::protobuf::Any {
                type_url: any.type_url,
                value: any.value,
            }
        })
        .collect()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn metric(admin: u16, name: &str) -> Option<f64> {
    let (_, text) = http_get(admin, "/metrics").await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// A watch whose client sends its request and never reads.
async fn unread_watch(port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    // A small receive buffer: the kernel holds less for it, so the
    // gateway's own side fills sooner.
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect");
    let head = b"GET /v3/discovery:clusters?node=stalled&watch HTTP/1.1\r\nHost: x\r\n\r\n";
    stream.write_all(head).await.expect("write");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_never_read_do_not_grow_the_gateway() {
    tokio::time::timeout(TEST_TIMEOUT, run())
        .await
        .expect("watch_memory: did not finish in time");
}

/// Pushes versions `from..from + VERSIONS` (25 ms apart) and waits until a
/// poll sees the last; the RSS growth (peak over `before`) meanwhile.
async fn push(ads: &fake_ads::FakeAds, codec: &Codec, port: u16, pid: u32, from: u64) -> u64 {
    let versions: Vec<_> = (from..from + VERSIONS)
        .map(|v| (v, clusters(codec, v)))
        .collect();
    let before = rss_kib(pid);
    let mut peak = before;
    for (v, resources) in versions {
        ads.set(CDS, &v.to_string(), resources);
        tokio::time::sleep(Duration::from_millis(25)).await;
        peak = peak.max(rss_kib(pid));
    }
    let last = format!("\"versionInfo\":\"{}~", from + VERSIONS - 1);
    eventually(Duration::from_secs(20), Duration::from_millis(50), || {
        let last = last.clone();
        async move {
            let (_, body) = http_get(port, "/v3/discovery:clusters?node=poller")
                .await
                .ok()?;
            body.contains(&last).then_some(())
        }
    })
    .await
    .expect("the gateway took every version");
    for _ in 0..20 {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak.saturating_sub(before)
}

async fn run() {
    let codec = Codec::embedded();
    let ads = fake_ads::FakeAds::start().await;
    ads.set(CDS, "0", clusters(&codec, 0));
    let dir = tempfile::tempdir().expect("tempdir");
    // A stalled watch is closed after two heartbeats and a header read
    // without a byte written: 2 × 5 s + 10 s, longer than the pushes.
    let gateway = envoy::start_gateway(
        &ads.url(),
        Duration::from_secs(1),
        &["--watch-heartbeat", "5s", "--header-read-timeout", "10s"],
        false,
        dir.path(),
    )
    .await;
    let (port, admin, pid) = (gateway.port, gateway.admin, gateway.guard.id());
    // Warm: the sessions and one version rendered for both nodes.
    for node in ["poller", "stalled"] {
        let (status, body) = http_get(port, &format!("/v3/discovery:clusters?node={node}"))
            .await
            .expect("a poll");
        assert_eq!(status, 200, "{body}");
    }
    let (_, body) = http_get(port, "/v3/discovery:clusters?node=poller")
        .await
        .expect("a poll");
    let frame_kib = body.len() as u64 / 1024;

    // The same pushes without a watch: what the memos and the history
    // (bounded by time) grow by anyway.
    let baseline = push(&ads, &codec, port, pid, 1).await;

    let mut stalled = Vec::new();
    for _ in 0..WATCHERS {
        stalled.push(unread_watch(port).await);
    }
    eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async move {
            (metric(admin, "xds_gateway_watches_open").await? == WATCHERS as f64).then_some(())
        },
    )
    .await
    .expect("every watch open");
    let started = Instant::now();
    let grew = push(&ads, &codec, port, pid, 1 + VERSIONS).await;
    let open = metric(admin, "xds_gateway_watches_open").await;
    let queued_mib = WATCHERS as u64 * VERSIONS * frame_kib / 1024;
    eprintln!(
        "watch_memory: {VERSIONS} versions of {frame_kib} KiB pushed in {:.1?}: RSS +{baseline} KiB \
         without a watch, +{grew} KiB with {WATCHERS} watches that never read \
         (a queue per watch would hold ~{queued_mib} MiB); watches still open: {open:?}",
        started.elapsed()
    );
    assert_eq!(
        open,
        Some(WATCHERS as f64),
        "a stalled watch was closed before the measurement ended"
    );
    let bound = baseline + RSS_BOUND_MIB * 1024;
    assert!(
        grew < bound,
        "RSS grew {grew} KiB with {WATCHERS} unread watches, {baseline} KiB without (bound: that + {RSS_BOUND_MIB} MiB)"
    );

    // The write-stall rule closes them all and frees their slots.
    let closed = eventually(
        Duration::from_secs(40),
        Duration::from_millis(100),
        || async move { (metric(admin, "xds_gateway_watches_open").await? == 0.0).then_some(()) },
    )
    .await;
    assert!(closed.is_some(), "stalled watches were never closed");
    eprintln!(
        "watch_memory: every stalled watch closed {:.1?} after the pushes began; RSS {} KiB",
        started.elapsed(),
        rss_kib(pid)
    );
    drop(stalled);
}
