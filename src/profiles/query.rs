//! The node a GET presents, from its query string:
//! - `profile=NAME`: that profile's node (else `{"id": "", "cluster": ""}`);
//! - `node=ID`, `cluster=C`: its `id` and `cluster`, over the profile's;
//! - `metadata=JSON`: a JSON object (a `google.protobuf.Struct`), merged
//!   over the profile's metadata key by key at the top level;
//! - `locality=REGION[/ZONE[/SUB_ZONE]]`: its locality, replacing the
//!   profile's (an empty part is left unset);
//! - `user_agent=NAME[/VERSION]`: `user_agent_name` and
//!   `user_agent_version`, replacing the profile's user agent (a build
//!   version too).
//!
//! Anything malformed, and an unknown profile, is a [`QueryError`] naming
//! the parameter. Fields are written snake_case; a field the profile wrote
//! in lowerCamelCase is replaced, never doubled.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::NodeProfiles;
use crate::xds::Codec;

/// A parameter that does not say a node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{param}: {reason}")]
pub(crate) struct QueryError {
    pub(crate) param: &'static str,
    pub(crate) reason: String,
}

fn refuse(param: &'static str, reason: impl Into<String>) -> QueryError {
    QueryError {
        param,
        reason: reason.into(),
    }
}

/// The node `query` says (see the module).
pub(crate) fn presented_node(
    query: &HashMap<String, String>,
    profiles: &NodeProfiles,
    codec: &Codec,
) -> Result<Map<String, Value>, QueryError> {
    let mut node = match query.get("profile") {
        Some(name) => profiles
            .get(name)
            .ok_or_else(|| refuse("profile", unknown_profile(name, profiles)))?
            .node
            .clone(),
        None => Map::from_iter(["id", "cluster"].map(|k| (k.into(), Value::String(String::new())))),
    };
    if let Some(id) = query.get("node") {
        node.insert("id".into(), Value::String(id.clone()));
        present_the_pod_named(&mut node, id);
    }
    if let Some(cluster) = query.get("cluster") {
        node.insert("cluster".into(), Value::String(cluster.clone()));
    }
    if let Some(text) = query.get("metadata") {
        let given = metadata(text, codec)?;
        let mut merged = match node.remove("metadata") {
            Some(Value::Object(held)) => held,
            _ => Map::new(),
        };
        merged.extend(given);
        node.insert("metadata".into(), Value::Object(merged));
    }
    if let Some(text) = query.get("locality") {
        node.insert("locality".into(), locality(text)?);
    }
    if let Some(text) = query.get("user_agent") {
        let (name, version) = user_agent(text)?;
        for key in [
            "user_agent_name",
            "userAgentName",
            "user_agent_version",
            "userAgentVersion",
            "user_agent_build_version",
            "userAgentBuildVersion",
        ] {
            node.remove(key);
        }
        node.insert("user_agent_name".into(), Value::String(name.to_owned()));
        if let Some(version) = version {
            node.insert(
                "user_agent_version".into(),
                Value::String(version.to_owned()),
            );
        }
    }
    Ok(node)
}

/// The metadata keys of an Istio proxy's node that name its pod, which
/// istiod reads with the node id (see `tests/peers/istio/README.md`).
const ISTIO_POD_KEYS: [&str; 3] = ["INSTANCE_IPS", "NAME", "NAMESPACE"];

/// An Istio proxy's node (its metadata has `ISTIO_VERSION`) whose id names
/// a pod, `TYPE~IP~POD.NAMESPACE~DOMAIN`, presents that pod: its
/// `INSTANCE_IPS`, `NAME` and `NAMESPACE` are set from the id, so that a
/// profile written for one pod, asked for with another pod's id, gets that
/// pod's view (istiod finds the pod by the id's name only when `NAMESPACE`
/// agrees, and otherwise falls back to the profile's labels: another pod's
/// view). An id of another shape, or a profile of no Istio proxy, is left
/// as it is; `?metadata=` still wins.
fn present_the_pod_named(node: &mut Map<String, Value>, id: &str) {
    let Some(Value::Object(metadata)) = node.get_mut("metadata") else {
        return;
    };
    if !metadata.contains_key("ISTIO_VERSION") {
        return;
    }
    let parts: Vec<&str> = id.split('~').collect();
    let [_, ip, proxy, _] = parts.as_slice() else {
        return;
    };
    let Some((pod, namespace)) = proxy.rsplit_once('.') else {
        return;
    };
    if ip.is_empty() || pod.is_empty() || namespace.is_empty() {
        return;
    }
    for (key, value) in ISTIO_POD_KEYS.into_iter().zip([ip, pod, namespace]) {
        metadata.insert(key.into(), Value::String((*value).to_owned()));
    }
}

fn unknown_profile(name: &str, profiles: &NodeProfiles) -> String {
    if profiles.len() == 0 {
        return format!(
            "no node profile {name:?}: none is declared (declare them as [[profile]] tables of the --config file, or with --node-profiles DIR)"
        );
    }
    let known: Vec<&str> = profiles.names().take(20).collect();
    let more = if profiles.len() > known.len() {
        ", ..."
    } else {
        ""
    };
    format!(
        "no node profile {name:?}; the profiles are {}{more}",
        known.join(", ")
    )
}

/// `metadata=`: a JSON object that parses as a `google.protobuf.Struct`.
fn metadata(text: &str, codec: &Codec) -> Result<Map<String, Value>, QueryError> {
    let value = crate::xds::plain_json::from_str(text).map_err(|e| {
        refuse(
            "metadata",
            format!("not JSON ({e}); give a JSON object, URL-encoded, like metadata=%7B%22NAMESPACE%22%3A%22default%22%7D"),
        )
    })?;
    let Value::Object(fields) = value else {
        return Err(refuse(
            "metadata",
            "not a JSON object; node metadata is a google.protobuf.Struct, like {\"NAMESPACE\":\"default\"}",
        ));
    };
    codec
        .parse_message("google.protobuf.Struct", text.as_bytes(), false)
        .map_err(|e| refuse("metadata", e.to_string()))?;
    Ok(fields)
}

/// `locality=REGION[/ZONE[/SUB_ZONE]]`.
fn locality(text: &str) -> Result<Value, QueryError> {
    let parts: Vec<&str> = text.split('/').collect();
    if text.is_empty() || parts.len() > 3 {
        return Err(refuse(
            "locality",
            format!("{text:?} is not REGION[/ZONE[/SUB_ZONE]] (like us-east1/us-east1-b)"),
        ));
    }
    let fields: Map<String, Value> = ["region", "zone", "sub_zone"]
        .iter()
        .zip(parts)
        .filter(|(_, part)| !part.is_empty())
        .map(|(key, part)| ((*key).to_owned(), Value::String(part.to_owned())))
        .collect();
    Ok(Value::Object(fields))
}

/// `user_agent=NAME[/VERSION]`.
fn user_agent(text: &str) -> Result<(&str, Option<&str>), QueryError> {
    let (name, version) = text
        .split_once('/')
        .map_or((text, None), |(name, version)| (name, Some(version)));
    if name.is_empty() || version == Some("") {
        return Err(refuse(
            "user_agent",
            format!("{text:?} is not NAME[/VERSION] (like envoy/1.31.2)"),
        ));
    }
    Ok((name, version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::check_node;
    use crate::profiles::tests::test_codec;

    fn query_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn profiles() -> NodeProfiles {
        NodeProfiles::with(&[(
            "sidecar",
            serde_json::json!({
                "id": "template",
                "cluster": "reviews.default",
                "userAgentName": "envoy",
                "userAgentBuildVersion": {"version": {"majorNumber": 1}},
                "metadata": {"NAMESPACE": "default", "CLUSTER_ID": "Kubernetes"},
                "locality": {"region": "r"},
            }),
        )])
    }

    fn node(pairs: &[(&str, &str)]) -> Result<Value, QueryError> {
        presented_node(&query_of(pairs), &profiles(), test_codec()).map(Value::Object)
    }

    #[test]
    fn a_plain_get_is_id_and_cluster_as_before() {
        assert_eq!(
            node(&[("node", "n")]).unwrap(),
            serde_json::json!({"id": "n", "cluster": ""})
        );
        assert_eq!(
            node(&[("node", "n"), ("cluster", "c")]).unwrap(),
            serde_json::json!({"id": "n", "cluster": "c"})
        );
    }

    #[test]
    fn a_profile_gives_its_node_with_the_id_and_cluster_asked() {
        let got = node(&[
            ("profile", "sidecar"),
            ("node", "sidecar~10.0.0.1~r.default"),
        ])
        .unwrap();
        assert_eq!(got["id"], "sidecar~10.0.0.1~r.default");
        assert_eq!(got["cluster"], "reviews.default");
        assert_eq!(got["metadata"]["CLUSTER_ID"], "Kubernetes");
        assert_eq!(got["userAgentName"], "envoy");
        // Without node=, the profile's own id.
        assert_eq!(node(&[("profile", "sidecar")]).unwrap()["id"], "template");
        let other = node(&[("profile", "sidecar"), ("cluster", "other")]).unwrap();
        assert_eq!(other["cluster"], "other");
    }

    /// A profile of an Istio sidecar asked for with another pod's id
    /// presents that pod (istiod keys the view on it), not the template's.
    #[test]
    fn an_istio_profile_presents_the_pod_its_id_names() {
        let profiles = NodeProfiles::with(&[(
            "istio",
            serde_json::json!({
                "id": "sidecar~10.244.1.12~reviews-v1-1.default~default.svc.cluster.local",
                "metadata": {"ISTIO_VERSION": "1.31.0", "INSTANCE_IPS": "10.244.1.12",
                             "NAME": "reviews-v1-1", "NAMESPACE": "default", "CLUSTER_ID": "Kubernetes"}
            }),
        )]);
        let codec = test_codec();
        let got = presented_node(
            &query_of(&[
                ("profile", "istio"),
                (
                    "node",
                    "sidecar~10.244.1.13~reviews-v2-2.other~other.svc.cluster.local",
                ),
            ]),
            &profiles,
            codec,
        )
        .unwrap();
        let metadata = &got["metadata"];
        assert_eq!(metadata["INSTANCE_IPS"], "10.244.1.13");
        assert_eq!(metadata["NAME"], "reviews-v2-2");
        assert_eq!(metadata["NAMESPACE"], "other");
        assert_eq!(
            metadata["CLUSTER_ID"], "Kubernetes",
            "the rest is the profile's"
        );
        // ?metadata= still wins, and an id of another shape is left alone.
        let got = presented_node(
            &query_of(&[
                ("profile", "istio"),
                (
                    "node",
                    "sidecar~10.244.1.13~reviews-v2-2.other~other.svc.cluster.local",
                ),
                ("metadata", r#"{"NAMESPACE":"third"}"#),
            ]),
            &profiles,
            codec,
        )
        .unwrap();
        assert_eq!(got["metadata"]["NAMESPACE"], "third");
        let got = presented_node(
            &query_of(&[("profile", "istio"), ("node", "plain-id")]),
            &profiles,
            codec,
        )
        .unwrap();
        assert_eq!(got["metadata"]["NAME"], "reviews-v1-1");
    }

    #[test]
    fn inline_parts_merge_over_the_profile() {
        let got = node(&[
            ("profile", "sidecar"),
            ("node", "n"),
            ("metadata", r#"{"NAMESPACE":"prod","LABELS":{"app":"x"}}"#),
            ("locality", "eu/eu-a"),
            ("user_agent", "envoy/1.31.2"),
        ])
        .unwrap();
        assert_eq!(
            got["metadata"],
            serde_json::json!({"NAMESPACE": "prod", "CLUSTER_ID": "Kubernetes", "LABELS": {"app": "x"}})
        );
        assert_eq!(
            got["locality"],
            serde_json::json!({"region": "eu", "zone": "eu-a"})
        );
        // The user agent is replaced whole: no camelCase twin, no build version.
        assert_eq!(got["user_agent_name"], "envoy");
        assert_eq!(got["user_agent_version"], "1.31.2");
        for gone in ["userAgentName", "userAgentBuildVersion"] {
            assert!(got.get(gone).is_none(), "{gone} in {got}");
        }
        // The result is a Node the strict codec takes.
        let Value::Object(map) = got else {
            unreachable!()
        };
        check_node(&map, test_codec()).unwrap();
        // Without a profile too.
        let bare = node(&[("node", "n"), ("locality", "//z"), ("user_agent", "curl")]).unwrap();
        assert_eq!(
            bare,
            serde_json::json!({"id": "n", "cluster": "", "locality": {"sub_zone": "z"}, "user_agent_name": "curl"})
        );
    }

    #[test]
    fn malformed_parameters_are_refused_by_name() {
        for (pairs, param, says) in [
            (
                vec![("profile", "nope")],
                "profile",
                "the profiles are sidecar",
            ),
            (vec![("metadata", "{")], "metadata", "not JSON"),
            (vec![("metadata", "[1]")], "metadata", "not a JSON object"),
            (vec![("metadata", "\"x\"")], "metadata", "not a JSON object"),
            (vec![("locality", "")], "locality", "REGION"),
            (vec![("locality", "a/b/c/d")], "locality", "REGION"),
            (vec![("user_agent", "")], "user_agent", "NAME"),
            (vec![("user_agent", "/1.0")], "user_agent", "NAME"),
            (vec![("user_agent", "envoy/")], "user_agent", "NAME"),
        ] {
            let err = node(&pairs).unwrap_err();
            assert_eq!(err.param, param, "{pairs:?}");
            assert!(err.reason.contains(says), "{pairs:?}: {err}");
        }
        let none = presented_node(
            &query_of(&[("profile", "x")]),
            &NodeProfiles::default(),
            test_codec(),
        )
        .unwrap_err();
        assert!(none.reason.contains("none is declared"), "{none}");
    }
}
