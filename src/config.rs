//! The gateway's typed configuration: command-line flags, `XDS_GATEWAY_*`
//! environment variables and an optional TOML file, merged once at start-up
//! with precedence flags > environment > file > built-in default.
//!
//! Nothing else in the crate reads the environment. Every value is validated
//! here; a bad one is a [`ConfigError`] that names the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

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

/// When `ads`/`self` config sources are rewritten to REST ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RewritePolicy {
    /// For clients whose `node.user_agent_name` is `envoy`.
    Auto,
    Always,
    Never,
}

/// Command line. Every flag has an `XDS_GATEWAY_*` variable and a key of the
/// same name in the `--config` file.
#[derive(Debug, Default, Parser)]
#[command(
    name = "xds-gateway",
    version,
    about = "Envoy REST xDS (HTTP + JSON) in front of a gRPC xDS control plane"
)]
pub struct Cli {
    /// TOML file whose keys mirror the long flags (e.g. `upstream = "grpc://127.0.0.1:18000"`).
    #[arg(long, env = "XDS_GATEWAY_CONFIG")]
    pub config: Option<PathBuf>,
    /// Control plane serving ADS, as grpc://HOST:PORT (or http://).
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM")]
    pub upstream: Option<String>,
    /// How to talk to the upstream [default: sotw].
    #[arg(long, value_enum, env = "XDS_GATEWAY_UPSTREAM_MODE")]
    pub upstream_mode: Option<UpstreamMode>,
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
    pub upstream_headers: Vec<String>,
    /// HTTP/2 keepalive ping interval toward the upstream [default: 30s].
    #[arg(long, env = "XDS_GATEWAY_UPSTREAM_KEEPALIVE", value_parser = humantime::parse_duration)]
    pub upstream_keepalive: Option<Duration>,
    /// Fetch mode: how long an upstream answer is reused for identical requests [default: 500ms].
    #[arg(long, env = "XDS_GATEWAY_FETCH_CACHE_TTL", value_parser = humantime::parse_duration)]
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
    /// Which clients share one upstream stream [default: node].
    #[arg(long, value_enum, env = "XDS_GATEWAY_SESSION_KEY")]
    pub session_key: Option<SessionKey>,
    /// Close an upstream session after this long without polls [default: 5m].
    #[arg(long, env = "XDS_GATEWAY_IDLE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// At most this many upstream sessions at once [default: 10000].
    #[arg(long, env = "XDS_GATEWAY_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// How long a first request waits for the upstream's first answer [default: 5s].
    #[arg(long, env = "XDS_GATEWAY_FIRST_RESPONSE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub first_response_timeout: Option<Duration>,
    /// Long-poll wait applied when a request does not say `?wait=` [default: 0s].
    #[arg(long, env = "XDS_GATEWAY_DEFAULT_WAIT", value_parser = humantime::parse_duration)]
    pub default_wait: Option<Duration>,
    /// Cap on any long-poll wait [default: 60s].
    #[arg(long, env = "XDS_GATEWAY_MAX_WAIT", value_parser = humantime::parse_duration)]
    pub max_wait: Option<Duration>,
    /// Rewrite `ads`/`self` config sources to REST ones [default: auto].
    #[arg(long, value_enum, env = "XDS_GATEWAY_REWRITE_CONFIG_SOURCES")]
    pub rewrite_config_sources: Option<RewritePolicy>,
    /// refresh_delay written into rewritten config sources [default: 1s].
    #[arg(long, env = "XDS_GATEWAY_REFRESH_DELAY", value_parser = humantime::parse_duration)]
    pub refresh_delay: Option<Duration>,
    /// Polls presenting an older version, after a newer one was served, before a rejection is suspected [default: 3].
    #[arg(long, env = "XDS_GATEWAY_REJECTION_THRESHOLD")]
    pub rejection_threshold: Option<u32>,
    /// Send a NACK upstream for each suspected rejection.
    #[arg(long, env = "XDS_GATEWAY_FORWARD_REJECTIONS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub forward_rejections: Option<bool>,
    /// Serve /v3/discovery:secrets (private keys over HTTP: a deliberate choice).
    #[arg(long, env = "XDS_GATEWAY_ALLOW_SECRETS", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_secrets: Option<bool>,
    /// Largest request body accepted, in bytes [default: 4194304].
    #[arg(long, env = "XDS_GATEWAY_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Largest upstream gRPC message accepted, in bytes [default: 67108864].
    #[arg(long, env = "XDS_GATEWAY_MAX_UPSTREAM_MESSAGE_BYTES")]
    pub max_upstream_message_bytes: Option<usize>,
    /// Extra compiled FileDescriptorSet (repeatable) for contrib or in-house types.
    #[arg(
        long = "descriptor-set",
        env = "XDS_GATEWAY_DESCRIPTOR_SETS",
        value_delimiter = ','
    )]
    pub descriptor_sets: Vec<PathBuf>,
}

/// The same keys in a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct FileConfig {
    upstream: Option<String>,
    upstream_mode: Option<UpstreamMode>,
    upstream_ca: Option<PathBuf>,
    upstream_cert: Option<PathBuf>,
    upstream_key: Option<PathBuf>,
    upstream_tls_server_name: Option<String>,
    #[serde(alias = "upstream-header")]
    upstream_headers: Option<Vec<String>>,
    #[serde(default, with = "opt_duration")]
    upstream_keepalive: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    fetch_cache_ttl: Option<Duration>,
    snapshot: Option<PathBuf>,
    listen: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    session_key: Option<SessionKey>,
    #[serde(default, with = "opt_duration")]
    idle_timeout: Option<Duration>,
    max_sessions: Option<usize>,
    #[serde(default, with = "opt_duration")]
    first_response_timeout: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    default_wait: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    max_wait: Option<Duration>,
    rewrite_config_sources: Option<RewritePolicy>,
    #[serde(default, with = "opt_duration")]
    refresh_delay: Option<Duration>,
    rejection_threshold: Option<u32>,
    forward_rejections: Option<bool>,
    allow_secrets: Option<bool>,
    max_body_bytes: Option<usize>,
    max_upstream_message_bytes: Option<usize>,
    #[serde(alias = "descriptor-set")]
    descriptor_sets: Option<Vec<PathBuf>>,
}

/// TLS toward the upstream (used for https:// upstreams).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// The validated configuration every other module receives.
#[derive(Debug, Clone)]
pub struct Config {
    /// The control plane's gRPC endpoint as an `http(s)://` URI.
    pub upstream: Option<String>,
    pub upstream_mode: UpstreamMode,
    pub upstream_tls: UpstreamTls,
    /// (name, value) metadata pairs sent on every upstream call.
    pub upstream_headers: Vec<(String, String)>,
    pub upstream_keepalive: Duration,
    pub fetch_cache_ttl: Duration,
    /// Snapshot directory (None with no upstream: the embedded demo).
    pub snapshot: Option<PathBuf>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub session_key: SessionKey,
    pub idle_timeout: Duration,
    pub max_sessions: usize,
    pub first_response_timeout: Duration,
    pub default_wait: Duration,
    pub max_wait: Duration,
    pub rewrite_config_sources: RewritePolicy,
    pub refresh_delay: Duration,
    pub rejection_threshold: u32,
    pub forward_rejections: bool,
    pub allow_secrets: bool,
    pub max_body_bytes: usize,
    pub max_upstream_message_bytes: usize,
    pub descriptor_sets: Vec<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            upstream: None,
            upstream_mode: UpstreamMode::Sotw,
            upstream_tls: UpstreamTls::default(),
            upstream_headers: Vec::new(),
            upstream_keepalive: Duration::from_secs(30),
            fetch_cache_ttl: Duration::from_millis(500),
            snapshot: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin: SocketAddr::from(([127, 0, 0, 1], 9901)),
            session_key: SessionKey::Node,
            idle_timeout: Duration::from_secs(300),
            max_sessions: 10_000,
            first_response_timeout: Duration::from_secs(5),
            default_wait: Duration::ZERO,
            max_wait: Duration::from_secs(60),
            rewrite_config_sources: RewritePolicy::Auto,
            refresh_delay: Duration::from_secs(1),
            rejection_threshold: 3,
            forward_rejections: false,
            allow_secrets: false,
            max_body_bytes: 4 * 1024 * 1024,
            max_upstream_message_bytes: 64 * 1024 * 1024,
            descriptor_sets: Vec::new(),
        }
    }
}

impl Config {
    /// Merges flags/environment (already in `cli`) over the file over defaults.
    pub fn from_cli(cli: Cli) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let d = Config::default();
        let config = Config {
            upstream: cli.upstream.or(file.upstream),
            upstream_mode: cli
                .upstream_mode
                .or(file.upstream_mode)
                .unwrap_or(d.upstream_mode),
            upstream_tls: UpstreamTls {
                ca: cli.upstream_ca.or(file.upstream_ca),
                cert: cli.upstream_cert.or(file.upstream_cert),
                key: cli.upstream_key.or(file.upstream_key),
                server_name: cli
                    .upstream_tls_server_name
                    .or(file.upstream_tls_server_name),
            },
            upstream_headers: parse_headers(if cli.upstream_headers.is_empty() {
                file.upstream_headers.unwrap_or_default()
            } else {
                cli.upstream_headers
            })?,
            upstream_keepalive: cli
                .upstream_keepalive
                .or(file.upstream_keepalive)
                .unwrap_or(d.upstream_keepalive),
            fetch_cache_ttl: cli
                .fetch_cache_ttl
                .or(file.fetch_cache_ttl)
                .unwrap_or(d.fetch_cache_ttl),
            snapshot: cli.snapshot.or(file.snapshot),
            listen: cli.listen.or(file.listen).unwrap_or(d.listen),
            admin: cli.admin.or(file.admin).unwrap_or(d.admin),
            session_key: cli
                .session_key
                .or(file.session_key)
                .unwrap_or(d.session_key),
            idle_timeout: cli
                .idle_timeout
                .or(file.idle_timeout)
                .unwrap_or(d.idle_timeout),
            max_sessions: cli
                .max_sessions
                .or(file.max_sessions)
                .unwrap_or(d.max_sessions),
            first_response_timeout: cli
                .first_response_timeout
                .or(file.first_response_timeout)
                .unwrap_or(d.first_response_timeout),
            default_wait: cli
                .default_wait
                .or(file.default_wait)
                .unwrap_or(d.default_wait),
            max_wait: cli.max_wait.or(file.max_wait).unwrap_or(d.max_wait),
            rewrite_config_sources: cli
                .rewrite_config_sources
                .or(file.rewrite_config_sources)
                .unwrap_or(d.rewrite_config_sources),
            refresh_delay: cli
                .refresh_delay
                .or(file.refresh_delay)
                .unwrap_or(d.refresh_delay),
            rejection_threshold: cli
                .rejection_threshold
                .or(file.rejection_threshold)
                .unwrap_or(d.rejection_threshold),
            forward_rejections: cli
                .forward_rejections
                .or(file.forward_rejections)
                .unwrap_or(d.forward_rejections),
            allow_secrets: cli
                .allow_secrets
                .or(file.allow_secrets)
                .unwrap_or(d.allow_secrets),
            max_body_bytes: cli
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(d.max_body_bytes),
            max_upstream_message_bytes: cli
                .max_upstream_message_bytes
                .or(file.max_upstream_message_bytes)
                .unwrap_or(d.max_upstream_message_bytes),
            descriptor_sets: if cli.descriptor_sets.is_empty() {
                file.descriptor_sets.unwrap_or_default()
            } else {
                cli.descriptor_sets
            },
        };
        config.validate()
    }

    /// Checks cross-field rules and normalises the upstream URI.
    pub fn validate(mut self) -> Result<Config, ConfigError> {
        if let Some(upstream) = self.upstream.take() {
            self.upstream = Some(normalise_upstream(&upstream)?);
        }
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
        let tls_given = self.upstream_tls != UpstreamTls::default();
        if tls_given
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
        if self.refresh_delay.is_zero() {
            return Err(invalid("refresh-delay", "must be more than 0s"));
        }
        if self.rejection_threshold == 0 {
            return Err(invalid("rejection-threshold", "must be at least 1"));
        }
        if self.max_body_bytes < 1024 {
            return Err(invalid("max-body-bytes", "must be at least 1024"));
        }
        Ok(self)
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
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'-'
                        || b == b'_'
                        || b == b'.'
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

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

mod opt_duration {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("xds-gateway").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_are_loopback() {
        let c = Config::from_cli(Cli::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.admin.to_string(), "127.0.0.1:9901");
        assert_eq!(c.idle_timeout, Duration::from_secs(300));
    }

    #[test]
    fn flags_override_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "upstream = \"grpc://127.0.0.1:1\"\nmax-wait = \"10s\"\nidle-timeout = \"1m\"\n",
        )
        .unwrap();
        let c = Config::from_cli(cli(&[
            "--config",
            path.to_str().unwrap(),
            "--max-wait",
            "20s",
        ]))
        .unwrap();
        assert_eq!(c.upstream.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(c.max_wait, Duration::from_secs(20));
        assert_eq!(c.idle_timeout, Duration::from_secs(60));
    }

    #[test]
    fn bad_file_values_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(&path, "max-wait = \"soon\"\n").unwrap();
        let err = Config::from_cli(cli(&["--config", path.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("max-wait"), "{err}");
        std::fs::write(&path, "mystery = 1\n").unwrap();
        let err = Config::from_cli(cli(&["--config", path.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("mystery"), "{err}");
    }

    #[test]
    fn upstream_headers_and_tls_rules() {
        let c = Config::from_cli(cli(&[
            "--upstream",
            "grpc://127.0.0.1:1",
            "--upstream-header",
            "X-Consul-Token: abc",
            "--upstream-header",
            "tenant=t1",
        ]))
        .unwrap();
        assert_eq!(
            c.upstream_headers,
            [
                ("x-consul-token".to_string(), "abc".to_string()),
                ("tenant".to_string(), "t1".to_string())
            ]
        );
        assert!(Config::from_cli(cli(&[
            "--upstream",
            "grpc://127.0.0.1:1",
            "--upstream-header",
            "nocolon"
        ]))
        .is_err());
        let err = Config::from_cli(cli(&[
            "--upstream",
            "grpc://127.0.0.1:1",
            "--upstream-ca",
            "ca.pem",
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("https"), "{err}");
        assert!(Config::from_cli(cli(&[
            "--upstream",
            "grpcs://cp:443",
            "--upstream-cert",
            "c.pem"
        ]))
        .is_err());
        assert!(Config::from_cli(cli(&[
            "--upstream",
            "grpcs://cp:443",
            "--upstream-ca",
            "ca.pem"
        ]))
        .is_ok());
    }

    #[test]
    fn upstream_forms() {
        assert_eq!(
            normalise_upstream("grpcs://cp:443").unwrap(),
            "https://cp:443"
        );
        assert_eq!(
            normalise_upstream("127.0.0.1:18000").unwrap(),
            "http://127.0.0.1:18000"
        );
        assert!(normalise_upstream("ftp://x:1").is_err());
        assert!(normalise_upstream("grpc://nohost").is_err());
    }
}
