//! A scripted state-of-the-world ADS control plane for the integration tests.
//!
//! Include it from a test crate with
//! `#[path = "support/fake_ads.rs"] mod fake_ads;`. [`FakeAds::start`]
//! serves `AggregatedDiscoveryService.StreamAggregatedResources` (tonic) on
//! 127.0.0.1:0 from a shared snapshot `type_url -> (version, resources)`:
//!
//! - the first request of each type on a stream, and every request that
//!   changes the stream's subscribed names for that type, is answered with
//!   the snapshot's current version of that type (an ACK or NACK with
//!   unchanged names is not answered, as SotW servers do);
//! - [`FakeAds::set`] replaces one type's entry at any time and pushes a new
//!   response on every open stream subscribed to that type;
//! - requested names are honoured: no names (or `*`) means every resource of
//!   the type, else only the named ones (a resource's name is its proto field
//!   1, which is `name` or `cluster_name` in every xDS resource type);
//! - a type missing from the snapshot is not answered until it is set;
//! - every request is recorded ([`Recorded`]), every response too
//!   ([`Sent`]), every stream counted, and when each node was last sent a
//!   response ([`FakeAds::last_sent`]).
//!
//! Nonces are per stream and increasing ("1", "2", ...). The delta ADS
//! method answers UNIMPLEMENTED, unless started with
//! [`FakeAds::start_delta`]: then a delta stream is sent, per type, the
//! resources it subscribes to (a first request without names, or `*`, is
//! the wildcard) whose version (a hash of their bytes) it was not sent yet,
//! and the names it was sent that are gone; [`FakeAds::set`] pushes only
//! what changed, and a stream that had the entry before it looks only at
//! what it changed (O(changed) per stream, as a delta server should be;
//! any other stream compares every resource). gRPC server reflection
//! (`grpc.reflection.v1` and `v1alpha`) answers UNIMPLEMENTED unless
//! scripted with [`FakeAds::serve_reflection`]: then every
//! `file_containing_symbol` is answered with the files given, whatever
//! they hold (a hostile control plane's too), and `file_by_filename` with
//! the file of that name. The server task stops when the `FakeAds` drops.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
    Resource as DeltaResource, ResourceError, ResourceName,
};
use envoy_types::pb::google::protobuf::Any;
use futures::Stream;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Response, Status, Streaming};
use tonic_reflection::pb::v1 as reflection;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which stream (1-based, in opening order) carried it.
    pub stream: usize,
    pub type_url: String,
    pub version_info: String,
    pub nonce: String,
    pub names: Vec<String>,
    /// `error_detail.message` when the request is a NACK.
    pub error_detail: Option<String>,
    /// `node.id` when the request carried a node (the first of a stream).
    pub node_id: Option<String>,
    /// `node.dynamic_parameters` (type URL to its parameters) when the
    /// request carried a node.
    pub dynamic_parameters: BTreeMap<String, BTreeMap<String, String>>,
    /// Its size as encoded (what the upstream read for it).
    pub bytes: usize,
    /// Its `resource_locators` (in delta, `resource_locators_subscribe`)
    /// as (name, dynamic parameters); their names are in `names` too.
    pub locators: Vec<(String, BTreeMap<String, String>)>,
}

/// Locators as (name, parameters), the parameters sorted.
fn locators(
    locators: &[envoy_types::pb::envoy::service::discovery::v3::ResourceLocator],
) -> Vec<(String, BTreeMap<String, String>)> {
    locators
        .iter()
        .map(|l| {
            let params = l.dynamic_parameters.iter();
            (
                l.name.clone(),
                params.map(|(k, v)| (k.clone(), v.clone())).collect(),
            )
        })
        .collect()
}

/// A node's `dynamic_parameters`, sorted.
fn dynamic_parameters(
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    node.into_iter()
        .flat_map(|n| &n.dynamic_parameters)
        .map(|(type_url, context)| {
            let params = context.params.iter();
            let params = params.map(|(k, v)| (k.clone(), v.clone())).collect();
            (type_url.clone(), params)
        })
        .collect()
}

/// One resource of the snapshot: its key ([`resource_name`]), itself, and
/// its delta version (a hash of its bytes).
type Held = (String, Any, String);

/// The name a snapshot key stands for (a variant's key is its name, a NUL
/// and its constraints in hex).
fn name_part(key: &str) -> &str {
    key.split('\0').next().unwrap_or(key)
}

/// One response the server sent, as [`FakeAds::responses`] gives it.
#[derive(Debug, Clone)]
pub struct Sent {
    /// Which stream (1-based, in opening order) carried it.
    pub stream: usize,
    pub type_url: String,
    pub version_info: String,
    pub nonce: String,
    /// The names of the resources it carried, in order.
    pub names: Vec<String>,
}

/// One response as recorded: a wildcard one's names are its entry's.
#[derive(Debug)]
struct SentRecord {
    stream: usize,
    type_url: String,
    version_info: String,
    nonce: String,
    names: SentNames,
}

#[derive(Debug)]
enum SentNames {
    /// Every resource of the entry, in its order.
    All(Arc<Vec<Held>>),
    These(Vec<String>),
}

impl SentRecord {
    fn to_sent(&self) -> Sent {
        Sent {
            stream: self.stream,
            type_url: self.type_url.clone(),
            version_info: self.version_info.clone(),
            nonce: self.nonce.clone(),
            names: match &self.names {
                SentNames::All(resources) => resources
                    .iter()
                    .map(|(key, _, _)| name_part(key).to_owned())
                    .collect(),
                SentNames::These(names) => names.clone(),
            },
        }
    }
}

/// One type's entry in the snapshot.
#[derive(Debug, Clone)]
struct Entry {
    version: String,
    resources: Arc<Vec<Held>>,
    /// Every resource encoded as the `resources` field of a SotW response,
    /// once for every stream that takes them all.
    encoded: Arc<OnceLock<Bytes>>,
    /// Bumped by every [`FakeAds::set`]: what streams compare to decide a push.
    generation: u64,
    /// What changed from the generation before (none for the first).
    changes: Option<Arc<Changes>>,
    /// The `resource_errors` every response of this entry carries.
    errors: Arc<Vec<ResourceError>>,
}

/// The difference between an entry and the one it replaced.
#[derive(Debug)]
struct Changes {
    /// Indices (into the new resources) of the resources added or changed.
    changed: Vec<usize>,
    /// Names the replaced entry had and this one has not.
    removed: Vec<String>,
}

impl Changes {
    fn between(before: &[Held], after: &[Held]) -> Changes {
        let old: HashMap<&str, &str> = before
            .iter()
            .map(|(name, _, version)| (name.as_str(), version.as_str()))
            .collect();
        let new: BTreeSet<&str> = after.iter().map(|(name, _, _)| name.as_str()).collect();
        Changes {
            changed: after
                .iter()
                .enumerate()
                .filter(|(_, (name, _, version))| old.get(name.as_str()) != Some(&version.as_str()))
                .map(|(i, _)| i)
                .collect(),
            removed: before
                .iter()
                .filter(|(name, _, _)| !new.contains(name.as_str()))
                .map(|(name, _, _)| name.clone())
                .collect(),
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    snapshot: Mutex<HashMap<String, Entry>>,
    requests: Mutex<Vec<Recorded>>,
    responses: Mutex<Vec<SentRecord>>,
    /// ASCII metadata of every stream, in opening order.
    metadata: Mutex<Vec<Vec<(String, String)>>>,
    streams: AtomicUsize,
    open: AtomicUsize,
    /// Whether the delta method serves (else it answers UNIMPLEMENTED).
    delta: AtomicBool,
    /// Resources sent on delta streams (all streams, all responses).
    delta_resources_sent: AtomicUsize,
    /// Unary fetches answered (with a response or "up to date").
    fetches: AtomicUsize,
    /// When a response was last handed to each node's stream, by node id.
    last_sent: Mutex<HashMap<String, Instant>>,
    /// Whether a SotW stream's first request of a type presenting the
    /// current version is answered with nothing, as java-control-plane's
    /// `SimpleCache` does (the protocol allows it).
    quiet_on_current: AtomicBool,
    /// Ticks to end every open SotW stream, as a restart would.
    breaks: watch::Sender<u64>,
    /// Type URLs whose subscription ends the SotW stream with UNKNOWN, as
    /// java-control-plane ends an ADS stream asked for a type it lacks.
    fatal_types: Mutex<Vec<String>>,
    /// Names whose every SotW request ends the stream (PERMISSION_DENIED).
    fatal_names: Mutex<Vec<String>>,
    /// How long a stream naming one of `fatal_names` is held before it ends.
    fatal_names_after: Mutex<Duration>,
    /// What reflection answers, and the symbols it was asked.
    reflection: Mutex<ReflectionScript>,
    /// Reflection answers wait while this is true.
    reflection_held: watch::Sender<bool>,
    /// Whether an empty `resource_names` after names on the same stream is
    /// an unsubscription from the type, as the transport protocol says.
    empty_unsubscribes: AtomicBool,
    /// Type URLs sent to every SotW stream though no request asked for them.
    unasked: Mutex<Vec<String>>,
}

/// What the scripted reflection service answers.
#[derive(Debug, Default)]
struct ReflectionScript {
    /// The files answered to every `file_containing_symbol`; `None`:
    /// reflection is UNIMPLEMENTED.
    files: Option<Vec<Vec<u8>>>,
    /// Only `v1alpha` is served (v1 is UNIMPLEMENTED), as older servers do.
    v1alpha_only: bool,
    /// Every symbol asked by `file_containing_symbol`, in order.
    asked: Vec<String>,
}

impl Shared {
    /// Notes that a response was just handed to the stream of `node`.
    fn sent_to(&self, node: Option<&str>) {
        let Some(node) = node else { return };
        let now = Instant::now();
        let mut last = lock(&self.last_sent);
        match last.get_mut(node) {
            Some(at) => *at = now,
            None => {
                last.insert(node.to_owned(), now);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The running fake control plane.
pub struct FakeAds {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Ticks on every snapshot change; streams watch it.
    changed: watch::Sender<u64>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeAds {
    /// Starts serving on 127.0.0.1:0 with an empty snapshot.
    pub async fn start() -> FakeAds {
        FakeAds::start_with(None).await
    }

    /// Like [`start`](Self::start), serving delta streams too.
    pub async fn start_delta() -> FakeAds {
        let ads = FakeAds::start_with(None).await;
        ads.shared.delta.store(true, Ordering::SeqCst);
        ads
    }

    /// From now on, an empty `resource_names` on a SotW stream that named
    /// resources of the type before unsubscribes the stream from the type,
    /// as the transport protocol says ("once the client does explicitly
    /// subscribe to a resource name ... clearing the list of subscribed
    /// resources is interpreted as an unsubscription"); only `*` is a
    /// wildcard then. By default an empty list is a wildcard at any time.
    pub fn empty_list_unsubscribes(&self) {
        self.shared.empty_unsubscribes.store(true, Ordering::SeqCst);
    }

    /// Sends `type_url`'s entry (set with [`set`](Self::set)) to every open
    /// SotW stream, on its next request or push, though no request asked
    /// for it: a server's mistake, which the protocol still expects ACKed
    /// or NACKed.
    pub fn push_unasked(&self, type_url: &str) {
        lock(&self.shared.unasked).push(type_url.to_owned());
        self.changed
            .send_modify(|tick| *tick = tick.wrapping_add(1));
    }

    /// From now on, a SotW stream's first request of a type that presents
    /// the current version gets no answer (java-control-plane's way).
    pub fn quiet_on_current_version(&self) {
        self.shared.quiet_on_current.store(true, Ordering::SeqCst);
    }

    /// From now on, a SotW request for `type_url` ends its stream with
    /// UNKNOWN ("Application error processing RPC", what grpc-java says
    /// when a handler throws), before anything is answered.
    pub fn end_streams_asked_for(&self, type_url: &str) {
        lock(&self.shared.fatal_types).push(type_url.to_owned());
    }

    /// From now on, a SotW request naming `name` (of any type, as a name or
    /// a locator) ends its stream with PERMISSION_DENIED, as a control
    /// plane refusing one resource to a node may.
    pub fn end_streams_naming(&self, name: &str) {
        lock(&self.shared.fatal_names).push(name.to_owned());
    }

    /// [`end_streams_naming`](Self::end_streams_naming), each such stream
    /// ended only `after` its request came (a control plane slow to refuse).
    pub fn end_streams_naming_after(&self, name: &str, after: Duration) {
        *lock(&self.shared.fatal_names_after) = after;
        self.end_streams_naming(name);
    }

    /// Serves `type_url` again ([`end_streams_asked_for`](Self::end_streams_asked_for) undone).
    pub fn serve_again(&self, type_url: &str) {
        lock(&self.shared.fatal_types).retain(|t| t != type_url);
    }

    /// Ends every open SotW stream with UNAVAILABLE, as a restart of the
    /// control plane would; the state is kept, and new streams are served.
    pub fn break_streams(&self) {
        self.shared
            .breaks
            .send_modify(|tick| *tick = tick.wrapping_add(1));
    }

    /// Resources sent on delta streams so far, all streams together.
    pub fn fetches(&self) -> usize {
        self.shared.fetches.load(Ordering::SeqCst)
    }

    pub fn delta_resources_sent(&self) -> usize {
        self.shared.delta_resources_sent.load(Ordering::SeqCst)
    }

    /// Like [`start`](Self::start), over TLS with `tls` (server identity,
    /// and a client CA to require mTLS).
    pub async fn start_tls(tls: tonic::transport::ServerTlsConfig) -> FakeAds {
        FakeAds::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<tonic::transport::ServerTlsConfig>) -> FakeAds {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for the fake ADS server");
        let addr = listener.local_addr().expect("fake ADS local address");
        let shared = Arc::new(Shared::default());
        let (changed, _) = watch::channel(0u64);
        let service = Service {
            shared: shared.clone(),
            changed: changed.clone(),
        };
        let server = tokio::spawn(async move {
            let mut builder = tonic::transport::Server::builder();
            if let Some(tls) = tls {
                builder = builder.tls_config(tls).expect("fake ADS TLS config");
            }
            builder
                .add_service(Routes(Arc::new(service.clone())))
                .add_service(Named::<{ V1 }>(Routes(Arc::new(service.clone()))))
                .add_service(Named::<{ V1ALPHA }>(Routes(Arc::new(service.clone()))))
                .add_service(Named::<{ CDS }>(Routes(Arc::new(service))))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .expect("fake ADS server");
        });
        FakeAds {
            addr,
            shared,
            changed,
            server,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `grpc://127.0.0.1:PORT`, for the gateway's `--upstream`.
    pub fn url(&self) -> String {
        format!("grpc://{}", self.addr)
    }

    /// Replaces `type_url`'s version and resources and pushes them to every
    /// open stream subscribed to that type.
    pub fn set(&self, type_url: &str, version: &str, resources: Vec<Any>) {
        self.set_with_errors(type_url, version, resources, &[]);
    }

    /// [`set`](Self::set), every response of the entry (SotW and delta)
    /// also carrying `resource_errors`: (name, gRPC code, message).
    pub fn set_with_errors(
        &self,
        type_url: &str,
        version: &str,
        resources: Vec<Any>,
        errors: &[(&str, i32, &str)],
    ) {
        let errors: Arc<Vec<ResourceError>> = Arc::new(
            errors
                .iter()
                .map(|(name, code, message)| ResourceError {
                    resource_name: Some(ResourceName {
                        name: (*name).to_owned(),
                        ..Default::default()
                    }),
                    error_detail: Some(envoy_types::pb::google::rpc::Status {
                        code: *code,
                        message: (*message).to_owned(),
                        ..Default::default()
                    }),
                })
                .collect(),
        );
        let resources: Arc<Vec<Held>> = Arc::new(
            resources
                .into_iter()
                .map(|any| {
                    let version = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&any.value));
                    (resource_name(&any), any, version)
                })
                .collect(),
        );
        {
            let mut snapshot = lock(&self.shared.snapshot);
            let before = snapshot.get(type_url);
            let generation = before.map_or(0, |e| e.generation) + 1;
            let changes = before.map(|e| Arc::new(Changes::between(&e.resources, &resources)));
            snapshot.insert(
                type_url.to_owned(),
                Entry {
                    version: version.to_owned(),
                    resources,
                    encoded: Arc::default(),
                    generation,
                    changes,
                    errors,
                },
            );
        }
        self.changed
            .send_modify(|tick| *tick = tick.wrapping_add(1));
    }

    /// When a response was last handed to each node's stream (SotW or
    /// delta), by the node id of the stream's first request.
    pub fn last_sent(&self) -> HashMap<String, Instant> {
        lock(&self.shared.last_sent).clone()
    }

    /// Every request received so far, in arrival order.
    /// From now on, gRPC server reflection answers every
    /// `file_containing_symbol` with `files` (serialized
    /// FileDescriptorProtos, sent as they are), and `file_by_filename`
    /// with the one of that name; on `v1alpha` only when `v1alpha_only`.
    pub fn serve_reflection(&self, files: Vec<Vec<u8>>, v1alpha_only: bool) {
        let mut script = lock(&self.shared.reflection);
        script.files = Some(files);
        script.v1alpha_only = v1alpha_only;
    }

    /// While `held`, reflection answers wait (so that what is served
    /// before the descriptors come can be seen).
    pub fn hold_reflection(&self, held: bool) {
        self.shared.reflection_held.send_replace(held);
    }

    /// Every symbol reflection was asked for, in order.
    pub fn reflection_asks(&self) -> Vec<String> {
        lock(&self.shared.reflection).asked.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Every response sent so far, in sending order.
    pub fn responses(&self) -> Vec<Sent> {
        lock(&self.shared.responses)
            .iter()
            .map(SentRecord::to_sent)
            .collect()
    }

    /// The ASCII metadata each stream was opened with, in opening order.
    pub fn stream_metadata(&self) -> Vec<Vec<(String, String)>> {
        lock(&self.shared.metadata).clone()
    }

    /// Streams opened so far.
    pub fn streams_opened(&self) -> usize {
        self.shared.streams.load(Ordering::SeqCst)
    }

    /// Streams open now.
    pub fn streams_open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for FakeAds {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Field 1 of an xDS resource: `name` (Listener, Cluster, RouteConfiguration,
/// Secret, ...) or `cluster_name` (ClusterLoadAssignment).
/// A JSON fixture (its `@type` naming the message) as the `Any` a control
/// plane sends.
pub fn json_any(json: &str) -> Any {
    let parsed = xds_gateway::xds::Codec::embedded()
        .parse_any(json.as_bytes())
        .unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{json}"));
    Any {
        type_url: parsed.type_url,
        value: parsed.value,
    }
}

/// A `Cluster` named `name` and nothing else, as an `Any`.
pub fn named_cluster(name: &str) -> Any {
    let cluster = envoy_types::pb::envoy::config::cluster::v3::Cluster {
        name: name.into(),
        ..Default::default()
    };
    Any {
        type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
        value: cluster.encode_to_vec(),
    }
}

/// The `envoy.service.discovery.v3.Resource` wrapper a SotW answer may
/// carry a resource in.
const WRAPPER_TYPE: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// The wrapper `any` is, if it is one.
fn wrapper(any: &Any) -> Option<DeltaResource> {
    (any.type_url == WRAPPER_TYPE).then(|| {
        DeltaResource::decode(any.value.as_slice())
            .unwrap_or_else(|e| panic!("fake ADS: a malformed Resource wrapper: {e}"))
    })
}

/// The key of a resource in the snapshot: its name, or for a variant (a
/// wrapper whose `resource_name` carries constraints) its name, a NUL and
/// its constraints in hex, so that variants of one name are told apart.
fn resource_name(any: &Any) -> String {
    if let Some(wrapped) = wrapper(any) {
        return match wrapped.resource_name {
            Some(named) if wrapped.name.is_empty() => match named.dynamic_parameter_constraints {
                Some(c) => format!("{}\0{}", named.name, hex::encode(c.encode_to_vec())),
                None => named.name,
            },
            _ => wrapped.name,
        };
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Named {
        #[prost(string, tag = "1")]
        name: String,
    }
    Named::decode(any.value.as_slice())
        .unwrap_or_else(|e| panic!("fake ADS: no name in a {} resource: {e}", any.type_url))
        .name
}

#[derive(Clone)]
struct Service {
    shared: Arc<Shared>,
    changed: watch::Sender<u64>,
}

const SOTW_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const DELTA_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// A SotW stream's responses, each already encoded (see [`SotwCodec`]).
const REFLECTION_V1: &str = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const REFLECTION_V1ALPHA: &str = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
type ResponseStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;
type ReflectionStream =
    Pin<Box<dyn Stream<Item = Result<reflection::ServerReflectionResponse, Status>> + Send>>;
type DeltaStream = Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, Status>> + Send>>;
type Answer = Pin<
    Box<
        dyn std::future::Future<
                Output = Result<http::Response<tonic::body::Body>, std::convert::Infallible>,
            > + Send,
    >,
>;

/// The ADS service, each method served by tonic's `Grpc` as a generated
/// server does, but SotW responses go out as the bytes their stream task
/// encoded: an entry's resources are encoded once for every stream that
/// takes them all (as a control plane that caches marshalled resources
/// does), where prost would clone and encode each resource per stream.
#[derive(Clone)]
struct Routes(Arc<Service>);

impl tonic::server::NamedService for Routes {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

/// The same routes under another service's name (tonic's server routes by
/// service name): reflection `v1` or `v1alpha`, or CDS (its unary fetch).
#[derive(Clone)]
struct Named<const SERVICE: u8>(Routes);

/// The services [`Named`] routes, besides ADS.
const V1: u8 = 0;
const V1ALPHA: u8 = 1;
const CDS: u8 = 2;

impl<const SERVICE: u8> tonic::server::NamedService for Named<SERVICE> {
    const NAME: &'static str = match SERVICE {
        V1 => "grpc.reflection.v1.ServerReflection",
        V1ALPHA => "grpc.reflection.v1alpha.ServerReflection",
        _ => "envoy.service.cluster.v3.ClusterDiscoveryService",
    };
}

impl<const SERVICE: u8> tonic::codegen::Service<http::Request<tonic::body::Body>>
    for Named<SERVICE>
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = Answer;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Answer {
        self.0.call(request)
    }
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Routes {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = Answer;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Answer {
        let service = self.0.clone();
        Box::pin(async move {
            Ok(match request.uri().path() {
                SOTW_PATH => {
                    let mut grpc = tonic::server::Grpc::new(SotwCodec);
                    grpc.streaming(Sotw(service), request).await
                }
                DELTA_PATH => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.streaming(Delta(service), request).await
                }
                FETCH_CLUSTERS => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(Fetch(service), request).await
                }
                path @ (REFLECTION_V1 | REFLECTION_V1ALPHA) if service.reflects(path) => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.streaming(Reflect(service), request).await
                }
                path => {
                    Status::unimplemented(format!("the fake ADS server has no {path}")).into_http()
                }
            })
        })
    }
}

/// Requests decoded by prost; responses sent as the bytes they are.
struct SotwCodec;

impl Codec for SotwCodec {
    type Encode = Bytes;
    type Decode = DiscoveryRequest;
    type Encoder = SotwCodec;
    type Decoder = SotwCodec;

    fn encoder(&mut self) -> SotwCodec {
        SotwCodec
    }

    fn decoder(&mut self) -> SotwCodec {
        SotwCodec
    }
}

impl Encoder for SotwCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for SotwCodec {
    type Item = DiscoveryRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DiscoveryRequest>, Status> {
        DiscoveryRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("fake ADS: a request prost cannot read: {e}")))
    }
}

type Opened<S> = Pin<Box<dyn std::future::Future<Output = Result<Response<S>, Status>> + Send>>;

/// CDS's unary fetch (what the gateway's fetch mode calls).
const FETCH_CLUSTERS: &str = "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters";

/// A unary fetch: the snapshot's entry of the type asked, in full, or
/// ALREADY_EXISTS when the request presents its version (as
/// rust-control-plane says "up to date").
struct Fetch(Arc<Service>);

impl tonic::server::UnaryService<DiscoveryRequest> for Fetch {
    type Response = DiscoveryResponse;
    type Future = Opened<DiscoveryResponse>;

    fn call(&mut self, request: Request<DiscoveryRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            let request = request.into_inner();
            service.shared.fetches.fetch_add(1, Ordering::SeqCst);
            let entry = lock(&service.shared.snapshot)
                .get(&request.type_url)
                .cloned()
                .ok_or_else(|| Status::not_found("nothing set for the type"))?;
            if request.version_info == entry.version {
                return Err(Status::already_exists("up to date"));
            }
            Ok(Response::new(DiscoveryResponse {
                version_info: entry.version.clone(),
                resources: entry
                    .resources
                    .iter()
                    .map(|(_, any, _)| any.clone())
                    .collect(),
                type_url: request.type_url,
                nonce: "fetch".into(),
                ..Default::default()
            }))
        })
    }
}

struct Sotw(Arc<Service>);

impl tonic::server::StreamingService<DiscoveryRequest> for Sotw {
    type Response = Bytes;
    type ResponseStream = ResponseStream;
    type Future = Opened<ResponseStream>;

    fn call(&mut self, request: Request<Streaming<DiscoveryRequest>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.stream_aggregated_resources(request) })
    }
}

struct Delta(Arc<Service>);

/// The reflection method (`v1` and `v1alpha` are the same messages).
struct Reflect(Arc<Service>);

impl tonic::server::StreamingService<reflection::ServerReflectionRequest> for Reflect {
    type Response = reflection::ServerReflectionResponse;
    type ResponseStream = ReflectionStream;
    type Future = Opened<ReflectionStream>;

    fn call(
        &mut self,
        request: Request<Streaming<reflection::ServerReflectionRequest>>,
    ) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.reflection_info(request)) })
    }
}

impl tonic::server::StreamingService<DeltaDiscoveryRequest> for Delta {
    type Response = DeltaDiscoveryResponse;
    type ResponseStream = DeltaStream;
    type Future = Opened<DeltaStream>;

    fn call(&mut self, request: Request<Streaming<DeltaDiscoveryRequest>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.delta_aggregated_resources(request) })
    }
}

impl Service {
    /// Whether the reflection method at `path` is served now.
    fn reflects(&self, path: &str) -> bool {
        let script = lock(&self.shared.reflection);
        script.files.is_some() && (path == REFLECTION_V1ALPHA || !script.v1alpha_only)
    }

    /// Answers each reflection request in turn, as scripted.
    fn reflection_info(
        &self,
        request: Request<Streaming<reflection::ServerReflectionRequest>>,
    ) -> Response<ReflectionStream> {
        use reflection::server_reflection_request::MessageRequest;
        use reflection::server_reflection_response::MessageResponse;
        let shared = self.shared.clone();
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            while let Ok(Some(asked)) = inbound.message().await {
                let mut held = shared.reflection_held.subscribe();
                let _ = held.wait_for(|held| !*held).await;
                let answer = {
                    let mut script = lock(&shared.reflection);
                    let files = script.files.clone().unwrap_or_default();
                    match asked.message_request.clone() {
                        Some(MessageRequest::FileContainingSymbol(symbol)) => {
                            script.asked.push(symbol);
                            MessageResponse::FileDescriptorResponse(
                                reflection::FileDescriptorResponse {
                                    file_descriptor_proto: files,
                                },
                            )
                        }
                        Some(MessageRequest::FileByFilename(name)) => {
                            let named = files.into_iter().find(|raw| {
                                prost_types::FileDescriptorProto::decode(raw.as_slice())
                                    .is_ok_and(|f| f.name() == name)
                            });
                            match named {
                                Some(raw) => MessageResponse::FileDescriptorResponse(
                                    reflection::FileDescriptorResponse {
                                        file_descriptor_proto: vec![raw],
                                    },
                                ),
                                None => MessageResponse::ErrorResponse(reflection::ErrorResponse {
                                    error_code: tonic::Code::NotFound as i32,
                                    error_message: format!("no file {name}"),
                                }),
                            }
                        }
                        _ => MessageResponse::ErrorResponse(reflection::ErrorResponse {
                            error_code: tonic::Code::Unimplemented as i32,
                            error_message: "not scripted".into(),
                        }),
                    }
                };
                let response = reflection::ServerReflectionResponse {
                    valid_host: String::new(),
                    original_request: Some(asked),
                    message_response: Some(answer),
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Response::new(Box::pin(ReceiverStream::new(rx)))
    }

    fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let id = self.shared.streams.fetch_add(1, Ordering::SeqCst) + 1;
        let metadata = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((
                    k.as_str().to_owned(),
                    v.to_str().unwrap_or_default().to_owned(),
                )),
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        lock(&self.shared.metadata).push(metadata);
        let (tx, rx) = mpsc::channel(16);
        let stream = StreamTask {
            id,
            shared: self.shared.clone(),
            tx,
            subscribed: BTreeMap::new(),
            nonce: 0,
            node: None,
            sent_unasked: BTreeSet::new(),
        };
        let breaks = self.shared.breaks.subscribe();
        tokio::spawn(stream.run(request.into_inner(), self.changed.subscribe(), breaks));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaStream>, Status> {
        if !self.shared.delta.load(Ordering::SeqCst) {
            return Err(Status::unimplemented(
                "the fake ADS server speaks SotW only",
            ));
        }
        let id = self.shared.streams.fetch_add(1, Ordering::SeqCst) + 1;
        let (tx, rx) = mpsc::channel(16);
        let stream = DeltaTask {
            id,
            shared: self.shared.clone(),
            tx,
            subscribed: BTreeMap::new(),
            nonce: 0,
            node: None,
        };
        tokio::spawn(stream.run(request.into_inner(), self.changed.subscribe()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// `resources` as the `resources` field (2) of a `DiscoveryResponse`.
fn encode_resources<'a>(resources: impl Iterator<Item = &'a Any>) -> Bytes {
    let mut buf = Vec::new();
    for any in resources {
        prost::encoding::message::encode(2, any, &mut buf);
    }
    Bytes::from(buf)
}

/// A `DiscoveryResponse` as prost encodes it (fields in tag order, empty
/// strings left out), its `resources` field given already encoded.
fn encode_response(entry: &Entry, resources: &[u8], type_url: &str, nonce: &str) -> Bytes {
    let version = &entry.version;
    let mut buf = Vec::with_capacity(resources.len() + version.len() + type_url.len() + 32);
    put_string(1, version, &mut buf);
    buf.extend_from_slice(resources);
    put_string(4, type_url, &mut buf);
    put_string(5, nonce, &mut buf);
    for error in entry.errors.iter() {
        prost::encoding::message::encode(7, error, &mut buf);
    }
    Bytes::from(buf)
}

/// A `string` field, unless empty (proto3 leaves it out).
fn put_string(tag: u32, text: &str, buf: &mut Vec<u8>) {
    if !text.is_empty() {
        prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, buf);
        prost::encoding::encode_varint(text.len() as u64, buf);
        buf.extend_from_slice(text.as_bytes());
    }
}

/// One stream's subscription to one type.
struct Subscribed {
    names: Vec<String>,
    /// Whether the stream ever named resources of the type.
    named: bool,
    /// Generation of the snapshot entry last sent (0: nothing sent yet).
    sent: u64,
}

struct StreamTask {
    id: usize,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Result<Bytes, Status>>,
    subscribed: BTreeMap<String, Subscribed>,
    nonce: u64,
    /// The node id of the stream's first request that had a node.
    node: Option<String>,
    /// Types sent unasked on this stream ([`FakeAds::push_unasked`]).
    sent_unasked: BTreeSet<String>,
}

impl StreamTask {
    async fn run(
        mut self,
        mut inbound: Streaming<DiscoveryRequest>,
        mut changed: watch::Receiver<u64>,
        mut breaks: watch::Receiver<u64>,
    ) {
        self.shared.open.fetch_add(1, Ordering::SeqCst);
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(request)) if lock(&self.shared.fatal_types).contains(&request.type_url) => {
                        self.record(&request);
                        let _ = self.tx.send(Err(Status::unknown("Application error processing RPC"))).await;
                        break;
                    }
                    Ok(Some(request)) if self.names_fatal(&request) => {
                        self.record(&request);
                        let after = *lock(&self.shared.fatal_names_after);
                        tokio::time::sleep(after).await;
                        let _ = self.tx.send(Err(Status::permission_denied("not for this node"))).await;
                        break;
                    }
                    Ok(Some(request)) => self.request(request).await,
                    _ => break,
                },
                _ = breaks.changed() => {
                    let _ = self.tx.send(Err(Status::unavailable("the fake control plane restarts"))).await;
                    break;
                }
                tick = changed.changed() => {
                    if tick.is_err() {
                        break;
                    }
                    self.push_changed().await;
                }
            }
            if self.tx.is_closed() {
                break;
            }
        }
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether `request` names a name scripted to end the stream.
    fn names_fatal(&self, request: &DiscoveryRequest) -> bool {
        let fatal = lock(&self.shared.fatal_names);
        !fatal.is_empty()
            && request
                .resource_names
                .iter()
                .chain(request.resource_locators.iter().map(|l| &l.name))
                .any(|name| fatal.contains(name))
    }

    async fn request(&mut self, request: DiscoveryRequest) {
        self.record(&request);
        self.answer(request).await;
    }

    fn record(&self, request: &DiscoveryRequest) {
        lock(&self.shared.requests).push(Recorded {
            stream: self.id,
            type_url: request.type_url.clone(),
            version_info: request.version_info.clone(),
            nonce: request.response_nonce.clone(),
            names: request
                .resource_names
                .iter()
                .chain(request.resource_locators.iter().map(|l| &l.name))
                .cloned()
                .collect(),
            error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
            node_id: request.node.as_ref().map(|n| n.id.clone()),
            dynamic_parameters: dynamic_parameters(request.node.as_ref()),
            bytes: request.encoded_len(),
            locators: locators(&request.resource_locators),
        });
    }

    async fn answer(&mut self, request: DiscoveryRequest) {
        if self.node.is_none() {
            self.node = request.node.as_ref().map(|n| n.id.clone());
        }
        // A locator names its resource; the parameters choose nothing here:
        // every variant of a name is sent (the gateway chooses).
        let mut names = request.resource_names;
        names.extend(request.resource_locators.into_iter().map(|l| l.name));
        names.sort();
        names.dedup();
        let type_url = request.type_url;
        let named = names.iter().any(|n| n != "*");
        let strict = self.shared.empty_unsubscribes.load(Ordering::SeqCst);
        let answer = match self.subscribed.get_mut(&type_url) {
            Some(sub) if strict && sub.named && names.is_empty() => {
                // Unsubscribed from the type: nothing more is sent.
                self.subscribed.remove(&type_url);
                false
            }
            // An ACK or NACK of what was sent: nothing new to say.
            Some(sub) if sub.names == names => false,
            Some(sub) => {
                sub.names = names;
                sub.named |= named;
                true
            }
            None => {
                let quiet = self.shared.quiet_on_current.load(Ordering::SeqCst);
                let current = lock(&self.shared.snapshot)
                    .get(&type_url)
                    .filter(|entry| quiet && entry.version == request.version_info)
                    .map(|entry| entry.generation);
                // Quiet: the client holds the current version, nothing to say.
                let sent = current.unwrap_or(0);
                self.subscribed
                    .insert(type_url.clone(), Subscribed { names, named, sent });
                current.is_none()
            }
        };
        if answer {
            self.send(&type_url).await;
        }
    }

    /// Sends every subscribed type whose snapshot entry changed since it
    /// was sent, and once each type pushed unasked.
    async fn push_changed(&mut self) {
        let unasked: Vec<String> = lock(&self.shared.unasked).clone();
        for type_url in unasked {
            if self.sent_unasked.insert(type_url.clone()) {
                self.send_unasked(&type_url).await;
            }
        }
        let stale: Vec<String> = {
            let snapshot = lock(&self.shared.snapshot);
            self.subscribed
                .iter()
                .filter(|(type_url, sub)| {
                    snapshot
                        .get(*type_url)
                        .is_some_and(|e| e.generation != sub.sent)
                })
                .map(|(type_url, _)| type_url.clone())
                .collect()
        };
        for type_url in stale {
            self.send(&type_url).await;
        }
    }

    /// Sends the current entry of `type_url`, filtered by the subscribed names.
    /// Sends `type_url`'s entry, whole, though the stream did not ask.
    async fn send_unasked(&mut self, type_url: &str) {
        let Some(entry) = lock(&self.shared.snapshot).get(type_url).cloned() else {
            return;
        };
        let resources = encode_resources(entry.resources.iter().map(|(_, any, _)| any));
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        let response = encode_response(&entry, &resources, type_url, &nonce);
        lock(&self.shared.responses).push(SentRecord {
            stream: self.id,
            type_url: type_url.to_owned(),
            version_info: entry.version,
            nonce,
            names: SentNames::All(entry.resources.clone()),
        });
        let _ = self.tx.send(Ok(response)).await;
    }

    async fn send(&mut self, type_url: &str) {
        let Some(sub) = self.subscribed.get_mut(type_url) else {
            return;
        };
        let Some(entry) = lock(&self.shared.snapshot).get(type_url).cloned() else {
            return;
        };
        let wildcard = sub.names.is_empty() || sub.names.iter().any(|n| n == "*");
        let (names, resources) = if wildcard {
            let encoded = entry
                .encoded
                .get_or_init(|| encode_resources(entry.resources.iter().map(|(_, any, _)| any)));
            (SentNames::All(entry.resources.clone()), encoded.clone())
        } else {
            // `names` is sorted and de-duplicated (see `subscribe`).
            let taken: Vec<&Held> = entry
                .resources
                .iter()
                .filter(|(key, _, _)| sub.names.binary_search(&name_part(key).to_owned()).is_ok())
                .collect();
            (
                SentNames::These(
                    taken
                        .iter()
                        .map(|(key, _, _)| name_part(key).to_owned())
                        .collect(),
                ),
                encode_resources(taken.iter().map(|(_, any, _)| any)),
            )
        };
        sub.sent = entry.generation;
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        let response = encode_response(&entry, &resources, type_url, &nonce);
        lock(&self.shared.responses).push(SentRecord {
            stream: self.id,
            type_url: type_url.to_owned(),
            version_info: entry.version,
            nonce,
            names,
        });
        let _ = self.tx.send(Ok(response)).await;
        self.shared.sent_to(self.node.as_deref());
    }
}

/// One delta stream's subscription to one type.
#[derive(Default)]
struct DeltaSubscribed {
    wildcard: bool,
    names: BTreeSet<String>,
    /// Version of every resource sent, by name.
    sent: HashMap<String, String>,
    /// The entry generation `sent` is up to date with, for these names
    /// (`None`: compare every resource next time).
    generation: Option<u64>,
}

impl DeltaSubscribed {
    fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }
}

struct DeltaTask {
    id: usize,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Result<DeltaDiscoveryResponse, Status>>,
    subscribed: BTreeMap<String, DeltaSubscribed>,
    nonce: u64,
    /// The node id of the stream's first request that had a node.
    node: Option<String>,
}

impl DeltaTask {
    async fn run(
        mut self,
        mut inbound: Streaming<DeltaDiscoveryRequest>,
        mut changed: watch::Receiver<u64>,
    ) {
        self.shared.open.fetch_add(1, Ordering::SeqCst);
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(request)) => self.request(request).await,
                    _ => break,
                },
                tick = changed.changed() => {
                    if tick.is_err() {
                        break;
                    }
                    let types: Vec<String> = self.subscribed.keys().cloned().collect();
                    for type_url in types {
                        self.send(&type_url, false).await;
                    }
                }
            }
            if self.tx.is_closed() {
                break;
            }
        }
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
    }

    async fn request(&mut self, request: DeltaDiscoveryRequest) {
        lock(&self.shared.requests).push(Recorded {
            stream: self.id,
            type_url: request.type_url.clone(),
            version_info: String::new(),
            nonce: request.response_nonce.clone(),
            names: request
                .resource_names_subscribe
                .iter()
                .chain(request.resource_locators_subscribe.iter().map(|l| &l.name))
                .cloned()
                .collect(),
            error_detail: request.error_detail.as_ref().map(|s| s.message.clone()),
            node_id: request.node.as_ref().map(|n| n.id.clone()),
            dynamic_parameters: dynamic_parameters(request.node.as_ref()),
            bytes: request.encoded_len(),
            locators: locators(&request.resource_locators_subscribe),
        });
        let mut request = request;
        let subscribe = std::mem::take(&mut request.resource_locators_subscribe);
        let unsubscribe = std::mem::take(&mut request.resource_locators_unsubscribe);
        request
            .resource_names_subscribe
            .extend(subscribe.into_iter().map(|l| l.name));
        request
            .resource_names_unsubscribe
            .extend(unsubscribe.into_iter().map(|l| l.name));
        if self.node.is_none() {
            self.node = request.node.as_ref().map(|n| n.id.clone());
        }
        let first = !self.subscribed.contains_key(&request.type_url);
        let sub = self.subscribed.entry(request.type_url.clone()).or_default();
        if first && request.resource_names_subscribe.is_empty() {
            sub.wildcard = true;
        }
        for name in &request.resource_names_subscribe {
            if name == "*" {
                sub.wildcard = true;
            } else {
                sub.names.insert(name.clone());
            }
        }
        for name in &request.resource_names_unsubscribe {
            if name == "*" {
                sub.wildcard = false;
            } else {
                sub.names.remove(name);
            }
        }
        let changed = first
            || !request.resource_names_subscribe.is_empty()
            || !request.resource_names_unsubscribe.is_empty();
        if changed {
            sub.generation = None;
            self.send(&request.type_url, first).await;
        }
    }

    /// Sends what the stream wants of `type_url` and was not sent (and
    /// what it was sent that is gone); nothing when that is nothing, unless
    /// `always` (the first answer of a type).
    async fn send(&mut self, type_url: &str, always: bool) {
        let Some(sub) = self.subscribed.get_mut(type_url) else {
            return;
        };
        let Some(entry) = lock(&self.shared.snapshot).get(type_url).cloned() else {
            return;
        };
        if sub.generation == Some(entry.generation) && !always {
            return;
        }
        let mut resources = Vec::new();
        let mut add = |sub: &mut DeltaSubscribed, (name, any, version): &Held| {
            if sub.sent.get(name) == Some(version) {
                return;
            }
            sub.sent.insert(name.clone(), version.clone());
            // A SotW wrapper set for this type is sent as the delta
            // Resource it is (its TTL and cache control with it).
            let resource = match wrapper(any) {
                // A variant keeps its `resource_name` (and no `name`).
                Some(wrapped) if wrapped.resource_name.is_some() => DeltaResource {
                    version: version.clone(),
                    ..wrapped
                },
                Some(wrapped) => DeltaResource {
                    name: name.clone(),
                    version: version.clone(),
                    ..wrapped
                },
                None => DeltaResource {
                    name: name.clone(),
                    version: version.clone(),
                    resource: Some(any.clone()),
                    ..Default::default()
                },
            };
            resources.push(resource);
        };
        let removed: Vec<String> = match &entry.changes {
            // Up to date with the entry before: only what it changed.
            Some(changes) if sub.generation == Some(entry.generation - 1) => {
                for &i in &changes.changed {
                    if sub.wants(name_part(&entry.resources[i].0)) {
                        add(sub, &entry.resources[i]);
                    }
                }
                changes
                    .removed
                    .iter()
                    .filter(|name| sub.sent.remove(*name).is_some())
                    .cloned()
                    .collect()
            }
            _ => {
                let mut present = BTreeSet::new();
                for held in entry.resources.iter() {
                    if sub.wants(name_part(&held.0)) {
                        present.insert(held.0.as_str());
                        add(sub, held);
                    }
                }
                let removed: Vec<String> = sub
                    .sent
                    .keys()
                    .filter(|n| !present.contains(n.as_str()))
                    .cloned()
                    .collect();
                for name in &removed {
                    sub.sent.remove(name);
                }
                removed
            }
        };
        sub.generation = Some(entry.generation);
        if resources.is_empty() && removed.is_empty() && !always {
            return;
        }
        self.shared
            .delta_resources_sent
            .fetch_add(resources.len(), Ordering::SeqCst);
        self.nonce += 1;
        // A variant goes as its name and constraints.
        let (variants, removed): (Vec<String>, Vec<String>) =
            removed.into_iter().partition(|key| key.contains('\0'));
        let removed_resource_names = variants
            .iter()
            .map(|key| {
                let (name, hex_constraints) = key.split_once('\0').unwrap_or((key, ""));
                let bytes = hex::decode(hex_constraints).unwrap_or_default();
                ResourceName {
                    name: name.to_owned(),
                    dynamic_parameter_constraints:
                        envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints::decode(
                            bytes.as_slice(),
                        )
                        .ok(),
                }
            })
            .collect();
        let response = DeltaDiscoveryResponse {
            system_version_info: entry.version,
            resources,
            type_url: type_url.to_owned(),
            removed_resources: removed,
            removed_resource_names,
            nonce: self.nonce.to_string(),
            resource_errors: entry.errors.to_vec(),
            ..Default::default()
        };
        let _ = self.tx.send(Ok(response)).await;
        self.shared.sent_to(self.node.as_deref());
    }
}
