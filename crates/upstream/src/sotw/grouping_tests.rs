//! SotW grouping per type (xDS transport protocol, "Grouping Resources into
//! Responses"): a Listener or Cluster response is the type's complete state;
//! a response of any other type updates the resources it names and keeps the
//! rest, as Envoy's own SotW client does for RDS and EDS, and as Istio relies
//! on (only the added route configuration when an RDS subscription grows,
//! only the changed services on an incremental EDS push).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};

use super::super::connection::unused_context;
use super::super::wire::SotwResponse;
use super::*;
use crate::cache::Names;
use crate::store::Publisher;

/// A SotW protocol over a fresh session, and its command queue (kept open).
fn sotw() -> (
    Sotw,
    tokio::sync::mpsc::UnboundedReceiver<crate::store::Command>,
) {
    let (session, commands) = Publisher::new(crate::store::SessionNode::default());
    let namespace = Namespace::new(BTreeMap::new(), "test", "test");
    (Sotw::new(unused_context(), session, namespace), commands)
}

fn any<M: Message + Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

fn route(name: &str) -> Any {
    any(&RouteConfiguration {
        name: name.into(),
        ..Default::default()
    })
}

/// An assignment whose content says `tag`, so that a change shows.
fn assignment(name: &str, tag: u32) -> Any {
    any(&ClusterLoadAssignment {
        cluster_name: name.into(),
        policy: Some(
            envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::Policy {
                overprovisioning_factor: Some(envoy_types::pb::google::protobuf::UInt32Value {
                    value: tag,
                }),
                ..Default::default()
            },
        ),
        ..Default::default()
    })
}

fn cluster(name: &str) -> Any {
    any(&Cluster {
        name: name.into(),
        ..Default::default()
    })
}

fn listener(name: &str) -> Any {
    any(&Listener {
        name: name.into(),
        ..Default::default()
    })
}

impl Sotw {
    /// The session's clients ask for `names` of `kind`, and the stream sends
    /// the subscription.
    fn ask(&mut self, kind: ResourceType, names: &[&str]) {
        let names = match names {
            [] => Names::Wildcard,
            names => Names::Named(names.iter().map(|n| n.to_string()).collect()),
        };
        self.session
            .subscribe(kind, &names, 100)
            .unwrap_or_else(|e| panic!("{e:?}"));
        self.subscribe(kind);
    }

    /// The upstream answers `kind` at `version` with `resources`; returns
    /// the names the session then holds.
    async fn answered(
        &mut self,
        kind: ResourceType,
        version: &str,
        resources: &[Any],
    ) -> Vec<String> {
        let nonce = format!("n-{version}");
        let response = DiscoveryResponse {
            version_info: version.into(),
            resources: resources.to_vec(),
            type_url: kind.type_url().into(),
            nonce: nonce.clone(),
            ..Default::default()
        };
        let frame = Bytes::from(response.encode_to_vec());
        let response = SotwResponse::parse(frame).unwrap_or_else(|e| panic!("{e}"));
        let ack = self.response(kind, response).await.unwrap();
        let ack = ack.request();
        assert!(ack.error_detail.is_none(), "NACKed: {:?}", ack.error_detail);
        assert_eq!(ack.response_nonce, nonce);
        self.held(kind)
    }

    fn held(&self, kind: ResourceType) -> Vec<String> {
        self.session
            .state(kind)
            .map(|state| state.resources.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The payload held under `name`.
    fn payload(&self, kind: ResourceType, name: &str) -> Vec<u8> {
        let state = self.session.state(kind).expect("a state");
        let resource = state.resources.get(name).expect("held");
        resource.payload.to_vec()
    }
}

fn names(names: &[&str]) -> Vec<String> {
    let set: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    set.into_iter().collect()
}

/// Istio, when an RDS subscription grows, sends only the added route
/// configurations: the one asked for before stays.
#[tokio::test]
async fn partial_routes_response_keeps_other_route_configurations() {
    let kind = ResourceType::Routes;
    let (mut sotw, _commands) = sotw();
    sotw.ask(kind, &["9080"]);
    assert_eq!(
        sotw.answered(kind, "1", &[route("9080")]).await,
        names(&["9080"])
    );
    sotw.ask(kind, &["80", "8000"]);
    assert_eq!(
        sotw.answered(kind, "2", &[route("80"), route("8000")])
            .await,
        names(&["80", "8000", "9080"]),
        "a response naming only the added route configurations keeps 9080"
    );
}

/// An incremental EDS push carries only the changed service: the others
/// stay, the changed one is replaced. Named and wildcard subscriptions alike.
#[tokio::test]
async fn partial_endpoints_response_keeps_other_assignments() {
    let kind = ResourceType::Endpoints;
    for wildcard in [false, true] {
        let (mut sotw, _commands) = sotw();
        let asked: &[&str] = if wildcard { &[] } else { &["a", "b", "c"] };
        sotw.ask(kind, asked);
        let all = [assignment("a", 1), assignment("b", 1), assignment("c", 1)];
        assert_eq!(
            sotw.answered(kind, "1", &all).await,
            names(&["a", "b", "c"])
        );
        assert_eq!(
            sotw.answered(kind, "2", &[assignment("b", 2)]).await,
            names(&["a", "b", "c"]),
            "wildcard {wildcard}: a push of b alone keeps a and c"
        );
        assert_eq!(
            sotw.payload(kind, "b"),
            assignment("b", 2).value,
            "b changed"
        );
        assert_eq!(
            sotw.payload(kind, "a"),
            assignment("a", 1).value,
            "a stands"
        );
    }
}

/// Listener and Cluster responses are the complete state: what one leaves
/// out is gone.
#[tokio::test]
async fn listener_and_cluster_responses_replace_the_whole_state() {
    let (mut sotw, _commands) = sotw();
    let kind = ResourceType::Clusters;
    sotw.ask(kind, &[]);
    assert_eq!(
        sotw.answered(kind, "1", &[cluster("a"), cluster("b")])
            .await,
        names(&["a", "b"])
    );
    assert_eq!(
        sotw.answered(kind, "2", &[cluster("a")]).await,
        names(&["a"])
    );
    assert_eq!(
        sotw.answered(kind, "3", &[]).await,
        Vec::<String>::new(),
        "an empty response removes all"
    );
    let kind = ResourceType::Listeners;
    sotw.ask(kind, &[]);
    assert_eq!(
        sotw.answered(kind, "1", &[listener("l1"), listener("l2")])
            .await,
        names(&["l1", "l2"])
    );
    assert_eq!(
        sotw.answered(kind, "2", &[listener("l2")]).await,
        names(&["l2"])
    );
}

/// A name no client wants any more leaves the state when the narrower
/// subscription is sent (a SotW server never says a route configuration or
/// an assignment was removed, and need not answer a subscription that only
/// shrank); an empty response removes nothing.
#[tokio::test(start_paused = true)]
async fn unsubscribed_names_leave_a_partial_state() {
    let kind = ResourceType::Endpoints;
    let (mut sotw, _commands) = sotw();
    sotw.ask(kind, &["a", "b"]);
    assert_eq!(
        sotw.answered(kind, "1", &[assignment("a", 1), assignment("b", 1)])
            .await,
        names(&["a", "b"])
    );
    assert_eq!(
        sotw.answered(kind, "2", &[]).await,
        names(&["a", "b"]),
        "an empty response of a type grouped incrementally is a no-op"
    );
    tokio::time::advance(Duration::from_secs(60)).await;
    sotw.ask(kind, &["a"]);
    sotw.session
        .sweep_names(Instant::now(), Duration::from_secs(30));
    assert_eq!(
        sotw.session.subscription(kind).map(|c| c.names.len()),
        Some(1)
    );
    sotw.subscribe(kind);
    assert_eq!(
        sotw.held(kind),
        names(&["a"]),
        "b left with its subscription"
    );
    let state = sotw.session.state(kind).expect("state");
    assert!(
        !state.coverage.names.contains("b"),
        "nor is b covered: {:?}",
        state.coverage
    );
}

/// The first response of an upstream switched to replaces the state: it
/// knows nothing of what the last upstream sent.
#[tokio::test]
async fn a_switched_upstream_replaces_a_partial_state() {
    let kind = ResourceType::Routes;
    let (mut sotw, _commands) = sotw();
    sotw.ask(kind, &["r1", "r2"]);
    assert_eq!(
        sotw.answered(kind, "p1", &[route("r1"), route("r2")]).await,
        names(&["r1", "r2"])
    );
    sotw.switch_upstream();
    sotw.reset_stream();
    sotw.subscribe(kind);
    assert_eq!(
        sotw.answered(kind, "b1", &[route("r1")]).await,
        names(&["r1"])
    );
    assert_eq!(
        sotw.answered(kind, "b2", &[route("r2")]).await,
        names(&["r1", "r2"]),
        "then it merges again"
    );
}

/// TTL heartbeats need "a version matching the most recently sent
/// version": a wrapper without a resource in a response of the version
/// held refreshes it; in a response of a new version it is no heartbeat,
/// and the response is NACKed.
#[tokio::test]
async fn a_heartbeat_of_a_new_version_is_refused() {
    use envoy_types::pb::envoy::service::discovery::v3::Resource as Wrapper;
    let (mut sotw, _commands) = sotw();
    let kind = ResourceType::Endpoints;
    sotw.ask(kind, &["a"]);
    assert_eq!(
        sotw.answered(kind, "v1", &[assignment("a", 1)]).await,
        ["a"]
    );
    let heartbeat = any(&Wrapper {
        name: "a".into(),
        ttl: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 30,
            nanos: 0,
        }),
        ..Default::default()
    });
    assert_eq!(
        sotw.answered(kind, "v1", std::slice::from_ref(&heartbeat))
            .await,
        ["a"],
        "a heartbeat at the version held keeps the resource"
    );
    let response = DiscoveryResponse {
        version_info: "v2".into(),
        resources: vec![heartbeat],
        type_url: kind.type_url().into(),
        nonce: "n-v2".into(),
        ..Default::default()
    };
    let frame = Bytes::from(response.encode_to_vec());
    let response = SotwResponse::parse(frame).unwrap_or_else(|e| panic!("{e}"));
    let nack = sotw.response(kind, response).await.unwrap();
    let nack = nack.request();
    assert!(
        nack.error_detail.is_some(),
        "a heartbeat of a new version: {nack:?}"
    );
    assert_eq!(nack.response_nonce, "n-v2");
    assert_eq!(sotw.held(kind), ["a"], "what was held stays");
}
