//! What a session's upstream stream did last, for `/debug/sessions`: its
//! phase (connecting, open) and since when, and per type the last ACK or
//! NACK sent. Written by the stream driver and the protocols; read only by
//! views. Nothing decides on it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::xds::ResourceType;

/// Where the upstream stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Not yet asked to connect (a session starts here).
    Idle,
    /// Opening the stream (TCP, TLS, HTTP/2, the gRPC call).
    Connecting,
    /// The stream is open.
    Open,
}

/// One reply the gateway sent upstream for a response.
#[derive(Debug, Clone)]
struct Reply {
    at: SystemTime,
    version: String,
    /// `None` for an ACK; the `error_detail` of a NACK.
    nack: Option<String>,
}

#[derive(Debug)]
struct Log {
    phase: Phase,
    since: SystemTime,
    replies: BTreeMap<ResourceType, Reply>,
}

/// The upstream log of one session.
#[derive(Debug)]
pub(super) struct UpstreamLog(Mutex<Log>);

impl Default for UpstreamLog {
    fn default() -> Self {
        UpstreamLog(Mutex::new(Log {
            phase: Phase::Idle,
            since: SystemTime::now(),
            replies: BTreeMap::new(),
        }))
    }
}

impl UpstreamLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream entered `phase` now.
    pub(super) fn phase(&self, phase: Phase) {
        let mut log = self.lock();
        if log.phase != phase {
            log.phase = phase;
            log.since = SystemTime::now();
        }
    }

    /// An ACK of `version` of `kind` was sent.
    pub(super) fn acked(&self, kind: ResourceType, version: &str) {
        self.reply(kind, version, None);
    }

    /// A NACK of `kind` presenting `version` was sent, saying `detail`.
    pub(super) fn nacked(&self, kind: ResourceType, version: &str, detail: &str) {
        self.reply(kind, version, Some(detail.to_owned()));
    }

    fn reply(&self, kind: ResourceType, version: &str, nack: Option<String>) {
        self.lock().replies.insert(
            kind,
            Reply {
                at: SystemTime::now(),
                version: version.to_owned(),
                nack,
            },
        );
    }

    /// The phase as `(name, since)`.
    pub(super) fn stream(&self) -> (&'static str, String) {
        let log = self.lock();
        let name = match log.phase {
            Phase::Idle => "idle",
            Phase::Connecting => "connecting",
            Phase::Open => "open",
        };
        (name, stamp(log.since))
    }

    /// The last reply sent for `kind`, as JSON (`null` if none).
    pub(super) fn last_reply(&self, kind: ResourceType) -> Value {
        match self.lock().replies.get(&kind) {
            None => Value::Null,
            Some(reply) => json!({
                "kind": if reply.nack.is_some() { "NACK" } else { "ACK" },
                "version": reply.version,
                "at": stamp(reply.at),
                "error_detail": reply.nack,
            }),
        }
    }
}

pub(super) fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_reply_per_type_and_the_phase_are_kept() {
        let log = UpstreamLog::default();
        assert_eq!(log.stream().0, "idle");
        log.phase(Phase::Connecting);
        log.phase(Phase::Open);
        assert_eq!(log.stream().0, "open");
        assert_eq!(log.last_reply(ResourceType::Clusters), Value::Null);
        log.acked(ResourceType::Clusters, "1");
        log.nacked(ResourceType::Clusters, "1", "cluster a: connect_timeout");
        let reply = log.last_reply(ResourceType::Clusters);
        assert_eq!(reply["kind"], "NACK");
        assert_eq!(reply["version"], "1");
        assert_eq!(reply["error_detail"], "cluster a: connect_timeout");
        assert_eq!(log.last_reply(ResourceType::Listeners), Value::Null);
    }
}
