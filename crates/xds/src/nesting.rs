//! How deep a decoded message goes, counted through `Any` payloads, and
//! the bound every decoded resource is held to.
//!
//! Protobuf decoding stops at 100 levels, but an `Any`'s payload is decoded
//! afresh when something unpacks it, and the intake, the rewrite and the
//! validator unpack recursively: a small resource of deeply nested `Any`s
//! could overflow a worker's stack. So [`check`] refuses a message nested
//! deeper than any message that renders (JSON is at most 128 levels, each at
//! most two message levels: `Struct` and `Value`), or with more `Any`s inside
//! `Any`s than any real configuration has; [`decode_any`], the one way a
//! payload is decoded, is held to it. No I/O; payloads are not copied.

use prost_reflect::{DynamicMessage, ReflectMessage};

use super::descriptors::Descriptors;
use super::json_error::JsonError;

/// Deepest message nesting, counted through `Any` payloads (`Struct`s
/// inside 128 levels of JSON take 256, plus the message holding them).
pub(crate) const MAX_DEPTH: usize = 257;
/// Most `Any`s inside `Any`s (a typed_config in a typed_config ...).
pub(crate) const MAX_ANY_DEPTH: usize = 32;

const ANY: &str = "google.protobuf.Any";

/// Decodes an `Any`'s payload into a dynamic message of its type;
/// refuses one nested deeper than anything renders, counting through the
/// `Any`s inside it ([`check`]), which would otherwise exhaust the stack of
/// whatever walks it.
pub(crate) fn decode_any(
    descriptors: &Descriptors,
    type_url: &str,
    value: &[u8],
) -> Result<DynamicMessage, JsonError> {
    let desc = descriptors.for_type_url(type_url)?;
    let decode_error = |reason| JsonError::decode(type_url, reason);
    let msg = DynamicMessage::decode(desc, value).map_err(|e| decode_error(e.to_string()))?;
    check(descriptors, &msg).map_err(decode_error)?;
    Ok(msg)
}

/// Whether `msg` is within [`MAX_DEPTH`] and [`MAX_ANY_DEPTH`]; if not,
/// why not. An `Any` of an unknown type, or whose payload does not decode,
/// counts as a leaf (whatever unpacks it refuses it).
pub(crate) fn check(descriptors: &Descriptors, msg: &DynamicMessage) -> Result<(), String> {
    within(descriptors, msg, 1, 0)
}

fn within(
    descriptors: &Descriptors,
    msg: &DynamicMessage,
    depth: usize,
    anys: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "messages nested more than {MAX_DEPTH} deep (counting through Any payloads)"
        ));
    }
    if msg.descriptor().full_name() == ANY {
        if anys == MAX_ANY_DEPTH {
            return Err(format!(
                "Any payloads nested more than {MAX_ANY_DEPTH} deep"
            ));
        }
        let Some((type_url, payload)) = super::opaque::any_parts(msg) else {
            return Ok(());
        };
        let Ok(desc) = descriptors.for_type_url(&type_url) else {
            return Ok(());
        };
        // `Bytes`: the payload is sliced, not copied.
        return match DynamicMessage::decode(desc, payload) {
            Ok(inner) => within(descriptors, &inner, depth + 1, anys + 1),
            Err(_) => Ok(()),
        };
    }
    msg.fields()
        .flat_map(|(_, value)| super::opaque::messages(value))
        .try_for_each(|sub| within(descriptors, sub, depth + 1, anys))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::json::Codec;
    use crate::rewrite::{rewrite_config_sources, RestTarget};

    const ANY_URL: &str = "type.googleapis.com/google.protobuf.Any";
    const TYPED_EXTENSION_CONFIG: &str =
        "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

    /// A TypedExtensionConfig whose typed_config is `levels` `Any`s, one
    /// inside the other, around an Empty.
    fn nested_anys(levels: usize) -> Vec<u8> {
        let mut any = prost_types::Any {
            type_url: "type.googleapis.com/google.protobuf.Empty".into(),
            value: Vec::new(),
        };
        for _ in 0..levels {
            any = prost_types::Any {
                type_url: ANY_URL.into(),
                value: any.encode_to_vec(),
            };
        }
        envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig {
            name: "x".into(),
            typed_config: Some(envoy_types::pb::google::protobuf::Any {
                type_url: any.type_url,
                value: any.value,
            }),
        }
        .encode_to_vec()
    }

    /// Found with hand-built input to the proto_to_json and rewrite fuzz
    /// targets (fuzz/corpus/{proto_to_json,rewrite}/seed-any-nested-40 hold
    /// a small one): 5000 levels overflowed a 2 MB stack in the intake and
    /// in the rewrite. Now refused at decode, on a stack as small as a
    /// tokio worker's, quickly.
    #[test]
    fn deeply_nested_anys_are_refused_not_a_crash() {
        let bytes = nested_anys(5000);
        let worker = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let codec = Codec::embedded();
                let render = codec.render_any(TYPED_EXTENSION_CONFIG, &bytes);
                let target = RestTarget {
                    cluster_name: "xds".into(),
                    refresh_delay: std::time::Duration::from_secs(1),
                    request_timeout: std::time::Duration::from_secs(1),
                };
                let rewrite =
                    rewrite_config_sources(&codec, TYPED_EXTENSION_CONFIG, &bytes, &target);
                (render.map(|_| ()), rewrite.map(|_| ()))
            })
            .unwrap();
        let (render, rewrite) = worker.join().expect("the worker ran");
        for result in [render, rewrite] {
            let message = result.unwrap_err().to_string();
            assert!(message.contains("nested more than 32 deep"), "{message}");
        }
    }

    #[test]
    fn real_nesting_is_within_the_bounds() {
        let codec = Codec::embedded();
        for levels in [0, 1, MAX_ANY_DEPTH - 1] {
            let bytes = nested_anys(levels);
            assert!(
                codec.render_any(TYPED_EXTENSION_CONFIG, &bytes).is_ok(),
                "{levels} levels"
            );
        }
        // A Struct 30 JSON levels deep renders (90 message levels, counting
        // the map entries: prost-reflect renders a Struct through prost,
        // whose decoding stops at 100).
        let mut json = String::from("1");
        for _ in 0..30 {
            json = format!("{{\"k\": {json}}}");
        }
        let runtime = format!(
            r#"{{"@type": "type.googleapis.com/envoy.service.runtime.v3.Runtime", "name": "r", "layer": {json}}}"#
        );
        let any = codec.parse_any(runtime.as_bytes()).unwrap();
        codec.render_any(&any.type_url, &any.value).unwrap();
    }
}
