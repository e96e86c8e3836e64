//! What a session records of each reply its stream sends upstream, the
//! same for SotW and delta: an ACK ends the type's run of NACKs and is
//! counted and noted in the upstream's log (`/debug/sessions`); a NACK is
//! counted, noted there and recorded in the config history, and one
//! refusing a response on arrival is also logged (one line per run of
//! identical NACKs, `nack_log.rs`) and counted as an invalid resource when
//! it breaks one of Envoy's field rules. Building the request that carries
//! the reply is the protocol's business.

use std::sync::Arc;

use super::decode::Rejection;
use super::nack_log::NackLog;
use crate::metrics::Metrics;
use crate::store::Publisher;
use crate::xds::ResourceType;

/// The reply bookkeeping of one session's protocol ("sotw" or "delta").
pub(super) struct Replies {
    mode: &'static str,
    metrics: Arc<Metrics>,
    session: Publisher,
    /// The NACKs logged, one line per run of identical ones.
    log: NackLog,
}

impl Replies {
    pub(super) fn new(mode: &'static str, metrics: Arc<Metrics>, session: Publisher) -> Replies {
        Replies {
            mode,
            metrics,
            session,
            log: NackLog::default(),
        }
    }

    /// The response of `kind` at `version` was accepted: ACKed.
    pub(super) fn ack(&mut self, kind: ResourceType, version: &str) {
        self.log.accepted(kind);
        self.metrics.ack(kind);
        self.session.upstream().acked(kind, version);
    }

    /// The response of `kind` at `version` with `nonce` was refused on
    /// arrival for `reason`: logged, counted, and NACKed presenting
    /// `presented` (see [`Replies::nack`]). Returns the NACK's detail.
    pub(super) fn refuse(
        &mut self,
        kind: ResourceType,
        reason: &Rejection,
        version: &str,
        presented: &str,
        nonce: &str,
    ) -> String {
        let detail = reason.to_string();
        self.log.refused(kind, self.mode, version, &detail);
        if reason.breaks_rules() {
            self.metrics.invalid_resource(kind);
        }
        self.nack(kind, presented, version, nonce, &detail);
        detail
    }

    /// A NACK of the response of `kind` at `version` with `nonce`, for
    /// `detail`, presenting `presented` (the version the session still
    /// holds): counted, noted in the upstream's log, recorded in the config
    /// history.
    pub(super) fn nack(
        &self,
        kind: ResourceType,
        presented: &str,
        version: &str,
        nonce: &str,
        detail: &str,
    ) {
        self.metrics.nack(kind);
        self.session.upstream().nacked(kind, presented, detail);
        self.session.record_nack(kind, version, nonce, detail);
    }
}
