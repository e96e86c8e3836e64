//! The parts of a JSON `DiscoveryRequest` the gateway uses, parsed without
//! materialising the rest.
//!
//! A real Envoy sends its whole `node` on every poll (~77 KB, mostly ~500
//! `extensions`). This parser reads only `id`, `cluster`, `metadata`,
//! `locality` and `user_agent_name` from it, in one pass that skips every
//! other field without allocating. Where the full node lies in the body is
//! kept ([`NodeView::json_at`]); it is decoded into protobuf only when an
//! upstream session is created for it.
//!
//! Field names are accepted in snake_case and lowerCamelCase; unknown fields
//! are ignored; `null` means "default", as in proto3 JSON. Wrong JSON types,
//! trailing data, over-deep nesting (serde_json's limit of 128) are errors.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Why a request body was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid DiscoveryRequest JSON: {0}")]
pub struct RequestError(String);

/// What the gateway reads of a `DiscoveryRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DiscoveryRequestView {
    #[serde(alias = "versionInfo", deserialize_with = "null_as_default")]
    pub version_info: String,
    #[serde(alias = "resourceNames", deserialize_with = "null_as_default")]
    pub resource_names: Vec<String>,
    #[serde(alias = "typeUrl", deserialize_with = "null_as_default")]
    pub type_url: String,
    #[serde(alias = "responseNonce", deserialize_with = "null_as_default")]
    pub response_nonce: String,
    #[serde(deserialize_with = "node_or_null")]
    pub node: Option<NodeView>,
    /// A NACK: the client rejected the response it names (REST clients
    /// other than Envoy may send one; Envoy's REST client never does).
    #[serde(alias = "errorDetail", deserialize_with = "error_detail_or_null")]
    pub error_detail: Option<ErrorDetailView>,
    /// Names with dynamic parameters (xDS TP2): the alternative to
    /// `resource_names`, and legal beside them.
    #[serde(alias = "resourceLocators", deserialize_with = "locators_or_null")]
    pub resource_locators: Vec<LocatorView>,
}

/// A `ResourceLocator`: a name and its dynamic parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct LocatorView {
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(alias = "dynamicParameters", deserialize_with = "null_as_default")]
    pub dynamic_parameters: std::collections::BTreeMap<String, String>,
}

/// What the gateway reads of a NACK's `google.rpc.Status`; the message is
/// cut to `ERROR_MESSAGE_BYTES` (it is logged, shown and sent upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ErrorDetailView {
    #[serde(deserialize_with = "int32")]
    pub code: i32,
    #[serde(deserialize_with = "bounded_message")]
    pub message: String,
    /// How many `details` it has (their shape checked, items skipped).
    #[serde(deserialize_with = "list_of_objects")]
    pub details: usize,
}

/// The most of a NACK's message kept, in bytes.
pub const ERROR_MESSAGE_BYTES: usize = 1024;

/// The identity-bearing fields of a `Node`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeView {
    #[serde(deserialize_with = "null_as_default")]
    pub id: String,
    #[serde(deserialize_with = "null_as_default")]
    pub cluster: String,
    /// Raw JSON of `metadata` (a Struct), if present.
    pub metadata: Option<Box<RawValue>>,
    /// Raw JSON of `locality`, if present.
    pub locality: Option<Box<RawValue>>,
    /// Raw JSON of `dynamic_parameters` (per type URL, a `ContextParams`),
    /// if present and not empty.
    #[serde(alias = "dynamicParameters")]
    pub dynamic_parameters: Option<Box<RawValue>>,
    #[serde(alias = "userAgentName", deserialize_with = "null_as_default")]
    pub user_agent_name: String,
    /// Bytes of the node's JSON as sent (what a session holding it costs).
    #[serde(skip)]
    pub json_bytes: usize,
    /// Where the node's JSON starts in the body (its offset).
    #[serde(skip)]
    pub json_at: usize,
}

/// `xds.core.v3.ContextParams`, read to check its shape: `params`, a map
/// of strings.
#[derive(Deserialize)]
struct ContextParamsFields {
    #[serde(default, rename = "params")]
    _params: Option<std::collections::BTreeMap<String, String>>,
}

/// `envoy.config.core.v3.Locality`, read only to check its field types.
#[derive(Deserialize)]
struct LocalityFields {
    #[serde(default, rename = "region")]
    _region: Option<String>,
    #[serde(default, rename = "zone")]
    _zone: Option<String>,
    #[serde(default, rename = "sub_zone", alias = "subZone")]
    _sub_zone: Option<String>,
}

impl DiscoveryRequestView {
    /// Parses a JSON body. Never panics.
    pub fn parse(body: &[u8]) -> Result<DiscoveryRequestView, RequestError> {
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Err(RequestError("the body must be a JSON object".into()));
        }
        let mut view: DiscoveryRequestView =
            serde_json::from_slice(body).map_err(|e| RequestError(e.to_string()))?;
        if let Some(node) = &mut view.node {
            // The raw node was borrowed from `body`: its address, less the
            // body's, is its offset (checked to lie within the body).
            node.json_at = node.json_at.wrapping_sub(body.as_ptr() as usize);
            let end = node.json_at.checked_add(node.json_bytes);
            if end.is_none_or(|end| end > body.len()) {
                return Err(RequestError("node outside the body".into()));
            }
        }
        Ok(view)
    }
}

fn null_as_default<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

/// A proto3 JSON `int32`: a number or a string holding one; `null` is 0.
fn int32<'de, D: Deserializer<'de>>(de: D) -> Result<i32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int32 {
        Number(i32),
        Text(String),
    }
    match Option::<Int32>::deserialize(de)? {
        None => Ok(0),
        Some(Int32::Number(n)) => Ok(n),
        Some(Int32::Text(text)) => text
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not an int32"))),
    }
}

/// A `google.rpc.Status` object, or `null` (serde alone would also take a
/// struct from a JSON array, which proto3 JSON does not).
fn error_detail_or_null<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<ErrorDetailView>, D::Error> {
    let Some(raw) = Option::<&'de RawValue>::deserialize(de)? else {
        return Ok(None);
    };
    object("error_detail", raw.get())?;
    serde_json::from_str(raw.get())
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A list of `ResourceLocator` objects, or `null` (serde alone would also
/// take a locator from a JSON array).
fn locators_or_null<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<LocatorView>, D::Error> {
    let Some(raw) = Option::<Vec<&'de RawValue>>::deserialize(de)? else {
        return Ok(Vec::new());
    };
    raw.into_iter()
        .map(|item| {
            object("a resource_locators entry", item.get())?;
            serde_json::from_str(item.get()).map_err(serde::de::Error::custom)
        })
        .collect()
}

/// A JSON list of objects, or `null`, read for its shape and length only.
fn list_of_objects<'de, D: Deserializer<'de>>(de: D) -> Result<usize, D::Error> {
    type Object = std::collections::BTreeMap<String, serde::de::IgnoredAny>;
    Ok(Option::<Vec<Object>>::deserialize(de)?.map_or(0, |list| list.len()))
}

/// A string, `null` as empty, cut to [`ERROR_MESSAGE_BYTES`] on a
/// character boundary.
fn bounded_message<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    let mut message = Option::<String>::deserialize(de)?.unwrap_or_default();
    if message.len() > ERROR_MESSAGE_BYTES {
        let mut end = ERROR_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    Ok(message)
}

fn node_or_null<'de, D: Deserializer<'de>>(de: D) -> Result<Option<NodeView>, D::Error> {
    // Borrowed from the body (no copy): its length is the node's size.
    let Some(raw) = Option::<&'de RawValue>::deserialize(de)? else {
        return Ok(None);
    };
    // serde would also take a struct from a JSON array (`[id, cluster]`);
    // proto3 JSON has only the object form.
    object("node", raw.get())?;
    let mut node = serde_json::from_str::<NodeView>(raw.get()).map_err(serde::de::Error::custom)?;
    for (name, value) in [
        ("metadata", &node.metadata),
        ("locality", &node.locality),
        ("dynamic_parameters", &node.dynamic_parameters),
    ] {
        match value.as_deref().map_or("null", RawValue::get) {
            "null" => {}
            text => object(format_args!("node.{name}"), text)?,
        }
    }
    if let Some(locality) = &node.locality {
        // Its fields are part of the identity: the proto3 JSON types hold.
        serde_json::from_str::<Option<LocalityFields>>(locality.get())
            .map_err(|e| serde::de::Error::custom(format!("node.locality: {e}")))?;
    }
    if let Some(parameters) = &node.dynamic_parameters {
        // Part of the identity too: a map of type URL to `ContextParams`.
        type ByType = Option<std::collections::BTreeMap<String, ContextParamsFields>>;
        serde_json::from_str::<ByType>(parameters.get())
            .map_err(|e| serde::de::Error::custom(format!("node.dynamic_parameters: {e}")))?;
    }
    node.json_bytes = raw.get().len();
    // The address for now: `DiscoveryRequestView::parse` makes it an offset.
    node.json_at = raw.get().as_ptr() as usize;
    node.metadata = node.metadata.take().filter(|m| m.get() != "null");
    node.locality = node.locality.take().filter(|l| l.get() != "null");
    node.dynamic_parameters =
        (node.dynamic_parameters.take()).filter(|p| !matches!(p.get().trim(), "null" | "{}"));
    Ok(Some(node))
}

/// `Ok` if `raw` (a valid value, no leading space) is a JSON object, else
/// an error saying what `what` is instead.
fn object<E: serde::de::Error>(what: impl std::fmt::Display, raw: &str) -> Result<(), E> {
    let kind = match raw.as_bytes().first() {
        Some(b'{') => return Ok(()),
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    };
    Err(E::custom(format!(
        "{what} must be a JSON object, not {kind}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request's whole `node` as raw JSON, or `None` if absent or null
    /// (what the tests check [`NodeView::json_at`] against).
    fn raw_node(body: &[u8]) -> Result<Option<Box<RawValue>>, RequestError> {
        #[derive(Deserialize)]
        struct OnlyNode {
            #[serde(default)]
            node: Option<Box<RawValue>>,
        }
        let only: OnlyNode =
            serde_json::from_slice(body).map_err(|e| RequestError(e.to_string()))?;
        Ok(only.node.filter(|n| n.get() != "null"))
    }

    #[test]
    fn the_node_is_found_where_it_is_in_the_body() {
        for body in [
            &br#"{"version_info":"3","node":{"id":"n","extensions":[{"name":"x"}]},"type_url":"t"}"#[..],
            br#"  {"node" : {"id":"\u006e"} }"#,
        ] {
            let node = DiscoveryRequestView::parse(body).unwrap().node.unwrap();
            let raw = raw_node(body).unwrap().unwrap();
            assert_eq!(
                &body[node.json_at..node.json_at + node.json_bytes],
                raw.get().as_bytes()
            );
        }
    }

    #[test]
    fn snake_and_camel_case_are_both_read() {
        let snake = br#"{"version_info":"3","resource_names":["a","b"],"type_url":"t",
            "node":{"id":"n","cluster":"c","user_agent_name":"envoy","extensions":[{"name":"x"}]}}"#;
        let camel = br#"{"versionInfo":"3","resourceNames":["a","b"],"typeUrl":"t",
            "node":{"id":"n","cluster":"c","userAgentName":"envoy","unknownThing":{"deep":[1,2]}}}"#;
        for body in [&snake[..], &camel[..]] {
            let r = DiscoveryRequestView::parse(body).unwrap();
            assert_eq!(r.version_info, "3");
            assert_eq!(r.resource_names, ["a", "b"]);
            assert_eq!(r.type_url, "t");
            let node = r.node.unwrap();
            assert_eq!((node.id.as_str(), node.cluster.as_str()), ("n", "c"));
            assert_eq!(
                node.json_bytes,
                raw_node(body).unwrap().unwrap().get().len()
            );
            assert_eq!(node.user_agent_name, "envoy");
            assert!(raw_node(body).unwrap().unwrap().get().starts_with('{'));
        }
    }

    #[test]
    fn nulls_mean_default_and_unknown_fields_are_ignored() {
        let r = DiscoveryRequestView::parse(
            br#"{"version_info":null,"resource_names":null,"node":null,"future_field":[{"x":1}]}"#,
        )
        .unwrap();
        assert_eq!(r.version_info, "");
        assert!(r.resource_names.is_empty());
        assert!(r.node.is_none());
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        let deep = "[".repeat(10_000);
        let deep_node = format!(r#"{{"node":{{"metadata":{}}}}}"#, "[".repeat(10_000));
        for body in [
            &b""[..],
            b"[]",
            b"\"x\"",
            b"{",
            br#"{"version_info": 5}"#,
            br#"{"resource_names": "a"}"#,
            br#"{"resource_names": [1]}"#,
            br#"{"node": "n"}"#,
            br#"{"node": {"id": 7}}"#,
            br#"{"node": [null, null]}"#,
            br#"{"node": ["id", "cluster"]}"#,
            br#"{"node": {"metadata": 5}}"#,
            br#"{"node": {"metadata": [{"a": 1}]}}"#,
            br#"{"node": {"locality": "eu"}}"#,
            br#"{"node": {"locality": {"region": 5}}}"#,
            br#"{"node": {"locality": {"subZone": ["a"]}}}"#,
            // A key twice: Python's json_format (the reference) refuses it
            // too ("duplicate key"), where prost-reflect takes the last.
            br#"{"version_info": "a", "version_info": "b"}"#,
            br#"{"node": {"locality": {"sub_zone": "a", "sub_zone": "b"}}}"#,
            br#"{} trailing"#,
            deep.as_bytes(),
            deep_node.as_bytes(),
        ] {
            assert!(
                DiscoveryRequestView::parse(body).is_err(),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn a_nack_is_read_in_either_spelling_and_its_message_bounded() {
        let snake = br#"{"error_detail":{"code":3,"message":"bad cluster","details":[]}}"#;
        let camel = br#"{"errorDetail":{"code":"3","message":"bad cluster"}}"#;
        for body in [&snake[..], camel] {
            let detail = DiscoveryRequestView::parse(body).unwrap().error_detail;
            let expected = ErrorDetailView {
                code: 3,
                message: "bad cluster".into(),
                details: 0,
            };
            assert_eq!(detail, Some(expected));
        }
        assert_eq!(
            DiscoveryRequestView::parse(br#"{"error_detail":null}"#)
                .unwrap()
                .error_detail,
            None
        );
        let long = format!(
            r#"{{"error_detail":{{"message":"{}"}}}}"#,
            "\u{e9}".repeat(2000)
        );
        let detail = DiscoveryRequestView::parse(long.as_bytes())
            .unwrap()
            .error_detail
            .unwrap();
        assert!(detail.message.len() <= ERROR_MESSAGE_BYTES);
        assert!(detail.message.len() >= ERROR_MESSAGE_BYTES - 1);
        for bad in [
            &br#"{"error_detail":{"code":"three"}}"#[..],
            br#"{"error_detail":{"code":1.5}}"#,
            br#"{"error_detail":"nope"}"#,
            br#"{"error_detail":{"message":7}}"#,
            br#"{"error_detail":{"details":{}}}"#,
            br#"{"error_detail":{"details":["x"]}}"#,
            br#"{"errorDetail":[null,null]}"#,
        ] {
            assert!(DiscoveryRequestView::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = DiscoveryRequestView::parse(&body);
        }

        #[test]
        fn arbitrary_json_shapes_never_panic(s in r#"\{("(version_info|resource_names|node|id|metadata|type_url)":(null|"[a-z]*"|\[[^\]]{0,8}\]|\{[^}]{0,12}\}|[0-9]{1,3}),?){0,5}\}"#) {
            let _ = DiscoveryRequestView::parse(s.as_bytes());
        }
    }
}
