//! Wires a [`Config`] into the cache, the source and the two servers, and
//! runs them until shutdown. The one place that chooses what kind of
//! [`Source`] feeds the gateway (`build_source`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::admin::{self, Admin};
use crate::auth::{AuthPolicy, PolicyError};
use crate::cache::{Assembler, Intake};
use crate::config::{Config, SessionKey, UpstreamMode, UpstreamSpec, UpstreamStreams, Validation};
use crate::drain::Drain;
use crate::http::{self, Gateway};
use crate::metrics::Metrics;
use crate::observe::history_file::{HistoryFile, HistoryFileError};
use crate::observe::{ConfigHistory, HistorySink};
use crate::profiles::{NodeProfiles, ProfileError};
use crate::serve::{self, ListenerSpec, ServeLimits};
use crate::store::{Feed, Feeder, Inspect, Namespace, Sessions, Source, UpstreamSlot};
use crate::tls::ServerTls;
use crate::upstream::{
    AutoFeeder, Choose, DeltaFeeder, FetchFeeder, FileFeeder, Origin, Route, SotwFeeder,
    UpstreamContext,
};
use crate::xds::{Codec, JsonError, ResourceType};

pub use crate::huge_pages::transparent_huge_pages_off;

pub use crate::tls::TlsError;
pub use crate::upstream::{descriptor_set, DescriptorsError, StartError};

/// Connections the admin listener takes at once (probes, scrapers, people).
const ADMIN_MAX_CONNECTIONS: usize = 128;
/// How long admin requests may take to finish at shutdown.
const ADMIN_DRAIN: Duration = Duration::from_secs(5);
/// HTTP/2 requests in flight on one admin connection at most.
const ADMIN_MAX_STREAMS: u32 = 100;

/// Why the gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Descriptors(#[from] JsonError),
    #[error(transparent)]
    ExtraType(#[from] crate::xds::extra_types::ExtraTypeError),
    #[error(transparent)]
    Upstream(#[from] StartError),
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Profiles(#[from] ProfileError),
    #[error(transparent)]
    HistoryFile(#[from] HistoryFileError),
    /// The admin listener off loopback would serve secrets without a
    /// credential.
    #[error(
        "admin {0}: not a loopback address, and with --allow-secrets its /debug/config and CSDS \
         serve every node's private keys; the auth policy has no admin token \
         ([admin] token-sha256) and there are no admin client certificates (--admin-client-ca)"
    )]
    AdminUnguarded(SocketAddr),
    #[error("server failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// Serves REST on `listener` and admin on `admin_listener` until `shutdown`
/// resolves: [`prepare`], then [`Prepared::serve`]. A caller that binds its
/// own listeners should bind them between the two, as `main` does: a
/// listener bound before the gateway can accept is a black hole to a
/// balancer (its connections are accepted by the kernel and wait).
pub async fn run(
    config: Config,
    listener: TcpListener,
    admin_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    prepare(config)?
        .serve(listener, admin_listener, shutdown)
        .await
}

/// Everything the gateway needs before it can accept a connection: the
/// codec, TLS, the auth policy, the source (its upstream streams opening).
pub struct Prepared {
    config: Config,
    metrics: Arc<Metrics>,
    intake: Intake,
    /// What the REST and admin faces answer with (one body memo for both).
    assembler: Assembler,
    /// What the sessions record and the admin views read.
    history: ConfigHistory,
    source: Arc<dyn Feed>,
    auth: Option<Arc<AuthPolicy>>,
    profiles: Arc<NodeProfiles>,
    rest_spec: ListenerSpec,
    admin_spec: ListenerSpec,
}

/// The accept queue asked of the kernel for each listener (which caps it at
/// `net.core.somaxconn`, 4096 on current Linux). Connections arrive in bursts
/// (a fleet of Envoys restarting, a thousand clients polling at once), more
/// than tokio's default of 1,024 holds (`bench/identities.rs`).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener bound at `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`
/// as tokio's `TcpListener::bind` sets it, so a restarted replica rebinds
/// its port at once).
pub fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Registers each `--extra-type` (idempotent: a gateway started twice in a
/// process, as tests do, registers the same types).
fn register_extra_types(config: &Config) -> Result<(), AppError> {
    for spec in &config.extra_types {
        let definition = crate::xds::extra_types::Definition {
            name: &spec.name,
            type_url: &spec.type_url,
            service: spec.service.as_deref(),
            stem: spec.stem.as_deref(),
            complete_state: spec.complete_state,
            wildcard_when_unnamed: spec.wildcard_when_unnamed,
            name_fields: &spec.name_fields,
        };
        ResourceType::register(&definition)?;
    }
    Ok(())
}

/// Builds what [`Prepared::serve`] serves. The slow part of a start (the
/// descriptor pool, certificates, the source) happens here, before any
/// listener is bound (`main`): a replica restarted on its port refuses
/// connections until it can serve them (a balancer retries a refused
/// connection at once on another replica) instead of holding them in the
/// kernel's accept queue, where a request may outlive a REST Envoy's 1 s
/// `request_timeout` (`tests/scale_out.rs`).
pub fn prepare(config: Config) -> Result<Prepared, AppError> {
    for warning in &config.warnings {
        warn!("{warning}");
    }
    register_extra_types(&config)?;
    let codec = Codec::with_descriptor_sets(&config.descriptor_sets)?;
    let profiles = Arc::new(NodeProfiles::load(&config, &codec)?);
    if profiles.len() > 0 {
        info!(profiles = profiles.len(), "node profiles loaded");
    }
    let metrics = Arc::new(Metrics::new());
    let security = Security::start(&config, &metrics)?;
    let rest_spec = ListenerSpec {
        name: "rest",
        limits: rest_limits(&config),
        tls: security.tls,
    };
    let admin_spec = ListenerSpec {
        name: "admin",
        limits: admin_limits(&config),
        tls: security.admin_tls,
    };
    let history_file: Option<Arc<dyn HistorySink>> = match &config.history_file {
        Some(path) => Some(HistoryFile::start(
            path.clone(),
            config.history_file_max_bytes,
            config.principal_share,
        )?),
        None => None,
    };
    let history = ConfigHistory::with_max_bytes(config.history_max_bytes)
        .with_principal_share(config.principal_share)
        .with_sink(history_file);
    let assembler = Assembler::with_body_capacity(codec.clone(), config.memory.bodies);
    let intake = Intake::new(codec)
        .validating(config.validate == Validation::On)
        .counting(metrics.resources_rendered(), metrics.opaque_resources())
        .serving_keys(config.allow_secrets)
        .counting_keys_taken_out(metrics.redacted_resources());
    let source = build_source(&config, &intake, &history, &metrics)?;
    Ok(Prepared {
        config,
        metrics,
        intake,
        assembler,
        history,
        source,
        auth: security.auth,
        profiles,
        rest_spec,
        admin_spec,
    })
}

impl Prepared {
    /// Serves REST on `listener` and admin on `admin_listener` until
    /// `shutdown` resolves; then drains: `/readyz` turns 503 at once, new
    /// long polls are refused (503) and held ones answered, the REST
    /// listener stops accepting and gives requests in flight
    /// `drain_timeout` to finish; then the source closes (every upstream
    /// stream), then the admin listener.
    pub async fn serve(
        self,
        listener: TcpListener,
        admin_listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        let Prepared {
            config,
            metrics,
            intake,
            assembler,
            history,
            source,
            auth,
            profiles,
            rest_spec,
            admin_spec,
        } = self;
        let drain = Drain::default();
        let gateway = Arc::new(
            Gateway::new(
                config.rest(),
                source.clone() as Arc<dyn Source>,
                assembler.clone(),
                metrics.clone(),
            )
            .with_auth(auth.clone())
            .with_profiles(profiles)
            .with_client_trust(rest_spec.tls.clone())
            .with_admin_address(admin_listener.local_addr()?)
            .with_drain(drain.clone()),
        );
        let admin = Arc::new(
            Admin::new(
                source.clone() as Arc<dyn Inspect>,
                metrics.clone(),
                gateway.clients(),
                intake.opaque_types().clone(),
                assembler,
                history,
                config.admin_views(),
            )
            .with_auth(auth)
            .with_client_trust(admin_spec.tls.clone())
            .with_drain(drain.clone()),
        );
        info!(rest = %listener.local_addr()?, admin = %admin_listener.local_addr()?, "serving");
        let drain_timeout = config.drain_timeout;
        tokio::spawn({
            let drain = drain.clone();
            async move {
                shutdown.await;
                info!(
                    ?drain_timeout,
                    "shutting down: not ready, draining REST requests"
                );
                drain.begin();
            }
        });
        // REST drains first, while the admin listener still answers
        // (`/readyz`: 503); then the source closes, then the admin listener
        // stops.
        let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
        let rest = async {
            serve::serve(
                listener,
                http::router(gateway),
                rest_spec,
                metrics.clone(),
                drain.started(),
            )
            .await;
            source.close();
            info!("REST drained, upstream closed");
            let _ = admin_stop.send(());
        };
        let admin = serve::serve(
            admin_listener,
            admin::router(admin),
            admin_spec,
            metrics.clone(),
            async {
                let _ = admin_stopped.await;
            },
        );
        tokio::join!(rest, admin);
        Ok(())
    }
}

/// What guards the listeners, started from the config: the TLS of each
/// listener (certificates reloaded as they rotate) and the auth policy.
struct Security {
    tls: Option<Arc<ServerTls>>,
    admin_tls: Option<Arc<ServerTls>>,
    auth: Option<Arc<AuthPolicy>>,
}

impl Security {
    fn start(config: &Config, metrics: &Arc<Metrics>) -> Result<Security, AppError> {
        let by_cluster = config.session_key == SessionKey::Cluster;
        let security = Security {
            tls: (config.tls.clone())
                .map(|files| ServerTls::start("tls", files, metrics.clone()))
                .transpose()?,
            admin_tls: (config.admin_tls.clone())
                .map(|files| ServerTls::start("admin-tls", files, metrics.clone()))
                .transpose()?,
            auth: (config.auth_policy.as_deref())
                .map(|path| AuthPolicy::start(path, by_cluster, metrics.clone()))
                .transpose()?,
        };
        // Whether the admin listener asks for a credential: client
        // certificates, or an admin token in the policy.
        let admin_guarded = (security.admin_tls.as_ref())
            .is_some_and(|t| t.asks_for_client_certificates())
            || (security.auth.as_ref()).is_some_and(|a| a.current().admin_needs_token());
        if !config.admin.ip().is_loopback() && !admin_guarded {
            if config.allow_secrets {
                return Err(AppError::AdminUnguarded(config.admin));
            }
            match config.allow_insecure_admin {
                true => warn!(
                    admin = %config.admin,
                    "the admin listener is off loopback without an admin token in the auth policy \
                     or admin client certificates (--admin-client-ca), and --allow-insecure-admin \
                     opens its details: anyone who reaches it can read /metrics, /readyz details, \
                     /debug/config and CSDS (/debug/client_status), which carry every node's config"
                ),
                false => info!(
                    admin = %config.admin,
                    "the admin listener is off loopback without an admin credential: its details \
                     (/metrics, /readyz details, /debug/*, CSDS, the status page) answer 401 until \
                     the auth policy has an [admin] token or --admin-client-ca is set \
                     (--allow-insecure-admin opens them); /healthz and /readyz stay open"
                ),
            }
        }
        Ok(security)
    }
}

fn rest_limits(config: &Config) -> ServeLimits {
    let max_connections = serve::fit_fd_limit(config.max_connections, ADMIN_MAX_CONNECTIONS);
    ServeLimits {
        max_connections,
        header_read_timeout: config.header_read_timeout,
        keep_alive_timeout: config.keep_alive_timeout,
        // Held long polls are answered when draining begins; what
        // remains is a first wait or a body being written.
        drain_timeout: config.drain_timeout,
        max_streams_per_connection: config.max_streams_per_connection,
        write_stall_timeout: config.write_stall_timeout(),
        // `--source-connection-share` of the connections (`None` at 100: no
        // cap), at least one.
        max_per_source: (config.source_connection_share < 100)
            .then(|| (max_connections * usize::from(config.source_connection_share) / 100).max(1)),
        exempt_sources: config.trusted_proxies.clone(),
    }
}

/// The admin listener's limits: its own, small, apart from REST's.
fn admin_limits(config: &Config) -> ServeLimits {
    ServeLimits {
        max_connections: ADMIN_MAX_CONNECTIONS,
        header_read_timeout: config.header_read_timeout,
        keep_alive_timeout: config.keep_alive_timeout,
        drain_timeout: ADMIN_DRAIN,
        max_streams_per_connection: ADMIN_MAX_STREAMS,
        write_stall_timeout: config.write_stall_timeout(),
        // Probes and scrapers come from a few addresses: no per-source cap.
        max_per_source: None,
        exempt_sources: None,
    }
}

/// What feeds the gateway: the snapshot without an upstream; one upstream
/// in its configured mode (`auto` probes, then feeds its sessions as the
/// mode it finds would, [`grpc_feeder`]); or, for several upstreams,
/// sessions in one lane per upstream that owns names, each fed so. The
/// sessions record into `history`, which the admin views read too.
fn build_source(
    config: &Config,
    intake: &Intake,
    history: &ConfigHistory,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn Feed>, StartError> {
    let (intake, history, metrics) = (intake.clone(), history.clone(), metrics.clone());
    let upstreams = config.upstream_set();
    if upstreams.specs.is_empty() {
        let origin = match &config.snapshot {
            Some(dir) => Origin::Dir(dir.clone()),
            None => crate::demo::origin(),
        };
        let feeder = FileFeeder::start(origin, intake.clone(), config.session_key);
        let feeder = Arc::new(feeder);
        return Ok(Sessions::start(feeder, intake, history, metrics, config));
    }
    let contexts = upstreams
        .specs
        .iter()
        .map(|spec| {
            let ctx = UpstreamContext::new(
                spec,
                config.max_upstream_message_bytes,
                intake.clone(),
                metrics.clone(),
            )?;
            tokio::spawn(ctx.clone().log_reachability());
            ctx.check_readiness();
            // An added type's own descriptors, asked before any client
            // polls it (a client gets it opaque until they come).
            let extras: Vec<String> = ResourceType::all()
                .into_iter()
                .filter(|kind| kind.is_extra())
                .map(|kind| kind.type_url().to_owned())
                .collect();
            ctx.learn(&extras);
            Ok((spec.name.clone(), ctx))
        })
        .collect::<Result<BTreeMap<_, _>, StartError>>()?;
    let claims: BTreeMap<String, String> = upstreams
        .specs
        .iter()
        .flat_map(|s| s.authorities.iter().map(|a| (a.clone(), s.name.clone())))
        .collect();
    let default = &upstreams.specs[0].name;
    let namespace = Namespace::new(claims, default, default);
    let mut slots = Vec::new();
    for spec in &upstreams.specs {
        if spec.name != *default && spec.authorities.is_empty() {
            // Only a failover target: it serves other upstreams' sessions.
            continue;
        }
        let chain = upstreams
            .chain(&spec.name)
            .into_iter()
            .filter_map(|s| Some((contexts.get(&s.name)?.clone(), s.failover.clone())))
            .collect();
        slots.push(UpstreamSlot {
            name: spec.name.clone(),
            feeder: upstream_feeder(
                spec,
                Route::chain(chain),
                namespace.for_owner(&spec.name),
                config,
            ),
        });
    }
    if upstreams.single().is_some() {
        if let Some(UpstreamSlot { feeder, .. }) = slots.pop() {
            return Ok(Sessions::start(feeder, intake, history, metrics, config));
        }
    }
    Ok(Sessions::federated(
        slots, namespace, intake, history, metrics, config,
    ))
}

/// What feeds the sessions of one upstream (with its failover `route`):
/// its mode or, for `auto`, the mode a probe finds.
fn upstream_feeder(
    spec: &UpstreamSpec,
    route: Route,
    namespace: Namespace,
    config: &Config,
) -> Arc<dyn Feeder> {
    match spec.mode {
        UpstreamMode::Auto => {
            let ctx = route.primary().clone();
            let first_wait = config.first_response_timeout;
            let choose: Choose = {
                let (ctx, config) = (ctx.clone(), config.clone());
                Box::new(move |mode, streams| {
                    let route = Route::single(ctx.clone());
                    grpc_feeder(mode, streams, route, namespace.clone(), &config)
                })
            };
            Arc::new(AutoFeeder::start(ctx, first_wait, choose))
        }
        mode => grpc_feeder(mode, spec.streams, route, namespace, config),
    }
}

/// What feeds sessions from an upstream `route` spoken to in `mode` on
/// `streams`.
fn grpc_feeder(
    mode: UpstreamMode,
    streams: UpstreamStreams,
    route: Route,
    namespace: Namespace,
    config: &Config,
) -> Arc<dyn Feeder> {
    match mode {
        // The probe never answers auto; SotW is the mode every ADS server has.
        UpstreamMode::Sotw | UpstreamMode::Auto => {
            Arc::new(SotwFeeder::new(route, streams, namespace))
        }
        UpstreamMode::Delta => Arc::new(DeltaFeeder::new(route, streams, namespace)),
        UpstreamMode::Fetch => {
            Arc::new(FetchFeeder::new(route.primary().clone(), config, namespace))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bound_listener_accepts_and_holds_its_port() {
        let listener = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr);
        let (accepted, connected) = tokio::join!(listener.accept(), client);
        assert!(accepted.is_ok() && connected.is_ok());
        let taken = bind_listener(addr).unwrap_err();
        assert_eq!(taken.kind(), std::io::ErrorKind::AddrInUse);
    }
}
