//! Fuzzing: the entry points of the coverage-guided `cargo fuzz` targets in
//! `fuzz/` (libFuzzer), their corpus replay in `cargo test`, and (test
//! builds only) the proptest mutation of real inputs the older property
//! targets use.
//!
//! Compiled for tests, and with the `fuzzing` cargo feature (which only the
//! `fuzz/` package turns on); hidden from the documentation and from every
//! other build. What it exposes is one function per target, each taking the
//! raw input bytes; no internal type leaves the crate. Each function is the
//! whole target: `fuzz/fuzz_targets/<name>.rs` calls it and nothing else,
//! and the replay test ([`replay`], in the test command) runs every file of
//! `fuzz/corpus/<name>/` through the same function, so the two cannot
//! drift. A target panics on a property broken (that is what libFuzzer
//! reports); a refused input is not a failure. Each returns whether the
//! input was accepted (parsed, loaded, rendered: past the parser, into the
//! code the target names), which the replay counts to show that a corpus
//! reaches that code and not only early rejections.
//!
//! The bodies live beside the code they fuzz (`http::fuzz`, `xds::fuzz`,
//! `config::fuzz`, `auth::policy::fuzz`, `upstream::snapshot::fuzz`,
//! `upstream::wire::fuzz`), where
//! their properties are documented. Input formats (a leading byte picks one
//! of a fixed list, so every input is some case):
//!
//! | target | input |
//! |---|---|
//! | `discovery_post` | kind byte, then a `POST /v3/discovery:<kind>` body |
//! | `discovery_get` | kind byte, a query string, then optionally `\n` and an `If-None-Match` value |
//! | `json_to_proto` | a JSON `Any` (`{"@type": ..., ...}`) |
//! | `proto_to_json` | type byte, then protobuf bytes of that resource type |
//! | `rewrite` | type byte, then protobuf bytes of that resource type |
//! | `xdstp` | a resource name, `\n`, a glob collection name |
//! | `auth_policy` | an `--auth-policy` TOML file |
//! | `config_toml` | a `--config` TOML file |
//! | `snapshot` | snapshot files: text, split by `#! <relative path>` lines |
//! | `upstream_response` | an upstream's SotW `DiscoveryResponse`, protobuf bytes |
//!
//! `fuzz/README.md` says how to run them, with what they found.

#[cfg(test)]
mod mutation;
#[cfg(test)]
mod replay;
#[cfg(test)]
mod vocabulary;

#[cfg(test)]
pub(crate) use mutation::{config, envoy_requests, mutated, resources};
#[cfg(test)]
pub(crate) use xds_gateway_base::testing::seeded_rng;

/// A `cargo fuzz` target: its name (of `fuzz/fuzz_targets/<name>.rs` and
/// `fuzz/corpus/<name>/`) and the function it runs on each input.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> bool,
}

/// Every target, in the order of the table above.
pub const TARGETS: [Target; 10] = [
    Target {
        name: "discovery_post",
        run: discovery_post,
    },
    Target {
        name: "discovery_get",
        run: discovery_get,
    },
    Target {
        name: "json_to_proto",
        run: json_to_proto,
    },
    Target {
        name: "proto_to_json",
        run: proto_to_json,
    },
    Target {
        name: "rewrite",
        run: rewrite,
    },
    Target {
        name: "xdstp",
        run: xdstp,
    },
    Target {
        name: "auth_policy",
        run: auth_policy,
    },
    Target {
        name: "config_toml",
        run: config_toml,
    },
    Target {
        name: "snapshot",
        run: snapshot,
    },
    Target {
        name: "upstream_response",
        run: upstream_response,
    },
];

/// A POST body through the router to a gateway on the demo snapshot.
pub fn discovery_post(data: &[u8]) -> bool {
    crate::http::fuzz::discovery_post(data)
}

/// A GET query string (and `If-None-Match`) through the router.
pub fn discovery_get(data: &[u8]) -> bool {
    crate::http::fuzz::discovery_get(data)
}

/// Canonical JSON to protobuf, and back.
pub fn json_to_proto(data: &[u8]) -> bool {
    crate::xds::fuzz::json_to_proto(data)
}

/// Protobuf to canonical JSON, and back.
pub fn proto_to_json(data: &[u8]) -> bool {
    crate::xds::fuzz::proto_to_json(data)
}

/// The config-source rewrite of a resource's protobuf bytes.
pub fn rewrite(data: &[u8]) -> bool {
    crate::xds::fuzz::rewrite(data)
}

/// xdstp name parsing and glob-collection membership.
pub fn xdstp(data: &[u8]) -> bool {
    crate::xds::fuzz::xdstp(data)
}

/// The auth policy parser, and its decisions on what it accepts.
pub fn auth_policy(data: &[u8]) -> bool {
    crate::auth::fuzz_policy(data)
}

/// The `--config` TOML file, laid over the defaults and validated.
pub fn config_toml(data: &[u8]) -> bool {
    crate::config::fuzz::config_toml(data)
}

/// The snapshot loader (parse, validate, layer), and its views.
pub fn snapshot(data: &[u8]) -> bool {
    crate::upstream::fuzz_snapshot(data)
}

/// An upstream's SotW response read in place, against prost's reading.
pub fn upstream_response(data: &[u8]) -> bool {
    crate::upstream::fuzz_upstream_response(data)
}
