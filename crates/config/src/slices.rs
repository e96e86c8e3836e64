//! The slices of a [`Config`] its consumers are handed: what the REST
//! handlers read ([`RestConfig`]) and what the admin views read
//! ([`AdminConfig`]), each made by one method of `Config`. A consumer sees
//! the settings it uses and no other, so what a handler can depend on is
//! written in one struct, and the serve limits
//! (the gateway's `serve::ServeLimits`) and the sessions' limits are
//! made the same way in `app.rs`.

use std::time::Duration;

use super::{Config, ForwardedHeader, RewritePolicy, SessionKey, TrustedProxies};

/// How config sources in answers are rewritten to point at the gateway's
/// own REST endpoints (`--rewrite-config-sources`, and the `refresh_delay`
/// and `request_timeout` written into them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestRewrite {
    pub policy: RewritePolicy,
    pub refresh_delay: Duration,
    pub request_timeout: Duration,
}

impl RestRewrite {
    /// Whether a client whose user agent is `user_agent` gets them
    /// rewritten (`auto`: Envoys only; a GET carries no user agent).
    pub fn applies_to(&self, user_agent: &str) -> bool {
        match self.policy {
            RewritePolicy::Always => true,
            RewritePolicy::Never => false,
            RewritePolicy::Auto => user_agent == "envoy",
        }
    }
}

/// What the REST handlers read: request bounds, waits, the places of long
/// polls and watches, how answers are presented and whom to trust for a
/// client's address.
#[derive(Debug, Clone)]
pub struct RestConfig {
    /// What tells sessions apart (`--session-key`).
    pub session_key: SessionKey,
    /// How long a client or an answer of `?changes` is remembered.
    pub idle_timeout: Duration,
    /// Polls presenting the same older version that make a suspected
    /// rejection (`--rejection-threshold`).
    pub rejection_threshold: u32,
    /// How long a route configuration or listener may be held back from a
    /// client until what it names was served to it (`--make-before-break`;
    /// zero: never).
    pub make_before_break: Duration,
    pub max_long_polls: usize,
    pub max_watches: usize,
    /// One principal's share of the two above, in percent.
    pub principal_share: u8,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub max_names_per_request: usize,
    pub max_node_bytes: usize,
    pub default_wait: Duration,
    pub max_wait: Duration,
    pub watch_heartbeat: Duration,
    pub cache_max_age: Duration,
    pub allow_secrets: bool,
    pub rewrite: RestRewrite,
    pub trusted_proxies: Option<TrustedProxies>,
    /// The one header the trusted proxies are read from.
    pub forwarded_header: ForwardedHeader,
    /// `--allowed-hosts`: names answered without authentication.
    pub allowed_hosts: Vec<String>,
    /// The REST names of the extra types answered with proto field names
    /// unless the client asks otherwise (`field-names = "proto"`).
    pub proto_field_names: Vec<String>,
    /// The bounds of the memos the REST face holds (within the budget).
    pub memory: super::memory::MemoryShares,
}

/// What the admin views read besides the source: whether secrets may be
/// shown, and how `/debug/config` rewrites config sources.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub allow_secrets: bool,
    /// The admin listener is off loopback and its details are not opened
    /// without a credential: always when they carry secrets, else unless
    /// `--allow-insecure-admin`.
    pub needs_credential: bool,
    /// `--allowed-hosts`: names answered without authentication.
    pub allowed_hosts: Vec<String>,
    pub rewrite: RestRewrite,
}

impl Config {
    pub fn rest_rewrite(&self) -> RestRewrite {
        RestRewrite {
            policy: self.rewrite_config_sources,
            refresh_delay: self.refresh_delay,
            request_timeout: self.request_timeout,
        }
    }

    /// The REST handlers' slice.
    pub fn rest(&self) -> RestConfig {
        RestConfig {
            session_key: self.session_key,
            idle_timeout: self.idle_timeout,
            rejection_threshold: self.rejection_threshold,
            make_before_break: self.make_before_break,
            max_long_polls: self.max_long_polls,
            max_watches: self.max_watches,
            principal_share: self.principal_share,
            max_body_bytes: self.max_body_bytes,
            body_read_timeout: self.body_read_timeout,
            max_names_per_request: self.max_names_per_request,
            max_node_bytes: self.max_node_bytes,
            default_wait: self.default_wait,
            max_wait: self.max_wait,
            watch_heartbeat: self.watch_heartbeat,
            cache_max_age: self.cache_max_age,
            allow_secrets: self.allow_secrets,
            rewrite: self.rest_rewrite(),
            trusted_proxies: self.trusted_proxies.clone(),
            forwarded_header: self.forwarded_header,
            allowed_hosts: self.allowed_hosts.clone(),
            memory: self.memory,
            proto_field_names: self
                .extra_types
                .iter()
                .filter(|t| t.field_names == super::FieldNames::Proto)
                .map(|t| t.name.clone())
                .collect(),
        }
    }

    /// The admin views' slice.
    pub fn admin_views(&self) -> AdminConfig {
        AdminConfig {
            allow_secrets: self.allow_secrets,
            needs_credential: !self.admin.ip().is_loopback()
                && (self.allow_secrets || !self.allow_insecure_admin),
            allowed_hosts: self.allowed_hosts.clone(),
            rewrite: self.rest_rewrite(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_policy_by_user_agent() {
        let rewrite = |policy| RestRewrite {
            policy,
            ..Config::default().rest_rewrite()
        };
        let auto = rewrite(RewritePolicy::Auto);
        assert!(auto.applies_to("envoy") && !auto.applies_to("") && !auto.applies_to("curl"));
        assert!(rewrite(RewritePolicy::Always).applies_to(""));
        assert!(!rewrite(RewritePolicy::Never).applies_to("envoy"));
    }

    #[test]
    fn slices_carry_the_config_values() {
        let config = Config {
            max_body_bytes: 123,
            allow_secrets: true,
            refresh_delay: Duration::from_millis(250),
            ..Config::default()
        };
        let rest = config.rest();
        assert_eq!(rest.max_body_bytes, 123);
        assert!(rest.allow_secrets);
        assert_eq!(rest.rewrite.refresh_delay, Duration::from_millis(250));
        let admin = config.admin_views();
        assert!(admin.allow_secrets);
        assert_eq!(admin.rewrite, rest.rewrite);
    }
}
