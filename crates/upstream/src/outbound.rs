//! A request of a session's stream as it goes upstream: the request, and
//! the session's node as the bytes the session holds it in
//! ([`NodeBytes`]), written into the gRPC frame where prost writes the
//! node's field, so the frame reads as the request with that node.
//!
//! The node goes on every request by default, as Envoy sends it: each ACK
//! of every session, per push. Built as a prost `Node` per request, it was
//! decoded from those bytes (an Envoy node's 516 extensions), encoded into
//! the frame and dropped, per session per push: more than the rest of a
//! push's work on the upstream side. Written as held, it is
//! three copies of bytes.

use bytes::BufMut;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::encoding::{encode_key, encode_varint, string, WireType};
use prost::Message;

use super::frame_codec::ToFrame;
use crate::store::NodeBytes;

/// A request of a session's stream and the node it carries, if any.
#[derive(Debug)]
pub(crate) struct Outbound<R> {
    /// The request; its own node field is always empty.
    request: R,
    node: Option<NodeBytes>,
}

/// A request message with a node field.
pub(crate) trait NodeField {
    fn node_field(&mut self) -> &mut Option<envoy_types::pb::envoy::config::core::v3::Node>;
}

impl NodeField for DiscoveryRequest {
    fn node_field(&mut self) -> &mut Option<envoy_types::pb::envoy::config::core::v3::Node> {
        &mut self.node
    }
}

impl NodeField for DeltaDiscoveryRequest {
    fn node_field(&mut self) -> &mut Option<envoy_types::pb::envoy::config::core::v3::Node> {
        &mut self.node
    }
}

impl<R: NodeField> Outbound<R> {
    /// `request` carrying `node`, or no node when `None` (a node the
    /// request itself holds is not sent: the session's is `node`).
    pub(crate) fn new(mut request: R, node: Option<NodeBytes>) -> Outbound<R> {
        *request.node_field() = None;
        Outbound { request, node }
    }
}

/// Writes `node` as field `tag` of the message being written.
fn put_node(tag: u32, node: &NodeBytes, buf: &mut impl BufMut) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(node.len() as u64, buf);
    for part in node.parts() {
        buf.put_slice(part);
    }
}

impl ToFrame for Outbound<DiscoveryRequest> {
    /// In tag order, as prost writes it: `version_info` (1), the node (2),
    /// the rest (3 to 7).
    fn to_frame(self, buf: &mut impl BufMut) {
        let Outbound { mut request, node } = self;
        let version = std::mem::take(&mut request.version_info);
        if !version.is_empty() {
            string::encode(1, &version, buf);
        }
        if let Some(node) = &node {
            put_node(2, node, buf);
        }
        request.encode_raw(buf);
    }
}

impl ToFrame for Outbound<DeltaDiscoveryRequest> {
    /// In tag order, as prost writes it: the node (1), the rest (2 to 8).
    fn to_frame(self, buf: &mut impl BufMut) {
        if let Some(node) = &self.node {
            put_node(1, node, buf);
        }
        self.request.encode_raw(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{upstream_features, NodeInterner};
    use envoy_types::pb::envoy::config::core::v3::{
        address, node::UserAgentVersionType, socket_address::PortSpecifier, Address, BuildVersion,
        Extension, Locality, Node, SocketAddress,
    };
    use envoy_types::pb::envoy::r#type::v3::SemanticVersion;
    use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
    use envoy_types::pb::google::rpc::Status;
    use envoy_types::pb::xds::core::v3::ContextParams;

    impl<R> Outbound<R> {
        /// The request, without its node.
        pub(crate) fn request(&self) -> &R {
            &self.request
        }
    }

    /// A node with every field set, each map of at most one entry (a map's
    /// entries are written in its own order, so two equal nodes with more
    /// than one need not encode alike).
    #[allow(deprecated)] // listening_addresses: deprecated, still sent when set
    fn full_node(extensions: usize) -> Node {
        let value = |s: &str| Value {
            kind: Some(Kind::StringValue(s.into())),
        };
        Node {
            id: "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local".into(),
            cluster: "reviews".into(),
            metadata: Some(Struct {
                fields: [("NAMESPACE".to_owned(), value("prod"))].into(),
            }),
            dynamic_parameters: [(
                "envoy.config.cluster.v3.Cluster".to_owned(),
                ContextParams {
                    params: [("k".to_owned(), "v".to_owned())].into(),
                },
            )]
            .into(),
            locality: Some(Locality {
                region: "eu-west1".into(),
                zone: "eu-west1-a".into(),
                sub_zone: "rack-7".into(),
            }),
            user_agent_name: "envoy".into(),
            user_agent_version_type: Some(UserAgentVersionType::UserAgentBuildVersion(
                BuildVersion {
                    version: Some(SemanticVersion {
                        major_number: 1,
                        minor_number: 40,
                        patch: 0,
                    }),
                    metadata: None,
                },
            )),
            extensions: (0..extensions)
                .map(|i| Extension {
                    name: format!("envoy.ext.{i}"),
                    category: "envoy.filters".into(),
                    type_urls: vec![format!("type.googleapis.com/ext.{i}")],
                    disabled: i % 7 == 0,
                    ..Extension::default()
                })
                .collect(),
            client_features: vec!["envoy.lb.does_not_support_overprovisioning".into()],
            listening_addresses: vec![Address {
                address: Some(address::Address::SocketAddress(SocketAddress {
                    address: "0.0.0.0".into(),
                    port_specifier: Some(PortSpecifier::PortValue(15001)),
                    ..SocketAddress::default()
                })),
            }],
        }
    }

    fn frame(request: impl ToFrame) -> Vec<u8> {
        let mut buf = Vec::new();
        request.to_frame(&mut buf);
        buf
    }

    fn sotw_requests() -> Vec<DiscoveryRequest> {
        let first = DiscoveryRequest {
            resource_names: vec!["a".into(), "b".into()],
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            ..DiscoveryRequest::default()
        };
        let ack = DiscoveryRequest {
            version_info: "v7".into(),
            response_nonce: "n7".into(),
            ..first.clone()
        };
        let nack = DiscoveryRequest {
            error_detail: Some(Status {
                code: 3,
                message: "refused".into(),
                details: Vec::new(),
            }),
            ..ack.clone()
        };
        vec![first, ack, nack, DiscoveryRequest::default()]
    }

    fn delta_requests() -> Vec<DeltaDiscoveryRequest> {
        let first = DeltaDiscoveryRequest {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            resource_names_subscribe: vec!["a".into()],
            initial_resource_versions: [("a".to_owned(), "1".to_owned())].into(),
            ..DeltaDiscoveryRequest::default()
        };
        let ack = DeltaDiscoveryRequest {
            response_nonce: "n1".into(),
            resource_names_unsubscribe: vec!["b".into()],
            initial_resource_versions: Default::default(),
            ..first.clone()
        };
        vec![first, ack, DeltaDiscoveryRequest::default()]
    }

    /// Each of `requests` sent with `node` (held as `held`) and without one
    /// is framed as prost writes the request holding that node, or none.
    fn check_frames<R>(requests: Vec<R>, node: &Node, held: &NodeBytes)
    where
        R: NodeField + Message + Clone + std::fmt::Debug,
        Outbound<R>: ToFrame,
    {
        for request in requests {
            let mut expected = request.clone();
            *expected.node_field() = Some(node.clone());
            let sent = Outbound::new(request.clone(), Some(held.clone()));
            assert_eq!(frame(sent), expected.encode_to_vec(), "{expected:?}");
            let without = Outbound::new(expected.clone(), None);
            assert_eq!(frame(without), request.encode_to_vec());
        }
    }

    /// The frame is prost's encoding of the request holding the node, byte
    /// for byte: with the node and without, for every shape of request.
    #[test]
    fn a_frame_is_the_request_with_its_node_as_prost_writes_it() {
        let interner = NodeInterner::default();
        for mut node in [full_node(516), full_node(0), Node::default()] {
            node.client_features = upstream_features(node.client_features);
            let held = interner.intern(node.clone()).bytes();
            check_frames(sotw_requests(), &node, &held);
            check_frames(delta_requests(), &node, &held);
        }
    }

    /// A node with maps of several entries reads back as itself.
    #[test]
    fn a_node_with_larger_maps_reads_back_as_itself() {
        let mut node = full_node(3);
        if let Some(metadata) = &mut node.metadata {
            for i in 0..5 {
                metadata.fields.insert(format!("k{i}"), Value::default());
            }
        }
        for i in 0..5 {
            node.dynamic_parameters
                .insert(format!("t{i}"), ContextParams::default());
        }
        node.client_features = upstream_features(node.client_features);
        let held = NodeInterner::default().intern(node.clone());
        let request = DiscoveryRequest {
            version_info: "v1".into(),
            type_url: "t".into(),
            ..DiscoveryRequest::default()
        };
        let read = DiscoveryRequest::decode(
            frame(Outbound::new(request.clone(), Some(held.bytes()))).as_slice(),
        )
        .expect("a frame decodes");
        assert_eq!(
            read,
            DiscoveryRequest {
                node: Some(node),
                ..request
            }
        );
    }
}
