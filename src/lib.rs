//! # xds-gateway
//!
//! Envoy's REST xDS endpoints (HTTP + canonical proto3 JSON) in front of any
//! gRPC xDS control plane.
//!
//! # Layout
//! The design is written down in `docs/architecture.md`: a poll and an
//! upstream push through these modules, the `Source` seam and its
//! implementations, what the cache promises, where each concern lives, and
//! how to add a source, a resource type, an admin view or a flag. In short:
//!
//! - [`app`]: wires config into cache, producers, store and servers; `run(listeners, shutdown)`;
//!   the only place that chooses the kind of source.
//! - [`config`]: typed configuration from flags, environment and file. A crate of its own
//!   (`crates/config`, `xds-gateway-config`), re-exported under this name.
//! - [`xds`]: protocol vocabulary, no I/O: endpoint table, canonical JSON, request parsing,
//!   rewrites. A crate of its own (`crates/xds`, `xds-gateway-xds`), re-exported under this name.
//! - `cache`: versioned states per (node identity, type), rendered resources, assembled
//!   bodies, parsed requests, the client key. No I/O. A crate of its own (`crates/cache`,
//!   `xds-gateway-cache`), named under this name.
//! - `observe`: what was served to whom and what changed: the client book (standing and
//!   rejections per client), the answers `?changes` diffs against, the config history of
//!   `/debug/history` and its file. Names nothing but `cache`, `xds`, `config` and leaves. A
//!   crate of its own (`crates/observe`, `xds-gateway-observe`), named under this name.
//! - `store`: what a poll reads, behind one serving trait (`Source`, introspection apart in
//!   `Inspect`): the sessions, one per node identity, and what each holds; the federation of
//!   several upstreams. It names no producer, and its submodules are private. A crate of its
//!   own (`crates/store`, `xds-gateway-store`), named under this name.
//! - `upstream`: the producers that publish into the store's sessions: a SotW or delta ADS
//!   stream, the unary `Fetch*` calls or the snapshot per session, and auto (probe, then one
//!   of those), with the transport (connection, failover, backoff, framing). A crate of its
//!   own (`crates/upstream`, `xds-gateway-upstream`), named under this name.
//! - `http`: the REST face (`/v3/discovery:<type>`: polls, long polls, `?watch` streams).
//! - `admin`: `/healthz`, `/readyz`, `/metrics`, the debug views, CSDS and the status page
//!   on a separate listener.
//! - `face`: what both faces share: the one error table (`ApiError`), a request body read to
//!   its limits, query parameters, the `Host` check, credentials.
//! - `auth`: the authorization policy (principals, their credentials, the
//!   nodes and types they may fetch); decisions only, no HTTP.
//! - `profiles`: named node templates a GET presents (`?profile=NAME`), and the
//!   node a GET's query says.
//! - `metrics`: every metric name. A crate of its own (`crates/metrics`,
//!   `xds-gateway-metrics`), named under this name.
//! - `huge_pages`: transparent huge pages off for the process, for mimalloc (the binary and
//!   the benchmarks call it through `app`).
//! - `error_body`: the one JSON error body (`{"code", "message"}`, google.rpc.Status-shaped)
//!   of both listeners, and the `Retry-After` of a 503.
//! - `demo`: the demo snapshot (`examples/demo/`) that `build.rs` compiles into the binary,
//!   handed to the snapshot producer when no upstream and no directory is given.
//! - `drain`: the shutdown flag handlers read (readiness, long polls and watches refused,
//!   held long polls answered, open watches ended).
//! - `serve`: one listener's accept loop and connection limits (both listeners use it).
//! - `shares`: per-principal shares of the global limits (sessions, watches, long polls); the
//!   store crate's module `shares`, named under this name.
//! - `tls`: rustls server config for the REST and admin listeners, reloaded from disk;
//!   client identities.
//! - `reload`: files watched for changes (certificates, the auth policy, the snapshot
//!   directory).
//! - `read_ahead`: a connection's small reads served from one large read (h2 reads 8 KiB at a
//!   time): every accepted connection and every upstream connection read through it.
//! - `log_escape`: `Escaped`, the wrapper every client- or upstream-chosen value is
//!   logged through (control characters escaped: one event, one line); and `sync`: locks
//!   taken without poison, tasks aborted with their owner. These four are the leaf crate's
//!   (`crates/base`, `xds-gateway-base`), named under these names.
//!
//! Dependencies point one way, down the layers `tests/module_graph.rs`
//! checks (`LAYERS`; `docs/architecture.md`, "Layers"): `app` → `admin`,
//! `http` → `face` → `serve`, `auth`, `profiles`, `demo` → `upstream` → `store`
//! (the `Source` seam) → `observe`, `tls` → `cache`, `metrics` → `xds`,
//! `config` → the leaves. A module may use any layer below its own.
//! Only `app`, `config` and `xds` are public (for the binary, tests and
//! benchmarks), and `fuzz` (hidden; tests and the `fuzzing` feature only):
//! one function per `cargo fuzz` target. Everything else is crate-private.
//!
//! # One poll
//! ```text
//! POST /v3/discovery:endpoints ─▶ http::discovery   params, secrets gate, caller, body (size)
//!   cache::ParsedRequests::parse_chunks             memoised by body bytes: version, names, node identity
//!   source.poll(kind, request) ─▶ Polled            the store: the identity's session, the names recorded
//!                                                   (resubscribed upstream), a bounded wait for a covering
//!                                                   state | Fetch: unary Fetch* | Auto: delegate
//!   Answered::answer ─▶ TypeState::answer_digested  the cache: 304, or the body assembled from pre-rendered
//!                                                   resources (a long poll holds a 304: polled.next_change)
//!   Answered::book ─▶ ClientBook::book              the client book, written once: where the client stands,
//!                                                   what went out; a suspected rejection logged (and NACKed
//!                                                   upstream through polled when the source forwards them)
//!   http::present                                   JSON / pretty / YAML, ETag, stale header; errors via
//!                                                   face::ApiError (the one status table)
//! ```

pub mod app;
/// The configuration, a crate of its own (`crates/config`).
pub use xds_gateway_config as config;
/// The xDS vocabulary, a crate of its own (`crates/xds`).
pub use xds_gateway_xds as xds;
// The producers, the store, the ledgers, the cache, the metrics and the
// leaves, under the names the modules use.
use xds_gateway_base::{log_escape, read_ahead, reload, sync};
use xds_gateway_cache as cache;
use xds_gateway_metrics as metrics;
use xds_gateway_observe as observe;
use xds_gateway_store as store;
use xds_gateway_store::shares;
use xds_gateway_upstream as upstream;

// The entry points of the `cargo fuzz` targets in fuzz/ (which turns the
// `fuzzing` feature on), and their corpus replay in `cargo test`.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzz;

/// Not an API (hidden from the docs): the shipped code paths the
/// benchmarks in `bench/` time, so that they measure the gateway's own
/// work rather than a copy of it.
#[doc(hidden)]
pub mod bench_support {
    pub use crate::upstream::pipeline::{Pipeline, Pushed};

    /// The gateway's memo of parsed request bodies (what a poll's body
    /// goes through), for the codec benchmark.
    pub struct RequestBodies(crate::cache::ParsedRequests);

    impl Default for RequestBodies {
        fn default() -> RequestBodies {
            RequestBodies(crate::cache::ParsedRequests::new(
                crate::config::SessionKey::Node,
            ))
        }
    }

    /// The REST face's memo of `?pretty` and YAML renditions, for the
    /// codec benchmark.
    #[derive(Default)]
    pub struct Renditions(crate::http::renditions::Renditions);

    impl Renditions {
        /// `body` as `?pretty` asks for it (indented JSON), from the memo
        /// when this body was rendered before.
        pub fn pretty(&self, body: &bytes::Bytes, codec: &crate::xds::Codec) -> bytes::Bytes {
            use crate::http::renditions::{Form, Rendition};
            let pretty = Rendition {
                form: Form::Pretty,
                proto_names: false,
                changes: false,
            };
            self.0
                .render(&crate::cache::JsonBody::from(body.clone()), pretty, codec)
                .expect("the gateway's own body renders")
        }
    }

    impl RequestBodies {
        /// Parses a POSTed `body` as a poll's is; whether it parsed.
        pub fn parse(&self, body: bytes::Bytes) -> bool {
            self.0.parse(body).is_ok()
        }

        /// Whether the memo looks `a` and `b` up under one sampled key
        /// (they differ only between its samples).
        pub fn share_a_key(a: &[u8], b: &[u8]) -> bool {
            crate::cache::share_a_key(a, b)
        }
    }
}

mod admin;
mod auth;
mod demo;
mod drain;
mod error_body;
mod face;
mod http;
mod huge_pages;
#[cfg(test)]
mod openapi_paths;
mod profiles;
mod serve;
mod tls;
