//! The producers: what fills the store's sessions, as quilkin's providers
//! fill its config. Each only publishes into the store (`crate::store`, the
//! crate `xds-gateway-store`: a session's state per type, its placement and
//! log); none serves HTTP. The gateway names this crate `crate::upstream`;
//! `app.rs` starts the producers through what is `pub` here.
//!
//! - [`SotwFeeder`]: a SotW `StreamAggregatedResources` stream per session,
//!   or one `Stream<Type>` stream per type (`--upstream-streams per-type`);
//! - [`DeltaFeeder`]: a `DeltaAggregatedResources` stream, or one
//!   `Delta<Type>` stream per type;
//! - [`FileFeeder`]: the watched snapshot directory or the embedded demo;
//! - [`FetchFeeder`]: the upstream's unary `Fetch*`, asked when a poll
//!   reads a type (nothing pushes; what a call brought stands for the TTL,
//!   and held long polls ask again);
//! - [`AutoFeeder`]: probes the upstream, then feeds sessions through one
//!   of the above.
//!
//! The transport is `connection` (the channel, TLS, health, the probe,
//! unary calls), `failover` and `backoff`; the stream tasks share one
//! driver (`stream`), which coalesces subscription changes (`coalesce`),
//! and a session's commands are handed to its streams by `lanes`;
//! every upstream response arrives through `frame_codec`, a SotW one read
//! in place, its resources left in the frame (`wire`), and every request
//! upstream is written by `outbound`. `tonic::Status` is classified here
//! only.

#![warn(unreachable_pub)]

// The crates below, under the names the modules use.
use xds_gateway_base::{log_escape, read_ahead, reload, sync};
use xds_gateway_cache as cache;
use xds_gateway_config as config;
use xds_gateway_metrics as metrics;
use xds_gateway_store as store;
use xds_gateway_xds as xds;

mod auto;
mod backoff;
mod coalesce;
mod connection;
mod decode;
mod delta;
mod failover;
mod fetch;
mod file;
mod frame_codec;
mod held;
mod lanes;
mod nack_log;
mod name_check;
mod outbound;
/// Not an API (hidden from the docs): the push pipeline the benchmarks in
/// `bench/` time, through the gateway's `bench_support`.
#[doc(hidden)]
pub mod pipeline;
mod replies;
mod snapshot;
mod sotw;
mod stream;
mod ttl;
mod wire;

pub use auto::{AutoFeeder, Choose};
pub use connection::UpstreamContext;
pub use connection::{descriptor_set, DescriptorsError, StartError};
pub use failover::Route;
pub use fetch::FetchFeeder;
pub use file::{FileFeeder, Origin};
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use snapshot::fuzz::snapshot as fuzz_snapshot;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use wire::fuzz::upstream_response as fuzz_upstream_response;

/// Sessions fed by a SotW `StreamAggregatedResources` stream each.
pub type SotwFeeder = stream::StreamFeeder<sotw::Sotw>;
/// Sessions fed by a `DeltaAggregatedResources` stream each.
pub type DeltaFeeder = stream::StreamFeeder<delta::Delta>;
