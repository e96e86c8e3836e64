//! Which subscribed names a resource is delivered for: its own name, and
//! the names that stand for a set of resources it belongs to: an xdstp glob
//! collection's immediate children ([`xdstp::in_collection`]); a VHDS
//! namespace (Envoy subscribes to a route configuration's virtual hosts by
//! its name `rc` and gets resources `rc/<virtual host>`); an alias (a VHDS
//! server resolves an on-demand name `rc/<domain>` and lists it in the
//! resource's `aliases`).

use std::collections::BTreeSet;

use super::{xdstp, ResourceType};

/// The names in `subscribed`, other than `name` itself, that the resource
/// `name` of `kind` (delivered with `aliases`) answers.
pub fn sets_holding<'a>(
    kind: ResourceType,
    name: &str,
    aliases: &[String],
    subscribed: &'a BTreeSet<String>,
) -> Vec<&'a String> {
    let mut out = Vec::new();
    if xdstp::is_xdstp(name) {
        out.extend(subscribed.iter().filter(|g| xdstp::in_collection(name, g)));
    }
    if kind.namespaced() {
        // The VHDS namespace: everything before the last `/`.
        if let Some((namespace, _)) = name.rsplit_once('/') {
            out.extend(subscribed.get(namespace));
        }
    }
    out.extend(aliases.iter().filter_map(|alias| subscribed.get(alias)));
    out.sort();
    out.dedup();
    out
}

/// Whether a subscription to `subscribed` asks for the resource `name` of
/// `kind` delivered with `aliases`.
pub fn wanted(
    kind: ResourceType,
    name: &str,
    aliases: &[String],
    subscribed: &BTreeSet<String>,
) -> bool {
    subscribed.contains(name) || !sets_holding(kind, name, aliases, subscribed).is_empty()
}

/// Whether a subscribed name may stand for more than itself (so a request
/// naming it cannot be answered by looking names up one by one).
pub fn names_a_set(kind: ResourceType, name: &str) -> bool {
    xdstp::is_glob(name) || kind.namespaced()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_virtual_host_answers_its_route_configuration_and_its_aliases() {
        let vh = ResourceType::VirtualHosts;
        let subscribed = set(&["rc", "rc/foo.example", "other"]);
        let aliases = ["rc/foo.example".to_owned()];
        let holding = sets_holding(vh, "rc/vh1", &aliases, &subscribed);
        assert_eq!(holding, ["rc", "rc/foo.example"]);
        assert!(wanted(vh, "rc/vh1", &[], &subscribed));
        assert!(wanted(vh, "other", &[], &subscribed));
        assert!(!wanted(vh, "rc2/vh1", &[], &subscribed));
        // The namespace is up to the last '/', as Envoy's WatchMap has it.
        assert!(!wanted(vh, "rc/x/vh1", &[], &subscribed));
        assert!(wanted(vh, "rc/x/vh1", &[], &set(&["rc/x"])));
    }

    #[test]
    fn namespaces_are_for_virtual_hosts_only() {
        let subscribed = set(&["c"]);
        assert!(!wanted(ResourceType::Clusters, "c/1", &[], &subscribed));
        assert!(!names_a_set(ResourceType::Clusters, "c"));
        assert!(names_a_set(ResourceType::VirtualHosts, "c"));
    }

    #[test]
    fn an_lb_endpoint_answers_its_glob_collection() {
        let glob = "xdstp://cp/envoy.config.endpoint.v3.LbEndpoint/c1/*";
        let subscribed = set(&[glob]);
        let member = "xdstp://cp/envoy.config.endpoint.v3.LbEndpoint/c1/ep0";
        let kind = ResourceType::LbEndpoints;
        assert_eq!(sets_holding(kind, member, &[], &subscribed), [glob]);
        assert!(!wanted(
            kind,
            "xdstp://cp/envoy.config.endpoint.v3.LbEndpoint/c2/ep0",
            &[],
            &subscribed
        ));
        assert!(names_a_set(kind, glob));
        assert!(!names_a_set(kind, member));
    }
}
