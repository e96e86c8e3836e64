//! Wires a [`Config`] into the cache, the upstream sessions and the two
//! servers, and runs them until shutdown.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::info;

use crate::admin::{self, Admin};
use crate::cache::Renderer;
use crate::config::Config;
use crate::http::{self, Gateway};
use crate::metrics::Metrics;
use crate::source::fetch::Fetcher;
use crate::source::file::{FileSource, Origin};
use crate::source::{Readiness, Registry, SourceError, Upstream, UpstreamContext};
use crate::xds::{Codec, JsonError};

/// Why the gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Descriptors(#[from] JsonError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("server failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// Serves REST on `listener` and admin on `admin_listener` until `shutdown`
/// resolves; then stops accepting, lets in-flight requests finish, and closes
/// every upstream session.
pub async fn run(
    config: Config,
    listener: TcpListener,
    admin_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let codec = Codec::with_descriptor_sets(&config.descriptor_sets)?;
    let renderer = Renderer::new(codec);
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(Readiness::default());
    let upstream = match &config.upstream {
        Some(uri) => Upstream::Grpc(Arc::new(UpstreamContext::new(
            &config,
            uri,
            renderer.clone(),
            metrics.clone(),
            ready.clone(),
        )?)),
        None => {
            let origin = match &config.snapshot {
                Some(dir) => Origin::Dir(dir.clone()),
                None => Origin::EmbeddedDemo,
            };
            Upstream::Snapshot(FileSource::start(origin, renderer.clone(), ready.clone()))
        }
    };
    let fetcher = match &upstream {
        Upstream::Grpc(ctx) => Some(Arc::new(Fetcher::new(ctx.clone(), config.fetch_cache_ttl))),
        Upstream::Snapshot(_) => None,
    };
    if let (Upstream::Grpc(ctx), Some(fetcher)) = (&upstream, &fetcher) {
        if ctx.mode().is_none() {
            tokio::spawn(crate::source::resolve_auto_mode(
                ctx.clone(),
                fetcher.clone(),
            ));
        }
    }
    let config = Arc::new(config);
    let registry = Arc::new(Registry::new(
        upstream.clone(),
        renderer,
        metrics.clone(),
        &config,
    ));
    let sweeper = registry.spawn_sweeper();
    let gateway = Arc::new(Gateway {
        config: config.clone(),
        registry: registry.clone(),
        metrics: metrics.clone(),
        parsed: http::parsed::ParsedRequests::new(config.session_key),
        fetcher,
    });
    let admin_state = Arc::new(Admin {
        ready,
        metrics,
        registry: registry.clone(),
        upstream,
    });
    info!(rest = %listener.local_addr()?, admin = %admin_listener.local_addr()?, "serving");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let rest = axum::serve(listener, http::router(gateway))
        .with_graceful_shutdown(stopped(stop_rx.clone()));
    let admin = axum::serve(admin_listener, admin::router(admin_state))
        .with_graceful_shutdown(stopped(stop_rx));
    let result = tokio::try_join!(async { rest.await }, async { admin.await });
    sweeper.abort();
    registry.close_all();
    result.map(|_| ()).map_err(AppError::from)
}
