//! `--upstream-mode auto` as a [`Source`]: probes the upstream (delta ADS,
//! SotW ADS, per-type delta, per-type SotW, else the unary Fetch RPCs; see
//! [`super::connection::probe`]), retrying with the
//! streams' backoff while it cannot be reached, then hands every poll to the
//! source built for the mode it found. Polls that come before the choice
//! wait for it, bounded by the first-response timeout; HDS/CSDS pass-through
//! needs no choice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::backoff::Backoff;
use super::connection::probe;
use super::UpstreamContext;
use crate::cache::ParsedRequest;
use crate::config::{UpstreamMode, UpstreamStreams};
use crate::log_escape::Escaped;
use crate::shares::Tenant;
use crate::store::Polled;
use crate::store::SessionView;
use crate::store::{
    Feed, Inspect, PassThrough, PassedThrough, Source, SourceError, Status, StreamPlacement,
};
use crate::sync::lock;
use crate::xds::ResourceType;

/// Builds the source for the mode the probe found (`app.rs` decides what
/// each mode is).
pub(crate) type Choose = Box<dyn FnOnce(UpstreamMode, UpstreamStreams) -> Arc<dyn Feed> + Send>;

/// The probing source.
#[derive(Debug)]
pub(crate) struct AutoSource {
    ctx: Arc<UpstreamContext>,
    chosen: watch::Sender<Option<Arc<dyn Feed>>>,
    first_wait: Duration,
    probe: Mutex<Option<JoinHandle<()>>>,
}

impl AutoSource {
    /// Starts probing `ctx`; `choose` builds the source for the mode found.
    pub(crate) fn start(
        ctx: Arc<UpstreamContext>,
        first_wait: Duration,
        choose: Choose,
    ) -> Arc<AutoSource> {
        let source = Arc::new(AutoSource {
            ctx: ctx.clone(),
            chosen: watch::Sender::new(None),
            first_wait,
            probe: Mutex::default(),
        });
        let weak = Arc::downgrade(&source);
        let task = tokio::spawn(async move {
            let (mode, streams) = resolve(&ctx).await;
            let Some(source) = weak.upgrade() else { return };
            source.chosen.send_replace(Some(choose(mode, streams)));
        });
        *lock(&source.probe) = Some(task);
        source
    }

    /// The source in use, waiting up to the first-response timeout for the
    /// probe to decide.
    async fn chosen(&self) -> Result<Arc<dyn Feed>, SourceError> {
        let mut rx = self.chosen.subscribe();
        let decided = tokio::time::timeout(self.first_wait, rx.wait_for(Option::is_some)).await;
        match decided {
            Ok(Ok(chosen)) => chosen.clone().ok_or(SourceError::Probing),
            _ => Err(SourceError::Probing),
        }
    }
}

/// Probes until a mode is found, backing off while the upstream cannot be
/// reached; logs the choice.
async fn resolve(ctx: &UpstreamContext) -> (UpstreamMode, UpstreamStreams) {
    let mut backoff = Backoff::default();
    loop {
        match probe::resolve(ctx).await {
            Ok((mode, streams)) => {
                info!(?mode, ?streams, upstream = %ctx.uri, "upstream mode chosen by probing");
                return (mode, streams);
            }
            Err(reason) => {
                let delay = backoff.next_delay();
                warn!(reason = %Escaped(&reason), retry_in = ?delay, "upstream mode probe failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

impl Source for AutoSource {
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>> {
        async move { self.chosen().await?.poll(kind, request, tenant).await }.boxed()
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.ctx.pass_through(call).boxed()
    }
}

impl Inspect for AutoSource {
    fn status(&self) -> Status {
        let chosen = self.chosen.borrow().clone();
        match chosen {
            Some(source) => source.status(),
            None => Status {
                ready: false,
                description: format!("gRPC upstream {} (auto: probing)", self.ctx.uri),
                ..Status::default()
            },
        }
    }

    fn states_of(&self, node_id: &str) -> Vec<Arc<crate::cache::TypeState>> {
        let chosen = self.chosen.borrow().clone();
        chosen
            .map(|source| source.states_of(node_id))
            .unwrap_or_default()
    }

    fn sessions(&self) -> Vec<SessionView> {
        let chosen = self.chosen.borrow().clone();
        chosen.map(|source| source.sessions()).unwrap_or_default()
    }

    fn placements_of(&self, node_id: &str) -> Vec<StreamPlacement> {
        let chosen = self.chosen.borrow().clone();
        chosen
            .map(|source| source.placements_of(node_id))
            .unwrap_or_default()
    }
}

impl Feed for AutoSource {
    fn close(&self) {
        if let Some(probe) = lock(&self.probe).take() {
            probe.abort();
        }
        if let Some(source) = self.chosen.borrow().clone() {
            source.close();
        }
    }
}
