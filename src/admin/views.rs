//! The typed views of the admin listener: what `/readyz` and
//! `/debug/sessions` serve ([`Readiness`], [`SessionsView`]) and the status
//! page renders from the same structs, with `/debug/clients`' client book
//! view ([`ClientsView`](crate::observe::ClientsView)); and how a view is
//! written as JSON ([`json`]).
//!
//! A session's own view is the source's ([`SessionView`]); this adds what
//! only the admin side knows (how many REST clients poll through it).

use serde::Serialize;

use super::Admin;
use crate::store::SessionView;

/// What `/readyz` says without an admin credential (when one is set up).
#[derive(Debug, Clone, Serialize)]
pub(super) struct ReadyOnly {
    pub(super) ready: bool,
}

/// What `/readyz` says with details.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Readiness {
    /// The source answered and the gateway is not draining.
    pub(super) ready: bool,
    /// Shutting down: not ready from then on.
    pub(super) draining: bool,
    /// What feeds the gateway, e.g. `gRPC upstream http://... (sotw)`.
    pub(super) source: String,
    /// Why it does not serve what it should (path, line, reason).
    pub(super) problems: Vec<String>,
    pub(super) sessions: usize,
    pub(super) stale_sessions: usize,
    pub(super) waiting_sessions: usize,
    /// Sessions with a stream on a failover upstream now.
    pub(super) failed_over_sessions: usize,
    /// Per session on a failover: the node, which upstream its streams are
    /// on, since when and why.
    pub(super) failovers: Vec<String>,
    /// Per stale or waiting session whose stream failed: the node and the
    /// upstream's last error.
    pub(super) session_errors: Vec<String>,
    /// Sessions whose upstream's answers of some type are being refused
    /// (NACKed); each is named in `problems`.
    pub(super) refusing_sessions: usize,
    pub(super) upstream_streams_open: i64,
}

/// What `/debug/sessions` shows.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SessionsView {
    pub(super) source: String,
    pub(super) ready: bool,
    /// Sorted by node id (per upstream, with several).
    pub(super) sessions: Vec<NodeSession>,
}

/// One session, and the REST clients polling through it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct NodeSession {
    /// The source's view of the session; its fields are served inline.
    #[serde(flatten)]
    pub(super) session: SessionView,
    /// REST clients seen recently with its node id and cluster.
    pub(super) clients: usize,
}

/// How many types without a descriptor `/readyz` lists one by one.
const MAX_OPAQUE_PROBLEMS: usize = 32;

/// What `/readyz` says of a type the gateway has no descriptor for: how
/// it is served, what each upstream said when asked, and both remedies.
fn opaque_problem(type_url: &str, opaque: &crate::cache::Opaque) -> String {
    let mut text = format!(
        "no descriptor for {type_url}: {} resources of a new content held it, served with that Any as an {} (never NACKed)",
        opaque.resources,
        crate::xds::OPAQUE_TYPE_URL
    );
    for (upstream, why) in &opaque.why {
        text.push_str(&format!("; upstream {upstream}: {why}"));
    }
    text.push_str(
        "; to render it in full, serve gRPC server reflection on the upstream (the gateway asks it), \
         or start the gateway with --descriptor-set FILE holding its descriptors \
         (`xds-gateway descriptors --upstream URL --type TYPE_URL --out FILE` writes one)",
    );
    text
}

impl Admin {
    /// What `/readyz` says with details (the page shows the same).
    pub(super) fn readiness(&self) -> Readiness {
        let status = self.source.status();
        let draining = self.drain.is_draining();
        let mut problems = status.problems;
        let (opaque, more) = self.opaque_types.listed();
        let shown = opaque.len().min(MAX_OPAQUE_PROBLEMS);
        problems.extend(
            opaque
                .iter()
                .take(shown)
                .map(|(type_url, opaque)| opaque_problem(type_url, opaque)),
        );
        let unlisted = (opaque.len() - shown) as u64 + more;
        if unlisted > 0 {
            problems.push(format!(
                "{unlisted} more types without a descriptor, served opaque (not listed)"
            ));
        }
        Readiness {
            ready: status.ready && !draining,
            draining,
            source: status.description,
            problems,
            sessions: status.sessions,
            stale_sessions: status.stale_sessions,
            waiting_sessions: status.waiting_sessions,
            failed_over_sessions: status.failed_over_sessions,
            failovers: status.failovers,
            session_errors: status.session_errors,
            refusing_sessions: status.refusing_sessions,
            upstream_streams_open: self.metrics.streams_open(),
        }
    }

    /// What `/debug/sessions` shows (the page shows the same).
    pub(super) fn sessions_view(&self) -> SessionsView {
        let clients = self.clients.per_node();
        let sessions = self
            .source
            .sessions()
            .into_iter()
            .map(|session| {
                let node = (session.node_id.clone(), session.cluster.clone());
                NodeSession {
                    clients: clients.get(&node).copied().unwrap_or(0),
                    session,
                }
            })
            .collect();
        let status = self.source.status();
        SessionsView {
            source: status.description,
            ready: status.ready,
            sessions,
        }
    }
}

/// `view` as JSON text, indented when `pretty`. Object keys come out
/// sorted, whatever order the struct declares them in: the views have
/// always been served that way.
pub(super) fn json(view: &impl Serialize, pretty: bool) -> String {
    let value = serde_json::to_value(view).unwrap_or_default();
    let text = if pretty {
        serde_json::to_string_pretty(&value)
    } else {
        serde_json::to_string(&value)
    };
    text.unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page and the JSON read one struct; the JSON is what it
    /// was (keys sorted, the stream's fields inline and absent for a
    /// snapshot), whichever order the fields are declared in.
    #[test]
    fn a_view_is_served_with_sorted_keys_and_its_stream_inline() {
        use crate::store::{LastError, Phase, StreamView};
        let session = |stream| NodeSession {
            session: SessionView {
                node_id: "n".into(),
                cluster: "c".into(),
                source: "s".into(),
                serves: None,
                stream,
                node_sent: Default::default(),
                requests_in_flight: 0,
                types: Default::default(),
            },
            clients: 2,
        };
        assert_eq!(
            json(&session(None), false),
            r#"{"clients":2,"cluster":"c","node_id":"n","node_sent":{"client_features":[],"extensions":0,"left_out":[],"user_agent_name":"","user_agent_version":""},"requests_in_flight":0,"source":"s","types":{}}"#
        );
        let stream = StreamView {
            phase: Phase::Connecting,
            since: "2026-01-01T00:00:00Z".into(),
            stale_since: None,
            last_error: Some(LastError {
                at: "2026-01-01T00:00:01Z".into(),
                error: "refused".into(),
            }),
            placement: None,
        };
        assert_eq!(
            json(&session(Some(stream)), false),
            r#"{"clients":2,"cluster":"c","last_error":{"at":"2026-01-01T00:00:01Z","error":"refused"},"node_id":"n","node_sent":{"client_features":[],"extensions":0,"left_out":[],"user_agent_name":"","user_agent_version":""},"requests_in_flight":0,"source":"s","stale_since":null,"stream":"connecting","stream_since":"2026-01-01T00:00:00Z","types":{}}"#
        );
    }
}
