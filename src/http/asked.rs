//! A discovery request as a poll and a watch both serve it, once checked
//! and authorized ([`Asked`]), and what the gateway does with every answer
//! to it, polls and watches alike ([`Answered`]): the answer by the cache's
//! rule, the answer written into the client book once ([`Booking`]), and a
//! body remembered in the `?changes` history (and given in changes form
//! when asked).

use std::future::Future;
use std::sync::Arc;

use tracing::warn;

use super::authorize::Caller;
use super::Gateway;
use crate::auth::AuthError;
use crate::cache::{Answer, ClientAddr, JsonBody, ParsedRequest, ResourceSet};
use crate::log_escape::Escaped;
use crate::observe::{AnsweredPoll, ServedAnswer};
use crate::shares::Tenant;
use crate::store::Polled;
use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// A discovery request, checked and authorized, and where its answers point.
pub(super) struct Asked<'a> {
    pub(super) kind: ResourceType,
    /// Who asked: what it holds open ends when a policy reload revokes that.
    pub(super) caller: &'a Caller,
    pub(super) request: &'a ParsedRequest,
    /// Where its ADS config sources point, if they are rewritten for it.
    pub(super) target: Option<RestTarget>,
    pub(super) remote: ClientAddr,
    /// `?changes`: bodies in changes form.
    pub(super) changes: bool,
    /// Whose shares of the limits it counts against.
    pub(super) tenant: Option<Tenant>,
}

impl Asked<'_> {
    /// Resolves once a reload of the auth policy (or of the client CA) no
    /// longer allows this request: what ends a long poll or a watch.
    pub(super) fn revoked(&self) -> impl Future<Output = AuthError> + Send + 'static {
        let request = self.request;
        self.caller
            .revoked(self.kind, request.node_id(), request.node_cluster())
    }

    /// Who its answers go to.
    pub(super) fn answered(&self) -> Answered<'_> {
        Answered {
            kind: self.kind,
            request: self.request,
            remote: self.remote,
            target: self.target.as_ref(),
            watch: false,
        }
    }
}

/// Who an answer goes to: what the answer, the client book and the
/// history key on. A watch answers the same client again and again, each
/// time presenting the version it was last sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct Answered<'a> {
    pub(super) kind: ResourceType,
    pub(super) request: &'a ParsedRequest,
    pub(super) remote: ClientAddr,
    pub(super) target: Option<&'a RestTarget>,
    /// Answers of a watch stream (the client book shows it as a subscriber).
    pub(super) watch: bool,
}

/// One answer as the client book is told it ([`Answered::book`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Booking<'a> {
    /// The version answered at (a 304 or a body).
    pub(super) current: &'a str,
    /// The version the cache answered at, before make-before-break held it
    /// back: what the client's standing is judged against.
    pub(super) cached: &'a str,
    /// Whether a body went out (else a 304).
    pub(super) body: bool,
    /// Whether the answer holds a type served opaque: a client refusing it
    /// is not suspected of a rejection (nor is that forwarded upstream);
    /// the gateway knows why, and it is its own limit.
    pub(super) opaque: bool,
    /// The resources of the body, when the book keeps what each client
    /// holds (`--make-before-break`).
    pub(super) served: Option<&'a Arc<ResourceSet>>,
}

impl Answered<'_> {
    /// Its answer from `polled`'s state now, by the cache's rule: a body, or
    /// a 304 when it holds what it would get.
    pub(super) fn answer(&self, gateway: &Gateway, polled: &Polled) -> Result<Answer, JsonError> {
        let request = self.request;
        polled.state().answer_digested(
            &gateway.assembler,
            request.names(),
            request.names_digest(),
            request.version_info(),
            self.target,
        )
    }

    /// Writes `booking` into the client book (one write per answer), and
    /// logs and counts what the book suspects, NACKing it upstream through
    /// `polled` when its source forwards suspicions (`None`: a heartbeat,
    /// which presents the version it is booked at and so is never one).
    ///
    /// Not judged when the answer is opaque, or when `remote` is a proxy's
    /// that named no client: the pods of one Deployment behind it (one node
    /// id, one address) poll as one key, and right after a change each
    /// presents the old version once before any presents the new one, which
    /// is exactly what one client rejecting it looks like. No rule on that
    /// key's polls tells the two apart: N clients polling every P seconds
    /// look like one polling every P/N until P has passed, and P (their
    /// refresh delay) is not in the requests. So nothing is guessed.
    pub(super) fn book(&self, gateway: &Gateway, polled: Option<&Polled>, booking: Booking<'_>) {
        let request = self.request;
        let judged = self.remote.is_one_client() && !booking.opaque;
        let suspicion = gateway.clients.book(AnsweredPoll {
            request,
            kind: self.kind,
            remote: self.remote.ip(),
            current: booking.current,
            body: booking.body,
            judged: judged.then_some(booking.cached),
            rewritten_for: self.target.map(|t| t.cluster_name.as_str()),
            watch: self.watch,
            served: booking.served,
        });
        let Some(suspicion) = suspicion else {
            // A client's own NACK needs no guess: logged, not forwarded (the
            // gateway's own limit when opaque; one per client behind a
            // proxy that names none, with no book to report it once).
            if let (false, Some(detail)) = (judged, request.error_detail()) {
                self.nacked(booking.current, &detail.message, false);
            }
            return;
        };
        let forwarded = polled.is_some_and(|polled| polled.forward(request, &suspicion));
        if let Some(message) = &suspicion.nack {
            self.nacked(&suspicion.current, message, forwarded);
            return;
        }
        warn!(
            node = %Escaped(request.node_id()), kind = %self.kind,
            presented = %Escaped(&suspicion.presented),
            current = %Escaped(&suspicion.current),
            polls = suspicion.polls, nacked = forwarded,
            "suspected rejection: a REST client keeps presenting an older version"
        );
        gateway.metrics.suspected_rejection(self.kind);
    }

    /// Logs the client's own NACK of `current` (`forwarded`: it was also
    /// sent upstream). Every NACK poll is counted where it is polled.
    fn nacked(&self, current: &str, message: &str, forwarded: bool) {
        let request = self.request;
        warn!(
            node = %Escaped(request.node_id()), kind = %self.kind,
            presented = %Escaped(request.version_info()),
            %current, code = request.error_detail().map_or(0, |e| e.code),
            message = %Escaped(message), forwarded,
            "a REST client NACKed what it was served"
        );
    }

    /// The body to send for `json` at `version`, remembering what was
    /// served in the history (what a later `?changes` is relative to).
    /// With `changes`, the body is in changes form relative to `last` (the
    /// watch's last event) or else to the version the request presents, if
    /// the history holds it as served to this client; what was served is
    /// then returned (the next changes are relative to it).
    pub(super) fn body(
        &self,
        gateway: &Gateway,
        polled: &Polled,
        json: JsonBody,
        version: &str,
        changes: bool,
        last: Option<Arc<ServedAnswer>>,
    ) -> Result<(JsonBody, Option<Arc<ServedAnswer>>), JsonError> {
        let answer_log = &gateway.answer_log;
        let served = || Arc::new(polled.served(self.request, self.target));
        // A `do_not_cache` resource is kept in no log shared past this
        // answer: a later `?changes` relative to it is then a full state.
        let remembered = !polled.holds_uncacheable(self.request.names());
        if !changes {
            if remembered {
                // Made only when the log does not hold `version` yet.
                answer_log.remember(version, served);
            }
            return Ok((json, None));
        }
        // What the client holds, if a body at it went out to this client
        // (recorded in the book after this body, so never this one).
        let presented = self.request.version_info();
        let since = match remembered {
            false => None,
            true => last.or_else(|| {
                let remote = self.remote.ip();
                let held = gateway
                    .clients
                    .was_served(self.request, self.kind, remote, presented);
                held.then(|| answer_log.recall(presented)).flatten()
            }),
        };
        let served = served();
        let body = served.changes(&gateway.assembler, version, since.as_deref())?;
        if remembered {
            answer_log.remember(version, || served.clone());
        }
        Ok((JsonBody::from(body), Some(served)))
    }
}
