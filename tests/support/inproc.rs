//! The gateway run in process (`xds_gateway::app::run`) on kernel-chosen
//! loopback ports, stopped when the handle drops; and raw TCP helpers for
//! tests that misbehave on purpose (half-sent headers, slow bodies, idle
//! connections), which an HTTP client library would not let them do.
//!
//! Include it with `#[path = "support/inproc.rs"] mod inproc;`.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xds_gateway::config::Config;

/// A gateway running in this process.
pub struct InProcess {
    pub rest_port: u16,
    pub admin_port: u16,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl InProcess {
    /// Runs the gateway with `config` (its listen/admin addresses are
    /// replaced by 127.0.0.1:0).
    pub async fn start(config: Config) -> InProcess {
        let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind REST");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let (rest_port, admin_port) = (
            rest.local_addr().unwrap().port(),
            admin.local_addr().unwrap().port(),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            xds_gateway::app::run(config, rest, admin, async move {
                let _ = stopped.await;
            })
            .await
            .expect("the gateway failed");
        });
        InProcess {
            rest_port,
            admin_port,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops it and waits (bounded) for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the gateway did not stop within 30 s")
                .expect("the gateway task");
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A raw connection to 127.0.0.1:`port`.
pub async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the gateway")
}

/// Writes `bytes` (panics if the connection already refuses them).
pub async fn send(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).await.expect("write to the gateway");
}

/// What the server sent until it closed the connection, or `None` if it
/// was still open after `within`.
pub async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}
