//! The gateway process's lifecycle as a balancer (or Kubernetes) sees it,
//! with the real binary, since signals and readiness are what is tested:
//!
//! - SIGTERM: `/readyz` turns 503 (`"draining": true`) at once, a held long
//!   poll is answered 304 at once (not at the end of its wait), the REST
//!   listener stops accepting, a request still in flight keeps the process
//!   up no longer than `--drain-timeout`, and the exit code is 0;
//! - a replica in front of a control plane reports ready without any client
//!   polling it (a balancer sends nothing to an unready replica), and not
//!   while its upstream cannot be reached.
//!
//! Loopback only, free ports, every wait bounded, children killed by pid.

#[path = "support/process.rs"]
mod process;

#[path = "support/envoy.rs"]
mod envoy;

#[path = "support/fake_ads.rs"]
mod fake_ads;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use process::{eventually, free_port, http_exchange, http_get, ChildGuard};

const POLL: Duration = Duration::from_millis(50);
const START_TIMEOUT: Duration = Duration::from_secs(20);
const DRAIN: Duration = Duration::from_secs(3);

/// The gateway with `args` on free loopback ports; waits for `/healthz`.
async fn start(args: &[&str], dir: &Path, name: &str) -> (ChildGuard, u16, u16) {
    let (rest, admin) = (free_port(), free_port());
    let (listen, admin_addr) = (format!("127.0.0.1:{rest}"), format!("127.0.0.1:{admin}"));
    let mut all = vec!["--listen", &listen, "--admin", &admin_addr];
    all.extend_from_slice(args);
    let mut guard = envoy::spawn_gateway(&all, false, &dir.join(format!("{name}.log")));
    let up = eventually(START_TIMEOUT, POLL, || {
        let exited = guard.try_exit_status();
        async move {
            assert!(exited.is_none(), "{name} exited at start-up: {exited:?}");
            matches!(http_get(admin, "/healthz").await, Ok((200, _))).then_some(())
        }
    })
    .await;
    if up.is_none() {
        guard.print_log();
        panic!("{name}: /healthz did not answer within {START_TIMEOUT:?}");
    }
    (guard, rest, admin)
}

async fn readyz(admin: u16) -> (u16, Value) {
    let (status, body) = http_get(admin, "/readyz")
        .await
        .unwrap_or_else(|e| panic!("/readyz: {e}"));
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("/readyz {body}: {e}"));
    (status, json)
}

fn sigterm(guard: &ChildGuard) {
    let status = Command::new("kill")
        .args(["-TERM", &guard.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {}", guard.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_unready_answers_long_polls_and_exits_within_the_drain_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let drain = format!("{}s", DRAIN.as_secs());
    let (mut gw, rest, admin) = start(&["--drain-timeout", &drain], dir.path(), "gateway").await;
    let ready = eventually(START_TIMEOUT, POLL, || async move {
        (readyz(admin).await.0 == 200).then_some(())
    })
    .await;
    assert!(ready.is_some(), "the demo snapshot never got ready");
    let path = "/v3/discovery:clusters?node=demo";
    let (status, body) = http_get(rest, path).await.expect("GET clusters");
    assert_eq!(status, 200, "{body}");
    let version = serde_json::from_str::<Value>(&body).expect("JSON")["versionInfo"]
        .as_str()
        .expect("versionInfo")
        .to_owned();

    // A long poll held for 60 s, and a request whose body never finishes.
    let held_path = format!("{path}&version={version}&wait=60s");
    let held = tokio::spawn(async move {
        let sent = http_exchange(rest, http::Method::GET, &held_path, &[], Default::default());
        let answered = tokio::time::timeout(Duration::from_secs(20), sent).await;
        (
            answered.map(|r| r.map(|(status, _, _)| status).map_err(|e| e.to_string())),
            Instant::now(),
        )
    });
    let metric = "xds_gateway_long_polls_held ";
    let holding = eventually(Duration::from_secs(10), POLL, || async move {
        let (_, text) = http_get(admin, "/metrics").await.ok()?;
        let line = text.lines().find(|l| l.starts_with(metric))?.to_owned();
        (line.trim_end() != format!("{metric}0")).then_some(())
    })
    .await;
    assert!(holding.is_some(), "the long poll was never held");
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", rest))
        .await
        .expect("connect");
    slow.write_all(
        b"POST /v3/discovery:clusters HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    )
    .await
    .expect("write a partial request");

    let signalled = Instant::now();
    sigterm(&gw);
    let (answered, at) = held.await.expect("the long poll task");
    assert_eq!(
        answered.expect("answered before its own 20 s bound"),
        Ok(304),
        "the held long poll"
    );
    assert!(
        at - signalled < Duration::from_secs(2),
        "the held long poll was answered {:?} after SIGTERM",
        at - signalled
    );
    // Still draining (the slow request is in flight): not ready, says why.
    let (status, json) = readyz(admin).await;
    assert_eq!(status, 503, "{json}");
    assert_eq!(
        (json["ready"].clone(), json["draining"].clone()),
        (false.into(), true.into()),
        "{json}"
    );
    // The REST listener no longer accepts.
    let refused = eventually(Duration::from_secs(2), POLL, || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", rest))
            .await
            .err()
    })
    .await;
    assert!(
        refused.is_some(),
        "the REST listener still accepts while draining"
    );

    let exited = eventually(DRAIN + Duration::from_secs(5), POLL, || {
        let status = gw.try_exit_status();
        async move { status }
    })
    .await;
    let took = signalled.elapsed();
    let status = exited.unwrap_or_else(|| {
        gw.print_log();
        panic!(
            "still running {:?} after SIGTERM (--drain-timeout {drain})",
            took
        )
    });
    assert!(status.success(), "exit status {status}");
    assert!(
        took >= DRAIN - Duration::from_millis(500),
        "exited after {took:?}: before the in-flight request's drain time"
    );
    drop(slow);
}

/// A free port nobody listens on stands for an upstream not up yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_replica_is_ready_without_polls_and_not_before_its_upstream_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nowhere = format!("grpc://127.0.0.1:{}", free_port());
    let (_down, _, down_admin) = start(&["--upstream", &nowhere], dir.path(), "down").await;
    let ads = fake_ads::FakeAds::start().await;
    let (_up, _, up_admin) = start(&["--upstream", &ads.url()], dir.path(), "up").await;

    // No client polls either: the one whose upstream answers gets ready.
    let ready = eventually(Duration::from_secs(10), POLL, || async move {
        let (status, json) = readyz(up_admin).await;
        (status == 200).then_some(json)
    })
    .await;
    let json = ready.expect("a replica whose upstream answers never got ready without polls");
    assert_eq!(json["sessions"], 0, "{json}");
    assert_eq!(ads.streams_opened(), 0, "readiness opened an ADS stream");
    // Meanwhile the other, whose upstream cannot be reached, never did.
    let (status, json) = readyz(down_admin).await;
    assert_eq!(status, 503, "ready with an unreachable upstream: {json}");
}
