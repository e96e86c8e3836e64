//! The connection to the control plane, shared by every session: one
//! lazily connecting HTTP/2 channel (plaintext or TLS / mTLS), keepalive,
//! message size limits, and the metadata sent on every call.

use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::{Readiness, SourceError};
use crate::cache::Renderer;
use crate::config::{Config, UpstreamMode, UpstreamTls};
use crate::metrics::Metrics;

/// Upstream connection establishment limit.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What every session's upstream task (and the fetch proxy) shares.
#[derive(Debug)]
pub struct UpstreamContext {
    /// The control plane's URI, for logs and /readyz.
    pub uri: String,
    /// The mode in use: set at start for sotw/delta/fetch, by the probe for
    /// auto (`None` until it has decided).
    mode: tokio::sync::watch::Sender<Option<UpstreamMode>>,
    pub channel: Channel,
    pub renderer: Renderer,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<Readiness>,
    pub max_message_bytes: usize,
    metadata: MetadataMap,
}

impl UpstreamContext {
    /// A lazily connecting channel to the configured upstream (the first call connects).
    pub fn new(
        config: &Config,
        uri: &str,
        renderer: Renderer,
        metrics: Arc<Metrics>,
        ready: Arc<Readiness>,
    ) -> Result<UpstreamContext, SourceError> {
        let mut endpoint = Endpoint::from_shared(uri.to_owned())
            .map_err(|e| SourceError::BadUpstream {
                uri: uri.to_owned(),
                reason: e.to_string(),
            })?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(config.upstream_keepalive)
            .keep_alive_timeout(config.upstream_keepalive.max(Duration::from_secs(1)))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        if uri.starts_with("https://") {
            endpoint = endpoint
                .tls_config(tls_config(&config.upstream_tls)?)
                .map_err(|e| SourceError::Tls(e.to_string()))?;
        }
        let mut metadata = MetadataMap::new();
        for (name, value) in &config.upstream_headers {
            let key = name
                .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()
                .map_err(|e| SourceError::BadUpstream {
                    uri: uri.to_owned(),
                    reason: format!("header {name:?}: {e}"),
                })?;
            let value: MetadataValue<_> = value.parse().map_err(|e| SourceError::BadUpstream {
                uri: uri.to_owned(),
                reason: format!("header {name:?}: {e}"),
            })?;
            metadata.append(key, value);
        }
        Ok(UpstreamContext {
            uri: uri.to_owned(),
            mode: tokio::sync::watch::Sender::new(match config.upstream_mode {
                UpstreamMode::Auto => None,
                mode => Some(mode),
            }),
            channel: endpoint.connect_lazy(),
            renderer,
            metrics,
            ready,
            max_message_bytes: config.max_upstream_message_bytes,
            metadata,
        })
    }

    /// A plaintext context for `uri` with defaults (tests and benches).
    pub fn connect_lazy(
        uri: &str,
        renderer: Renderer,
        metrics: Arc<Metrics>,
        ready: Arc<Readiness>,
        max_message_bytes: usize,
    ) -> Result<UpstreamContext, SourceError> {
        let config = Config {
            max_upstream_message_bytes: max_message_bytes,
            ..Config::default()
        };
        UpstreamContext::new(&config, uri, renderer, metrics, ready)
    }

    /// The mode in use, if decided.
    pub fn mode(&self) -> Option<UpstreamMode> {
        *self.mode.borrow()
    }

    /// Records the mode the auto probe chose.
    pub fn set_mode(&self, mode: UpstreamMode) {
        self.mode.send_replace(Some(mode));
    }

    /// Waits up to `within` for the mode to be decided.
    pub async fn wait_mode(&self, within: Duration) -> Option<UpstreamMode> {
        if let Some(mode) = self.mode() {
            return Some(mode);
        }
        let mut rx = self.mode.subscribe();
        let decided = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
        match decided {
            Ok(Ok(mode)) => *mode,
            _ => None,
        }
    }

    /// A request carrying the configured metadata.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        request
    }
}

fn tls_config(tls: &UpstreamTls) -> Result<ClientTlsConfig, SourceError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| SourceError::Tls(format!("{}: {e}", path.display())))
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
