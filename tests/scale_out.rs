//! Interchangeable replicas behind a real balancer: three `xds-gateway`
//! processes in front of one scripted ADS control plane (`fake_ads.rs`),
//! behind a static Envoy 1.40 listener whose cluster has the replicas as
//! endpoints (ROUND_ROBIN, active health checks on each replica's `/readyz`,
//! retries on 5xx, resets and refused connections on another host), and one
//! REST Envoy polling LDS, CDS and [`CLUSTERS`] EDS clusters through it.
//!
//! - `replicas_answer_alike`: the REST Envoy converges; every replica serves
//!   the same version for the same request; in steady state every poll is
//!   a 304 whichever replica answers it (all three answer some) and no
//!   `update_success` rises; a change upstream reaches the Envoy, and only
//!   the changed cluster takes an update.
//! - `a_replica_stopped_mid_load`: one replica gets SIGTERM while the Envoy
//!   polls: it exits within its drain time, the Envoy sees no failed poll
//!   and the balancer answered no 5xx, and the two left carry a later
//!   change to the Envoy.
//!
//! Bounded by the Envoy harness's limit; loopback only; every process
//! killed by pid when its guard drops.

#[path = "support/process.rs"]
mod process;

#[path = "support/envoy.rs"]
mod envoy;

#[path = "support/fake_ads.rs"]
mod fake_ads;

#[path = "support/fleet.rs"]
mod fleet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fake_ads::FakeAds;
use fleet::{assignment, cluster_name};
use process::{eventually, free_port, http_exchange, ChildGuard};
use xds_gateway::xds::{Codec, ResourceType};

use envoy::{Envoy, NODE_CLUSTER, POLL_INTERVAL};

const CLUSTERS: usize = 5;
const REPLICAS: usize = 3;
/// The EDS refresh_delay the replicas write into rewritten sources.
const REFRESH: Duration = Duration::from_millis(200);
const NODE: &str = "scale-out";
const EDS: &str = ResourceType::Endpoints.type_url();
/// The balancer's HTTP connection manager stat prefix.
const BALANCER: &str = "balancer";

/// The processes of one scenario.
struct Scale {
    ads: FakeAds,
    codec: Codec,
    replicas: Vec<Replica>,
    balancer: Envoy,
    balancer_admin: u16,
    client: Envoy,
    client_admin: u16,
    eds_version: u64,
    generations: Vec<u32>,
}

struct Replica {
    guard: ChildGuard,
    port: u16,
    admin: u16,
}

/// The balancer: a static listener on `port` routing everything to the
/// replicas (ROUND_ROBIN), health-checked on their admin `/readyz`.
fn balancer_bootstrap(admin: u16, port: u16, replicas: &[Replica]) -> String {
    let endpoints: String = replicas
        .iter()
        .map(|r| {
            format!(
                "        - endpoint:\n            address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}\n            health_check_config: {{port_value: {}}}\n",
                r.port, r.admin
            )
        })
        .collect();
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: balancer
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {BALANCER}
          route_config:
            name: replicas
            virtual_hosts:
            - name: replicas
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: replicas
                  timeout: 15s
                  retry_policy:
                    retry_on: 5xx,reset,connect-failure,refused-stream
                    num_retries: 3
                    retry_host_predicate:
                    - name: envoy.retry_host_predicates.previous_hosts
                      typed_config:
                        "@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate
                    host_selection_retry_max_attempts: 5
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: replicas
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN
    health_checks:
    - timeout: 1s
      interval: 0.5s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{path: /readyz}}
    load_assignment:
      cluster_name: replicas
      endpoints:
      - lb_endpoints:
{endpoints}"#
    )
}

impl Scale {
    async fn start(envoy_bin: &Path, dir: &Path) -> Scale {
        let codec = Codec::embedded();
        let ads = fleet::control_plane(&codec, CLUSTERS).await;
        let mut replicas = Vec::new();
        for i in 0..REPLICAS {
            let sub = dir.join(format!("replica-{i}"));
            std::fs::create_dir_all(&sub).expect("replica dir");
            let gw =
                envoy::start_gateway(&ads.url(), REFRESH, &["--drain-timeout", "5s"], false, &sub)
                    .await;
            replicas.push(Replica {
                guard: gw.guard,
                port: gw.port,
                admin: gw.admin,
            });
        }
        for (i, r) in replicas.iter_mut().enumerate() {
            envoy::wait_gateway_ready(
                &mut r.guard,
                r.admin,
                POLL_INTERVAL,
                &format!("replica {i}"),
            )
            .await;
        }
        let (balancer_admin, balancer_port) = (free_port(), free_port());
        let sub = dir.join("balancer");
        std::fs::create_dir_all(&sub).expect("balancer dir");
        let balancer = Envoy::start(
            envoy_bin,
            &sub,
            &balancer_bootstrap(balancer_admin, balancer_port, &replicas),
        );
        // Every replica healthy in the balancer before the client starts.
        envoy::wait_admin(balancer_admin, "/ready", "the balancer").await;
        let healthy = eventually(Duration::from_secs(20), POLL_INTERVAL, || async move {
            let stats =
                envoy::counters(balancer_admin, &["cluster.replicas.membership_healthy"]).await;
            (stats.values().next() == Some(&(REPLICAS as u64))).then_some(())
        })
        .await;
        assert!(
            healthy.is_some(),
            "the balancer never saw {REPLICAS} healthy replicas"
        );
        let client_admin = free_port();
        let sub = dir.join("client");
        std::fs::create_dir_all(&sub).expect("client dir");
        let client = Envoy::start(
            envoy_bin,
            &sub,
            &envoy::rest_bootstrap(NODE, client_admin, balancer_port),
        );
        envoy::wait_admin(
            client_admin,
            "/stats?filter=server.live",
            "the client Envoy",
        )
        .await;
        Scale {
            ads,
            codec,
            replicas,
            balancer,
            balancer_admin,
            client,
            client_admin,
            eds_version: 1,
            generations: vec![0; CLUSTERS],
        }
    }

    fn check_alive(&mut self) {
        self.balancer.assert_running();
        self.client.assert_running();
        for r in &mut self.replicas {
            r.guard.assert_running();
        }
    }

    /// The client Envoy's `update_success` per subscription (CDS, LDS, each
    /// EDS cluster) and the sum of its `update_failure` and `update_rejected`.
    async fn client_updates(&mut self) -> (BTreeMap<String, u64>, u64) {
        self.check_alive();
        let stats = envoy::counters(
            self.client_admin,
            &[
                "cluster.svc_",
                "cluster_manager.cds.",
                "listener_manager.lds.",
            ],
        )
        .await;
        let mut success = BTreeMap::new();
        let mut failures = 0;
        for (name, value) in stats {
            if let Some(prefix) = name.strip_suffix(".update_success") {
                success.insert(prefix.to_owned(), value);
            } else if name.ends_with(".update_failure") || name.ends_with(".update_rejected") {
                failures += value;
            }
        }
        (success, failures)
    }

    /// Waits until the client has taken every subscription's first update
    /// (or, with `at_least`, the given counts); returns the counters.
    async fn converged(&mut self, at_least: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        let deadline = Instant::now() + envoy::CONVERGE_TIMEOUT;
        loop {
            let (success, failures) = self.client_updates().await;
            assert_eq!(
                failures, 0,
                "the client Envoy failed or rejected an update: {success:?}"
            );
            let all = success.len() == CLUSTERS + 2
                && success.values().all(|v| *v >= 1)
                && at_least.iter().all(|(k, v)| success.get(k) >= Some(v));
            if all {
                return success;
            }
            assert!(
                Instant::now() < deadline,
                "the client never converged: {success:?}"
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Gives cluster `i` new endpoints (a new upstream EDS version).
    fn change(&mut self, i: usize) {
        self.generations[i] += 1;
        self.eds_version += 1;
        let resources = (0..CLUSTERS)
            .map(|c| assignment(&self.codec, c, self.generations[c]))
            .collect();
        self.ads.set(EDS, &self.eds_version.to_string(), resources);
    }

    /// Waits until the client took cluster `i`'s update (its update_success
    /// above `before`), and checks that no other subscription took one.
    async fn takes_only(&mut self, i: usize, before: &BTreeMap<String, u64>) {
        let changed = format!("cluster.{}", cluster_name(i));
        let mut wanted = BTreeMap::new();
        wanted.insert(changed.clone(), before[&changed] + 1);
        let after = self.converged(&wanted).await;
        let others: Vec<_> = after
            .iter()
            .filter(|(k, v)| **k != changed && before.get(*k) != Some(*v))
            .collect();
        assert!(
            others.is_empty(),
            "unchanged subscriptions took an update: {others:?}"
        );
    }
}

/// A replica's answers so far, by status, over every discovery type.
async fn answers(admin: u16) -> BTreeMap<String, f64> {
    let (_, text) = process::http_get(admin, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("replica /metrics: {e}"));
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("xds_gateway_requests_total{") else {
            continue;
        };
        let status = rest
            .split("status=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("?")
            .to_owned();
        let value: f64 = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(status).or_default() += value;
    }
    out
}

fn count(answers: &BTreeMap<String, f64>, status: &str) -> f64 {
    answers.get(status).copied().unwrap_or(0.0)
}

/// The served version of `type_url` (EDS: `names`) for the client's node, as
/// the client asks (Envoy's user agent, `Host: xds_cluster`), from the
/// replica on `port`.
async fn version_from(port: u16, kind: ResourceType, names: &[String]) -> String {
    let body = serde_json::json!({
        "node": {"id": NODE, "cluster": NODE_CLUSTER, "user_agent_name": "envoy"},
        "resource_names": names,
    });
    let path = xds_gateway::xds::Endpoint::Discovery(kind).path();
    let (status, _, body) = http_exchange(
        port,
        http::Method::POST,
        &path,
        &[
            ("host", "xds_cluster"),
            ("content-type", "application/json"),
        ],
        Bytes::from(body.to_string()),
    )
    .await
    .unwrap_or_else(|e| panic!("POST {path} to 127.0.0.1:{port}: {e}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    json["versionInfo"]
        .as_str()
        .expect("versionInfo")
        .to_owned()
}

/// Every live replica serves one version for CDS and for each EDS cluster.
async fn same_versions(replicas: &[Replica]) {
    let mut asks = vec![(ResourceType::Clusters, Vec::new())];
    asks.extend((0..CLUSTERS).map(|i| (ResourceType::Endpoints, vec![cluster_name(i)])));
    for (kind, names) in asks {
        let mut versions = Vec::new();
        for r in replicas {
            versions.push(version_from(r.port, kind, &names).await);
        }
        assert!(
            versions.windows(2).all(|w| w[0] == w[1]),
            "replicas serve different versions of {kind:?} {names:?}: {versions:?}"
        );
    }
}

/// Sums the answers of `replicas` by status.
async fn all_answers(replicas: &[Replica]) -> Vec<BTreeMap<String, f64>> {
    let mut out = Vec::new();
    for r in replicas {
        out.push(answers(r.admin).await);
    }
    out
}

/// Waits until the replicas answered `polls` more polls than `from` did.
async fn wait_polls(
    replicas: &[Replica],
    from: &[BTreeMap<String, f64>],
    polls: f64,
) -> Vec<BTreeMap<String, f64>> {
    let total = |a: &[BTreeMap<String, f64>]| -> f64 { a.iter().flat_map(|m| m.values()).sum() };
    let start = total(from);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = all_answers(replicas).await;
        if total(&now) >= start + polls {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the client stopped polling: {now:?}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn balancer_5xx(admin: u16) -> u64 {
    let stats = envoy::counters(admin, &[&format!("http.{BALANCER}.downstream_rq_5xx")]).await;
    stats.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_answer_alike() {
    envoy::run_bounded("replicas_answer_alike", alike).await;
}

async fn alike(envoy_bin: PathBuf, dir: PathBuf) {
    let mut s = Scale::start(&envoy_bin, &dir).await;
    let before = s.converged(&BTreeMap::new()).await;
    same_versions(&s.replicas).await;

    // Steady state: enough polls that each replica answers many.
    let from = all_answers(&s.replicas).await;
    let to = wait_polls(&s.replicas, &from, 30.0 * (CLUSTERS + 2) as f64 / 2.0).await;
    for (i, (a, b)) in from.iter().zip(&to).enumerate() {
        let not_modified = count(b, "304") - count(a, "304");
        let other: f64 = b.values().sum::<f64>() - a.values().sum::<f64>() - not_modified;
        assert!(
            not_modified >= 5.0,
            "replica {i} answered {not_modified} polls: the balancer did not spread them"
        );
        assert_eq!(
            other, 0.0,
            "replica {i} answered steady-state polls with something else than 304: {a:?} -> {b:?}"
        );
    }
    let (after, failures) = s.client_updates().await;
    assert_eq!(
        after, before,
        "update_success rose without a change upstream"
    );
    assert_eq!(failures, 0);

    // A change upstream reaches the client through any replica.
    s.change(2);
    s.takes_only(2, &after).await;
    same_versions(&s.replicas).await;
    assert_eq!(
        balancer_5xx(s.balancer_admin).await,
        0,
        "the balancer answered a 5xx"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_mid_load() {
    envoy::run_bounded("a_replica_stopped_mid_load", stopped).await;
}

async fn stopped(envoy_bin: PathBuf, dir: PathBuf) {
    let mut s = Scale::start(&envoy_bin, &dir).await;
    let before = s.converged(&BTreeMap::new()).await;
    let from = all_answers(&s.replicas).await;
    wait_polls(&s.replicas, &from, 20.0).await;

    let mut gone = s.replicas.remove(0);
    let signalled = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &gone.guard.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM");
    let exited = eventually(Duration::from_secs(10), POLL_INTERVAL, || {
        let status = gone.guard.try_exit_status();
        async move { status }
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the stopped replica still runs {:?} after SIGTERM",
            signalled.elapsed()
        )
    });
    assert!(exited.success(), "the stopped replica exited with {exited}");
    eprintln!(
        "a_replica_stopped_mid_load: replica exited {:.1?} after SIGTERM",
        signalled.elapsed()
    );

    // The two left carry on: polls keep coming, all answered, none failed.
    let from = all_answers(&s.replicas).await;
    let to = wait_polls(&s.replicas, &from, 40.0).await;
    for (a, b) in from.iter().zip(&to) {
        let polls: f64 = b.values().sum::<f64>() - a.values().sum::<f64>();
        assert_eq!(polls, count(b, "304") - count(a, "304"), "{a:?} -> {b:?}");
    }
    let (after, failures) = s.client_updates().await;
    assert_eq!(failures, 0, "the client saw a failed poll");
    assert_eq!(
        after, before,
        "update_success rose without a change upstream"
    );
    s.change(4);
    s.takes_only(4, &after).await;
    same_versions(&s.replicas).await;
    assert_eq!(
        balancer_5xx(s.balancer_admin).await,
        0,
        "the balancer answered a 5xx"
    );
}
