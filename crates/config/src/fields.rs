//! Every setting, declared once: its flag, `XDS_GATEWAY_*` variable and
//! `--config` key (the same name), its help, its type and its default.
//!
//! From the one list, [`settings!`] makes:
//! - [`Settings`], one layer (the command line read by clap, or the file read
//!   by serde), every setting optional;
//! - [`Config`], with a field per setting that is used as it is (an entry
//!   written `name: Type = default`), set to its default, and the fields
//!   only a `Config` has (`config_only`: what settings turn into);
//! - `Config::overlay_plain`, which lays a layer's plain settings over it.
//!
//! An entry written `name: Option<Type>` (no default) stays in `Settings`:
//! it is optional in the config too, or lands in another form (TLS files,
//! parsed headers, the upstream tables), and `Config::apply` places it.
//!
//! Adding a flag is one entry here (and, where it needs one, a check in
//! `Config::validate`); `tests/cli.rs` finds it in `--help`, the docs'
//! flag table and the sample config.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use super::extra_types::ExtraTypeSpec;
use super::opt_duration;
use super::profiles::ProfileTable;
use super::proxies::{ForwardedHeader, TrustedProxies};
use super::upstreams::{UpstreamSetting, UpstreamTable, Upstreams};
use super::{
    ClientAuth, LogFormat, RewritePolicy, ServerTlsFiles, SessionKey, UpstreamMode,
    UpstreamStreams, UpstreamTls, Validation,
};

/// See the module docs. Entries are munched one at a time into four lists:
/// the `Settings` fields, the plain `Config` fields, their defaults, and the
/// names `overlay_plain` copies.
macro_rules! settings {
    (
        settings { $($entries:tt)* }
        config_only { $( $(#[$cm:meta])* $cname:ident : $cty:ty = $cdefault:expr, )* }
    ) => {
        settings!(@munch [] [] [] []
            $($entries)*
            ; { $( $(#[$cm])* $cname : $cty = $cdefault, )* });
    };
    // Used as it is: optional in `Settings`, with its default in `Config`.
    (@munch [$($s:tt)*] [$($c:tt)*] [$($d:tt)*] [$($o:tt)*]
        $(#[$m:meta])* $name:ident : $ty:ty = $default:expr, $($rest:tt)*) => {
        settings!(@munch
            [$($s)* $(#[$m])* pub $name: Option<$ty>,]
            [$($c)* pub $name: $ty,]
            [$($d)* $name: $default,]
            [$($o)* $name]
            $($rest)*);
    };
    // Optional in the config too, or placed by hand: `Settings` only.
    (@munch [$($s:tt)*] [$($c:tt)*] [$($d:tt)*] [$($o:tt)*]
        $(#[$m:meta])* $name:ident : $ty:ty, $($rest:tt)*) => {
        settings!(@munch [$($s)* $(#[$m])* pub $name: $ty,] [$($c)*] [$($d)*] [$($o)*] $($rest)*);
    };
    (@munch [$($s:tt)*] [$($c:tt)*] [$($d:tt)*] [$($o:ident)*]
        ; { $( $(#[$cm:meta])* $cname:ident : $cty:ty = $cdefault:expr, )* }) => {
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
            $($s)*
        }

        /// The validated configuration every other module receives.
        #[derive(Debug, Clone)]
        pub struct Config {
            $( $(#[$cm])* pub $cname: $cty, )*
            $($c)*
        }

        impl Default for Config {
            fn default() -> Config {
                Config {
                    $( $cname: $cdefault, )*
                    $($d)*
                }
            }
        }

        #[cfg(test)]
        mod plain_help_text {
            use super::{help_text::HelpText, Config};

            impl Config {
                /// Each plain setting's flag name and value as `--help` writes
                /// a default: what the help's `[default: ...]` is checked against.
                pub(crate) fn plain_as_help_text(&self) -> Vec<(&'static str, String)> {
                    vec![$((stringify!($o), self.$o.help_text()),)*]
                }
            }
        }

        impl Config {
            /// Lays the plain settings `layer` sets over these, taking them.
            pub(super) fn overlay_plain(&mut self, layer: &mut Settings) {
                $(if let Some(value) = layer.$o.take() {
                    self.$o = value;
                })*
            }
        }
    };
}

settings! {
    settings {
        /// TOML file whose keys mirror the long flags (e.g. `upstream = "grpc://127.0.0.1:18000"`).
        #[arg(long, env = "XDS_GATEWAY_CONFIG")]
        #[serde(skip)]
        config: Option<PathBuf>,
        /// Control plane serving ADS, as grpc://HOST:PORT (or http://); the
        /// `--config` file may instead declare several in `[[upstream]]` tables.
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM", value_parser = clap::value_parser!(UpstreamSetting))]
        upstream: Option<UpstreamSetting>,
        /// How to talk to the upstream [default: sotw].
        #[arg(long, value_enum, env = "XDS_GATEWAY_UPSTREAM_MODE")]
        upstream_mode: UpstreamMode = UpstreamMode::Sotw,
        /// Streams of the sotw and delta modes: one aggregated (ADS) stream per
        /// node identity, or one per identity and type on the types' own
        /// services (for control planes without ADS) [default: aggregated].
        #[arg(long, value_enum, env = "XDS_GATEWAY_UPSTREAM_STREAMS")]
        upstream_streams: UpstreamStreams = UpstreamStreams::Aggregated,
        /// CA bundle (PEM) to verify an https:// / grpcs:// upstream [default: system roots].
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_CA")]
        upstream_ca: Option<PathBuf>,
        /// Client certificate (PEM) for mTLS to the upstream (with --upstream-key).
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_CERT")]
        upstream_cert: Option<PathBuf>,
        /// Client private key (PEM) for mTLS to the upstream.
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_KEY")]
        upstream_key: Option<PathBuf>,
        /// Server name to verify in the upstream's certificate [default: the upstream host].
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_TLS_SERVER_NAME")]
        upstream_tls_server_name: Option<String>,
        /// Metadata sent on every upstream call, as `name: value` (repeatable), e.g. an ACL token.
        #[arg(
            long = "upstream-header",
            env = "XDS_GATEWAY_UPSTREAM_HEADERS",
            value_delimiter = ';'
        )]
        #[serde(alias = "upstream-header")]
        upstream_headers: Option<Vec<String>>,
        /// HTTP/2 keepalive ping interval toward the upstream [default: 30s].
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_KEEPALIVE", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        upstream_keepalive: Duration = Duration::from_secs(30),
        /// Send the node on the first request of each upstream stream only, as Envoy's
        /// `set_node_on_first_message_only` does. By default it goes on every request, as
        /// Envoy's own default: the protocol guarantees it on the first only, and control
        /// planes that key each request on its own node (java-control-plane) need it on every
        /// one; go-control-plane and Istio keep the first, so this saves each ACK the node's
        /// bytes there (a REST Envoy's node is about 77 KB).
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_NODE_FIRST_ONLY", num_args = 0..=1, default_missing_value = "true",
              value_parser = clap::builder::BoolishValueParser::new())]
        upstream_node_first_only: bool = false,
        /// Ask the upstream, by gRPC server reflection (`grpc.reflection.v1`, then `v1alpha`),
        /// for the descriptors of any type inside its resources that the gateway does not
        /// know, so that it renders in full (istiod and kgateway serve reflection). `off`
        /// serves such a type opaque, as `xds_gateway.v1.OpaqueAny`.
        #[arg(long, env = "XDS_GATEWAY_UPSTREAM_REFLECTION", num_args = 0..=1, default_missing_value = "on",
              value_parser = clap::builder::BoolishValueParser::new())]
        upstream_reflection: bool = true,
        /// Fetch mode: how long what a session's fetch brought is served without asking again [default: 500ms].
        #[arg(long, env = "XDS_GATEWAY_FETCH_CACHE_TTL", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        fetch_cache_ttl: Duration = Duration::from_millis(500),
        /// Snapshot directory served when no --upstream is given (YAML/JSON
        /// resources; watched) [default: the embedded examples/demo snapshot].
        #[arg(long, env = "XDS_GATEWAY_SNAPSHOT")]
        snapshot: Option<PathBuf>,
        /// REST listener address [default: 127.0.0.1:8080].
        #[arg(long, env = "XDS_GATEWAY_LISTEN")]
        listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080)),
        /// Admin listener (/healthz, /readyz, /metrics) [default: 127.0.0.1:9901].
        #[arg(long, env = "XDS_GATEWAY_ADMIN")]
        admin: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9901)),
        /// Serve REST over TLS with this certificate chain (PEM; reloaded when it changes).
        #[arg(long, env = "XDS_GATEWAY_TLS_CERT")]
        tls_cert: Option<PathBuf>,
        /// Private key (PEM) of --tls-cert (reloaded when it changes).
        #[arg(long, env = "XDS_GATEWAY_TLS_KEY")]
        tls_key: Option<PathBuf>,
        /// CA bundle (PEM) that signs client certificates: mTLS on the REST listener.
        #[arg(long, env = "XDS_GATEWAY_CLIENT_CA")]
        client_ca: Option<PathBuf>,
        /// With --client-ca: whether a client certificate is required [default: required].
        #[arg(long, value_enum, env = "XDS_GATEWAY_CLIENT_AUTH")]
        client_auth: Option<ClientAuth>,
        /// Serve the admin listener over TLS with this certificate chain (PEM; reloaded when it changes).
        #[arg(long, env = "XDS_GATEWAY_ADMIN_TLS_CERT")]
        admin_tls_cert: Option<PathBuf>,
        /// Private key (PEM) of --admin-tls-cert (reloaded when it changes).
        #[arg(long, env = "XDS_GATEWAY_ADMIN_TLS_KEY")]
        admin_tls_key: Option<PathBuf>,
        /// CA bundle (PEM) that signs admin client certificates: mTLS on the admin listener; a
        /// certificate it signed (one the auth policy's `[admin]` uri-san/dns-san name, if it names
        /// any) opens the details as an admin token does.
        #[arg(long, env = "XDS_GATEWAY_ADMIN_CLIENT_CA")]
        admin_client_ca: Option<PathBuf>,
        /// With --admin-client-ca: whether a client certificate is required (`optional` lets probes
        /// without one reach /healthz, and token holders the details) [default: required].
        #[arg(long, value_enum, env = "XDS_GATEWAY_ADMIN_CLIENT_AUTH")]
        admin_client_auth: Option<ClientAuth>,
        /// Policy file (TOML) binding principals (client certificates, bearer tokens) to the nodes they may fetch.
        #[arg(long, env = "XDS_GATEWAY_AUTH_POLICY")]
        auth_policy: Option<PathBuf>,
        /// Allow a non-loopback --listen without TLS and without --auth-policy (anyone who reaches it can take any node's identity).
        #[arg(long, env = "XDS_GATEWAY_ALLOW_INSECURE_LISTEN", num_args = 0..=1, default_missing_value = "true",
              value_parser = clap::builder::BoolishValueParser::new())]
        allow_insecure_listen: bool = false,
        /// Open the admin listener's details (/metrics, the /readyz details, /debug/*, CSDS, the
        /// status page) off loopback with no admin credential, for a network that fences the admin
        /// port itself (a NetworkPolicy admitting only labelled pods). Without it they are closed
        /// there (401) until the auth policy has an `[admin]` token or --admin-client-ca is set;
        /// /healthz and /readyz stay open. It does not open secrets (--allow-secrets) [default: false].
        #[arg(long, env = "XDS_GATEWAY_ALLOW_INSECURE_ADMIN", num_args = 0..=1, default_missing_value = "true",
              value_parser = clap::builder::BoolishValueParser::new())]
        allow_insecure_admin: bool = false,
        /// Host names both listeners answer without authentication, besides IP addresses,
        /// localhost and names without a dot (a web page could reach an open listener under any
        /// other name by DNS rebinding).
        #[arg(long, env = "XDS_GATEWAY_ALLOWED_HOSTS", value_delimiter = ',', value_name = "NAME,...")]
        allowed_hosts: Vec<String> = Vec::new(),
        /// One source address may hold at most this percentage of --max-connections (more are
        /// answered 503 and closed), so one client cannot hold them all; --trusted-proxies are
        /// exempt (every client behind them shares their address); 100 turns it off [default: 25].
        #[arg(long, env = "XDS_GATEWAY_SOURCE_CONNECTION_SHARE", value_name = "PERCENT")]
        source_connection_share: u8 = 25,
        /// At most this many open REST connections; more are answered 503 and closed [default: 10000].
        #[arg(long, env = "XDS_GATEWAY_MAX_CONNECTIONS")]
        max_connections: usize = 10_000,
        /// At most this many long polls held at once; more are answered 503 [default: 5000].
        #[arg(long, env = "XDS_GATEWAY_MAX_LONG_POLLS")]
        max_long_polls: usize = 5_000,
        /// At most this many watch streams (`?watch`) open at once; more are answered 503 [default: 1000].
        #[arg(long, env = "XDS_GATEWAY_MAX_WATCHES")]
        max_watches: usize = 1_000,
        /// With an auth policy of several principals, one principal may hold at most this percentage of --max-sessions, --max-watches and --max-long-polls (more of its own are answered 503), so one tenant cannot starve the rest; 100 turns the shares off [default: 50].
        #[arg(long, env = "XDS_GATEWAY_PRINCIPAL_SHARE", value_name = "PERCENT")]
        principal_share: u8 = 50,
        /// A watch stream with nothing to send for this long sends a heartbeat (an SSE comment, or an empty NDJSON line), so proxies keep it open [default: 15s].
        #[arg(long, env = "XDS_GATEWAY_WATCH_HEARTBEAT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        watch_heartbeat: Duration = Duration::from_secs(15),
        /// HTTP/2 requests in flight on one REST connection at most. An Envoy polling over HTTP/2 opens one per REST subscription at once (one per EDS cluster) before it has read this limit, and fails every request refused beyond it [default: 4096].
        #[arg(long, env = "XDS_GATEWAY_MAX_STREAMS_PER_CONNECTION")]
        max_streams_per_connection: u32 = 4_096,
        /// A request's headers (and the TLS handshake) must arrive within this [default: 10s].
        #[arg(long, env = "XDS_GATEWAY_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        header_read_timeout: Duration = Duration::from_secs(10),
        /// A request's body must arrive within this, whole [default: 30s].
        #[arg(long, env = "XDS_GATEWAY_BODY_READ_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        body_read_timeout: Duration = Duration::from_secs(30),
        /// Close a connection with no request in flight for this long [default: 60s].
        #[arg(long, env = "XDS_GATEWAY_KEEP_ALIVE_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        keep_alive_timeout: Duration = Duration::from_secs(60),
        /// At shutdown (SIGTERM), how long requests in flight may take to finish before the process exits; held long polls are answered at once [default: 10s].
        #[arg(long, env = "XDS_GATEWAY_DRAIN_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        drain_timeout: Duration = Duration::from_secs(10),
        /// Which clients share one upstream stream [default: node].
        #[arg(long, value_enum, env = "XDS_GATEWAY_SESSION_KEY")]
        session_key: SessionKey = SessionKey::Node,
        /// Close an upstream session after this long without polls [default: 5m].
        #[arg(long, env = "XDS_GATEWAY_IDLE_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        idle_timeout: Duration = Duration::from_secs(300),
        /// At most this many upstream sessions at once [default: 10000].
        #[arg(long, env = "XDS_GATEWAY_MAX_SESSIONS")]
        max_sessions: usize = 10_000,
        /// How long a first request waits for the upstream's first answer [default: 5s].
        #[arg(long, env = "XDS_GATEWAY_FIRST_RESPONSE_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        first_response_timeout: Duration = Duration::from_secs(5),
        /// Long-poll wait applied when a request does not say `?wait=` [default: 0s].
        #[arg(long, env = "XDS_GATEWAY_DEFAULT_WAIT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        default_wait: Duration = Duration::ZERO,
        /// Cap on any long-poll wait [default: 60s].
        #[arg(long, env = "XDS_GATEWAY_MAX_WAIT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        max_wait: Duration = Duration::from_secs(60),
        /// Let HTTP caches (nginx, a CDN) serve a public discovery answer this long without
        /// revalidating: `Cache-Control: max-age=N, stale-while-revalidate=N`; 0s: `no-cache`,
        /// revalidate every use (whole seconds) [default: 0s].
        #[arg(long, env = "XDS_GATEWAY_CACHE_MAX_AGE", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        cache_max_age: Duration = Duration::ZERO,
        /// Rewrite `ads`/`self` config sources to REST ones [default: auto].
        #[arg(long, value_enum, env = "XDS_GATEWAY_REWRITE_CONFIG_SOURCES")]
        rewrite_config_sources: RewritePolicy = RewritePolicy::Auto,
        /// refresh_delay written into rewritten config sources [default: 1s].
        #[arg(long, env = "XDS_GATEWAY_REFRESH_DELAY", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        refresh_delay: Duration = Duration::from_secs(1),
        /// request_timeout written into rewritten config sources: how long an Envoy waits for each
        /// REST poll; at least --first-response-timeout [default: 10s].
        #[arg(long, env = "XDS_GATEWAY_REQUEST_TIMEOUT", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        request_timeout: Duration = Duration::from_secs(10),
        /// Polls presenting an older version, after a newer one was served, before a rejection is suspected [default: 3].
        #[arg(long, env = "XDS_GATEWAY_REJECTION_THRESHOLD")]
        rejection_threshold: u32 = 3,
        /// Make-before-break for REST clients: a new route configuration or listener is held back
        /// from a client (answered 304) until the clusters it sends traffic to, and their
        /// endpoints, were served to that client, for at most this long; 0s: off [default: 0s].
        #[arg(long, env = "XDS_GATEWAY_MAKE_BEFORE_BREAK", value_parser = humantime::parse_duration)]
        #[serde(default, with = "opt_duration")]
        make_before_break: Duration = Duration::ZERO,
        /// Send a NACK upstream for each suspected rejection. Off loopback it needs --trusted-proxies
        /// (clients behind one balancer could not be told apart), else start-up is refused.
        #[arg(long, env = "XDS_GATEWAY_FORWARD_REJECTIONS", num_args = 0..=1, default_missing_value = "true",
              value_parser = clap::builder::BoolishValueParser::new())]
        forward_rejections: bool = false,
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
        trusted_proxies: Option<Vec<String>>,
        /// The header --trusted-proxies write the client into, and the only one read from them:
        /// x-forwarded-for (nginx's proxy_add_x_forwarded_for, Envoy) or forwarded (RFC 7239)
        /// [default: x-forwarded-for].
        #[arg(long, env = "XDS_GATEWAY_FORWARDED_HEADER")]
        forwarded_header: ForwardedHeader = ForwardedHeader::XForwardedFor,
        /// Serve /v3/discovery:secrets, and the private keys inline in other resources (a cluster's
        /// or listener's TLS context), which are otherwise taken out (private keys over HTTP: a
        /// deliberate choice). Off loopback it needs --auth-policy or required mTLS (--client-ca),
        /// else start-up is refused.
        #[arg(long, env = "XDS_GATEWAY_ALLOW_SECRETS", num_args = 0..=1, default_missing_value = "true",
              value_parser = clap::builder::BoolishValueParser::new())]
        allow_secrets: bool = false,
        /// Largest request body accepted, in bytes [default: 4194304].
        #[arg(long, env = "XDS_GATEWAY_MAX_BODY_BYTES")]
        max_body_bytes: usize = 4 * 1024 * 1024,
        /// Largest `node` a request may carry, in JSON bytes [default: 1048576].
        #[arg(long, env = "XDS_GATEWAY_MAX_NODE_BYTES")]
        max_node_bytes: usize = 1024 * 1024,
        /// The memory every kind of state clients make the gateway hold sits inside, in bytes: each
        /// kind gets a share (sessions' nodes 25 %, the upstream answers their streams hold at once
        /// 15 %, the history 10 %, assembled bodies 10 %, YAML and pretty renditions 5 %, parsed
        /// requests 5 % and their nodes 5 %, the client book 5 %), which caps its bound; 0: the
        /// container's memory limit (cgroup), or none without one [default: 0].
        #[arg(long, env = "XDS_GATEWAY_MEMORY_BUDGET_BYTES")]
        memory_budget_bytes: u64 = 0,
        /// Total `node` JSON bytes all sessions may hold; a new session beyond it is a 503; at most
        /// the sessions' share of --memory-budget-bytes [default: 1073741824].
        #[arg(long, env = "XDS_GATEWAY_MAX_SESSION_BYTES")]
        max_session_bytes: usize = 1024 * 1024 * 1024,
        /// Bytes the config history (`/debug/history`, `/debug/diff`) may hold, all nodes together; the oldest events go first; 0 keeps none; at most its share of --memory-budget-bytes [default: 67108864].
        #[arg(long, env = "XDS_GATEWAY_HISTORY_MAX_BYTES")]
        history_max_bytes: u64 = 64 * 1024 * 1024,
        /// Also write the config history's events to this file as JSON lines (rotated by size: PATH.1, PATH.2, PATH.3).
        #[arg(long, env = "XDS_GATEWAY_HISTORY_FILE")]
        history_file: Option<PathBuf>,
        /// Size at which --history-file is rotated, in bytes (at least 4096) [default: 16777216].
        #[arg(long, env = "XDS_GATEWAY_HISTORY_FILE_MAX_BYTES")]
        history_file_max_bytes: u64 = 16 * 1024 * 1024,
        /// Most resource names one request may ask for [default: 20000].
        #[arg(long, env = "XDS_GATEWAY_MAX_NAMES_PER_REQUEST")]
        max_names_per_request: usize = 20_000,
        /// Most resource names one session subscribes to, per type [default: 50000].
        #[arg(long, env = "XDS_GATEWAY_MAX_NAMES_PER_SESSION")]
        max_names_per_session: usize = 50_000,
        /// Largest upstream gRPC message accepted, in bytes [default: 67108864].
        #[arg(long, env = "XDS_GATEWAY_MAX_UPSTREAM_MESSAGE_BYTES")]
        max_upstream_message_bytes: usize = 64 * 1024 * 1024,
        /// Directory of node profiles for GETs (`?profile=NAME`): one
        /// `NAME.json` each, an `envoy.config.core.v3.Node` as JSON (bare, or as a
        /// `node` field, or an Envoy `/config_dump`'s bootstrap); read at start-up.
        #[arg(long, env = "XDS_GATEWAY_NODE_PROFILES", value_name = "DIR")]
        node_profiles: Option<PathBuf>,
        /// `[[profile]]` tables: named nodes a GET presents with `?profile=NAME` (the file only).
        #[arg(skip)]
        profile: Option<Vec<ProfileTable>>,
        /// Extra compiled FileDescriptorSet (repeatable) for contrib or in-house types.
        #[arg(
            long = "descriptor-set",
            env = "XDS_GATEWAY_DESCRIPTOR_SETS",
            value_delimiter = ','
        )]
        #[serde(alias = "descriptor-set")]
        descriptor_sets: Vec<PathBuf> = Vec::new(),
        /// A resource type beyond Envoy's (repeatable), served on `/v3/discovery:NAME` like
        /// Envoy's own: `NAME=TYPE_URL`, e.g. `monitoringassignments=type.googleapis.com/kuma.observability.v1.MonitoringAssignment`.
        /// In the file, `[[extra-type]]` tables also set `service` (its own gRPC service),
        /// `stem`, `complete-state`, `wildcard-when-unnamed`, `name-fields` (the fields that
        /// name a resource) and `field-names` (`json` or `proto`, the answers' default).
        #[arg(
            long = "extra-type",
            env = "XDS_GATEWAY_EXTRA_TYPES",
            value_delimiter = ',',
            value_parser = ExtraTypeSpec::parse_flag
        )]
        #[serde(alias = "extra-type")]
        extra_types: Vec<ExtraTypeSpec> = Vec::new(),
        /// Check every resource against Envoy's own field rules (its protos'
        /// protoc-gen-validate annotations) and NACK what Envoy would reject [default: on].
        #[arg(long, value_enum, env = "XDS_GATEWAY_VALIDATE")]
        validate: Validation = Validation::On,
        /// Log lines as text or as one JSON object per line, on stderr; which lines is set by RUST_LOG (e.g. `info`, `xds_gateway=debug`) [default: text].
        #[arg(long, value_enum, env = "XDS_GATEWAY_LOG_FORMAT")]
        log_format: LogFormat = LogFormat::Text,
    }
    config_only {
        /// The bound of each kind of state, within `--memory-budget-bytes`
        /// ([`Config::validate`] works them out).
        memory: super::memory::MemoryShares = super::memory::MemoryShares::default(),
        /// The control plane's gRPC endpoint as an `http(s)://` URI.
        upstream: Option<String> = None,
        upstream_tls: UpstreamTls = UpstreamTls::default(),
        /// (name, value) metadata pairs sent on every upstream call.
        upstream_headers: Vec<(String, String)> = Vec::new(),
        /// The `[[upstream]]` tables of the `--config` file, as written
        /// ([`Config::validate`] checks them into `upstreams`).
        upstream_tables: Vec<UpstreamTable> = Vec::new(),
        /// Every upstream, the default first: the tables, or the one the flat
        /// `--upstream*` settings describe (empty: the snapshot feeds).
        upstreams: Upstreams = Upstreams::default(),
        /// Snapshot directory (None with no upstream: the embedded demo).
        snapshot: Option<PathBuf> = None,
        /// TLS (and mTLS) on the REST listener; `None`: plaintext.
        tls: Option<ServerTlsFiles> = None,
        /// TLS on the admin listener (and with `client_ca`, mTLS: a certificate
        /// that CA signed opens the details as an admin token does); `None`:
        /// plaintext.
        admin_tls: Option<ServerTlsFiles> = None,
        /// The authorization policy file; `None`: every client may fetch every node.
        auth_policy: Option<PathBuf> = None,
        /// The proxies whose `Forwarded`/`X-Forwarded-For` names the client;
        /// `None`: not said (every peer is taken for a client, and
        /// `--forward-rejections` is refused off loopback).
        trusted_proxies: Option<TrustedProxies> = None,
        /// The `[[profile]]` tables of the `--config` file (checked by
        /// [`Config::validate`]; made into nodes by the gateway's `profiles`).
        profiles: Vec<ProfileTable> = Vec::new(),
        /// `--node-profiles`: a directory of `NAME.json` nodes.
        node_profiles: Option<PathBuf> = None,
        /// `--history-file`: the config history's JSON-lines file, if any.
        history_file: Option<PathBuf> = None,
        /// What validation let through but a person should hear of at start-up
        /// (logged by `app::run`).
        warnings: Vec<String> = Vec::new(),
    }
}

#[cfg(test)]
mod help_text {
    use super::*;
    use clap::ValueEnum;

    /// A value as `--help` writes it in `[default: ...]`.
    pub(super) trait HelpText {
        fn help_text(&self) -> String;
    }

    macro_rules! displayed {
        ($($t:ty),*) => {$(impl HelpText for $t {
            fn help_text(&self) -> String {
                self.to_string()
            }
        })*};
    }
    displayed!(usize, u64, u32, u8, bool, SocketAddr);

    macro_rules! value_enum {
        ($($t:ty),*) => {$(impl HelpText for $t {
            fn help_text(&self) -> String {
                self.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
            }
        })*};
    }
    value_enum!(
        UpstreamMode,
        UpstreamStreams,
        SessionKey,
        RewritePolicy,
        Validation,
        LogFormat,
        ForwardedHeader
    );

    impl HelpText for Duration {
        fn help_text(&self) -> String {
            humantime::format_duration(*self).to_string()
        }
    }

    impl HelpText for Vec<String> {
        fn help_text(&self) -> String {
            format!("{self:?}")
        }
    }

    impl HelpText for Vec<PathBuf> {
        fn help_text(&self) -> String {
            format!("{self:?}")
        }
    }

    impl HelpText for Vec<ExtraTypeSpec> {
        fn help_text(&self) -> String {
            format!("{self:?}")
        }
    }
}
