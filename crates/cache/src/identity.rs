//! Node identity: which REST clients share one upstream session.
//!
//! By default two clients share a session when their node id, cluster,
//! metadata and locality are equal: what control planes compute config
//! from. With `--session-key cluster`, all nodes of a cluster share one. In
//! either mode the node's `dynamic_parameters`, and those a client's
//! `resource_locators` carry (xDS TP2), are part of the key: they select
//! variants of resources. The key is an exact encoding (not a hash) with
//! every field length-prefixed, so it is injective: a field holding a
//! separator cannot pose as the next field.

use serde_json::value::RawValue;

use crate::config::SessionKey;
use crate::xds::dynamic_parameters::Parameters;
use crate::xds::NodeView;

/// The canonical identity of a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityKey(String);

impl IdentityKey {
    /// The key of `node` under `mode`; a request without a node has the
    /// identity of an empty node.
    pub fn of(node: Option<&NodeView>, mode: SessionKey) -> IdentityKey {
        let empty = NodeView::default();
        let node = node.unwrap_or(&empty);
        let mut key = String::new();
        match mode {
            SessionKey::Cluster => {
                key.push_str("cluster;");
                push_field(&mut key, &node.cluster);
            }
            SessionKey::Node => {
                key.push_str("node;");
                push_field(&mut key, &node.id);
                push_field(&mut key, &node.cluster);
                push_field(&mut key, &canonical(node.metadata.as_deref()));
                push_field(&mut key, &canonical(node.locality.as_deref()));
            }
        }
        // Dynamic parameters select variants of resources ("part of the
        // cache key ... on xDS caching proxies"): in every mode.
        push_field(&mut key, &canonical(node.dynamic_parameters.as_deref()));
        IdentityKey(key)
    }

    /// This key for a client whose locators carry `parameters`: the key itself
    /// when they are none, else it followed by every key and value as a field.
    /// Still injective: the parameters are the key's tail.
    pub fn with_parameters(mut self, parameters: &Parameters) -> IdentityKey {
        if !parameters.is_empty() {
            self.0.push_str("locators;");
            for (key, value) in parameters {
                push_field(&mut self.0, key);
                push_field(&mut self.0, value);
            }
        }
        self
    }

    /// The canonical encoding (injective: see the module).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `<byte length>:<bytes>`: a reader always knows where a field ends.
fn push_field(key: &mut String, field: &str) {
    use std::fmt::Write as _;
    let _ = write!(key, "{}:{field}", field.len());
}

/// JSON with object keys sorted (serde_json's map is ordered), so the same
/// metadata written in another key order is the same identity.
fn canonical(raw: Option<&RawValue>) -> String {
    raw.and_then(|r| crate::xds::plain_json::from_str(r.get()).ok())
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

    /// Locator parameters key the session too; none leave the key as it is.
    #[test]
    fn locator_parameters_are_part_of_the_key() {
        let n = node(r#"{"id":"n","cluster":"c"}"#);
        let key = || IdentityKey::of(Some(&n), SessionKey::Node);
        let params = |pairs: &[(&str, &str)]| -> Parameters {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        assert_eq!(key().with_parameters(&Parameters::new()), key());
        let prod = key().with_parameters(&params(&[("env", "prod")]));
        assert_ne!(prod, key());
        assert_ne!(prod, key().with_parameters(&params(&[("env", "test")])));
        // A separator inside a value cannot pose as another pair.
        assert_ne!(
            key().with_parameters(&params(&[("a", "1"), ("b", "2")])),
            key().with_parameters(&params(&[("a", "11:b1:2")]))
        );
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

    /// C2: clients differing only in `dynamic_parameters` get sessions of
    /// their own, in either mode; key order, an empty map and none are
    /// the same.
    #[test]
    fn dynamic_parameters_are_part_of_the_key() {
        let shard = |n: u32| {
            node(&format!(
                r#"{{"id":"n","cluster":"c","dynamic_parameters":{{"t":{{"params":{{"shard":"{n}","z":"1"}}}}}}}}"#
            ))
        };
        let reordered = node(
            r#"{"id":"n","cluster":"c","dynamicParameters":{"t":{"params":{"z":"1","shard":"1"}}}}"#,
        );
        let (none, empty) = (
            node(r#"{"id":"n","cluster":"c"}"#),
            node(r#"{"id":"n","cluster":"c","dynamic_parameters":{}}"#),
        );
        for mode in [SessionKey::Node, SessionKey::Cluster] {
            let key = |n: &NodeView| IdentityKey::of(Some(n), mode);
            assert_ne!(key(&shard(1)), key(&shard(2)), "{mode:?}");
            assert_ne!(key(&shard(1)), key(&none), "{mode:?}");
            assert_eq!(key(&shard(1)), key(&reordered), "{mode:?}");
            assert_eq!(key(&none), key(&empty), "{mode:?}");
        }
    }

    /// A separator inside one field posed as the
    /// boundary of the next.
    #[test]
    fn a_separator_inside_a_field_cannot_pose_as_the_next_field() {
        let a = node(r#"{"id":"nodeA","cluster":"c1\u0000cluster="}"#);
        let b = node(r#"{"id":"nodeA\u0000cluster=c1"}"#);
        assert_ne!(
            IdentityKey::of(Some(&a), SessionKey::Node),
            IdentityKey::of(Some(&b), SessionKey::Node)
        );
        // Lengths as text cannot pose as boundaries either.
        let c = node(r#"{"id":"1:a","cluster":"b"}"#);
        let d = node(r#"{"id":"1","cluster":"a1:b"}"#);
        assert_ne!(
            IdentityKey::of(Some(&c), SessionKey::Node),
            IdentityKey::of(Some(&d), SessionKey::Node)
        );
    }

    proptest::proptest! {
        /// Different (id, cluster) pairs never share a key, whatever they hold.
        #[test]
        fn keys_are_injective(
            a in proptest::collection::vec("[a-c:;0-9\u{0}=]{0,4}", 2),
            b in proptest::collection::vec("[a-c:;0-9\u{0}=]{0,4}", 2),
        ) {
            let view = |f: &[String]| NodeView { id: f[0].clone(), cluster: f[1].clone(), ..NodeView::default() };
            let (ka, kb) = (
                IdentityKey::of(Some(&view(&a)), SessionKey::Node),
                IdentityKey::of(Some(&view(&b)), SessionKey::Node),
            );
            proptest::prop_assert_eq!(a == b, ka == kb);
        }
    }
}
