//! # xds-gateway
//!
//! Envoy's REST xDS endpoints (HTTP + canonical proto3 JSON) in front of any
//! gRPC xDS control plane.
//!
//! # Layout
//! - [`xds`]: protocol vocabulary, no I/O: the endpoint table, canonical JSON, request parsing.

pub mod cache;
pub mod config;
pub mod metrics;
pub mod xds;
