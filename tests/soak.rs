//! The soak, short: twenty REST-polling Envoy 1.40 processes through one
//! gateway process in front of the go-control-plane peer, which changes a
//! cluster every second and is restarted every minute, while long-pollers
//! and watchers come and go and a few clients send garbage
//! (`tests/support/soak.rs` says what runs and what is checked: no gross
//! RSS growth after warm-up (the 5 % flatness rule needs the hour), the
//! config history within its bound, file descriptors, threads and tokio
//! tasks back to their warm level, no failed poll, no 5xx, every Envoy on
//! the final version).
//!
//! `SOAK_SECONDS` (default 180) sets the length; `SOAK_ENVOYS` (default 20)
//! the fleet. Below 180 s the warm-up (half the run) is shorter than the
//! minute in which the gateway's memos fill to their time window, and the
//! RSS rule may fail (a 60 s run: +20 %). The hour-long run is `cargo bench --bench soak`
//! (bench/RESULTS.md has its figures). Loopback only; every process is
//! killed by pid when its guard drops.

#[path = "support/process.rs"]
mod process;

#[path = "support/envoy.rs"]
mod envoy;

#[path = "support/gateway.rs"]
mod gateway;

#[path = "support/go_peer.rs"]
mod go_peer;

#[path = "support/soak.rs"]
mod soak;

use std::time::Duration;

const TEST: &str = "soak";

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_envoys_through_churn_and_restarts() {
    let envoy_bin = process::require_envoy(TEST);
    let seconds = env_number("SOAK_SECONDS", 180);
    let envoys = env_number("SOAK_ENVOYS", 20) as usize;
    let config = soak::SoakConfig::for_duration(Duration::from_secs(seconds), envoys);
    let dir = tempfile::tempdir().expect("temp dir");
    // The run, the convergence at the end and the settling, bounded.
    let limit = Duration::from_secs(seconds + 150);
    let report = tokio::time::timeout(limit, soak::run(TEST, &envoy_bin, dir.path(), config))
        .await
        .unwrap_or_else(|_| panic!("{TEST}: did not finish within {limit:?}"));
    eprintln!("{TEST}:\n{}", report.markdown());
    report.check();
}
