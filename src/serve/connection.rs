//! One accepted connection, from the TLS handshake to its close: HTTP
//! served by hyper over a [`CountedIo`] transport (reading through
//! [`ReadAhead`]), its HTTP/2 streams run on its own task ([`Driven`]),
//! closed when it idles out,
//! when a stream on it stalls (its client stopped reading), or, at
//! shutdown, gracefully within the drain timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::activity::Activity;
use super::counted::CountedIo;
use super::service::{RemoteAddr, TrackedService};
use super::streams::{Driven, StreamQueue};
use super::ServeLimits;
use crate::log_escape::Escaped;
use crate::read_ahead::ReadAhead;
use crate::tls::{PeerIdentity, ServerTls};

/// How often a connection checks whether it has idled out, at most.
pub(super) const IDLE_CHECK_MAX: Duration = Duration::from_secs(1);

/// What one accepted connection needs.
pub(super) struct Connection {
    pub(super) router: Router,
    pub(super) limits: Arc<ServeLimits>,
    pub(super) tls: Option<Arc<ServerTls>>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) name: &'static str,
    pub(super) peer: SocketAddr,
}

impl Connection {
    pub(super) async fn run(self, stream: TcpStream) {
        let Some(tls) = self.tls.clone() else {
            return self.serve(ReadAhead::http2_only(stream), None).await;
        };
        let handshake = tls.acceptor().accept(ReadAhead::new(stream));
        match tokio::time::timeout(self.limits.header_read_timeout, handshake).await {
            Ok(Ok(stream)) => {
                let identity = PeerIdentity::of(stream.get_ref().1).map(Arc::new);
                self.serve(stream, identity).await;
            }
            Ok(Err(e)) => {
                debug!(listener = self.name, peer = %self.peer, error = %Escaped(&e), "TLS handshake failed")
            }
            Err(_) => debug!(listener = self.name, peer = %self.peer, "TLS handshake timed out"),
        }
    }

    /// Serves HTTP on `io` until the client closes, the connection idles
    /// out, or shutdown.
    async fn serve<I>(mut self, io: I, identity: Option<Arc<PeerIdentity>>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::new());
        let service = TrackedService {
            router: self.router.clone(),
            activity: activity.clone(),
            identity,
            remote: RemoteAddr(self.peer),
        };
        let io = CountedIo {
            inner: io,
            activity: activity.clone(),
        };
        let limits = self.limits.clone();
        // HTTP/1.1 and HTTP/2 with the listener's limits, its HTTP/2
        // streams run on its own task.
        let queue = StreamQueue::default();
        let mut builder = auto::Builder::new(queue.clone());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.max_streams_per_connection);
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        let mut conn = Driven::new(conn, queue);
        let check_every = (limits.keep_alive_timeout / 4)
            .min(limits.header_read_timeout / 4)
            .clamp(Duration::from_millis(10), IDLE_CHECK_MAX);
        let mut closing_by: Option<Instant> = None;
        let mut tick = tokio::time::interval(check_every);
        loop {
            tokio::select! {
                result = &mut conn => {
                    if let Err(e) = result {
                        debug!(listener = self.name, peer = %self.peer, error = %Escaped(&e), "connection ended");
                    }
                    return;
                }
                stopped = self.stop.wait_for(|s| *s), if closing_by.is_none() => {
                    let _ = stopped;
                    conn.conn().graceful_shutdown();
                    closing_by = Some(Instant::now() + limits.drain_timeout);
                }
                _ = tick.tick() => {
                    let now = Instant::now();
                    if activity.stalled_for(now) >= limits.write_stall_timeout {
                        warn!(
                            listener = self.name, peer = %self.peer,
                            stalled_for = ?limits.write_stall_timeout,
                            "closing a connection whose stream has not been read (the client stopped reading)"
                        );
                        return;
                    }
                    match closing_by {
                        Some(deadline) if now >= deadline => {
                            debug!(listener = self.name, peer = %self.peer, "connection closed: did not finish in time");
                            return;
                        }
                        Some(_) => {}
                        None if activity.close_requested() => {
                            debug!(listener = self.name, peer = %self.peer, "closing a connection after a 401");
                            conn.conn().graceful_shutdown();
                            closing_by = Some(now + limits.header_read_timeout);
                        }
                        None => {
                            let limit = if activity.started_any() {
                                limits.keep_alive_timeout
                            } else {
                                limits.header_read_timeout
                            };
                            if activity.idle_for(now) >= limit {
                                debug!(listener = self.name, peer = %self.peer, "connection idle: closing");
                                conn.conn().graceful_shutdown();
                                closing_by = Some(now + limits.header_read_timeout);
                            }
                        }
                    }
                }
            }
        }
    }
}
