//! A discovery request as a poll and a watch both serve it, once checked
//! and authorized ([`Asked`]), and what the gateway does with every answer
//! to it, polls and watches alike ([`Answered`]): the answer by the cache's
//! rule, the client shown in the client book, and a body remembered in the
//! `?changes` history (and given in changes form when asked).

use std::future::Future;
use std::sync::Arc;

use super::authorize::{AuthError, Caller};
use super::Gateway;
use crate::cache::{Answer, ClientAddr, JsonBody, ParsedRequest, ResourceSet};
use crate::observe::{AnsweredPoll, Booked, ServedAnswer, Standing};
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

impl Answered<'_> {
    /// Its answer from `polled` now: a body, or a 304 when it holds what it
    /// would get.
    pub(super) fn answer(
        &self,
        gateway: &Gateway,
        polled: &mut Polled,
    ) -> Result<Answer, JsonError> {
        polled.answer(
            &gateway.assembler,
            &gateway.clients,
            self.request,
            self.remote,
            self.target,
        )
    }

    /// Shows it in the client book, answered at `current` (`body`: a body
    /// went out, else a 304, made from `served` when the book keeps that),
    /// standing as `standing`; in `booked` when the answer found the client
    /// there (`Polled::booked`).
    pub(super) fn record(
        &self,
        gateway: &Gateway,
        current: &str,
        body: bool,
        standing: Standing,
        booked: Option<&Booked>,
        served: Option<&Arc<ResourceSet>>,
    ) {
        let poll = AnsweredPoll {
            request: self.request,
            kind: self.kind,
            remote: self.remote.ip(),
            current,
            body,
            standing,
            rewritten_for: self.target.map(|t| t.cluster_name.as_str()),
            watch: self.watch,
            served,
        };
        gateway.clients.record_booked(poll, booked);
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
