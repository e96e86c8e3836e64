//! Client Status Discovery Service for the REST clients this gateway
//! serves: `envoy.service.status.v3.ClientStatusDiscoveryService` over gRPC
//! on the admin listener (`FetchClientStatus`, `StreamClientStatus`), and
//! the same `ClientStatusResponse` as canonical JSON at
//! `/debug/client_status`.
//!
//! One `ClientConfig` per node id (its REST clients merged), with one
//! `GenericXdsConfig` per type and resource its clients subscribe to: the
//! version it was answered at, when a body last went to it, and a status
//! inferred from what it presents (REST has no ACK): `ACKED` when it
//! presents the current version, `REQUESTED` while a newer one is out,
//! `NACKED` with the reason when a rejection is suspected, `DOES_NOT_EXIST`
//! for a name the upstream does not have. The upstream pass-through of
//! `POST /v3/discovery:client_status` (the control plane's own view) is
//! another thing, in `http::passthrough`.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use envoy_types::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::StringMatcher;
use envoy_types::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
    ClientStatusDiscoveryService, ClientStatusDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Any, ListValue, Struct, Timestamp, Value};
use futures::Stream;
use tokio_stream::StreamExt;

use super::Admin;
use crate::cache::TypeState;
use crate::observe::{NodeClients, Standing, SubscriptionStatus};
use crate::store::StreamPlacement;
use crate::tls::PeerIdentity;

/// Why a CSDS request cannot be answered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum CsdsError {
    #[error(
        "node matcher {0}: only exact, prefix, suffix and contains node_id matchers are supported"
    )]
    Unsupported(usize),
}

impl From<CsdsError> for tonic::Status {
    fn from(err: CsdsError) -> tonic::Status {
        tonic::Status::unimplemented(err.to_string())
    }
}

/// The CSDS answer to `request` from what `admin` knows now.
pub(crate) fn client_status(
    admin: &Admin,
    request: &ClientStatusRequest,
) -> Result<ClientStatusResponse, CsdsError> {
    let matchers = request
        .node_matchers
        .iter()
        .enumerate()
        .map(|(i, m)| match &m.node_id {
            Some(matcher) if supported(matcher) && m.node_metadatas.is_empty() => {
                Ok(matcher.clone())
            }
            None if m.node_metadatas.is_empty() => Ok(StringMatcher::default()),
            _ => Err(CsdsError::Unsupported(i)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = admin
        .clients
        .nodes()
        .into_iter()
        .filter(|node| matchers.is_empty() || matchers.iter().any(|m| matches(m, &node.node_id)))
        .map(|node| {
            let states = admin.source.states_of(&node.node_id);
            let mut config = client_config(&node, &states, !request.exclude_resource_contents);
            let placements = admin.source.placements_of(&node.node_id);
            if let Some(node) = config.node.as_mut().filter(|_| !placements.is_empty()) {
                node.metadata = Some(placement_metadata(&placements));
            }
            config
        })
        .collect();
    Ok(ClientStatusResponse { config })
}

fn supported(matcher: &StringMatcher) -> bool {
    !matches!(
        matcher.match_pattern,
        Some(MatchPattern::SafeRegex(_)) | Some(MatchPattern::Custom(_))
    )
}

fn matches(matcher: &StringMatcher, id: &str) -> bool {
    let fold = |s: &str| {
        if matcher.ignore_case {
            s.to_lowercase()
        } else {
            s.to_owned()
        }
    };
    let id = fold(id);
    match &matcher.match_pattern {
        None => true,
        Some(MatchPattern::Exact(s)) => id == fold(s),
        Some(MatchPattern::Prefix(s)) => id.starts_with(&fold(s)),
        Some(MatchPattern::Suffix(s)) => id.ends_with(&fold(s)),
        Some(MatchPattern::Contains(s)) => id.contains(&fold(s)),
        Some(MatchPattern::SafeRegex(_)) | Some(MatchPattern::Custom(_)) => false,
    }
}

/// The node metadata that says, with failover configured, which upstream
/// each of the node's sessions streams from and why:
/// `{"xds_gateway": {"upstreams": [{"serves", "stream", "upstream",
/// "since", "reason"}]}}` (CSDS has no field of its own for it).
fn placement_metadata(placements: &[StreamPlacement]) -> Struct {
    let text = |s: &str| Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    };
    let entries = placements
        .iter()
        .map(|p| {
            let fields = [
                ("serves", p.serves.as_str()),
                ("stream", p.stream),
                ("upstream", p.placement.upstream.as_str()),
                ("since", p.placement.since.as_str()),
                ("reason", p.placement.reason.as_str()),
            ];
            Value {
                kind: Some(Kind::StructValue(Struct {
                    fields: fields
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), text(v)))
                        .collect(),
                })),
            }
        })
        .collect();
    let upstreams = Value {
        kind: Some(Kind::ListValue(ListValue { values: entries })),
    };
    let gateway = Value {
        kind: Some(Kind::StructValue(Struct {
            fields: [("upstreams".to_owned(), upstreams)].into(),
        })),
    };
    Struct {
        fields: [(PLACEMENT_KEY.to_owned(), gateway)].into(),
    }
}

/// The node metadata key under which CSDS says where sessions stream from.
const PLACEMENT_KEY: &str = "xds_gateway";

fn client_config(node: &NodeClients, states: &[Arc<TypeState>], contents: bool) -> ClientConfig {
    // Per (type, name): the most recently polled subscription asking for it.
    let mut asked: BTreeMap<(usize, String), &SubscriptionStatus> = BTreeMap::new();
    let mut wildcard: BTreeMap<usize, &SubscriptionStatus> = BTreeMap::new();
    for sub in &node.subscriptions {
        let kind = sub.kind.index();
        match &sub.names {
            None => {
                let newer = wildcard
                    .get(&kind)
                    .is_none_or(|w| w.last_poll < sub.last_poll);
                if newer {
                    wildcard.insert(kind, sub);
                }
            }
            Some(names) => {
                for name in names {
                    let slot = asked.entry((kind, name.clone())).or_insert(sub);
                    if slot.last_poll < sub.last_poll {
                        *slot = sub;
                    }
                }
            }
        }
    }
    let state_of = |kind: usize| states.iter().find(|s| s.kind.index() == kind);
    let mut configs = Vec::new();
    // Wildcard subscriptions: every resource of the state.
    for (kind, sub) in &wildcard {
        if let Some(state) = state_of(*kind) {
            for name in state.resources.keys() {
                if !asked.contains_key(&(*kind, name.clone())) {
                    configs.push(generic(state, name, sub, contents));
                }
            }
        }
    }
    for ((kind, name), sub) in &asked {
        match state_of(*kind) {
            Some(state) if state.resources.contains_key(name) => {
                configs.push(generic(state, name, sub, contents));
            }
            _ => configs.push(GenericXdsConfig {
                type_url: sub.kind.type_url().to_owned(),
                name: name.clone(),
                version_info: sub.current.clone(),
                client_status: ClientResourceStatus::DoesNotExist as i32,
                config_status: ConfigStatus::NotSent as i32,
                ..GenericXdsConfig::default()
            }),
        }
    }
    configs.sort_by(|a, b| (&a.type_url, &a.name).cmp(&(&b.type_url, &b.name)));
    ClientConfig {
        node: Some(Node {
            id: node.node_id.clone(),
            cluster: node.cluster.clone(),
            user_agent_name: node.user_agent.clone(),
            ..Node::default()
        }),
        generic_xds_configs: configs,
        ..ClientConfig::default()
    }
}

/// One resource as one client stands with it.
fn generic(
    state: &TypeState,
    name: &str,
    sub: &SubscriptionStatus,
    contents: bool,
) -> GenericXdsConfig {
    let resource = state.resources.get(name);
    let xds_config = resource.filter(|_| contents).map(|r| Any {
        type_url: r.kind.type_url().to_owned(),
        value: r.payload.to_vec(),
    });
    let (client_status, config_status, error_state) = match sub.standing {
        Standing::InStep => (ClientResourceStatus::Acked, ConfigStatus::Synced, None),
        Standing::CatchingUp | Standing::Behind { .. } => {
            (ClientResourceStatus::Requested, ConfigStatus::Stale, None)
        }
        Standing::Suspected { .. } | Standing::Rejected => {
            let details = match sub.standing {
                Standing::Suspected { polls } => format!(
                    "inferred over REST: the client kept presenting an older version {polls} polls after version {} was served to it, so it probably rejected it",
                    sub.current
                ),
                _ => format!(
                    "NACKed over REST by the client: {}",
                    sub.nack.as_deref().unwrap_or_default()
                ),
            };
            (
                ClientResourceStatus::Nacked,
                ConfigStatus::Error,
                Some(UpdateFailureState {
                    failed_configuration: None,
                    last_update_attempt: sub.last_body.map(timestamp),
                    details,
                    version_info: sub.current.clone(),
                }),
            )
        }
    };
    GenericXdsConfig {
        type_url: state.kind.type_url().to_owned(),
        name: name.to_owned(),
        version_info: sub.current.clone(),
        xds_config,
        last_updated: sub.last_body.map(timestamp),
        config_status: config_status as i32,
        client_status: client_status as i32,
        error_state,
        is_static_resource: false,
    }
}

fn timestamp(t: SystemTime) -> Timestamp {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

/// The gRPC service over the admin state.
#[derive(Debug, Clone)]
pub(crate) struct Csds(pub(crate) Arc<Admin>);

impl Csds {
    /// The service, gated by the admin tokens like the other details.
    pub(crate) fn server(admin: Arc<Admin>) -> ClientStatusDiscoveryServiceServer<Csds> {
        ClientStatusDiscoveryServiceServer::new(Csds(admin))
    }

    fn check_token<T>(&self, request: &tonic::Request<T>) -> Result<(), tonic::Status> {
        self.check(
            self.token_of(request).as_deref(),
            peer_of(request).as_deref(),
        )
    }

    /// The `authorization` metadata of a call, if any.
    fn token_of<T>(&self, request: &tonic::Request<T>) -> Option<String> {
        request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// Whether `authorization` over a connection whose client certificate
    /// is `peer` opens the admin details now.
    fn check(
        &self,
        authorization: Option<&str>,
        peer: Option<&PeerIdentity>,
    ) -> Result<(), tonic::Status> {
        self.0
            .authorize_details("CSDS", authorization, peer)
            .map_err(tonic::Status::unauthenticated)
    }
}

/// The TLS client certificate of a call's connection, if it presented one.
fn peer_of<T>(request: &tonic::Request<T>) -> Option<Arc<PeerIdentity>> {
    request.extensions().get::<Arc<PeerIdentity>>().cloned()
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl ClientStatusDiscoveryService for Csds {
    type StreamClientStatusStream = StatusStream;

    async fn stream_client_status(
        &self,
        request: tonic::Request<tonic::Streaming<ClientStatusRequest>>,
    ) -> Result<tonic::Response<StatusStream>, tonic::Status> {
        self.check_token(&request)?;
        // Each question is authorized again with the token the stream
        // opened with, against the policy in service then: a token removed
        // by a reload gets no answer after it (the stream ends with the
        // error).
        let token = self.token_of(&request);
        let peer = peer_of(&request);
        let csds = self.clone();
        let answers = request.into_inner().map(move |request| {
            let request = request?;
            csds.check(token.as_deref(), peer.as_deref())?;
            client_status(&csds.0, &request).map_err(tonic::Status::from)
        });
        Ok(tonic::Response::new(Box::pin(answers)))
    }

    async fn fetch_client_status(
        &self,
        request: tonic::Request<ClientStatusRequest>,
    ) -> Result<tonic::Response<ClientStatusResponse>, tonic::Status> {
        self.check_token(&request)?;
        let answer = client_status(&self.0, request.get_ref())?;
        Ok(tonic::Response::new(answer))
    }
}
