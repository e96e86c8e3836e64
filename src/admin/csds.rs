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
pub(super) use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_server::{
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
            Some(matcher)
                if m.node_metadatas.is_empty()
                    && !matches!(
                        matcher.match_pattern,
                        Some(MatchPattern::SafeRegex(_) | MatchPattern::Custom(_))
                    ) =>
            {
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
    let text = |s: &str| value(Kind::StringValue(s.to_owned()));
    let entries = placements
        .iter()
        .map(|p| {
            value(Kind::StructValue(fields([
                ("serves", text(&p.serves)),
                ("stream", text(p.stream)),
                ("upstream", text(&p.placement.upstream)),
                ("since", text(&p.placement.since)),
                ("reason", text(&p.placement.reason)),
            ])))
        })
        .collect();
    let upstreams = value(Kind::ListValue(ListValue { values: entries }));
    fields([(
        "xds_gateway",
        value(Kind::StructValue(fields([("upstreams", upstreams)]))),
    )])
}

fn value(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

fn fields<const N: usize>(fields: [(&str, Value); N]) -> Struct {
    Struct {
        fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    }
}

fn client_config(node: &NodeClients, states: &[Arc<TypeState>], contents: bool) -> ClientConfig {
    // Per (type, name): the most recently polled subscription asking for it.
    let mut asked: BTreeMap<(usize, String), &SubscriptionStatus> = BTreeMap::new();
    let mut wildcard: BTreeMap<usize, &SubscriptionStatus> = BTreeMap::new();
    for sub in &node.subscriptions {
        let kind = sub.kind.index();
        match &sub.names {
            None => {
                let slot = wildcard.entry(kind).or_insert(sub);
                if slot.last_poll < sub.last_poll {
                    *slot = sub;
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
    let nacked = |details| {
        let failure = UpdateFailureState {
            failed_configuration: None,
            last_update_attempt: sub.last_body.map(timestamp),
            details,
            version_info: sub.current.clone(),
        };
        (
            ClientResourceStatus::Nacked,
            ConfigStatus::Error,
            Some(failure),
        )
    };
    let (client_status, config_status, error_state) = match sub.standing {
        Standing::InStep => (ClientResourceStatus::Acked, ConfigStatus::Synced, None),
        Standing::CatchingUp | Standing::Behind { .. } => {
            (ClientResourceStatus::Requested, ConfigStatus::Stale, None)
        }
        Standing::Suspected { polls } => nacked(format!(
            "inferred over REST: the client kept presenting an older version {polls} polls after version {} was served to it, so it probably rejected it",
            sub.current
        )),
        Standing::Rejected => nacked(format!(
            "NACKed over REST by the client: {}",
            sub.nack.as_deref().unwrap_or_default()
        )),
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

/// The gRPC service over the admin state, gated by the admin credentials
/// like the other details.
#[derive(Debug, Clone)]
pub(crate) struct Csds(pub(crate) Arc<Admin>);

impl Csds {
    /// Whether `authorization` over a connection whose client certificate
    /// is `peer` opens the admin details now.
    fn check(&self, (authorization, peer): &Credentials) -> Result<(), tonic::Status> {
        self.0
            .authorize_details("CSDS", authorization.as_deref(), peer.as_deref())
            .map_err(tonic::Status::unauthenticated)
    }
}

/// A call's `authorization` metadata and the TLS client certificate of its
/// connection, each if any.
type Credentials = (Option<String>, Option<Arc<PeerIdentity>>);

fn credentials<T>(request: &tonic::Request<T>) -> Credentials {
    let authorization = request.metadata().get("authorization");
    (
        authorization
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        request.extensions().get::<Arc<PeerIdentity>>().cloned(),
    )
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl ClientStatusDiscoveryService for Csds {
    type StreamClientStatusStream = StatusStream;

    async fn stream_client_status(
        &self,
        request: tonic::Request<tonic::Streaming<ClientStatusRequest>>,
    ) -> Result<tonic::Response<StatusStream>, tonic::Status> {
        let credentials = credentials(&request);
        self.check(&credentials)?;
        // Each question is authorized again with the token the stream
        // opened with, against the policy in service then: a token removed
        // by a reload gets no answer after it (the stream ends with the
        // error).
        let csds = self.clone();
        let answers = request.into_inner().map(move |request| {
            let request = request?;
            csds.check(&credentials)?;
            Ok(client_status(&csds.0, &request)?)
        });
        Ok(tonic::Response::new(Box::pin(answers)))
    }

    async fn fetch_client_status(
        &self,
        request: tonic::Request<ClientStatusRequest>,
    ) -> Result<tonic::Response<ClientStatusResponse>, tonic::Status> {
        self.check(&credentials(&request))?;
        let answer = client_status(&self.0, request.get_ref())?;
        Ok(tonic::Response::new(answer))
    }
}
