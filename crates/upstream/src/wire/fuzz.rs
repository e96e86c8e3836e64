//! The `upstream_response` fuzz target's body (see the gateway's
//! `xds_gateway::fuzz`): a frame read by [`SotwResponse::parse`] and by
//! prost, which must agree exactly: the same fields, or both refuse it.
//! The reference is a prost message knowing only the fields the parse
//! reads (protobuf's rules for a reader that takes every other field for
//! an unknown one), with a resource's type URL as bytes, as the parse reads
//! it: one that is not UTF-8 is left to the type check, which rejects it by
//! name.

use prost::Message;

use super::SotwResponse;

/// `DiscoveryResponse` with only the fields the parse reads.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Reference {
    #[prost(string, tag = "1")]
    pub(crate) version_info: String,
    #[prost(message, repeated, tag = "2")]
    pub(crate) resources: Vec<ReferenceAny>,
    #[prost(string, tag = "4")]
    pub(crate) type_url: String,
    #[prost(string, tag = "5")]
    pub(crate) nonce: String,
    #[prost(message, repeated, tag = "7")]
    pub(crate) resource_errors: Vec<envoy_types::pb::envoy::service::discovery::v3::ResourceError>,
}

/// `google.protobuf.Any` with its type URL as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ReferenceAny {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) type_url: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) value: Vec<u8>,
}

/// A parse, in the reference's terms.
pub(crate) fn as_reference(read: &SotwResponse) -> Reference {
    Reference {
        version_info: read.version_info.clone(),
        resources: read
            .resources()
            .map(|p| ReferenceAny {
                type_url: p.type_url.to_vec(),
                value: p.value.to_vec(),
            })
            .collect(),
        type_url: read.type_url.clone(),
        nonce: read.nonce.clone(),
        resource_errors: read.resource_errors.clone(),
    }
}

/// Whether the parse of `frame` agrees with prost's (`Err`: how not), and
/// if so whether it was accepted.
pub(crate) fn agree(frame: &[u8]) -> Result<bool, String> {
    let ours = SotwResponse::parse(bytes::Bytes::copy_from_slice(frame));
    match (ours, Reference::decode(frame)) {
        (Ok(read), Ok(theirs)) => {
            let read = as_reference(&read);
            if read == theirs {
                Ok(true)
            } else {
                Err(format!("parsed {read:?}, prost read {theirs:?}"))
            }
        }
        (Err(_), Err(_)) => Ok(false),
        (Ok(_), Err(e)) => Err(format!("prost refused it ({e}), the parse did not")),
        (Err(e), Ok(_)) => Err(format!("prost read it, the parse said {e}")),
    }
}

/// The target: panics where the two disagree.
pub fn upstream_response(frame: &[u8]) -> bool {
    agree(frame).unwrap_or_else(|why| panic!("{why}"))
}
