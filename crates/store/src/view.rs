//! What a source shows of its sessions, as typed views: the return type of
//! [`Inspect::sessions`](super::Inspect::sessions), served by
//! `/debug/sessions` and rendered by the status page from the same structs
//! (a field renamed here breaks the page's build, not the page). A view is
//! a copy taken under the session's locks; nothing decides on it.
//!
//! A new field is filled in [`Session::view`](super::session::Session::view)
//! and documented in `openapi/admin.yaml` (its `Session` schema has
//! `additionalProperties: false`). It names no other module of `store`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cache::ResourceErrorView;

/// Where the upstream stream is (shown as `idle`, `connecting`, `open`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Not yet asked to connect (a session starts here).
    Idle,
    /// Opening the stream (TCP, TLS, HTTP/2, the gRPC call).
    Connecting,
    /// The stream is open.
    Open,
}

/// Which upstream a session's stream is on, since when and why (set by
/// `failover.rs`, `Placement::now`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The upstream's `[[upstream]]` name.
    pub upstream: String,
    /// RFC 3339, as every time in the admin views.
    pub since: String,
    /// `primary`, or what moved it (`failover: ...`, `failback: ...`).
    pub reason: String,
}

/// How the reason of a placement on a failover begins.
pub const FAILOVER_REASON: &str = "failover";
/// How the reason of a placement back on the primary begins.
pub const FAILBACK_REASON: &str = "failback";

impl Placement {
    /// Whether the stream was moved onto a failover upstream.
    pub fn on_failover(&self) -> bool {
        self.reason.starts_with(FAILOVER_REASON)
    }
}

/// One session (one node identity) as `/debug/sessions` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    pub node_id: String,
    pub cluster: String,
    /// What feeds it: the source's description, as `/readyz` gives it.
    pub source: String,
    /// With several upstreams, the `[[upstream]]` whose names it serves
    /// (set by the federation; absent with one upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serves: Option<String>,
    /// Its upstream stream; `None` when the source has no stream to show
    /// (a snapshot). Served inline: `stream`, `stream_since`,
    /// `stale_since` and `last_error` are fields of the session, absent
    /// for a snapshot.
    #[serde(flatten)]
    pub stream: Option<StreamView>,
    /// The node fields outside the session key, as the upstream was sent
    /// them: those of the client that opened the session, whichever client
    /// of the identity asks now.
    pub node_sent: SentNodeView,
    /// Requests being served now (held long polls and watches included).
    pub requests_in_flight: usize,
    /// Every type wanted or served, keyed by short name (`clusters`, ...).
    pub types: BTreeMap<&'static str, SessionTypeView>,
}

/// What the upstream is told of a session's clients beyond the session
/// key (node id, cluster, metadata and locality by default): the first
/// client's user agent, version, client features and extension count. An
/// upstream must not key config on them (`docs/production.md`); this shows
/// what it was sent.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SentNodeView {
    pub user_agent_name: String,
    /// `user_agent_version`, or the build version as `major.minor.patch`.
    pub user_agent_version: String,
    pub client_features: Vec<String>,
    /// How many `extensions` the node lists.
    pub extensions: usize,
    /// The fields of the client's node left out, to keep what every request
    /// upstream carries within 128 KiB beyond the session key.
    pub left_out: Vec<String>,
}

/// A session's upstream stream.
#[derive(Debug, Clone, Serialize)]
pub struct StreamView {
    #[serde(rename = "stream")]
    pub phase: Phase,
    /// Since when it has been in that phase (RFC 3339).
    #[serde(rename = "stream_since")]
    pub since: String,
    /// Since when the state served is stale (a stream is down), if it is.
    pub stale_since: Option<String>,
    /// Why the stream last ended; cleared when the upstream answers.
    pub last_error: Option<LastError>,
    /// With a failover configured, which upstream the stream is on, since
    /// when and why (served as `upstream`; absent without failover).
    #[serde(rename = "upstream", skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placements>,
}

/// Where a session's streams are.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Placements {
    /// The aggregated stream's.
    Aggregated(Placement),
    /// Each stream's, keyed `ads` or by a type's short name
    /// (`--upstream-streams per-type`).
    PerStream(BTreeMap<&'static str, Placement>),
}

/// Why an upstream stream ended, and when (RFC 3339).
#[derive(Debug, Clone, Serialize)]
pub struct LastError {
    pub at: String,
    pub error: String,
}

/// One type of a session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionTypeView {
    /// The version served; `None` until the upstream answered the type.
    pub version: Option<String>,
    /// Resources in that version.
    pub resources: Option<usize>,
    pub wildcard: bool,
    /// The first names subscribed (`name_count` counts them all).
    pub names: Vec<String>,
    pub name_count: usize,
    /// The last ACK or NACK sent upstream for the type, if any.
    pub last_reply: Option<ReplyView>,
    /// The first errors the upstream reported for single resources
    /// (`resource_errors`, remembered until a response carries the resource
    /// again); `resource_error_count` counts them all.
    pub resource_errors: Vec<ResourceErrorView>,
    pub resource_error_count: usize,
}

/// An ACK or NACK sent upstream.
#[derive(Debug, Clone, Serialize)]
pub struct ReplyView {
    pub kind: ReplyKind,
    pub version: String,
    /// When it was sent (RFC 3339).
    pub at: String,
    /// A NACK's `error_detail`; `None` for an ACK.
    pub error_detail: Option<String>,
    /// How many replies of the type in a row were this one (same kind,
    /// same `error_detail`): a NACK loop runs it up.
    pub in_a_row: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ReplyKind {
    Ack,
    Nack,
}

impl ReplyKind {
    /// Its name, as the views show it.
    pub fn name(self) -> &'static str {
        match self {
            ReplyKind::Ack => "ACK",
            ReplyKind::Nack => "NACK",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn placement(upstream: &str) -> Placement {
        Placement {
            upstream: upstream.into(),
            since: "2026-01-01T00:00:00Z".into(),
            reason: "primary".into(),
        }
    }

    /// `upstream` is the aggregated stream's placement, or one per stream
    /// keyed `ads` or by type; absent, like `serves`, when not set.
    #[test]
    fn placements_are_served_as_issue_22_documents_them() {
        let stream = |placement| StreamView {
            phase: Phase::Open,
            since: "2026-01-01T00:00:00Z".into(),
            stale_since: None,
            last_error: None,
            placement,
        };
        let served = |stream| {
            let view = SessionView {
                node_id: "n".into(),
                cluster: "c".into(),
                source: "s".into(),
                serves: None,
                stream: Some(stream),
                node_sent: Default::default(),
                requests_in_flight: 0,
                types: BTreeMap::new(),
            };
            serde_json::to_value(view).unwrap()
        };
        let none = served(stream(None));
        assert_eq!(none.get("upstream"), None, "{none}");
        assert_eq!(none.get("serves"), None, "{none}");
        let one = served(stream(Some(Placements::Aggregated(placement("main")))));
        assert_eq!(one["upstream"], json!(placement("main")), "{one}");
        let lanes = [
            ("ads", placement("main")),
            ("clusters", placement("backup")),
        ];
        let per_stream = served(stream(Some(Placements::PerStream(lanes.into()))));
        assert_eq!(
            per_stream["upstream"],
            json!({"ads": placement("main"), "clusters": placement("backup")}),
            "{per_stream}"
        );
    }
}
