//! The REST face: `router(gateway) -> Router`, a pure function.
//!
//! Endpoints:
//! - `POST /v3/discovery:{listeners,routes,scoped-routes,clusters,endpoints,secrets,runtime,extension_configs}`
//!   (`?wait=DURATION` long-polls a current version; `?pretty`, `?format=yaml`;
//!   `?watch` streams every new version as Server-Sent Events or NDJSON;
//!   `?changes` answers what changed since the version presented)
//! - `GET` on the same paths with `?node=&cluster=&names=a,b&version=` (and `If-None-Match`),
//!   the node from a profile (`?profile=NAME`) and inline parts (`?metadata=`,
//!   `?locality=`, `?user_agent=`)
//! - `POST /v3/discovery:health_check` (HDS) and `/v3/discovery:client_status`
//!   (CSDS): passed through to the upstream's unary RPCs, JSON both ways
//! - `GET /`: the endpoint list, one example each
//!
//! Anything else is a JSON 404 that names the closest valid path, or a JSON
//! 405 for a known path with the wrong method. Only this module, `admin` and
//! the code they share (`face`) know axum and status codes; what answers a
//! poll is the [`Source`]'s business, whichever kind it is.

mod admission;
mod asked;
mod authorize;
mod caching;
mod discovery;
mod forwarded;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz;
mod long_poll;
mod make_before_break;
mod passthrough;
mod pieces;
mod present;
pub(crate) mod renditions;
mod wait;
mod watch;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;

use crate::auth::AuthPolicy;
use crate::cache::{Assembler, ParsedRequests};
use crate::config::RestConfig;
use crate::drain::Drain;
use crate::face::{host, ApiError, Params};
use crate::metrics::Metrics;
use crate::observe::{AnswerLog, ClientBook};
use crate::profiles::NodeProfiles;
use crate::serve::{Peer, RemoteAddr};
use crate::shares::Tenant;
use crate::store::Source;
use crate::tls::ServerTls;
use crate::xds::PATH_PREFIX;
use crate::xds::{Endpoint, ResourceType};
use admission::{Hold, Places};
use renditions::Renditions;

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct Gateway {
    config: RestConfig,
    source: Arc<dyn Source>,
    assembler: Assembler,
    metrics: Arc<Metrics>,
    /// Memo of request bodies already parsed (Envoy repeats its body).
    parsed: ParsedRequests,
    /// YAML and `?pretty` answers, rendered once per body and shared.
    renditions: Renditions,
    /// The long polls that may be held at once (`--max-long-polls`), and
    /// each principal's share of them.
    long_polls: Places,
    /// The watches that may be open at once (`--max-watches`), and each
    /// principal's share of them (each open stream owns its place).
    watches: Places,
    /// Who may fetch what; `None`: everyone everything.
    auth: Option<Arc<AuthPolicy>>,
    /// The REST listener's TLS, whose client CA reloads open requests are
    /// verified against again; `None`: plaintext.
    client_trust: Option<Arc<ServerTls>>,
    /// Where the admin listener is bound (named by 404s of admin paths).
    admin_address: Option<std::net::SocketAddr>,
    /// The REST clients seen recently and where each stands.
    clients: Arc<ClientBook>,
    /// The answers served recently, for `?changes`.
    answer_log: AnswerLog,
    /// What holds a new version back until what it names was served
    /// (`--make-before-break`).
    make_before_break: make_before_break::MakeBeforeBreak,
    /// The node profiles a GET may present (`?profile=NAME`).
    profiles: Arc<NodeProfiles>,
    /// Set at shutdown: no new long polls or watches, held ones answered,
    /// open watches ended.
    drain: Drain,
    /// Whether a trusted proxy that names no client was seen (and said).
    unnamed_proxy_seen: std::sync::atomic::AtomicBool,
}

impl Gateway {
    pub(crate) fn new(
        config: RestConfig,
        source: Arc<dyn Source>,
        assembler: Assembler,
        metrics: Arc<Metrics>,
    ) -> Gateway {
        Gateway {
            parsed: ParsedRequests::with_capacities(
                config.session_key,
                config.memory.parsed,
                config.memory.nodes,
            ),
            renditions: Renditions::with_capacity(config.memory.renditions),
            long_polls: Places::new(
                Hold::LongPoll,
                config.max_long_polls,
                config.principal_share,
            ),
            watches: Places::new(Hold::Watch, config.max_watches, config.principal_share),
            auth: None,
            client_trust: None,
            admin_address: None,
            clients: Arc::new(ClientBook::holding(
                config.idle_timeout,
                config.rejection_threshold,
                config.memory.book,
            )),
            drain: Drain::default(),
            answer_log: AnswerLog::with_idle(config.idle_timeout),
            make_before_break: make_before_break::MakeBeforeBreak::new(config.make_before_break),
            profiles: Arc::default(),
            unnamed_proxy_seen: std::sync::atomic::AtomicBool::new(false),
            config,
            source,
            assembler,
            metrics,
        }
    }

    /// Whose share of the global limits `caller`'s requests count against:
    /// none without a policy or with a policy of one principal (nobody to
    /// starve).
    fn tenant(&self, caller: &authorize::Caller) -> Option<Tenant> {
        let principals = self.auth.as_ref()?.current().principal_count();
        Tenant::of(caller.principal(), principals)
    }

    /// Who sent a request: its connection's TLS identity and its client.
    fn sender(&self, peer: Peer, remote: Remote, headers: &HeaderMap) -> discovery::Sender {
        let remote = self.client_addr(remote.map(|Extension(r)| r), headers);
        (peer.map(|Extension(p)| p), remote)
    }

    /// The same gateway, presenting `profiles` for `?profile=` GETs.
    pub(crate) fn with_profiles(mut self, profiles: Arc<NodeProfiles>) -> Gateway {
        self.profiles = profiles;
        self
    }

    /// The same gateway, authorizing every request with `auth`.
    pub(crate) fn with_auth(mut self, auth: Option<Arc<AuthPolicy>>) -> Gateway {
        self.auth = auth;
        self
    }

    /// The same gateway, verifying the client certificates of what stays
    /// open again when `tls` reloads its client CA.
    pub(crate) fn with_client_trust(mut self, tls: Option<Arc<ServerTls>>) -> Gateway {
        self.client_trust = tls;
        self
    }

    /// The REST clients this gateway has seen (for the admin views).
    pub(crate) fn clients(&self) -> Arc<ClientBook> {
        self.clients.clone()
    }

    /// The same gateway, knowing where the admin listener is bound.
    pub(crate) fn with_admin_address(mut self, address: std::net::SocketAddr) -> Gateway {
        self.admin_address = Some(address);
        self
    }

    /// The same gateway, refusing and ending long polls once `drain` begins.
    pub(crate) fn with_drain(mut self, drain: Drain) -> Gateway {
        self.drain = drain;
        self
    }
}

/// The address the connection came from, as `serve` put it on the request.
type Remote = Option<Extension<RemoteAddr>>;

pub(crate) fn router(gateway: Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for kind in ResourceType::all() {
        let path = Endpoint::Discovery(kind).path();
        router = router.route(
            &path,
            post(
                move |State(gw): State<Arc<Gateway>>,
                      peer: Peer,
                      remote: Remote,
                      headers: HeaderMap,
                      Params(query): Params,
                      body| {
                    let sender = gw.sender(peer, remote, &headers);
                    discovery::handle(gw, kind, headers, sender, query, Some(body))
                },
            )
            .get(
                move |State(gw): State<Arc<Gateway>>,
                      peer: Peer,
                      remote: Remote,
                      headers: HeaderMap,
                      Params(query): Params| {
                    let sender = gw.sender(peer, remote, &headers);
                    discovery::handle(gw, kind, headers, sender, query, None)
                },
            )
            .fallback(|method, uri| method_not_allowed(method, uri, "POST or GET")),
        );
    }
    for endpoint in [Endpoint::HealthCheck, Endpoint::ClientStatus] {
        router = router.route(
            &endpoint.path(),
            post(
                move |State(gw): State<Arc<Gateway>>, peer: Peer, headers: HeaderMap, body| {
                    let peer = peer.map(|Extension(p)| p);
                    passthrough::handle(gw, endpoint, headers, peer, body)
                },
            )
            .fallback(|method, uri| method_not_allowed(method, uri, "POST")),
        );
    }
    router
        .route(
            "/",
            get(index).fallback(|method, uri| method_not_allowed(method, uri, "GET")),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            answer_host,
        ))
        .with_state(gateway)
}

/// Refuses a request whose `Host` this listener does not answer
/// ([`host::check_request`]): without an auth policy or TLS, only the hosts
/// a DNS rebinding page cannot be. The host is read after
/// [`host::authority_as_host`] (one layer for both: each layer costs every
/// poll a boxed future).
async fn answer_host(
    State(gw): State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let request = host::authority_as_host(request);
    match host::check_request(
        &request,
        // Open: no policy, and plaintext (a rebound name fails TLS's
        // check of the server's certificate).
        gw.auth.is_none() && gw.client_trust.is_none(),
        &gw.config.allowed_hosts,
    ) {
        Ok(()) => next.run(request).await,
        Err(err @ host::HostError::Repeated(_)) => {
            ApiError::BadRequest(err.to_string()).into_response()
        }
        Err(err) => ApiError::Forbidden(err.to_string()).into_response(),
    }
}

/// `GET /`: what this server serves, with a curl line per endpoint.
async fn index(headers: HeaderMap) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1:8080");
    let mut out = String::from(
        "xds-gateway: Envoy REST xDS (JSON). POST a DiscoveryRequest, or GET with ?node=&cluster=&names=a,b&version=;\n\
         add ?pretty or ?format=yaml to read, ?wait=25s to long-poll, ?watch to stream every new version\n\
         (NDJSON, or Server-Sent Events with Accept: text/event-stream), ?changes for what changed since ?version=.\n\
         A GET's node can be a named profile (?profile=NAME&node=ID) and carry ?metadata=<JSON object>,\n\
         ?locality=REGION/ZONE/SUB_ZONE and ?user_agent=NAME/VERSION: the same request as the POST of that node.\n\n",
    );
    for endpoint in [Endpoint::HealthCheck, Endpoint::ClientStatus] {
        let path = endpoint.path();
        out.push_str(&format!(
            "{path:<36} curl -H 'Content-Type: application/json' 'http://{host}{path}' -d '{{}}'   (passed through to a gRPC upstream)\n"
        ));
    }
    for kind in ResourceType::all() {
        let path = Endpoint::Discovery(kind).path();
        let names = if kind.wildcard_when_unnamed() {
            ""
        } else {
            "&names=NAME"
        };
        let note = if kind.delta_only() {
            "   (delta upstream only; for tooling, Envoy cannot poll it over REST)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{path:<36} curl 'http://{host}{path}?node=ID&cluster=C{names}&pretty'{note}\n"
        ));
    }
    out
}

async fn method_not_allowed(method: Method, uri: Uri, allowed: &str) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{method} is not allowed on {}; use {allowed}",
        uri.path()
    ))
}

/// Paths the admin listener serves, which people try on this one first.
const ADMIN_PATHS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/debug"];

async fn not_found(State(gateway): State<Arc<Gateway>>, uri: Uri) -> ApiError {
    let path = uri.path();
    let admin_path = ADMIN_PATHS
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")));
    if admin_path {
        let at = gateway
            .admin_address
            .map_or_else(|| "--admin".to_owned(), |a| format!("http://{a}"));
        return ApiError::NotFound(format!(
            "{path} is served on the admin listener ({at}{path}), not on the REST listener"
        ));
    }
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
