//! The gateway's shutdown as the request handlers see it: one flag, set once
//! when the process is told to stop (SIGTERM, Ctrl-C), never cleared.
//!
//! While draining, `/readyz` says not ready (so a balancer stops sending),
//! a poll that would be held as a long poll is refused with a 503 and
//! `Retry-After` (a balancer retries it on another replica), and the long
//! polls already held are answered at once (304, or 200 if the state moved);
//! a new watch (`?watch`) is refused the same way and open watch streams end
//! (an SSE client reconnects, with `Last-Event-ID`, to another replica).
//! Closing listeners and connections is `serve`'s job, closing upstream
//! streams the source's; this module only says *that* the gateway drains.

use tokio::sync::watch;

/// Whether the gateway is shutting down. Clones share the flag.
#[derive(Debug, Clone, Default)]
pub(crate) struct Drain {
    flag: watch::Sender<bool>,
}

impl Drain {
    /// Starts draining (idempotent).
    pub(crate) fn begin(&self) {
        self.flag.send_replace(true);
    }

    pub(crate) fn is_draining(&self) -> bool {
        *self.flag.borrow()
    }

    /// Resolves once draining has begun (at once if it already has).
    pub(crate) async fn started(&self) {
        let mut rx = self.flag.subscribe();
        // The sender lives in `self`, so this cannot fail while we wait.
        let _ = rx.wait_for(|draining| *draining).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clones_share_one_flag_that_wakes_waiters() {
        let drain = Drain::default();
        assert!(!drain.is_draining());
        let waiter = tokio::spawn({
            let drain = drain.clone();
            async move { drain.started().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drain.clone().begin();
        waiter.await.expect("the waiter ends");
        assert!(drain.is_draining());
        // Already draining: resolves at once; beginning again changes nothing.
        drain.begin();
        drain.started().await;
    }
}
