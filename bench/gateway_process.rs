//! The gateway binary and other children of a bench: started on loopback,
//! ended by process id when their guard drops.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process, killed and reaped by pid when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `command` (stdin closed, stdout and stderr captured) and returns
/// what it printed; panics if it cannot start (`what` says what it is and
/// how to install it), and kills it by pid and panics if it runs longer
/// than `limit`.
#[allow(dead_code)] // used by some benches only
pub fn output_within(command: &mut Command, limit: Duration, what: &str) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    use std::io::Read as _;
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} ran longer than {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Waits until something accepts connections on `port`.
#[allow(dead_code)] // used by some benches only
pub fn wait_listening(port: u16) {
    wait_listening_within(port, Duration::from_secs(20));
}

/// [`wait_listening`] with a limit of `limit` (a server under valgrind
/// takes minutes to start).
#[allow(dead_code)] // used by some benches only
pub fn wait_listening_within(port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The gateway binary benchmarked: this build's, or `$XDS_GATEWAY_BIN`
/// (another build, to compare two commits on one machine back to back).
pub fn gateway_binary() -> std::path::PathBuf {
    std::env::var_os("XDS_GATEWAY_BIN")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_xds-gateway").into())
}

/// Starts the gateway binary ([`gateway_binary`]) on `port`/`admin` in
/// front of `upstream`, on 2 worker threads, logging to `log`.
#[allow(dead_code)] // used by some benches only
pub fn start_gateway(upstream: &str, port: u16, admin: u16, log: &Path) -> Guard {
    start_gateway_with(&gateway_binary(), &[], upstream, port, admin, log)
}

/// [`start_gateway`] with the binary `bin` and more arguments `extra`.
#[allow(dead_code)] // used by some benches only
pub fn start_gateway_with(
    bin: &Path,
    extra: &[&str],
    upstream: &str,
    port: u16,
    admin: u16,
    log: &Path,
) -> Guard {
    let log = std::fs::File::create(log).expect("gateway log");
    let child = Command::new(bin)
        .args(extra)
        .args(["--upstream", upstream])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .env("TOKIO_WORKER_THREADS", "2")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the gateway binary");
    Guard(child)
}

/// Starts the gateway as [`start_gateway_with`] does, on free ports, and
/// waits until it listens; if it exits first, starts it again on other
/// ports (a port found free can be taken before the gateway binds it: by an
/// outgoing connection's ephemeral port, with 1,000 clients about). Panics
/// with the gateway's log after three tries, or when a live gateway does
/// not listen within 20 s.
#[allow(dead_code)] // used by some benches only
pub fn start_gateway_listening(
    bin: &Path,
    extra: &[&str],
    upstream: &str,
    log: &Path,
) -> (Guard, u16, u16) {
    let logged = || std::fs::read_to_string(log).unwrap_or_default();
    for attempt in 1..=3 {
        let (port, admin) = (free_port(), free_port());
        let mut gateway = start_gateway_with(bin, extra, upstream, port, admin, log);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = gateway.0.try_wait() {
                eprintln!(
                    "the gateway exited ({status}) before it listened on {port} (try {attempt}):\n{}",
                    logged()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nothing listens on {port}:\n{}",
                logged()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (gateway, port, admin);
        }
    }
    panic!("the gateway never started:\n{}", logged());
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a: SocketAddr| a.port())
        .expect("a free port")
}

/// CPU time (user + system) process `pid` has used so far (Linux `/proc`,
/// clock ticks of 10 ms).
#[allow(dead_code)] // used by some benches only
pub fn cpu_time(pid: u32) -> Duration {
    user_time(pid) + system_time(pid)
}

/// The user-space part of [`cpu_time`].
#[allow(dead_code)] // used by some benches only
pub fn user_time(pid: u32) -> Duration {
    stat_ticks(pid, 11)
}

/// The kernel part of [`cpu_time`].
#[allow(dead_code)] // used by some benches only
pub fn system_time(pid: u32) -> Duration {
    stat_ticks(pid, 12)
}

/// Field `i` after the command name of `/proc/PID/stat`, as clock ticks of
/// 10 ms.
fn stat_ticks(pid: u32, i: usize) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    // Fields after the command name (which may hold spaces) in parentheses.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after ")".
    Duration::from_millis(ticks(i) * 10)
}

/// The CPU time every process of the machine has used since boot
/// (`/proc/stat`: user, nice, system, irq, softirq and steal; not idle or
/// iowait), in all cores.
#[allow(dead_code)] // used by some benches only
pub fn machine_busy_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let first = stat.lines().next().unwrap_or_default();
    let ticks: Vec<u64> = first
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| ticks.get(i).copied().unwrap_or(0))
        .sum();
    Duration::from_millis(busy * 10)
}

/// The resident set size of process `pid`, in bytes (Linux `/proc`).
#[allow(dead_code)] // used by some benches only
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}
