//! A TCP proxy on loopback that misbehaves on command, for fault injection
//! on the link between the gateway and a control plane: it can delay every
//! chunk it forwards, cut every connection it carries, and refuse new ones
//! (accepting and closing them at once, as a host whose service died).
//!
//! Include it with `#[path = "support/faulty_link.rs"] mod faulty_link;`.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The proxy: listening on `port`, forwarding to its target.
pub struct FaultyLink {
    pub port: u16,
    delay_ms: Arc<AtomicU64>,
    refusing: Arc<AtomicBool>,
    /// Bumped to cut every connection open now.
    cuts: watch::Sender<u64>,
    accepting: JoinHandle<()>,
}

impl FaultyLink {
    /// A proxy on a kernel-chosen loopback port forwarding to 127.0.0.1:`target`.
    pub async fn start(target: u16) -> FaultyLink {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the link");
        let port = listener.local_addr().expect("its address").port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let refusing = Arc::new(AtomicBool::new(false));
        let cuts = watch::Sender::new(0u64);
        let accepting = tokio::spawn({
            let (delay_ms, refusing, cuts) = (delay_ms.clone(), refusing.clone(), cuts.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if refusing.load(Ordering::Relaxed) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    tokio::spawn(carry(client, server, delay_ms.clone(), cuts.subscribe()));
                }
            }
        });
        FaultyLink {
            port,
            delay_ms,
            refusing,
            cuts,
            accepting,
        }
    }

    /// `grpc://` address of the link, for an upstream table.
    pub fn address(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk forwarded from now by `delay` (zero: none).
    pub fn delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Closes every connection open now.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Closes new connections at once (`true`), or forwards them again.
    pub fn refuse(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::Relaxed);
        if refusing {
            self.cut();
        }
    }
}

impl Drop for FaultyLink {
    fn drop(&mut self) {
        self.accepting.abort();
        self.cut();
    }
}

/// Forwards both ways until either side closes or the link is cut.
async fn carry(
    client: TcpStream,
    server: TcpStream,
    delay_ms: Arc<AtomicU64>,
    mut cuts: watch::Receiver<u64>,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, delay_ms.clone());
    let down = pump(server_read, client_write, delay_ms);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cuts.changed() => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let delay = delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
