//! Several control planes: the `[[upstream]]` tables of the `--config` file,
//! checked into [`UpstreamSpec`]s (or the one spec the flat `--upstream`
//! flags describe), with the rules that keep them consistent: unique names,
//! each xdstp authority claimed by one upstream at most, failover chains
//! without cycles between upstreams that speak the same stream protocol.
//!
//! ```toml
//! [[upstream]]
//! name = "mesh"
//! address = "grpc://127.0.0.1:18000"
//! failover = "mesh-backup"          # used while "mesh" is unreachable
//!
//! [[upstream]]
//! name = "mesh-backup"
//! address = "grpc://127.0.0.1:18001"
//!
//! [[upstream]]
//! name = "edge"
//! address = "grpc://127.0.0.1:18002"
//! authorities = ["edge.example.com"] # xdstp://edge.example.com/... names
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::{invalid, normalise_upstream, parse_headers, ConfigError, UpstreamMode};
use super::{UpstreamStreams, UpstreamTls};

/// How long a primary may stay down before its sessions move to the
/// failover upstream, by default.
pub(crate) const DEFAULT_FAILOVER_AFTER: Duration = Duration::from_secs(5);
/// How long a primary must answer health checks before sessions move back
/// to it, by default.
pub(crate) const DEFAULT_FAILBACK_AFTER: Duration = Duration::from_secs(30);
/// The name of the one upstream the `--upstream` flag describes.
pub(crate) const FLAG_UPSTREAM_NAME: &str = "default";

/// The `upstream` setting: one address (the flag, or `upstream = "..."` in
/// the file), or `[[upstream]]` tables (the file only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamSetting {
    Address(String),
    Tables(Vec<UpstreamTable>),
}

impl std::str::FromStr for UpstreamSetting {
    type Err = std::convert::Infallible;

    fn from_str(address: &str) -> Result<UpstreamSetting, Self::Err> {
        Ok(UpstreamSetting::Address(address.to_owned()))
    }
}

impl<'de> Deserialize<'de> for UpstreamSetting {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<UpstreamSetting, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = UpstreamSetting;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an address (upstream = \"grpc://HOST:PORT\") or [[upstream]] tables")
            }

            fn visit_str<E: de::Error>(self, address: &str) -> Result<UpstreamSetting, E> {
                Ok(UpstreamSetting::Address(address.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<UpstreamSetting, A::Error> {
                let tables = de::value::SeqAccessDeserializer::new(seq);
                Vec::deserialize(tables).map(UpstreamSetting::Tables)
            }
        }
        de.deserialize_any(Either)
    }
}

/// One `[[upstream]]` table as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct UpstreamTable {
    /// How logs, views, metrics and `failover` name it.
    pub name: String,
    /// `grpc://HOST:PORT` (or `grpcs://`, `http://`, `https://`).
    pub address: String,
    /// Default: `--upstream-mode`.
    pub mode: Option<UpstreamMode>,
    /// Default: `--upstream-streams`.
    pub streams: Option<UpstreamStreams>,
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub tls_server_name: Option<String>,
    /// `name: value` metadata on every call. Default: `--upstream-header`.
    pub headers: Option<Vec<String>>,
    /// HTTP/2 keepalive interval. Default: `--upstream-keepalive`.
    #[serde(default, with = "super::opt_duration")]
    pub keepalive: Option<Duration>,
    /// xdstp authorities whose names are subscribed here.
    #[serde(default)]
    pub authorities: Vec<String>,
    /// Serves plain names, unclaimed authorities and wildcards (default:
    /// the first table).
    #[serde(default)]
    pub default: bool,
    /// Whether the types it sends that the gateway has no descriptor for
    /// are asked of it by gRPC server reflection. Default:
    /// `--upstream-reflection`.
    pub reflection: Option<bool>,
    /// The upstream that serves this one's sessions while it is unreachable.
    pub failover: Option<String>,
    /// How long this upstream's stream may stay down before its sessions
    /// move to `failover` [default: 5s].
    #[serde(default, with = "super::opt_duration")]
    pub failover_after: Option<Duration>,
    /// How long this upstream must answer again before sessions move back
    /// from `failover` [default: 30s].
    #[serde(default, with = "super::opt_duration")]
    pub failback_after: Option<Duration>,
}

/// When sessions leave an upstream for its failover, and come back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// The upstream sessions move to.
    pub to: String,
    /// Down (or silent) this long: move.
    pub after: Duration,
    /// Answering health checks this long: move back.
    pub back_after: Duration,
}

/// One control plane, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    pub name: String,
    /// `http://` or `https://` URI.
    pub uri: String,
    pub mode: UpstreamMode,
    pub streams: UpstreamStreams,
    pub tls: UpstreamTls,
    pub headers: Vec<(String, String)>,
    pub keepalive: Duration,
    /// Whether the node goes on the first request of a stream only
    /// (`--upstream-node-first-only`), else on every request.
    pub node_first_only: bool,
    /// Whether types the gateway has no descriptor for are asked of this
    /// upstream by gRPC server reflection (`--upstream-reflection`).
    pub reflection: bool,
    /// xdstp authorities this upstream claims.
    pub authorities: Vec<String>,
    pub failover: Option<Failover>,
}

impl UpstreamSpec {
    /// The upstream of a one-off command (`xds-gateway descriptors`): an
    /// address, its TLS settings and metadata, checked as a `[[upstream]]`
    /// table is; everything else the defaults.
    pub fn for_command(
        address: &str,
        tls: UpstreamTls,
        headers: Vec<String>,
    ) -> Result<UpstreamSpec, ConfigError> {
        let table = UpstreamTable {
            name: FLAG_UPSTREAM_NAME.to_owned(),
            address: address.to_owned(),
            ca: tls.ca,
            cert: tls.cert,
            key: tls.key,
            tls_server_name: tls.server_name,
            headers: Some(headers),
            ..UpstreamTable::default()
        };
        let inherited = Inherited {
            mode: UpstreamMode::Sotw,
            streams: UpstreamStreams::Aggregated,
            headers: &[],
            keepalive: Duration::from_secs(30),
            node_first_only: false,
            reflection: true,
        };
        spec_of(table, &inherited)
    }
}

/// The defaults a table falls back on: the flat `--upstream-*` settings.
pub(super) struct Inherited<'a> {
    pub(super) mode: UpstreamMode,
    pub(super) streams: UpstreamStreams,
    pub(super) headers: &'a [(String, String)],
    pub(super) keepalive: Duration,
    pub(super) node_first_only: bool,
    pub(super) reflection: bool,
}

/// Every upstream the gateway talks to, the default first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstreams {
    /// In the order written, except that the default comes first.
    pub specs: Vec<UpstreamSpec>,
}

impl Upstreams {
    /// The one upstream every name goes to, when there is no other.
    pub fn single(&self) -> Option<&UpstreamSpec> {
        match self.specs.as_slice() {
            [only] if only.failover.is_none() && only.authorities.is_empty() => Some(only),
            _ => None,
        }
    }

    /// The upstream serving plain names and unclaimed authorities.
    pub(crate) fn default_spec(&self) -> Option<&UpstreamSpec> {
        self.specs.first()
    }

    /// The upstream named `name`.
    pub fn named(&self, name: &str) -> Option<&UpstreamSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// `name` and the upstreams its failover chain reaches, in order.
    pub fn chain(&self, name: &str) -> Vec<&UpstreamSpec> {
        let mut chain: Vec<&UpstreamSpec> = Vec::new();
        let mut next = self.named(name);
        while let Some(spec) = next {
            if chain.iter().any(|s| s.name == spec.name) {
                break;
            }
            chain.push(spec);
            next = spec.failover.as_ref().and_then(|f| self.named(&f.to));
        }
        chain
    }

    /// Checks `tables` into upstreams: names, addresses, authorities,
    /// failover chains.
    pub(super) fn from_tables(
        tables: Vec<UpstreamTable>,
        inherited: &Inherited<'_>,
    ) -> Result<Upstreams, ConfigError> {
        if tables.is_empty() {
            return Err(invalid("upstream", "[[upstream]] needs at least one table"));
        }
        if tables.iter().filter(|t| t.default).count() > 1 {
            return Err(invalid(
                "upstream",
                "more than one [[upstream]] table says default = true; one upstream serves plain names",
            ));
        }
        let default_at = tables.iter().position(|t| t.default).unwrap_or(0);
        let mut specs = tables
            .into_iter()
            .map(|table| spec_of(table, inherited))
            .collect::<Result<Vec<_>, _>>()?;
        specs[..=default_at].rotate_right(1);
        let upstreams = Upstreams { specs };
        upstreams.check()?;
        Ok(upstreams)
    }

    /// The one upstream of the `--upstream` flags.
    pub(super) fn from_flags(
        uri: String,
        tls: UpstreamTls,
        inherited: &Inherited<'_>,
    ) -> Upstreams {
        Upstreams {
            specs: vec![UpstreamSpec {
                name: FLAG_UPSTREAM_NAME.to_owned(),
                uri,
                mode: inherited.mode,
                streams: inherited.streams,
                tls,
                headers: inherited.headers.to_vec(),
                keepalive: inherited.keepalive,
                node_first_only: inherited.node_first_only,
                reflection: inherited.reflection,
                authorities: Vec::new(),
                failover: None,
            }],
        }
    }

    fn check(&self) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        let mut claims: BTreeMap<&str, &str> = BTreeMap::new();
        for spec in &self.specs {
            if !names.insert(spec.name.as_str()) {
                return Err(invalid(
                    "upstream",
                    &format!("two [[upstream]] tables are named {:?}", spec.name),
                ));
            }
            for authority in &spec.authorities {
                if let Some(first) = claims.insert(authority, &spec.name) {
                    return Err(invalid(
                        "upstream",
                        &format!(
                            "authority {authority:?} is claimed by both {first:?} and {:?}; \
                             each xdstp authority has one upstream",
                            spec.name
                        ),
                    ));
                }
            }
        }
        for spec in &self.specs {
            let Some(failover) = &spec.failover else {
                continue;
            };
            let Some(to) = self.named(&failover.to) else {
                return Err(invalid(
                    "upstream",
                    &format!(
                        "{:?} fails over to {:?}, which no [[upstream]] table names",
                        spec.name, failover.to
                    ),
                ));
            };
            if matches!(spec.mode, UpstreamMode::Fetch | UpstreamMode::Auto) {
                return Err(invalid(
                    "upstream",
                    &format!(
                        "{:?} has a failover but mode {:?}: failover moves upstream streams, \
                         so it needs mode sotw or delta",
                        spec.name,
                        mode_name(spec.mode)
                    ),
                ));
            }
            if (to.mode, to.streams) != (spec.mode, spec.streams) {
                return Err(invalid(
                    "upstream",
                    &format!(
                        "{:?} fails over to {:?}, which speaks another protocol \
                         ({} on {:?} streams, not {} on {:?}); sessions move between upstreams \
                         of one mode and one kind of streams",
                        spec.name,
                        to.name,
                        mode_name(to.mode),
                        to.streams,
                        mode_name(spec.mode),
                        spec.streams
                    ),
                ));
            }
            // The chain stops at a name it already holds: a failover past
            // its end is a cycle.
            let chain = self.chain(&spec.name);
            if let Some(back) = chain.last().and_then(|last| last.failover.as_ref()) {
                let names = chain.iter().map(|s| s.name.as_str());
                let cycle: Vec<&str> = names.chain([back.to.as_str()]).collect();
                return Err(invalid(
                    "upstream",
                    &format!(
                        "failover cycle: {}; a chain must end at an upstream without failover",
                        cycle.join(" -> ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn mode_name(mode: UpstreamMode) -> &'static str {
    match mode {
        UpstreamMode::Sotw => "sotw",
        UpstreamMode::Delta => "delta",
        UpstreamMode::Fetch => "fetch",
        UpstreamMode::Auto => "auto",
    }
}

/// One table, checked.
fn spec_of(table: UpstreamTable, inherited: &Inherited<'_>) -> Result<UpstreamSpec, ConfigError> {
    let name = table.name.trim().to_owned();
    let valid_name = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_name {
        return Err(invalid(
            "upstream",
            &format!(
                "[[upstream]] name {:?} must be letters, digits, '-', '_' or '.'",
                table.name
            ),
        ));
    }
    let within = |reason: String| invalid("upstream", &format!("[[upstream]] {name:?}: {reason}"));
    if !table.address.contains("://") {
        return Err(within(format!(
            "address {:?} needs a scheme: grpc:// (plaintext) or grpcs:// (TLS)",
            table.address
        )));
    }
    let uri = normalise_upstream(&table.address).map_err(|e| within(e.to_string()))?;
    let tls = UpstreamTls {
        ca: table.ca,
        cert: table.cert,
        key: table.key,
        server_name: table.tls_server_name,
    };
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(within("cert and key go together".into()));
    }
    if tls != UpstreamTls::default() && !uri.starts_with("https://") {
        return Err(within(
            "TLS settings need a grpcs:// or https:// address".into(),
        ));
    }
    let mode = table.mode.unwrap_or(inherited.mode);
    let streams = table.streams.unwrap_or(inherited.streams);
    if mode == UpstreamMode::Fetch && streams == UpstreamStreams::PerType {
        return Err(within(
            "per-type streams are for the stream modes; fetch opens no stream".into(),
        ));
    }
    let headers = match table.headers {
        Some(raw) => parse_headers(raw).map_err(|e| within(e.to_string()))?,
        None => inherited.headers.to_vec(),
    };
    for authority in &table.authorities {
        let valid = !authority.is_empty()
            && !authority
                .chars()
                .any(|c| c == '/' || c == '?' || c == '#' || c.is_whitespace());
        if !valid {
            return Err(within(format!(
                "authority {authority:?} is not an xdstp authority (a host-like name without '/', '?', '#' or spaces)"
            )));
        }
    }
    for (key, value) in [
        ("keepalive", table.keepalive),
        ("failover-after", table.failover_after),
        ("failback-after", table.failback_after),
    ] {
        if value.is_some_and(|d| d > super::MAX_DURATION) {
            return Err(within(format!("{key} must be at most 366d (a year)")));
        }
    }
    let failover = match table.failover {
        Some(to) if to == name => return Err(within("fails over to itself".into())),
        Some(to) => Some(Failover {
            to,
            after: table.failover_after.unwrap_or(DEFAULT_FAILOVER_AFTER),
            back_after: table.failback_after.unwrap_or(DEFAULT_FAILBACK_AFTER),
        }),
        None if table.failover_after.is_some() || table.failback_after.is_some() => {
            return Err(within(
                "failover-after and failback-after need a failover upstream".into(),
            ));
        }
        None => None,
    };
    Ok(UpstreamSpec {
        name,
        uri,
        mode,
        streams,
        tls,
        headers,
        keepalive: table.keepalive.unwrap_or(inherited.keepalive),
        node_first_only: inherited.node_first_only,
        reflection: table.reflection.unwrap_or(inherited.reflection),
        authorities: table.authorities,
        failover,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inherited() -> Inherited<'static> {
        Inherited {
            mode: UpstreamMode::Sotw,
            streams: UpstreamStreams::Aggregated,
            headers: &[],
            keepalive: Duration::from_secs(30),
            node_first_only: false,
            reflection: true,
        }
    }

    fn parse(toml_text: &str) -> Result<Upstreams, String> {
        #[derive(Deserialize)]
        struct File {
            upstream: UpstreamSetting,
        }
        let file: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        match file.upstream {
            UpstreamSetting::Tables(tables) => {
                Upstreams::from_tables(tables, &inherited()).map_err(|e| e.to_string())
            }
            UpstreamSetting::Address(a) => Err(format!("address {a}")),
        }
    }

    #[test]
    fn tables_become_specs_with_the_default_first() {
        let upstreams = parse(
            r#"
            [[upstream]]
            name = "edge"
            address = "grpc://127.0.0.1:2"
            authorities = ["edge.example"]
            [[upstream]]
            name = "mesh"
            address = "grpc://127.0.0.1:1"
            default = true
            failover = "backup"
            failover-after = "2s"
            [[upstream]]
            name = "backup"
            address = "grpc://127.0.0.1:3"
            "#,
        )
        .unwrap();
        let names: Vec<&str> = upstreams.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mesh", "edge", "backup"]);
        let mesh = upstreams.default_spec().unwrap();
        assert_eq!(mesh.uri, "http://127.0.0.1:1");
        let failover = mesh.failover.as_ref().unwrap();
        assert_eq!(failover.after, Duration::from_secs(2));
        assert_eq!(failover.back_after, DEFAULT_FAILBACK_AFTER);
        let chain: Vec<&str> = upstreams
            .chain("mesh")
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(chain, ["mesh", "backup"]);
        assert!(upstreams.single().is_none());
    }

    #[test]
    fn an_address_is_still_one_upstream() {
        #[derive(Deserialize)]
        struct File {
            upstream: UpstreamSetting,
        }
        let file: File = toml::from_str(r#"upstream = "grpc://127.0.0.1:1""#).unwrap();
        assert_eq!(
            file.upstream,
            UpstreamSetting::Address("grpc://127.0.0.1:1".into())
        );
    }

    #[test]
    fn contradictions_are_refused_with_what_contradicts() {
        let cases = [
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                authorities = ["x.example"]
                [[upstream]]
                name = "b"
                address = "grpc://127.0.0.1:2"
                authorities = ["x.example"]
                "#,
                "authority \"x.example\" is claimed by both \"a\" and \"b\"",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                failover = "b"
                [[upstream]]
                name = "b"
                address = "grpc://127.0.0.1:2"
                failover = "a"
                "#,
                "failover cycle: a -> b -> a",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                failover = "a"
                "#,
                "fails over to itself",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                failover = "nowhere"
                "#,
                "which no [[upstream]] table names",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                failover = "b"
                [[upstream]]
                name = "b"
                address = "grpc://127.0.0.1:2"
                mode = "delta"
                "#,
                "speaks another protocol",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                mode = "fetch"
                failover = "b"
                [[upstream]]
                name = "b"
                address = "grpc://127.0.0.1:2"
                mode = "fetch"
                "#,
                "needs mode sotw or delta",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:2"
                "#,
                "two [[upstream]] tables are named \"a\"",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "127.0.0.1:1"
                "#,
                "needs a scheme",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                authorities = ["x/y"]
                "#,
                "is not an xdstp authority",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                colour = "blue"
                "#,
                "unknown field `colour`",
            ),
            (
                r#"
                [[upstream]]
                name = "a"
                address = "grpc://127.0.0.1:1"
                failover = "b"
                failback-after = "500000000000years"
                [[upstream]]
                name = "b"
                address = "grpc://127.0.0.1:2"
                "#,
                "failback-after must be at most 366d",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.contains(expected), "{expected:?} not in {err:?}");
        }
    }
}
