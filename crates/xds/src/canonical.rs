//! Deterministic protobuf encoding of a dynamic message: the same message
//! gives the same bytes every time, in every process.
//!
//! prost-reflect encodes a map field in its `HashMap`'s (randomly seeded)
//! order, so a message parsed from JSON would encode to other bytes on every
//! parse, and its digests (so versions) would differ between replicas and
//! restarts. Here map entries are written in key order, at any depth, and a
//! known `Any`'s payload is re-encoded the same way. Subtrees without a map
//! or an `Any` are encoded by prost-reflect directly. No I/O; never panics.

use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, ReflectMessage, Value};

use super::descriptors::Descriptors;
use super::nesting;

const ANY: &str = "google.protobuf.Any";

/// `msg` encoded with map entries in key order, at any depth.
pub(crate) fn encode(descriptors: &Descriptors, msg: &DynamicMessage) -> Vec<u8> {
    let mut out = Vec::new();
    write_message(descriptors, msg, &mut out);
    out
}

fn write_message(descriptors: &Descriptors, msg: &DynamicMessage, out: &mut Vec<u8>) {
    if !has_map_or_any(msg) {
        msg.encode_raw(out);
        return;
    }
    if msg.descriptor().full_name() == ANY {
        write_any(descriptors, msg, out);
        return;
    }
    for (field, value) in msg.fields() {
        let number = field.number();
        match (value, field.kind()) {
            (Value::Map(map), Kind::Message(entry)) if field.is_map() => {
                let (key_field, value_field) =
                    (entry.map_entry_key_field(), entry.map_entry_value_field());
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    let mut pair = DynamicMessage::new(entry.clone());
                    pair.set_field(&key_field, Value::from(key.clone()));
                    pair.set_field(&value_field, value.clone());
                    write_delimited(number, &encode(descriptors, &pair), out);
                }
            }
            (Value::Message(sub), Kind::Message(_)) if !field.is_group() => {
                write_delimited(number, &encode(descriptors, sub), out);
            }
            (Value::List(items), Kind::Message(_)) if !field.is_group() => {
                for item in items {
                    match item.as_message() {
                        Some(sub) => write_delimited(number, &encode(descriptors, sub), out),
                        None => write_alone(msg, &field, item, out),
                    }
                }
            }
            _ => write_alone(msg, &field, value, out),
        }
    }
    // Extensions and unknown fields (none come from JSON), as prost-reflect
    // writes them.
    if msg.extensions().next().is_some() || msg.unknown_fields().next().is_some() {
        let mut rest = msg.clone();
        for field in msg.descriptor().fields() {
            rest.clear_field(&field);
        }
        rest.encode_raw(out);
    }
}

/// An `Any` with its payload re-encoded (kept as it is when its type is
/// unknown or it does not decode).
fn write_any(descriptors: &Descriptors, any: &DynamicMessage, out: &mut Vec<u8>) {
    let (type_url, value) = super::opaque::any_parts(any).unwrap_or_default();
    let payload = match nesting::decode_any(descriptors, &type_url, &value) {
        Ok(inner) => encode(descriptors, &inner),
        Err(_) => value.to_vec(),
    };
    prost_types::Any {
        type_url,
        value: payload,
    }
    .encode_raw(out);
}

fn write_delimited(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// One field (no map inside) as prost-reflect encodes it alone.
fn write_alone(msg: &DynamicMessage, field: &FieldDescriptor, value: &Value, out: &mut Vec<u8>) {
    let mut alone = DynamicMessage::new(msg.descriptor());
    alone.set_field(field, value.clone());
    alone.encode_raw(out);
}

/// Whether a map or an `Any` is set anywhere in `msg`.
fn has_map_or_any(msg: &DynamicMessage) -> bool {
    msg.descriptor().full_name() == ANY
        || msg.fields().any(|(_, value)| {
            matches!(value, Value::Map(_)) || super::opaque::messages(value).any(has_map_or_any)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Codec;

    const RUNTIME: &str = "envoy.service.runtime.v3.Runtime";

    #[test]
    fn maps_encode_in_key_order_and_decode_to_the_same_message() {
        let codec = Codec::embedded();
        let json =
            br#"{"name": "r", "layer": {"b": 1, "a": {"z": [1, {"y": 2, "x": 3}]}, "c": "s"}}"#;
        let first = encode(
            codec.descriptors(),
            &codec.parse_message(RUNTIME, json, false).unwrap(),
        );
        for _ in 0..16 {
            let msg = codec.parse_message(RUNTIME, json, false).unwrap();
            let bytes = encode(codec.descriptors(), &msg);
            assert_eq!(bytes, first);
            let decoded = DynamicMessage::decode(msg.descriptor(), bytes.as_slice()).unwrap();
            assert_eq!(decoded, msg);
        }
    }

    #[test]
    fn an_any_payload_is_re_encoded_and_one_of_an_unknown_type_kept() {
        let codec = Codec::embedded();
        let json = br#"{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "c",
            "typed_extension_protocol_options": {"p": {"@type": "type.googleapis.com/google.protobuf.Struct",
            "value": {"k1": 1, "k2": 2, "k3": 3, "k4": 4}}}}"#;
        let first = codec.parse_any(json).unwrap().value;
        for _ in 0..16 {
            assert_eq!(codec.parse_any(json).unwrap().value, first);
        }
        let any = DynamicMessage::decode(
            codec.descriptor(ANY).unwrap(),
            prost_types::Any {
                type_url: "type.googleapis.com/no.such.Type".into(),
                value: vec![0xff, 0x01],
            }
            .encode_to_vec()
            .as_slice(),
        )
        .unwrap();
        let bytes = encode(codec.descriptors(), &any);
        let back = prost_types::Any::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.value, [0xff, 0x01]);
    }
}
