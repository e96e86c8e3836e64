//! The upstream's SotW `DiscoveryResponse` as the gateway reads it off the
//! wire: the four fields it uses, and each resource's type URL and bytes
//! as ranges of the received gRPC frame.
//!
//! A SotW push repeats every resource to every session (1,000 identities
//! under one snapshot read 1,000 copies of the same 1,000 resources).
//! Decoded into `envoy_types`' `DiscoveryResponse`, each `Any` costs a
//! `String` and a `Vec<u8>`: two allocations and a copy per resource per
//! session, almost all of them for bytes that are then only compared with
//! what the session holds. Decoded into `bytes::Bytes` fields, each costs
//! two reference counts on the frame instead, still per resource. Here the
//! frame is taken whole (one split of tonic's buffer, see
//! [`super::frame_codec`]) and a resource is two ranges of it: one
//! allocation per response, whatever the number of resources.
//!
//! The parse follows protobuf's rules as prost applies them (the tests
//! compare the two on generated and mutated encodings): the last of a
//! repeated scalar wins, every element of `resources` counts, each of
//! `resource_errors` (rare and small) is decoded by prost, fields not
//! read here (`canary`, `control_plane`, unknown ones,
//! groups included) are skipped as prost's `skip_field` does (nesting
//! bounded as prost bounds it), a known field
//! of the wrong wire type and a truncated field are errors, and the three
//! strings must be UTF-8. A resource's type URL is compared as bytes with
//! the URLs the gateway knows, so one that is not UTF-8 is rejected by the
//! comparison (and shown lossily) instead of failing the whole frame.
//!
//! Nothing kept past the response may point into the frame: the intake
//! copies a payload out when it renders a new resource, and everything
//! else takes resources already held.

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::ResourceError;
use envoy_types::pb::google::protobuf::Any;
use prost::encoding::{check_wire_type, decode_key, decode_varint, WireType};
use prost::Message as _;

/// Why a frame is not a `DiscoveryResponse`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error(transparent)]
    Protobuf(#[from] prost::DecodeError),
    #[error("field {0} runs past the end of the message")]
    Truncated(u32),
    #[error("field {0} ({1}) is not UTF-8")]
    NotUtf8(u32, &'static str),
    #[error("groups nested deeper than {RECURSION_LIMIT} levels")]
    TooDeep,
    #[error("a group of field {0} ends without having started")]
    UnmatchedGroup(u32),
}

/// How deep messages and groups may nest: prost's limit, counted as prost
/// counts it (the response is level 0, a resource's `Any` level 1).
const RECURSION_LIMIT: u32 = 100;

/// `envoy.service.discovery.v3.DiscoveryResponse`, as the SotW stream and
/// unary Fetch read it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SotwResponse {
    pub(crate) version_info: String,
    pub(crate) type_url: String,
    pub(crate) nonce: String,
    /// What the upstream says is wrong with single resources.
    pub(crate) resource_errors: Vec<ResourceError>,
    resources: Vec<AnySpan>,
    frame: Bytes,
}

/// Where one `google.protobuf.Any` of `resources` lies in the frame.
#[derive(Debug, Clone, Copy, Default)]
struct AnySpan {
    type_url: (usize, usize),
    value: (usize, usize),
}

/// One resource of a response: an `Any`'s type URL and value, borrowed
/// from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Payload<'a> {
    pub(crate) type_url: &'a [u8],
    pub(crate) value: &'a [u8],
}

impl<'a> Payload<'a> {
    /// The payload of an `Any` decoded apart (a delta resource, a SotW
    /// resource inside its wrapper).
    pub(crate) fn of(any: &'a Any) -> Payload<'a> {
        Payload {
            type_url: any.type_url.as_bytes(),
            value: &any.value,
        }
    }

    pub(crate) fn is_of(&self, url: &str) -> bool {
        self.type_url == url.as_bytes()
    }

    /// The type URL for a message (lossy where it is not UTF-8).
    pub(crate) fn type_url_lossy(&self) -> String {
        String::from_utf8_lossy(self.type_url).into_owned()
    }
}

impl SotwResponse {
    /// Reads `frame`, one encoded `DiscoveryResponse`.
    pub(crate) fn parse(frame: Bytes) -> Result<SotwResponse, WireError> {
        let mut out = SotwResponse::default();
        let all: &[u8] = &frame;
        let read = |tag| matches!(tag, 1 | 2 | 4 | 5 | 7);
        each_field(
            all,
            (0, all.len()),
            read,
            RECURSION_LIMIT,
            |tag, (start, end)| {
                let field = &all[start..end];
                match tag {
                    1 => out.version_info = utf8(tag, "version_info", field)?,
                    2 => out.resources.push(any_span(all, start, end)?),
                    4 => out.type_url = utf8(tag, "type_url", field)?,
                    7 => out.resource_errors.push(ResourceError::decode(field)?),
                    _ => out.nonce = utf8(tag, "nonce", field)?,
                }
                Ok(())
            },
        )?;
        out.frame = frame;
        Ok(out)
    }

    pub(crate) fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// The resources, in the order they arrived.
    pub(crate) fn resources(&self) -> impl ExactSizeIterator<Item = Payload<'_>> + '_ {
        self.resources.iter().map(|slot| Payload {
            type_url: &self.frame[slot.type_url.0..slot.type_url.1],
            value: &self.frame[slot.value.0..slot.value.1],
        })
    }
}

/// Calls `take` with the number and bounds of every field of the message
/// in `all[start..end]` that `read` names (each must be length-delimited),
/// in order; steps over the others with `budget` levels of nesting left.
fn each_field(
    all: &[u8],
    (start, end): (usize, usize),
    read: impl Fn(u32) -> bool,
    budget: u32,
    mut take: impl FnMut(u32, (usize, usize)) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let scope = &all[..end];
    let mut rest = &all[start..end];
    while !rest.is_empty() {
        let (tag, wire) = decode_key(&mut rest)?;
        if !read(tag) {
            skip(wire, tag, &mut rest, budget)?;
            continue;
        }
        check_wire_type(WireType::LengthDelimited, wire)?;
        let len = decode_varint(&mut rest)?;
        let field_start = scope.len() - rest.len();
        advance(tag, len, &mut rest)?;
        take(tag, (field_start, scope.len() - rest.len()))?;
    }
    Ok(())
}

/// The `Any` in `all[start..end]`: where its type URL and value lie.
fn any_span(all: &[u8], start: usize, end: usize) -> Result<AnySpan, WireError> {
    let mut slot = AnySpan {
        type_url: (start, start),
        value: (start, start),
    };
    let read = |tag| matches!(tag, 1 | 2);
    each_field(
        all,
        (start, end),
        read,
        RECURSION_LIMIT - 1,
        |tag, bounds| {
            match tag {
                1 => slot.type_url = bounds,
                _ => slot.value = bounds,
            }
            Ok(())
        },
    )?;
    Ok(slot)
}

/// Steps `rest` over its first `len` bytes, the rest of field `tag`.
fn advance(tag: u32, len: u64, rest: &mut &[u8]) -> Result<(), WireError> {
    let len = usize::try_from(len)
        .ok()
        .filter(|len| *len <= rest.len())
        .ok_or(WireError::Truncated(tag))?;
    *rest = &rest[len..];
    Ok(())
}

/// Steps over the field `tag` of type `wire` at the start of `rest` (a
/// field the parse does not read), with `budget` levels of nesting left:
/// what prost's `skip_field` does, with the same errors.
fn skip(wire: WireType, tag: u32, rest: &mut &[u8], budget: u32) -> Result<(), WireError> {
    if budget == 0 {
        return Err(WireError::TooDeep);
    }
    let len = match wire {
        WireType::Varint => {
            decode_varint(rest)?;
            0
        }
        WireType::ThirtyTwoBit => 4,
        WireType::SixtyFourBit => 8,
        WireType::LengthDelimited => decode_varint(rest)?,
        WireType::StartGroup => loop {
            let (inner, inner_wire) = decode_key(rest)?;
            if inner_wire == WireType::EndGroup {
                if inner != tag {
                    return Err(WireError::UnmatchedGroup(inner));
                }
                break 0;
            }
            skip(inner_wire, inner, rest, budget - 1)?;
        },
        WireType::EndGroup => return Err(WireError::UnmatchedGroup(tag)),
    };
    advance(tag, len, rest)
}

fn utf8(tag: u32, name: &'static str, field: &[u8]) -> Result<String, WireError> {
    std::str::from_utf8(field)
        .map(str::to_owned)
        .map_err(|_| WireError::NotUtf8(tag, name))
}

#[cfg(any(test, feature = "fuzzing"))]
pub(super) mod fuzz;

#[cfg(test)]
mod tests {
    use super::fuzz::{agree, as_reference, Reference};
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::ControlPlane;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use proptest::prelude::*;
    use prost::Message;

    fn an_any(url: &str, value: &[u8]) -> Any {
        Any {
            type_url: url.into(),
            value: value.to_vec(),
        }
    }

    fn prost_reads(frame: &[u8]) -> Result<Reference, prost::DecodeError> {
        Reference::decode(frame)
    }

    #[test]
    fn reads_what_envoy_types_writes_and_skips_the_rest() {
        let full = DiscoveryResponse {
            version_info: "v7".into(),
            resources: vec![
                an_any("type.example/A", b"\x0a\x01a"),
                an_any("type.example/B", b""),
            ],
            canary: true,
            type_url: "type.example/A".into(),
            nonce: "n3".into(),
            control_plane: Some(ControlPlane {
                identifier: "cp".into(),
            }),
            ..Default::default()
        };
        let frame = Bytes::from(full.encode_to_vec());
        let read = SotwResponse::parse(frame.clone()).unwrap();
        assert_eq!(as_reference(&read), prost_reads(&frame).unwrap());
        assert_eq!(read.resources().len(), 2);
        let first = read.resources().next().unwrap();
        assert!(first.is_of("type.example/A"));
        assert!(!read.resources().nth(1).unwrap().is_of("type.example/A"));
        // The value lies in the frame: nothing was copied.
        assert!(frame.as_ptr_range().contains(&first.value.as_ptr()));
    }

    #[test]
    fn a_type_url_that_is_not_utf8_is_read_and_shown_lossily() {
        // field 2 (resources), length 4: field 1 (type_url), length 2, 0xff 0xfe
        let read =
            SotwResponse::parse(Bytes::from_static(&[0x12, 4, 0x0a, 2, 0xff, 0xfe])).unwrap();
        let payload = read.resources().next().unwrap();
        assert_eq!(payload.type_url_lossy(), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn broken_frames_are_errors() {
        for (frame, why) in [
            (&[0x12, 5, 0x0a][..], "a resource runs past the end"),
            (&[0x12, 2, 0x0a, 5][..], "a type URL runs past its resource"),
            (&[0x08, 1][..], "version_info as a varint"),
            (&[0x12, 2, 0x10, 1][..], "a value as a varint"),
            (&[0x2a, 1, 0xff][..], "a nonce that is not UTF-8"),
            (&[0x00][..], "field 0"),
            (&[0x33][..], "a group that never ends"),
            (&[0x0a][..], "a key without its length"),
        ] {
            assert!(
                SotwResponse::parse(Bytes::from_static(frame)).is_err(),
                "{why}"
            );
            assert!(prost_reads(frame).is_err(), "prost too: {why}");
        }
    }

    /// Unknown groups nested to prost's limit and one past it, at the top
    /// and inside a resource: read and refused as prost reads and refuses
    /// them.
    #[test]
    fn nesting_is_bounded_where_prost_bounds_it() {
        fn groups(depth: usize) -> Vec<u8> {
            // field 9, start group (0x4b) ... end group (0x4c)
            let mut out = vec![0x4b; depth];
            out.extend(std::iter::repeat_n(0x4c, depth));
            out
        }
        let mut seen = std::collections::BTreeSet::new();
        for depth in 97..=101 {
            let top = groups(depth);
            let mut inside = vec![0x12];
            prost::encoding::encode_varint(top.len() as u64, &mut inside);
            inside.extend_from_slice(&top);
            for (place, frame) in [("top", top), ("inside", inside)] {
                let ours = SotwResponse::parse(Bytes::from(frame.clone())).is_ok();
                let theirs = prost_reads(&frame).is_ok();
                assert_eq!(ours, theirs, "{place}, depth {depth}");
                seen.insert((place, theirs));
            }
        }
        // Both places were read and refused somewhere in the range.
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    fn response() -> impl Strategy<Value = DiscoveryResponse> {
        let url = prop_oneof![
            Just("type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned()),
            "[a-z./]{0,12}",
        ];
        let anys = prop::collection::vec(
            (url, prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(u, v)| an_any(&u, &v)),
            0..12,
        );
        (".{0,8}", anys, ".{0,8}", ".{0,8}", any::<bool>()).prop_map(
            |(version_info, resources, type_url, nonce, canary)| DiscoveryResponse {
                version_info,
                resources,
                type_url,
                nonce,
                canary,
                control_plane: canary.then(|| ControlPlane {
                    identifier: "cp".into(),
                }),
                ..Default::default()
            },
        )
    }

    /// A type URL that is not UTF-8, then another for the same resource
    /// (the last wins): read, as prost reads the URL as bytes. Found by the
    /// `upstream_response` fuzz target, whose oracle then wrongly expected
    /// prost's `string` refusal.
    #[test]
    fn a_type_url_that_is_not_utf8_and_then_replaced_is_read() {
        // resources: type_url 0xff, type_url "t", value "v"
        let frame = [0x12, 9, 0x0a, 1, 0xff, 0x0a, 1, b't', 0x12, 1, b'v'];
        let read = SotwResponse::parse(Bytes::copy_from_slice(&frame)).unwrap();
        let payload = read.resources().next().unwrap();
        assert_eq!((payload.type_url, payload.value), (&b"t"[..], &b"v"[..]));
        assert_eq!(agree(&frame), Ok(true));
    }

    /// Every encoding, and every mutation of one (a byte changed, cut
    /// short, or bytes spliced in), reads as prost reads it (`fuzz::agree`).
    fn agrees_with_prost(frame: &[u8]) -> Result<(), TestCaseError> {
        agree(frame).map(drop).map_err(TestCaseError::fail)
    }

    proptest! {
        #![proptest_config(xds_gateway_base::testing::proptest_config(512))]

        #[test]
        fn reads_as_prost_does(
            message in response(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
            splice in prop::collection::vec(any::<u8>(), 0..6),
        ) {
            let frame = message.encode_to_vec();
            agrees_with_prost(&frame)?;
            if frame.is_empty() {
                return Ok(());
            }
            let mut changed = frame.clone();
            changed[at.index(frame.len())] = byte;
            agrees_with_prost(&changed)?;
            agrees_with_prost(&frame[..cut.index(frame.len())])?;
            let mut spliced = frame.clone();
            let place = at.index(frame.len());
            spliced.splice(place..place, splice);
            agrees_with_prost(&spliced)?;
        }
    }
}
