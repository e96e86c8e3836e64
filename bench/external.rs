//! The external measurement of the gateway and peers benches: `wrk` (Debian's package),
//! one thread and 16 keep-alive connections posting a body from a file,
//! against a server in its own process, the way a fleet loads it. The
//! baseline server is this bench binary run again as a child in
//! [`raw_server_main`] mode: a minimal hyper server on 2 worker threads that
//! reads the whole body and answers fixed bytes (the gateway's own answer),
//! over HTTP/1.1 or HTTP/2 (h2c, prior knowledge) as the gateway does
//! (hyper-util's `auto` builder).
//!
//! Nothing here binds anything but loopback, and every child is ended by its
//! process id when its guard drops.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::gateway_process::{cpu_time, output_within, user_time, Guard};

/// Set in the child that runs the baseline: `PORT STATUS ANSWER_FILE`.
pub const RAW_SERVER_ENV: &str = "XDS_BENCH_RAW_SERVER";
/// Set (to anything) for a baseline child that confirms each body
/// ([`Reading::Confirmed`]).
const RAW_SERVER_CONFIRM_ENV: &str = "XDS_BENCH_RAW_SERVER_CONFIRM";
/// wrk's connections; its thread count is 1.
const CONNECTIONS: usize = 16;

/// If this process is the baseline child, serves until killed and returns
/// true; the bench's `main` calls it first.
#[allow(dead_code)] // used by some benches only
pub fn raw_server_main() -> bool {
    let Ok(spec) = std::env::var(RAW_SERVER_ENV) else {
        return false;
    };
    let mut parts = spec.splitn(3, ' ');
    let (Some(port), Some(status), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("{RAW_SERVER_ENV}: want 'PORT STATUS FILE', got {spec:?}");
    };
    let port: u16 = port.parse().expect("port");
    let status = StatusCode::from_u16(status.parse().expect("status")).expect("status");
    let answer = Bytes::from(std::fs::read(file).expect("answer file"));
    let reading = match std::env::var_os(RAW_SERVER_CONFIRM_ENV) {
        Some(_) => Reading::Confirmed,
        None => Reading::Whole,
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(raw_server(port, status, answer, reading));
    true
}

async fn raw_server(port: u16, status: StatusCode, answer: Bytes, reading: Reading) {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    serve_fixed_reading(listener, status, answer, reading).await;
}

/// What a baseline server does with a request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Reads it whole, and looks at none of its bytes (hyper hands them
    /// over as they were received).
    Whole,
    /// Reads it whole, then compares it byte for byte with the body it
    /// was sent last (kept when they differ): the one pass over a
    /// request's bytes that a memo hit of the gateway must make to be
    /// safe, and nothing else of the gateway's work.
    Confirmed,
}

/// The baseline: accepts on `listener` forever; every request's whole body
/// is read, then answered `status` with `answer` (no body for a 304).
/// HTTP/1.1 and HTTP/2 with prior knowledge (h2c), as the gateway serves.
#[allow(dead_code)] // used by some benches only
pub async fn serve_fixed(listener: TcpListener, status: StatusCode, answer: Bytes) {
    serve_fixed_reading(listener, status, answer, Reading::Whole).await;
}

/// [`serve_fixed`], doing `reading` with each body.
pub async fn serve_fixed_reading(
    listener: TcpListener,
    status: StatusCode,
    answer: Bytes,
    reading: Reading,
) {
    let builder = std::sync::Arc::new(auto::Builder::new(TokioExecutor::new()));
    // The body sent last, held only by a server that confirms: the plain
    // floor's requests clone nothing but the answer.
    let last = (reading == Reading::Confirmed)
        .then(|| std::sync::Arc::new(std::sync::Mutex::new(Bytes::new())));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (answer, builder, last) = (answer.clone(), builder.clone(), last.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (answer, last) = (answer.clone(), last.clone());
                async move {
                    match &last {
                        None => {
                            let _ = req.into_body().collect().await;
                        }
                        Some(last) => {
                            let mut body = req.into_body();
                            let mut pieces = Vec::new();
                            while let Some(Ok(frame)) = body.frame().await {
                                pieces.extend(frame.into_data().ok());
                            }
                            confirm(last, pieces);
                        }
                    }
                    let mut response = Response::builder()
                        .status(status)
                        .header("content-type", "application/json");
                    let body = if status == StatusCode::NOT_MODIFIED {
                        Bytes::new()
                    } else {
                        response = response.header("etag", "\"v\"");
                        answer
                    };
                    Ok::<_, Infallible>(response.body(Full::new(body)).expect("response"))
                }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Compares `body`, in the pieces it was received in, with the body `last`
/// holds, byte for byte; a body that differs is held in its place.
fn confirm(last: &std::sync::Mutex<Bytes>, pieces: Vec<Bytes>) {
    let held = last.lock().expect("last body").clone();
    let mut rest = &held[..];
    // The lengths agree, so each piece's split of what is left is in range.
    let same = pieces.iter().map(Bytes::len).sum::<usize>() == held.len()
        && pieces.iter().all(|piece| {
            let (head, tail) = rest.split_at(piece.len());
            rest = tail;
            head == &piece[..]
        });
    if !std::hint::black_box(same) {
        *last.lock().expect("last body") = Bytes::from(pieces.concat());
    }
}

/// Starts the baseline child answering `status` with `answer` on `port`.
#[allow(dead_code)] // used by some benches only
pub fn start_raw_server(dir: &Path, port: u16, status: u16, answer: &[u8]) -> Guard {
    start_raw_server_reading(dir, port, status, answer, Reading::Whole)
}

/// [`start_raw_server`], the child doing `reading` with each body.
#[allow(dead_code)] // used by some benches only
pub fn start_raw_server_reading(
    dir: &Path,
    port: u16,
    status: u16,
    answer: &[u8],
    reading: Reading,
) -> Guard {
    let file = dir.join(format!("answer-{port}"));
    std::fs::write(&file, answer).expect("write the answer");
    let exe = std::env::current_exe().expect("this bench's path");
    let mut command = Command::new(exe);
    if reading == Reading::Confirmed {
        command.env(RAW_SERVER_CONFIRM_ENV, "1");
    }
    let child = command
        .env(
            RAW_SERVER_ENV,
            format!("{port} {status} {}", file.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the baseline server");
    Guard(child)
}

/// What one wrk run measured.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub rps: f64,
    /// Requests answered in the run (what CPU is divided by).
    pub requests: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// Bytes read per second, headers included (wrk's Transfer/sec).
    #[allow(dead_code)] // used by some benches only
    pub transfer: f64,
}

impl Run {
    /// Bytes on the wire per response, headers included.
    #[allow(dead_code)] // used by some benches only
    pub fn bytes_per_response(&self) -> f64 {
        self.transfer / self.rps.max(1.0)
    }
}

/// The captured Envoy 1.40 request, re-targeted: empty version (a 200 every
/// time), the given type and names, the real 77 KB node.
pub fn request_body(type_url: &str, names: &[&str]) -> Bytes {
    let raw = std::fs::read("bench/fixtures/envoy-1.40-cds-request.json")
        .expect("captured Envoy request");
    let mut v: serde_json::Value = serde_json::from_slice(&raw).expect("captured request is JSON");
    v["version_info"] = "".into();
    v["type_url"] = type_url.into();
    v["resource_names"] = names.iter().map(|n| serde_json::Value::from(*n)).collect();
    Bytes::from(serde_json::to_vec(&v).expect("serialise"))
}

/// The bench snapshot's cluster `i` (JSON `Any`): EDS over ADS.
pub fn cluster(i: usize) -> serde_json::Value {
    serde_json::json!({"@type": xds_gateway::xds::ResourceType::Clusters.type_url(),
        "name": format!("cluster-{i}"), "type": "EDS", "connect_timeout": "1s",
        "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
        "circuit_breakers": {"thresholds": [{"max_connections": i}]}})
}

/// The bench snapshot's one ClusterLoadAssignment (JSON `Any`), for
/// `cluster-0`, one endpoint on `port`.
pub fn endpoints(port: u32) -> serde_json::Value {
    serde_json::json!({"@type": xds_gateway::xds::ResourceType::Endpoints.type_url(),
        "cluster_name": "cluster-0", "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
            {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]})
}

/// `body` presenting `version`.
pub fn presenting(body: &Bytes, version: &str) -> Bytes {
    let mut v: serde_json::Value = serde_json::from_slice(body).expect("JSON body");
    v["version_info"] = version.into();
    Bytes::from(serde_json::to_vec(&v).expect("serialise"))
}

/// A number from the environment, else `default`.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One side of an alternating comparison: what wrk posts where, and the
/// processes whose CPU is counted per request.
pub struct Target {
    pub script: PathBuf,
    pub url: String,
    pub pids: Vec<u32>,
}

/// What the rounds measured against one [`Target`].
#[derive(Default)]
pub struct Measured {
    pub runs: Vec<Run>,
    /// Per pid of the target, the CPU (user + system) per request of each
    /// round, in µs.
    pub cpu_us: Vec<Vec<f64>>,
    /// The user-space part of [`Self::cpu_us`].
    pub user_us: Vec<Vec<f64>>,
}

impl Measured {
    /// Median requests per second.
    pub fn rps(&self) -> f64 {
        median(&mut self.runs.iter().map(|r| r.rps).collect::<Vec<_>>())
    }

    /// "median (min-max)" requests per second.
    pub fn rps_text(&self) -> String {
        let mut rps: Vec<f64> = self.runs.iter().map(|r| r.rps).collect();
        let m = median(&mut rps);
        format!("{m:.0} ({:.0}-{:.0})", rps[0], rps[rps.len() - 1])
    }

    /// Medians of p50 and p99, in ms.
    pub fn latency_ms(&self) -> (f64, f64) {
        let ms = |f: fn(&Run) -> Duration| {
            median(
                &mut self
                    .runs
                    .iter()
                    .map(|r| f(r).as_secs_f64() * 1e3)
                    .collect::<Vec<_>>(),
            )
        };
        (ms(|r| r.p50), ms(|r| r.p99))
    }

    /// Median CPU per request of the target's `i`th pid, in µs.
    pub fn cpu(&self, i: usize) -> f64 {
        median(&mut self.cpu_us[i].clone())
    }

    /// Median user-space CPU per request of the target's `i`th pid, in µs.
    #[allow(dead_code)] // used by some benches only
    pub fn user(&self, i: usize) -> f64 {
        median(&mut self.user_us[i].clone())
    }

    /// Median bytes on the wire per response.
    #[allow(dead_code)] // used by some benches only
    pub fn bytes_per_response(&self) -> f64 {
        median(
            &mut self
                .runs
                .iter()
                .map(Run::bytes_per_response)
                .collect::<Vec<_>>(),
        )
    }
}

/// `rounds` wrk runs of `seconds` against each target, alternating which
/// goes first (the first target in even rounds), so that drift in the
/// machine's load does not favour one side. Before each run, every process
/// of both targets is let [`settle`], so that one run's tail (requests still
/// in flight when wrk stops, a garbage collector) is not counted in the next.
pub fn alternate(targets: [&Target; 2], rounds: u64, seconds: u64) -> [Measured; 2] {
    alternate_with(targets, rounds, |t| wrk(&t.script, &t.url, seconds))
}

/// [`alternate`] with another load generator and any number of targets:
/// `load` runs one round against a target and says what it measured. Two
/// targets swap places each round; more take turns going first.
pub fn alternate_with<const N: usize>(
    targets: [&Target; N],
    rounds: u64,
    mut load: impl FnMut(&Target) -> Run,
) -> [Measured; N] {
    let all: Vec<u32> = targets.iter().flat_map(|t| t.pids.clone()).collect();
    let mut measured: [Measured; N] = std::array::from_fn(|_| Measured::default());
    for (m, t) in measured.iter_mut().zip(targets) {
        m.cpu_us = vec![Vec::new(); t.pids.len()];
        m.user_us = vec![Vec::new(); t.pids.len()];
    }
    for round in 0..rounds {
        let order: Vec<usize> = if N == 2 && round % 2 == 1 {
            (0..N).rev().collect()
        } else {
            (0..N).map(|i| (i + round as usize) % N).collect()
        };
        for i in order {
            let target = targets[i];
            settle(&all);
            let before: Vec<Duration> = target.pids.iter().map(|&p| cpu_time(p)).collect();
            let user_before: Vec<Duration> = target.pids.iter().map(|&p| user_time(p)).collect();
            let run = load(target);
            let requests = run.requests.max(1.0);
            for (j, &pid) in target.pids.iter().enumerate() {
                let used = cpu_time(pid).saturating_sub(before[j]);
                measured[i].cpu_us[j].push(used.as_secs_f64() * 1e6 / requests);
                let user = user_time(pid).saturating_sub(user_before[j]);
                measured[i].user_us[j].push(user.as_secs_f64() * 1e6 / requests);
            }
            measured[i].runs.push(run);
        }
    }
    measured
}

/// A wrk Lua script that POSTs the bytes of `body` (JSON) to every URL.
pub fn script(dir: &Path, name: &str, body: &[u8]) -> PathBuf {
    let body_file = dir.join(format!("{name}.json"));
    std::fs::write(&body_file, body).expect("write the body");
    let script = dir.join(format!("{name}.lua"));
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\n\
             wrk.headers[\"Content-Type\"] = \"application/json\"\n\
             wrk.headers[\"Host\"] = \"xds_cluster\"\n\
             local f = assert(io.open({:?}, \"rb\"))\n\
             wrk.body = f:read(\"*a\")\n\
             f:close()\n",
            body_file.display().to_string()
        ),
    )
    .expect("write the script");
    script
}

/// Waits (at most 3 s) until `pids` together use under one clock tick
/// (10 ms) of CPU in 200 ms.
fn settle(pids: &[u32]) {
    let total = || pids.iter().map(|&p| cpu_time(p)).sum::<Duration>();
    for _ in 0..15 {
        let before = total();
        std::thread::sleep(Duration::from_millis(200));
        if total().saturating_sub(before) < Duration::from_millis(10) {
            return;
        }
    }
}

/// One wrk run of `seconds` against `url`; panics if any answer was not
/// 2xx/3xx or a socket error happened (a fast error is not a fast answer).
pub fn wrk(script: &Path, url: &str, seconds: u64) -> Run {
    let output = output_within(
        Command::new("wrk")
            .args(["-t1", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
            .arg("--latency")
            .arg("-s")
            .arg(script)
            .arg(url),
        Duration::from_secs(seconds + 30),
        "wrk (apt-get install wrk)",
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "wrk failed: {text}");
    assert!(
        !text.contains("Non-2xx or 3xx") && !text.contains("Socket errors"),
        "{url}: errors under load:\n{text}"
    );
    let field = |label: &str| -> &str {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} in wrk's output:\n{text}"))
            .trim()
    };
    // "  123456 requests in 5.00s, 9.12GB read"
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no request count in wrk's output:\n{text}"));
    Run {
        rps: field("Requests/sec:").parse().expect("Requests/sec"),
        requests,
        p50: duration(field("50%")),
        p99: duration(field("99%")),
        transfer: bytes(field("Transfer/sec:")),
    }
}

/// wrk's "1.23ms" / "850.00us" / "1.02s".
fn duration(text: &str) -> Duration {
    let (number, unit) = number_and_unit(text);
    let seconds = match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => panic!("unit of {text:?}"),
    };
    Duration::from_secs_f64(seconds)
}

/// wrk's "12.34MB" (binary units).
fn bytes(text: &str) -> f64 {
    let (number, unit) = number_and_unit(text);
    let scale = match unit {
        "B" | "" => 1.0,
        "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        _ => panic!("unit of {text:?}"),
    };
    number * scale
}

/// "1.23ms" → (1.23, "ms").
fn number_and_unit(text: &str) -> (f64, &str) {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    (number.parse().unwrap_or_else(|_| panic!("{text:?}")), unit)
}

/// The median of `values` (sorted in place).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
