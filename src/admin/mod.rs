//! The admin listener, separate from the REST one.
//!
//! Endpoints:
//! - `GET /healthz`: 200 while the process serves.
//! - `GET /readyz`: 200 once the upstream has answered (or the snapshot first
//!   loaded), 503 before; JSON details, including the problems of the latest
//!   snapshot reload (path, line, reason) while the last good one is served.
//! - `GET /metrics`: Prometheus text format.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;
use crate::source::Source;

/// What the admin endpoints read.
#[derive(Debug)]
pub(crate) struct Admin {
    source: Arc<dyn Source>,
    metrics: Arc<Metrics>,
}

impl Admin {
    pub(crate) fn new(source: Arc<dyn Source>, metrics: Arc<Metrics>) -> Admin {
        Admin { source, metrics }
    }
}

pub(crate) fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(admin)
}

async fn readyz(State(admin): State<Arc<Admin>>) -> Response {
    let status = admin.source.status();
    let ready = status.ready;
    let body = serde_json::json!({
        "ready": ready,
        "source": status.description,
        "problems": status.problems,
        "sessions": status.sessions,
        "stale_sessions": status.stale_sessions,
        "upstream_streams_open": admin.metrics.streams_open(),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut response = (status, format!("{body}\n")).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    admin
        .metrics
        .set_stale_sessions(admin.source.status().stale_sessions);
    let mut response = admin.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}
