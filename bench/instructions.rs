//! The repeatable part of the per-poll bench (issue 41,
//! `GATEWAY_BENCH=instructions`): user-space instructions per EDS poll of
//! the gateway process and of the floor process ([`external::serve_fixed`]),
//! each run under `valgrind --tool=callgrind`, counted over a fixed number of
//! identical polls. The CPU-time figures of [`crate::per_poll`] move with the
//! load of a shared 2-core machine; an instruction count does not, so it is
//! what a change is judged by before the CPU bench confirms it.
//!
//! How: the server runs under callgrind; `h2load -n` makes [`WARM_UP`] polls,
//! the counters are zeroed (`callgrind_control -z`), `h2load` makes
//! `GATEWAY_POLLS` (2,000) polls, the server is let go idle, and the counters
//! are dumped (`callgrind_control -d`): their total over the polls. HTTP/1.1
//! is `h2load --h1 -c16` (keep-alive, one request at a time per connection,
//! as wrk), HTTP/2 `h2load -c4 -m32` (as in [`crate::per_poll`]).
//!
//! What it does not count: the kernel (receiving, sending, scheduling),
//! which is about half of a poll's CPU time on loopback, so the ratio here
//! is of the user-space parts only; and valgrind runs a process's threads
//! one at a time, so work that depends on two workers racing (wake-ups,
//! stealing) is not as it is natively. The dumps are kept in
//! `GATEWAY_CALLGRIND_DIR` when it is set: `bench/callgrind_self.py` gives
//! their self cost per function per poll.
//!
//! Every child is on loopback, bounded in time and killed by pid.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::external;
use crate::gateway_process::{self, output_within, Guard};
use crate::per_poll;
use crate::Case;

/// Polls made before the counters are zeroed (connections, memo, book).
const WARM_UP: u64 = 200;
/// How long a server under valgrind may take to listen.
const START_LIMIT: Duration = Duration::from_secs(180);

/// Runs every case over both protocols against a gateway and a floor,
/// each under callgrind, and prints instructions per poll.
pub fn part(upstream: &str, cases: &[&Case]) {
    per_poll::require("instructions", "valgrind", "--version", "valgrind");
    per_poll::require("instructions", "h2load", "--version", "nghttp2-client");
    let polls = external::env_number("GATEWAY_POLLS", 2000).max(64);
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::var_os("GATEWAY_CALLGRIND_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&dir).expect("callgrind dir");
    println!(
        "\n## Per poll: user-space instructions (callgrind), gateway against the floor, \
         {polls} polls after {WARM_UP} (dumps in {})\n",
        dir.display()
    );
    println!("| case | protocol | gateway instr/poll | floor instr/poll | gateway/floor |");
    println!("|---|---|---|---|---|");
    let (port, admin) = (gateway_process::free_port(), gateway_process::free_port());
    let mut gateway = Server::start(
        &dir,
        "gateway",
        Command::new(gateway_process::gateway_binary())
            .args(["--upstream", upstream])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .env("TOKIO_WORKER_THREADS", "2")
            .env("RUST_LOG", "warn"),
        port,
    );
    for (i, case) in cases.iter().enumerate() {
        let answer = dir.join(format!("answer-{i}"));
        std::fs::write(&answer, &case.answer).expect("write the answer");
        let body = dir.join(format!("poll-{i}.json"));
        std::fs::write(&body, &case.body).expect("write the body");
        let floor_port = gateway_process::free_port();
        let mut floor = Server::start(
            &dir,
            &format!("floor-{i}"),
            Command::new(std::env::current_exe().expect("this bench's path")).env(
                external::RAW_SERVER_ENV,
                format!("{floor_port} {} {}", case.status, answer.display()),
            ),
            floor_port,
        );
        for h1 in [true, false] {
            let gw = gateway.per_poll(&body, case, h1, polls);
            let fl = floor.per_poll(&body, case, h1, polls);
            println!(
                "| {} | {} | {gw:.0} | {fl:.0} | {:.3} |",
                case.name,
                if h1 {
                    "HTTP/1.1 (h2load --h1 -c16)"
                } else {
                    "HTTP/2 (h2load -c4 -m32)"
                },
                gw / fl
            );
        }
        drop(floor);
    }
}

/// A server process under callgrind.
struct Server {
    guard: Guard,
    port: u16,
    /// Its callgrind output file (dumps are this with `.1`, `.2`, ...).
    out: PathBuf,
    dumps: u32,
    name: String,
}

impl Server {
    fn start(dir: &Path, name: &str, command: &mut Command, port: u16) -> Server {
        let out = dir.join(format!("{name}.callgrind"));
        let program = command.get_program().to_owned();
        let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
        let envs: Vec<_> = command
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
            .collect();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        let child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(program)
            .args(args)
            .envs(envs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start valgrind");
        let guard = Guard(child);
        gateway_process::wait_listening_within(port, START_LIMIT);
        Server {
            guard,
            port,
            out,
            dumps: 0,
            name: name.to_owned(),
        }
    }

    /// Instructions per poll of `polls` polls of `case` (after [`WARM_UP`]).
    fn per_poll(&mut self, body: &Path, case: &Case, h1: bool, polls: u64) -> f64 {
        let url = format!("http://127.0.0.1:{}{}", self.port, case.path);
        h2load(body, &url, h1, WARM_UP, case.status);
        self.idle();
        self.control("-z");
        h2load(body, &url, h1, polls, case.status);
        self.idle();
        self.control("-d");
        self.dumps += 1;
        let dump = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        let text = std::fs::read_to_string(&dump)
            .unwrap_or_else(|e| panic!("{}: no dump {}: {e}", self.name, dump.display()));
        let total: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("totals:"))
            .and_then(|t| t.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no totals in {}", dump.display()));
        total / polls as f64
    }

    /// Waits until the server has used no CPU for a while (its connections'
    /// ends handled), at most 10 s.
    fn idle(&self) {
        let pid = self.guard.0.id();
        for _ in 0..20 {
            let before = gateway_process::cpu_time(pid);
            std::thread::sleep(Duration::from_millis(500));
            if gateway_process::cpu_time(pid).saturating_sub(before) <= Duration::from_millis(10) {
                return;
            }
        }
    }

    fn control(&self, what: &str) {
        let out = output_within(
            Command::new("callgrind_control")
                .arg(what)
                .arg(self.guard.0.id().to_string()),
            Duration::from_secs(60),
            "callgrind_control (apt-get install valgrind)",
        );
        assert!(
            out.status.success(),
            "callgrind_control {what}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `h2load -n polls` posting `body` to `url`; panics unless every request
/// was answered with `status`'s class.
fn h2load(body: &Path, url: &str, h1: bool, polls: u64, status: u16) {
    let mut command = Command::new("h2load");
    if h1 {
        command.args(["--h1", "-c16", "-m1"]);
    } else {
        command.args(["-c4", "-m32"]);
    }
    let output = output_within(
        command
            .args(["-t1", &format!("-n{polls}")])
            .arg("-d")
            .arg(body)
            .args(["-H", "content-type: application/json"])
            .args(["-H", ":authority: xds_cluster"])
            .arg(url),
        Duration::from_secs(600),
        "h2load (apt-get install nghttp2-client)",
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let want = format!("{polls} succeeded, 0 failed, 0 errored, 0 timeout");
    let class = format!("{polls} {}xx", status / 100);
    assert!(
        output.status.success() && text.contains(&want) && text.contains(&class),
        "{url}: not {polls} answers of {status}:\n{text}"
    );
}
