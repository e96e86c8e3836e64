//! REST-side fixtures and checks shared by the tests that run the gateway
//! against the reference control plane (`gateway_ads.rs`,
//! `upstream_modes.rs`). This module owns:
//!
//! - the xDS type URLs ([`LDS`] … [`ECDS`]);
//! - [`bounded`]: a test body under a time limit;
//! - the fixtures: [`corpus`] resources, [`named`] and [`cluster`]
//!   resources, a [`node`], a snake_case [`request`], and the [`Case`]
//!   table of every type's round trip ([`main_cases`], [`other_cases`]);
//! - reading and checking replies: [`version_of`], [`names_of`],
//!   [`assert_ok`], [`assert_error`];
//! - [`stats_until`]: a bounded poll of the control plane's `/stats`, and
//!   on it [`nacks_above`]; [`assert_nack_detail`] for a recorded NACK.
//!
//! Include it after `process.rs` and `gateway.rs`, which it uses:
//!
//! ```ignore
//! #[path = "support/process.rs"] mod process;
//! #[path = "support/gateway.rs"] mod gateway;
//! #[path = "support/rest.rs"] mod rest;
//! ```

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::gateway::{ControlPlane, Reply};
use crate::process::eventually;

pub const LDS: &str = xds_gateway::xds::ResourceType::Listeners.type_url();
pub const RDS: &str = xds_gateway::xds::ResourceType::Routes.type_url();
pub const SRDS: &str = xds_gateway::xds::ResourceType::ScopedRoutes.type_url();
pub const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
pub const EDS: &str = xds_gateway::xds::ResourceType::Endpoints.type_url();
pub const SDS: &str = xds_gateway::xds::ResourceType::Secrets.type_url();
pub const RTDS: &str = xds_gateway::xds::ResourceType::Runtime.type_url();
pub const ECDS: &str = xds_gateway::xds::ResourceType::ExtensionConfigs.type_url();

/// The opening every control-plane test shares: starts a fresh reference
/// control plane (with `flags`; named after the running test) and runs
/// `test` on it under `limit`; the control plane is killed afterwards, pass
/// or fail.
pub async fn with_control_plane(
    flags: &[&str],
    limit: Duration,
    test: impl AsyncFnOnce(&ControlPlane),
) {
    let name = std::thread::current()
        .name()
        .unwrap_or("control-plane test")
        .to_owned();
    let cp = ControlPlane::start_with(&name, flags);
    bounded(limit, test(&cp)).await;
}

/// Runs a test body under `limit` (panics when it runs out).
pub async fn bounded(limit: Duration, test: impl Future<Output = ()>) {
    tokio::time::timeout(limit, test)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {limit:?}"));
}

/// A corpus resource (a JSON `Any`, snake_case).
pub fn corpus(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A minimal resource of `type_url` named `name`.
pub fn named(type_url: &str, name: &str) -> Value {
    if type_url == EDS {
        json!({"@type": type_url, "cluster_name": name})
    } else {
        json!({"@type": type_url, "name": name})
    }
}

/// A STRICT_DNS cluster `name` with an empty load assignment.
pub fn cluster(name: &str) -> Value {
    json!({
        "@type": CDS,
        "name": name,
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name}
    })
}

/// A node `id` of cluster `test-cluster`.
pub fn node(id: &str) -> Value {
    json!({"id": id, "cluster": "test-cluster"})
}

/// A snake_case `DiscoveryRequest`, as Envoy sends it.
pub fn request(node: &Value, version: &str, names: &[&str]) -> Value {
    json!({"version_info": version, "node": node, "resource_names": names})
}

/// The reply's `versionInfo`: the version served, to present on the next
/// poll (panics with the body if there is none).
pub fn version_of(reply: &Reply) -> String {
    reply.json()["versionInfo"]
        .as_str()
        .unwrap_or_else(|| panic!("no versionInfo: {}", reply.text()))
        .to_owned()
}

/// The upstream's version inside a served version (`<upstream>~<digest>`).
pub fn upstream_part(version: &str) -> &str {
    match version.rsplit_once('~') {
        Some((upstream, digest))
            if digest.len() == 12 && digest.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            upstream
        }
        _ => panic!("not a served version (<upstream>~<12 hex digits>): {version:?}"),
    }
}

/// The upstream's version the reply carries.
pub fn upstream_of(reply: &Reply) -> String {
    upstream_part(&version_of(reply)).to_owned()
}

/// The `name` (EDS: `clusterName`) of each resource in the reply, in order.
pub fn names_of(reply: &Reply) -> Vec<String> {
    reply.json()["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("no resources: {}", reply.text()))
        .iter()
        .map(|r| {
            r.get("name")
                .or_else(|| r.get("clusterName"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// A 200 with content type `application/json`.
pub fn assert_ok(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 200, "{what}: {}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{what}"
    );
}

/// An error reply: `status`, JSON content type, `{code, message}` body.
pub fn assert_error(reply: &Reply, status: u16, what: &str) -> String {
    assert_eq!(reply.status, status, "{what}: {}", reply.text());
    assert!(
        reply
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{what}: content-type {:?}",
        reply.header("content-type")
    );
    let body = reply.json();
    assert!(body["code"].is_i64(), "{what}: no numeric code: {body}");
    let message = body["message"].as_str().unwrap_or_default().to_owned();
    assert!(!message.is_empty(), "{what}: no message: {body}");
    message
}

/// Polls the control plane's stats until `check` holds, for at most
/// `within`; panics with the last stats if it never does.
pub async fn stats_until(
    cp: &ControlPlane,
    within: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let (last_ref, check) = (&last, &check);
    let found = eventually(within, Duration::from_millis(50), || async move {
        let stats = cp.stats().await;
        let ok = check(&stats);
        *last_ref.lock().unwrap() = stats.clone();
        ok.then_some(stats)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "control plane never showed {what}; last stats: {}",
            last.lock().unwrap()
        )
    })
}

/// Waits (as [`stats_until`] does) until the control plane has counted more
/// than `before` NACKs; returns its stats.
pub async fn nacks_above(cp: &ControlPlane, within: Duration, what: &str, before: u64) -> Value {
    stats_until(cp, within, what, |s| {
        s["nacks"].as_u64().unwrap_or(0) > before
    })
    .await
}

/// A recorded NACK's `error_detail`: a non-empty message and a non-zero code.
pub fn assert_nack_detail(nack: &Value) {
    assert!(
        !nack["error_detail"]["message"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{nack}"
    );
    assert_ne!(nack["error_detail"]["code"], 0, "{nack}");
}

/// One resource type's round trip through the gateway.
pub struct Case {
    pub endpoint: &'static str,
    pub type_url: &'static str,
    /// The snapshot upstream.
    pub upstream: Vec<Value>,
    /// The names a client asks for (none: wildcard).
    pub asked: Vec<&'static str>,
    /// The names it must get back, in the order they are served.
    pub expected: Vec<&'static str>,
}

/// LDS, RDS, CDS and EDS: each a corpus resource next to another one,
/// asked for by wildcard or by name (with a name that does not exist).
pub fn main_cases() -> [Case; 4] {
    let mut other_eds = corpus("cluster_load_assignment");
    other_eds["cluster_name"] = json!("other");
    let mut other_route = corpus("route_configuration");
    other_route["name"] = json!("other_route");
    [
        Case {
            endpoint: "listeners",
            type_url: LDS,
            upstream: vec![corpus("listener"), named(LDS, "l2")],
            asked: vec![],
            expected: vec!["l2", "listener_https"],
        },
        Case {
            endpoint: "routes",
            type_url: RDS,
            upstream: vec![corpus("route_configuration"), other_route],
            asked: vec!["local_route", "missing"],
            expected: vec!["local_route"],
        },
        Case {
            endpoint: "clusters",
            type_url: CDS,
            upstream: vec![corpus("cluster"), cluster("c2")],
            asked: vec![],
            expected: vec!["backend", "c2"],
        },
        Case {
            endpoint: "endpoints",
            type_url: EDS,
            upstream: vec![corpus("cluster_load_assignment"), other_eds],
            asked: vec!["backend", "nope"],
            expected: vec!["backend"],
        },
    ]
}

/// SRDS, SDS (needs `--allow-secrets`), RTDS and ECDS corpus resources.
pub fn other_cases() -> [Case; 4] {
    [
        Case {
            endpoint: "scoped-routes",
            type_url: SRDS,
            upstream: vec![corpus("scoped_route_configuration")],
            asked: vec![],
            expected: vec!["scope_tenant_a"],
        },
        Case {
            endpoint: "secrets",
            type_url: SDS,
            upstream: vec![corpus("secret"), corpus("secret_validation_context")],
            asked: vec!["client_cert"],
            expected: vec!["client_cert"],
        },
        Case {
            endpoint: "runtime",
            type_url: RTDS,
            upstream: vec![corpus("runtime")],
            asked: vec!["rtds_layer"],
            expected: vec!["rtds_layer"],
        },
        Case {
            endpoint: "extension_configs",
            type_url: ECDS,
            upstream: vec![corpus("typed_extension_config")],
            asked: vec!["envoy.filters.http.buffer"],
            expected: vec!["envoy.filters.http.buffer"],
        },
    ]
}
