//! `xdstp://` resource names (xDS TP1, `xds.core.v3.ResourceName`): which
//! resource names belong to a glob collection (`xdstp://a/T/some/*`).
//!
//! A name is `xdstp://{authority}/{type}/{id}[?{context params}][#{directives}]`.
//! A resource belongs to a glob (id `*` or ending in `/*`) when authority,
//! type and context parameters are equal and its id, last segment replaced by
//! `*`, is the glob's: immediate children only, as Envoy's `WatchMap` matches
//! them. Ids and parameters compare %-decoded, parameters as a set. Other
//! names are opaque strings. No I/O; allocates only for xdstp names.

use std::borrow::Cow;
use std::collections::BTreeMap;

use percent_encoding::percent_decode_str;

pub(crate) const SCHEME: &str = "xdstp://";

pub fn is_xdstp(name: &str) -> bool {
    name.starts_with(SCHEME)
}

/// The authority of an xdstp name (`None` for any other name). Resource
/// names are federated by it: `xdstp://AUTHORITY/TYPE/ID`.
pub fn authority(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(SCHEME)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Whether `name` is an xdstp glob collection (`.../*`).
pub(crate) fn is_glob(name: &str) -> bool {
    Parsed::new(name).is_some_and(|p| p.id == "*" || p.id.ends_with("/*"))
}

/// Whether the resource named `name` belongs to the glob collection `glob`.
/// False when either is not an xdstp name or `glob` is not a glob.
pub fn in_collection(name: &str, glob: &str) -> bool {
    let (Some(name), Some(glob)) = (Parsed::new(name), Parsed::new(glob)) else {
        return false;
    };
    let Some(dir) = glob.id.strip_suffix('*') else {
        return false;
    };
    if !(dir.is_empty() || dir.ends_with('/')) || name.id.ends_with("/*") || name.id == "*" {
        return false;
    }
    let parent_matches = match name.id.rfind('/') {
        Some(slash) => dir == &name.id[..=slash],
        None => dir.is_empty(),
    };
    parent_matches
        && name.authority == glob.authority
        && name.resource_type == glob.resource_type
        && name.params == glob.params
}

/// The parts of an xdstp name that decide collection membership.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parsed<'a> {
    authority: &'a str,
    resource_type: &'a str,
    /// %-decoded.
    pub(crate) id: Cow<'a, str>,
    /// %-decoded key → value.
    params: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
}

impl<'a> Parsed<'a> {
    pub(crate) fn new(name: &'a str) -> Option<Parsed<'a>> {
        let rest = name.strip_prefix(SCHEME)?;
        // Directives (`#entry=...`, `#alt=...`) do not name the resource.
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = path.split_once('/')?;
        let (resource_type, id) = path.split_once('/')?;
        if resource_type.is_empty() || id.is_empty() {
            return None;
        }
        let mut params = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(decode(key)?, decode(value)?);
        }
        Some(Parsed {
            authority,
            resource_type,
            id: decode(id)?,
            params,
        })
    }
}

fn decode(s: &str) -> Option<Cow<'_, str>> {
    percent_decode_str(s).decode_utf8().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_is_what_comes_before_the_type() {
        assert_eq!(
            authority("xdstp://a.example/envoy.config.cluster.v3.Cluster/x"),
            Some("a.example")
        );
        assert_eq!(
            authority("xdstp://a.example/T/dir/*?k=v"),
            Some("a.example")
        );
        assert_eq!(authority("xdstp://a.example"), Some("a.example"));
        assert_eq!(authority("xdstp:///T/x"), Some(""));
        assert_eq!(authority("plain-cluster"), None);
    }

    const GLOB: &str = "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/*";

    #[test]
    fn globs_are_told_apart() {
        assert!(is_glob(GLOB));
        assert!(is_glob("xdstp://a/T/*"));
        assert!(is_glob("xdstp://a/T/x/*?k=v"));
        assert!(!is_glob("xdstp://a/T/x"));
        assert!(!is_glob("xdstp://a/T/x*"));
        assert!(!is_glob("*"));
        assert!(!is_glob("prod/*"));
        assert!(is_xdstp(GLOB));
        assert!(!is_xdstp("c1"));
    }

    #[test]
    fn immediate_children_of_the_same_authority_type_and_params() {
        let member = |name: &str| in_collection(name, GLOB);
        assert!(member(
            "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/c1"
        ));
        assert!(member(
            "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/c%201"
        ));
        // Deeper, other directory, other authority, other type, params.
        assert!(!member(
            "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/eu/c1"
        ));
        assert!(!member(
            "xdstp://example.org/envoy.config.cluster.v3.Cluster/production/c1"
        ));
        assert!(!member(
            "xdstp://other.org/envoy.config.cluster.v3.Cluster/prod/c1"
        ));
        assert!(!member(
            "xdstp://example.org/envoy.config.listener.v3.Listener/prod/c1"
        ));
        assert!(!member(
            "xdstp://example.org/envoy.config.cluster.v3.Cluster/prod/c1?zone=a"
        ));
        assert!(!member("prod/c1"));
        assert!(!member(GLOB));
        // Not a glob: nothing belongs to it.
        assert!(!in_collection("xdstp://a/T/x/y", "xdstp://a/T/x/y"));
    }

    #[test]
    fn params_compare_as_a_decoded_set_and_directives_are_ignored() {
        let glob = "xdstp://a/T/x/*?zone=eu%2D1&tier=gold";
        assert!(in_collection("xdstp://a/T/x/r?tier=gold&zone=eu-1", glob));
        assert!(in_collection(
            "xdstp://a/T/x/r?tier=gold&zone=eu-1#alt=xdstp://b/T/r",
            glob
        ));
        assert!(!in_collection("xdstp://a/T/x/r?tier=gold", glob));
        assert!(in_collection("xdstp://a/T/r", "xdstp://a/T/*"));
        assert!(!in_collection("xdstp://a/T/x/r", "xdstp://a/T/*"));
    }

    #[test]
    fn garbage_is_no_member() {
        for bad in [
            "xdstp://",
            "xdstp://a",
            "xdstp://a/T",
            "xdstp://a//x",
            "xdstp://a/T/%ff/r",
        ] {
            assert!(!in_collection(bad, "xdstp://a/T/*"), "{bad}");
            assert!(!in_collection("xdstp://a/T/r", bad), "{bad}");
        }
    }
}
