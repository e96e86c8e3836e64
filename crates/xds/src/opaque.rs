//! `Any`s of a type the descriptor pool does not know, kept whole.
//!
//! Control planes put their own extension types inside Envoy config (Istio's
//! `istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig`). Nothing is
//! wrong with such an `Any` that a client would reject, so the gateway must
//! not NACK it; it serves each one, at any depth, as an
//! `xds_gateway.v1.OpaqueAny` (`proto/xds_gateway/v1/opaque.proto`) holding
//! the original type URL and bytes: canonical JSON of a real message,
//! lossless, and refused by a REST Envoy as a type it does not know, never
//! taken with the extension's fields silently dropped. `--descriptor-set`
//! renders it in full. No I/O; `nesting` has bounded the walks.

use std::collections::BTreeSet;

use prost::Message;
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::descriptors::Descriptors;

/// The type URL an unknown `Any` is served under.
pub const OPAQUE_TYPE_URL: &str = "type.googleapis.com/xds_gateway.v1.OpaqueAny";

const ANY: &str = "google.protobuf.Any";

/// The type URLs of the `Any`s inside `msg`, at any depth (through the
/// payloads of the `Any`s it knows), that the codec has no descriptor for.
/// Empty for almost every resource.
pub fn unknown_types(descriptors: &Descriptors, msg: &DynamicMessage) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    walk(descriptors, msg, &mut found);
    found
}

fn walk(descriptors: &Descriptors, msg: &DynamicMessage, found: &mut BTreeSet<String>) {
    if let Some((type_url, payload)) = any_parts(msg) {
        match inner(descriptors, &type_url, &payload) {
            Inner::Known(inner) => walk(descriptors, &inner, found),
            Inner::Unknown => {
                found.insert(type_url);
            }
            Inner::Undecodable => {}
        }
        return;
    }
    for sub in msg.fields().flat_map(|(_, value)| messages(value)) {
        walk(descriptors, sub, found);
    }
}

/// The messages `value` holds: itself, a list's items or a map's values
/// (protobuf nests lists and maps no deeper).
pub(crate) fn messages(value: &Value) -> impl Iterator<Item = &DynamicMessage> {
    let (one, list, map) = match value {
        Value::Message(sub) => (Some(sub), None, None),
        Value::List(items) => (None, Some(items.iter()), None),
        Value::Map(entries) => (None, None, Some(entries.values())),
        _ => (None, None, None),
    };
    let held = list.into_iter().flatten().chain(map.into_iter().flatten());
    one.into_iter().chain(held.filter_map(Value::as_message))
}

/// `msg` with every `Any` of an unknown type replaced by an `OpaqueAny`
/// holding it; `None` when it holds none (nothing to change).
pub(crate) fn wrapped(descriptors: &Descriptors, msg: &DynamicMessage) -> Option<DynamicMessage> {
    if unknown_types(descriptors, msg).is_empty() {
        return None;
    }
    let mut copy = msg.clone();
    wrap(descriptors, &mut copy);
    Some(copy)
}

/// Wraps the unknown `Any`s inside `msg`; returns whether it changed it.
fn wrap(descriptors: &Descriptors, msg: &mut DynamicMessage) -> bool {
    if let Some((type_url, payload)) = any_parts(msg) {
        let replaced = match inner(descriptors, &type_url, &payload) {
            Inner::Unknown => Some((OPAQUE_TYPE_URL.to_owned(), opaque(type_url, &payload))),
            Inner::Known(mut inner) => wrap(descriptors, &mut inner)
                .then(|| (type_url, bytes::Bytes::from(inner.encode_to_vec()))),
            Inner::Undecodable => None,
        };
        let Some((type_url, value)) = replaced else {
            return false;
        };
        msg.set_field_by_name("type_url", Value::String(type_url));
        msg.set_field_by_name("value", Value::Bytes(value));
        return true;
    }
    let mut changed = false;
    for sub in msg.fields_mut().flat_map(|(_, value)| messages_mut(value)) {
        changed |= wrap(descriptors, sub);
    }
    changed
}

/// [`messages`], to change them.
pub(crate) fn messages_mut(value: &mut Value) -> impl Iterator<Item = &mut DynamicMessage> {
    let (one, list, map) = match value {
        Value::Message(sub) => (Some(sub), None, None),
        Value::List(items) => (None, Some(items.iter_mut()), None),
        Value::Map(entries) => (None, None, Some(entries.values_mut())),
        _ => (None, None, None),
    };
    let held = list.into_iter().flatten().chain(map.into_iter().flatten());
    one.into_iter()
        .chain(held.filter_map(Value::as_message_mut))
}

/// The bytes of an `OpaqueAny` holding `type_url` and `payload`: `Any`'s
/// own wire layout (the same two fields).
pub(crate) fn opaque(type_url: String, payload: &[u8]) -> bytes::Bytes {
    prost_types::Any {
        type_url,
        value: payload.to_vec(),
    }
    .encode_to_vec()
    .into()
}

/// An `Any`'s type URL and payload, if `msg` is an `Any`. Either may be
/// unset, and then comes as its default: an `Any` of an empty message
/// (Istio's `stats.PluginConfig` often is) has no `value` field at all.
pub(crate) fn any_parts(msg: &DynamicMessage) -> Option<(String, bytes::Bytes)> {
    if msg.descriptor().full_name() != ANY {
        return None;
    }
    let type_url = msg.get_field_by_name("type_url")?;
    let payload = msg.get_field_by_name("value")?;
    Some((type_url.as_str()?.to_owned(), payload.as_bytes()?.clone()))
}

/// What an `Any`'s payload is to the codec.
enum Inner {
    Known(DynamicMessage),
    /// No descriptor for its type (or a type URL of no known form).
    Unknown,
    /// A known type whose bytes do not decode: left for the intake to refuse.
    Undecodable,
}

fn inner(descriptors: &Descriptors, type_url: &str, payload: &bytes::Bytes) -> Inner {
    if type_url.is_empty() {
        // An empty Any renders as {} whatever its (absent) type.
        return Inner::Undecodable;
    }
    let Ok(desc) = descriptors.for_type_url(type_url) else {
        return Inner::Unknown;
    };
    DynamicMessage::decode(desc, payload.clone()).map_or(Inner::Undecodable, Inner::Known)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Codec;
    use envoy_types::pb::envoy::config::listener::v3::{filter, Filter, FilterChain, Listener};
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_filter, HttpConnectionManager, HttpFilter,
    };
    use envoy_types::pb::google::protobuf::Any;

    const ALPN: &str =
        "type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig";
    const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";

    /// An Istio-like listener: an HTTP connection manager whose first HTTP
    /// filter is of a type Envoy's API does not have.
    fn listener(alpn_payload: &[u8]) -> Vec<u8> {
        let hcm = HttpConnectionManager {
            stat_prefix: "in".into(),
            http_filters: vec![HttpFilter {
                name: "istio.alpn".into(),
                config_type: Some(http_filter::ConfigType::TypedConfig(Any {
                    type_url: ALPN.into(),
                    value: alpn_payload.to_vec(),
                })),
                ..Default::default()
            }],
            ..Default::default()
        };
        Listener {
            name: "virtualInbound".into(),
            filter_chains: vec![FilterChain {
                filters: vec![Filter {
                    name: "envoy.filters.network.http_connection_manager".into(),
                    config_type: Some(filter::ConfigType::TypedConfig(Any {
                        type_url: format!(
                            "type.googleapis.com/{}",
                            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
                        ),
                        value: hcm.encode_to_vec(),
                    })),
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn an_unknown_type_two_anys_deep_renders_whole_as_an_opaque_any() {
        let codec = Codec::embedded();
        // Any bytes at all: the gateway cannot read them, and keeps them.
        let alpn = [0x0a, 0x03, 0x08, 0x02, 0x0a, 0xff, 0x00];
        let msg = codec.decode_any(LDS, &listener(&alpn)).expect("decodes");
        assert_eq!(
            unknown_types(codec.descriptors(), &msg),
            BTreeSet::from([ALPN.to_owned()])
        );
        let json = codec.render_resource(LDS, &msg).expect("renders");
        let json: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
        let hcm = &json["filterChains"][0]["filters"][0]["typedConfig"];
        let opaque = &hcm["httpFilters"][0]["typedConfig"];
        assert_eq!(opaque["@type"], OPAQUE_TYPE_URL, "{json}");
        assert_eq!(opaque["typeUrl"], ALPN);
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD
            .decode(opaque["value"].as_str().expect("base64"))
            .expect("base64");
        assert_eq!(value, alpn, "the bytes, exactly as sent");
        assert_eq!(hcm["statPrefix"], "in", "the known parts render as ever");
    }

    /// Istio's stats filter config is often empty: an `Any` with a type URL
    /// and no `value` field at all.
    #[test]
    fn an_unknown_type_with_no_bytes_is_kept_too() {
        let codec = Codec::embedded();
        let msg = codec.decode_any(LDS, &listener(&[])).expect("decodes");
        assert_eq!(
            unknown_types(codec.descriptors(), &msg),
            BTreeSet::from([ALPN.to_owned()])
        );
        let json = codec.render_resource(LDS, &msg).expect("renders");
        let json: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
        let filter = &json["filterChains"][0]["filters"][0]["typedConfig"]["httpFilters"][0];
        assert_eq!(filter["typedConfig"]["@type"], OPAQUE_TYPE_URL, "{json}");
        assert_eq!(filter["typedConfig"]["typeUrl"], ALPN);
    }

    #[test]
    fn a_message_of_known_types_only_is_left_alone() {
        let codec = Codec::embedded();
        let bytes = Listener {
            name: "l".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let msg = codec.decode_any(LDS, &bytes).expect("decodes");
        assert!(unknown_types(codec.descriptors(), &msg).is_empty());
        assert!(wrapped(codec.descriptors(), &msg).is_none());
    }
}
