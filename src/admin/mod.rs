//! The admin listener, separate from the REST one.
//!
//! Endpoints:
//! - `GET /healthz`: 200 while the process serves.
//! - `GET /readyz`: 200 once the upstream has answered (or the snapshot first
//!   loaded), 503 before, and 503 again from the moment the gateway starts
//!   shutting down (`"draining": true`); JSON details, including the problems of the latest
//!   snapshot reload (path, line, reason) while the last good one is served.
//! - `GET /metrics`: Prometheus text format.
//! - `GET /debug/clients`, `GET /debug/sessions`, `GET /debug/config`: the
//!   REST clients seen recently and where each stands; the sessions and
//!   their upstream streams; what a node is served (`debug.rs`).
//! - `GET /debug/history`, `GET /debug/diff`: a node's config history, and
//!   what differs between two nodes or two versions of one (`history.rs`,
//!   `diff.rs`); authorized per node (`access.rs` `Sight`).
//! - CSDS for the REST clients: gRPC `ClientStatusDiscoveryService` and
//!   `GET /debug/client_status` (`csds.rs`).
//! - `GET /`: the same views as one HTML page for a person (`page.rs`).
//!
//! The JSON views are described by `openapi/admin.yaml`; a test holds it
//! in step with what this router serves.
//!
//! With admin tokens in the auth policy (`[admin] token-sha256`), `/metrics`,
//! the debug views and the page need the token, as `Authorization: Bearer
//! <token>` or, for a browser, HTTP Basic with the token as the password
//! (any user name); with mTLS on the listener (`--admin-client-ca`), a
//! client certificate that CA signed opens them too (`access.rs`); else a
//! 401 (JSON for the views, HTML with a Basic challenge for the page).
//! `/readyz` without it says only whether the gateway is ready (its details
//! name files and the upstream). `/healthz` is always open, for probes.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::Router;

mod access;
mod csds;
mod debug;
mod diff;
mod history;
mod json_diff;
mod page;
mod views;

use crate::auth::AuthPolicy;
use crate::cache::{Assembler, OpaqueTypes};
use crate::config::AdminConfig;
use crate::drain::Drain;
use crate::error_body::{self, code};
use crate::face::credential::{self, Credential};
use crate::face::host::HostError;
use crate::metrics::Metrics;
use crate::observe::{ClientBook, ConfigHistory};
use crate::serve::Peer;
use crate::store::Inspect;
use crate::tls::{PeerIdentity, ServerTls};

/// What the admin endpoints read.
#[derive(Debug)]
pub(crate) struct Admin {
    source: Arc<dyn Inspect>,
    metrics: Arc<Metrics>,
    auth: Option<Arc<AuthPolicy>>,
    clients: Arc<ClientBook>,
    /// Which types the gateway had no descriptor for (`/readyz`).
    opaque_types: OpaqueTypes,
    /// Answers `/debug/config` as the REST side would.
    assembler: Assembler,
    /// What `/debug/history` and `/debug/diff` read (the sessions record
    /// into the same).
    history: ConfigHistory,
    config: AdminConfig,
    drain: Drain,
    /// The admin listener's TLS when it asks for client certificates
    /// (mTLS): certificates its CA signs open the details.
    client_trust: Option<Arc<ServerTls>>,
}

impl Admin {
    pub(crate) fn new(
        source: Arc<dyn Inspect>,
        metrics: Arc<Metrics>,
        clients: Arc<ClientBook>,
        opaque_types: OpaqueTypes,
        assembler: Assembler,
        history: ConfigHistory,
        config: AdminConfig,
    ) -> Admin {
        Admin {
            source,
            metrics,
            auth: None,
            clients,
            opaque_types,
            assembler,
            history,
            config,
            drain: Drain::default(),
            client_trust: None,
        }
    }

    /// The same admin state, letting client certificates of `tls` (when it
    /// asks for them) open the details.
    pub(crate) fn with_client_trust(mut self, tls: Option<Arc<ServerTls>>) -> Admin {
        self.client_trust = tls.filter(|tls| tls.asks_for_client_certificates());
        self
    }

    /// The same admin state, reporting not ready once `drain` begins.
    pub(crate) fn with_drain(mut self, drain: Drain) -> Admin {
        self.drain = drain;
        self
    }

    /// The same admin state, with the policy's admin tokens guarding details.
    pub(crate) fn with_auth(mut self, auth: Option<Arc<AuthPolicy>>) -> Admin {
        self.auth = auth;
        self
    }

    /// Whether a request (`headers`, over a connection whose verified
    /// client certificate is `peer`) may see `what`; `Err` says what
    /// would open it.
    fn details_allowed(&self, what: &str, headers: &HeaderMap, peer: Peer) -> Result<(), String> {
        let peer = peer.as_ref().map(|Extension(p)| &**p);
        self.authorize_details(what, authorization(headers), peer)
    }
}

/// The `Authorization` value of a request, if it has one (one that is not
/// text is taken as a wrong credential, never as none).
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default())
}

/// The admin token of an `Authorization` value: `Bearer <token>`, or
/// `Basic base64(user:token)` (what a browser sends once a person typed the
/// token as the password; the user name is ignored).
fn admin_token(value: &str) -> Option<String> {
    match credential::of(value)? {
        Credential::Bearer(token) => Some(token.to_owned()),
        Credential::Basic(password) => password,
        Credential::Other => None,
    }
}

pub(crate) fn router(admin: Arc<Admin>) -> Router {
    let csds = csds::ClientStatusDiscoveryServiceServer::new(csds::Csds(admin.clone()));
    let csds = tonic::service::Routes::new(csds).into_axum_router();
    // The routes that show details: one guard for all of them.
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/debug/clients", get(debug::clients))
        .route("/debug/sessions", get(debug::sessions))
        .route("/debug/config", get(debug::config))
        .route("/debug/client_status", get(debug::client_status))
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            require_token,
        ));
    Router::new()
        .route("/", get(page::status))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        // Judged per node inside (`access.rs` `Sight`): a principal's
        // token opens the nodes it may fetch.
        .route("/debug/history", get(history::history))
        .route("/debug/diff", get(diff::diff_view))
        .merge(guarded)
        .with_state(admin.clone())
        .merge(csds)
        // tonic's router answers any other path with a 200 carrying
        // grpc-status UNIMPLEMENTED; a person's browser or curl needs a 404
        // (gRPC clients read an HTTP 404 as UNIMPLEMENTED too).
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(admin, answer_host))
}

/// Refuses a request whose `Host` (or HTTP/2 `:authority`) the admin
/// listener does not answer (`face::host::check_request`): while it asks
/// for no credential, only the hosts a DNS rebinding page cannot be.
async fn answer_host(
    State(admin): State<Arc<Admin>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // Read as the REST listener reads it: HTTP/2's `:authority` is a Host.
    let request = crate::face::host::authority_as_host(request);
    let checked = crate::face::host::check_request(
        &request,
        !admin.asks_for_credentials(),
        &admin.config.allowed_hosts,
    );
    let Err(error) = checked else {
        return next.run(request).await;
    };
    let (status, rpc_code) = match error {
        HostError::Repeated(_) => (StatusCode::BAD_REQUEST, code::INVALID_ARGUMENT),
        HostError::NotAllowed(_) => (StatusCode::FORBIDDEN, code::PERMISSION_DENIED),
    };
    error_body::response(status, rpc_code, &error.to_string())
}

/// Any other path: a JSON 404 naming what the admin listener serves.
async fn not_found(uri: axum::http::Uri) -> Response {
    let message = format!(
        "no admin endpoint {}; the admin listener serves / (status page), /healthz, /readyz, /metrics, \
         /debug/sessions, /debug/clients, /debug/config?node=ID, /debug/client_status, \
         /debug/history?node=ID&type=T, /debug/diff?node=A&with=B&type=T and gRPC CSDS",
        uri.path()
    );
    error_body::response(StatusCode::NOT_FOUND, code::NOT_FOUND, &message)
}

async fn readyz(State(admin): State<Arc<Admin>>, headers: HeaderMap, peer: Peer) -> Response {
    let readiness = admin.readiness();
    let ready = readiness.ready;
    let body = if admin.details_allowed("", &headers, peer).is_ok() {
        views::json(&readiness, false)
    } else {
        // Without a credential (when one is set up): only whether it is ready.
        views::json(&views::ReadyOnly { ready }, false)
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    error_body::json(status, format!("{body}\n"))
}

/// The 401 of a detail asked for without an admin credential, saying why.
fn needs_token(message: String) -> Response {
    let challenge = "Bearer realm=\"xds-gateway-admin\"";
    let response = error_body::response(StatusCode::UNAUTHORIZED, code::UNAUTHENTICATED, &message);
    ([(header::WWW_AUTHENTICATE, challenge)], response).into_response()
}

/// The guard of `/metrics` and the debug views: with admin tokens in the
/// policy or mTLS on the listener, a request without an admin credential
/// is a JSON 401.
async fn require_token(
    State(admin): State<Arc<Admin>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let peer = request.extensions().get::<Arc<PeerIdentity>>();
    let authorized = admin.authorize_details(
        request.uri().path(),
        authorization(request.headers()),
        peer.map(|p| &**p),
    );
    match authorized {
        Ok(()) => next.run(request).await,
        Err(message) => needs_token(message),
    }
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let metrics = &admin.metrics;
    metrics.set_stale_sessions(admin.source.status().stale_sessions);
    metrics.set_history_bytes(admin.history.held_bytes().0);
    let text = metrics.encode();
    let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

#[cfg(test)]
mod tests;
