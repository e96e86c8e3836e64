//! The REST face: `router(gateway) -> Router`, a pure function.
//!
//! Endpoints:
//! - `POST /v3/discovery:{listeners,routes,scoped-routes,clusters,endpoints,secrets,runtime,extension_configs}`
//!   (`?wait=DURATION` long-polls a current version)
//!
//! Anything else is a JSON 404 that names the closest valid path, or a JSON
//! 405 for a known path with the wrong method. Only this module and `admin`
//! know axum and status codes.

pub mod discovery;
pub mod error;
pub mod parsed;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::routing::post;
use axum::Router;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::source::Registry;
use crate::xds::resource_type::PATH_PREFIX;
use crate::xds::{Endpoint, ResourceType};
pub use error::ApiError;

/// What every handler shares.
#[derive(Debug)]
pub struct Gateway {
    pub config: Arc<Config>,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    /// Memo of request bodies already parsed (Envoy repeats its body).
    pub parsed: parsed::ParsedRequests,
}

/// The REST router over `gateway`.
pub fn router(gateway: Arc<Gateway>) -> Router {
    let limit = gateway.config.max_body_bytes;
    let mut router = Router::new();
    for kind in ResourceType::ALL {
        let path = Endpoint::Discovery(kind).path();
        router = router.route(
            &path,
            post(
                move |State(gw): State<Arc<Gateway>>,
                      headers: HeaderMap,
                      Query(query): Query<HashMap<String, String>>,
                      body| { discovery::handle(gw, kind, headers, query, body) },
            )
            .fallback(method_not_allowed),
        );
    }
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(gateway)
}

/// Every path the router serves (kept in step with openapi/ by a test).
pub fn served_paths() -> Vec<String> {
    ResourceType::ALL
        .iter()
        .map(|k| Endpoint::Discovery(*k).path())
        .collect()
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{method} is not allowed on {}; use POST",
        uri.path()
    ))
}

async fn not_found(uri: Uri) -> ApiError {
    let path = uri.path();
    let message = match path.strip_prefix(PATH_PREFIX) {
        Some(suffix) => format!(
            "no endpoint {path}; did you mean {PATH_PREFIX}{}?",
            Endpoint::closest_suffix(suffix)
        ),
        None => format!("no endpoint {path}; discovery endpoints are POST {PATH_PREFIX}<type>"),
    };
    ApiError::NotFound(message)
}

#[cfg(test)]
mod tests;
