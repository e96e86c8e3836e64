//! What a session's upstream streams did last and where they stand: the
//! phase (connecting, open) and since when, per type the last ACK or NACK
//! sent, the streams that are down, since when the state is served stale
//! and why, and which upstream each stream is on. Written by the producers;
//! read by the views (`view.rs`) and, for the stale mark, by polls.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::SystemTime;

use super::view::{LastError, Phase, Placement, Placements, ReplyKind, ReplyView, StreamView};
use crate::xds::ResourceType;

/// One reply the gateway sent upstream for a response.
#[derive(Debug, Clone)]
struct Reply {
    at: SystemTime,
    version: String,
    /// `None` for an ACK; the `error_detail` of a NACK.
    nack: Option<String>,
    /// How many replies of the type in a row were this one (the same kind,
    /// the same `error_detail`): a NACK loop shows as a count that runs up.
    in_a_row: u64,
}

/// A session's stream by lane: the aggregated one (`None`), or a type's
/// own (`--upstream-streams per-type`).
type Lane = Option<ResourceType>;

#[derive(Debug)]
struct Log {
    phase: Phase,
    since: SystemTime,
    replies: BTreeMap<ResourceType, Reply>,
    /// The streams that are down. The session is fresh again only when
    /// none is.
    down: BTreeSet<Lane>,
    /// Set while a stream is down after the session had served: the state
    /// is still served, marked stale since then.
    stale_since: Option<SystemTime>,
    /// Why a stream last ended, and when; cleared when all answer again.
    last_error: Option<(SystemTime, String)>,
    /// Which upstream each stream is on and why, when a failover could
    /// move it.
    placements: BTreeMap<Lane, Placement>,
}

#[derive(Debug)]
pub struct UpstreamLog(Mutex<Log>);

impl Default for UpstreamLog {
    fn default() -> Self {
        UpstreamLog(Mutex::new(Log {
            phase: Phase::Idle,
            since: SystemTime::now(),
            replies: BTreeMap::new(),
            down: BTreeSet::new(),
            stale_since: None,
            last_error: None,
            placements: BTreeMap::new(),
        }))
    }
}

impl Placement {
    /// On `upstream` from now, for `reason`.
    pub fn now(upstream: &str, reason: String) -> Placement {
        Placement {
            upstream: upstream.to_owned(),
            since: stamp(SystemTime::now()),
            reason,
        }
    }
}

impl UpstreamLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        crate::sync::lock(&self.0)
    }

    /// The stream entered `phase` now.
    pub fn phase(&self, phase: Phase) {
        let mut log = self.lock();
        if log.phase != phase {
            log.phase = phase;
            log.since = SystemTime::now();
        }
    }

    /// An ACK of `version` of `kind` was sent.
    pub fn acked(&self, kind: ResourceType, version: &str) {
        self.reply(kind, version, None);
    }

    /// A NACK of `kind` presenting `version` was sent, saying `detail`.
    pub fn nacked(&self, kind: ResourceType, version: &str, detail: &str) {
        self.reply(kind, version, Some(detail.to_owned()));
    }

    fn reply(&self, kind: ResourceType, version: &str, nack: Option<String>) {
        let mut log = self.lock();
        let in_a_row = match log.replies.get(&kind) {
            Some(last) if last.nack == nack => last.in_a_row.saturating_add(1),
            _ => 1,
        };
        log.replies.insert(
            kind,
            Reply {
                at: SystemTime::now(),
                version: version.to_owned(),
                nack,
                in_a_row,
            },
        );
    }

    /// The stream `lane` broke for `reason`. A session that `served` state
    /// serves it stale from now on (the first break counts; later ones do
    /// not move the time); one that never had state is still waiting.
    pub(super) fn failed(&self, lane: Lane, reason: String, served: bool) {
        let mut log = self.lock();
        log.down.insert(lane);
        let now = SystemTime::now();
        log.last_error = Some((now, reason));
        if served {
            log.stale_since.get_or_insert(now);
        }
    }

    /// The upstream answered again on `lane`: fresh once no stream is down.
    pub fn fresh(&self, lane: Lane) {
        let mut log = self.lock();
        log.down.remove(&lane);
        if log.down.is_empty() {
            log.stale_since = None;
            log.last_error = None;
        }
    }

    /// The stream `lane` is on `placement` now.
    pub fn place(&self, lane: Lane, placement: Placement) {
        self.lock().placements.insert(lane, placement);
    }

    /// The stream `lane` is gone (a probe whose type moved to the
    /// aggregated stream): it is nowhere.
    pub fn unplace(&self, lane: Lane) {
        self.lock().placements.remove(&lane);
    }

    /// Where each stream is, by lane (empty without failover).
    pub(super) fn placements(&self) -> Vec<(Lane, Placement)> {
        let log = self.lock();
        log.placements
            .iter()
            .map(|(l, p)| (*l, p.clone()))
            .collect()
    }

    pub(super) fn failed_over(&self) -> bool {
        self.lock().placements.values().any(Placement::on_failover)
    }

    /// Why a stream last ended, and when, unless all answered since.
    pub(super) fn last_error(&self) -> Option<(SystemTime, String)> {
        self.lock().last_error.clone()
    }

    pub(super) fn stale_since(&self) -> Option<SystemTime> {
        self.lock().stale_since
    }

    /// The stream as a session's view shows it, with its placement when a
    /// failover could move it: the aggregated stream's, or each stream's by
    /// lane.
    pub(super) fn view(&self) -> StreamView {
        let log = self.lock();
        let placement = match log.placements.first_key_value() {
            None => None,
            Some((None, placement)) if log.placements.len() == 1 => {
                Some(Placements::Aggregated(placement.clone()))
            }
            Some(_) => Some(Placements::PerStream(
                log.placements
                    .iter()
                    .map(|(lane, p)| (lane.map_or("ads", ResourceType::short_name), p.clone()))
                    .collect(),
            )),
        };
        StreamView {
            phase: log.phase,
            since: stamp(log.since),
            stale_since: log.stale_since.map(stamp),
            last_error: log.last_error.clone().map(|(at, error)| LastError {
                at: stamp(at),
                error,
            }),
            placement,
        }
    }

    /// The types whose last reply was a NACK, with the version presented
    /// and the reason: answers the gateway is refusing now.
    pub(super) fn refusals(&self) -> Vec<(ResourceType, String, String)> {
        let log = self.lock();
        let refused = log.replies.iter().filter_map(|(kind, reply)| {
            let detail = reply.nack.as_ref()?;
            Some((*kind, reply.version.clone(), detail.clone()))
        });
        refused.collect()
    }

    /// Why the last answer of `kind` was refused, if the last reply to it
    /// was a NACK.
    pub(super) fn refusal(&self, kind: ResourceType) -> Option<String> {
        self.lock().replies.get(&kind)?.nack.clone()
    }

    pub(super) fn last_reply(&self, kind: ResourceType) -> Option<ReplyView> {
        self.lock().replies.get(&kind).map(|reply| ReplyView {
            kind: match reply.nack {
                Some(_) => ReplyKind::Nack,
                None => ReplyKind::Ack,
            },
            version: reply.version.clone(),
            at: stamp(reply.at),
            error_detail: reply.nack.clone(),
            in_a_row: reply.in_a_row,
        })
    }
}

impl Phase {
    /// Its name, as the views show it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Connecting => "connecting",
            Phase::Open => "open",
        }
    }
}

pub fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_reply_per_type_and_the_phase_are_kept() {
        let log = UpstreamLog::default();
        // As served: the views' JSON.
        let json = |view| serde_json::to_value(view).unwrap();
        let null = serde_json::Value::Null;
        assert_eq!(log.view().phase.name(), "idle");
        log.phase(Phase::Connecting);
        log.phase(Phase::Open);
        assert_eq!(log.view().phase.name(), "open");
        assert_eq!(json(log.last_reply(ResourceType::Clusters)), null);
        log.acked(ResourceType::Clusters, "1");
        log.nacked(ResourceType::Clusters, "1", "cluster a: connect_timeout");
        let reply = json(log.last_reply(ResourceType::Clusters));
        assert_eq!(reply["kind"], "NACK");
        assert_eq!(reply["version"], "1");
        assert_eq!(reply["error_detail"], "cluster a: connect_timeout");
        assert_eq!(json(log.last_reply(ResourceType::Listeners)), null);
    }

    /// A NACK loop runs the count of identical replies up; another reply
    /// starts over.
    #[test]
    fn identical_replies_in_a_row_are_counted() {
        let log = UpstreamLog::default();
        let kind = ResourceType::Clusters;
        for _ in 0..5 {
            log.nacked(kind, "v0", "bad cluster");
        }
        assert_eq!(log.last_reply(kind).map(|r| r.in_a_row), Some(5));
        log.nacked(kind, "v0", "another reason");
        assert_eq!(log.last_reply(kind).map(|r| r.in_a_row), Some(1));
        log.acked(kind, "v1");
        log.acked(kind, "v2");
        assert_eq!(log.last_reply(kind).map(|r| r.in_a_row), Some(2));
    }
}
