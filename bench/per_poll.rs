//! The per-poll part of the gateway bench (issue 41): the CPU one EDS poll
//! (answered 200, answered 304) costs the gateway process, against what the
//! same poll costs the floor, a plain hyper server in its own process
//! ([`external::serve_fixed`]: reads the whole body, answers the same
//! bytes), both on 2 worker threads and both counted from `/proc/PID/stat`.
//!
//! Two protocols, as Envoys poll: HTTP/1.1 keep-alive (`wrk`, one thread,
//! 16 connections) and HTTP/2 with prior knowledge (`h2load`, Debian's
//! `nghttp2-client`: [`H2_CONNECTIONS`] connections of [`H2_STREAMS`]
//! concurrent streams each, as an Envoy multiplexes its polls on one
//! connection).
//!
//! A second floor, the same server comparing each body byte for byte with
//! the one it was sent last ([`external::Reading::Confirmed`]), takes its
//! turn in the same rounds: it makes the one pass over a request's bytes
//! that a memo hit of the gateway must make (its confirm), so the gateway's
//! ratio to it is what the gateway costs beyond reading the body twice.
//!
//! Gateway and floors alternate, round by round; the table gives
//! medians with the min-max of the rounds, and the ratio of the medians with
//! the min-max of the per-round ratios. Both tools must be installed: a
//! missing one is a panic, never a skipped row.
//!
//! Every child is on loopback, bounded in time and killed by pid.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::external::{self, Measured, Reading, Run, Target};
use crate::gateway_process::{self, output_within};
use crate::Case;

/// h2load's connections.
const H2_CONNECTIONS: usize = 4;
/// h2load's concurrent streams per connection.
const H2_STREAMS: usize = 32;

/// A protocol the polls are made over, and the tool that makes them.
#[derive(Clone, Copy)]
enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    fn label(self) -> String {
        match self {
            Protocol::Http1 => "HTTP/1.1 (wrk -c16)".into(),
            Protocol::Http2 => format!("HTTP/2 (h2load -c{H2_CONNECTIONS} -m{H2_STREAMS})"),
        }
    }
}

/// Panics, saying how to install it, unless `tool` runs: what `bench`
/// (`GATEWAY_BENCH=<mode>`) needs.
pub fn require(bench: &str, tool: &str, version_flag: &str, package: &str) {
    let ran = Command::new(tool)
        .arg(version_flag)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        ran.is_ok(),
        "GATEWAY_BENCH={bench} needs `{tool}`, which is not installed: apt-get install {package}"
    );
}

/// The ratio of `a`'s CPU per request to `b`'s, round by round (both
/// measured in the same rounds).
fn per_round(a: &Measured, b: &Measured) -> Vec<f64> {
    a.cpu_us[0]
        .iter()
        .zip(&b.cpu_us[0])
        .map(|(x, y)| x / y)
        .collect()
}

/// Runs every case (EDS 200, EDS 304) over both protocols against the
/// gateway process (`gateway` port, `gateway_pid`) and a floor process of
/// its own, and prints the table. With `baseline` (the port and pid of
/// another build's gateway, `XDS_GATEWAY_BASELINE_BIN`), that one takes
/// its turn in the same rounds and gets a row of its own, against the same
/// floor, and each build's ratio to the other is printed: on a shared
/// machine only figures of the same rounds compare.
pub fn part(gateway: u16, gateway_pid: u32, baseline: Option<(u16, u32)>, cases: &[&Case]) {
    require("perpoll", "wrk", "--version", "wrk");
    require("perpoll", "h2load", "--version", "nghttp2-client");
    let rounds = external::env_number("GATEWAY_ROUNDS", 5).max(1);
    let seconds = external::env_number("GATEWAY_SECONDS", 5).max(1);
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "\n## Per poll: CPU per request, gateway against the floor (a plain hyper server), \
         {rounds} rounds of {seconds}s per server, alternating; medians (min-max of the rounds)\n"
    );
    println!("| case | protocol | gateway µs/poll | floor µs/poll | gateway/floor | gateway req/s | floor req/s |");
    println!("|---|---|---|---|---|---|---|");
    let mut per_protocol = Vec::new();
    let mut compared = Vec::new();
    let mut user_part = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let port = gateway_process::free_port();
        let floor = external::start_raw_server(dir.path(), port, case.status, &case.answer);
        gateway_process::wait_listening(port);
        let floor_pid = floor.0.id();
        let confirm_port = gateway_process::free_port();
        let confirming = external::start_raw_server_reading(
            dir.path(),
            confirm_port,
            case.status,
            &case.answer,
            Reading::Confirmed,
        );
        gateway_process::wait_listening(confirm_port);
        let confirming_pid = confirming.0.id();
        let script = external::script(dir.path(), &format!("poll-{i}"), &case.body);
        let body = dir.path().join(format!("poll-{i}.json"));
        let target = |port: u16, pid: u32| Target {
            script: script.clone(),
            url: format!("http://127.0.0.1:{port}{}", case.path),
            pids: vec![pid],
        };
        let (floor_target, gateway_target) =
            (target(port, floor_pid), target(gateway, gateway_pid));
        let confirming_target = target(confirm_port, confirming_pid);
        let baseline_target = baseline.map(|(port, pid)| target(port, pid));
        for protocol in [Protocol::Http1, Protocol::Http2] {
            let load = |t: &Target| match protocol {
                Protocol::Http1 => external::wrk(&t.script, &t.url, seconds),
                Protocol::Http2 => h2load(&body, &t.url, seconds, case.status),
            };
            let (floor_m, confirmed, gw, base) = match &baseline_target {
                None => {
                    let targets = [&floor_target, &confirming_target, &gateway_target];
                    let [f, c, g] = external::alternate_with(targets, rounds, load);
                    (f, c, g, None)
                }
                Some(b) => {
                    let targets = [&floor_target, &confirming_target, &gateway_target, b];
                    let [f, c, g, b] = external::alternate_with(targets, rounds, load);
                    (f, c, g, Some(b))
                }
            };
            println!(
                "| {} | {} | {} | {} | {:.2} ({}) | {} | {} |",
                case.name,
                protocol.label(),
                spread_us(&gw),
                spread_us(&floor_m),
                gw.cpu(0) / floor_m.cpu(0),
                min_max(&per_round(&gw, &floor_m), 2),
                gw.rps_text(),
                floor_m.rps_text(),
            );
            println!(
                "| {} (against the floor with the confirm) | {} | (same) | {} | {:.2} ({}) | | {} |",
                case.name,
                protocol.label(),
                spread_us(&confirmed),
                gw.cpu(0) / confirmed.cpu(0),
                min_max(&per_round(&gw, &confirmed), 2),
                confirmed.rps_text(),
            );
            if let Some(base) = &base {
                println!(
                    "| {} (baseline) | {} | {} | (same) | {:.2} ({}) | {} | |",
                    case.name,
                    protocol.label(),
                    spread_us(base),
                    base.cpu(0) / floor_m.cpu(0),
                    min_max(&per_round(base, &floor_m), 2),
                    base.rps_text(),
                );
                compared.push(format!(
                    "{}, {}: this build / baseline = {:.2} ({} by round)",
                    case.name,
                    protocol.label(),
                    gw.cpu(0) / base.cpu(0),
                    min_max(&per_round(&gw, base), 2)
                ));
            }
            let baseline_user = base
                .as_ref()
                .map(|b| format!(", baseline {:.1}", b.user(0)))
                .unwrap_or_default();
            user_part.push(format!(
                "{}, {}: user-space µs/poll (medians; the rest is the kernel's): gateway {:.1}, \
                 floor {:.1}, floor with the confirm {:.1}{baseline_user}",
                case.name,
                protocol.label(),
                gw.user(0),
                floor_m.user(0),
                confirmed.user(0),
            ));
            per_protocol.push((case.name, gw.cpu(0), floor_m.cpu(0)));
        }
        drop(floor);
        drop(confirming);
    }
    println!();
    for line in &compared {
        println!("{line}");
    }
    for line in &user_part {
        println!("{line}");
    }
    for pair in per_protocol.chunks(2) {
        if let [(name, h1, f1), (_, h2, f2)] = pair {
            println!(
                "{name}: HTTP/2 per poll / HTTP/1.1 per poll = {:.2} for the gateway \
                 ({h2:.1} / {h1:.1} µs), {:.2} for the floor ({f2:.1} / {f1:.1} µs)",
                h2 / h1,
                f2 / f1
            );
        }
    }
}

/// "median (min-max)" of the target's CPU per request, in µs.
fn spread_us(m: &Measured) -> String {
    format!("{:.1} ({})", m.cpu(0), min_max(&m.cpu_us[0], 1))
}

fn min_max(values: &[f64], decimals: usize) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{min:.decimals$}-{max:.decimals$}")
}

/// One h2load run of `seconds` posting `body` to `url` over h2c (prior
/// knowledge); panics unless every request was answered with `status`'s
/// class (2xx for a 200, 3xx for a 304) and none failed.
fn h2load(body: &Path, url: &str, seconds: u64, status: u16) -> Run {
    let output = output_within(
        Command::new("h2load")
            .args(["-t1", &format!("-c{H2_CONNECTIONS}")])
            .arg(format!("-m{H2_STREAMS}"))
            .arg(format!("-D{seconds}"))
            .arg("-d")
            .arg(body)
            .args(["-H", "content-type: application/json"])
            .args(["-H", ":authority: xds_cluster"])
            .arg(url),
        Duration::from_secs(seconds + 30),
        "h2load (apt-get install nghttp2-client)",
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "h2load failed: {text}");
    let line = |prefix: &str| -> Vec<f64> {
        let found = text
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in h2load's output:\n{text}"));
        found
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter_map(|w| w.parse::<f64>().ok())
            .collect()
    };
    // "requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed, 0 errored, 0 timeout"
    let requests = line("requests:");
    // "status codes: 1000 2xx, 0 3xx, 0 4xx, 0 5xx"
    let codes = line("status codes:");
    let (done, succeeded) = (requests[2], requests[3]);
    let class = usize::from(status / 100 - 2);
    assert!(
        done > 0.0 && succeeded == done && requests[4..].iter().all(|n| *n == 0.0),
        "{url}: requests failed under load:\n{text}"
    );
    // In timing mode (`-D`) h2load counts the status of a stream that ends
    // just after the main duration but not the stream as done: the status
    // count can exceed "done" by the streams then in flight (nghttp2 issue
    // 1523). Equality, asserted before, failed now and then and ended the
    // bench after its first row. Every answer must still be of `status`'s
    // class, and at least as many as were done.
    let in_flight = (H2_CONNECTIONS * H2_STREAMS) as f64;
    let of_class = codes.get(class).copied().unwrap_or(0.0);
    let others: f64 = codes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != class)
        .map(|(_, n)| n)
        .sum();
    assert!(
        others == 0.0 && of_class >= done && of_class <= done + in_flight,
        "{url}: not every answer was {status}:\n{text}"
    );
    // "finished in 5.00s, 31234.40 req/s, 2.41MB/s"
    let rps = line("finished in")[0];
    Run {
        rps,
        requests: done,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
        transfer: 0.0,
    }
}
