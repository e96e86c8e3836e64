//! Where config comes from: sessions, one per node identity, each fed by one
//! SotW ADS stream to the control plane ([`ads`]) or by the watched snapshot
//! directory ([`file`], the default when no upstream is configured).
//!
//! The [`Registry`] creates sessions on first use (bounded in number), shares
//! them between every client of the same identity (fan-in), prunes names no
//! client asks for any more, and closes sessions idle past the configured
//! timeout. It never serves HTTP; `tonic::Status` is classified here only.

pub mod ads;
pub mod decode;
pub mod delta;
pub mod fetch;
pub mod file;
pub mod identity;
pub mod probe;
pub mod reconnect;
pub mod session;
pub mod snapshot;
pub mod upstream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use tokio::task::JoinHandle;
use tracing::info;

pub use identity::IdentityKey;
pub use session::Session;
pub use upstream::UpstreamContext;

use crate::cache::Renderer;
use crate::config::{Config, UpstreamMode};
use crate::metrics::Metrics;
use crate::xds::request::raw_node;

/// Why a session could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("too many upstream sessions ({max}); try again later")]
    TooManySessions { max: usize },
    #[error("node is not a valid envoy.config.core.v3.Node: {0}")]
    InvalidNode(String),
    #[error("invalid upstream address {uri}: {reason}")]
    BadUpstream { uri: String, reason: String },
    #[error("upstream TLS: {0}")]
    Tls(String),
}

/// "Ready once the upstream has answered": never unready again once set.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub fn mark_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// How often idle sessions and stale names are swept.
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(5);

/// What feeds the sessions.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// A control plane over gRPC (ADS streams, or Fetch calls in fetch mode).
    Grpc(Arc<UpstreamContext>),
    /// A watched snapshot directory.
    Snapshot(Arc<file::FileSource>),
}

/// Every live session, by identity.
#[derive(Debug)]
pub struct Registry {
    sessions: Mutex<HashMap<IdentityKey, Arc<Session>>>,
    upstream: Upstream,
    renderer: Renderer,
    metrics: Arc<Metrics>,
    max_sessions: usize,
    idle_timeout: Duration,
}

impl Registry {
    pub fn new(
        upstream: Upstream,
        renderer: Renderer,
        metrics: Arc<Metrics>,
        config: &Config,
    ) -> Registry {
        Registry {
            sessions: Mutex::default(),
            upstream,
            renderer,
            metrics,
            max_sessions: config.max_sessions,
            idle_timeout: config.idle_timeout,
        }
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IdentityKey, Arc<Session>>> {
        // Map operations are single inserts/removes: never half-done.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn renderer(&self) -> &Renderer {
        &self.renderer
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sessions serving a stale state (their upstream stream is down).
    pub fn stale_count(&self) -> usize {
        self.lock()
            .values()
            .filter(|s| s.stale_since().is_some())
            .count()
    }

    /// The session of `key`, created (and its upstream stream started) for
    /// the first client of that identity. `body` is the request's JSON; its
    /// `node` is decoded only here, once per session.
    pub fn session(&self, key: &IdentityKey, body: &[u8]) -> Result<Arc<Session>, SourceError> {
        let mut sessions = self.lock();
        if let Some(session) = sessions.get(key) {
            session.touch();
            return Ok(session.clone());
        }
        if sessions.len() >= self.max_sessions {
            return Err(SourceError::TooManySessions {
                max: self.max_sessions,
            });
        }
        let node = self.decode_node(body)?;
        let (session, commands) = Session::new(key.clone(), node);
        let task = match &self.upstream {
            Upstream::Grpc(ctx) => {
                tokio::spawn(run_grpc_session(ctx.clone(), session.clone(), commands))
            }
            Upstream::Snapshot(source) => {
                tokio::spawn(file::run(source.clone(), session.clone(), commands))
            }
        };
        session.attach_task(task);
        info!(node = %session.node.id, cluster = %session.node.cluster, "session opened");
        sessions.insert(key.clone(), session.clone());
        self.metrics.set_sessions(sessions.len());
        Ok(session)
    }

    fn decode_node(&self, body: &[u8]) -> Result<Node, SourceError> {
        decode_node(&self.renderer, body)
    }

    /// Closes idle sessions and prunes names nobody asked for recently.
    pub fn sweep(&self, now: Instant) {
        let mut sessions = self.lock();
        sessions.retain(|_, session| {
            if session.idle_for(now) >= self.idle_timeout {
                info!(node = %session.node.id, "session idle: closed");
                session.close();
                false
            } else {
                session.prune(now, self.idle_timeout);
                true
            }
        });
        self.metrics.set_sessions(sessions.len());
    }

    /// Sweeps periodically until the returned task is aborted.
    pub fn spawn_sweeper(self: &Arc<Self>) -> JoinHandle<()> {
        let registry = Arc::downgrade(self);
        let every = (self.idle_timeout / 4).clamp(Duration::from_millis(50), SWEEP_EVERY_MAX);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                registry.sweep(Instant::now());
            }
        })
    }

    /// Closes every session (at shutdown).
    pub fn close_all(&self) {
        for (_, session) in self.lock().drain() {
            session.close();
        }
    }
}

/// Feeds a session from a gRPC upstream in the mode in use (waiting for
/// the auto probe to decide, if it has not yet).
async fn run_grpc_session(
    ctx: Arc<UpstreamContext>,
    session: Arc<Session>,
    commands: tokio::sync::mpsc::UnboundedReceiver<session::Command>,
) {
    let mode = loop {
        if let Some(mode) = ctx.wait_mode(Duration::from_secs(3600)).await {
            break mode;
        }
    };
    match mode {
        UpstreamMode::Delta => delta::run(ctx, session, commands).await,
        UpstreamMode::Sotw | UpstreamMode::Auto => ads::run(ctx, session, commands).await,
        // Fetch mode answers requests without sessions.
        UpstreamMode::Fetch => {}
    }
}

/// Decides `--upstream-mode auto` by probing, retrying with backoff while
/// the upstream cannot be reached; logs the choice.
pub async fn resolve_auto_mode(ctx: Arc<UpstreamContext>, fetcher: Arc<fetch::Fetcher>) {
    let mut failures = 0u32;
    loop {
        match probe::resolve(&ctx, &fetcher).await {
            Ok(mode) => {
                info!(?mode, upstream = %ctx.uri, "upstream mode chosen by probing");
                ctx.set_mode(mode);
                return;
            }
            Err(reason) => {
                failures = failures.saturating_add(1);
                let delay = reconnect::backoff(failures);
                tracing::warn!(%reason, retry_in = ?delay, "upstream mode probe failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The request body's `node` as a protobuf `Node` (empty if absent).
pub fn decode_node(renderer: &Renderer, body: &[u8]) -> Result<Node, SourceError> {
    let raw = raw_node(body).map_err(|e| SourceError::InvalidNode(e.to_string()))?;
    let Some(raw) = raw else {
        return Ok(Node::default());
    };
    renderer
        .codec()
        .parse_prost("envoy.config.core.v3.Node", raw.get().as_bytes(), true)
        .map_err(|e| SourceError::InvalidNode(e.to_string()))
}
