//! What feeds sessions ([`Feeder`]): the seam between the registry of
//! sessions, which only starts a task per session, and what runs in that
//! task: an upstream stream (`upstream/stream.rs`), the upstream's unary
//! `Fetch*` calls (`upstream/fetch.rs`), the snapshot (`upstream/file.rs`),
//! a scripted feed in tests (`scripted.rs`). The
//! store starts producers through it and names none of them (`app.rs`
//! hands `Sessions` the feeder it chose).

use std::fmt;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{publisher::Publisher, session::Command, PassThrough, PassedThrough, SourceError};
use crate::xds::ResourceType;

/// What feeds sessions: starts one task per session, and says what it is.
pub trait Feeder: Send + Sync + fmt::Debug + 'static {
    /// Starts the task that feeds `session` until `commands` closes (the
    /// session closed) or the task is aborted.
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()>;

    /// While it cannot take polls yet (auto mode, still probing): a wait
    /// for it, bounded by the first-response timeout, ending in why not.
    /// `None` once it can (and by default).
    fn pending(&self) -> Option<BoxFuture<'_, Result<(), SourceError>>> {
        None
    }

    /// Why no poll can be answered now (a snapshot that never loaded), if so.
    fn unavailable(&self) -> Option<SourceError> {
        None
    }

    /// What answers, for error messages: "the upstream", "the snapshot".
    fn answers_from(&self) -> &'static str {
        "the upstream"
    }

    /// Whether it carries `kind` (the delta-only types come over delta
    /// streams only).
    fn carries(&self, kind: ResourceType) -> bool {
        !kind.delta_only()
    }

    /// For a feeder that is asked rather than pushed to (fetch mode): each
    /// poll asks it to freshen the type before reading it
    /// ([`Command::Freshen`]), and a held long poll asks again this often.
    /// `None` (the default): it publishes as its upstream pushes.
    fn freshened_every(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether it has answered once (never unready again).
    fn is_ready(&self) -> bool;

    /// What it is, for `/readyz`.
    fn describe(&self) -> String;

    /// Problems standing in its way (path, line, reason), for `/readyz`.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }

    /// The `[[upstream]]` it streams from (`None`: no upstream, as for the
    /// snapshot, whose sessions have no stream to show).
    fn upstream_name(&self) -> Option<&str> {
        None
    }

    /// One HDS or CSDS question asked of its upstream as it is.
    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>> {
        let what = call.endpoint().path();
        Box::pin(std::future::ready(Err(SourceError::NoUpstream { what })))
    }
}
