//! # xds-gateway
//!
//! Envoy's REST xDS endpoints (HTTP + canonical proto3 JSON) in front of any
//! gRPC xDS control plane.
//!
//! # Layout
//! - [`app`]: wires config into cache, sources and servers; `run(listeners, shutdown)`.
//! - [`config`]: typed configuration from flags, environment and file.
//! - [`xds`]: protocol vocabulary, no I/O: endpoint table, canonical JSON, request parsing, rewrites.
//! - [`cache`]: versioned states per (node identity, type), rendered resources, assembled bodies.
//! - [`source`]: upstream sessions, one ADS stream per node identity (fan-in).
//! - [`http`]: the REST face (`POST /v3/discovery:<type>`) and the error table.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics` on a separate listener.
//! - [`metrics`]: every metric name.
//!
//! Dependencies point one way: `http`, `admin` → `cache` ← `source`; all may use `xds`.

pub mod admin;
pub mod app;
pub mod cache;
pub mod config;
pub mod http;
pub mod metrics;
pub mod source;
pub mod xds;
