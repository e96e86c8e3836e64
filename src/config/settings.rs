//! One layer of settings, every one optional: what the command line says
//! (flags and `XDS_GATEWAY_*` variables, read by clap) or what the `--config`
//! TOML file says (read by serde: the same keys as the long flags, unknown
//! keys refused, durations written like `5s` or `250ms`). One struct for
//! both, so a setting is declared once; `Config::from_settings` lays the
//! command line over the file over the defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use super::profiles::ProfileTable;
use super::upstreams::UpstreamSetting;
use super::{
    ClientAuth, ConfigError, LogFormat, RewritePolicy, SessionKey, UpstreamMode, UpstreamStreams,
    Validation,
};

/// The settings of one layer. Every flag has an `XDS_GATEWAY_*` variable and
/// a key of the same name in the `--config` file.
#[derive(Debug, Default, Parser, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[command(
    name = "xds-gateway",
    version,
    about = "Envoy REST xDS (HTTP + JSON) in front of a gRPC xDS control plane"
)]
pub struct Settings {
    /// TOML file whose keys mirror the long flags (e.g. `upstream = "grpc://127.0.0.1:18000"`).
    #[arg(long, env = "XDS_GATEWAY_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Control plane serving ADS, as grpc://HOST:PORT (or http://); the
    /// `--config` file may instead declare several in `[[upstream]]` tables.
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM", value_parser = clap::value_parser!(UpstreamSetting))]
    pub upstream: Option<UpstreamSetting>,
    /// How to talk to the upstream [default: sotw].
    #[arg(long, value_enum, env = "XDS_GATEWAY_UPSTREAM_MODE")]
    pub upstream_mode: Option<UpstreamMode>,
    /// Streams of the sotw and delta modes: one aggregated (ADS) stream per
    /// node identity, or one per identity and type on the types' own
    /// services (for control planes without ADS) [default: aggregated].
    #[arg(long, value_enum, env = "XDS_GATEWAY_UPSTREAM_STREAMS")]
    pub upstream_streams: Option<UpstreamStreams>,
    /// CA bundle (PEM) to verify an https:// / grpcs:// upstream [default: system roots].
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_CA")]
    pub upstream_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS to the upstream (with --upstream-key).
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_CERT")]
    pub upstream_cert: Option<PathBuf>,
    /// Client private key (PEM) for mTLS to the upstream.
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_KEY")]
    pub upstream_key: Option<PathBuf>,
    /// Server name to verify in the upstream's certificate [default: the upstream host].
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_TLS_SERVER_NAME")]
    pub upstream_tls_server_name: Option<String>,
    /// Metadata sent on every upstream call, as `name: value` (repeatable), e.g. an ACL token.
    #[arg(
        long = "upstream-header",
        env = "XDS_GATEWAY_UPSTREAM_HEADERS",
        value_delimiter = ';'
    )]
    #[serde(alias = "upstream-header")]
    pub upstream_headers: Option<Vec<String>>,
    /// HTTP/2 keepalive ping interval toward the upstream [default: 30s].
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_KEEPALIVE", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub upstream_keepalive: Option<Duration>,
    /// Fetch mode: how long an upstream answer is reused for identical requests [default: 500ms].
    #[arg(long, env = "XDS_GATEWAY_FETCH_CACHE_TTL", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub fetch_cache_ttl: Option<Duration>,
    /// Snapshot directory served when no --upstream is given (YAML/JSON
    /// resources; watched) [default: the embedded examples/demo snapshot].
    #[arg(long, env = "XDS_GATEWAY_SNAPSHOT")]
    pub snapshot: Option<PathBuf>,
    /// REST listener address [default: 127.0.0.1:8080].
    #[arg(long, env = "XDS_GATEWAY_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Admin listener (/healthz, /readyz, /metrics) [default: 127.0.0.1:9901].
    #[arg(long, env = "XDS_GATEWAY_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// Serve REST over TLS with this certificate chain (PEM; reloaded when it changes).
    #[arg(long, env = "XDS_GATEWAY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert (reloaded when it changes).
    #[arg(long, env = "XDS_GATEWAY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) that signs client certificates: mTLS on the REST listener.
    #[arg(long, env = "XDS_GATEWAY_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: whether a client certificate is required [default: required].
    #[arg(long, value_enum, env = "XDS_GATEWAY_CLIENT_AUTH")]
    pub client_auth: Option<ClientAuth>,
    /// Serve the admin listener over TLS with this certificate chain (PEM; reloaded when it changes).
    #[arg(long, env = "XDS_GATEWAY_ADMIN_TLS_CERT")]
    pub admin_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --admin-tls-cert (reloaded when it changes).
    #[arg(long, env = "XDS_GATEWAY_ADMIN_TLS_KEY")]
    pub admin_tls_key: Option<PathBuf>,
    /// CA bundle (PEM) that signs admin client certificates: mTLS on the admin listener; a
    /// certificate it signed (one the auth policy's `[admin]` uri-san/dns-san name, if it names
    /// any) opens the details as an admin token does.
    #[arg(long, env = "XDS_GATEWAY_ADMIN_CLIENT_CA")]
    pub admin_client_ca: Option<PathBuf>,
    /// With --admin-client-ca: whether a client certificate is required (`optional` lets probes
    /// without one reach /healthz, and token holders the details) [default: required].
    #[arg(long, value_enum, env = "XDS_GATEWAY_ADMIN_CLIENT_AUTH")]
    pub admin_client_auth: Option<ClientAuth>,
    /// Policy file (TOML) binding principals (client certificates, bearer tokens) to the nodes they may fetch.
    #[arg(long, env = "XDS_GATEWAY_AUTH_POLICY")]
    pub auth_policy: Option<PathBuf>,
    /// Allow a non-loopback --listen without TLS and without --auth-policy (anyone who reaches it can take any node's identity).
    #[arg(long, env = "XDS_GATEWAY_ALLOW_INSECURE_LISTEN", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_insecure_listen: Option<bool>,
    /// At most this many open REST connections; more are answered 503 and closed [default: 10000].
    #[arg(long, env = "XDS_GATEWAY_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// At most this many long polls held at once; more are answered 503 [default: 5000].
    #[arg(long, env = "XDS_GATEWAY_MAX_LONG_POLLS")]
    pub max_long_polls: Option<usize>,
    /// At most this many watch streams (`?watch`) open at once; more are answered 503 [default: 1000].
    #[arg(long, env = "XDS_GATEWAY_MAX_WATCHES")]
    pub max_watches: Option<usize>,
    /// With an auth policy of several principals, one principal may hold at most this percentage of --max-sessions, --max-watches and --max-long-polls (more of its own are answered 503), so one tenant cannot starve the rest; 100 turns the shares off [default: 50].
    #[arg(long, env = "XDS_GATEWAY_PRINCIPAL_SHARE", value_name = "PERCENT")]
    pub principal_share: Option<u8>,
    /// A watch stream with nothing to send for this long sends a heartbeat (an SSE comment, or an empty NDJSON line), so proxies keep it open [default: 15s].
    #[arg(long, env = "XDS_GATEWAY_WATCH_HEARTBEAT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub watch_heartbeat: Option<Duration>,
    /// HTTP/2 requests in flight on one REST connection at most. An Envoy polling over HTTP/2 opens one per REST subscription at once (one per EDS cluster) before it has read this limit, and fails every request refused beyond it [default: 4096].
    #[arg(long, env = "XDS_GATEWAY_MAX_STREAMS_PER_CONNECTION")]
    pub max_streams_per_connection: Option<u32>,
    /// A request's headers (and the TLS handshake) must arrive within this [default: 10s].
    #[arg(long, env = "XDS_GATEWAY_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub header_read_timeout: Option<Duration>,
    /// A request's body must arrive within this, whole [default: 30s].
    #[arg(long, env = "XDS_GATEWAY_BODY_READ_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub body_read_timeout: Option<Duration>,
    /// Close a connection with no request in flight for this long [default: 60s].
    #[arg(long, env = "XDS_GATEWAY_KEEP_ALIVE_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub keep_alive_timeout: Option<Duration>,
    /// At shutdown (SIGTERM), how long requests in flight may take to finish before the process exits; held long polls are answered at once [default: 10s].
    #[arg(long, env = "XDS_GATEWAY_DRAIN_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub drain_timeout: Option<Duration>,
    /// Which clients share one upstream stream [default: node].
    #[arg(long, value_enum, env = "XDS_GATEWAY_SESSION_KEY")]
    pub session_key: Option<SessionKey>,
    /// Close an upstream session after this long without polls [default: 5m].
    #[arg(long, env = "XDS_GATEWAY_IDLE_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub idle_timeout: Option<Duration>,
    /// At most this many upstream sessions at once [default: 10000].
    #[arg(long, env = "XDS_GATEWAY_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// How long a first request waits for the upstream's first answer [default: 5s].
    #[arg(long, env = "XDS_GATEWAY_FIRST_RESPONSE_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub first_response_timeout: Option<Duration>,
    /// Long-poll wait applied when a request does not say `?wait=` [default: 0s].
    #[arg(long, env = "XDS_GATEWAY_DEFAULT_WAIT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub default_wait: Option<Duration>,
    /// Cap on any long-poll wait [default: 60s].
    #[arg(long, env = "XDS_GATEWAY_MAX_WAIT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub max_wait: Option<Duration>,
    /// Let HTTP caches (nginx, a CDN) serve a public discovery answer this long without
    /// revalidating: `Cache-Control: max-age=N, stale-while-revalidate=N`; 0s: `no-cache`,
    /// revalidate every use (whole seconds) [default: 0s].
    #[arg(long, env = "XDS_GATEWAY_CACHE_MAX_AGE", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub cache_max_age: Option<Duration>,
    /// Rewrite `ads`/`self` config sources to REST ones [default: auto].
    #[arg(long, value_enum, env = "XDS_GATEWAY_REWRITE_CONFIG_SOURCES")]
    pub rewrite_config_sources: Option<RewritePolicy>,
    /// refresh_delay written into rewritten config sources [default: 1s].
    #[arg(long, env = "XDS_GATEWAY_REFRESH_DELAY", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub refresh_delay: Option<Duration>,
    /// request_timeout written into rewritten config sources: how long an Envoy waits for each
    /// REST poll; at least --first-response-timeout [default: 10s].
    #[arg(long, env = "XDS_GATEWAY_REQUEST_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "opt_duration")]
    pub request_timeout: Option<Duration>,
    /// Polls presenting an older version, after a newer one was served, before a rejection is suspected [default: 3].
    #[arg(long, env = "XDS_GATEWAY_REJECTION_THRESHOLD")]
    pub rejection_threshold: Option<u32>,
    /// Send a NACK upstream for each suspected rejection. Off loopback it needs --trusted-proxies
    /// (clients behind one balancer could not be told apart), else start-up is refused.
    #[arg(long, env = "XDS_GATEWAY_FORWARD_REJECTIONS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub forward_rejections: Option<bool>,
    /// Balancers, NATs and sidecars in front of the REST listener, as CIDRs or addresses
    /// (`10.0.0.0/8,127.0.0.1`), or `none`: a request from one of them is the client's its
    /// `Forwarded: for=` (else the right-most untrusted `X-Forwarded-For` entry) names; other
    /// peers' such headers are ignored. Polls through one that names no client are never taken
    /// for a rejection [default: not set].
    #[arg(
        long,
        env = "XDS_GATEWAY_TRUSTED_PROXIES",
        value_delimiter = ',',
        value_name = "CIDR,..."
    )]
    pub trusted_proxies: Option<Vec<String>>,
    /// Serve /v3/discovery:secrets (private keys over HTTP: a deliberate choice). Off loopback
    /// it needs --auth-policy or required mTLS (--client-ca), else start-up is refused.
    #[arg(long, env = "XDS_GATEWAY_ALLOW_SECRETS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_secrets: Option<bool>,
    /// Largest request body accepted, in bytes [default: 4194304].
    #[arg(long, env = "XDS_GATEWAY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Largest `node` a request may carry, in JSON bytes [default: 1048576].
    #[arg(long, env = "XDS_GATEWAY_MAX_NODE_BYTES")]
    pub max_node_bytes: Option<usize>,
    /// Total `node` JSON bytes all sessions may hold; a new session beyond it is a 503 [default: 1073741824].
    #[arg(long, env = "XDS_GATEWAY_MAX_SESSION_BYTES")]
    pub max_session_bytes: Option<usize>,
    /// Most resource names one request may ask for [default: 20000].
    #[arg(long, env = "XDS_GATEWAY_MAX_NAMES_PER_REQUEST")]
    pub max_names_per_request: Option<usize>,
    /// Most resource names one session subscribes to, per type [default: 50000].
    #[arg(long, env = "XDS_GATEWAY_MAX_NAMES_PER_SESSION")]
    pub max_names_per_session: Option<usize>,
    /// Largest upstream gRPC message accepted, in bytes [default: 67108864].
    #[arg(long, env = "XDS_GATEWAY_MAX_UPSTREAM_MESSAGE_BYTES")]
    pub max_upstream_message_bytes: Option<usize>,
    /// Directory of node profiles for GETs (`?profile=NAME`): one
    /// `NAME.json` each, an `envoy.config.core.v3.Node` as JSON (bare, or as a
    /// `node` field, or an Envoy `/config_dump`'s bootstrap); read at start-up.
    #[arg(long, env = "XDS_GATEWAY_NODE_PROFILES", value_name = "DIR")]
    pub node_profiles: Option<PathBuf>,
    /// `[[profile]]` tables: named nodes a GET presents with `?profile=NAME` (the file only).
    #[arg(skip)]
    pub profile: Option<Vec<ProfileTable>>,
    /// Extra compiled FileDescriptorSet (repeatable) for contrib or in-house types.
    #[arg(
        long = "descriptor-set",
        env = "XDS_GATEWAY_DESCRIPTOR_SETS",
        value_delimiter = ','
    )]
    #[serde(alias = "descriptor-set")]
    pub descriptor_sets: Option<Vec<PathBuf>>,
    /// Check every resource against Envoy's own field rules (its protos'
    /// protoc-gen-validate annotations) and NACK what Envoy would reject [default: on].
    #[arg(long, value_enum, env = "XDS_GATEWAY_VALIDATE")]
    pub validate: Option<Validation>,
    /// Log lines as text or as one JSON object per line, on stderr; which lines is set by RUST_LOG (e.g. `info`, `xds_gateway=debug`) [default: text].
    #[arg(long, value_enum, env = "XDS_GATEWAY_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
}

impl Settings {
    /// The settings of the TOML file at `path`.
    pub(super) fn read_file(path: &Path) -> Result<Settings, ConfigError> {
        let fail = |reason: String| ConfigError::File {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Settings::from_toml(&text).map_err(fail)
    }

    /// The settings of a `--config` file's text.
    pub(super) fn from_toml(text: &str) -> Result<Settings, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

pub(super) mod opt_duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(de)? else {
            return Ok(None);
        };
        humantime::parse_duration(&text).map(Some).map_err(|e| {
            serde::de::Error::custom(format!("{text:?} is not a duration like 5s or 250ms: {e}"))
        })
    }
}
