//! Log lines and client-chosen values (issue 20, finding 7): a node id
//! holding a newline and an ANSI escape, polled from the gateway run in
//! process on loopback, is logged in the text format as one line with both
//! escaped. The log is captured with the formatter the binary uses for
//! `--log-format text` (`tracing_subscriber::fmt`, no colours: stderr not a
//! terminal), writing into memory.
//!
//! This binary holds this one test because it installs the process-wide
//! subscriber: a thread-scoped one misses events whose callsites another
//! test's thread registered first (tracing caches callsite interest).

#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::io;
use std::sync::{Arc, Mutex};

use inproc::InProcess;
use process::http_get;
use xds_gateway::config::Config;

/// Log output written into memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_node_id_with_a_newline_and_an_escape_is_one_escaped_log_line() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish(),
    )
    .expect("the only subscriber of this test binary");
    let gateway = InProcess::start(Config::default()).await;

    // node id "evil\n<a forged line>\x1b[31m", cluster "c\rx"
    let path = "/v3/discovery:clusters?node=evil%0A2026-01-01T00:00:00Z%20INFO%20forged%1B%5B31m\
                &cluster=c%0Dx";
    let (status, body) = http_get(gateway.rest_port, path).await.expect("a response");
    assert_eq!(status, 200, "{body}");
    gateway.stop().await;

    let text = captured.text();
    let opened: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("session opened"))
        .collect();
    assert_eq!(opened.len(), 1, "{text}");
    assert!(
        opened[0].contains(r"node=evil\n2026-01-01T00:00:00Z INFO forged\u{1b}[31m"),
        "{text}"
    );
    assert!(opened[0].contains(r"cluster=c\rx"), "{text}");
    // Nothing raw got through, and no line starts where the node id's did.
    assert!(!text.contains(['\x1b', '\r']), "{text:?}");
    assert!(
        !text.lines().any(|l| l.starts_with("2026-01-01T00:00:00Z")),
        "{text}"
    );
}
