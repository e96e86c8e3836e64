//! The poll path end to end, in process, against scripted sessions: 304
//! rules, long polls, the bounded first wait, fan-in, rejection tracking,
//! the stale mark and idle sessions. Time is paused (tokio's test clock), so
//! waits of seconds take microseconds.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;
use tower::ServiceExt;

use super::{scripted, scripted_inspected};
use crate::cache::Coverage;
use crate::config::Config;
use crate::http::present::STALE_HEADER;
use crate::http::{router, Gateway};
use crate::store::Command;
use crate::store::{idle, Script};
use crate::xds::{Endpoint, ResourceType};

const CDS: ResourceType = ResourceType::Clusters;
const EDS: ResourceType = ResourceType::Endpoints;

pub(super) struct Reply {
    pub(super) status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    /// The served version (`<upstream>~<digest>`).
    pub(super) fn version(&self) -> &str {
        self.body["versionInfo"].as_str().unwrap_or_default()
    }

    /// The upstream's part of the served version.
    pub(super) fn upstream(&self) -> &str {
        let version = self.version();
        version
            .rsplit_once('~')
            .map_or(version, |(upstream, _)| upstream)
    }

    fn names(&self) -> Vec<String> {
        self.body["resources"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|r| {
                        let name = r.get("name").or_else(|| r.get("clusterName"));
                        name.and_then(Value::as_str).unwrap_or_default().to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub(super) async fn send(gw: &Arc<Gateway>, request: Request<Body>) -> Reply {
    let response = router(gw.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
    }
}

/// `POST /v3/discovery:<kind>[?query]` for `node` presenting `version`.
async fn poll(
    gw: &Arc<Gateway>,
    kind: ResourceType,
    node: &str,
    version: &str,
    names: &[&str],
    query: &str,
) -> Reply {
    poll_as(gw, kind, json!({"id": node}), version, names, query).await
}

/// [`poll`] with a whole node (e.g. with `user_agent_name: envoy`).
async fn poll_as(
    gw: &Arc<Gateway>,
    kind: ResourceType,
    node: Value,
    version: &str,
    names: &[&str],
    query: &str,
) -> Reply {
    let body = json!({"node": node, "version_info": version, "resource_names": names});
    let path = format!("{}{query}", Endpoint::Discovery(kind).path());
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(gw, request).await
}

pub(super) fn cluster(name: &str) -> Value {
    json!({"@type": CDS.type_url(), "name": name, "connect_timeout": "1s"})
}

fn cla(name: &str) -> Value {
    json!({"@type": EDS.type_url(), "cluster_name": name})
}

fn covering(names: &[&str]) -> Coverage {
    Coverage {
        wildcard: false,
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

pub(super) fn metric(gw: &Gateway, name: &str) -> f64 {
    gw.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(start_paused = true)]
async fn a_body_once_then_304_for_the_names_and_version_served() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a"), cluster("b")]).await;
    let first = poll(&gw, CDS, "n1", "", &[], "").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        (first.upstream(), first.names()),
        ("v1", vec!["a".into(), "b".into()])
    );
    let v1 = first.version().to_owned();
    assert_eq!(first.headers["etag"], format!("\"{v1}\"").as_str());
    let same = poll(&gw, CDS, "n1", &v1, &[], "").await;
    assert_eq!(same.status, StatusCode::NOT_MODIFIED);
    assert_eq!(same.headers["etag"], format!("\"{v1}\"").as_str());
    // The upstream's version alone is not what was served.
    assert_eq!(
        poll(&gw, CDS, "n1", "v1", &[], "").await.status,
        StatusCode::OK
    );
    // An empty version never gets a 304 (Envoy's initial fetch waits for a body).
    assert_eq!(
        poll(&gw, CDS, "n1", "", &[], "").await.status,
        StatusCode::OK
    );
    // New names at the same upstream version: a body first, then 304.
    let named = poll(&gw, CDS, "n1", &v1, &["a"], "").await;
    assert_eq!(
        (named.status, named.names()),
        (StatusCode::OK, vec!["a".into()])
    );
    let va = named.version().to_owned();
    assert_eq!(
        poll(&gw, CDS, "n1", &va, &["a"], "").await.status,
        StatusCode::NOT_MODIFIED
    );
    // A new version is served on the next poll.
    script.set(CDS, "v2", &[cluster("a")]).await;
    let next = poll(&gw, CDS, "n1", &v1, &[], "").await;
    assert_eq!((next.status, next.upstream()), (StatusCode::OK, "v2"));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_is_held_until_a_change_or_its_wait() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a")]).await;
    let v1 = poll(&gw, CDS, "n", "", &[], "").await.version().to_owned();
    let started = Instant::now();
    let held = poll(&gw, CDS, "n", &v1, &[], "?wait=5s").await;
    assert_eq!(held.status, StatusCode::NOT_MODIFIED);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let pusher = {
        let script = script.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            script.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        })
    };
    let started = Instant::now();
    let woken = poll(&gw, CDS, "n", &v1, &[], "?wait=30s").await;
    pusher.await.unwrap();
    assert_eq!((woken.status, woken.upstream()), (StatusCode::OK, "v2"));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_poll_waits_bounded_for_the_upstream() {
    let config = Config {
        first_response_timeout: Duration::from_secs(3),
        ..Config::default()
    };
    let (gw, script) = scripted(config);
    let started = Instant::now();
    let reply = poll(&gw, CDS, "n", "", &[], "").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(reply.body["code"], 14);
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("has not answered"));
    assert!(started.elapsed() >= Duration::from_secs(3));

    let setter = {
        let script = script.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            script.set(CDS, "v1", &[cluster("a")]).await;
        })
    };
    let reply = poll(&gw, CDS, "other", "", &[], "").await;
    setter.await.unwrap();
    assert_eq!((reply.status, reply.upstream()), (StatusCode::OK, "v1"));
}

#[tokio::test(start_paused = true)]
async fn names_wait_for_a_state_that_covers_them_until_they_settle() {
    let (gw, script) = scripted(Config::default());
    script
        .set_covering(EDS, "v1", &[cla("a")], covering(&["a"]))
        .await;
    assert_eq!(poll(&gw, EDS, "n", "", &["a"], "").await.names(), ["a"]);
    // "b" is not covered yet: the poll waits until a state covers it.
    let setter = {
        let script = script.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            script
                .set_covering(EDS, "v2", &[cla("a"), cla("b")], covering(&["a", "b"]))
                .await;
        })
    };
    let reply = poll(&gw, EDS, "n", "", &["a", "b"], "").await;
    setter.await.unwrap();
    assert_eq!(
        (reply.upstream(), reply.names()),
        ("v2", vec!["a".into(), "b".into()])
    );

    // A name the upstream never answers: the first poll waits the whole
    // first-response bound, then takes what there is; once the name has
    // been asked for longer than the settle time, polls answer at once.
    let started = Instant::now();
    let reply = poll(&gw, EDS, "n", "", &["zz"], "").await;
    assert_eq!(
        (reply.status, reply.names()),
        (StatusCode::OK, Vec::<String>::new())
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    assert_eq!(
        poll(&gw, EDS, "n", "", &["zz"], "").await.status,
        StatusCode::OK
    );
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn clients_of_one_identity_share_one_session_and_widen_it() {
    let (gw, script) = scripted(Config::default());
    script.set(EDS, "v1", &[cla("a"), cla("b")]).await;
    for names in [&["a"][..], &["a"], &["b"], &["a", "b"]] {
        assert_eq!(
            poll(&gw, EDS, "shared", "", names, "").await.status,
            StatusCode::OK
        );
    }
    assert_eq!(script.sessions_started(), 1);
    idle().await;
    let resubscribes = script
        .commands()
        .into_iter()
        .filter(|c| *c == Command::Resubscribe(EDS))
        .count();
    assert_eq!(
        resubscribes,
        2,
        "first ask of a, then of b: {:?}",
        script.commands()
    );
    assert_eq!(
        poll(&gw, EDS, "another", "", &["a"], "").await.status,
        StatusCode::OK
    );
    assert_eq!(script.sessions_started(), 2);
}

/// The version each of `names` (one EDS cluster per poll) is first served at.
async fn first_versions(gw: &Arc<Gateway>, names: &[String]) -> Vec<String> {
    let mut versions = Vec::new();
    for name in names {
        let reply = poll(gw, EDS, "n", "", &[name], "").await;
        versions.push(reply.version().to_owned());
    }
    versions
}

/// The NACKs the sessions sent their feeder.
pub(super) async fn nacks(script: &Script) -> Vec<Command> {
    idle().await;
    script
        .commands()
        .into_iter()
        .filter(|c| matches!(c, Command::Nack { .. }))
        .collect()
}

/// A gateway forwarding rejections (after 3 polls) over a script at CDS `v1`.
async fn forwarding_rejections_at_v1() -> (Arc<Gateway>, Arc<Script>) {
    let config = Config {
        forward_rejections: true,
        rejection_threshold: 3,
        ..Config::default()
    };
    let (gw, script) = scripted(config);
    script.set(CDS, "v1", &[cluster("a")]).await;
    (gw, script)
}

#[tokio::test(start_paused = true)]
async fn a_client_stuck_on_an_older_version_is_a_suspected_rejection() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let v1 = poll(&gw, CDS, "n", "", &[], "").await.version().to_owned();
    script.set(CDS, "v2", &[cluster("a"), cluster("bad")]).await;
    // Served v2 while presenting v1: catching up, not yet a rejection.
    assert_eq!(poll(&gw, CDS, "n", &v1, &[], "").await.upstream(), "v2");
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 0.0);
    for _ in 0..3 {
        assert_eq!(
            poll(&gw, CDS, "n", &v1, &[], "").await.status,
            StatusCode::OK
        );
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
    // Reported once per (old, new) pair.
    poll(&gw, CDS, "n", &v1, &[], "").await;
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
    let nacks = nacks(&script).await;
    let [Command::Nack {
        kind,
        presented,
        message,
    }] = nacks.as_slice()
    else {
        panic!("one NACK expected: {nacks:?}");
    };
    // The NACK presents the upstream's version the client holds.
    assert_eq!((*kind, presented.as_str()), (CDS, "v1"));
    assert!(message.contains("v2~"), "{message}");
}

/// R7: a REST client that sends `error_detail` has rejected what it was
/// served. That is a rejection at once (no `--rejection-threshold` polls),
/// forwarded upstream with its own message, reported once per pair, and
/// shown as `rejected` with the client's reason.
#[tokio::test(start_paused = true)]
async fn a_clients_own_nack_is_a_rejection_at_once_with_its_reason() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let v1 = poll(&gw, CDS, "n", "", &[], "").await.version().to_owned();
    script.set(CDS, "v2", &[cluster("a"), cluster("bad")]).await;
    let v2 = poll(&gw, CDS, "n", &v1, &[], "").await.version().to_owned();
    assert_ne!(v1, v2);
    let nack = |code: Value| {
        let body = json!({
            "node": {"id": "n"}, "version_info": v1,
            "error_detail": {"code": code, "message": "cluster bad: no endpoints"},
        });
        Request::post(Endpoint::Discovery(CDS).path())
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    // The NACK is answered like any poll presenting v1: with v2.
    let reply = send(&gw, nack(json!(3))).await;
    assert_eq!((reply.status, reply.upstream()), (StatusCode::OK, "v2"));
    assert_eq!(metric(&gw, "xds_gateway_client_nacks_total"), 1.0);
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 0.0);
    let nacks_sent = nacks(&script).await;
    let [Command::Nack {
        kind,
        presented,
        message,
    }] = nacks_sent.as_slice()
    else {
        panic!("one NACK at once expected: {nacks_sent:?}");
    };
    assert_eq!((*kind, presented.as_str()), (CDS, "v1"));
    assert!(message.contains("cluster bad: no endpoints"), "{message}");
    assert!(message.contains(&v2), "{message}");
    // Once per (held, served) pair, however often it says so.
    send(&gw, nack(json!("3"))).await;
    assert_eq!(nacks(&script).await.len(), 1);
    assert_eq!(metric(&gw, "xds_gateway_client_nacks_total"), 2.0);
    let view = serde_json::to_value(gw.clients().view()).unwrap();
    let detail = &view["clients"][0]["types"]["clusters"]["detail"][0];
    assert_eq!(detail["state"], "rejected", "{view}");
    assert!(
        detail["why"]
            .as_str()
            .is_some_and(|why| why.contains("no endpoints")),
        "{view}"
    );
    // Presenting v2 afterwards is an ACK: in step again.
    assert_eq!(
        poll(&gw, CDS, "n", &v2, &[], "").await.status,
        StatusCode::NOT_MODIFIED
    );
    let view = serde_json::to_value(gw.clients().view()).unwrap();
    assert_eq!(
        view["clients"][0]["types"]["clusters"]["detail"][0]["state"],
        "in step"
    );
}

/// A NACK whose `error_detail` is not a `google.rpc.Status` is the
/// client's mistake: a 400 that names the field, nothing counted.
#[tokio::test(start_paused = true)]
async fn a_malformed_nack_is_a_400() {
    let (gw, _script) = forwarding_rejections_at_v1().await;
    let body = json!({"node": {"id": "n"}, "error_detail": {"code": "three"}});
    let request = Request::post(Endpoint::Discovery(CDS).path())
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let reply = send(&gw, request).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(metric(&gw, "xds_gateway_client_nacks_total"), 0.0);
}

/// [`poll`] from a client at `remote` (as `serve` marks each request).
async fn poll_from(gw: &Arc<Gateway>, remote: [u8; 4], node: &str, version: &str) -> Reply {
    let body = json!({"node": {"id": node}, "version_info": version});
    let mut request = Request::post(Endpoint::Discovery(CDS).path())
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let addr = std::net::SocketAddr::from((remote, 40_000));
    request
        .extensions_mut()
        .insert(crate::serve::RemoteAddr(addr));
    send(gw, request).await
}

#[tokio::test(start_paused = true)]
async fn clients_sharing_a_node_id_each_catching_up_are_not_a_rejection() {
    // Several Envoys started with one node id (a Deployment's pods): after a
    // change, each presents the old version once, and each is served the
    // new one. Only one client presenting it again and again is suspect.
    let (gw, script) = forwarding_rejections_at_v1().await;
    let pods: Vec<[u8; 4]> = (1..=5).map(|i| [127, 0, 0, i]).collect();
    let mut held = Vec::new();
    for pod in &pods {
        held.push(
            poll_from(&gw, *pod, "shared", "")
                .await
                .version()
                .to_owned(),
        );
    }
    script.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
    for (pod, v1) in pods.iter().zip(&held) {
        assert_eq!(poll_from(&gw, *pod, "shared", v1).await.upstream(), "v2");
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 0.0);
    assert!(nacks(&script).await.is_empty());
    // One of them stuck on v1 is still caught.
    for _ in 0..3 {
        poll_from(&gw, pods[0], "shared", &held[0]).await;
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn an_envoy_that_rejects_its_first_version_is_a_suspected_rejection() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let envoy = json!({"id": "n", "user_agent_name": "envoy"});
    for _ in 0..3 {
        let reply = poll_as(&gw, CDS, envoy.clone(), "", &[], "").await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    assert_eq!(
        metric(&gw, "xds_gateway_suspected_rejections_total"),
        0.0,
        "two polls after the first body"
    );
    poll_as(&gw, CDS, envoy.clone(), "", &[], "").await;
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
    let nacks = nacks(&script).await;
    let [Command::Nack { presented, .. }] = nacks.as_slice() else {
        panic!("one NACK expected: {nacks:?}");
    };
    assert_eq!(presented, "");
    // curl and scripts present no version by design: never a suspicion.
    for _ in 0..5 {
        poll(&gw, CDS, "curl-user", "", &[], "").await;
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
}

/// A GET whose node says `envoy` (a profile's, or
/// `?user_agent=envoy`) is still a curl or a script: presenting no version
/// again and again is how it reads, never a rejection to forward upstream.
/// The same node POSTed is taken for an Envoy, as before.
#[tokio::test(start_paused = true)]
async fn a_get_whose_node_says_envoy_is_never_a_suspected_rejection() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let profiles = crate::profiles::NodeProfiles::with(&[(
        "sidecar",
        json!({"cluster": "c", "userAgentName": "envoy", "metadata": {"CLUSTER_ID": "east"}}),
    )]);
    let gw = Arc::new(
        Arc::try_unwrap(gw)
            .unwrap_or_else(|_| panic!("the test holds the only gateway"))
            .with_profiles(Arc::new(profiles)),
    );
    let path = Endpoint::Discovery(CDS).path();
    for query in [
        "?profile=sidecar&node=n",
        "?node=n&cluster=c&user_agent=envoy/1.31.2",
    ] {
        for _ in 0..5 {
            let request = Request::get(format!("{path}{query}"))
                .body(Body::empty())
                .unwrap();
            assert_eq!(send(&gw, request).await.status, StatusCode::OK, "{query}");
        }
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 0.0);
    assert!(nacks(&script).await.is_empty());
    // The profile's node POSTed: an Envoy that rejected its first version.
    let node = json!({"id": "n", "cluster": "c", "userAgentName": "envoy", "metadata": {"CLUSTER_ID": "east"}});
    for _ in 0..4 {
        poll_as(&gw, CDS, node.clone(), "", &[], "").await;
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn eds_clusters_catching_up_one_by_one_are_not_rejections() {
    let config = Config {
        rejection_threshold: 1,
        ..Config::default()
    };
    let (gw, script) = scripted(config);
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    let resources: Vec<Value> = names.iter().map(|n| cla(n)).collect();
    script.set(EDS, "v1", &resources).await;
    let versions = first_versions(&gw, &names).await;
    let changed: Vec<Value> = names
        .iter()
        .map(|n| json!({"@type": EDS.type_url(), "cluster_name": n, "policy": {"overprovisioning_factor": 150}}))
        .collect();
    script.set(EDS, "v2", &changed).await;
    for (name, v1) in names.iter().zip(&versions) {
        let reply = poll(&gw, EDS, "n", v1, &[name], "").await;
        assert_eq!(reply.upstream(), "v2");
        let v2 = reply.version().to_owned();
        assert_eq!(
            poll(&gw, EDS, "n", &v2, &[name], "").await.status,
            StatusCode::NOT_MODIFIED
        );
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 0.0);
}

#[tokio::test(start_paused = true)]
async fn every_eds_cluster_gets_its_304_however_many_a_node_polls() {
    let (gw, script) = scripted(Config::default());
    let names: Vec<String> = (0..600).map(|i| format!("c{i}")).collect();
    let resources: Vec<Value> = names.iter().map(|n| cla(n)).collect();
    script.set(EDS, "v1", &resources).await;
    let versions = first_versions(&gw, &names).await;
    for (name, version) in names.iter().zip(&versions) {
        let reply = poll(&gw, EDS, "n", version, &[name], "").await;
        assert_eq!(reply.status, StatusCode::NOT_MODIFIED, "{name}");
    }
    // One cluster's endpoints change: only that cluster gets a body.
    let mut changed = resources.clone();
    changed[7] = json!({"@type": EDS.type_url(), "cluster_name": "c7", "policy": {"overprovisioning_factor": 150}});
    script.set(EDS, "v2", &changed).await;
    for (i, (name, version)) in names.iter().zip(&versions).enumerate() {
        let reply = poll(&gw, EDS, "n", version, &[name], "").await;
        let expected = if i == 7 {
            StatusCode::OK
        } else {
            StatusCode::NOT_MODIFIED
        };
        assert_eq!(reply.status, expected, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stale_state_is_served_with_the_stale_header() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a")]).await;
    let first = poll(&gw, CDS, "n", "", &[], "").await;
    assert!(first.headers.get(STALE_HEADER).is_none());
    let v1 = first.version().to_owned();
    script.set_stale(true).await;
    let stale = poll(&gw, CDS, "n", &v1, &[], "").await;
    assert_eq!(stale.status, StatusCode::NOT_MODIFIED);
    let since = stale.headers[STALE_HEADER].to_str().unwrap();
    assert!(humantime::parse_rfc3339(since).is_ok(), "{since}");
    script.set_stale(false).await;
    assert!(poll(&gw, CDS, "n", &v1, &[], "")
        .await
        .headers
        .get(STALE_HEADER)
        .is_none());
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_close_and_reopen_on_the_next_poll() {
    let config = Config {
        idle_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let (gw, script, inspected) = scripted_inspected(config);
    script.set(CDS, "v1", &[cluster("a")]).await;
    poll(&gw, CDS, "n", "", &[], "").await;
    assert_eq!(script.feeds_running(), 1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        script.feeds_running(),
        0,
        "the idle session's feed was stopped"
    );
    assert_eq!(inspected.status().sessions, 0);
    assert_eq!(
        poll(&gw, CDS, "n", "", &[], "").await.status,
        StatusCode::OK
    );
    assert_eq!(script.sessions_started(), 2);
}

#[tokio::test(start_paused = true)]
async fn get_with_if_none_match_is_a_poll() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a")]).await;
    let get = |etag: Option<&str>| {
        let mut request = Request::get("/v3/discovery:clusters?node=n");
        if let Some(etag) = etag {
            request = request.header("if-none-match", etag);
        }
        request.body(Body::empty()).unwrap()
    };
    let first = send(&gw, get(None)).await;
    assert_eq!((first.status, first.upstream()), (StatusCode::OK, "v1"));
    let etag = first.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(
        send(&gw, get(Some(&etag))).await.status,
        StatusCode::NOT_MODIFIED
    );
}

#[tokio::test(start_paused = true)]
async fn draining_answers_held_long_polls_and_refuses_new_ones() {
    let (gw, script) = scripted(Config::default());
    script.set(CDS, "v1", &[cluster("a")]).await;
    let v1 = poll(&gw, CDS, "n", "", &[], "").await.version().to_owned();
    let held = {
        let (gw, v1) = (gw.clone(), v1.clone());
        tokio::spawn(async move { poll(&gw, CDS, "n", &v1, &[], "?wait=30s").await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!held.is_finished(), "the long poll is held");
    let started = Instant::now();
    gw.drain.begin();
    let held = held.await.unwrap();
    assert_eq!(held.status, StatusCode::NOT_MODIFIED, "{:?}", held.body);
    assert!(started.elapsed() < Duration::from_millis(10));

    // A new long poll is refused, with a JSON error and Retry-After ...
    let refused = poll(&gw, CDS, "n", &v1, &[], "?wait=30s").await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.body["code"], 14, "{}", refused.body);
    assert!(
        refused.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{}",
        refused.body
    );
    // ... while a poll that is answered at once still is: a 304 without a
    // wait, a body when the version moved.
    assert_eq!(
        poll(&gw, CDS, "n", &v1, &[], "").await.status,
        StatusCode::NOT_MODIFIED
    );
    assert_eq!(
        poll(&gw, CDS, "n", "", &[], "?wait=30s").await.status,
        StatusCode::OK
    );
}

/// A profile GET of an Envoy's own node (same id, cluster, metadata: the
/// Envoy's session) from the Envoy's own address (curl on its host, one
/// NAT) is a reader of its own: it neither resets the Envoy's run of
/// rejecting polls nor overwrites where the Envoy stands in the client book.
#[tokio::test(start_paused = true)]
async fn a_profile_get_beside_an_envoy_does_not_hide_its_rejection() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let node = json!({"id": "n", "cluster": "c", "userAgentName": "envoy", "metadata": {"CLUSTER_ID": "east"}});
    let profiles = crate::profiles::NodeProfiles::with(&[("envoy", node.clone())]);
    let gw = Arc::new(
        Arc::try_unwrap(gw)
            .unwrap_or_else(|_| panic!("the test holds the only gateway"))
            .with_profiles(Arc::new(profiles)),
    );
    let path = Endpoint::Discovery(CDS).path();
    // The same node, GET as a curl says it (user agent curl): still the
    // Envoy's session, and its tracker must stay the Envoy's alone.
    for query in ["?profile=envoy", "?profile=envoy&user_agent=curl/8.5.0"] {
        for _ in 0..4 {
            assert_eq!(
                poll_as(&gw, CDS, node.clone(), "", &[], "").await.status,
                StatusCode::OK
            );
            let request = Request::get(format!("{path}{query}"))
                .body(Body::empty())
                .unwrap();
            assert_eq!(send(&gw, request).await.status, StatusCode::OK, "{query}");
        }
    }
    assert_eq!(
        metric(&gw, "xds_gateway_suspected_rejections_total"),
        1.0,
        "the Envoy rejected v1, whatever curl read beside it"
    );
    assert_eq!(nacks(&script).await.len(), 1);
    let view = serde_json::to_value(gw.clients().view()).unwrap();
    let envoy = view["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["user_agent"] == "envoy" && c["role"] == "subscriber")
        .unwrap_or_else(|| panic!("the Envoy is a subscriber: {view}"));
    assert_eq!(
        envoy["types"]["clusters"]["detail"][0]["state"], "suspected rejection",
        "{view}"
    );
}

/// The same for a script that POSTs an Envoy's node as itself (its user
/// agent its own) from the Envoy's address: the Envoy's session, another
/// subscriber.
#[tokio::test(start_paused = true)]
async fn a_script_posting_an_envoys_node_does_not_hide_its_rejection() {
    let (gw, script) = forwarding_rejections_at_v1().await;
    let envoy = json!({"id": "n", "cluster": "c", "user_agent_name": "envoy"});
    let curl = json!({"id": "n", "cluster": "c", "user_agent_name": "curl"});
    for _ in 0..4 {
        poll_as(&gw, CDS, envoy.clone(), "", &[], "").await;
        poll_as(&gw, CDS, curl.clone(), "", &[], "").await;
    }
    assert_eq!(metric(&gw, "xds_gateway_suspected_rejections_total"), 1.0);
    assert_eq!(nacks(&script).await.len(), 1);
}
