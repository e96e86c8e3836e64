//! Where one session's stream goes: a [`Route`], an upstream and the
//! failover chain behind it (`failover = "..."` in its `[[upstream]]`
//! table), as Envoy's own xDS failover does for a gRPC client.
//!
//! The stream driver ([`super::stream`]) asks the route three things:
//! which upstream is next when the current one is unreachable
//! ([`Route::failover_from`]), how long the current one may stay down
//! first, and when the primary is back ([`Route::primary_back`]: it has
//! answered health checks for its `failback-after`, see [`super::connection::health`]).
//! Where each session stands, and why, is its [`Placement`].

use std::sync::Arc;
use std::time::Duration;

use super::connection::Health;
use super::UpstreamContext;
use crate::config::Failover;

/// Doubling of `failback-after` after returns that failed, at most (a
/// primary that answers health checks but not this session's stream).
const FAILBACK_DOUBLINGS: u32 = 5;

/// One upstream of a route, and when to leave it.
#[derive(Debug)]
struct Link {
    ctx: Arc<UpstreamContext>,
    /// How long it may stay down before its sessions move on (`None`: the
    /// chain ends here).
    leave_after: Option<Duration>,
}

/// An upstream and its failover chain, primary first.
#[derive(Debug)]
pub struct Route {
    links: Vec<Link>,
    /// The primary's `failback-after`.
    back_after: Duration,
}

impl Route {
    /// One upstream, no failover.
    pub fn single(ctx: Arc<UpstreamContext>) -> Route {
        Route::chain(vec![(ctx, None)])
    }

    /// `chain`: each upstream with its failover settings, primary first,
    /// each one failing over to the next.
    pub fn chain(chain: Vec<(Arc<UpstreamContext>, Option<Failover>)>) -> Route {
        let back_after = chain
            .first()
            .and_then(|(_, f)| f.as_ref().map(|f| f.back_after))
            .unwrap_or(Duration::ZERO);
        let count = chain.len();
        let links = chain
            .into_iter()
            .enumerate()
            .map(|(i, (ctx, failover))| Link {
                ctx,
                leave_after: failover.filter(|_| i + 1 < count).map(|f| f.after),
            })
            .collect();
        Route { links, back_after }
    }

    /// The primary: what pass-through calls and readiness speak of.
    pub fn primary(&self) -> &Arc<UpstreamContext> {
        &self.links[0].ctx
    }

    /// The upstream at `at` in the chain.
    pub(super) fn ctx(&self, at: usize) -> &Arc<UpstreamContext> {
        &self.links[at.min(self.links.len() - 1)].ctx
    }

    /// Whether the route has a failover at all.
    pub(crate) fn fails_over(&self) -> bool {
        self.links.len() > 1
    }

    /// Where sessions go when the upstream at `at` stays down, and after
    /// how long down.
    pub(super) fn failover_from(&self, at: usize) -> Option<(usize, Duration)> {
        let after = self.links.get(at)?.leave_after?;
        (at + 1 < self.links.len()).then_some((at + 1, after))
    }

    /// Resolves once a session at `at` should move back to the primary:
    /// never while on it; else once the primary has answered health checks
    /// for its `failback-after` (doubled per return that failed before).
    pub(super) async fn primary_back(&self, at: usize, failed_returns: u32) {
        if at == 0 {
            return std::future::pending().await;
        }
        let long = self.back_after * 2u32.pow(failed_returns.min(FAILBACK_DOUBLINGS));
        Health::healthy_for(self.primary(), long).await
    }

    /// Names of the chain, for `/readyz`: `mesh -> mesh-backup`.
    pub(crate) fn describe(&self) -> String {
        self.links
            .iter()
            .map(|l| format!("{} ({})", l.ctx.name, l.ctx.uri))
            .collect::<Vec<_>>()
            .join(" -> failover ")
    }

    /// Whether any upstream of the chain has answered.
    pub(crate) fn has_answered(&self) -> bool {
        self.links.iter().any(|l| l.ctx.has_answered())
    }
}
