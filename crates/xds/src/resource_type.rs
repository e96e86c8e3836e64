//! The one table of xds-gateway's REST endpoints: REST path ⇄ type URL ⇄ gRPC
//! service and method.
//!
//! Every protocol string the gateway knows lives here, with the types an
//! operator adds ([`super::extra_types`]); other modules match on
//! [`ResourceType`] / [`Endpoint`] exhaustively and never spell a type URL.
//!
//! Two types are delta-only in xDS: virtual hosts (VHDS) and LEDS's
//! `LbEndpoint` collections. Envoy cannot consume them over REST, and no
//! unary `Fetch*` exists for them; the gateway serves them to tooling only,
//! from a delta upstream ([`ResourceType::delta_only`]).

use std::fmt;

use super::extra_types::{self, Definition, ExtraType, ExtraTypeError};

pub(crate) const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// Path prefix shared by every REST discovery endpoint.
pub const PATH_PREFIX: &str = "/v3/discovery:";

/// A discoverable resource type with its own REST endpoint and type URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Listeners,
    Routes,
    ScopedRoutes,
    Clusters,
    Endpoints,
    Secrets,
    Runtime,
    ExtensionConfigs,
    /// VHDS (delta only): `envoy.config.route.v3.VirtualHost`.
    VirtualHosts,
    /// LEDS (delta only): `envoy.config.endpoint.v3.LbEndpoint`.
    LbEndpoints,
    /// A type an operator added (`--extra-type`).
    Extra(&'static ExtraType),
}

/// Every REST endpoint: the ten resource types plus HDS and CSDS, which
/// have messages of their own instead of `DiscoveryRequest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Discovery(ResourceType),
    HealthCheck,
    ClientStatus,
}

/// A resource type's protocol strings.
struct Row {
    endpoint: Endpoint,
    /// The part of the path after `/v3/discovery:`.
    path_suffix: &'static str,
    /// Fully qualified request message name (HDS and CSDS have their own).
    request_message: &'static str,
    /// The type URL of the message served (resource or response).
    type_url: &'static str,
    service: &'static str,
    /// The unary method; `None` for the delta-only types.
    fetch_method: Option<&'static str>,
    /// What `Stream<X>` and `Delta<X>` are named after.
    stream_stem: &'static str,
}

const DISCOVERY_REQUEST: &str = "envoy.service.discovery.v3.DiscoveryRequest";

const TABLE: [Row; 12] = [
    row(
        ResourceType::Listeners,
        "listeners",
        "type.googleapis.com/envoy.config.listener.v3.Listener",
        "envoy.service.listener.v3.ListenerDiscoveryService",
        (Some("FetchListeners"), "Listeners"),
    ),
    row(
        ResourceType::Routes,
        "routes",
        "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
        "envoy.service.route.v3.RouteDiscoveryService",
        (Some("FetchRoutes"), "Routes"),
    ),
    row(
        ResourceType::ScopedRoutes,
        "scoped-routes",
        "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration",
        "envoy.service.route.v3.ScopedRoutesDiscoveryService",
        (Some("FetchScopedRoutes"), "ScopedRoutes"),
    ),
    row(
        ResourceType::Clusters,
        "clusters",
        "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "envoy.service.cluster.v3.ClusterDiscoveryService",
        (Some("FetchClusters"), "Clusters"),
    ),
    row(
        ResourceType::Endpoints,
        "endpoints",
        "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
        "envoy.service.endpoint.v3.EndpointDiscoveryService",
        (Some("FetchEndpoints"), "Endpoints"),
    ),
    row(
        ResourceType::Secrets,
        "secrets",
        "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "envoy.service.secret.v3.SecretDiscoveryService",
        (Some("FetchSecrets"), "Secrets"),
    ),
    row(
        ResourceType::Runtime,
        "runtime",
        "type.googleapis.com/envoy.service.runtime.v3.Runtime",
        "envoy.service.runtime.v3.RuntimeDiscoveryService",
        (Some("FetchRuntime"), "Runtime"),
    ),
    row(
        ResourceType::ExtensionConfigs,
        "extension_configs",
        "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig",
        "envoy.service.extension.v3.ExtensionConfigDiscoveryService",
        (Some("FetchExtensionConfigs"), "ExtensionConfigs"),
    ),
    row(
        ResourceType::VirtualHosts,
        "virtual_hosts",
        "type.googleapis.com/envoy.config.route.v3.VirtualHost",
        "envoy.service.route.v3.VirtualHostDiscoveryService",
        (None, "VirtualHosts"),
    ),
    row(
        ResourceType::LbEndpoints,
        "lb_endpoints",
        "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint",
        "envoy.service.endpoint.v3.LocalityEndpointDiscoveryService",
        (None, "LocalityEndpoints"),
    ),
    Row {
        endpoint: Endpoint::HealthCheck,
        path_suffix: "health_check",
        request_message: "envoy.service.health.v3.HealthCheckRequestOrEndpointHealthResponse",
        type_url: "type.googleapis.com/envoy.service.health.v3.HealthCheckSpecifier",
        service: "envoy.service.health.v3.HealthDiscoveryService",
        fetch_method: Some("FetchHealthCheck"),
        stream_stem: "HealthCheck",
    },
    Row {
        endpoint: Endpoint::ClientStatus,
        path_suffix: "client_status",
        request_message: "envoy.service.status.v3.ClientStatusRequest",
        type_url: "type.googleapis.com/envoy.service.status.v3.ClientStatusResponse",
        service: "envoy.service.status.v3.ClientStatusDiscoveryService",
        fetch_method: Some("FetchClientStatus"),
        stream_stem: "ClientStatus",
    },
];

const fn row(
    kind: ResourceType,
    path_suffix: &'static str,
    type_url: &'static str,
    service: &'static str,
    (fetch_method, stream_stem): (Option<&'static str>, &'static str),
) -> Row {
    Row {
        endpoint: Endpoint::Discovery(kind),
        path_suffix,
        request_message: DISCOVERY_REQUEST,
        type_url,
        service,
        fetch_method,
        stream_stem,
    }
}

/// How many types a table indexed by [`ResourceType::index`] holds.
pub const MAX_TYPES: usize = ResourceType::BUILT_IN.len() + extra_types::MAX_EXTRA_TYPES;

impl ResourceType {
    /// Envoy's ten, in table order (the two delta-only ones last).
    pub const BUILT_IN: [ResourceType; 10] = [
        ResourceType::Listeners,
        ResourceType::Routes,
        ResourceType::ScopedRoutes,
        ResourceType::Clusters,
        ResourceType::Endpoints,
        ResourceType::Secrets,
        ResourceType::Runtime,
        ResourceType::ExtensionConfigs,
        ResourceType::VirtualHosts,
        ResourceType::LbEndpoints,
    ];

    /// Every type served: Envoy's ten, then each extra type registered.
    pub fn all() -> Vec<ResourceType> {
        let extras = extra_types::registered()
            .into_iter()
            .map(ResourceType::Extra);
        Self::BUILT_IN.into_iter().chain(extras).collect()
    }

    /// Registers an extra type (or finds it registered the same way);
    /// Envoy's own names and type URLs are refused.
    pub fn register(def: &Definition<'_>) -> Result<ResourceType, ExtraTypeError> {
        let fail = |reason: String| Err(ExtraTypeError(reason));
        if TABLE.iter().any(|row| row.path_suffix == def.name) {
            return fail(format!(
                "name {:?} is one of Envoy's own endpoints",
                def.name
            ));
        }
        if Self::BUILT_IN.iter().any(|t| t.type_url() == def.type_url) {
            return fail(format!("{} is one of Envoy's own types", def.type_url));
        }
        let Some(message) = def.type_url.strip_prefix(TYPE_URL_PREFIX) else {
            return fail(format!(
                "type URL {:?} must be {TYPE_URL_PREFIX}<message name>",
                def.type_url
            ));
        };
        extra_types::register(def, message).map(ResourceType::Extra)
    }

    /// Its place in tables of every type (below [`MAX_TYPES`]).
    pub const fn index(self) -> usize {
        match self {
            ResourceType::Listeners => 0,
            ResourceType::Routes => 1,
            ResourceType::ScopedRoutes => 2,
            ResourceType::Clusters => 3,
            ResourceType::Endpoints => 4,
            ResourceType::Secrets => 5,
            ResourceType::Runtime => 6,
            ResourceType::ExtensionConfigs => 7,
            ResourceType::VirtualHosts => 8,
            ResourceType::LbEndpoints => 9,
            ResourceType::Extra(extra) => ResourceType::BUILT_IN.len() + extra.index,
        }
    }

    fn row(self) -> &'static Row {
        Endpoint::Discovery(self).row()
    }

    /// `type.googleapis.com/<message>`.
    pub const fn type_url(self) -> &'static str {
        match self {
            ResourceType::Extra(extra) => extra.type_url,
            built_in => TABLE[built_in.index()].type_url,
        }
    }

    /// Fully qualified protobuf name of the resource message.
    pub fn message_name(self) -> &'static str {
        match self {
            ResourceType::Extra(extra) => extra.message,
            built_in => built_in.row().message(),
        }
    }

    /// The type whose type URL is `url`, if any.
    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        Self::BUILT_IN
            .into_iter()
            .find(|t| t.type_url() == url)
            .or_else(|| extra_types::by_type_url(url).map(ResourceType::Extra))
    }

    /// Short name used in logs and metric labels (the path suffix).
    pub fn short_name(self) -> &'static str {
        match self {
            ResourceType::Extra(extra) => extra.name,
            built_in => built_in.row().path_suffix,
        }
    }

    /// The string fields whose values, joined with `/`, name a resource of
    /// it: `name` (or `cluster_name`), field 1, for Envoy's.
    pub fn name_fields(self) -> &'static [u32] {
        match self {
            ResourceType::Extra(extra) => extra.name_fields,
            _ => &[1],
        }
    }

    /// Whether it is one an operator added.
    pub const fn is_extra(self) -> bool {
        matches!(self, ResourceType::Extra(_))
    }

    /// Whether a SotW response of this type carries the type's complete
    /// state (Listener and Cluster). Every other type is grouped into SotW
    /// responses as in the incremental variants (xDS transport protocol,
    /// "Grouping Resources into Responses"): a response may carry only the
    /// resources that changed, and a client must not delete the others.
    pub fn sotw_complete_state(self) -> bool {
        use ResourceType::*;
        match self {
            Listeners | Clusters => true,
            Extra(extra) => extra.complete_state,
            Routes | ScopedRoutes | Endpoints | Secrets | Runtime | ExtensionConfigs
            | VirtualHosts | LbEndpoints => false,
        }
    }

    /// Whether an empty name list means "everything" in xDS (LDS, CDS, SRDS).
    pub fn wildcard_when_unnamed(self) -> bool {
        use ResourceType::*;
        match self {
            Listeners | Clusters | ScopedRoutes => true,
            Extra(extra) => extra.wildcard_when_unnamed,
            Routes | Endpoints | Secrets | Runtime | ExtensionConfigs | VirtualHosts
            | LbEndpoints => false,
        }
    }

    /// The gRPC path of the type's own streaming method (not ADS's):
    /// `Delta<X>` with `delta`, else `Stream<X>` (none for delta-only types).
    pub fn stream_path(self, delta: bool) -> Option<String> {
        let (service, stem) = match self {
            ResourceType::Extra(extra) => (extra.service?, extra.stem),
            _ if !delta && self.delta_only() => return None,
            _ => (self.row().service, self.row().stream_stem),
        };
        let kind = if delta { "Delta" } else { "Stream" };
        Some(format!("/{service}/{kind}{stem}"))
    }

    /// Whether xDS serves the type over delta streams only (VHDS, LEDS).
    /// Such a resource is named by its delta `Resource` wrapper (an
    /// `LbEndpoint` has no name), so REST answers carry each in its wrapper.
    pub const fn delta_only(self) -> bool {
        matches!(self, ResourceType::VirtualHosts | ResourceType::LbEndpoints)
    }

    /// Whether a subscribed name also stands for every resource in its
    /// namespace (VHDS: `rc` subscribes to every `rc/<virtual host>`).
    pub const fn namespaced(self) -> bool {
        matches!(self, ResourceType::VirtualHosts)
    }
}

impl Row {
    /// Fully qualified name of the message served (resource or response).
    fn message(&self) -> &'static str {
        &self.type_url[TYPE_URL_PREFIX.len()..]
    }
}

impl Endpoint {
    /// Every endpoint, in table order, then each extra type's.
    pub fn all() -> impl Iterator<Item = Endpoint> {
        let extras = extra_types::registered().into_iter();
        let extras = extras.map(|x| Endpoint::Discovery(ResourceType::Extra(x)));
        TABLE.iter().map(|row| row.endpoint).chain(extras)
    }

    /// The endpoint's row; an extra type has none (its strings are its own).
    fn row(self) -> &'static Row {
        TABLE
            .iter()
            .find(|row| row.endpoint == self)
            .unwrap_or(&TABLE[0])
    }

    /// The extra type it serves, if it serves one.
    fn extra(self) -> Option<&'static ExtraType> {
        match self {
            Endpoint::Discovery(ResourceType::Extra(extra)) => Some(extra),
            _ => None,
        }
    }

    /// The REST path, e.g. `/v3/discovery:clusters`.
    pub fn path(self) -> String {
        let suffix = self
            .extra()
            .map_or_else(|| self.row().path_suffix, |extra| extra.name);
        format!("{PATH_PREFIX}{suffix}")
    }

    /// Fully qualified name of the request message.
    pub fn request_message(self) -> &'static str {
        self.extra()
            .map_or_else(|| self.row().request_message, |_| DISCOVERY_REQUEST)
    }

    /// Fully qualified name of the served message (resource or response).
    pub fn message(self) -> &'static str {
        self.extra()
            .map_or_else(|| self.row().message(), |extra| extra.message)
    }

    /// Fully qualified gRPC service name (empty for an extra type that
    /// has none: it travels over ADS only).
    pub fn service(self) -> &'static str {
        self.extra().map_or_else(
            || self.row().service,
            |extra| extra.service.unwrap_or_default(),
        )
    }

    /// The unary method of the service (`None`: it has none).
    pub fn fetch_method(self) -> Option<&'static str> {
        self.extra()
            .map_or_else(|| self.row().fetch_method, |extra| extra.fetch_method)
    }

    /// The valid path suffix closest to `suffix` (for "did you mean"): what
    /// an Envoy short name (`cds`, ...) stands for, else the nearest.
    pub fn closest_suffix(suffix: &str) -> &'static str {
        let short = suffix.trim_start_matches("v3/").to_ascii_lowercase();
        if let Some((_, meant)) = SHORT_NAMES.iter().find(|(name, _)| *name == short) {
            return meant;
        }
        let extras = extra_types::registered();
        TABLE
            .iter()
            .map(|row| row.path_suffix)
            .chain(extras.iter().map(|t| t.name))
            .map(|name| (edit_distance(suffix, name), name))
            .min()
            .map(|(_, s)| s)
            .unwrap_or("listeners")
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// Envoy's short names for its discovery services, and the endpoint each means
/// (`lds` is four edits from every suffix, so edit distance alone would
/// suggest `routes` for all of them).
const SHORT_NAMES: [(&str, &str); 12] = [
    ("lds", "listeners"),
    ("rds", "routes"),
    ("srds", "scoped-routes"),
    ("cds", "clusters"),
    ("eds", "endpoints"),
    ("sds", "secrets"),
    ("rtds", "runtime"),
    ("ecds", "extension_configs"),
    ("hds", "health_check"),
    ("csds", "client_status"),
    ("vhds", "virtual_hosts"),
    ("leds", "lb_endpoints"),
];

/// Levenshtein distance over chars (inputs are short path suffixes).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Endpoint {
        /// The endpoint whose path suffix (after `/v3/discovery:`) is `suffix`
        /// (routing goes by [`Endpoint::path`]; tests check the round trip).
        fn from_path_suffix(suffix: &str) -> Option<Endpoint> {
            TABLE
                .iter()
                .find(|row| row.path_suffix == suffix)
                .map(|row| row.endpoint)
        }
    }

    #[test]
    fn type_urls_match_message_names() {
        for t in ResourceType::BUILT_IN {
            assert_eq!(
                t.type_url(),
                format!("{TYPE_URL_PREFIX}{}", t.message_name())
            );
            assert_eq!(ResourceType::from_type_url(t.type_url()), Some(t));
        }
    }

    #[test]
    fn indexes_are_table_order() {
        for (i, kind) in ResourceType::BUILT_IN.into_iter().enumerate() {
            assert_eq!(kind.index(), i);
        }
    }

    #[test]
    fn paths_round_trip() {
        assert_eq!(TABLE.len(), 12);
        for e in TABLE.iter().map(|row| row.endpoint) {
            let path = e.path();
            let suffix = path.strip_prefix(PATH_PREFIX).unwrap();
            assert_eq!(Endpoint::from_path_suffix(suffix), Some(e));
        }
        assert_eq!(
            Endpoint::Discovery(ResourceType::ScopedRoutes).path(),
            "/v3/discovery:scoped-routes"
        );
    }

    #[test]
    fn closest_suffix_suggests_the_misspelled_one() {
        assert_eq!(Endpoint::closest_suffix("cluster"), "clusters");
        assert_eq!(Endpoint::closest_suffix("endpoint"), "endpoints");
        assert_eq!(Endpoint::closest_suffix("scoped_routes"), "scoped-routes");
    }

    #[test]
    fn envoy_short_names_suggest_what_they_stand_for() {
        for (short, meant) in SHORT_NAMES {
            assert_eq!(Endpoint::closest_suffix(short), meant);
            assert_eq!(Endpoint::closest_suffix(&short.to_ascii_uppercase()), meant);
            let suffix = Endpoint::from_path_suffix(meant).map(|e| e.path());
            assert!(suffix.is_some(), "{meant} is not an endpoint");
        }
    }
}
