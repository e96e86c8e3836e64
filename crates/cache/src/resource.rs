//! One upstream resource, decoded and rendered ([`Resource`]), and what goes
//! with it: its name read straight from the wire ([`name_of`]), how a delta
//! upstream named one of a delta-only type ([`WrapperName`]), why one could
//! not be taken ([`ResourceError`]), and the idle-bounded memo every cache
//! memo is built as ([`idle_memo`]). A leaf of `cache` but for
//! `opaque_types.rs`: what holds or makes resources names it, never back.

use bytes::Bytes;
use moka::sync::Cache;

use super::opaque_types::OpaqueHeld;
use crate::xds::dynamic_parameters::{Variant, VariantError};
use crate::xds::{JsonError, ResourceType, Violation};

/// Why a resource could not be taken.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResourceError {
    #[error(transparent)]
    Json(#[from] JsonError),
    /// It decodes, but breaks a rule Envoy checks (so Envoy would reject it).
    #[error("{type_name} {name:?} breaks Envoy's rule at {violation}")]
    Invalid {
        type_name: &'static str,
        name: String,
        violation: Violation,
    },
    /// Its dynamic parameter constraints break Envoy's rules or do not render.
    #[error(transparent)]
    Variant(#[from] VariantError),
}

/// SHA-256 of a resource's protobuf bytes.
pub(crate) type Digest = [u8; 32];

/// A decoded, rendered resource. Immutable; shared by every state holding it.
#[derive(Debug)]
pub struct Resource {
    pub kind: ResourceType,
    pub name: String,
    /// Other names the upstream delivered it for (VHDS `<route
    /// configuration>/<domain>` aliases); empty for every other type.
    pub aliases: Vec<String>,
    pub digest: Digest,
    /// The `Any` payload as the upstream sent it.
    pub payload: Bytes,
    /// Canonical JSON of the `Any` (`{"@type": ..., ...}`); for a delta-only
    /// type, of the delta `Resource` wrapper holding it.
    pub json: Bytes,
    /// The types of the `Any`s inside it served opaque (`xds::opaque`).
    pub opaque: OpaqueHeld,
    /// Whether it holds key material as sent (`--allow-secrets`); false when
    /// it had it taken out (`xds::keys`).
    pub holds_keys: bool,
    /// The dynamic parameter constraints of a variant (xDS TP2); `json` is
    /// then the `Resource` wrapper carrying them, and `digest` covers them.
    pub variant: Option<Box<Variant>>,
}

/// How a delta upstream named a resource of a delta-only type.
#[derive(Debug, Clone, Default)]
pub struct WrapperName {
    pub name: String,
    pub aliases: Vec<String>,
    /// The upstream's per-resource version.
    pub version: String,
}

/// Type URL of the delta wrapper the delta-only types are rendered in.
pub const RESOURCE_WRAPPER: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// A memo of at most `entries` entries, each dropped after `idle` unused.
pub fn idle_memo<K, V>(entries: u64, idle: std::time::Duration) -> Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(entries)
        .time_to_idle(idle)
        .build()
}

/// The name of a resource of `kind` read straight from its bytes: its name
/// fields' strings joined with `/` ([`ResourceType::name_fields`]).
pub(crate) fn name_of(kind: ResourceType, buf: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    match kind.name_fields() {
        [one] => field_string(buf, *one).map(std::borrow::Cow::Borrowed),
        fields => {
            let parts: Vec<Option<&str>> = fields.iter().map(|f| field_string(buf, *f)).collect();
            if parts.iter().all(Option::is_none) {
                return None;
            }
            let joined: Vec<&str> = parts.into_iter().map(Option::unwrap_or_default).collect();
            Some(std::borrow::Cow::Owned(joined.join("/")))
        }
    }
}

/// The last value of length-delimited field `number` as UTF-8.
fn field_string(mut buf: &[u8], number: u32) -> Option<&str> {
    use prost::encoding::{decode_key, decode_varint, WireType};
    let mut name = None;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        match wire {
            WireType::Varint => {
                decode_varint(&mut buf).ok()?;
            }
            WireType::SixtyFourBit => buf = buf.get(8..)?,
            WireType::ThirtyTwoBit => buf = buf.get(4..)?,
            WireType::LengthDelimited => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let (field, rest) = (buf.get(..len)?, buf.get(len..)?);
                if tag == number {
                    // Last one wins, as in protobuf.
                    name = Some(std::str::from_utf8(field).ok()?);
                }
                buf = rest;
            }
            WireType::StartGroup | WireType::EndGroup => return None,
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::Codec;
    use prost_reflect::Kind;

    #[test]
    fn field_one_is_the_name_of_every_served_type() {
        let codec = Codec::embedded();
        for kind in ResourceType::BUILT_IN
            .into_iter()
            .filter(|k| !k.delta_only())
        {
            let desc = codec.descriptor(kind.message_name()).unwrap();
            let field = desc.get_field(1).unwrap();
            assert!(matches!(field.kind(), Kind::String), "{kind}");
            assert!(
                ["name", "cluster_name"].contains(&field.name()),
                "{kind}: {}",
                field.name()
            );
        }
    }

    #[test]
    fn names_from_wire_and_garbage_is_none() {
        assert_eq!(
            name_of(ResourceType::Clusters, &[0x0a, 0x01, b'x', 0x10, 0x05]).as_deref(),
            Some("x")
        );
        assert_eq!(name_of(ResourceType::Clusters, &[0x0a, 0x05, b'x']), None);
        assert_eq!(name_of(ResourceType::Clusters, &[0xff]), None);
        assert_eq!(name_of(ResourceType::Clusters, &[]), None);
    }
}
