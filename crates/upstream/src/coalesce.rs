//! Subscription changes toward one upstream stream, coalesced for
//! [`COALESCE`]: REST clients ask for names one poll at a time (an Envoy
//! with 10,000 EDS clusters sends 10,000 polls of one name each at
//! start-up), and answering each with its own upstream request made the
//! upstream send the growing set back thousands of times, O(names²) work on
//! both sides. A NACK is never held back.
//!
//! What the requests are is the stream's protocol's business: this module
//! asks for them through the functions it is handed, and names nothing of
//! the stream driver (`stream.rs`), which names it.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::store::Command;
use crate::xds::ResourceType;

/// How long a subscription change waits for others to join it in one
/// upstream request. Small next to a REST client's poll interval (Envoy's
/// default `refresh_delay` is 1 s) and its first wait.
pub(super) const COALESCE: Duration = Duration::from_millis(20);

/// The types whose subscription changed within the current [`COALESCE`]
/// window, sent together when it ends.
#[derive(Debug, Default)]
pub(super) struct PendingSubscriptions {
    kinds: BTreeSet<ResourceType>,
    /// When the open window ends, if one is open.
    pub(super) deadline: Option<Instant>,
}

impl PendingSubscriptions {
    /// Takes what the session sent (`None` once it closed: false, and the
    /// stream's task ends): a NACK's request (made by `nack`) is queued
    /// toward the stream at once; a subscription change joins the window
    /// (opening one if none is open).
    pub(super) async fn command<R>(
        &mut self,
        command: Option<Command>,
        tx: &mpsc::Sender<R>,
        nack: impl FnOnce(ResourceType, String, String) -> Option<R>,
    ) -> bool {
        let request = match command {
            None => return false,
            Some(Command::Resubscribe(kind)) => {
                self.kinds.insert(kind);
                self.deadline
                    .get_or_insert_with(|| Instant::now() + COALESCE);
                None
            }
            Some(Command::Nack {
                kind,
                presented,
                message,
            }) => nack(kind, presented, message),
            // A stream is pushed to: the poll goes on with what it has.
            Some(Command::Freshen { .. }) => None,
        };
        send(tx, request).await;
        true
    }

    /// Sends one request per type that changed in the window (each made by
    /// `subscribe`, with the subscription as it is now) and closes the
    /// window.
    pub(super) async fn flush<R>(
        &mut self,
        tx: &mpsc::Sender<R>,
        mut subscribe: impl FnMut(ResourceType) -> Option<R>,
    ) {
        self.deadline = None;
        for kind in std::mem::take(&mut self.kinds) {
            send(tx, subscribe(kind)).await;
        }
    }
}

/// Queues `request`, if any, toward the stream.
pub(super) async fn send<T>(tx: &mpsc::Sender<T>, request: Option<T>) {
    if let Some(request) = request {
        // A closed channel means the call ended; the stream loop sees why.
        let _ = tx.send(request).await;
    }
}
