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
use xds_gateway::xds::{Codec, ResourceType};

const CDS: &str = ResourceType::Clusters.type_url();
const STALE: &str = "x-xds-gateway-stale-since";

fn cluster(name: &str) -> Any {
    let json = format!(r#"{{"@type":"{CDS}","name":"{name}","connect_timeout":"1s"}}"#);
    let any = Codec::embedded()
        .parse_any(json.as_bytes())
        .expect("fixture");
    Any {
        type_url: any.type_url,
        value: any.value,
    }
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
