//! The connection to the control plane, shared by every session and call:
//! one lazily connecting HTTP/2 channel (plaintext or TLS / mTLS),
//! keepalive, message size limits, the metadata sent on every call, the
//! "has answered" readiness mark, and unary calls (the `Fetch*` RPCs and the
//! HDS/CSDS pass-through): [`UpstreamContext`]. With it, what is known of
//! one upstream beyond its channel: whether it answers now ([`health`], for
//! failover), which API it speaks ([`probe`], for `--upstream-mode
//! auto` and readiness), which types it has answered ([`served`]), and the
//! descriptors of its types that the gateway lacks, asked by gRPC server
//! reflection ([`learner`], [`reflection`]).
//!
//! Almost every module of `upstream` names the context; so that none of them
//! is named back, this module names nothing of `upstream` but the leaves it
//! is made of (`backoff`, `frame_codec`, `held`) and its own children.

pub(crate) mod health;
mod learner;
pub use learner::{descriptor_set, DescriptorsError};
pub(crate) mod probe;
mod reflection;
mod served;

use super::frame_codec::{FrameCodec, FromFrame, ToFrame};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::client::legacy::connect::HttpConnector;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint as TonicEndpoint, Identity,
};
use tonic::Code;

use tracing::{debug, info};

use super::backoff::Backoff;
use super::held::HeldSets;
use crate::cache::Intake;
use crate::config::{UpstreamSpec, UpstreamTls};
use crate::log_escape::Escaped;
use crate::metrics::Metrics;
use crate::read_ahead::ReadAheadConnector;
use crate::store::{CallError, PassThrough, PassedThrough, SourceError};
use crate::xds::Endpoint;
pub(super) use health::Health;
pub(super) use served::ServedTypes;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the channel connects: TCP (with no delay: requests are ACKs and
/// subscriptions, written whole), read through [`ReadAhead`], so a
/// response of 93 KB is one read, not twelve of h2's 8 KiB. tonic puts TLS
/// over it when the endpoint is `https://`, and bounds the whole connect
/// (TCP and TLS) by the endpoint's `connect_timeout`, [`CONNECT_TIMEOUT`],
/// for a custom connector too.
///
/// [`ReadAhead`]: crate::read_ahead::ReadAhead
fn connector() -> ReadAheadConnector<HttpConnector> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    ReadAheadConnector(tcp)
}

/// Why the upstream connection could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid upstream address {uri}: {reason}")]
    BadUpstream { uri: String, reason: String },
    #[error("upstream TLS: {0}")]
    Tls(String),
}

/// What every session's upstream task and every unary call share.
#[derive(Debug)]
pub struct UpstreamContext {
    /// The name of its `[[upstream]]` table (`default` for `--upstream`).
    pub(super) name: String,
    /// The control plane's URI, for logs and /readyz.
    pub(super) uri: String,
    pub(super) channel: Channel,
    /// How to connect (for the start-up reachability check).
    endpoint: TonicEndpoint,
    pub(super) intake: Intake,
    pub(super) metrics: Arc<Metrics>,
    pub(super) max_message_bytes: usize,
    metadata: MetadataMap,
    /// Set once the upstream answered anything; never unset.
    answered: AtomicBool,
    /// Whether it answers now, for failover ([`Health`]).
    pub(super) health: Health,
    /// What this upstream's delta sessions hold, shared among them.
    pub(super) held_sets: Arc<HeldSets>,
    /// Whether the node goes on a stream's first request only.
    pub(super) node_first_only: bool,
    /// The types asked of it by reflection ([`learner`]).
    learner: learner::Learner,
    /// The types it has answered ([`served`]).
    pub(super) served: ServedTypes,
}

impl UpstreamContext {
    /// A lazily connecting channel to `spec`'s control plane (the first
    /// call connects); messages up to `max_message_bytes`.
    pub fn new(
        spec: &UpstreamSpec,
        max_message_bytes: usize,
        intake: Intake,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<UpstreamContext>, StartError> {
        let uri = spec.uri.as_str();
        let bad = |reason: String| StartError::BadUpstream {
            uri: uri.to_owned(),
            reason,
        };
        let mut endpoint = TonicEndpoint::from_shared(uri.to_owned())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(spec.keepalive)
            .keep_alive_timeout(spec.keepalive.max(Duration::from_secs(1)))
            .keep_alive_while_idle(true);
        if uri.starts_with("https://") {
            endpoint = endpoint
                .tls_config(tls_config(&spec.tls)?)
                .map_err(|e| StartError::Tls(e.to_string()))?;
        }
        let mut metadata = MetadataMap::new();
        for (name, value) in &spec.headers {
            let key = name
                .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()
                .map_err(|e| bad(format!("header {name:?}: {e}")))?;
            let value: MetadataValue<_> = value
                .parse()
                .map_err(|e| bad(format!("header {name:?}: {e}")))?;
            metadata.append(key, value);
        }
        Ok(Arc::new(UpstreamContext {
            held_sets: Arc::new(HeldSets::new(metrics.clone())),
            node_first_only: spec.node_first_only,
            learner: learner::Learner::new(spec.reflection),
            name: spec.name.clone(),
            uri: uri.to_owned(),
            channel: endpoint.connect_with_connector_lazy(connector()),
            endpoint,
            intake,
            metrics,
            max_message_bytes,
            metadata,
            answered: AtomicBool::new(false),
            health: Health::default(),
            served: ServedTypes::default(),
        }))
    }

    /// Connects once (TCP, TLS, HTTP/2) and logs the outcome, so a wrong
    /// address or certificate shows at start-up, before any client polls.
    /// The serving channel is not touched: it connects on first use.
    pub async fn log_reachability(self: Arc<Self>) {
        match self.endpoint.connect_with_connector(connector()).await {
            Ok(_) => tracing::info!(upstream = %self.uri, "upstream reachable"),
            Err(e) => tracing::warn!(
                upstream = %self.uri,
                error = %Escaped(error_chain(&e)),
                "cannot reach the upstream; clients get 503s until it answers (retried per session)"
            ),
        }
    }

    /// Records that the upstream answered (readiness).
    pub(super) fn mark_answered(&self) {
        self.answered.store(true, Ordering::Release);
    }

    pub(super) fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }

    /// Checks in the background, with backoff, until the upstream answers a
    /// gRPC health check (`probe::answers_health_check`), then marks it
    /// answered. Without it readiness would wait for a first poll, and a
    /// balancer sends no poll to a replica that is not ready. Ends once
    /// answered (a session's stream may answer first) or when the context
    /// is dropped.
    pub fn check_readiness(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut backoff = Backoff::default();
            loop {
                let Some(ctx) = weak.upgrade() else { return };
                if ctx.has_answered() {
                    return;
                }
                match probe::answers_health_check(&ctx).await {
                    Ok(()) => {
                        info!(upstream = %ctx.uri, "upstream answers: ready");
                        ctx.mark_answered();
                        return;
                    }
                    Err(reason) => {
                        let delay = backoff.next_delay();
                        debug!(upstream = %ctx.uri, reason = %Escaped(&reason), retry_in = ?delay, "upstream not ready yet");
                        drop(ctx);
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        });
    }

    /// A request carrying the configured metadata.
    pub(super) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        request
    }

    /// A generic gRPC client on the channel (message sizes set), ready to
    /// call, and `path` as a method path.
    async fn ready_client(
        &self,
        path: &str,
    ) -> Result<(tonic::client::Grpc<Channel>, PathAndQuery), tonic::Status> {
        let method = PathAndQuery::try_from(path)
            .map_err(|e| tonic::Status::internal(format!("{path}: {e}")))?;
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        Ok((grpc, method))
    }

    /// Opens the streaming call at `path` (an ADS or per-type method) with
    /// `requests` as its outbound stream: the inbound stream once the
    /// response headers came.
    pub(super) async fn streaming<Req, Resp>(
        &self,
        path: &str,
        requests: impl tokio_stream::Stream<Item = Req> + Send + 'static,
    ) -> Result<tonic::Streaming<Resp>, tonic::Status>
    where
        Req: ToFrame,
        Resp: FromFrame,
    {
        let (mut grpc, path) = self.ready_client(path).await?;
        grpc.streaming(self.request(requests), path, FrameCodec::default())
            .await
            .map(tonic::Response::into_inner)
    }

    /// One unary call to `endpoint`'s Fetch method with prost messages.
    pub(super) async fn unary<Req, Resp>(
        &self,
        endpoint: Endpoint,
        request: Req,
    ) -> Result<Resp, CallError>
    where
        Req: ToFrame,
        Resp: FromFrame,
    {
        let fail = |method: &str, code: Code, message: String| CallError::Upstream {
            method: method.to_owned(),
            code,
            message,
        };
        let Some(fetch) = endpoint.fetch_method() else {
            let method = format!("/{}/Fetch", endpoint.service());
            let why = match endpoint {
                Endpoint::Discovery(kind) if kind.is_extra() => format!(
                    "extra type {kind} names no service (`service` in its [[extra-type]] table): it has no unary method to fetch with"
                ),
                _ => "a delta-only type has no unary method".to_owned(),
            };
            return Err(fail(&method, Code::Unimplemented, why));
        };
        let method = format!("/{}/{fetch}", endpoint.service());
        let call = async {
            let (mut grpc, path) = self.ready_client(&method).await?;
            grpc.unary(self.request(request), path, FrameCodec::default())
                .await
        };
        call.await
            .map(tonic::Response::into_inner)
            .map_err(|status| fail(&method, status.code(), status.message().to_owned()))
    }

    /// Asks the upstream an HDS or CSDS question as it is.
    pub(super) async fn pass_through(
        &self,
        call: PassThrough,
    ) -> Result<PassedThrough, SourceError> {
        let endpoint = call.endpoint();
        Ok(match call {
            PassThrough::HealthCheck(request) => {
                PassedThrough::HealthCheck(self.unary(endpoint, request).await?)
            }
            PassThrough::ClientStatus(request) => {
                PassedThrough::ClientStatus(self.unary(endpoint, request).await?)
            }
        })
    }
}

fn tls_config(tls: &UpstreamTls) -> Result<ClientTlsConfig, StartError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| StartError::Tls(format!("{}: {e}", path.display())))
    };
    let mut config = ClientTlsConfig::new().with_enabled_roots();
    if let Some(ca) = &tls.ca {
        config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// `err` and every cause under it, on one line ("transport error: tcp
/// connect error: Connection refused").
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = next.source();
    }
    out
}

#[cfg(test)]
pub(super) use self::test_context::unused_context;

#[cfg(test)]
mod test_context {
    use super::*;

    /// A context whose channel connects nowhere until used (for protocol unit
    /// tests, which never call).
    pub(crate) fn unused_context() -> Arc<UpstreamContext> {
        use crate::config::{UpstreamMode, UpstreamStreams};
        let spec = UpstreamSpec {
            name: "test".into(),
            uri: "http://127.0.0.1:9".into(),
            mode: UpstreamMode::Sotw,
            streams: UpstreamStreams::Aggregated,
            tls: UpstreamTls::default(),
            headers: Vec::new(),
            keepalive: Duration::from_secs(30),
            node_first_only: false,
            reflection: true,
            authorities: Vec::new(),
            failover: None,
        };
        let intake = Intake::new(crate::xds::Codec::embedded());
        UpstreamContext::new(&spec, 1 << 20, intake, Arc::new(Metrics::new()))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}
