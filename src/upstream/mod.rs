//! The producers: what fills the store's sessions, as quilkin's providers
//! fill its config. Each only publishes into `crate::store` (a session's
//! state per type, its placement and log); none serves HTTP.
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
//! The transport is [`connection`] (the channel, TLS, health, the probe,
//! unary calls), [`failover`] and [`backoff`]; the stream tasks share one
//! driver ([`stream`]), which coalesces subscription changes ([`coalesce`]),
//! and a session's commands are handed to its streams by [`lanes`];
//! every upstream response arrives through [`frame_codec`], a SotW one read
//! in place, its resources left in the frame ([`wire`]), and every request
//! upstream is written by [`outbound`]. `tonic::Status` is classified here
//! only.

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
pub(crate) mod pipeline;
mod replies;
mod snapshot;
mod sotw;
mod stream;
mod ttl;
mod wire;

pub(crate) use auto::{AutoFeeder, Choose};
pub(crate) use connection::UpstreamContext;
pub use connection::{descriptor_set, DescriptorsError, StartError};
pub(crate) use failover::Route;
pub(crate) use fetch::FetchFeeder;
pub(crate) use file::{FileFeeder, Origin};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use snapshot::fuzz::snapshot as fuzz_snapshot;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use wire::fuzz::upstream_response as fuzz_upstream_response;

/// Sessions fed by a SotW `StreamAggregatedResources` stream each.
pub(crate) type SotwFeeder = stream::StreamFeeder<sotw::Sotw>;
/// Sessions fed by a `DeltaAggregatedResources` stream each.
pub(crate) type DeltaFeeder = stream::StreamFeeder<delta::Delta>;
