//! A subscription of a type the upstream never answered (other than the
//! four every ADS server serves) does not share a node's aggregated stream
//! until the upstream has shown it serves the type: it is probed on an ADS
//! stream of its own, and only the probe's end is evidence against it. Against the in-process scripted control plane
//! (`support/fake_ads.rs`) made to end every stream that asks for a type,
//! as java-control-plane ends an ADS stream asked for a type it lacks and
//! Istio one asked for a type the gateway's identity may not read:
//!
//! - one client's poll of a refused type does not reset the stream every
//!   other client of the node shares, nor mark their answers stale;
//! - a served type subscribed together with a refused one is not blamed;
//! - a type refused after it was served is taken off the shared stream,
//!   which then stays up;
//! - a fleet keeps `200`s and fresh answers while another client of its
//!   node polls refused types for a while.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use fake_ads::FakeAds;
use inproc::InProcess;
use xds_gateway::config::Config;
use xds_gateway::xds::ResourceType;

const CDS: &str = ResourceType::Clusters.type_url();
const EDS: &str = ResourceType::Endpoints.type_url();
const RTDS: &str = ResourceType::Runtime.type_url();
const STALE: &str = "x-xds-gateway-stale-since";

/// One `ClusterLoadAssignment` named `name`, its port telling versions apart.
fn assignment(name: &str, port: u32) -> Any {
    let json = format!(
        r#"{{"@type":"{EDS}","cluster_name":"{name}","endpoints":[{{"lb_endpoints":[
        {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{port}}}}}}}}}]}}]}}"#
    );
    fake_ads::json_any(&json)
}

async fn gateway(upstream: &FakeAds) -> InProcess {
    InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await
}

/// A poll: status, whether it is marked stale, and the body.
async fn poll(port: u16, path: &str) -> (u16, bool, String) {
    let (status, headers, body) =
        process::http_exchange(port, http::Method::GET, path, &[], bytes::Bytes::new())
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let body = String::from_utf8_lossy(&body).into_owned();
    (status, headers.contains_key(STALE), body)
}

/// Whether a discovery response's body is of the upstream's `version`
/// (the gateway's version is the upstream's, `~`, a digest).
fn at_version(body: &str, version: &str) -> bool {
    body.contains(&format!("\"versionInfo\":\"{version}~"))
}

/// The streams (by number) that carried a request of `type_url`.
fn streams_asking(upstream: &FakeAds, type_url: &str) -> BTreeSet<usize> {
    let requests = upstream.requests().into_iter();
    let asking = requests.filter(|r| r.type_url == type_url);
    asking.map(|r| r.stream).collect()
}

/// The streams opened after stream `opened` that asked for `type_url`.
fn streams_asking_after(upstream: &FakeAds, type_url: &str, opened: usize) -> Vec<usize> {
    let asking = streams_asking(upstream, type_url).into_iter();
    asking.filter(|s| *s > opened).collect()
}

/// The stream that carried the last request of `type_url`.
fn last_stream_asking(upstream: &FakeAds, type_url: &str) -> Option<usize> {
    let requests = upstream.requests().into_iter();
    requests
        .filter(|r| r.type_url == type_url)
        .map(|r| r.stream)
        .next_back()
}

/// Serves clusters `a` and its endpoints to a fleet on node `n` until both
/// ride one stream (the node's shared one); returns that stream's number.
async fn fleet_served(gw: &InProcess, upstream: &FakeAds) -> usize {
    for path in [
        "/v3/discovery:clusters?node=n",
        "/v3/discovery:endpoints?node=n&names=a",
    ] {
        let (status, _, body) = poll(gw.rest_port, path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let shared = process::eventually(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async {
            let cds = last_stream_asking(upstream, CDS)?;
            (last_stream_asking(upstream, EDS)? == cds).then_some(cds)
        },
    )
    .await;
    shared.expect("clusters and endpoints on one shared stream")
}

/// Waits until the fleet of node `n` is served clusters at `version`, not
/// marked stale.
async fn fleet_sees(gw: &InProcess, version: &str) -> Option<()> {
    process::eventually(
        Duration::from_secs(3),
        Duration::from_millis(20),
        || async {
            let (status, stale, body) = poll(gw.rest_port, "/v3/discovery:clusters?node=n").await;
            let seen = status == 200 && !stale && at_version(&body, version);
            seen.then_some(())
        },
    )
    .await
}

/// Issue 54, finding 1: a client of the node polls a type the upstream
/// refuses by ending the stream. The refusal ends a stream of that type's
/// own, not the node's shared one: the fleet's clusters are never asked
/// again on a new stream, never marked stale, and the 502 names runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_poll_does_not_reset_the_nodes_shared_stream() {
    let upstream = FakeAds::start().await;
    upstream.end_streams_asked_for(RTDS);
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "e1", vec![assignment("a", 1)]);
    let gw = gateway(&upstream).await;
    let shared = fleet_served(&gw, &upstream).await;
    let opened = upstream.streams_opened();

    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:runtime?node=n&names=rt").await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("Runtime"),
        "runtime is what was refused: {body}"
    );
    let runtime_streams = streams_asking(&upstream, RTDS);
    assert!(
        runtime_streams.is_disjoint(&streams_asking(&upstream, CDS)),
        "runtime was asked on the stream clusters ride: {runtime_streams:?}"
    );

    // A change reaches the fleet fresh, on the stream it had.
    upstream.set(
        CDS,
        "c2",
        vec![fake_ads::named_cluster("a"), fake_ads::named_cluster("b")],
    );
    assert!(
        fleet_sees(&gw, "c2").await.is_some(),
        "the fleet's clusters did not come fresh: {:?}",
        poll(gw.rest_port, "/v3/discovery:clusters?node=n").await
    );
    let asked_again = streams_asking_after(&upstream, CDS, opened);
    assert!(
        asked_again.is_empty(),
        "the shared stream {shared} was reset: clusters asked again on {asked_again:?}"
    );
    let (status, stale, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=a").await;
    assert_eq!((status, stale), (200, false), "{body}");
    gw.stop().await;
}

/// Issue 54, finding 2: a refused type and a served one the upstream has
/// not answered yet are subscribed within one coalescing window (the
/// refused one a few ms first). The stream that ends is the refused
/// type's alone: endpoints are not set aside, and are served once the
/// upstream has them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_subscribed_with_a_refused_one_is_not_blamed_for_it() {
    let upstream = FakeAds::start().await;
    upstream.end_streams_asked_for(RTDS);
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    // No endpoints yet: the upstream does not answer them until it has some.
    let gw = gateway(&upstream).await;
    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:clusters?node=n").await;
    assert_eq!(status, 200, "{body}");

    let port = gw.rest_port;
    let runtime =
        tokio::spawn(async move { poll(port, "/v3/discovery:runtime?node=n&names=rt").await });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let endpoints =
        tokio::spawn(async move { poll(port, "/v3/discovery:endpoints?node=n&names=a").await });
    let (status, _, body) = runtime.await.expect("runtime poll");
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("Runtime"), "{body}");
    let (status, _, body) = endpoints.await.expect("endpoints poll");
    assert_ne!(status, 502, "endpoints were blamed: {body}");

    upstream.set(EDS, "e1", vec![assignment("a", 1)]);
    let served = process::eventually(
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async {
            let (status, _, body) =
                poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=a").await;
            assert_ne!(status, 502, "endpoints set aside: {body}");
            (status == 200).then_some(())
        },
    )
    .await;
    assert!(served.is_some(), "endpoints never served");
    gw.stop().await;
}

/// Issue 54, finding 8: a type the upstream served and now refuses by
/// ending every stream that asks for it (a name it refuses does the same
/// to its type). The shared stream is ended once with it, then carries the
/// node's other types without it and stays up; the refused type retries on
/// a stream of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_refused_after_it_was_served_leaves_the_shared_stream() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "e1", vec![assignment("a", 1)]);
    let gw = gateway(&upstream).await;
    fleet_served(&gw, &upstream).await;

    upstream.end_streams_asked_for(EDS);
    let before = upstream.streams_opened();
    upstream.break_streams();
    // The refused type keeps trying (with backoff): three more streams ask
    // for it.
    let retried = process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let retries = streams_asking(&upstream, EDS)
                .into_iter()
                .filter(|s| *s > before)
                .count();
            (retries >= 4).then_some(())
        },
    )
    .await;
    assert!(retried.is_some(), "endpoints were not retried");
    let with_clusters: Vec<usize> = streams_asking(&upstream, CDS)
        .into_iter()
        .filter(|s| *s > before)
        .collect();
    assert!(
        with_clusters.len() <= 2,
        "the shared stream looped with the refused type: clusters asked on {with_clusters:?}"
    );
    // A change of clusters reaches the node on its stream that stays up.
    upstream.set(
        CDS,
        "c2",
        vec![fake_ads::named_cluster("a"), fake_ads::named_cluster("b")],
    );
    let changed = process::eventually(
        Duration::from_secs(2),
        Duration::from_millis(20),
        || async {
            let (status, _, body) = poll(gw.rest_port, "/v3/discovery:clusters?node=n").await;
            (status == 200 && at_version(&body, "c2")).then_some(())
        },
    )
    .await;
    assert!(changed.is_some(), "the cluster change did not reach n");
    gw.stop().await;
}

/// Issue 54, findings 1 and 4 together, for a bounded while (about 6 s):
/// another client of the fleet's node polls a refused type every 1.5 s (each a
/// type it did not ask before, so each reaches the upstream, as each type
/// does again when its set-aside runs out) while the fleet polls clusters
/// and endpoints every 100 ms. Every fleet poll is a `200` not marked
/// stale, a change reaches the fleet within 2 s, and the fleet's stream is
/// never reset. Left out: the minute-long repetition of one type as its
/// set-aside runs out (30 s, doubling), failover (another test), delta
/// streams (the scripted server ends SotW streams only), and a refused
/// type of the four presumed served (the finding-8 test above covers how
/// that one is taken off the shared stream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stays_fresh_while_another_client_polls_refused_types() {
    // Types an ADS server may lack (listeners, routes, clusters and
    // endpoints are presumed served: see `docs/production.md`).
    const REFUSED: [ResourceType; 4] = [
        ResourceType::Runtime,
        ResourceType::ScopedRoutes,
        ResourceType::Secrets,
        ResourceType::ExtensionConfigs,
    ];
    let upstream = FakeAds::start().await;
    for kind in REFUSED {
        upstream.end_streams_asked_for(kind.type_url());
    }
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "e1", vec![assignment("a", 1)]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        allow_secrets: true,
        ..Config::default()
    })
    .await;
    fleet_served(&gw, &upstream).await;
    let opened = upstream.streams_opened();

    let port = gw.rest_port;
    let attacker = tokio::spawn(async move {
        let mut answers = Vec::new();
        for kind in REFUSED {
            let suffix = xds_gateway::xds::Endpoint::Discovery(kind).path();
            let (status, _, body) = poll(port, &format!("{suffix}?node=n&names=x")).await;
            answers.push((kind, status, body));
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        answers
    });
    let mut polls = 0;
    let mut changed_at = None;
    let started = std::time::Instant::now();
    while !attacker.is_finished() {
        for path in [
            "/v3/discovery:clusters?node=n",
            "/v3/discovery:endpoints?node=n&names=a",
        ] {
            let (status, stale, body) = poll(port, path).await;
            polls += 1;
            assert_eq!(
                (status, stale),
                (200, false),
                "{path} after {:?}: {body}",
                started.elapsed()
            );
            if changed_at.is_some() && at_version(&body, "c2") {
                let waited = changed_at.take().map(|at: std::time::Instant| at.elapsed());
                assert!(
                    waited.is_some_and(|w| w < Duration::from_secs(2)),
                    "{waited:?}"
                );
            }
        }
        if polls == 40 {
            upstream.set(
                CDS,
                "c2",
                vec![fake_ads::named_cluster("a"), fake_ads::named_cluster("b")],
            );
            changed_at = Some(std::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(changed_at.is_none(), "the change never reached the fleet");
    for (kind, status, body) in attacker.await.expect("attacker") {
        assert_eq!(status, 502, "{kind}: {body}");
    }
    let asked_again = streams_asking_after(&upstream, CDS, opened);
    assert!(
        asked_again.is_empty(),
        "the fleet's stream was reset: {asked_again:?}"
    );
    eprintln!("{polls} fleet polls, all fresh, in {:?}", started.elapsed());
    gw.stop().await;
}

/// A name the upstream refuses (it ends every stream that asks for it) is
/// found and set aside alone: a client polls it together with a good name
/// the upstream serves. The good name is served, the refused one gets a
/// `502` naming it (and again at once on the next poll, with no stream
/// opened for it), the fleet's endpoints stay served on a stream that no
/// longer ends, and nothing loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_name_is_set_aside_alone_and_its_type_keeps_serving() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(
        EDS,
        "e1",
        vec![assignment("a", 1), assignment("b", 2), assignment("bad", 3)],
    );
    upstream.end_streams_naming("bad");
    let gw = gateway(&upstream).await;
    fleet_served(&gw, &upstream).await;

    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=bad,b").await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("bad") && body.contains("PermissionDenied"),
        "{body}"
    );
    // The good name asked with it was not blamed.
    let served = process::eventually(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || async {
            let (status, stale, body) =
                poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=b").await;
            (status == 200 && !stale && body.contains("\"clusterName\":\"b\"")).then_some(())
        },
    )
    .await;
    assert!(served.is_some(), "b was not served");
    // Set aside: the next poll of it is refused at once, nothing asked.
    let opened = upstream.streams_opened();
    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=bad").await;
    assert_eq!(status, 502, "{body}");
    // The fleet keeps fresh answers, and the stream stays up.
    for _ in 0..20 {
        let (status, stale, body) =
            poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=a").await;
        assert!(status == 200 && !stale, "{status} stale={stale}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(upstream.streams_opened(), opened, "streams kept opening");
    // `/readyz` names it, as it names a type set aside.
    let (_, ready) = process::http_get(gw.admin_port, "/readyz")
        .await
        .expect("readyz");
    assert!(
        ready.contains("\\\"bad\\\" of") && ready.contains("set aside"),
        "{ready}"
    );
    gw.stop().await;
}

/// The same before the type's first answer on the node: a refused name in
/// the node's first poll of endpoints is set aside alone, not the type, so
/// the node's next poll of other endpoints is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_name_in_a_types_first_poll_does_not_set_the_type_aside() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "e1", vec![assignment("a", 1), assignment("bad", 3)]);
    upstream.end_streams_naming("bad");
    let gw = gateway(&upstream).await;
    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:clusters?node=m").await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=m&names=bad").await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("bad") && body.contains("not served for this node"),
        "the name is named: {body}"
    );
    let (status, stale, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=m&names=a").await;
    assert!(
        status == 200 && body.contains("\"clusterName\":\"a\""),
        "{status}: {body}"
    );
    assert!(!stale, "{body}");
    gw.stop().await;
}

/// A name held apart while the gateway checks it alone is not answered as
/// if the upstream had answered the rest: a poll naming it, even one
/// whose names were first asked long enough ago to need no wait, waits
/// for the check (here, its refusal: a 502 naming it) instead of taking
/// the state without it as a fresh 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_naming_a_name_being_checked_waits_for_the_check() {
    let upstream = FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "e1", vec![assignment("a", 1), assignment("bad", 3)]);
    // Each stream naming it ends two seconds after its request: the first
    // poll's name is settled (first asked 2 s ago) while it is checked.
    upstream.end_streams_naming_after("bad", Duration::from_secs(2));
    // The check asks the control name first, which this upstream does not
    // answer: that takes the check's 5 s of silence, then 2 s for the
    // name. A poll waits for the check as for a first answer, up to
    // --first-response-timeout.
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        first_response_timeout: Duration::from_secs(15),
        ..Config::default()
    })
    .await;
    let (status, _, body) = poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=a").await;
    assert_eq!(status, 200, "{body}");
    let first = tokio::spawn(poll(
        gw.rest_port,
        "/v3/discovery:endpoints?node=n&names=bad",
    ));
    // The check: a stream asking the name alone, beside the control name.
    let checking = process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(10),
        || async {
            upstream
                .requests()
                .iter()
                .any(|r| r.names.iter().any(|n| n.contains("name-check")))
                .then_some(())
        },
    )
    .await;
    assert!(checking.is_some(), "the name was never checked alone");
    let (status, stale, body) =
        poll(gw.rest_port, "/v3/discovery:endpoints?node=n&names=bad").await;
    assert!(
        !(status == 200 && !stale && !body.contains("\"clusterName\":\"bad\"")),
        "a fresh answer without the name being checked: {status} {body}"
    );
    assert_eq!(status, 502, "{body}");
    let (status, _, body) = first.await.expect("the first poll");
    assert_eq!(status, 502, "{body}");
    gw.stop().await;
}
