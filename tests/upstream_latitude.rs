//! What the protocol lets a control plane leave unsaid, against the
//! in-process scripted control plane (`support/fake_ads.rs`) made to say
//! less, as java-control-plane's `SimpleCache` does:
//!
//! - a server that answers nothing to a resubscription at the versions the
//!   session holds (after a restart) is quiet, not down: once the new stream
//!   is up, answers are not marked stale and `/readyz` counts no stale
//!   session.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use inproc::InProcess;
use xds_gateway::config::Config;
use xds_gateway::xds::ResourceType;

const CDS: &str = ResourceType::Clusters.type_url();
const STALE: &str = "x-xds-gateway-stale-since";

fn cluster(name: &str) -> Any {
    let json = format!(r#"{{"@type":"{CDS}","name":"{name}","connect_timeout":"1s"}}"#);
    fake_ads::json_any(&json)
}

/// Status and whether the answer is marked stale.
async fn poll(port: u16) -> (u16, bool) {
    let (status, headers, _) = process::http_exchange(
        port,
        http::Method::GET,
        "/v3/discovery:clusters?node=n1",
        &[],
        bytes::Bytes::new(),
    )
    .await
    .expect("an answer");
    (status, headers.contains_key(STALE))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_upstream_after_a_restart_is_not_stale() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.quiet_on_current_version();
    upstream.set(CDS, "v1", vec![cluster("a")]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    assert_eq!(poll(gw.rest_port).await, (200, false));
    let streams = upstream.streams_opened();
    upstream.break_streams();
    // The gateway reconnects and resubscribes at v1; the server says nothing.
    let reopened = process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { (upstream.streams_opened() > streams).then_some(()) },
    )
    .await;
    assert!(reopened.is_some(), "the gateway opened a new stream");
    let fresh = process::eventually(
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async {
            let (status, stale) = poll(gw.rest_port).await;
            (status == 200 && !stale).then_some(())
        },
    )
    .await;
    assert!(
        fresh.is_some(),
        "answers are still marked stale: {:?}",
        poll(gw.rest_port).await
    );
    let sent_after_restart = upstream
        .responses()
        .into_iter()
        .filter(|r| r.stream > streams)
        .count();
    assert_eq!(
        sent_after_restart, 0,
        "the upstream stayed quiet, as the test means it to"
    );
    let (_, ready) = process::http_get(gw.admin_port, "/readyz")
        .await
        .expect("readyz");
    let ready: serde_json::Value = serde_json::from_str(&ready).expect("JSON");
    assert_eq!(ready["stale_sessions"], 0, "{ready}");
    assert_eq!(ready["session_errors"], serde_json::json!([]), "{ready}");
    gw.stop().await;
}

const RTDS: &str = ResourceType::Runtime.type_url();

/// A subscription the upstream cannot serve is isolated: asked for a type
/// it lacks, java-control-plane ends the whole ADS stream. The type is set
/// aside (not re-sent on reconnect), its poll gets a prompt 502 naming what
/// happened, and the node's other types go on, fresh and prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_that_ends_the_ads_stream_is_set_aside_and_the_others_go_on() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.end_streams_asked_for(RTDS);
    upstream.set(CDS, "v1", vec![cluster("a")]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    assert_eq!(poll(gw.rest_port).await, (200, false));
    let started = std::time::Instant::now();
    let (status, body) = process::http_get(gw.rest_port, "/v3/discovery:runtime?node=n1&names=rt")
        .await
        .expect("an answer");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("ended the aggregated stream"), "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "prompt: {:?}",
        started.elapsed()
    );
    // The stream comes back without runtime, and stays up.
    let fresh = process::eventually(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async { (poll(gw.rest_port).await == (200, false)).then_some(()) },
    )
    .await;
    assert!(
        fresh.is_some(),
        "clusters are not stale-marked once the stream is back"
    );
    let streams = upstream.streams_opened();
    let (status, _) = process::http_get(gw.rest_port, "/v3/discovery:runtime?node=n1&names=rt")
        .await
        .expect("an answer");
    assert_eq!(status, 502, "set aside: asked again only after its backoff");
    // A change of the node's clusters reaches it as fast as a fresh node's.
    upstream.set(CDS, "v2", vec![cluster("a"), cluster("b")]);
    let changed = process::eventually(
        Duration::from_secs(2),
        Duration::from_millis(10),
        || async {
            let (_, body) = process::http_get(gw.rest_port, "/v3/discovery:clusters?node=n1")
                .await
                .ok()?;
            body.contains("\"b\"").then_some(())
        },
    )
    .await;
    assert!(changed.is_some(), "the cluster change reached n1");
    assert_eq!(
        upstream.streams_opened(),
        streams,
        "no stream was ended again"
    );
    let runtime_asked_after = upstream
        .requests()
        .into_iter()
        .filter(|r| r.type_url == RTDS)
        .count();
    assert_eq!(
        runtime_asked_after, 1,
        "runtime was not re-sent on reconnect"
    );
    let (_, ready) = process::http_get(gw.admin_port, "/readyz")
        .await
        .expect("readyz");
    assert!(ready.contains("Runtime set aside"), "{ready}");
    gw.stop().await;
}
