//! Make-before-break for REST clients (`--make-before-break`), against the
//! in-process scripted control plane: a client polling each type on its
//! own, as a REST Envoy does, is not served a route configuration naming a
//! cluster before its own CDS poll brought that cluster and, for an EDS
//! cluster, its EDS poll brought the endpoints. Also: a long poll held
//! back is answered as soon as they are served; a version held back for
//! the whole limit is served and counted; a cluster the control plane does
//! not serve is not waited for; a first poll (no version) is never held
//! back; and with the flag off nothing is held back.
//!
//! What it leaves out: a real Envoy's traffic during the change
//! (`tests/make_before_break_envoy.rs` sends it), listeners (the same rule,
//! unit-tested in `crates/xds/src/references.rs`), and the federation and fetch
//! sources, which do not know a node's clusters.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::{
    route, route_action, route_match, Route, RouteAction, RouteConfiguration, RouteMatch,
    VirtualHost,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Name;
use serde_json::Value;
use xds_gateway::config::Config;

use fake_ads::FakeAds;
use inproc::InProcess;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const WITHHELD: &str = "xds_gateway_withheld_answers_total{type=\"routes\"}";
const OVERDUE: &str = "xds_gateway_withheld_overdue_total{type=\"routes\"}";

fn any<M: Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

/// A cluster taking its endpoints over EDS.
fn eds_cluster(name: &str) -> Any {
    any(&Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        ..Default::default()
    })
}

fn endpoints(name: &str) -> Any {
    any(&ClusterLoadAssignment {
        cluster_name: name.into(),
        ..Default::default()
    })
}

/// The route configuration `r`: every request to `cluster`.
fn routes_to(cluster: &str) -> Any {
    any(&RouteConfiguration {
        name: "r".into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                    ..Default::default()
                }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                        cluster.into(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// One client's polls: node `n`, from 127.0.0.1, each type on its own.
struct Client {
    port: u16,
}

/// A poll's status and, for a 200, its version and body.
struct Polled {
    status: u16,
    version: String,
    body: String,
}

impl Client {
    async fn poll(&self, path: &str, names: &str, version: &str) -> Polled {
        self.poll_waiting(path, names, version, "").await
    }

    async fn poll_waiting(&self, path: &str, names: &str, version: &str, wait: &str) -> Polled {
        let mut target = format!("/v3/discovery:{path}?node=n&version={version}");
        if !names.is_empty() {
            target.push_str(&format!("&names={names}"));
        }
        if !wait.is_empty() {
            target.push_str(&format!("&wait={wait}"));
        }
        let (status, _, body) = tokio::time::timeout(
            Duration::from_secs(30),
            process::http_exchange(
                self.port,
                http::Method::GET,
                &target,
                &[],
                bytes::Bytes::new(),
            ),
        )
        .await
        .expect("an answer within 30 s")
        .expect("an HTTP exchange");
        let body = String::from_utf8_lossy(&body).into_owned();
        let version = match status {
            200 => {
                let json: Value = serde_json::from_str(&body).expect("a JSON body");
                json["versionInfo"].as_str().expect("a version").to_owned()
            }
            _ => version.to_owned(),
        };
        Polled {
            status,
            version,
            body,
        }
    }
}

async fn metric(gateway: &InProcess, series: &str) -> f64 {
    let (status, text) = process::http_get(gateway.admin_port, "/metrics")
        .await
        .expect("metrics");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

async fn start(upstream: &FakeAds, limit: Duration) -> InProcess {
    InProcess::start(Config {
        upstream: Some(upstream.url()),
        make_before_break: limit,
        ..Config::default()
    })
    .await
}

/// A gateway in front of a scripted control plane, holding back for at
/// most `limit`, and its client at what [`first_state`] gives it (the
/// versions of its clusters and routes).
async fn started(limit: Duration) -> (FakeAds, InProcess, Client, (String, String)) {
    let upstream = FakeAds::start().await;
    let gateway = start(&upstream, limit).await;
    let client = Client {
        port: gateway.rest_port,
    };
    let versions = first_state(&upstream, &client).await;
    (upstream, gateway, client, versions)
}

/// The control plane adds the EDS cluster `b`, its endpoints and the
/// routes to it, all at once.
fn add_b(upstream: &FakeAds) {
    upstream.set(CDS, "2", vec![eds_cluster("a"), eds_cluster("b")]);
    upstream.set(EDS, "2", vec![endpoints("a"), endpoints("b")]);
    upstream.set(RDS, "2", vec![routes_to("b")]);
}

/// The client's routes poll presenting `version`, once it is a 200.
async fn routes_served(client: &Client, version: &str, what: &str) -> Polled {
    process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let polled = client.poll("routes", "r", version).await;
            (polled.status == 200).then_some(polled)
        },
    )
    .await
    .unwrap_or_else(|| panic!("{what}"))
}

/// Waits until a GET of `path` (the type) naming `names` as node `node`
/// holds `needle`: the gateway holds that version.
async fn until_served(port: u16, node: &str, path: &str, names: &str, needle: &str) {
    let target = format!("/v3/discovery:{path}?node={node}&names={names}");
    process::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async {
            let (_, _, body) =
                process::http_exchange(port, http::Method::GET, &target, &[], bytes::Bytes::new())
                    .await
                    .ok()?;
            String::from_utf8_lossy(&body)
                .contains(needle)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|| panic!("{target} never held {needle}"));
}

/// What the client holds: clusters, the endpoints of `a`, routes to `a`.
async fn first_state(upstream: &FakeAds, client: &Client) -> (String, String) {
    upstream.set(CDS, "1", vec![eds_cluster("a")]);
    upstream.set(EDS, "1", vec![endpoints("a")]);
    upstream.set(RDS, "1", vec![routes_to("a")]);
    let clusters = client.poll("clusters", "", "").await;
    assert_eq!(clusters.status, 200, "{}", clusters.body);
    assert_eq!(client.poll("endpoints", "a", "").await.status, 200);
    // A first poll is never held back, whatever it names.
    let routes = client.poll("routes", "r", "").await;
    assert_eq!(routes.status, 200, "{}", routes.body);
    (clusters.version, routes.version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_to_a_new_cluster_waits_until_the_cluster_and_its_endpoints_were_served() {
    let (upstream, gateway, client, (_, routes_v1)) = started(Duration::from_secs(60)).await;
    add_b(&upstream);
    // Polled first, the routes are held back: the client lacks `b`.
    let polled = process::eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let client = &client;
        let routes_v1 = routes_v1.clone();
        async move {
            let clusters = client.poll("clusters", "", "").await;
            // Until the gateway has version 2 of the clusters, nothing moved.
            (clusters.body.contains("\"b\"")).then_some(())?;
            Some(client.poll("routes", "r", &routes_v1).await)
        }
    });
    // (The poll above brought `b`; the endpoints of `b` are still missing.)
    let held = polled.await.expect("version 2 of the clusters");
    assert_eq!(held.status, 304, "held back: {}", held.body);
    assert!(metric(&gateway, WITHHELD).await >= 1.0);

    // The endpoints of `b` come: the routes go out at once.
    let endpoints_b = client.poll("endpoints", "b", "").await;
    assert_eq!(endpoints_b.status, 200);
    assert!(endpoints_b.body.contains("\"b\""), "{}", endpoints_b.body);
    let routes = client.poll("routes", "r", &routes_v1).await;
    assert_eq!(routes.status, 200, "{}", routes.body);
    assert!(routes.body.contains("\"cluster\":\"b\""), "{}", routes.body);
    assert_eq!(metric(&gateway, OVERDUE).await, 0.0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_its_clusters_poll_the_routes_are_held_and_a_long_poll_ends_when_they_come() {
    let (upstream, gateway, client, (clusters_v1, routes_v1)) =
        started(Duration::from_secs(60)).await;
    add_b(&upstream);
    // The gateway holds version 2 of the routes and clusters (another
    // node's GETs see it), without this client polling anything.
    until_served(
        gateway.rest_port,
        "other",
        "routes",
        "r",
        "\"cluster\":\"b\"",
    )
    .await;
    until_served(gateway.rest_port, "other", "clusters", "", "\"b\"").await;

    // The routes are held back, even though they changed.
    assert_eq!(client.poll("routes", "r", &routes_v1).await.status, 304);
    // A long poll is held until the client was served `b` and its endpoints.
    let started = Instant::now();
    let long_poll = {
        let client = Client {
            port: gateway.rest_port,
        };
        let routes_v1 = routes_v1.clone();
        tokio::spawn(async move {
            let polled = client.poll_waiting("routes", "r", &routes_v1, "20s").await;
            (polled, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !long_poll.is_finished(),
        "answered before the clusters went out"
    );
    let clusters = client.poll("clusters", "", &clusters_v1).await;
    assert!(clusters.body.contains("\"b\""), "{}", clusters.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !long_poll.is_finished(),
        "answered before the endpoints went out"
    );
    let endpoints_at = started.elapsed();
    assert_eq!(client.poll("endpoints", "b", "").await.status, 200);
    let (polled, answered_at) = long_poll.await.expect("the long poll");
    assert_eq!(polled.status, 200, "{}", polled.body);
    assert!(polled.body.contains("\"cluster\":\"b\""), "{}", polled.body);
    assert!(
        answered_at >= endpoints_at,
        "{answered_at:?} < {endpoints_at:?}"
    );
    assert!(
        answered_at < endpoints_at + Duration::from_secs(5),
        "answered {:?} after the endpoints went out",
        answered_at - endpoints_at
    );
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_held_back_for_the_whole_limit_is_served_and_a_missing_cluster_is_not_waited_for()
{
    let limit = Duration::from_millis(1500);
    let (upstream, gateway, client, (_, routes_v1)) = started(limit).await;

    // A cluster the control plane does not serve cannot come: not waited for.
    upstream.set(RDS, "2", vec![routes_to("ghost")]);
    let routes = routes_served(&client, &routes_v1, "version 2 of the routes").await;
    assert!(routes.body.contains("ghost"), "{}", routes.body);
    assert_eq!(metric(&gateway, WITHHELD).await, 0.0);

    // A cluster this client never polls for: held back, then served.
    upstream.set(CDS, "3", vec![eds_cluster("a"), eds_cluster("never")]);
    upstream.set(RDS, "3", vec![routes_to("never")]);
    // Version 3 of the clusters reaches the gateway: this client's own CDS
    // poll sees it.
    until_served(gateway.rest_port, "n", "clusters", "", "never").await;
    // (That GET was this client's own CDS poll: it was served `never`, but
    // not its endpoints.)
    let started = Instant::now();
    let served = routes_served(
        &client,
        &routes.version,
        "version 3, once the limit ran out",
    )
    .await;
    assert!(served.body.contains("never"), "{}", served.body);
    assert!(started.elapsed() >= limit - Duration::from_millis(200));
    assert!(metric(&gateway, WITHHELD).await >= 1.0);
    assert_eq!(metric(&gateway, OVERDUE).await, 1.0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_a_route_to_a_new_cluster_is_served_at_once() {
    let (upstream, gateway, client, (_, routes_v1)) = started(Duration::ZERO).await;
    add_b(&upstream);
    let routes = routes_served(
        &client,
        &routes_v1,
        "version 2, though the client lacks `b`",
    )
    .await;
    assert!(routes.body.contains("\"cluster\":\"b\""), "{}", routes.body);
    assert_eq!(metric(&gateway, WITHHELD).await, 0.0);
    gateway.stop().await;
}
