//! The `--config` TOML file: the same keys as the long flags (kebab-case),
//! unknown keys refused, durations written like `5s` or `250ms`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, RewritePolicy, SessionKey, UpstreamMode};

/// The same keys in a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) upstream: Option<String>,
    pub(super) upstream_mode: Option<UpstreamMode>,
    pub(super) upstream_ca: Option<PathBuf>,
    pub(super) upstream_cert: Option<PathBuf>,
    pub(super) upstream_key: Option<PathBuf>,
    pub(super) upstream_tls_server_name: Option<String>,
    #[serde(alias = "upstream-header")]
    pub(super) upstream_headers: Option<Vec<String>>,
    #[serde(default, with = "opt_duration")]
    pub(super) upstream_keepalive: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub(super) fetch_cache_ttl: Option<Duration>,
    pub(super) snapshot: Option<PathBuf>,
    pub(super) listen: Option<SocketAddr>,
    pub(super) admin: Option<SocketAddr>,
    pub(super) session_key: Option<SessionKey>,
    #[serde(default, with = "opt_duration")]
    pub(super) idle_timeout: Option<Duration>,
    pub(super) max_sessions: Option<usize>,
    #[serde(default, with = "opt_duration")]
    pub(super) first_response_timeout: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub(super) default_wait: Option<Duration>,
    #[serde(default, with = "opt_duration")]
    pub(super) max_wait: Option<Duration>,
    pub(super) rewrite_config_sources: Option<RewritePolicy>,
    #[serde(default, with = "opt_duration")]
    pub(super) refresh_delay: Option<Duration>,
    pub(super) rejection_threshold: Option<u32>,
    pub(super) forward_rejections: Option<bool>,
    pub(super) allow_secrets: Option<bool>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) max_upstream_message_bytes: Option<usize>,
    #[serde(alias = "descriptor-set")]
    pub(super) descriptor_sets: Option<Vec<PathBuf>>,
}

pub(super) fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
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
