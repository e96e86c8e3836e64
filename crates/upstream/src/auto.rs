//! `--upstream-mode auto` as a [`Feeder`]: probes the upstream (delta ADS,
//! SotW ADS, per-type delta, per-type SotW, else the unary Fetch RPCs; see
//! [`super::connection::probe`]), retrying with the streams' backoff while
//! it cannot be reached, then feeds every session through the feeder built
//! for the mode it found. Polls that come before the choice wait for it,
//! bounded by the first-response timeout ([`Feeder::pending`]); a session
//! opened meanwhile is fed once the choice is made. HDS/CSDS pass-through
//! needs no choice.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::backoff::Backoff;
use super::connection::probe;
use super::UpstreamContext;
use crate::config::{UpstreamMode, UpstreamStreams};
use crate::log_escape::Escaped;
use crate::store::{Command, Feeder, PassThrough, PassedThrough, Publisher, SourceError};
use crate::sync::AbortOnDrop;
use crate::xds::ResourceType;

/// Builds the feeder for the mode the probe found (`app.rs` decides what
/// each mode is).
pub type Choose = Box<dyn FnOnce(UpstreamMode, UpstreamStreams) -> Arc<dyn Feeder> + Send>;

#[derive(Debug)]
pub struct AutoFeeder {
    ctx: Arc<UpstreamContext>,
    chosen: watch::Sender<Option<Arc<dyn Feeder>>>,
    first_wait: Duration,
    /// The probe, stopped when the feeder goes.
    _probe: AbortOnDrop,
}

impl AutoFeeder {
    /// Starts probing `ctx`; `choose` builds the feeder for the mode found.
    pub fn start(ctx: Arc<UpstreamContext>, first_wait: Duration, choose: Choose) -> AutoFeeder {
        let chosen = watch::Sender::new(None);
        let task = {
            let (ctx, chosen) = (ctx.clone(), chosen.clone());
            tokio::spawn(async move {
                let (mode, streams) = resolve(&ctx).await;
                chosen.send_replace(Some(choose(mode, streams)));
            })
        };
        AutoFeeder {
            ctx,
            chosen,
            first_wait,
            _probe: AbortOnDrop(task),
        }
    }

    /// The feeder chosen, once the probe has decided.
    fn chosen(&self) -> Option<Arc<dyn Feeder>> {
        self.chosen.borrow().clone()
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

impl Feeder for AutoFeeder {
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        let mut chosen = self.chosen.subscribe();
        tokio::spawn(async move {
            let Some(feeder) = chosen
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|c| c.clone())
            else {
                return;
            };
            let mut task = AbortOnDrop(feeder.start(session, commands));
            let _ = (&mut task.0).await;
        })
    }

    fn pending(&self) -> Option<BoxFuture<'_, Result<(), SourceError>>> {
        if self.chosen.borrow().is_some() {
            return None;
        }
        let mut rx = self.chosen.subscribe();
        Some(Box::pin(async move {
            match tokio::time::timeout(self.first_wait, rx.wait_for(Option::is_some)).await {
                Ok(Ok(_)) => Ok(()),
                _ => Err(SourceError::Probing),
            }
        }))
    }

    fn unavailable(&self) -> Option<SourceError> {
        self.chosen().and_then(|feeder| feeder.unavailable())
    }

    fn carries(&self, kind: ResourceType) -> bool {
        self.chosen()
            .map_or(!kind.delta_only(), |feeder| feeder.carries(kind))
    }

    fn freshened_every(&self) -> Option<Duration> {
        self.chosen().and_then(|feeder| feeder.freshened_every())
    }

    fn is_ready(&self) -> bool {
        self.chosen().is_some_and(|feeder| feeder.is_ready())
    }

    fn describe(&self) -> String {
        match self.chosen() {
            Some(feeder) => feeder.describe(),
            None => format!("gRPC upstream {} (auto: probing)", self.ctx.uri),
        }
    }

    fn problems(&self) -> Vec<String> {
        self.chosen()
            .map(|feeder| feeder.problems())
            .unwrap_or_default()
    }

    fn upstream_name(&self) -> Option<&str> {
        Some(&self.ctx.name)
    }

    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        self.ctx.pass_through(call).boxed()
    }
}
