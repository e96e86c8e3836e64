//! The external measurement of the gateway bench: `wrk` (Debian's package),
//! one thread and 16 keep-alive connections posting a body from a file,
//! against a server in its own process, the way a fleet loads it. The
//! baseline server is this bench binary run again as a child in
//! [`raw_server_main`] mode: a minimal hyper server on 2 worker threads that
//! reads the whole body and answers fixed bytes (the gateway's own answer).
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
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::gateway_process::Guard;

/// Set in the child that runs the baseline: `PORT STATUS ANSWER_FILE`.
const RAW_SERVER_ENV: &str = "XDS_BENCH_RAW_SERVER";
/// wrk's connections; its thread count is 1.
const CONNECTIONS: usize = 16;

/// If this process is the baseline child, serves until killed and returns
/// true; the bench's `main` calls it first.
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
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(raw_server(port, status, answer));
    true
}

async fn raw_server(port: u16, status: StatusCode, answer: Bytes) {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = answer.clone();
                async move {
                    let _ = req.into_body().collect().await;
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
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Starts the baseline child answering `status` with `answer` on `port`.
pub fn start_raw_server(dir: &Path, port: u16, status: u16, answer: &[u8]) -> Guard {
    let file = dir.join(format!("answer-{port}"));
    std::fs::write(&file, answer).expect("write the answer");
    let exe = std::env::current_exe().expect("this bench's path");
    let child = Command::new(exe)
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
    pub p50: Duration,
    pub p99: Duration,
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

/// One wrk run of `seconds` against `url`; panics if any answer was not
/// 2xx/3xx or a socket error happened (a fast error is not a fast answer).
pub fn wrk(script: &Path, url: &str, seconds: u64) -> Run {
    let output = Command::new("wrk")
        .args(["-t1", &format!("-c{CONNECTIONS}"), &format!("-d{seconds}s")])
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run wrk ({e}): apt-get install wrk"));
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
    Run {
        rps: field("Requests/sec:").parse().expect("Requests/sec"),
        p50: duration(field("50%")),
        p99: duration(field("99%")),
    }
}

/// wrk's "1.23ms" / "850.00us" / "1.02s".
fn duration(text: &str) -> Duration {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().unwrap_or_else(|_| panic!("{text:?}"));
    let seconds = match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => panic!("unit of {text:?}"),
    };
    Duration::from_secs_f64(seconds)
}

/// The median of `values` (sorted in place).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
