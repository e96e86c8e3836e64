//! Key material in any resource: which fields hold it, and finding it or
//! taking it out of a decoded message.
//!
//! SDS is not the only place a private key travels: a cluster's or a
//! listener's TLS context may carry one inline, and an `Any` of a type the
//! gateway has no descriptor for (a `Secret` of another API version) carries
//! whatever it holds. A field holds key material when Envoy's API marks it
//! `udpa.annotations.sensitive` and it sits in one of the TLS secret types
//! (`HOLDERS`), or is a sensitive field named `private_key` anywhere
//! (`GrpcService`'s `SslCredentials`). Other sensitive fields (filter
//! credentials) are configuration a client needs, and are left alone.
//!
//! Taken out, an inline `DataSource` holds [`REDACTED`] as its
//! `inline_string` (one naming a file or an environment variable is no key,
//! and stays); an `Any` holding key material, or of an unknown type named as
//! a carrier (`CARRIERS`), becomes an `xds_gateway.v1.OpaqueAny` with its type
//! URL, no bytes and `redacted` saying why; any other string or bytes becomes
//! [`REDACTED`]. Walks go through the `Any`s the pool knows, at any depth
//! (`nesting` has bounded them). No I/O; never panics.

use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, MapKey, MessageDescriptor, ReflectMessage, Value,
};

use super::canonical;
use super::descriptors::Descriptors;
use super::opaque::{any_parts, OPAQUE_TYPE_URL};

/// What key material is replaced by.
pub const REDACTED: &str = "[redacted: --allow-secrets is off]";

/// The TLS types whose sensitive fields hold key material, by name (any
/// package or version).
pub(crate) const HOLDERS: &[&str] = &[
    "TlsCertificate",
    "PrivateKeyProvider",
    "TlsSessionTicketKeys",
    "GenericSecret",
];

/// The types that carry key material, in their own fields or in those of
/// a message inside them: an `Any` of an unknown type of one of these
/// names is taken out whole.
pub(crate) const CARRIERS: &[&str] = &[
    "Secret",
    "TlsCertificate",
    "PrivateKeyProvider",
    "TlsSessionTicketKeys",
    "GenericSecret",
    "CommonTlsContext",
    "UpstreamTlsContext",
    "DownstreamTlsContext",
];

const SENSITIVE: &str = "udpa.annotations.sensitive";
const ANY: &str = "google.protobuf.Any";

/// Where key material sits in `msg` (paths from the resource down, as
/// `transport_socket.typed_config(UpstreamTlsContext).common_tls_context`);
/// with `take_out`, each is replaced as the module says.
pub fn key_material(
    descriptors: &Descriptors,
    msg: &mut DynamicMessage,
    take_out: bool,
) -> Vec<String> {
    let mut walk = Walk {
        descriptors,
        take_out,
        path: Vec::new(),
        found: Vec::new(),
    };
    walk.message(msg);
    walk.found
}

/// `msg` encoded (deterministically) as the payload kept once key material
/// was taken out.
pub fn encoded(descriptors: &Descriptors, msg: &DynamicMessage) -> bytes::Bytes {
    canonical::encode(descriptors, msg).into()
}

/// Whether `type_url` names one of the `CARRIERS`, in any package.
pub fn names_a_carrier(type_url: &str) -> bool {
    let short = type_url.rsplit(['/', '.']).next().unwrap_or(type_url);
    CARRIERS.contains(&short)
}

/// The bytes of an `xds_gateway.v1.OpaqueAny` standing for an `Any` of
/// `type_url` whose bytes were taken out.
pub fn taken_out_any(type_url: &str) -> bytes::Bytes {
    TakenOut {
        type_url: type_url.to_owned(),
        value: Vec::new(),
        redacted: REDACTED.to_owned(),
    }
    .encode_to_vec()
    .into()
}

/// Whether an `Any` of `type_url` holding `payload` is a [`taken_out_any`].
fn is_taken_out(type_url: &str, payload: &[u8]) -> bool {
    type_url == OPAQUE_TYPE_URL
        && TakenOut::decode(payload).is_ok_and(|t| t.value.is_empty() && t.redacted == REDACTED)
}

/// `xds_gateway.v1.OpaqueAny`, as prost reads and writes it.
#[derive(Clone, PartialEq, prost::Message)]
struct TakenOut {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
    #[prost(string, tag = "3")]
    redacted: String,
}

/// Whether `field` holds key material (see the module's comment).
fn is_key_field(field: &FieldDescriptor) -> bool {
    if !HOLDERS.contains(&field.parent_message().name()) && field.name() != "private_key" {
        return false;
    }
    let sensitive = field.parent_pool().get_extension_by_name(SENSITIVE);
    sensitive.is_some_and(|s| field.options().get_extension(&s).as_bool() == Some(true))
}

/// One step of the path from the resource down to where the walk is,
/// written out only where key material is found.
enum Step {
    Field(FieldDescriptor),
    Index(usize),
    Key(MapKey),
    /// Into the message an `Any` holds.
    Inside(MessageDescriptor),
}

struct Walk<'a> {
    descriptors: &'a Descriptors,
    take_out: bool,
    path: Vec<Step>,
    found: Vec<String>,
}

impl Walk<'_> {
    /// Notes the path walked so far (`a.b[0].c(Inner).d`).
    fn note(&mut self) {
        let mut path = String::new();
        for step in &self.path {
            match step {
                Step::Field(field) => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(field.name());
                }
                Step::Index(i) => path.push_str(&format!("[{i}]")),
                Step::Key(key) => path.push_str(&format!("[{}]", map_key(key))),
                Step::Inside(message) => path.push_str(&format!("({})", message.name())),
            }
        }
        self.found.push(path);
    }

    /// Walks `msg`; whether it changed it.
    fn message(&mut self, msg: &mut DynamicMessage) -> bool {
        if msg.descriptor().full_name() == ANY {
            return self.any(msg);
        }
        self.fields(msg, false)
    }

    /// Walks each field of `msg`: a key field (every one, with `all`) by
    /// [`take`](Self::take), any other by [`value`](Self::value).
    fn fields(&mut self, msg: &mut DynamicMessage, all: bool) -> bool {
        let mut changed = false;
        for (field, value) in msg.fields_mut() {
            let key = all || is_key_field(&field);
            self.path.push(Step::Field(field));
            changed |= if key {
                self.take(value)
            } else {
                self.value(value)
            };
            self.path.pop();
        }
        changed
    }

    fn value(&mut self, value: &mut Value) -> bool {
        self.each(value, Walk::message, Walk::value)
    }

    /// `value`'s message walked by `on_message`, or its items or map values
    /// by `on_item`; whether anything changed.
    fn each(
        &mut self,
        value: &mut Value,
        on_message: fn(&mut Self, &mut DynamicMessage) -> bool,
        on_item: fn(&mut Self, &mut Value) -> bool,
    ) -> bool {
        match value {
            Value::Message(sub) => on_message(self, sub),
            Value::List(items) => {
                let mut changed = false;
                for (i, item) in items.iter_mut().enumerate() {
                    self.path.push(Step::Index(i));
                    changed |= on_item(self, item);
                    self.path.pop();
                }
                changed
            }
            Value::Map(entries) => {
                let mut changed = false;
                for (key, item) in entries.iter_mut() {
                    self.path.push(Step::Key(key.clone()));
                    changed |= on_item(self, item);
                    self.path.pop();
                }
                changed
            }
            _ => false,
        }
    }

    /// An `Any` outside key fields: its payload walked when the pool knows
    /// its type, else taken out whole if the type is named as a carrier.
    fn any(&mut self, msg: &mut DynamicMessage) -> bool {
        let Some((type_url, payload)) = any_parts(msg).filter(|(url, _)| !url.is_empty()) else {
            return false;
        };
        let Ok(desc) = self.descriptors.for_type_url(&type_url) else {
            if !names_a_carrier(&type_url) {
                return false;
            }
            self.note();
            return self.take_out && replace_any(msg, &type_url);
        };
        let Ok(mut inner) = DynamicMessage::decode(desc.clone(), payload) else {
            return false;
        };
        // Named after the field holding the `Any` (none at the top).
        let inside = !self.path.is_empty();
        if inside {
            self.path.push(Step::Inside(desc.clone()));
        }
        let changed = self.message(&mut inner);
        if inside {
            self.path.pop();
        }
        if !changed {
            return false;
        }
        let value = Value::Bytes(canonical::encode(self.descriptors, &inner).into());
        msg.try_set_field_by_name("value", value).is_ok()
    }

    /// A value of a key field, taken out as the module says.
    fn take(&mut self, value: &mut Value) -> bool {
        let redacted = match value {
            Value::String(s) if !s.is_empty() && s != REDACTED => {
                Value::String(REDACTED.to_owned())
            }
            Value::Bytes(b) if !b.is_empty() && b != REDACTED.as_bytes() => {
                Value::Bytes(bytes::Bytes::from_static(REDACTED.as_bytes()))
            }
            _ => return self.each(value, Walk::take_message, Walk::take),
        };
        self.note();
        if self.take_out {
            *value = redacted;
        }
        self.take_out
    }

    /// A message in a key field: a `DataSource` loses its inline bytes,
    /// an `Any` its payload, any other message every string and bytes.
    fn take_message(&mut self, msg: &mut DynamicMessage) -> bool {
        let desc = msg.descriptor();
        if desc.name() == "DataSource" {
            let marked = msg
                .get_field_by_name("inline_string")
                .is_some_and(|v| v.as_str() == Some(REDACTED));
            let inline = ["inline_bytes", "inline_string"]
                .iter()
                .any(|f| msg.has_field_by_name(f));
            if !inline || marked {
                return false;
            }
            self.note();
            let marker = Value::String(REDACTED.to_owned());
            return self.take_out && msg.try_set_field_by_name("inline_string", marker).is_ok();
        }
        if desc.full_name() == ANY {
            let Some((type_url, _)) = any_parts(msg)
                .filter(|(url, payload)| !url.is_empty() && !is_taken_out(url, payload))
            else {
                return false;
            };
            self.note();
            return self.take_out && replace_any(msg, &type_url);
        }
        self.fields(msg, true)
    }
}

/// `msg`, an `Any` of `type_url`, made its [`taken_out_any`]; whether it was.
fn replace_any(msg: &mut DynamicMessage, type_url: &str) -> bool {
    let url = Value::String(OPAQUE_TYPE_URL.to_owned());
    let value = Value::Bytes(taken_out_any(type_url));
    msg.try_set_field_by_name("type_url", url).is_ok()
        && msg.try_set_field_by_name("value", value).is_ok()
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Codec;
    use std::collections::BTreeSet;

    const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

    fn cluster(codec: &Codec, tls: &str) -> DynamicMessage {
        let json = format!(
            r#"{{"@type": "{CDS}", "name": "c", "transport_socket": {{"name": "tls",
            "typed_config": {{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {tls}}}}}}}"#
        );
        let any = codec.parse_any(json.as_bytes()).expect("fixture");
        codec.decode_any(CDS, &any.value).expect("decodes")
    }

    fn render(codec: &Codec, msg: &DynamicMessage) -> serde_json::Value {
        let json = codec.render_resource(CDS, msg).expect("renders");
        serde_json::from_slice(&json).expect("JSON")
    }

    /// Every field of the embedded API that holds key material: the
    /// sensitive fields of the TLS secret types and the sensitive
    /// `private_key`s, and nothing else.
    #[test]
    fn the_key_fields_of_envoys_api() {
        let codec = Codec::embedded();
        let pool = codec.pool();
        let found: BTreeSet<String> = pool
            .all_messages()
            .flat_map(|m| m.fields().collect::<Vec<_>>())
            .filter(is_key_field)
            .map(|f| f.full_name().to_owned())
            .collect();
        let tls = "envoy.extensions.transport_sockets.tls.v3";
        let expected: BTreeSet<String> = [
            &format!("{tls}.TlsCertificate.private_key"),
            &format!("{tls}.TlsCertificate.pkcs12"),
            &format!("{tls}.TlsCertificate.password"),
            &format!("{tls}.PrivateKeyProvider.typed_config"),
            &format!("{tls}.TlsSessionTicketKeys.keys"),
            &format!("{tls}.GenericSecret.secret"),
            &format!("{tls}.GenericSecret.secrets"),
            "envoy.config.core.v3.GrpcService.GoogleGrpc.SslCredentials.private_key",
            "envoy.extensions.common.aws.v3.IAMRolesAnywhereCredentialProvider.private_key",
        ]
        .into_iter()
        .map(|s| s.to_owned())
        .collect();
        assert_eq!(found, expected);
        // Every holder is a carrier; every carrier exists in the API.
        for name in HOLDERS.iter().chain(CARRIERS) {
            assert!(CARRIERS.contains(name), "{name}");
            assert!(
                pool.get_message_by_name(&format!("{tls}.{name}")).is_some(),
                "{name}"
            );
        }
    }

    #[test]
    fn inline_keys_are_taken_out_and_the_rest_left_as_it_was() {
        let codec = Codec::embedded();
        let mut msg = cluster(
            &codec,
            r#"{"tls_certificates": [
                {"certificate_chain": {"inline_string": "chain"}, "private_key": {"inline_string": "k1"}},
                {"private_key": {"inline_bytes": "azI="}, "password": {"inline_string": "pw"}},
                {"private_key": {"filename": "/etc/key.pem"}}]}"#,
        );
        let paths = key_material(codec.descriptors(), &mut msg, false);
        let base =
            "transport_socket.typed_config(UpstreamTlsContext).common_tls_context.tls_certificates";
        assert_eq!(
            paths,
            [
                format!("{base}[0].private_key"),
                format!("{base}[1].private_key"),
                format!("{base}[1].password"),
            ]
        );
        assert!(
            render(&codec, &msg).to_string().contains("k1"),
            "found, not taken"
        );
        assert_eq!(key_material(codec.descriptors(), &mut msg, true), paths);
        let json = render(&codec, &msg);
        let certs = &json["transportSocket"]["typedConfig"]["commonTlsContext"]["tlsCertificates"];
        assert_eq!(certs[0]["certificateChain"]["inlineString"], "chain");
        assert_eq!(certs[0]["privateKey"]["inlineString"], REDACTED);
        assert_eq!(
            certs[1]["privateKey"],
            serde_json::json!({"inlineString": REDACTED})
        );
        assert_eq!(certs[1]["password"]["inlineString"], REDACTED);
        assert_eq!(certs[2]["privateKey"]["filename"], "/etc/key.pem");
        assert!(
            key_material(codec.descriptors(), &mut msg, false).is_empty(),
            "the marker is no key"
        );
    }

    #[test]
    fn a_private_key_provider_is_taken_out_whole() {
        let codec = Codec::embedded();
        let mut msg = cluster(
            &codec,
            r#"{"tls_certificates": [{"private_key_provider": {"provider_name": "hsm",
                "typed_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": "k"}}}]}"#,
        );
        assert_eq!(key_material(codec.descriptors(), &mut msg, true).len(), 1);
        let json = render(&codec, &msg);
        let provider = &json["transportSocket"]["typedConfig"]["commonTlsContext"]
            ["tlsCertificates"][0]["privateKeyProvider"];
        assert_eq!(provider["providerName"], "hsm");
        assert_eq!(provider["typedConfig"]["@type"], OPAQUE_TYPE_URL);
        assert_eq!(
            provider["typedConfig"]["typeUrl"],
            "type.googleapis.com/google.protobuf.StringValue"
        );
        assert_eq!(provider["typedConfig"]["redacted"], REDACTED);
        assert!(provider["typedConfig"].get("value").is_none(), "{json}");
    }

    #[test]
    fn an_unknown_type_is_taken_out_only_when_named_as_a_carrier() {
        for (url, carrier) in [
            ("type.googleapis.com/envoy.api.v2.auth.Secret", true),
            (
                "type.googleapis.com/envoy.api.v2.auth.UpstreamTlsContext",
                true,
            ),
            ("acme.example/tls.v9.TlsCertificate", true),
            (
                "type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig",
                false,
            ),
            ("type.googleapis.com/acme.SecretSauce", false),
        ] {
            assert_eq!(names_a_carrier(url), carrier, "{url}");
        }
    }

    #[test]
    fn a_message_without_keys_is_left_alone() {
        let codec = Codec::embedded();
        let mut msg = cluster(
            &codec,
            r#"{"tls_certificates": [{"certificate_chain": {"inline_string": "chain"}}]}"#,
        );
        let before = msg.clone();
        assert!(key_material(codec.descriptors(), &mut msg, true).is_empty());
        assert_eq!(msg, before);
    }
}
