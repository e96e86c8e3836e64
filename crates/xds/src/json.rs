//! Canonical proto3 JSON ⇄ protobuf for every type in the descriptor pool.
//!
//! The pool ([`super::descriptors`]) holds Envoy's whole v3 API plus any FileDescriptorSets given
//! with `--descriptor-set`, so an `Any` at any depth renders as `{"@type": ..., ...fields}`
//! whatever extension it carries (one of a type the pool lacks renders whole, as the
//! `xds_gateway.v1.OpaqueAny` holding it: [`super::opaque`]). Output is deterministic: object keys
//! are sorted (protobuf maps come out of prost-reflect in hash order), 64-bit integers are strings,
//! defaults are omitted, names are lowerCamelCase.
//!
//! This module does no I/O but reading descriptor-set files at start-up, and
//! it never panics on input: every failure is a [`JsonError`] naming the type.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, ReflectMessage,
    SerializeOptions,
};

use super::canonical;
use super::descriptors::Descriptors;
use super::json_error::JsonError;
use super::nesting;

/// The descriptor pool and the JSON options the gateway renders with.
/// Cheap to clone (the pool is reference counted).
#[derive(Clone, Debug)]
pub struct Codec {
    descriptors: Descriptors,
    serialize: Arc<SerializeOptions>,
    /// The same with proto field names (`version_info`, not `versionInfo`).
    serialize_proto_names: Arc<SerializeOptions>,
}

impl Codec {
    /// The embedded Envoy API only.
    pub fn embedded() -> Codec {
        Codec::of(Descriptors::embedded())
    }

    /// The embedded API plus the compiled FileDescriptorSets at `paths`.
    pub fn with_descriptor_sets(paths: &[PathBuf]) -> Result<Codec, JsonError> {
        Descriptors::with_descriptor_sets(paths).map(Codec::of)
    }

    fn of(descriptors: Descriptors) -> Codec {
        let serialize = |proto_names: bool| {
            SerializeOptions::new()
                .stringify_64_bit_integers(true)
                .use_enum_numbers(false)
                .use_proto_field_name(proto_names)
                .skip_default_fields(true)
        };
        Codec {
            descriptors,
            serialize: Arc::new(serialize(false)),
            serialize_proto_names: Arc::new(serialize(true)),
        }
    }

    /// The codec over the pool as it is now, fixed (`Descriptors::snapshot`).
    pub fn snapshot(&self) -> Codec {
        Codec {
            descriptors: self.descriptors.snapshot(),
            ..self.clone()
        }
    }

    /// The descriptor pool and its lookups, for the pieces under the codec.
    pub fn descriptors(&self) -> &Descriptors {
        &self.descriptors
    }

    /// The descriptor pool as it is now (for rewrites and reflection).
    pub fn pool(&self) -> DescriptorPool {
        self.descriptors.pool()
    }

    pub fn descriptor(&self, name: &str) -> Result<MessageDescriptor, JsonError> {
        self.descriptors.descriptor(name)
    }

    /// Decodes an `Any`'s payload, held to the nesting bound.
    pub fn decode_any(&self, type_url: &str, value: &[u8]) -> Result<DynamicMessage, JsonError> {
        nesting::decode_any(&self.descriptors, type_url, value)
    }

    /// Renders an `Any` as canonical JSON: `{"@type": type_url, ...fields}`,
    /// nested `Any`s included. Fails if any type at any depth is unknown.
    pub fn render_any(&self, type_url: &str, value: &[u8]) -> Result<Bytes, JsonError> {
        let msg = self.decode_any(type_url, value)?;
        if msg.descriptor().full_name().starts_with("google.protobuf.") {
            // Well-known types have special Any forms ({"@type", "value"}):
            // let prost-reflect's Any serializer handle them.
            let any = super::opaque::opaque(type_url.to_owned(), value);
            let any = DynamicMessage::decode(self.descriptor("google.protobuf.Any")?, any)
                .map_err(|e| JsonError::decode(type_url, e))?;
            return self.render_message(&any, type_url);
        }
        // One decode: render the message and add "@type" (which sorts first).
        self.render_resource(type_url, &msg)
    }

    /// Renders `payload`, of a type the pool lacks, as the canonical JSON of
    /// the `xds_gateway.v1.OpaqueAny` holding it (see [`super::opaque`]).
    pub fn render_opaque(&self, type_url: &str, payload: &[u8]) -> Result<Bytes, JsonError> {
        let bytes = super::opaque::opaque(type_url.to_owned(), payload);
        self.render_any(super::opaque::OPAQUE_TYPE_URL, &bytes)
    }

    /// Renders an already decoded resource (not a well-known type) as the
    /// canonical JSON of its `Any`: `{"@type": type_url, ...fields}`.
    pub fn render_resource(
        &self,
        type_url: &str,
        msg: &DynamicMessage,
    ) -> Result<Bytes, JsonError> {
        self.render_options(msg, type_url, Some(type_url), &self.serialize)
    }

    /// Renders a dynamic message as canonical JSON bytes.
    pub fn render_message(&self, msg: &DynamicMessage, label: &str) -> Result<Bytes, JsonError> {
        self.render_options(msg, label, None, &self.serialize)
    }

    /// `json`, canonical JSON of a `message`, written again with proto field
    /// names (`version_info`), as a plain JSON decoder reads them (map and
    /// `Struct` keys are data, and stay).
    pub fn with_proto_names(&self, message: &str, json: &[u8]) -> Result<Bytes, JsonError> {
        let msg = self.parse_message(message, json, false)?;
        self.render_options(&msg, message, None, &self.serialize_proto_names)
    }

    fn render_options(
        &self,
        msg: &DynamicMessage,
        label: &str,
        at_type: Option<&str>,
        options: &SerializeOptions,
    ) -> Result<Bytes, JsonError> {
        let render_error = |e: serde_json::Error| JsonError::Render {
            type_url: label.to_owned(),
            reason: e.to_string(),
        };
        // Text first: serde_json's text serializer prints a 32-bit float in its
        // shortest form ("0.1"), where serde_json::Value would widen it to f64
        // ("0.10000000149011612"). Then through Value, whose objects are
        // BTreeMaps, to put protobuf map entries (hash order in prost-reflect)
        // in a stable order; `float_roundtrip` keeps the re-parse exact.
        // An Any of a type the pool lacks renders as the OpaqueAny holding it.
        let wrapped = super::opaque::wrapped(&self.descriptors, msg);
        let msg = wrapped.as_ref().unwrap_or(msg);
        let mut text = Vec::with_capacity(256);
        msg.serialize_with_options(&mut serde_json::Serializer::new(&mut text), options)
            .map_err(render_error)?;
        let mut value = super::plain_json::from_slice(&text).map_err(render_error)?;
        empty_any_values(&mut value, false);
        if let (Some(type_url), serde_json::Value::Object(map)) = (at_type, &mut value) {
            map.insert(
                "@type".to_owned(),
                serde_json::Value::String(type_url.to_owned()),
            );
        }
        text.clear();
        serde_json::to_writer(&mut text, &value).map_err(render_error)?;
        Ok(Bytes::from(text))
    }

    /// Renders a prost message of a type the pool knows (e.g. a response
    /// envelope from envoy-types) as canonical JSON.
    pub fn render_prost<M: Message>(&self, name: &str, msg: &M) -> Result<Bytes, JsonError> {
        let desc = self.descriptor(name)?;
        let dynamic = DynamicMessage::decode(desc, msg.encode_to_vec().as_slice())
            .map_err(|e| JsonError::decode(name, e))?;
        self.render_message(&dynamic, name)
    }

    /// Parses proto3 JSON (either case of names) into a message of `name`;
    /// unknown fields are ignored with `ignore_unknown` (a client of a newer
    /// API may send them), an `Any` of an unknown `@type` never is.
    pub fn parse_message(
        &self,
        name: &str,
        json: &[u8],
        ignore_unknown: bool,
    ) -> Result<DynamicMessage, JsonError> {
        let desc = self.descriptor(name)?;
        let options = DeserializeOptions::new().deny_unknown_fields(!ignore_unknown);
        let parse_error = |e: serde_json::Error| JsonError::Parse {
            message: name.to_owned(),
            reason: e.to_string(),
        };
        // The reference form of an Any holding Empty has no "value" field,
        // which prost-reflect requires: add it before parsing (rare: only
        // when the text mentions the type at all).
        if std::str::from_utf8(json).is_ok_and(|t| t.contains(EMPTY_TYPE)) {
            let mut value = super::plain_json::from_slice(json).map_err(parse_error)?;
            empty_any_values(&mut value, true);
            return DynamicMessage::deserialize_with_options(desc, value, &options)
                .map_err(parse_error);
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        DynamicMessage::deserialize_with_options(desc, &mut de, &options)
            .and_then(|m| de.end().map(|()| m))
            .map_err(parse_error)
    }

    /// Parses JSON into a prost message type that the pool also knows,
    /// through deterministic bytes (`canonical`).
    pub fn parse_prost<M: Message + Default>(
        &self,
        name: &str,
        json: &[u8],
        ignore_unknown: bool,
    ) -> Result<M, JsonError> {
        let msg = self.parse_message(name, json, ignore_unknown)?;
        M::decode(canonical::encode(&self.descriptors, &msg).as_slice())
            .map_err(|e| JsonError::decode(name, e))
    }

    /// Parses a JSON `Any` (`{"@type": ..., ...}`) into its type URL and bytes.
    pub fn parse_any(&self, json: &[u8]) -> Result<prost_types::Any, JsonError> {
        self.parse_prost("google.protobuf.Any", json, false)
    }
}

const EMPTY_TYPE: &str = "/google.protobuf.Empty";

/// prost-reflect writes an `Any` holding `google.protobuf.Empty` as
/// `{"@type": ".../google.protobuf.Empty", "value": {}}`; protobuf's C++ and
/// Python mappings (and so Envoy) write and expect `{"@type": ...}` alone, and
/// Envoy rejects the `value` field. At any depth, drops that `value` (what
/// rendering does) or, with `add`, adds it back (to parse the reference form).
fn empty_any_values(value: &mut serde_json::Value, add: bool) {
    match value {
        serde_json::Value::Object(map) => {
            let empty_any = map
                .get("@type")
                .and_then(|t| t.as_str())
                .is_some_and(|t| t.ends_with(EMPTY_TYPE));
            let held = map.get("value");
            if empty_any && add && held.is_none() {
                map.insert(
                    "value".into(),
                    serde_json::Value::Object(Default::default()),
                );
            } else if empty_any
                && !add
                && held.is_some_and(|v| v.as_object().is_some_and(|o| o.is_empty()))
            {
                map.remove("value");
            }
            map.values_mut().for_each(|v| empty_any_values(v, add));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| empty_any_values(v, add)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> Codec {
        Codec::embedded()
    }

    #[test]
    fn nested_any_renders_with_type_and_reparses() {
        let json = br#"{
          "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
          "name": "l",
          "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "x",
            "rds": {"route_config_name": "r", "config_source": {"ads": {}}},
            "http_filters": [{"name": "router", "typed_config": {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]
          }}]}]
        }"#;
        let c = codec();
        let any = c.parse_any(json).unwrap();
        let rendered = c.render_any(&any.type_url, &any.value).unwrap();
        let text = std::str::from_utf8(&rendered).unwrap();
        assert!(
            text.starts_with(r#"{"@type":"type.googleapis.com/envoy.config.listener.v3.Listener""#)
        );
        assert!(text.contains(
            r#""@type":"type.googleapis.com/envoy.extensions.filters.http.router.v3.Router""#
        ));
        assert!(text.contains(r#""routeConfigName":"r""#));
        let again = c.parse_any(&rendered).unwrap();
        assert_eq!(again, any);
        assert_eq!(
            c.render_any(&again.type_url, &again.value).unwrap(),
            rendered
        );
    }

    /// Found by `cargo fuzz` (`json_to_proto`): a `Struct` key that is
    /// serde_json's private raw-value token parsed, then failed to render
    /// (a number there), or would have been replaced by the JSON its string
    /// held. Envoy takes any key; so does the gateway, unchanged.
    #[test]
    fn a_struct_key_that_is_serde_jsons_private_token_renders_as_it_is() {
        let c = codec();
        for value in ["33.5", r#""[1,2]""#] {
            let json = format!(
                r#"{{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c",
                   "metadata":{{"filter_metadata":{{"x":{{"$serde_json::private::RawValue":{value}}}}}}}}}"#
            );
            let any = c.parse_any(json.as_bytes()).unwrap();
            let rendered = c.render_any(&any.type_url, &any.value).unwrap();
            let text = std::str::from_utf8(&rendered).unwrap();
            assert!(
                text.contains(&format!(
                    r#""filterMetadata":{{"x":{{"$serde_json::private::RawValue":{value}}}}}"#
                )),
                "{text}"
            );
            assert_eq!(c.parse_any(&rendered).unwrap(), any);
        }
    }

    #[test]
    fn descriptor_sets_add_types_at_start_up() {
        use prost_types::{
            field_descriptor_proto::Type, DescriptorProto, FieldDescriptorProto,
            FileDescriptorProto, FileDescriptorSet,
        };
        let file = FileDescriptorProto {
            name: Some("acme/filter.proto".into()),
            package: Some("acme".into()),
            message_type: vec![DescriptorProto {
                name: Some("Filter".into()),
                field: vec![FieldDescriptorProto {
                    name: Some("greeting".into()),
                    json_name: Some("greeting".into()),
                    number: Some(1),
                    r#type: Some(Type::String as i32),
                    label: Some(1),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            syntax: Some("proto3".into()),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acme.pb");
        std::fs::write(
            &path,
            FileDescriptorSet { file: vec![file] }.encode_to_vec(),
        )
        .unwrap();
        let json = br#"{"@type":"type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig","name":"f",
          "typed_config":{"@type":"type.googleapis.com/acme.Filter","greeting":"hi"}}"#;
        assert!(Codec::embedded().parse_any(json).is_err());
        let codec = Codec::with_descriptor_sets(std::slice::from_ref(&path)).unwrap();
        let any = codec.parse_any(json).unwrap();
        let text = String::from_utf8(
            codec
                .render_any(&any.type_url, &any.value)
                .unwrap()
                .to_vec(),
        )
        .unwrap();
        assert!(
            text.contains(r#"{"@type":"type.googleapis.com/acme.Filter","greeting":"hi"}"#),
            "{text}"
        );

        std::fs::write(&path, b"not a descriptor set").unwrap();
        let err = Codec::with_descriptor_sets(std::slice::from_ref(&path)).unwrap_err();
        assert!(err.to_string().contains("acme.pb"), "{err}");
    }

    #[test]
    fn unknown_type_is_named() {
        let err = codec()
            .render_any("type.googleapis.com/acme.Unknown", b"")
            .unwrap_err();
        assert!(err.to_string().contains("acme.Unknown"), "{err}");
        let err = codec()
            .parse_any(br#"{"@type":"type.googleapis.com/acme.Nope","x":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("acme.Nope"), "{err}");
    }

    /// A type the pool lacks is the gateway's limit, not a broken resource:
    /// it renders whole as an `xds_gateway.v1.OpaqueAny`, where
    /// it used to fail the render (and NACK the upstream).
    #[test]
    fn nested_unknown_any_renders_opaque() {
        // A Listener whose filter's typed_config names a type the pool lacks.
        let any = prost_types::Any {
            type_url: "type.googleapis.com/acme.Filter".into(),
            value: vec![],
        };
        let c = codec();
        let desc = c.descriptor("envoy.config.listener.v3.Listener").unwrap();
        let mut listener = DynamicMessage::new(desc);
        listener.set_field_by_name("name", prost_reflect::Value::String("l".into()));
        let mut bytes = listener.encode_to_vec();
        // field 3 (filter_chains) → filters (3) → typed_config (4) holding the Any
        let filter = {
            let mut f = Vec::new();
            prost::encoding::message::encode(4, &any, &mut f);
            f
        };
        let chain = {
            let mut c = Vec::new();
            prost::encoding::bytes::encode(3, &filter, &mut c);
            c
        };
        prost::encoding::bytes::encode(3, &chain, &mut bytes);
        let json = c
            .render_any(
                "type.googleapis.com/envoy.config.listener.v3.Listener",
                &bytes,
            )
            .expect("renders");
        let json: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
        let typed = &json["filterChains"][0]["filters"][0]["typedConfig"];
        assert_eq!(typed["@type"], super::super::OPAQUE_TYPE_URL, "{json}");
        assert_eq!(
            typed["typeUrl"], "type.googleapis.com/acme.Filter",
            "{json}"
        );
    }

    #[test]
    fn bad_bytes_are_a_decode_error() {
        let err = codec()
            .render_any(
                "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                &[0xff, 0xff, 0xff],
            )
            .unwrap_err();
        assert!(matches!(err, JsonError::Decode { .. }), "{err}");
    }

    #[test]
    fn map_keys_are_stable() {
        let json = br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c",
          "metadata":{"filter_metadata":{"z":{"a":1},"b":{"c":2},"m":{"q":3}}}}"#;
        let c = codec();
        let any = c.parse_any(json).unwrap();
        let first = c.render_any(&any.type_url, &any.value).unwrap();
        for _ in 0..20 {
            assert_eq!(c.render_any(&any.type_url, &any.value).unwrap(), first);
        }
        let text = std::str::from_utf8(&first).unwrap();
        assert!(text.find(r#""b":"#) < text.find(r#""m":"#));
        assert!(text.find(r#""m":"#) < text.find(r#""z":"#));
    }

    #[test]
    fn float32_is_shortest_and_empty_any_has_no_value() {
        let c = codec();
        let json = br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c",
          "load_balancing_policy":{"policies":[{"typed_extension_config":{"name":"cswrr","typed_config":{
            "@type":"type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin",
            "error_utilization_penalty":0.1}}}]},
          "metadata":{"typed_filter_metadata":{"e":{"@type":"type.googleapis.com/google.protobuf.Empty"}}}}"#;
        let any = c.parse_any(json).unwrap();
        let text =
            String::from_utf8(c.render_any(&any.type_url, &any.value).unwrap().to_vec()).unwrap();
        assert!(text.contains(r#""errorUtilizationPenalty":0.1}"#), "{text}");
        assert!(
            text.contains(r#"{"@type":"type.googleapis.com/google.protobuf.Empty"}"#),
            "{text}"
        );
    }

    #[test]
    fn sixty_four_bit_integers_are_strings() {
        let json = br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"c",
          "ring_hash_lb_config":{"minimum_ring_size": 1024},
          "circuit_breakers":{"thresholds":[{"max_connections":5}]}}"#;
        let c = codec();
        let any = c.parse_any(json).unwrap();
        let text =
            String::from_utf8(c.render_any(&any.type_url, &any.value).unwrap().to_vec()).unwrap();
        assert!(text.contains(r#""minimumRingSize":"1024""#), "{text}");
        assert!(text.contains(r#""maxConnections":5"#), "{text}");
    }
}
