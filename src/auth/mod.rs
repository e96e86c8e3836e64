//! The authorization policy (`--auth-policy FILE`): which principals exist,
//! how a request proves it is one (an mTLS client certificate's URI or DNS
//! SAN, or a bearer token stored in the file only as its SHA-256), and
//! which nodes, clusters and types each may fetch. Reloaded when the file
//! changes; a reload that fails keeps the policy in service. A reload is
//! announced ([`AuthPolicy::subscribe`]) so that what a request opened
//! before it (a held long poll, a watch, a CSDS stream) is checked again
//! and ended if the new policy no longer allows it.
//!
//! This module decides; it knows nothing of HTTP (`http::authorize` asks it
//! and maps its answers to 401/403). Tokens are never logged or kept: only
//! their digests are compared.
//!
//! File format (TOML, kebab-case keys, unknown keys refused):
//! ```toml
//! [admin]
//! token-sha256 = ["<hex>"]            # may read /metrics and /readyz details
//! uri-san = ["spiffe://mesh.example/ns/ops/*"]    # admin client certificates
//! dns-san = ["ops-*.mesh.example"]    # (with --admin-client-ca; none named: any it signed)
//!
//! [[principal]]
//! name = "edge"                       # named in logs and 403s
//! uri-san = ["spiffe://mesh.example/ns/edge/*"]   # exact or glob, or a
//!                                     # template: ".../ns/{namespace}/sa/{sa}"
//! dns-san = ["edge-*.mesh.example"]
//! token-sha256 = ["<hex>"]            # Authorization: Bearer <token>
//! hds = false                         # HDS for the nodes its rules bind
//! csds = false                        # upstream CSDS about the nodes its rules name
//! [[principal.allow]]
//! nodes = ["edge-*"]                  # node ids, exact or glob (required; "*" for any),
//!                                     # or captures of the template: ["{sa}"]
//! clusters = ["edge"]                 # node clusters, exact or glob (required; "*" for any)
//! types = ["listeners", "clusters"]   # default: every type but secrets
//! ```

mod policy;

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use policy::fuzz::policy as fuzz_policy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{info, warn};

use crate::metrics::Metrics;

pub use policy::PolicyError;
pub(crate) use policy::{sha256, short_type, Identity, Policy};

/// Why a request was refused: the policy's answer, which the HTTP faces
/// turn into a status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// No credentials, or credentials no principal holds: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known principal asking for what it may not have: 403.
    #[error("{0}")]
    Forbidden(String),
}

/// The policy in service, reloaded when its file changes.
#[derive(Debug)]
pub(crate) struct AuthPolicy {
    path: PathBuf,
    /// `--session-key cluster`: a rule may not name nodes
    /// ([`Policy::check_cluster_sessions`]).
    cluster_sessions: bool,
    /// The policy in service; every reload is sent to the subscribers.
    current: tokio::sync::watch::Sender<Arc<Policy>>,
    metrics: Arc<Metrics>,
    watcher: std::sync::Mutex<Option<crate::reload::Watcher>>,
}

impl AuthPolicy {
    /// Loads the policy at `path` (an error says where and why) and
    /// watches it; with `cluster_sessions` (`--session-key cluster`) a
    /// policy whose rules name nodes is refused, at start and on reload.
    pub(crate) fn start(
        path: &Path,
        cluster_sessions: bool,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<AuthPolicy>, PolicyError> {
        let policy = Policy::load(path, cluster_sessions)?;
        info!(path = %path.display(), principals = policy.principal_count(), "auth policy loaded");
        let auth = Arc::new(AuthPolicy {
            path: path.to_owned(),
            cluster_sessions,
            current: tokio::sync::watch::Sender::new(Arc::new(policy)),
            metrics,
            watcher: std::sync::Mutex::default(),
        });
        let watcher = crate::reload::watch(
            vec![path.to_owned()],
            Arc::downgrade(&auth),
            AuthPolicy::reload,
        );
        *crate::sync::lock(&auth.watcher) = Some(watcher);
        Ok(auth)
    }

    pub(crate) fn current(&self) -> Arc<Policy> {
        self.current.borrow().clone()
    }

    /// Every policy put in service from now on (the current one counts as
    /// seen): what an open request re-checks itself against.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Policy>> {
        self.current.subscribe()
    }

    fn reload(&self) {
        match Policy::load(&self.path, self.cluster_sessions) {
            Ok(policy) => {
                info!(path = %self.path.display(), principals = policy.principal_count(), "auth policy reloaded");
                self.current.send_replace(Arc::new(policy));
                self.metrics.reloaded("auth-policy", true);
            }
            Err(e) => {
                warn!(error = %e, "auth policy changed but does not load; the previous one stays in service");
                self.metrics.reloaded("auth-policy", false);
            }
        }
    }
}
