//! Rejection tracking behind a balancer: twenty pods of one
//! Deployment (one node id) polling through one proxy's address, a change
//! rolled out while five of them lag for a few rounds. Through a trusted
//! proxy that names no client, none of it is taken for a rejection (no
//! suspicion, no NACK); named by `X-Forwarded-For`, each pod catches up on
//! its own; either way one client the proxy names that re-presents the old
//! version is still caught and NACKed. Without `--trusted-proxies` the same
//! rollout is taken for a rejection: what the flag is for. And a peer that
//! is not a trusted proxy cannot name another client. The order of each
//! round's polls is shuffled with a fresh seed, printed (`XDS_ROLLOUT_SEED`
//! replays one).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use rand::seq::SliceRandom;
use serde_json::json;

use super::poll::{cluster, metric, nacks, send, Reply};
use super::scripted;
use crate::config::{Config, TrustedProxies};
use crate::serve::RemoteAddr;
use crate::store::Command;
use crate::store::Script;
use crate::xds::{Endpoint, ResourceType};

const CDS: ResourceType = ResourceType::Clusters;
const SUSPECTED: &str = "xds_gateway_suspected_rejections_total";
/// The balancer every pod's request comes through.
const BALANCER: [u8; 4] = [127, 0, 0, 1];
const PODS: usize = 20;
const LAGGARDS: usize = 5;
/// Rounds the laggards sit out after the change.
const LAG_ROUNDS: usize = 3;
/// The one that rejects, named by the balancer.
const REJECTER: &str = "10.9.9.9";

/// One client: what its balancer says of it, and the version it holds.
struct Client {
    forwarded_for: Option<String>,
    held: String,
}

/// A poll of CDS by an Envoy of node `pods`, from `peer`, presenting
/// `version`, with `X-Forwarded-For: forwarded_for` if given.
async fn poll_via(
    gw: &Arc<super::Gateway>,
    peer: [u8; 4],
    forwarded_for: Option<&str>,
    version: &str,
) -> Reply {
    let body = json!({"node": {"id": "pods", "user_agent_name": "envoy"}, "version_info": version});
    let mut request =
        Request::post(Endpoint::Discovery(CDS).path()).header("content-type", "application/json");
    if let Some(client) = forwarded_for {
        request = request.header("x-forwarded-for", client);
    }
    let mut request = request.body(Body::from(body.to_string())).unwrap();
    request
        .extensions_mut()
        .insert(RemoteAddr(std::net::SocketAddr::from((peer, 40_000))));
    send(gw, request).await
}

impl Client {
    /// Polls once; keeps what a body carries (it applies every update).
    async fn poll(&mut self, gw: &Arc<super::Gateway>) {
        let reply = poll_via(gw, BALANCER, self.forwarded_for.as_deref(), &self.held).await;
        match reply.status {
            StatusCode::OK => self.held = reply.version().to_owned(),
            StatusCode::NOT_MODIFIED => {}
            other => panic!("a poll answered {other}"),
        }
    }
}

/// A gateway forwarding rejections (after 3 polls), trusting `trusted` as
/// proxies, with CDS at `v1`; twenty pods (named by the balancer when
/// `named`) and the rejecter, all in step at v1.
async fn fleet(
    trusted: Option<&str>,
    named: bool,
) -> (Arc<super::Gateway>, Arc<Script>, Vec<Client>, Client) {
    let config = Config {
        forward_rejections: true,
        rejection_threshold: 3,
        trusted_proxies: trusted.map(|t| TrustedProxies::parse(&[t.to_owned()]).unwrap()),
        ..Config::default()
    };
    let (gw, script) = scripted(config);
    script.set(CDS, "v1", &[cluster("a")]).await;
    let mut pods: Vec<Client> = (0..PODS)
        .map(|i| Client {
            forwarded_for: named.then(|| format!("10.1.0.{i}")),
            held: String::new(),
        })
        .collect();
    let mut rejecter = Client {
        forwarded_for: Some(REJECTER.to_owned()),
        held: String::new(),
    };
    for _ in 0..2 {
        for pod in &mut pods {
            pod.poll(&gw).await;
        }
        rejecter.poll(&gw).await;
    }
    assert!(pods.iter().all(|p| p.held.starts_with("v1~")));
    (gw, script, pods, rejecter)
}

/// Sets CDS `v2` and rolls it out: every round each pod polls once, in a
/// shuffled order, except the laggards for the first rounds.
async fn roll_out(gw: &Arc<super::Gateway>, script: &Script, pods: &mut [Client]) {
    let (seed, mut rng) = crate::fuzz::seeded_rng("XDS_ROLLOUT_SEED", "rollout order");
    script.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
    let mut order: Vec<usize> = (0..PODS).collect();
    for round in 0..LAG_ROUNDS + 2 {
        order.shuffle(&mut rng);
        for &i in &order {
            let lagging = i < LAGGARDS && round < LAG_ROUNDS;
            if !lagging {
                pods[i].poll(gw).await;
            }
        }
    }
    assert!(
        pods.iter().all(|p| p.held.starts_with("v2~")),
        "seed {seed}: every pod applied v2"
    );
}

/// The rejecter, served v2, re-presents v1 as an Envoy that rejected it does.
async fn reject(gw: &Arc<super::Gateway>, rejecter: &Client) {
    for _ in 0..4 {
        let reply = poll_via(
            gw,
            BALANCER,
            rejecter.forwarded_for.as_deref(),
            &rejecter.held,
        )
        .await;
        assert_eq!(reply.upstream(), "v2");
    }
}

#[tokio::test(start_paused = true)]
async fn pods_behind_a_proxy_that_names_no_client_are_not_taken_for_a_rejection() {
    let (gw, script, mut pods, rejecter) = fleet(Some("127.0.0.1"), false).await;
    roll_out(&gw, &script, &mut pods).await;
    assert_eq!(metric(&gw, SUSPECTED), 0.0);
    assert!(nacks(&script).await.is_empty());
    // One client the balancer names still has its rejection seen, once.
    reject(&gw, &rejecter).await;
    assert_eq!(metric(&gw, SUSPECTED), 1.0);
    let nacks = nacks(&script).await;
    let [Command::Nack { presented, .. }] = nacks.as_slice() else {
        panic!("one NACK expected: {nacks:?}");
    };
    assert_eq!(presented, "v1");
}

#[tokio::test(start_paused = true)]
async fn pods_the_proxy_names_catch_up_apart_and_a_rejection_among_them_is_seen() {
    let (gw, script, mut pods, rejecter) = fleet(Some("127.0.0.0/8"), true).await;
    roll_out(&gw, &script, &mut pods).await;
    assert_eq!(metric(&gw, SUSPECTED), 0.0);
    assert!(nacks(&script).await.is_empty());
    reject(&gw, &rejecter).await;
    assert_eq!(metric(&gw, SUSPECTED), 1.0);
    assert_eq!(nacks(&script).await.len(), 1);
    // The client view lists each pod under the address the balancer named.
    // As /debug/clients serves it.
    let view = serde_json::to_value(gw.clients().view()).unwrap();
    let remotes: Vec<&str> = view["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["remote"].as_str())
        .collect();
    assert_eq!(remotes.len(), PODS + 1, "{view}");
    assert!(
        remotes.contains(&"10.1.0.7") && remotes.contains(&REJECTER),
        "{view}"
    );
}

/// The hazard the flag removes: every pod at the balancer's address is
/// one client to the tracker. The fleet's first start (each pod presenting
/// no version once) is that Envoy rejecting v1, and the rollout's first
/// round alone is it presenting v1 again and again after v2 was served.
#[tokio::test(start_paused = true)]
async fn without_trusted_proxies_the_same_rollout_is_taken_for_a_rejection() {
    let (gw, script, mut pods, _) = fleet(None, false).await;
    let at_start = (metric(&gw, SUSPECTED), nacks(&script).await.len());
    assert_eq!(at_start, (1.0, 1), "the first start");
    roll_out(&gw, &script, &mut pods).await;
    assert_eq!(metric(&gw, SUSPECTED), 2.0, "the rollout");
    assert_eq!(nacks(&script).await.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_is_not_a_trusted_proxy_cannot_name_another_client() {
    let (gw, script) = scripted(Config {
        trusted_proxies: Some(TrustedProxies::parse(&["127.0.0.2".to_owned()]).unwrap()),
        ..Config::default()
    });
    script.set(CDS, "v1", &[cluster("a")]).await;
    poll_via(&gw, [127, 0, 0, 1], Some("10.0.0.1"), "").await;
    poll_via(&gw, [127, 0, 0, 2], Some("10.0.0.2"), "").await;
    // As /debug/clients serves it.
    let view = serde_json::to_value(gw.clients().view()).unwrap();
    let mut remotes: Vec<&str> = view["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["remote"].as_str())
        .collect();
    remotes.sort_unstable();
    assert_eq!(remotes, ["10.0.0.2", "127.0.0.1"], "{view}");
}
