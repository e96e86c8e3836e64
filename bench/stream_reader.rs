//! The floor under a gateway's work per push: a process that holds the same
//! ADS streams the gateway holds (one per identity, every one on one HTTP/2
//! connection, as the gateway's upstream channel does, each subscribed to
//! every cluster) and only reads each response's bytes off its stream:
//! gRPC framing and HTTP/2 included, no protobuf decode, and no ACK for
//! the scripted upstream, which pushes without one. go-control-plane sends
//! a stream's next response only after the ACK of its last (its watch is
//! made again from each request), so against it the reader ACKs, as the
//! gateway does: it reads the response's `version_info` and `nonce` (prost,
//! the resources skipped by their length) and sends them back.
//!
//! A second floor ACKs every response as an Envoy does by default, and as
//! the gateway does: with the whole node on every request (the node's
//! protobuf from a file, each stream's id its own), its field encoded once
//! per stream and copied into each request as the gateway copies the bytes
//! it holds, so that a gateway's ACKs are set against ACKs of the same
//! bytes written the same way.
//!
//! The identities bench runs it as a child of its own binary (so its CPU is
//! its own, apart from the upstream's, which runs in the bench): with
//! `IDENTITIES_READER=<upstream url> <streams> <sotw|delta> [ack [<node
//! file>]]` set, `main` calls [`serve`] instead of benchmarking. It says
//! `ready` once every stream has its first response; then, for each `wait
//! <count>` line on its stdin, `done` once its streams have received
//! `count` responses in all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncBufReadExt;

use crate::bench_child::{say, BenchChild};

use bytes::{Buf, Bytes};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// A request as the reader writes it: its node field as bytes encoded
/// once (as the gateway holds each session's node), then the rest by
/// prost. Protobuf reads fields in any order.
struct Outgoing<M> {
    node_field: Option<Bytes>,
    request: M,
}

/// Requests written as [`Outgoing`]; responses taken as the bytes they are.
struct RawResponses<M>(std::marker::PhantomData<M>);

impl<M: prost::Message + Send + 'static> Codec for RawResponses<M> {
    type Encode = Outgoing<M>;
    type Decode = Bytes;
    type Encoder = RequestEncoder<M>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> RequestEncoder<M> {
        RequestEncoder(std::marker::PhantomData)
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

struct RequestEncoder<M>(std::marker::PhantomData<M>);

impl<M: prost::Message> Encoder for RequestEncoder<M> {
    type Item = Outgoing<M>;
    type Error = Status;

    fn encode(&mut self, item: Outgoing<M>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        if let Some(node) = &item.node_field {
            bytes::BufMut::put_slice(dst, node);
        }
        item.request.encode_raw(dst);
        Ok(())
    }
}

struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Responses received on every stream, and a wake-up for the one waiting.
#[derive(Default)]
struct Received {
    count: AtomicUsize,
    bytes: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Received {
    async fn reach(&self, count: usize) {
        loop {
            let notified = self.changed.notified();
            if self.count.load(Ordering::SeqCst) >= count {
                return;
            }
            notified.await;
        }
    }
}

/// What an ACK needs of a response (SotW `version_info`, delta
/// `system_version_info`: both field 1; `nonce`: field 5 in both); the
/// resources between them are skipped by their length.
#[derive(Clone, PartialEq, prost::Message)]
struct Acked {
    #[prost(string, tag = "1")]
    version: String,
    #[prost(string, tag = "5")]
    nonce: String,
}

fn acked(response: &Bytes) -> Acked {
    <Acked as prost::Message>::decode(response.as_ref()).expect("a response the reader can ACK")
}

fn sotw_ack(response: &Bytes) -> DiscoveryRequest {
    let Acked { version, nonce } = acked(response);
    DiscoveryRequest {
        type_url: xds_gateway::xds::ResourceType::Clusters
            .type_url()
            .to_owned(),
        version_info: version,
        response_nonce: nonce,
        ..Default::default()
    }
}

fn delta_ack(response: &Bytes) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: xds_gateway::xds::ResourceType::Clusters
            .type_url()
            .to_owned(),
        response_nonce: acked(response).nonce,
        ..Default::default()
    }
}

/// `node` as field `tag` of a request, encoded once.
fn node_field(tag: u32, node: &Node) -> Bytes {
    let mut field = Vec::new();
    prost::encoding::message::encode(tag, node, &mut field);
    Bytes::from(field)
}

/// How a stream ACKs each response.
#[derive(Clone)]
enum Acks {
    /// Not at all.
    None,
    /// With the version and nonce only.
    Bare,
    /// With this node too, as Envoy sends it by default.
    WithNode(Box<Node>),
}

/// One stream: subscribe as identity `id` to every cluster, then read
/// (and ACK each response as `acks` says).
async fn read_stream(
    channel: tonic::transport::Channel,
    id: String,
    delta: bool,
    acks: Acks,
    received: Arc<Received>,
) {
    let ack = !matches!(acks, Acks::None);
    let node_on_acks = matches!(acks, Acks::WithNode(_));
    let node = match acks {
        Acks::WithNode(node) => Node { id, ..*node },
        Acks::None | Acks::Bare => Node {
            id,
            cluster: "bench".into(),
            ..Node::default()
        },
    };
    let sending = Sending {
        node_field: node_field(if delta { 1 } else { 2 }, &node),
        ack,
        node_on_acks,
    };
    let type_url = xds_gateway::xds::ResourceType::Clusters
        .type_url()
        .to_owned();
    if delta {
        let first = DeltaDiscoveryRequest {
            type_url,
            resource_names_subscribe: vec!["*".into()],
            ..Default::default()
        };
        read(channel, sending, first, delta_ack, DELTA_PATH, &received).await;
    } else {
        let first = DiscoveryRequest {
            type_url,
            ..Default::default()
        };
        read(channel, sending, first, sotw_ack, SOTW_PATH, &received).await;
    }
}

/// How a stream sends: the node's field (on its first request), whether
/// it ACKs each response, and whether each ACK carries the node too.
struct Sending {
    node_field: Bytes,
    ack: bool,
    node_on_acks: bool,
}

/// Opens a stream at `path` with `first`, and counts its responses until
/// it ends, answering each with `ack` of it if the stream ACKs. Its
/// requests stay open meanwhile (a closed request stream would end the
/// upstream's).
async fn read<M>(
    channel: tonic::transport::Channel,
    sending: Sending,
    first: M,
    ack: fn(&Bytes) -> M,
    path: &'static str,
    received: &Received,
) where
    M: prost::Message + Send + Sync + 'static,
{
    let Sending {
        node_field,
        ack: acks,
        node_on_acks,
    } = sending;
    let mut grpc = tonic::client::Grpc::new(channel);
    if let Err(e) = grpc.ready().await {
        return eprintln!("reader: channel not ready: {e}");
    }
    let (requests, rx) = tokio::sync::mpsc::channel(1);
    let ack_field = node_on_acks.then(|| node_field.clone());
    let first = Outgoing {
        node_field: Some(node_field),
        request: first,
    };
    let _ = requests.send(first).await;
    let codec = RawResponses::<M>(std::marker::PhantomData);
    let path = http::uri::PathAndQuery::from_static(path);
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut responses = match grpc
        .streaming(tonic::Request::new(stream), path, codec)
        .await
    {
        Ok(r) => r.into_inner(),
        Err(e) => return eprintln!("reader: stream refused: {e}"),
    };
    loop {
        match responses.message().await {
            Ok(Some(bytes)) => {
                if acks {
                    let ack = Outgoing {
                        node_field: ack_field.clone(),
                        request: ack(&bytes),
                    };
                    let _ = requests.send(ack).await;
                }
                received.bytes.fetch_add(bytes.len(), Ordering::SeqCst);
                received.count.fetch_add(1, Ordering::SeqCst);
                received.changed.notify_waiters();
            }
            Ok(None) => break,
            Err(e) => break eprintln!("reader: stream failed: {e}"),
        }
    }
    drop(requests);
}

/// Runs the reader described in the module docs; `spec` is
/// `<upstream url> <streams> <sotw|delta> [ack [<node file>]]`.
pub fn serve(spec: &str) {
    let mut parts = spec.split_whitespace();
    let (Some(url), Some(streams), Some(mode)) = (parts.next(), parts.next(), parts.next()) else {
        panic!(
            "IDENTITIES_READER: expected `<url> <streams> <sotw|delta> [ack [<node file>]]`, got {spec:?}"
        );
    };
    let acks = match (parts.next(), parts.next()) {
        (Some("ack"), Some(file)) => {
            let bytes = std::fs::read(file).expect("the node's file");
            let node = <Node as prost::Message>::decode(bytes.as_slice()).expect("a node");
            Acks::WithNode(Box::new(node))
        }
        (Some("ack"), None) => Acks::Bare,
        _ => Acks::None,
    };
    let streams: usize = streams.parse().expect("a number of streams");
    let delta = mode == "delta";
    crate::bench_child::runtime().block_on(async move {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .expect("upstream url")
            .connect()
            .await
            .expect("upstream reachable");
        let received = Arc::new(Received::default());
        for i in 0..streams {
            let (channel, received) = (channel.clone(), received.clone());
            tokio::spawn(read_stream(
                channel,
                format!("pod-{i}"),
                delta,
                acks.clone(),
                received,
            ));
        }
        received.reach(streams).await;
        say("ready");
        let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = orders.next_line().await {
            let Some(count) = line.strip_prefix("wait ") else {
                continue;
            };
            received.reach(count.trim().parse().expect("a count")).await;
            say(&format!("done {}", received.bytes.load(Ordering::SeqCst)));
        }
    });
}

/// The reader as its parent sees it: a child process of this bench's
/// binary, killed when dropped.
pub struct Reader(BenchChild);

impl Reader {
    /// Starts a reader of `streams` streams of `mode` on the upstream at
    /// `url`, ACKing every response if `ack`, with the node whose protobuf
    /// bytes are in `node` on every request if given (which implies `ack`).
    pub fn start(
        url: &str,
        streams: usize,
        mode: &str,
        ack: bool,
        node: Option<&std::path::Path>,
    ) -> Reader {
        let ack = match node {
            Some(file) => format!(" ack {}", file.display()),
            None if ack => " ack".to_owned(),
            None => String::new(),
        };
        let spec = format!("{url} {streams} {mode}{ack}");
        Reader(BenchChild::start("IDENTITIES_READER", &spec, "reader"))
    }

    pub fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Whether every stream had its first response within `within`.
    pub async fn ready(&mut self, within: std::time::Duration) -> bool {
        self.0.line("ready", within).await.is_some()
    }

    /// Waits (at most `within`) until the streams have received `count`
    /// responses in all; the bytes received so far, `None` on time out.
    pub async fn received(&mut self, count: usize, within: std::time::Duration) -> Option<usize> {
        if !self.0.tell(&format!("wait {count}")).await {
            return None;
        }
        self.0.line("done", within).await?.parse().ok()
    }
}
