//! The gateway's typed configuration: command-line flags, `XDS_GATEWAY_*`
//! environment variables and an optional TOML file, merged once at start-up
//! with precedence flags > environment > file > built-in default.
//!
//! Nothing else in the gateway reads the environment. Every value is
//! validated here; a bad one is a [`ConfigError`] that names the key.
//!
//! A library crate of the workspace: the gateway names it as
//! `crate::config`, and its `pub` items are its seam. It names nothing of
//! the gateway.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

mod exposure;
mod extra_types;
mod fields;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod memory;
mod opt_duration;
mod profiles;
mod proxies;
mod settings;
mod slices;
#[cfg(test)]
mod tests;
mod upstreams;

pub use extra_types::{ExtraTypeSpec, FieldNames};
pub use fields::{Config, Settings};
pub use memory::MemoryShares;
pub use profiles::{valid_profile_name, LocalityTable, ProfileTable};
pub use proxies::{ForwardedHeader, TrustedProxies};
pub use slices::{AdminConfig, RestConfig, RestRewrite};
pub use upstreams::{Failover, UpstreamSetting, UpstreamSpec, UpstreamTable, Upstreams};

/// The longest `--cache-max-age`: how stale a client behind a cache may be.
const MAX_CACHE_MAX_AGE: Duration = Duration::from_secs(3600);

/// The longest any other duration setting may be (366 days). Longer is a
/// typo; and the deadlines computed from a setting (the write stall
/// timeout, a watch's next heartbeat, the drain deadline) overflow, which
/// panics, once it nears the 5e11 years a duration can spell.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Why the configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{key}: {reason}")]
    Invalid { key: &'static str, reason: String },
}

/// How REST clients are grouped into upstream sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SessionKey {
    /// node id + cluster + metadata + locality: what a control plane keys on.
    Node,
    /// node cluster only: all nodes of a cluster share one upstream stream.
    Cluster,
}

/// How the gateway talks to the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamMode {
    /// One SotW `StreamAggregatedResources` stream per node identity.
    Sotw,
    /// One incremental `DeltaAggregatedResources` stream per node identity.
    Delta,
    /// Each REST request proxied to the type's unary `Fetch*` RPC.
    Fetch,
    /// Delta, else SotW, else Fetch: whichever the upstream implements first.
    Auto,
}

/// Which streams a stream mode (`sotw`, `delta`) opens: xDS's other axis.
/// The two are independent, so they are two settings rather than four
/// mode names: `--upstream-mode` says what is said (state of the world or
/// incremental), `--upstream-streams` on which streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamStreams {
    /// One aggregated (ADS) stream per node identity carries every type.
    Aggregated,
    /// One stream per node identity and type, on the type's own service
    /// (`ClusterDiscoveryService.StreamClusters`, `DeltaClusters`, ...): for
    /// control planes that do not serve ADS (Contour, for one).
    PerType,
}

/// Whether resources are checked against Envoy's field rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Validation {
    /// Check every resource; NACK an update that breaks a rule.
    On,
    /// Serve what decodes.
    Off,
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// When `ads`/`self` config sources are rewritten to REST ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RewritePolicy {
    /// For clients whose `node.user_agent_name` is `envoy`.
    Auto,
    Always,
    Never,
}

/// Whether a client of an mTLS listener (REST, admin) must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAuth {
    /// The TLS handshake fails without a certificate the client CA signed.
    Required,
    /// A client without a certificate is let in (and must then present a
    /// bearer token to an auth policy); one with a bad certificate is not.
    Optional,
}

/// TLS on a listener: PEM files, reloaded when they change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// mTLS: the CA that signs client certificates.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

impl ServerTlsFiles {
    /// The files a listener's TLS reads (watched for changes).
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.cert.clone(), self.key.clone()];
        paths.extend(self.client_ca.clone());
        paths
    }
}

/// TLS toward the upstream (used for https:// upstreams).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

impl Config {
    /// Lays `cli` (flags over environment, as clap read them) over the
    /// `--config` file it names, over the defaults; then validates.
    pub fn from_settings(cli: Settings) -> Result<Config, ConfigError> {
        let file = cli.config.as_deref().map(Settings::read_file).transpose()?;
        Config::from_layers(file, cli)
    }

    /// Lays `cli` over `file` (the `--config` file's settings) over the
    /// defaults; then validates.
    fn from_layers(file: Option<Settings>, cli: Settings) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut tls = TlsLayers::default();
        let mut admin_tls = TlsLayers::default();
        if let Some(file) = file {
            config.apply(file, &mut tls, &mut admin_tls)?;
        }
        config.apply(cli, &mut tls, &mut admin_tls)?;
        config.tls = tls.files(TlsFlags::REST)?;
        config.admin_tls = admin_tls.files(TlsFlags::ADMIN)?;
        config.validate()
    }

    /// Overwrites what `layer` sets (the listeners' TLS files into
    /// `tls_layers` and `admin_tls_layers`).
    fn apply(
        &mut self,
        mut layer: Settings,
        tls_layers: &mut TlsLayers,
        admin_tls_layers: &mut TlsLayers,
    ) -> Result<(), ConfigError> {
        self.overlay_plain(&mut layer);
        // Settings that stay optional, or land in a nested or parsed form.
        let tls = &mut self.upstream_tls;
        for (value, slot) in [
            (layer.upstream_ca, &mut tls.ca),
            (layer.upstream_cert, &mut tls.cert),
            (layer.upstream_key, &mut tls.key),
            (layer.snapshot, &mut self.snapshot),
            (layer.node_profiles, &mut self.node_profiles),
            (layer.history_file, &mut self.history_file),
            (layer.tls_cert, &mut tls_layers.cert),
            (layer.tls_key, &mut tls_layers.key),
            (layer.client_ca, &mut tls_layers.client_ca),
            (layer.admin_tls_cert, &mut admin_tls_layers.cert),
            (layer.admin_tls_key, &mut admin_tls_layers.key),
            (layer.admin_client_ca, &mut admin_tls_layers.client_ca),
            (layer.auth_policy, &mut self.auth_policy),
        ] {
            *slot = value.or(slot.take());
        }
        tls_layers.client_auth = layer.client_auth.or(tls_layers.client_auth);
        admin_tls_layers.client_auth = layer.admin_client_auth.or(admin_tls_layers.client_auth);
        tls.server_name = layer.upstream_tls_server_name.or(tls.server_name.take());
        match layer.upstream {
            Some(UpstreamSetting::Address(address)) => {
                self.upstream = Some(address);
                self.upstream_tables.clear();
            }
            Some(UpstreamSetting::Tables(tables)) => {
                self.upstream = None;
                self.upstream_tables = tables;
            }
            None => {}
        }
        if let Some(profiles) = layer.profile {
            self.profiles = profiles;
        }
        if let Some(headers) = layer.upstream_headers {
            self.upstream_headers = parse_headers(headers)?;
        }
        if let Some(proxies) = layer.trusted_proxies {
            self.trusted_proxies = Some(TrustedProxies::parse(&proxies)?);
        }
        Ok(())
    }

    /// Checks cross-field rules and normalises the upstream URI.
    pub fn validate(mut self) -> Result<Config, ConfigError> {
        self.validate_durations()?;
        if self.upstream_mode == UpstreamMode::Fetch
            && self.upstream_streams == UpstreamStreams::PerType
        {
            return Err(invalid(
                "upstream-streams",
                "per-type streams are for the stream modes (sotw, delta, auto); fetch mode opens no stream",
            ));
        }
        if let Some(upstream) = self.upstream.take() {
            if !upstream.contains("://") {
                if self.upstream_tls != UpstreamTls::default() {
                    return Err(invalid(
                        "upstream",
                        &format!(
                            "{upstream:?} has no scheme, but upstream TLS settings are given: \
                             write grpcs://{upstream} for TLS (a bare HOST:PORT means plaintext)"
                        ),
                    ));
                }
                self.warnings.push(format!(
                    "--upstream {upstream} has no scheme: read as grpc:// (plaintext); write grpcs:// for TLS"
                ));
            }
            self.upstream = Some(normalise_upstream(&upstream)?);
        }
        self.check_upstreams()?;
        if self.upstream.is_some() && self.snapshot.is_some() {
            return Err(invalid(
                "snapshot",
                "give either --upstream or --snapshot, not both",
            ));
        }
        if self.upstream_tls.cert.is_some() != self.upstream_tls.key.is_some() {
            return Err(invalid(
                "upstream-cert",
                "--upstream-cert and --upstream-key go together",
            ));
        }
        if self.upstream_tls != UpstreamTls::default()
            && !self
                .upstream
                .as_deref()
                .is_some_and(|u| u.starts_with("https://"))
        {
            return Err(invalid(
                "upstream-ca",
                "TLS options need an https:// or grpcs:// --upstream",
            ));
        }
        if self.max_sessions == 0 {
            return Err(invalid("max-sessions", "must be at least 1"));
        }
        if self.first_response_timeout.is_zero() {
            return Err(invalid("first-response-timeout", "must be more than 0s"));
        }
        if self.default_wait > self.max_wait {
            return Err(invalid("default-wait", "must not exceed max-wait"));
        }
        if self.cache_max_age.subsec_nanos() != 0 {
            return Err(invalid(
                "cache-max-age",
                "must be whole seconds (Cache-Control counts seconds), like 5s",
            ));
        }
        if self.cache_max_age > MAX_CACHE_MAX_AGE {
            return Err(invalid(
                "cache-max-age",
                "must be at most 1h: clients behind a cache would see a change that much later",
            ));
        }
        if self.request_timeout < self.first_response_timeout {
            return Err(invalid(
                "request-timeout",
                &format!(
                    "{} is below --first-response-timeout ({}): an Envoy would give up on a \
                     cold first poll before the gateway answers it; raise --request-timeout",
                    humantime::format_duration(self.request_timeout),
                    humantime::format_duration(self.first_response_timeout)
                ),
            ));
        }
        if self.refresh_delay.is_zero() {
            return Err(invalid("refresh-delay", "must be more than 0s"));
        }
        if self.rejection_threshold == 0 {
            return Err(invalid("rejection-threshold", "must be at least 1"));
        }
        if self.max_body_bytes < 1024 {
            return Err(invalid("max-body-bytes", "must be at least 1024"));
        }
        profiles::check(&self.profiles)?;
        self.memory = MemoryShares::from_flag(self.memory_budget_bytes);
        if self.memory.budget.is_some() {
            // A share caps its kind's bound (see `memory.rs`).
            let sessions = usize::try_from(self.memory.sessions).unwrap_or(usize::MAX);
            self.max_session_bytes = self.max_session_bytes.min(sessions);
            self.history_max_bytes = self.history_max_bytes.min(self.memory.history);
        }
        self.validate_limits()?;
        self.validate_exposure()?;
        proxies::check_forwarding(
            self.forward_rejections,
            self.listen,
            self.trusted_proxies.as_ref(),
        )?;
        Ok(self)
    }

    /// Checks the `[[upstream]]` tables into `upstreams` (with `upstream`
    /// the default's URI, which every single-upstream rule reads), or makes
    /// the one upstream of the flat flags.
    fn check_upstreams(&mut self) -> Result<(), ConfigError> {
        if self.upstream_tables.is_empty() {
            self.upstreams = self.flag_upstreams();
            return Ok(());
        }
        if self.upstream_tls != UpstreamTls::default() {
            return Err(invalid(
                "upstream-ca",
                "with [[upstream]] tables, TLS settings go in each table (ca, cert, key, tls-server-name)",
            ));
        }
        let tables = std::mem::take(&mut self.upstream_tables);
        let upstreams = Upstreams::from_tables(tables, &self.inherited())?;
        self.upstream = upstreams.default_spec().map(|s| s.uri.clone());
        self.upstreams = upstreams;
        Ok(())
    }

    /// Every upstream: `upstreams`, or (for a `Config` built in code, never
    /// validated) the one the flat `--upstream*` fields describe.
    pub fn upstream_set(&self) -> Upstreams {
        if !self.upstreams.specs.is_empty() {
            return self.upstreams.clone();
        }
        self.flag_upstreams()
    }

    /// The one upstream the flat `--upstream*` fields describe, if any.
    fn flag_upstreams(&self) -> Upstreams {
        let Some(uri) = &self.upstream else {
            return Upstreams::default();
        };
        Upstreams::from_flags(uri.clone(), self.upstream_tls.clone(), &self.inherited())
    }

    /// The defaults an `[[upstream]]` table falls back on.
    fn inherited(&self) -> upstreams::Inherited<'_> {
        upstreams::Inherited {
            mode: self.upstream_mode,
            streams: self.upstream_streams,
            headers: &self.upstream_headers,
            keepalive: self.upstream_keepalive,
            node_first_only: self.upstream_node_first_only,
            reflection: self.upstream_reflection,
        }
    }
}

/// A listener's TLS settings as the layers set them, before they are known
/// to form a whole.
#[derive(Debug, Default)]
struct TlsLayers {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    client_auth: Option<ClientAuth>,
}

/// The keys a listener's TLS errors name.
struct TlsFlags {
    cert: &'static str,
    together: &'static str,
    client_ca: &'static str,
    client_auth: &'static str,
    auth_needs_ca: &'static str,
    ca_needs_tls: &'static str,
}

impl TlsFlags {
    const REST: TlsFlags = TlsFlags {
        cert: "tls-cert",
        together: "--tls-cert and --tls-key go together",
        client_ca: "client-ca",
        client_auth: "client-auth",
        auth_needs_ca: "needs --client-ca",
        ca_needs_tls: "mTLS needs --tls-cert and --tls-key",
    };
    const ADMIN: TlsFlags = TlsFlags {
        cert: "admin-tls-cert",
        together: "--admin-tls-cert and --admin-tls-key go together",
        client_ca: "admin-client-ca",
        client_auth: "admin-client-auth",
        auth_needs_ca: "needs --admin-client-ca",
        ca_needs_tls: "mTLS on the admin listener needs --admin-tls-cert and --admin-tls-key",
    };
}

impl TlsLayers {
    fn files(self, flags: TlsFlags) -> Result<Option<ServerTlsFiles>, ConfigError> {
        match (self.cert, self.key) {
            (Some(cert), Some(key)) => {
                if self.client_auth.is_some() && self.client_ca.is_none() {
                    return Err(invalid(flags.client_auth, flags.auth_needs_ca));
                }
                Ok(Some(ServerTlsFiles {
                    cert,
                    key,
                    client_ca: self.client_ca,
                    client_auth: self.client_auth.unwrap_or(ClientAuth::Required),
                }))
            }
            (None, None) if self.client_ca.is_none() && self.client_auth.is_none() => Ok(None),
            (None, None) => Err(invalid(flags.client_ca, flags.ca_needs_tls)),
            _ => Err(invalid(flags.cert, flags.together)),
        }
    }
}

impl Config {
    /// How long a connection with a watch open may write nothing before it
    /// is closed as not read: two heartbeats (a reading client gets one
    /// every `--watch-heartbeat`) and a header read's time to spare.
    pub fn write_stall_timeout(&self) -> Duration {
        self.watch_heartbeat * 2 + self.header_read_timeout
    }

    /// Every duration setting (but `--cache-max-age`, held to an hour) is
    /// at most [`MAX_DURATION`].
    fn validate_durations(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("upstream-keepalive", self.upstream_keepalive),
            ("fetch-cache-ttl", self.fetch_cache_ttl),
            ("watch-heartbeat", self.watch_heartbeat),
            ("header-read-timeout", self.header_read_timeout),
            ("body-read-timeout", self.body_read_timeout),
            ("keep-alive-timeout", self.keep_alive_timeout),
            ("drain-timeout", self.drain_timeout),
            ("idle-timeout", self.idle_timeout),
            ("first-response-timeout", self.first_response_timeout),
            ("default-wait", self.default_wait),
            ("max-wait", self.max_wait),
            ("refresh-delay", self.refresh_delay),
            ("request-timeout", self.request_timeout),
        ] {
            if value > MAX_DURATION {
                return Err(invalid(key, "must be at most 366d (a year)"));
            }
        }
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("max-connections", self.max_connections),
            ("max-long-polls", self.max_long_polls),
            ("max-watches", self.max_watches),
            (
                "max-streams-per-connection",
                self.max_streams_per_connection as usize,
            ),
            ("max-names-per-request", self.max_names_per_request),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        for (key, value) in [
            ("header-read-timeout", self.header_read_timeout),
            ("body-read-timeout", self.body_read_timeout),
            ("keep-alive-timeout", self.keep_alive_timeout),
            ("drain-timeout", self.drain_timeout),
            ("watch-heartbeat", self.watch_heartbeat),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be more than 0s"));
            }
        }
        if self.history_file_max_bytes < 4096 {
            return Err(invalid("history-file-max-bytes", "must be at least 4096"));
        }
        if !(1..=100).contains(&self.source_connection_share) {
            return Err(invalid(
                "source-connection-share",
                "must be a percentage from 1 to 100 (100: no per-source cap)",
            ));
        }
        if !(1..=100).contains(&self.principal_share) {
            return Err(invalid(
                "principal-share",
                "must be a percentage from 1 to 100",
            ));
        }
        if self.max_names_per_session < self.max_names_per_request {
            return Err(invalid(
                "max-names-per-session",
                "must be at least max-names-per-request",
            ));
        }
        if self.max_node_bytes < 1024 {
            return Err(invalid("max-node-bytes", "must be at least 1024"));
        }
        if self.max_session_bytes < self.max_node_bytes {
            return Err(invalid(
                "max-session-bytes",
                "must be at least max-node-bytes",
            ));
        }
        Ok(())
    }
}

/// `name: value` (or `name=value`) → (lowercase name, value).
fn parse_headers(raw: Vec<String>) -> Result<Vec<(String, String)>, ConfigError> {
    raw.into_iter()
        .filter(|h| !h.trim().is_empty())
        .map(|h| {
            let (name, value) =
                h.split_once(':')
                    .or_else(|| h.split_once('='))
                    .ok_or_else(|| {
                        invalid("upstream-header", &format!("{h:?} is not `name: value`"))
                    })?;
            let name = name.trim().to_ascii_lowercase();
            let value = value.trim().to_owned();
            let valid_name = !name.is_empty()
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
                });
            if !valid_name
                || name.ends_with("-bin")
                || !value.bytes().all(|b| (0x20..0x7f).contains(&b))
            {
                return Err(invalid(
                    "upstream-header",
                    &format!("{h:?} is not a valid ASCII gRPC metadata entry"),
                ));
            }
            Ok((name, value))
        })
        .collect()
}

fn invalid(key: &'static str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key,
        reason: reason.to_owned(),
    }
}

/// `grpc://h:p` → `http://h:p`; `grpcs://` → `https://`; bare `h:p` → `http://h:p`.
fn normalise_upstream(raw: &str) -> Result<String, ConfigError> {
    let uri = if let Some(rest) = raw.strip_prefix("grpc://") {
        format!("http://{rest}")
    } else if let Some(rest) = raw.strip_prefix("grpcs://") {
        format!("https://{rest}")
    } else if raw.starts_with("http://") || raw.starts_with("https://") {
        raw.to_owned()
    } else if raw.contains("://") {
        return Err(invalid(
            "upstream",
            "scheme must be grpc://, grpcs://, http:// or https://",
        ));
    } else {
        format!("http://{raw}")
    };
    let parsed: http::Uri = uri
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid("upstream", &format!("{raw:?}: {e}")))?;
    if parsed.host().is_none() || parsed.port_u16().is_none() {
        return Err(invalid(
            "upstream",
            &format!("{raw:?} must name a host and a port"),
        ));
    }
    Ok(uri)
}
