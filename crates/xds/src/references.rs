//! What one resource needs a client to hold before it can use it without
//! dropping traffic: the clusters a route configuration or a listener
//! sends requests to ([`clusters_named`]), and the endpoints an EDS
//! cluster waits for ([`endpoints_name`]).
//!
//! Read with Envoy's own types. Only the references a REST Envoy routes
//! through at once: a RouteConfiguration's routes (`cluster`,
//! `weighted_clusters`: a `cluster_header` or a specifier plugin names none
//! until a request comes); a Listener's filter chains: a TCP proxy's
//! clusters, and the routes of an inline route configuration. An RDS route
//! configuration is none: Envoy warms a listener until it arrives. Bytes that
//! do not decode name nothing.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::config::route::v3::{route, route_action, RouteConfiguration};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager, HttpConnectionManager,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{tcp_proxy, TcpProxy};
use prost::{Message, Name};

use super::ResourceType;

/// `Cluster.DiscoveryType.EDS`.
const EDS: i32 = cluster::DiscoveryType::Eds as i32;

/// The clusters a resource of `kind` (its protobuf `payload`) routes
/// traffic to; none for other types.
pub fn clusters_named(kind: ResourceType, payload: &[u8]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    match kind {
        ResourceType::Routes => {
            if let Ok(config) = RouteConfiguration::decode(payload) {
                route_clusters(&config, &mut named);
            }
        }
        ResourceType::Listeners => {
            if let Ok(listener) = Listener::decode(payload) {
                let chains = listener.filter_chains.iter();
                for chain in chains.chain(listener.default_filter_chain.as_ref()) {
                    chain_clusters(chain, &mut named);
                }
            }
        }
        _ => {}
    }
    named.remove("");
    named
}

/// The name an EDS cluster (its protobuf `payload`) asks its endpoints
/// under: its `service_name`, else its own name; `None` for a cluster of
/// another discovery type.
pub fn endpoints_name(payload: &[u8]) -> Option<String> {
    let cluster = Cluster::decode(payload).ok()?;
    if cluster.cluster_discovery_type != Some(cluster::ClusterDiscoveryType::Type(EDS)) {
        return None;
    }
    let service = cluster.eds_cluster_config.map(|eds| eds.service_name);
    Some(service.filter(|s| !s.is_empty()).unwrap_or(cluster.name))
}

fn route_clusters(config: &RouteConfiguration, named: &mut BTreeSet<String>) {
    let routes = config.virtual_hosts.iter().flat_map(|host| &host.routes);
    for action in routes.filter_map(|r| match &r.action {
        Some(route::Action::Route(action)) => Some(action),
        _ => None,
    }) {
        match &action.cluster_specifier {
            Some(route_action::ClusterSpecifier::Cluster(name)) => {
                named.insert(name.clone());
            }
            Some(route_action::ClusterSpecifier::WeightedClusters(weighted)) => {
                named.extend(weighted.clusters.iter().map(|c| c.name.clone()));
            }
            _ => {}
        }
    }
}

fn chain_clusters(chain: &FilterChain, named: &mut BTreeSet<String>) {
    for any in chain.filters.iter().filter_map(|f| match &f.config_type {
        Some(filter::ConfigType::TypedConfig(any)) => Some(any),
        _ => None,
    }) {
        if any.type_url == HttpConnectionManager::type_url() {
            let Ok(manager) = HttpConnectionManager::decode(any.value.as_slice()) else {
                continue;
            };
            if let Some(http_connection_manager::RouteSpecifier::RouteConfig(config)) =
                &manager.route_specifier
            {
                route_clusters(config, named);
            }
        } else if any.type_url == TcpProxy::type_url() {
            let Ok(proxy) = TcpProxy::decode(any.value.as_slice()) else {
                continue;
            };
            match proxy.cluster_specifier {
                Some(tcp_proxy::ClusterSpecifier::Cluster(name)) => {
                    named.insert(name);
                }
                Some(tcp_proxy::ClusterSpecifier::WeightedClusters(weighted)) => {
                    named.extend(weighted.clusters.into_iter().map(|c| c.name));
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::EdsClusterConfig;
    use envoy_types::pb::envoy::config::listener::v3::Filter;
    use envoy_types::pb::envoy::config::route::v3::{
        weighted_cluster::ClusterWeight, Route, RouteAction, VirtualHost, WeightedCluster,
    };
    use envoy_types::pb::google::protobuf::Any;

    fn to(cluster: route_action::ClusterSpecifier) -> Route {
        Route {
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(cluster),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn routes() -> RouteConfiguration {
        let weighted = WeightedCluster {
            clusters: ["b", "c"]
                .map(|name| ClusterWeight {
                    name: name.into(),
                    ..Default::default()
                })
                .to_vec(),
            ..Default::default()
        };
        RouteConfiguration {
            name: "r".into(),
            virtual_hosts: vec![VirtualHost {
                name: "v".into(),
                domains: vec!["*".into()],
                routes: vec![
                    to(route_action::ClusterSpecifier::Cluster("a".into())),
                    to(route_action::ClusterSpecifier::WeightedClusters(weighted)),
                    to(route_action::ClusterSpecifier::ClusterHeader("x-to".into())),
                    Route::default(),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_route_configuration_names_its_routes_clusters() {
        let payload = routes().encode_to_vec();
        assert_eq!(
            clusters_named(ResourceType::Routes, &payload),
            names(&["a", "b", "c"])
        );
        // Bytes of another message, or none that decode, name nothing.
        assert!(clusters_named(ResourceType::Routes, b"\xff\xff").is_empty());
        assert!(clusters_named(ResourceType::Clusters, &payload).is_empty());
    }

    #[test]
    fn a_listener_names_its_tcp_proxy_and_inline_routes_clusters() {
        fn typed<M: Name>(message: &M) -> Filter {
            let any = Any {
                type_url: M::type_url(),
                value: message.encode_to_vec(),
            };
            Filter {
                name: "f".into(),
                config_type: Some(filter::ConfigType::TypedConfig(any)),
            }
        }
        let manager = HttpConnectionManager {
            route_specifier: Some(http_connection_manager::RouteSpecifier::RouteConfig(
                routes(),
            )),
            ..Default::default()
        };
        let proxy = TcpProxy {
            cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster("t".into())),
            ..Default::default()
        };
        let listener = Listener {
            name: "l".into(),
            filter_chains: vec![FilterChain {
                filters: vec![typed(&manager)],
                ..Default::default()
            }],
            default_filter_chain: Some(FilterChain {
                filters: vec![typed(&proxy)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let payload = listener.encode_to_vec();
        assert_eq!(
            clusters_named(ResourceType::Listeners, &payload),
            names(&["a", "b", "c", "t"])
        );
    }

    #[test]
    fn an_eds_cluster_waits_for_its_service_name() {
        let eds = |service: &str| Cluster {
            name: "a".into(),
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(EDS)),
            eds_cluster_config: Some(EdsClusterConfig {
                service_name: service.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(endpoints_name(&eds("").encode_to_vec()), Some("a".into()));
        assert_eq!(endpoints_name(&eds("s").encode_to_vec()), Some("s".into()));
        let logical = Cluster {
            name: "a".into(),
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
                cluster::DiscoveryType::LogicalDns as i32,
            )),
            ..Default::default()
        };
        assert_eq!(endpoints_name(&logical.encode_to_vec()), None);
    }
}
