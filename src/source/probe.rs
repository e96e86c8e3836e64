//! `--upstream-mode auto`: find out which xDS API the control plane
//! implements — delta ADS, else SotW ADS, else the unary Fetch RPCs — by
//! what it answers (UNIMPLEMENTED or not).
//!
//! A probe opens the method with one harmless request (LDS, wildcard, the
//! gateway's own node id) and waits at most [`PROBE_WAIT`]: UNIMPLEMENTED
//! means "not this one"; any other answer, or silence (a stream the server
//! keeps open), means the method exists. Transport failures mean the
//! upstream cannot be reached yet: the caller retries with backoff.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use tonic::Code;

use super::fetch::FetchError;
use super::UpstreamContext;
use crate::config::UpstreamMode;
use crate::xds::{Endpoint, ResourceType};

/// How long one probe waits for an answer.
const PROBE_WAIT: Duration = Duration::from_secs(2);
/// Node id the probes present.
const PROBE_NODE: &str = "xds-gateway-probe";

/// What one probe found out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Implemented,
    Unimplemented,
    /// The upstream could not be reached (or answered UNAVAILABLE).
    Unreachable(String),
}

fn classify(result: Result<(), tonic::Status>) -> Probe {
    match result {
        Ok(()) => Probe::Implemented,
        Err(status) => match status.code() {
            Code::Unimplemented => Probe::Unimplemented,
            Code::Unavailable => Probe::Unreachable(status.message().to_owned()),
            _ => Probe::Implemented,
        },
    }
}

fn node() -> Node {
    Node {
        id: PROBE_NODE.to_owned(),
        ..Default::default()
    }
}

/// Why no mode was found (this time).
#[derive(Debug, thiserror::Error)]
pub(super) enum ProbeError {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("the upstream implements neither delta ADS, SotW ADS nor the Fetch RPCs")]
    NothingImplemented,
    #[error("the upstream's gRPC health service says {0}")]
    NotServing(String),
}

/// Whether the upstream answers gRPC now: its `grpc.health.v1.Health/Check`
/// (overall service, `""`) says SERVING, or it has no health service
/// (UNIMPLEMENTED: it still answered). NOT_SERVING, UNAVAILABLE, a transport
/// failure or no answer within [`PROBE_WAIT`] are errors. Any other status
/// (an auth failure, say) is an answer too: the sessions will report it.
pub(super) async fn answers_health_check(ctx: &UpstreamContext) -> Result<(), ProbeError> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let mut client = HealthClient::new(ctx.channel.clone());
    let request = ctx.request(HealthCheckRequest {
        service: String::new(),
    });
    let answer = tokio::time::timeout(PROBE_WAIT, client.check(request))
        .await
        .map_err(|_| ProbeError::Unreachable(format!("no answer within {PROBE_WAIT:?}")))?;
    match answer {
        Ok(response) => match response.into_inner().status() {
            ServingStatus::Serving => Ok(()),
            other => Err(ProbeError::NotServing(other.as_str_name().to_owned())),
        },
        Err(status) => match classify(Err(status)) {
            Probe::Unreachable(why) => Err(ProbeError::Unreachable(why)),
            Probe::Implemented | Probe::Unimplemented => Ok(()),
        },
    }
}

/// The first mode of delta, SotW, fetch that the upstream implements.
pub(super) async fn resolve(ctx: &UpstreamContext) -> Result<UpstreamMode, ProbeError> {
    let lds = ResourceType::Listeners.type_url().to_owned();
    let mut client = AggregatedDiscoveryServiceClient::new(ctx.channel.clone());
    let delta = DeltaDiscoveryRequest {
        node: Some(node()),
        type_url: lds.clone(),
        ..Default::default()
    };
    let outcome = bounded(async {
        client
            .delta_aggregated_resources(ctx.request(tokio_stream::iter(vec![delta])))
            .await
            .map(|_| ())
    })
    .await;
    match classify(outcome) {
        Probe::Implemented => return Ok(UpstreamMode::Delta),
        Probe::Unreachable(why) => return Err(ProbeError::Unreachable(why)),
        Probe::Unimplemented => {}
    }
    let sotw = DiscoveryRequest {
        node: Some(node()),
        type_url: lds.clone(),
        ..Default::default()
    };
    let outcome = bounded(async {
        client
            .stream_aggregated_resources(ctx.request(tokio_stream::iter(vec![sotw])))
            .await
            .map(|_| ())
    })
    .await;
    match classify(outcome) {
        Probe::Implemented => return Ok(UpstreamMode::Sotw),
        Probe::Unreachable(why) => return Err(ProbeError::Unreachable(why)),
        Probe::Unimplemented => {}
    }
    let fetch = DiscoveryRequest {
        node: Some(node()),
        type_url: lds,
        ..Default::default()
    };
    let outcome = bounded(async {
        ctx.unary::<_, DiscoveryResponse>(Endpoint::Discovery(ResourceType::Listeners), fetch)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                FetchError::Upstream { code, message, .. } => tonic::Status::new(code, message),
                FetchError::BadAnswer(m) => tonic::Status::internal(m),
            })
    })
    .await;
    match classify(outcome) {
        Probe::Implemented => Ok(UpstreamMode::Fetch),
        Probe::Unreachable(why) => Err(ProbeError::Unreachable(why)),
        Probe::Unimplemented => Err(ProbeError::NothingImplemented),
    }
}

/// A probe that has not failed within [`PROBE_WAIT`] counts as implemented.
async fn bounded(
    call: impl std::future::Future<Output = Result<(), tonic::Status>>,
) -> Result<(), tonic::Status> {
    tokio::time::timeout(PROBE_WAIT, call)
        .await
        .unwrap_or(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(classify(Ok(())), Probe::Implemented);
        assert_eq!(
            classify(Err(tonic::Status::unimplemented("no"))),
            Probe::Unimplemented
        );
        assert!(matches!(
            classify(Err(tonic::Status::unavailable("down"))),
            Probe::Unreachable(_)
        ));
        assert_eq!(
            classify(Err(tonic::Status::invalid_argument("bad node"))),
            Probe::Implemented
        );
    }
}
