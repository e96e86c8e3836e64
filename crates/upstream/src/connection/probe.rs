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
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use tonic::Code;

use super::{CallError, UpstreamContext};
use crate::config::{UpstreamMode, UpstreamStreams};
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
pub(crate) enum ProbeError {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("the upstream implements neither ADS, the per-type streams nor the Fetch RPCs")]
    NothingImplemented,
    #[error("the upstream's gRPC health service says {0}")]
    NotServing(String),
}

/// Whether the upstream answers gRPC now: its `grpc.health.v1.Health/Check`
/// (overall service, `""`) says SERVING, or it has no health service
/// (UNIMPLEMENTED: it still answered). NOT_SERVING, UNAVAILABLE, a transport
/// failure or no answer within [`PROBE_WAIT`] are errors. Any other status
/// (an auth failure, say) is an answer too: the sessions will report it.
pub(crate) async fn answers_health_check(ctx: &UpstreamContext) -> Result<(), ProbeError> {
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

/// The transport the upstream implements first, in this order: delta
/// ADS, SotW ADS, per-type delta, per-type SotW (a control plane that
/// serves only the types' own services, as Contour does), unary Fetch.
/// Each is probed with a request for listeners by a probe node; only
/// UNIMPLEMENTED moves on to the next.
pub(crate) async fn resolve(
    ctx: &UpstreamContext,
) -> Result<(UpstreamMode, UpstreamStreams), ProbeError> {
    let lds = ResourceType::Listeners;
    let delta = DeltaDiscoveryRequest {
        node: Some(node()),
        type_url: lds.type_url().to_owned(),
        ..Default::default()
    };
    let sotw = DiscoveryRequest {
        node: Some(node()),
        type_url: lds.type_url().to_owned(),
        ..Default::default()
    };
    use {UpstreamMode::Delta, UpstreamStreams::*};
    let modes = [UpstreamMode::Delta, UpstreamMode::Sotw];
    for (streams, mode) in [Aggregated, PerType]
        .into_iter()
        .flat_map(|s| modes.map(|m| (s, m)))
    {
        let path = match streams {
            Aggregated if mode == Delta => DELTA_ADS.to_owned(),
            Aggregated => SOTW_ADS.to_owned(),
            PerType => lds.stream_path(mode == Delta).unwrap_or_default(),
        };
        let outcome = bounded(async {
            match mode {
                Delta => open_stream::<_, DeltaDiscoveryResponse>(ctx, &path, delta.clone()).await,
                _ => open_stream::<_, DiscoveryResponse>(ctx, &path, sotw.clone()).await,
            }
        });
        match classify(outcome.await) {
            Probe::Implemented => return Ok((mode, streams)),
            Probe::Unreachable(why) => return Err(ProbeError::Unreachable(why)),
            Probe::Unimplemented => {}
        }
    }
    let outcome = bounded(async {
        ctx.unary::<_, DiscoveryResponse>(Endpoint::Discovery(lds), sotw)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                CallError::Upstream { code, message, .. } => tonic::Status::new(code, message),
                CallError::BadAnswer(m) => tonic::Status::internal(m),
            })
    })
    .await;
    match classify(outcome) {
        Probe::Implemented => Ok((UpstreamMode::Fetch, UpstreamStreams::Aggregated)),
        Probe::Unreachable(why) => Err(ProbeError::Unreachable(why)),
        Probe::Unimplemented => Err(ProbeError::NothingImplemented),
    }
}

/// The aggregated (ADS) methods, SotW and delta.
pub(crate) const SOTW_ADS: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
pub(crate) const DELTA_ADS: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";

/// Opens the streaming call `path` with `first` as its only request; Ok
/// once the response headers came (the method exists).
async fn open_stream<Req, Resp>(
    ctx: &UpstreamContext,
    path: &str,
    first: Req,
) -> Result<(), tonic::Status>
where
    Req: prost::Message + Send + 'static,
    Resp: prost::Message + Default + Send + 'static,
{
    let requests = tokio_stream::iter(vec![first]);
    ctx.streaming::<Req, Resp>(path, requests).await.map(|_| ())
}

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
