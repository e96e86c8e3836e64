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
//! - accept errors (out of file descriptors) are logged and retried after a
//!   pause instead of spinning.
//!
//! At shutdown it stops accepting, asks every connection to finish its
//! requests (graceful shutdown), and waits at most `drain_timeout` for them.
//! Request bodies are bounded by the handlers (`http::body`), not here.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::{debug, warn};

use crate::log_escape::Escaped;
use crate::metrics::Metrics;
use crate::tls::{PeerIdentity, ServerTls};

/// File descriptors kept free of REST connections: the admin listener's,
/// the upstream's, snapshot files, and some slack.
const FD_RESERVE: usize = 512;

/// Connections being refused (answered a 503) at once, at most; beyond
/// that, extra connections are closed without an answer.
const MAX_REFUSING: usize = 64;
/// How long a refusal may take (TLS handshake and write).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after an accept error (e.g. no file descriptor left).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// How often a connection checks whether it has idled out, at most.
const IDLE_CHECK_MAX: Duration = Duration::from_secs(1);

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
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams_per_connection);
    let builder = Arc::new(builder);
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
        let Ok(permit) = open.clone().try_acquire_owned() else {
            metrics.connection_refused(spec.name);
            debug!(listener = spec.name, %peer, "connection refused: at the limit");
            if let Ok(slot) = refusing.clone().try_acquire_owned() {
                let (tls, max) = (spec.tls.clone(), limits.max_connections);
                tokio::spawn(async move {
                    let _slot = slot;
                    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, refuse(stream, tls, max)).await;
                });
            }
            continue;
        };
        let connection = Connection {
            router: router.clone(),
            builder: builder.clone(),
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

/// Answers a connection over the limit with a 503 and closes it.
async fn refuse(stream: TcpStream, tls: Option<Arc<ServerTls>>, max: usize) {
    let body = format!(
        "{{\"code\":14,\"message\":\"too many connections to this listener (at most {max}); try again later\"}}\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    match tls {
        None => write_and_close(stream, response.as_bytes()).await,
        Some(tls) => {
            if let Ok(stream) = tls.acceptor().accept(stream).await {
                write_and_close(stream, response.as_bytes()).await;
            }
        }
    }
}

async fn write_and_close<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, bytes: &[u8]) {
    if stream.write_all(bytes).await.is_ok() {
        let _ = stream.shutdown().await;
        // Read what the client sent, so closing does not reset the
        // connection before it has read the answer.
        let mut sink = [0u8; 4096];
        while let Ok(n) = tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await {
            if n == 0 {
                break;
            }
        }
    }
}

/// What one accepted connection needs.
struct Connection {
    router: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Arc<ServeLimits>,
    tls: Option<Arc<ServerTls>>,
    stop: watch::Receiver<bool>,
    name: &'static str,
    peer: SocketAddr,
}

impl Connection {
    async fn run(self, stream: TcpStream) {
        let Some(tls) = self.tls.clone() else {
            return self.serve(stream, None).await;
        };
        let handshake = tls.acceptor().accept(stream);
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
        let service = Tracked {
            router: self.router.clone(),
            activity: activity.clone(),
            identity,
            remote: RemoteAddr(self.peer),
        };
        let io = Counted {
            inner: io,
            activity: activity.clone(),
        };
        let conn = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        tokio::pin!(conn);
        let limits = self.limits.clone();
        let check_every = (limits.keep_alive_timeout / 4)
            .min(limits.header_read_timeout / 4)
            .clamp(Duration::from_millis(10), IDLE_CHECK_MAX);
        let mut closing_by: Option<Instant> = None;
        let mut tick = tokio::time::interval(check_every);
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        debug!(listener = self.name, peer = %self.peer, error = %Escaped(&e), "connection ended");
                    }
                    return;
                }
                stopped = self.stop.wait_for(|s| *s), if closing_by.is_none() => {
                    let _ = stopped;
                    conn.as_mut().graceful_shutdown();
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
                        None => {
                            let limit = if activity.started_any() {
                                limits.keep_alive_timeout
                            } else {
                                limits.header_read_timeout
                            };
                            if activity.idle_for(now) >= limit {
                                debug!(listener = self.name, peer = %self.peer, "connection idle: closing");
                                conn.as_mut().graceful_shutdown();
                                closing_by = Some(now + limits.header_read_timeout);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Requests in flight on one connection and when the last one ended;
/// streams open on it and when it last wrote.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    started_any: AtomicBool,
    last: Mutex<Instant>,
    /// Streaming bodies open.
    streams: AtomicUsize,
    /// When the connection was opened: what `last_write_ms` counts from.
    opened: Instant,
    /// Milliseconds from `opened` to the last write that moved bytes, or
    /// to the opening of a stream, whichever is later.
    last_write_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        let now = Instant::now();
        Activity {
            in_flight: AtomicUsize::new(0),
            started_any: AtomicBool::new(false),
            last: Mutex::new(now),
            streams: AtomicUsize::new(0),
            opened: now,
            last_write_ms: AtomicU64::new(0),
        }
    }

    /// The connection moved bytes out now.
    fn wrote(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_write_ms.store(ms, Ordering::Release);
    }

    /// How long a connection with a stream open has written nothing (zero
    /// without one).
    fn stalled_for(&self, now: Instant) -> Duration {
        if self.streams.load(Ordering::Acquire) == 0 {
            return Duration::ZERO;
        }
        let last = self.opened + Duration::from_millis(self.last_write_ms.load(Ordering::Acquire));
        now.saturating_duration_since(last)
    }

    fn started_any(&self) -> bool {
        self.started_any.load(Ordering::Acquire)
    }

    /// Zero while a request is in flight.
    fn idle_for(&self, now: Instant) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(*crate::sync::lock(&self.last))
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.started_any.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// A request in flight; its end is the connection's latest activity.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *crate::sync::lock(&self.0.last) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The router as a hyper service that records activity and hands the TLS
/// peer's identity to handlers (as a request extension).
#[derive(Clone)]
struct Tracked {
    router: Router,
    activity: Arc<Activity>,
    identity: Option<Arc<PeerIdentity>>,
    remote: RemoteAddr,
}

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteAddr(pub(crate) SocketAddr);

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        let mut request = request.map(Body::new);
        if let Some(identity) = &self.identity {
            request.extensions_mut().insert(identity.clone());
        }
        request.extensions_mut().insert(self.remote);
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request).await;
            // A stream (a watch) is in flight for as long as it is open;
            // any other request until its head is ready, so a client that
            // does not read a response is still closed as idle.
            response.map(|r| {
                if r.extensions().get::<Streaming>().is_none() {
                    drop(in_flight);
                    return r;
                }
                let open = StreamOpen::new(in_flight.0.clone());
                r.map(|body| {
                    Body::new(Written {
                        body,
                        _in_flight: in_flight,
                        _open: open,
                    })
                })
            })
        })
    }
}

/// Put on a response (as an extension) whose body is a long-lived stream:
/// its request counts as in flight until the body ends, so the connection
/// is not closed as idle meanwhile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Streaming;

/// A response body that keeps its request in flight until it is dropped
/// (written out, or the connection gone). Size and end are the body's own.
struct Written {
    body: Body,
    _in_flight: InFlight,
    _open: StreamOpen,
}

/// A streaming body open on a connection (it counts toward stall checks).
struct StreamOpen(Arc<Activity>);

impl StreamOpen {
    fn new(activity: Arc<Activity>) -> StreamOpen {
        // A new stream has not stalled yet: it counts from now.
        activity.wrote();
        activity.streams.fetch_add(1, Ordering::AcqRel);
        StreamOpen(activity)
    }
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's transport, noting every write that moves bytes.
struct Counted<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> Counted<I> {
    fn noted(&self, polled: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.noted(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.noted(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl hyper::body::Body for Written {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// `wanted` REST connections, lowered so that they, `others` (the admin
/// listener's) and [`FD_RESERVE`] fit the process's file-descriptor limit:
/// connections must never exhaust it, or nothing (admin included) could
/// accept. Logged when lowered; `wanted` where the limit cannot be read.
pub(crate) fn fit_fd_limit(wanted: usize, others: usize) -> usize {
    let Some(limit) = open_files_limit() else {
        return wanted;
    };
    let room = limit.saturating_sub(others + FD_RESERVE).max(1);
    if wanted > room {
        warn!(
            wanted,
            allowed = room,
            open_files_limit = limit,
            "--max-connections lowered to fit the open-files limit (raise `ulimit -n` to allow more)"
        );
        return room;
    }
    wanted
}

/// The soft limit on open files (Linux: `/proc/self/limits`).
fn open_files_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
