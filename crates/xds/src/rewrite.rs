//! Resource rewrites for REST clients: every `ads: {}` / `self: {}`
//! `ConfigSource`, at any depth and inside nested `Any`s, becomes a REST
//! `api_config_source` pointing back at the gateway (an `Any` of a type the
//! pool lacks is served opaque, [`super::opaque`], and left as it is).
//!
//! A REST-only Envoy rejects ADS config sources ("ADS must be configured to
//! support an ADS config source"), and every ADS control plane emits them.
//! The rewrite is a deterministic function of (resource bytes, target), so
//! rewritten responses can be cached and versioned like the originals.

use std::time::Duration;

use prost::Message;
use prost_reflect::{DynamicMessage, Kind, ReflectMessage, Value};

use super::json::Codec;
use super::json_error::JsonError;
use super::opaque::any_parts;

const ANY: &str = "google.protobuf.Any";
const CONFIG_SOURCE: &str = "envoy.config.core.v3.ConfigSource";
const API_CONFIG_SOURCE: &str = "envoy.config.core.v3.ApiConfigSource";
const DURATION: &str = "google.protobuf.Duration";

/// Where rewritten config sources point: the REST client's own xDS cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RestTarget {
    /// The xDS cluster name in the client's bootstrap (Envoy sends it as `Host`).
    pub cluster_name: String,
    pub refresh_delay: Duration,
    /// How long the client waits for an answer before its poll fails
    /// (Envoy's default, 1 s, is shorter than a cold upstream's first answer).
    pub request_timeout: Duration,
}

/// Rewrites the ADS/self config sources in an `Any` payload of `type_url`.
/// Returns `None` when nothing needed rewriting (the original bytes stand).
pub fn rewrite_config_sources(
    codec: &Codec,
    type_url: &str,
    value: &[u8],
    target: &RestTarget,
) -> Result<Option<Vec<u8>>, JsonError> {
    let mut msg = codec.decode_any(type_url, value)?;
    let changed = rewrite_message(codec, &mut msg, target)?;
    Ok(changed.then(|| msg.encode_to_vec()))
}

/// Walks every set field; true if anything changed.
fn rewrite_message(
    codec: &Codec,
    msg: &mut DynamicMessage,
    target: &RestTarget,
) -> Result<bool, JsonError> {
    let desc = msg.descriptor();
    match desc.full_name() {
        ANY => return rewrite_any(codec, msg, target),
        CONFIG_SOURCE => return rewrite_config_source(codec, msg, target),
        _ => {}
    }
    let mut changed = false;
    for field in desc.fields() {
        let walks_messages = match field.kind() {
            Kind::Message(m) => {
                // A map's entry type is a message; walk only message values.
                if field.is_map() {
                    matches!(m.map_entry_value_field().kind(), Kind::Message(_))
                } else {
                    !is_leaf_well_known(m.full_name())
                }
            }
            _ => false,
        };
        if !walks_messages || !msg.has_field(&field) {
            continue;
        }
        for sub in super::opaque::messages_mut(msg.get_field_mut(&field)) {
            changed |= rewrite_message(codec, sub, target)?;
        }
    }
    Ok(changed)
}

/// Well-known message types that cannot contain a ConfigSource.
fn is_leaf_well_known(name: &str) -> bool {
    name.starts_with("google.protobuf.") && name != ANY
}

fn rewrite_any(
    codec: &Codec,
    any: &mut DynamicMessage,
    target: &RestTarget,
) -> Result<bool, JsonError> {
    let Some((type_url, payload)) = any_parts(any).filter(|(url, _)| !url.is_empty()) else {
        return Ok(false);
    };
    let rewritten = match rewrite_config_sources(codec, &type_url, &payload, target) {
        Ok(Some(rewritten)) => rewritten,
        Ok(None) | Err(JsonError::UnknownType { .. }) => return Ok(false),
        Err(other) => return Err(other),
    };
    any.set_field_by_name("value", Value::Bytes(rewritten.into()));
    Ok(true)
}

fn rewrite_config_source(
    codec: &Codec,
    source: &mut DynamicMessage,
    target: &RestTarget,
) -> Result<bool, JsonError> {
    if !source.has_field_by_name("ads") && !source.has_field_by_name("self") {
        return Ok(false);
    }
    source.clear_field_by_name("ads");
    source.clear_field_by_name("self");
    let api = rest_api_config_source(codec, target)?;
    source.set_field_by_name("api_config_source", Value::Message(api));
    Ok(true)
}

fn rest_api_config_source(codec: &Codec, target: &RestTarget) -> Result<DynamicMessage, JsonError> {
    let desc = codec.descriptor(API_CONFIG_SOURCE)?;
    let mut api = DynamicMessage::new(desc.clone());
    for (field, value) in [("api_type", "REST"), ("transport_api_version", "V3")] {
        let number = enum_number(&desc, field, value);
        api.set_field_by_name(field, Value::EnumNumber(number));
    }
    let cluster = Value::String(target.cluster_name.clone());
    api.set_field_by_name("cluster_names", Value::List(vec![cluster]));
    for (field, value) in [
        ("refresh_delay", target.refresh_delay),
        ("request_timeout", target.request_timeout),
    ] {
        api.set_field_by_name(field, Value::Message(duration(codec, value)?));
    }
    Ok(api)
}

fn duration(codec: &Codec, value: Duration) -> Result<DynamicMessage, JsonError> {
    let proto = prost_types::Duration {
        seconds: i64::try_from(value.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(value.subsec_nanos()).unwrap_or(0),
    };
    let mut message = DynamicMessage::new(codec.descriptor(DURATION)?);
    message
        .transcode_from(&proto)
        .map_err(|e| JsonError::decode(DURATION, e))?;
    Ok(message)
}

/// The number of enum value `value` of field `field` (both exist in every
/// v3 API; 0 would be a wrong but harmless fallback).
fn enum_number(desc: &prost_reflect::MessageDescriptor, field: &str, value: &str) -> i32 {
    desc.get_field_by_name(field)
        .and_then(|f| match f.kind() {
            Kind::Enum(e) => e.get_value_by_name(value).map(|v| v.number()),
            _ => None,
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> RestTarget {
        RestTarget {
            cluster_name: "xds_cluster".into(),
            refresh_delay: Duration::from_millis(1500),
            request_timeout: Duration::from_secs(10),
        }
    }

    fn render(codec: &Codec, type_url: &str, bytes: &[u8]) -> String {
        String::from_utf8(codec.render_any(type_url, bytes).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn rewrites_inside_nested_any_and_cluster_eds() {
        let codec = Codec::embedded();
        let listener = codec
            .parse_any(
                br#"{"@type":"type.googleapis.com/envoy.config.listener.v3.Listener","name":"l",
              "filter_chains":[{"filters":[{"name":"hcm","typed_config":{
                "@type":"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix":"x","rds":{"route_config_name":"r","config_source":{"ads":{},"resource_api_version":"V3"}},
                "http_filters":[{"name":"router","typed_config":{"@type":"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]}"#,
            )
            .unwrap();
        let out = rewrite_config_sources(&codec, &listener.type_url, &listener.value, &target())
            .unwrap()
            .expect("changed");
        let text = render(&codec, &listener.type_url, &out);
        assert!(!text.contains(r#""ads""#), "{text}");
        assert!(text.contains(r#""apiConfigSource":{"apiType":"REST","clusterNames":["xds_cluster"],"refreshDelay":"1.500s","requestTimeout":"10s","transportApiVersion":"V3"}"#), "{text}");
        assert!(text.contains(r#""resourceApiVersion":"V3""#), "{text}");

        let cluster = codec
            .parse_any(
                br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c","type":"EDS",
              "eds_cluster_config":{"eds_config":{"self":{}}}}"#,
            )
            .unwrap();
        let out = rewrite_config_sources(&codec, &cluster.type_url, &cluster.value, &target())
            .unwrap()
            .expect("changed");
        assert!(
            render(&codec, &cluster.type_url, &out).contains(r#""clusterNames":["xds_cluster"]"#)
        );
    }

    /// Istio's listeners hold its own filter configs next to the HCM whose
    /// RDS source is ADS: the unknown `Any` stays as it came, and the rest
    /// is rewritten (it once failed the whole answer with a 500).
    #[test]
    fn an_unknown_any_is_left_whole_and_the_rest_rewritten() {
        use envoy_types::pb::envoy::config::listener::v3::{filter::ConfigType, Listener};
        const ALPN: &str =
            "type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig";
        let codec = Codec::embedded();
        let parsed = codec
            .parse_any(
                br#"{"@type":"type.googleapis.com/envoy.config.listener.v3.Listener","name":"l",
              "filter_chains":[{"filters":[{"name":"istio.alpn","typed_config":{
                "@type":"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
               {"name":"hcm","typed_config":{
                "@type":"type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix":"x","rds":{"route_config_name":"r","config_source":{"ads":{}}}}}]}]}"#,
            )
            .unwrap();
        let mut listener = Listener::decode(parsed.value.as_slice()).unwrap();
        let unknown_payload = vec![0x0a, 0x02, b'h', b'2'];
        match &mut listener.filter_chains[0].filters[0].config_type {
            Some(ConfigType::TypedConfig(any)) => {
                any.type_url = ALPN.to_owned();
                any.value = unknown_payload.clone();
            }
            other => panic!("no typed_config: {other:?}"),
        }
        let bytes = listener.encode_to_vec();

        let out = rewrite_config_sources(&codec, &parsed.type_url, &bytes, &target())
            .expect("an unknown Any is no error")
            .expect("the HCM's ADS source was rewritten");
        let out = Listener::decode(out.as_slice()).unwrap();
        match &out.filter_chains[0].filters[0].config_type {
            Some(ConfigType::TypedConfig(any)) => {
                assert_eq!(
                    (any.type_url.as_str(), &any.value),
                    (ALPN, &unknown_payload)
                );
            }
            other => panic!("the unknown Any changed: {other:?}"),
        }
        let text = render(&codec, &parsed.type_url, &out.encode_to_vec());
        assert!(text.contains(r#""clusterNames":["xds_cluster"]"#), "{text}");
        assert!(text.contains("xds_gateway.v1.OpaqueAny"), "{text}");
    }

    #[test]
    fn untouched_when_nothing_to_rewrite_and_deterministic() {
        let codec = Codec::embedded();
        let cla = codec
            .parse_any(br#"{"@type":"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment","cluster_name":"c"}"#)
            .unwrap();
        assert!(
            rewrite_config_sources(&codec, &cla.type_url, &cla.value, &target())
                .unwrap()
                .is_none()
        );
        let cluster = codec
            .parse_any(
                br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c","type":"EDS",
              "eds_cluster_config":{"eds_config":{"ads":{}}},
              "metadata":{"filter_metadata":{"a":{"x":1},"b":{"y":2}}}}"#,
            )
            .unwrap();
        let first =
            rewrite_config_sources(&codec, &cluster.type_url, &cluster.value, &target()).unwrap();
        for _ in 0..10 {
            let again =
                rewrite_config_sources(&codec, &cluster.type_url, &cluster.value, &target())
                    .unwrap();
            assert_eq!(
                render(&codec, &cluster.type_url, again.as_ref().unwrap()),
                render(&codec, &cluster.type_url, first.as_ref().unwrap())
            );
        }
    }
}
