//! Children of the identities bench's own binary (the stream reader, the
//! floor server): started with one environment variable that tells `main`
//! which one to be, spoken to by lines on stdin and stdout, killed when
//! dropped. Their CPU is their own, apart from the bench's.

use std::io::Write;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// A child as its parent sees it.
pub struct BenchChild {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl BenchChild {
    /// Starts this bench's binary with `var=spec` (`what` names it in a
    /// panic if it cannot start).
    pub fn start(var: &str, spec: &str, what: &str) -> BenchChild {
        let exe = std::env::current_exe().expect("this bench's binary");
        let mut child = tokio::process::Command::new(exe)
            .env(var, spec)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {what}: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        BenchChild {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("a running child")
    }

    /// Waits (at most `within`) for the line starting with `word`; its rest.
    pub async fn line(&mut self, word: &str, within: Duration) -> Option<String> {
        let read = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                if let Some(rest) = line.strip_prefix(word) {
                    return Some(rest.trim().to_owned());
                }
            }
            None
        };
        tokio::time::timeout(within, read).await.ok().flatten()
    }

    /// Sends one line to the child; whether it could.
    pub async fn tell(&mut self, line: &str) -> bool {
        let line = format!("{line}\n");
        self.stdin.write_all(line.as_bytes()).await.is_ok() && self.stdin.flush().await.is_ok()
    }
}

/// The runtime of the bench and of its children: two worker threads, as
/// the gateway has.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A line from the child to its parent.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
