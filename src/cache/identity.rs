//! Node identity: which REST clients share one upstream session.
//!
//! By default two clients share a session when their node id, cluster,
//! metadata and locality are equal: those are what control planes compute
//! config from. With `--session-key cluster`, all nodes of a cluster share
//! one. The key is an exact canonical string (not a hash), so two different
//! identities can never be mixed up.

use serde_json::value::RawValue;

use crate::config::SessionKey;
use crate::xds::NodeView;

/// The canonical identity of a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct IdentityKey(String);

impl IdentityKey {
    /// The key of `node` under `mode`; a request without a node has the
    /// empty identity.
    pub(crate) fn of(node: Option<&NodeView>, mode: SessionKey) -> IdentityKey {
        let Some(node) = node else {
            return IdentityKey(String::new());
        };
        match mode {
            SessionKey::Cluster => IdentityKey(format!("cluster={}", node.cluster)),
            SessionKey::Node => IdentityKey(format!(
                "id={}\u{0}cluster={}\u{0}metadata={}\u{0}locality={}",
                node.id,
                node.cluster,
                canonical(node.metadata.as_deref()),
                canonical(node.locality.as_deref()),
            )),
        }
    }
}

/// JSON with object keys sorted (serde_json's map is ordered), so the same
/// metadata written in another key order is the same identity.
fn canonical(raw: Option<&RawValue>) -> String {
    raw.and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::DiscoveryRequestView;

    fn node(json: &str) -> NodeView {
        DiscoveryRequestView::parse(format!(r#"{{"node":{json}}}"#).as_bytes())
            .unwrap()
            .node
            .unwrap()
    }

    #[test]
    fn metadata_key_order_does_not_matter_but_values_do() {
        let a = node(r#"{"id":"n","cluster":"c","metadata":{"x":1,"y":{"b":2,"a":1}}}"#);
        let b = node(
            r#"{"id":"n","cluster":"c","metadata":{"y":{"a":1,"b":2},"x":1},"extensions":[]}"#,
        );
        let c = node(r#"{"id":"n","cluster":"c","metadata":{"x":2}}"#);
        let k = |n: &NodeView| IdentityKey::of(Some(n), SessionKey::Node);
        assert_eq!(k(&a), k(&b));
        assert_ne!(k(&a), k(&c));
        assert_eq!(
            IdentityKey::of(Some(&a), SessionKey::Cluster),
            IdentityKey::of(Some(&c), SessionKey::Cluster)
        );
    }
}
