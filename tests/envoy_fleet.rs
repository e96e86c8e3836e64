//! A real Envoy 1.40 polling 1,000 EDS clusters over REST through the
//! gateway, in front of an ADS control plane whose clusters carry `ads: {}`
//! EDS sources (`tests/support/fleet.rs`):
//!
//! - a cold start warms every cluster with no update failure (the rewritten
//!   sources carry `request_timeout`, so no first poll times out in Envoy),
//!   within [`WARM_RATIO`] times the same Envoy's cold start against a plain
//!   REST server serving the same clusters, measured first in the same run
//!   (`fleet::floor_warm`): a loaded machine slows both, a slower gateway
//!   only its own (never less than [`WARM_TIMEOUT`], nor more than
//!   [`WARM_CAP`]);
//! - in steady state at least 99 % of EDS polls are 304 and no cluster's
//!   `update_success` rises: nothing changed;
//! - when one cluster's endpoints change, that cluster takes the update and
//!   every other one stays at 304 (the version each is served covers only
//!   its own resources).
//!
//! Bounded by [`FLEET_TIMEOUT`]; every process killed at the end.

#[path = "support/process.rs"]
mod process;

#[path = "support/envoy.rs"]
mod envoy;

#[path = "support/fake_ads.rs"]
mod fake_ads;

#[path = "support/fleet.rs"]
mod fleet;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fleet::{cluster_name, Fleet};

const TEST: &str = "envoy_fleet";
const CLUSTERS: usize = 1_000;
/// EDS refresh_delay written into the rewritten sources: Envoy polls each
/// cluster every 2-4 s.
const REFRESH: Duration = Duration::from_secs(2);
/// How long warming may take, at least.
const WARM_TIMEOUT: Duration = Duration::from_secs(15);
/// How many times the floor's cold start warming may take (what the two
/// read in quiet runs: bench/RESULTS.md, "Fleet").
const WARM_RATIO: u32 = 4;
/// How long warming may take, at most, whatever the floor.
const WARM_CAP: Duration = Duration::from_secs(120);
/// How long the floor may take to warm before the machine is deemed too
/// loaded to say anything.
const FLOOR_TIMEOUT: Duration = Duration::from_secs(60);
/// The whole test: the floor, the gateway's warming, two steady-state
/// windows (30 s each at most) and the change (15 s), with room for the
/// processes' start-up.
const FLEET_TIMEOUT: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_envoy_polling_1000_eds_clusters() {
    envoy::run_bounded_within(TEST, FLEET_TIMEOUT, run).await;
}

async fn run(envoy_bin: PathBuf, dir: PathBuf) {
    let floor = fleet::floor_warm(
        &envoy_bin,
        &dir.join("floor"),
        CLUSTERS,
        REFRESH,
        FLOOR_TIMEOUT,
    )
    .await;
    let budget = (floor * WARM_RATIO).clamp(WARM_TIMEOUT, WARM_CAP);
    eprintln!("{TEST}: the floor's {CLUSTERS} EDS clusters warm {floor:.2?} after Envoy started; the gateway's may take {budget:.1?}");
    let mut fleet = Fleet::start(&envoy_bin, &dir, CLUSTERS, REFRESH, false).await;
    let warm = fleet.wait_warm(budget).await;
    let (before, failures, rejected) = fleet.eds_counters().await;
    eprintln!(
        "{TEST}: {CLUSTERS} EDS clusters warm {warm:.2?} after Envoy started ({:.2}x the floor)",
        warm.as_secs_f64() / floor.as_secs_f64()
    );
    assert_eq!(failures, 0, "EDS update failures on a cold start");
    assert_eq!(rejected, 0, "EDS updates rejected");

    // Steady state: two refresh cycles' worth of polls, nothing changing.
    let (ok0, nm0, other0) = fleet.gateway_eds_answers().await;
    let window = Instant::now();
    let polls = wait_polls(&mut fleet, ok0 + nm0, 2 * CLUSTERS).await;
    let (ok1, nm1, other1) = polls;
    let share = (nm1 - nm0) / ((ok1 - ok0) + (nm1 - nm0));
    eprintln!(
        "{TEST}: steady state: {:.0} EDS polls in {:.1?}, {:.2} % 304",
        (ok1 - ok0) + (nm1 - nm0),
        window.elapsed(),
        share * 100.0
    );
    assert!(
        share >= 0.99,
        "only {:.2} % of steady-state polls were 304",
        share * 100.0
    );
    assert_eq!(other1, other0, "EDS polls answered neither 200 nor 304");
    let (after, _, _) = fleet.eds_counters().await;
    let rose: Vec<&String> = after
        .iter()
        .filter(|(name, v)| before.get(*name) != Some(*v))
        .map(|(name, _)| name)
        .collect();
    assert!(
        rose.is_empty(),
        "update_success rose without a change: {rose:?}"
    );

    // One cluster's endpoints change: it alone takes an update.
    let changed = cluster_name(7);
    fleet.change(7);
    let started = Instant::now();
    let was = after.get(&changed).copied();
    let taken = process::eventually(Duration::from_secs(15), envoy::POLL_INTERVAL, || {
        let admin = fleet.envoy_admin;
        let changed = changed.clone();
        async move {
            let stats =
                envoy::counters(admin, &[&format!("cluster.{changed}.update_success")]).await;
            (stats.values().next().copied() > was).then_some(())
        }
    })
    .await;
    assert!(taken.is_some(), "{changed} never took its new endpoints");
    eprintln!(
        "{TEST}: {changed} took its new endpoints in {:.1?}",
        started.elapsed()
    );
    let (ok2, nm2, _) = fleet.gateway_eds_answers().await;
    wait_polls(&mut fleet, ok2 + nm2, CLUSTERS).await;
    let (last, failures, _) = fleet.eds_counters().await;
    let rose: Vec<&String> = last
        .iter()
        .filter(|(name, v)| **name != changed && after.get(*name) != Some(*v))
        .map(|(name, _)| name)
        .collect();
    assert!(
        rose.is_empty(),
        "clusters whose endpoints did not change took an update: {rose:?}"
    );
    assert_eq!(failures, 0);
}

/// Waits until the gateway answered `polls` more EDS polls than `from`;
/// the answers then.
async fn wait_polls(fleet: &mut Fleet, from: f64, polls: usize) -> (f64, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answers = fleet.gateway_eds_answers().await;
        if answers.0 + answers.1 >= from + polls as f64 {
            return answers;
        }
        assert!(
            Instant::now() < deadline,
            "Envoy stopped polling EDS: {answers:?}"
        );
        tokio::time::sleep(envoy::POLL_INTERVAL).await;
    }
}
