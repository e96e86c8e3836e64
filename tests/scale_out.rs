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
//! - `a_replica_stopped_mid_load`: `SCALE_OUT_EXITS` times (3 in the test
//!   command), with two threads spinning beside it, one replica gets
//!   SIGTERM while the Envoy polls: it exits within its drain time, the
//!   Envoy sees no failed poll and the balancer answered no 5xx; it is
//!   started again on the same ports before the next exit. Then a change
//!   reaches the Envoy. The balancer logs every request with Envoy's
//!   response flags and attempts; a failure prints those that were not a
//!   first-attempt 200/304, the last ones, and the client's log.
//!
//!   What it found (issue 23): the REST Envoy's one `update_failure` was an
//!   LDS poll the balancer sent to a replica that had bound its ports but
//!   was still starting (`flags=DC ... ms=983`: held in the kernel's accept
//!   queue until the Envoy's 1 s `request_timeout` ran out). The exits
//!   themselves were retried (`attempts=2`) and never seen. The gateway now
//!   binds its listeners only once it can serve (`app::prepare`), so a
//!   starting replica refuses connections, which the balancer retries at
//!   once. Before: 5 of 5 runs of `SCALE_OUT_EXITS=20` failed (at
//!   0-based rounds 5, 4, 12, 5 and 4); after: 3 of 3 passed, 60 exits
//!   and restarts, 0 failed polls (bench/RESULTS.md, "Issue 23").
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
/// The balancer's access log, in its directory.
const ACCESS_LOG: &str = "access.log";
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
    dir: PathBuf,
    eds_version: u64,
    generations: Vec<u32>,
}

struct Replica {
    guard: ChildGuard,
    port: u16,
    admin: u16,
}

impl Replica {
    /// Replica `i` in front of `upstream`, on REST `port` and `admin`
    /// (the same ports again when it is restarted), logging into
    /// `dir/replica-<i>/`. Not waited for.
    fn spawn(upstream: &str, port: u16, admin: u16, dir: &Path, i: usize) -> Replica {
        let sub = dir.join(format!("replica-{i}"));
        std::fs::create_dir_all(&sub).expect("replica dir");
        let (listen, admin_addr) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
        let refresh = format!("{}ms", REFRESH.as_millis());
        let args = [
            "--upstream",
            upstream,
            "--listen",
            &listen,
            "--admin",
            &admin_addr,
            "--refresh-delay",
            &refresh,
            "--drain-timeout",
            "5s",
        ];
        let guard = envoy::spawn_gateway(args, false, &sub.join(envoy::GATEWAY_LOG));
        Replica { guard, port, admin }
    }
}

/// The balancer: a static listener on `port` routing everything to the
/// replicas (ROUND_ROBIN), health-checked on their admin `/readyz`.
/// Requests are logged to `access_log`, with Envoy's response flags and
/// the attempts each took.
fn balancer_bootstrap(admin: u16, port: u16, replicas: &[Replica], access_log: &Path) -> String {
    let access_log = access_log.display();
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
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {access_log}
              log_format:
                text_format_source:
                  inline_string: "%START_TIME% %REQ(:PATH)% %RESPONSE_CODE% flags=%RESPONSE_FLAGS% details=%RESPONSE_CODE_DETAILS% attempts=%UPSTREAM_REQUEST_ATTEMPT_COUNT% upstream=%UPSTREAM_HOST% failure=%UPSTREAM_TRANSPORT_FAILURE_REASON% ms=%DURATION%\n"
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
            replicas.push(Replica::spawn(&ads.url(), free_port(), free_port(), dir, i));
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
            &balancer_bootstrap(
                balancer_admin,
                balancer_port,
                &replicas,
                &sub.join(ACCESS_LOG),
            ),
        );
        // Every replica healthy in the balancer before the client starts.
        envoy::wait_admin(balancer_admin, "/ready", "the balancer").await;
        all_healthy(balancer_admin).await;
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
            dir: dir.to_path_buf(),
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
    process::requests_by_status(&text)
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

/// Waits until the balancer on `admin` sees every replica healthy.
async fn all_healthy(admin: u16) {
    let healthy = eventually(Duration::from_secs(20), POLL_INTERVAL, || async move {
        let stats = envoy::counters(admin, &["cluster.replicas.membership_healthy"]).await;
        (stats.values().next() == Some(&(REPLICAS as u64))).then_some(())
    })
    .await;
    assert!(
        healthy.is_some(),
        "the balancer never saw {REPLICAS} healthy replicas"
    );
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

/// Replica exits in a row (`SCALE_OUT_EXITS`, default 3; the issue's
/// record is 20), each with [`HOGS`] threads spinning beside it.
fn exits() -> usize {
    match std::env::var("SCALE_OUT_EXITS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("SCALE_OUT_EXITS={v:?} is not a number")),
        Err(_) => 3,
    }
}

/// Busy threads beside the exits: the race showed on a loaded machine.
const HOGS: usize = 2;
/// One exit, its restart and the balancer seeing it healthy again, at most.
const EXIT_ROUND: Duration = Duration::from_secs(30);

/// Threads spinning until dropped: load for the CPU the test runs on.
struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start(threads: usize) -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                    }
                })
            })
            .collect();
        CpuHog { stop, threads }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The balancer's access log lines that are neither 200 nor 304, and those
/// that took more than one attempt.
fn unusual_requests(dir: &Path) -> Vec<String> {
    process::read_log(&dir.join("balancer").join(ACCESS_LOG))
        .lines()
        .filter(|l| {
            !(l.contains(" 200 flags=") || l.contains(" 304 flags=")) || !l.contains("attempts=1 ")
        })
        .map(str::to_owned)
        .collect()
}

/// The balancer's last `n` access log lines.
fn last_requests(dir: &Path, n: usize) -> String {
    let log = process::read_log(&dir.join("balancer").join(ACCESS_LOG));
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_mid_load() {
    let envoy_bin = process::require_envoy("a_replica_stopped_mid_load");
    let dir = tempfile::tempdir().expect("tempdir");
    let rounds = exits();
    let limit = Duration::from_secs(60) + EXIT_ROUND * rounds as u32;
    let run = stopped(envoy_bin, dir.path().to_path_buf(), rounds);
    if tokio::time::timeout(limit, run).await.is_err() {
        panic!(
            "a_replica_stopped_mid_load: did not finish within {limit:?}; unusual requests at the balancer:\n{}",
            unusual_requests(dir.path()).join("\n")
        );
    }
}

/// `rounds` times, under [`HOGS`] busy threads: SIGTERM to one replica
/// (round robin) while the client polls through the balancer; it exits
/// within its drain time, the client sees no failed poll and the balancer
/// answered no 5xx; the replica is started again on the same ports and the
/// balancer sees it healthy before the next round. Then a change upstream
/// reaches the client.
async fn stopped(envoy_bin: PathBuf, dir: PathBuf, rounds: usize) {
    let mut s = Scale::start(&envoy_bin, &dir).await;
    let before = s.converged(&BTreeMap::new()).await;
    let from = all_answers(&s.replicas).await;
    wait_polls(&s.replicas, &from, 20.0).await;
    let upstream = s.ads.url();
    let hog = CpuHog::start(HOGS);
    for round in 0..rounds {
        let i = round % REPLICAS;
        let mut gone = s.replicas.remove(i);
        let signalled = Instant::now();
        let wall = std::time::SystemTime::now();
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
                "round {round}: replica {i} still runs {:?} after SIGTERM",
                signalled.elapsed()
            )
        });
        assert!(
            exited.success(),
            "round {round}: replica {i} exited with {exited}"
        );
        let took = signalled.elapsed();

        // The two left carry on: polls keep coming, all answered, none failed.
        let from = all_answers(&s.replicas).await;
        let to = wait_polls(&s.replicas, &from, 20.0).await;
        for (a, b) in from.iter().zip(&to) {
            let polls: f64 = b.values().sum::<f64>() - a.values().sum::<f64>();
            assert_eq!(polls, count(b, "304") - count(a, "304"), "{a:?} -> {b:?}");
        }
        let (after, failures) = s.client_updates().await;
        let fives = balancer_5xx(s.balancer_admin).await;
        if failures > 0 || fives > 0 || after != before {
            let balancer = envoy::counters(
                s.balancer_admin,
                &[
                    "cluster.replicas.lb_healthy_panic",
                    "cluster.replicas.health_check.",
                ],
            )
            .await;
            // Envoy flushes its access log every 10 s.
            tokio::time::sleep(Duration::from_secs(11)).await;
            eprintln!("the balancer's health checks and panics: {balancer:?}");
            panic!(
                "round {round} (replica {i} stopped): the client saw {failures} failed polls, the balancer answered {fives} 5xx, updates {before:?} -> {after:?}; unusual requests at the balancer:\n{}\nthe balancer's last requests:\n{}\nthe client's log:\n{}",
                unusual_requests(&dir).join("\n"),
                last_requests(&dir, 150),
                s.client.log_text()
            );
        }
        eprintln!(
            "a_replica_stopped_mid_load: round {round}: replica {i} (port {}) signalled at {}, exited {took:.1?} later; no failed poll",
            gone.port,
            humantime::format_rfc3339_millis(wall)
        );

        // Back on the same ports, healthy at the balancer.
        let (port, admin) = (gone.port, gone.admin);
        drop(gone);
        let mut again = Replica::spawn(&upstream, port, admin, &s.dir, i);
        envoy::wait_gateway_ready(
            &mut again.guard,
            admin,
            POLL_INTERVAL,
            &format!("replica {i}"),
        )
        .await;
        s.replicas.insert(i, again);
        all_healthy(s.balancer_admin).await;
        eprintln!(
            "a_replica_stopped_mid_load: round {round}: replica {i} healthy again at {}",
            humantime::format_rfc3339_millis(std::time::SystemTime::now())
        );
    }
    drop(hog);
    let retried = unusual_requests(&dir);
    eprintln!(
        "a_replica_stopped_mid_load: {rounds} exits; requests the balancer retried or failed:\n{}",
        retried.join("\n")
    );

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
