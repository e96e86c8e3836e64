//! The types the gateway has no descriptor for ([`OpaqueTypes`]): each
//! type URL an `Any` named that the codec does not know, how many
//! resources of a new content held it, and what each upstream said when it
//! was asked for the type's descriptors. The intake notes them as it
//! renders, the upstreams' learners say how asking went, and a type leaves
//! the record once the pool knows it; `/readyz` lists what is left. A clone
//! shares the same record, so the admin face reads it without holding the
//! intake.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::xds::descriptors::Descriptors;

/// Type URL → what is known of it. Shared by clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpaqueTypes(Arc<Mutex<BTreeMap<String, Opaque>>>);

/// One type the gateway has no descriptor for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Opaque {
    /// Resources of a new content that held it.
    pub(crate) resources: u64,
    /// Upstream name → why it gave no descriptors for it.
    pub(crate) why: BTreeMap<String, String>,
}

impl OpaqueTypes {
    /// One more resource held each of `types`.
    pub(crate) fn note(&self, types: &[String]) {
        let mut seen = crate::sync::lock(&self.0);
        for type_url in types {
            seen.entry(type_url.clone()).or_default().resources += 1;
        }
    }

    /// `upstream` gave no descriptors for `type_url`, for `reason`.
    pub(crate) fn explain(&self, type_url: &str, upstream: &str, reason: &str) {
        let mut seen = crate::sync::lock(&self.0);
        let why = &mut seen.entry(type_url.to_owned()).or_default().why;
        if why.get(upstream).is_none_or(|r| r != reason) {
            why.insert(upstream.to_owned(), reason.to_owned());
        }
    }

    /// Drops every type `descriptors` now knows.
    pub(crate) fn forget_known(&self, descriptors: &Descriptors) {
        crate::sync::lock(&self.0).retain(|type_url, _| !descriptors.knows(type_url));
    }

    /// Every type noted, in type URL order.
    pub(crate) fn listed(&self) -> Vec<(String, Opaque)> {
        let seen = crate::sync::lock(&self.0);
        seen.iter().map(|(t, o)| (t.clone(), o.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_record() {
        let noted = OpaqueTypes::default();
        let read = noted.clone();
        noted.note(&["b".into(), "a".into()]);
        noted.note(&["a".into()]);
        noted.explain("a", "istiod", "no reflection");
        let listed: Vec<(String, u64)> = read
            .listed()
            .into_iter()
            .map(|(t, o)| (t, o.resources))
            .collect();
        assert_eq!(listed, vec![("a".into(), 2), ("b".into(), 1)]);
        assert_eq!(read.listed()[0].1.why["istiod"], "no reflection");
    }

    #[test]
    fn a_type_the_pool_knows_leaves_the_record() {
        let noted = OpaqueTypes::default();
        let cluster = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
        noted.note(&[cluster.into(), "type.googleapis.com/acme.Unknown".into()]);
        noted.forget_known(crate::xds::Codec::embedded().descriptors());
        let left: Vec<String> = noted.listed().into_iter().map(|(t, _)| t).collect();
        assert_eq!(left, ["type.googleapis.com/acme.Unknown"]);
    }
}
