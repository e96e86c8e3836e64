//! The store: what a poll reads, behind one serving seam, [`Source`], with
//! introspection apart ([`Inspect`]) and both owned as a [`Feed`].
//!
//! The REST layer asks a source one thing per poll, [`Source::poll`], and
//! gets a [`Polled`]: the state that answers this client now, how to wait
//! for the next one (long poll), whether it is stale, and where a suspected
//! rejection is NACKed upstream. The REST face answers from the state
//! through the cache and books the answer itself; it never learns which
//! source is behind the seam (`app.rs` alone chooses).
//!
//! Here live the sessions ([`Sessions`]: one `Session` per node identity,
//! shared by every client of that identity, in one lane per upstream that
//! owns names), what each holds (per type, the state published last, its
//! node, what the upstream refused, its upstream log), how a poll is routed
//! among upstreams by namespace (`federation.rs`) and the typed views
//! (`view.rs`). A session is filled by a producer, started per session
//! through the [`Feeder`] seam and written in the gateway's `upstream`: the
//! store names no producer, and producers hold only a narrow handle on their
//! session ([`Publisher`]). Submodules are private but [`shares`] (the
//! per-principal shares of the global limits, which the faces take too);
//! what the gateway names is re-exported here.

// The crates below, under the names the modules use.
use xds_gateway_base::{log_escape, sync};
use xds_gateway_cache as cache;
use xds_gateway_config as config;
use xds_gateway_metrics as metrics;
use xds_gateway_observe as observe;
use xds_gateway_xds as xds;

mod federation;
mod feeder;
mod namespace;
mod node;
mod polled;
mod publisher;
mod session;
mod session_registry;
pub mod shares;
mod unserved;
mod upstream_log;
mod view;

#[cfg(any(test, feature = "test-support"))]
mod scripted;

use std::fmt;
use std::time::Duration;

use envoy_types::pb::envoy::service::health::v3::{
    HealthCheckRequestOrEndpointHealthResponse, HealthCheckSpecifier,
};
use envoy_types::pb::envoy::service::status::v3::{ClientStatusRequest, ClientStatusResponse};
use futures::future::BoxFuture;
use tonic::Code;

pub use federation::UpstreamSlot;
pub use feeder::Feeder;
pub use namespace::{Foreign, Namespace};
pub use node::NodeBytes;
#[cfg(any(test, feature = "test-support"))]
pub use node::{upstream_features, NodeInterner, SessionNode};
pub use polled::Polled;
pub use publisher::Publisher;
#[cfg(any(test, feature = "test-support"))]
pub use scripted::{idle, Script};
pub use session::{Command, SETTLE};
pub use session_registry::Sessions;
pub use unserved::Refused;
#[cfg(any(test, feature = "test-support"))]
pub use view::{LastError, ReplyView, SessionTypeView, StreamView};
pub use view::{
    Phase, Placement, Placements, ReplyKind, SessionView, FAILBACK_REASON, FAILOVER_REASON,
};

use crate::cache::ParsedRequest;
use crate::shares::{OverShare, Tenant};
use crate::xds::{Endpoint, ResourceType};

/// The serving seam: what the REST face asks of whatever feeds the
/// gateway, and nothing else (no introspection, no lifecycle).
pub trait Source: Send + Sync + fmt::Debug {
    /// The state that answers `request` for `kind`, waiting (bounded by the
    /// first-response timeout) for the upstream's first answer covering the
    /// names asked for. A session this opens counts against `tenant`'s
    /// share of `--max-sessions` until it closes.
    fn poll<'a>(
        &'a self,
        kind: ResourceType,
        request: &'a ParsedRequest,
        tenant: Option<&'a Tenant>,
    ) -> BoxFuture<'a, Result<Polled, SourceError>>;

    /// One HDS or CSDS question asked of the upstream as it is.
    fn pass_through(&self, call: PassThrough) -> BoxFuture<'_, Result<PassedThrough, SourceError>>;
}

/// What the admin face reads of a source: readiness and what its sessions
/// hold. Apart from [`Source`], so that serving code cannot reach it.
pub trait Inspect: Send + Sync + fmt::Debug {
    /// Readiness and what stands in its way, for `/readyz` and `/metrics`.
    fn status(&self) -> Status;

    /// What the session of node `node_id` holds now, every type it has
    /// (for `/debug/config`); empty when no session has that node.
    fn states_of(&self, node_id: &str) -> Vec<std::sync::Arc<crate::cache::TypeState>>;

    /// Where the streams of node `node_id`'s sessions are, with failover
    /// configured: per session, the upstream whose names it serves, and
    /// the upstream its stream is on (for CSDS).
    fn placements_of(&self, node_id: &str) -> Vec<StreamPlacement>;

    /// Every session, sorted by node id (per upstream, with several), for
    /// `/debug/sessions` and the status page.
    fn sessions(&self) -> Vec<view::SessionView>;
}

/// A source as `app.rs` owns it: served through [`Source`], read through
/// [`Inspect`], closed at shutdown.
pub trait Feed: Source + Inspect {
    /// Stops every task the source runs (at shutdown).
    fn close(&self);
}

/// Which upstream a session's stream is on, for the upstream whose names
/// it serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamPlacement {
    /// The `[[upstream]]` whose names the session serves.
    pub serves: String,
    /// The stream: `ads`, or a type's short name (per-type streams).
    pub stream: &'static str,
    #[serde(flatten)]
    pub placement: Placement,
}

/// A question passed through to the upstream's unary RPCs.
#[derive(Debug)]
pub enum PassThrough {
    HealthCheck(HealthCheckRequestOrEndpointHealthResponse),
    ClientStatus(ClientStatusRequest),
}

impl PassThrough {
    /// The REST endpoint this question came in on.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            PassThrough::HealthCheck(_) => Endpoint::HealthCheck,
            PassThrough::ClientStatus(_) => Endpoint::ClientStatus,
        }
    }
}

/// The upstream's answer to a [`PassThrough`].
#[derive(Debug)]
pub enum PassedThrough {
    HealthCheck(HealthCheckSpecifier),
    ClientStatus(ClientStatusResponse),
}

/// What `/readyz` says of a source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Ready once the source has answered (snapshot loaded, upstream
    /// answered); never unready again.
    pub ready: bool,
    /// What the source is, e.g. `gRPC upstream http://... (sotw)`.
    pub description: String,
    /// Why it is not serving what it should (a snapshot file that does not
    /// load, with path, line and reason).
    pub problems: Vec<String>,
    /// Node identities with an open session.
    pub sessions: usize,
    /// Sessions serving their last state while the upstream stream is down.
    pub stale_sessions: usize,
    /// Sessions whose upstream has not answered yet.
    pub waiting_sessions: usize,
    /// Sessions with a stream on a failover upstream now.
    pub failed_over_sessions: usize,
    /// Per session on a failover: the node, where its streams are and why
    /// (at most [`SESSION_ERRORS_SHOWN`]).
    pub failovers: Vec<String>,
    /// Per stale or waiting session whose stream failed: the node and the
    /// upstream's last error (at most [`SESSION_ERRORS_SHOWN`]).
    pub session_errors: Vec<String>,
    /// Sessions whose last reply to some type was a NACK: the upstream's
    /// answers are being refused.
    pub refusing_sessions: usize,
}

/// How many session errors `/readyz` lists at most.
pub const SESSION_ERRORS_SHOWN: usize = 20;

/// Why a poll (or a pass-through call) could not be answered. Each variant
/// is one failure the REST face maps to one status (`face/error.rs`).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("too many sessions ({max}); try again later")]
    TooManySessions { max: usize },
    #[error(transparent)]
    OverShare(#[from] OverShare),
    #[error("sessions hold {held} bytes of nodes; a new one of {wanted} bytes would pass the limit of {max} (--max-session-bytes); try again later")]
    SessionBytes {
        held: usize,
        wanted: usize,
        max: usize,
    },
    #[error("{sessions} sessions are open, and the upstream's largest answer is {answer} bytes: a new session's stream would take the answers the sessions' streams hold at once past {max} bytes (the memory budget's share, --memory-budget-bytes); try again later")]
    AnswerBytes {
        sessions: usize,
        answer: usize,
        max: u64,
    },
    #[error("this node's session already subscribes to the most {} names it may (at most {max}, --max-names-per-session, and {} bytes of them); names nobody asks for are dropped after --idle-timeout", kind.type_url(), session::NAME_BYTES)]
    TooManyNames { kind: ResourceType, max: usize },
    #[error("node is not a valid envoy.config.core.v3.Node: {0}")]
    InvalidNode(String),
    /// A gRPC control plane keys config on the node id; an empty one would
    /// open an upstream session for nobody.
    #[error("the request names no node id; the upstream control plane serves config per node, so send one (\"node\": {{\"id\": \"...\"}} in a POST body, ?node=ID in a GET)")]
    NoNodeId,
    #[error("the {origin} did not load: {problem}; see the admin /readyz for every problem")]
    NotLoaded { origin: String, problem: String },
    #[error("the upstream's API is still being probed (--upstream-mode auto)")]
    Probing,
    /// `from` says what should have answered: "the upstream", "the snapshot".
    #[error("{from} has not answered for {} within {within:?}", kind.type_url())]
    NoAnswer {
        from: &'static str,
        kind: ResourceType,
        within: Duration,
    },
    /// The upstream refused the type for this session: it is set aside
    /// (`unserved.rs`) and not asked for again until `retry_in` has passed.
    #[error("{} is not served for this node: {refused}; the gateway asks the upstream again in {}s if a client still asks (the node's other types are unaffected)", kind.type_url(), retry_in.as_secs())]
    Unserved {
        kind: ResourceType,
        refused: unserved::Refused,
        retry_in: Duration,
    },
    /// A name of the type the upstream refused alone (it ended the streams
    /// that asked for it), set aside (`unserved.rs`).
    #[error("{name:?} of {} is not served for this node: {refused}; the gateway asks the upstream again in {}s if a client still asks (the type's other names are unaffected)", kind.type_url(), retry_in.as_secs())]
    NameUnserved {
        kind: ResourceType,
        name: String,
        refused: unserved::Refused,
        retry_in: Duration,
    },
    /// The upstream answered, and the gateway refused (NACKed) the answer:
    /// never reported as an upstream that did not answer.
    #[error("the upstream answered {} but the gateway refused the answer (NACK): {detail}; it serves the type again once the upstream sends an answer it accepts (see the admin /debug/sessions)", kind.type_url())]
    Refused { kind: ResourceType, detail: String },
    #[error(transparent)]
    Upstream(#[from] CallError),
    #[error("{what} is passed through to a gRPC upstream; this gateway serves a snapshot (start it with --upstream)")]
    NoUpstream { what: String },
    /// VHDS and LEDS exist over delta xDS only.
    #[error("{} is served over delta xDS only, for tooling (Envoy cannot poll it over REST); this gateway is fed by {from}: start it with --upstream-mode delta to read it", kind.type_url())]
    DeltaOnly { kind: ResourceType, from: String },
}

/// Why a unary call to the upstream failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("upstream {method} failed: {code:?}: {message}")]
    Upstream {
        method: String,
        code: Code,
        message: String,
    },
    #[error("upstream answer rejected: {0}")]
    BadAnswer(String),
}
