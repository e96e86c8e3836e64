//! Whether a control plane answers, as failover needs to know it while no
//! session streams from it: a shared prober per upstream that asks the
//! gRPC health service ([`probe::answers_health_check`]: `SERVING`, or no
//! health service at all, is healthy; `NOT_SERVING`, a transport error or
//! silence is not) every [`PROBE_EVERY`] while anyone waits for the answer,
//! and publishes since when the upstream has answered without a break. A
//! stream whose connection failed (unreachable, reset, timed out) breaks
//! the healthy run as well; a stream the upstream ended with an
//! application status does not: that is about the session that asked, and
//! any tenant could cause one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use super::{probe, UpstreamContext};
use crate::log_escape::Escaped;

/// How often a watched upstream is probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Since when one upstream has answered health checks without a break
/// (`None`: it does not now, or nobody has asked since the last break).
#[derive(Debug, Default)]
pub(crate) struct Health {
    since: watch::Sender<Option<Instant>>,
    prober: Mutex<Option<JoinHandle<()>>>,
}

impl Health {
    /// A stream to the upstream broke: whatever healthy run it had ends.
    pub(crate) fn broke(&self) {
        self.since.send_replace(None);
    }

    /// Resolves once the upstream of `ctx` has answered health checks for
    /// `long` without a break, probing it meanwhile (with every other
    /// waiter: one prober per upstream, stopped when nobody waits).
    pub(crate) async fn healthy_for(ctx: &Arc<UpstreamContext>, long: Duration) {
        let mut rx = ctx.health.since.subscribe();
        ctx.health.ensure_prober(ctx);
        loop {
            let due = rx.borrow_and_update().map(|since| since + long);
            if due.is_some_and(|due| due <= Instant::now()) {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
                changed = rx.changed() => if changed.is_err() { return std::future::pending().await },
            }
        }
    }

    fn ensure_prober(&self, ctx: &Arc<UpstreamContext>) {
        let mut prober = crate::sync::lock(&self.prober);
        if prober.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        // What was known before nobody asked is no evidence now.
        self.since.send_replace(None);
        let weak = Arc::downgrade(ctx);
        *prober = Some(tokio::spawn(async move {
            loop {
                let Some(ctx) = weak.upgrade() else { return };
                if ctx.health.since.receiver_count() == 0 {
                    return;
                }
                let answered = probe::answers_health_check(&ctx).await;
                let health = &ctx.health;
                // Copied out: a `borrow` held across `send_replace` deadlocks.
                let since = *health.since.borrow();
                match (answered, since) {
                    (Ok(()), Some(_)) => {}
                    (Ok(()), None) => {
                        debug!(upstream = %ctx.name, "upstream answers health checks");
                        health.since.send_replace(Some(Instant::now()));
                    }
                    (Err(why), _) => {
                        debug!(upstream = %ctx.name, why = %Escaped(&why.to_string()), "upstream health check failed");
                        health.since.send_replace(None);
                    }
                }
                drop(ctx);
                tokio::time::sleep(PROBE_EVERY).await;
            }
        }));
    }
}
