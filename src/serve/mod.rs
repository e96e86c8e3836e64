//! Serving one listener (REST or admin) with limits that hold under abuse:
//! a bound [`TcpListener`], a router, [`ServeLimits`] and a shutdown future
//! in; one accept loop out. Both listeners run their own loop with their own
//! limits, so a saturated REST listener never starves the admin one.
//!
//! What it enforces (hyper and hyper-util do the protocol; the rest is here,
//! because neither has it):
//! - at most `max_connections` open connections; one more is answered a
//!   JSON 503 (`Connection: close`, over TLS too) and closed, and counted;
//! - HTTP/1 request heads within `header_read_timeout` (hyper's timer: it
//!   runs from the end of the previous response too, so it is also the
//!   HTTP/1 keep-alive idle bound), the TLS handshake and a connection's
//!   first request within the same time;
//! - any connection with no request in flight (a request is in flight until
//!   its response head is ready; one marked [`Streaming`], a watch, until
//!   its body ends) for `keep_alive_timeout`
//!   (HTTP/2 included) is shut down gracefully, then closed if it still
//!   has not finished (a client that does not read its response) one
//!   `header_read_timeout` later;
//! - a connection with a stream open (a watch) that has written nothing
//!   for `write_stall_timeout` is closed: its client stopped reading (a
//!   watch writes a heartbeat at least every `--watch-heartbeat`, so a
//!   reading client always sees bytes within it), and its watch slot is
//!   freed. The kernel's buffers must fill first, so a client that never
//!   reads is closed once what it was sent no longer fits;
//! - at most `max_per_source` of them from one source address (the
//!   trusted proxies exempt), so one client cannot hold them all while a
//!   credential-holding one is refused ([`sources`]);
//! - a connection whose request was answered 401 is closed after that
//!   answer (`Connection: close`; HTTP/2 a graceful GOAWAY): holding a
//!   connection takes a credential;
//! - accept errors (out of file descriptors) are logged and retried after a
//!   pause instead of spinning.
//!
//! At shutdown it stops accepting, asks every connection to finish its
//! requests (graceful shutdown), and waits at most `drain_timeout` for them.
//! Request bodies are bounded by the handlers (`face::body`), not here.
//!
//! One file per job: the accept loop here; [`connection`] runs one
//! connection (TLS, idle and stall checks, graceful close); [`activity`]
//! is what a connection has in flight; [`service`] wraps the router;
//! [`counted`] notes writes on the transport; [`streams`] runs a
//! connection's HTTP/2 streams on its task; [`refuse`] answers a
//! connection over the limit; [`fd_limit`] fits the connection limit to
//! the open-files limit.

mod activity;
mod connection;
mod counted;
mod fd_limit;
mod refuse;
mod service;
mod sources;
mod streams;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::tls::ServerTls;
use connection::{Connection, IDLE_CHECK_MAX};
pub(crate) use fd_limit::fit_fd_limit;
use refuse::refuse;
pub(crate) use service::{Peer, RemoteAddr, Streaming};
use sources::Sources;

/// Connections being refused (answered a 503) at once, at most; beyond
/// that, extra connections are closed without an answer.
const MAX_REFUSING: usize = 64;
/// How long a refusal may take (TLS handshake and write).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after an accept error (e.g. no file descriptor left).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// The limits of one listener.
#[derive(Debug, Clone)]
pub(crate) struct ServeLimits {
    /// Open connections at most.
    pub(crate) max_connections: usize,
    /// A request head (HTTP/1), the TLS handshake and a connection's first
    /// request must arrive within this.
    pub(crate) header_read_timeout: Duration,
    /// A connection with no request in flight this long is closed.
    pub(crate) keep_alive_timeout: Duration,
    /// At shutdown, how long requests in flight may take to finish.
    pub(crate) drain_timeout: Duration,
    /// HTTP/2 requests in flight on one connection at most.
    pub(crate) max_streams_per_connection: u32,
    /// A connection with a stream open that writes nothing this long is
    /// closed (its client stopped reading).
    pub(crate) write_stall_timeout: Duration,
    /// Open connections from one source address at most (`None`: no cap).
    pub(crate) max_per_source: Option<usize>,
    /// Source addresses the per-source cap does not apply to (the trusted
    /// proxies, behind which many clients share one address).
    pub(crate) exempt_sources: Option<crate::config::TrustedProxies>,
}

/// One listener: a name for logs and metrics, its limits, TLS if any.
#[derive(Debug, Clone)]
pub(crate) struct ListenerSpec {
    pub(crate) name: &'static str,
    pub(crate) limits: ServeLimits,
    pub(crate) tls: Option<Arc<ServerTls>>,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    spec: ListenerSpec,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let limits = Arc::new(spec.limits.clone());
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let sources = Sources::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut accept_errors_logged: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                metrics.accept_error(spec.name);
                if accept_errors_logged.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                    warn!(listener = spec.name, error = %e, "accept failed; pausing");
                    accept_errors_logged = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let from_source = sources.admit(peer.ip(), &limits);
        let at_share = from_source.is_none();
        let permit = from_source
            .as_ref()
            .and_then(|_| open.clone().try_acquire_owned().ok());
        let (Some(from_source), Some(permit)) = (from_source, permit) else {
            metrics.connection_refused(spec.name);
            let (why, max) = match limits.max_per_source {
                Some(max) if at_share => ("its address is at its share", max),
                _ => ("at the limit", limits.max_connections),
            };
            debug!(listener = spec.name, %peer, "connection refused: {why}");
            if let Ok(slot) = refusing.clone().try_acquire_owned() {
                let tls = spec.tls.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, refuse(stream, tls, max)).await;
                });
            }
            continue;
        };
        let connection = Connection {
            router: router.clone(),
            limits: limits.clone(),
            tls: spec.tls.clone(),
            stop: stop_rx.clone(),
            name: spec.name,
            peer,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _open = metrics.connection_opened(connection.name);
            connection.run(stream).await;
            drop(from_source);
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it ends.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    // A connection past its deadline notices within one idle check.
    let _ = tokio::time::timeout(
        limits.drain_timeout + IDLE_CHECK_MAX,
        open.acquire_many(all),
    )
    .await;
}
