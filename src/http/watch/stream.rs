//! One open watch: the [`Polled`] a poll got, turned into a response body
//! that yields a frame per new version, heartbeats while nothing changes,
//! and ends when the gateway drains.
//!
//! Coalescing, by construction: nothing is queued. The body is a stream
//! that hyper polls only when it can write more; each poll asks the
//! [`Polled`] for the state *now* (`next_change` returns at once with the
//! latest state when it moved meanwhile). A reader that stops reading leaves
//! the stream unpolled and holding one state (an `Arc`); when it reads again
//! it gets the latest version, not the ones in between. At most one frame
//! is ever held here beyond what the connection buffers.
//!
//! Every answer goes through `polled.answer` with the version last sent as
//! the one presented: the same names, rewrite and 304 rules as a poll (a
//! change the client would be answered 304 for sends nothing).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::time::Instant;
use tracing::warn;

use super::frame::Format;
use crate::auth::AuthError;
use crate::cache::{Answer, ClientAddr, JsonBody, ParsedRequest};
use crate::http::admission::Place;
use crate::http::asked::{Answered, Asked, Booking};
use crate::http::Gateway;
use crate::log_escape::Escaped;
use crate::metrics::OpenConnection;
use crate::observe::ServedAnswer;
use crate::store::Polled;
use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// SSE event name of a full state (a `DiscoveryResponse`).
pub(super) const RESPONSE_EVENT: &str = "discovery_response";
/// SSE event name of an answer in changes form (`?changes`).
pub(super) const CHANGES_EVENT: &str = "changes";
/// How long one wait for a change lasts before it is simply started again.
const CHANGE_WAIT: Duration = Duration::from_secs(300);
/// After a wait that ended early without a change (the source could not
/// look: e.g. a failed re-fetch), this long before looking again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A wait for the next change, owning the `Polled` until it is over.
type Change = BoxFuture<'static, (Polled, bool)>;
/// Resolves once a reload of the auth policy no longer allows the watch.
type Revoked = BoxFuture<'static, AuthError>;

/// Everything one open watch holds.
pub(super) struct Watch {
    gateway: Arc<Gateway>,
    kind: ResourceType,
    /// The client's request, presenting the version last sent to it.
    request: ParsedRequest,
    target: Option<RestTarget>,
    remote: ClientAddr,
    format: Format,
    /// The source's answer, while no wait for a change holds it.
    polled: Option<Polled>,
    change: Option<Change>,
    revoked: Revoked,
    /// Frames due before anything else (the opening, the first event).
    due: Vec<Bytes>,
    /// Whether its last answer held a type served opaque (for the client
    /// book).
    opaque: bool,
    heartbeat: Duration,
    next_heartbeat: Instant,
    ended: bool,
    /// `?changes`: events say what changed since the last one.
    changes: bool,
    /// The answer last sent (what the next changes are relative to).
    last: Option<Arc<ServedAnswer>>,
    _open: OpenConnection,
    _slot: Place,
}

impl Watch {
    /// A watch on `asked`, as `request` now presents it, whose first answer
    /// was `first` (a body is its first event; a 304 sends nothing).
    pub(super) fn open(
        gateway: Arc<Gateway>,
        asked: Asked<'_>,
        request: ParsedRequest,
        format: Format,
        polled: Polled,
        slot: Place,
        first: &Answer,
    ) -> Watch {
        let heartbeat = gateway.config.watch_heartbeat;
        let mut watch = Watch {
            kind: asked.kind,
            revoked: asked.revoked().boxed(),
            request,
            target: asked.target,
            remote: asked.remote,
            format,
            opaque: false,
            polled: Some(polled),
            change: None,
            due: format.opening().into_iter().collect(),
            heartbeat,
            next_heartbeat: Instant::now() + heartbeat,
            ended: false,
            changes: asked.changes,
            last: None,
            _open: gateway.metrics.watch_opened(),
            _slot: slot,
            gateway,
        };
        if let Some(frame) = watch.frame_for(first) {
            watch.due.push(frame);
        }
        watch
    }

    /// The response body: this watch's frames until it ends.
    pub(super) fn into_body(self) -> Body {
        Body::from_stream(futures::stream::unfold(self, |mut watch| async move {
            let frame = watch.next_frame().await?;
            Some((Ok::<_, Infallible>(frame), watch))
        }))
    }

    /// The next frame to write, waiting for it; `None` once the stream ends.
    pub(super) async fn next_frame(&mut self) -> Option<Bytes> {
        if !self.due.is_empty() {
            return Some(self.due.remove(0));
        }
        if self.ended {
            return None;
        }
        loop {
            let change = match &mut self.change {
                Some(change) => change,
                None => {
                    let polled = self.polled.take()?;
                    self.change.insert(wait_for_change(polled))
                }
            };
            let drain = self.gateway.drain.clone();
            tokio::select! {
                biased;
                () = drain.started() => {
                    self.ended = true;
                    return self.format.closing("the gateway is shutting down; reconnect (another replica answers)");
                }
                err = &mut self.revoked => {
                    self.ended = true;
                    warn!(node = %Escaped(self.request.node_id()), kind = %self.kind, %err, "watch ended: no longer authorized");
                    return self.format.closing(&format!("no longer authorized: {err}"));
                }
                (polled, changed) = change => {
                    self.change = None;
                    self.polled = Some(polled);
                    if !changed {
                        continue;
                    }
                    if let Some(frame) = self.answer() {
                        return Some(frame);
                    }
                    if self.ended {
                        return None;
                    }
                }
                () = tokio::time::sleep_until(self.next_heartbeat) => {
                    self.next_heartbeat = Instant::now() + self.heartbeat;
                    let current = self.request.version_info().to_owned();
                    self.book(&current, false);
                    return Some(self.format.heartbeat());
                }
            }
        }
    }

    /// Answers the current state: a frame when the client's answer changed.
    fn answer(&mut self) -> Option<Bytes> {
        let polled = self.polled.as_ref()?;
        match self.answered().answer(&self.gateway, polled) {
            Ok(answer) => self.frame_for(&answer),
            Err(err) => {
                // States are validated on arrival: this is the gateway's own
                // failure; end the stream rather than send a broken event.
                warn!(node = %Escaped(self.request.node_id()), kind = %self.kind, %err, "watch: rendering failed; stream ended");
                self.ended = true;
                None
            }
        }
    }

    /// The frame for `answer` (none for a 304), booking it.
    fn frame_for(&mut self, answer: &Answer) -> Option<Bytes> {
        if let Some(polled) = &self.polled {
            self.opaque = !polled.opaque_types(self.request.names()).is_empty();
        }
        match answer {
            Answer::NotModified { version } => {
                self.book(version, false);
                None
            }
            Answer::Body { json, version, .. } => {
                let frame = match self.body_frame(json, version) {
                    Ok(frame) => frame,
                    Err(err) => {
                        warn!(node = %Escaped(self.request.node_id()), kind = %self.kind, %err, "watch: rendering changes failed; stream ended");
                        self.ended = true;
                        return None;
                    }
                };
                // A watcher holds what it is sent (there is no next poll to
                // say so): booked as presenting it, it stands in step.
                self.request = self.request.presenting(version);
                self.book(version, true);
                self.gateway.metrics.watch_event(self.kind);
                self.next_heartbeat = Instant::now() + self.heartbeat;
                Some(frame)
            }
        }
    }

    /// The event for a body at `version` (in changes form with `?changes`:
    /// relative to the last event, or for the first one to the version the
    /// client presented, if the history still holds it), remembering what
    /// was served.
    fn body_frame(&mut self, json: &JsonBody, version: &str) -> Result<Bytes, JsonError> {
        let Some(polled) = &self.polled else {
            return Ok(self.format.event(RESPONSE_EVENT, version, &json.to_bytes()));
        };
        let (body, served) = self.answered().body(
            &self.gateway,
            polled,
            json.clone(),
            version,
            self.changes,
            self.last.clone(),
        )?;
        let event = if self.changes {
            CHANGES_EVENT
        } else {
            RESPONSE_EVENT
        };
        if served.is_some() {
            self.last = served;
        }
        Ok(self.format.event(event, version, &body.to_bytes()))
    }

    /// Books an answer at `current` (`body`: an event went out) in the
    /// client book. A heartbeat counts as a 304: a watch quiet for longer
    /// than the book's idle time stays listed.
    fn book(&self, current: &str, body: bool) {
        let booking = Booking {
            current,
            cached: current,
            body,
            opaque: self.opaque,
            served: None,
        };
        self.answered()
            .book(&self.gateway, self.polled.as_ref(), booking);
    }

    /// Who its answers go to: the client, presenting the version last sent.
    fn answered(&self) -> Answered<'_> {
        Answered {
            kind: self.kind,
            request: &self.request,
            remote: self.remote,
            target: self.target.as_ref(),
            watch: true,
        }
    }
}

/// Waits (bounded) for `polled`'s state to change; after a wait that ended
/// early without one, pauses before the next look.
fn wait_for_change(mut polled: Polled) -> Change {
    async move {
        let started = Instant::now();
        let changed = polled.next_change(CHANGE_WAIT).await;
        if !changed && started.elapsed() < CHANGE_WAIT {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        (polled, changed)
    }
    .boxed()
}
