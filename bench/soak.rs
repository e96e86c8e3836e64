//! The soak, long: `tests/soak.rs`'s scenario (twenty REST-polling Envoy
//! 1.40 processes through one gateway process in front of the
//! go-control-plane peer, a cluster changed every second, the control plane
//! restarted every 5 minutes, long-pollers and watchers coming and going,
//! garbage; see `tests/support/soak.rs`) for an hour by default, with the
//! same checks. Prints the figures as Markdown for bench/RESULTS.md, then
//! fails if a rule broke.
//!
//! `cargo bench --bench soak` (needs the Envoy of `scripts/test`'s .venv or
//! ENVOY_BIN, and GO_CONTROL_PLANE_PEER or Go). SOAK_SECONDS (default
//! 3600), SOAK_ENVOYS (default 20).

#[path = "../tests/support/process.rs"]
mod process;

#[path = "../tests/support/envoy.rs"]
mod envoy;

#[path = "../tests/support/gateway.rs"]
mod gateway;

#[path = "../tests/support/go_peer.rs"]
mod go_peer;

#[path = "../tests/support/soak.rs"]
mod soak;

use std::time::Duration;

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let envoy_bin = process::require_envoy("bench soak");
    let seconds = env_number("SOAK_SECONDS", 3600);
    let envoys = env_number("SOAK_ENVOYS", 20) as usize;
    let config = soak::SoakConfig::for_duration(Duration::from_secs(seconds), envoys);
    let dir = tempfile::tempdir().expect("temp dir");
    let report = soak::run("bench soak", &envoy_bin, dir.path(), config).await;
    println!(
        "SOAK_SECONDS={seconds} SOAK_ENVOYS={envoys} cargo bench --bench soak\n\n{}",
        report.markdown()
    );
    report.check();
}
