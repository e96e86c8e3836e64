//! The types the gateway has no descriptor for ([`OpaqueTypes`]): each
//! type URL an `Any` named that the codec does not know, how many
//! resources of a new content held it, and what each upstream said when it
//! was asked for the type's descriptors. The intake notes them as it
//! renders, the upstreams' learners say how asking went, and a type leaves
//! the record once the pool knows it, or once no resource alive holds it
//! (each rendered resource holds its types in the record, [`OpaqueHeld`],
//! until it is dropped); `/readyz` lists what is left. A clone shares the
//! same record, so the admin face reads it without holding the intake.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::xds::descriptors::Descriptors;

/// How many types the record holds; others are only counted.
pub(crate) const MAX_OPAQUE_TYPES: usize = 256;
/// The longest type URL the record holds as it is (an upstream chooses
/// them); a longer one is held cut, marked with `…`.
const MAX_TYPE_URL_BYTES: usize = 512;

/// Type URL → what is known of it (at most `MAX_OPAQUE_TYPES`). Shared by
/// clone.
#[derive(Debug, Clone, Default)]
pub struct OpaqueTypes(Arc<Mutex<Record>>);

#[derive(Debug, Default)]
struct Record {
    types: BTreeMap<String, Opaque>,
    /// Types seen once the record was full.
    more: u64,
}

/// One type the gateway has no descriptor for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Opaque {
    /// Resources of a new content that held it.
    pub resources: u64,
    /// Of those, the ones alive (held by a state or a memo).
    pub live: u64,
    /// Upstream name → why it gave no descriptors for it.
    pub why: BTreeMap<String, String>,
}

/// The types one rendered resource is served opaque for, held in the
/// record while the resource lives. Dereferences to the types.
#[derive(Debug, Default)]
pub struct OpaqueHeld {
    types: Box<[String]>,
    record: Option<OpaqueTypes>,
}

impl std::ops::Deref for OpaqueHeld {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.types
    }
}

impl Drop for OpaqueHeld {
    fn drop(&mut self) {
        if let Some(record) = &self.record {
            record.release(&self.types);
        }
    }
}

impl OpaqueTypes {
    /// One more resource holds each of `types`, while what this returns lives.
    pub fn note(&self, types: Box<[String]>) -> OpaqueHeld {
        if types.is_empty() {
            return OpaqueHeld::default();
        }
        let mut record = crate::sync::lock(&self.0);
        for type_url in types.iter() {
            let key = record_key(type_url).into_owned();
            if !record.types.contains_key(&key) && record.types.len() >= MAX_OPAQUE_TYPES {
                record.more += 1;
                continue;
            }
            let entry = record.types.entry(key).or_default();
            entry.resources += 1;
            entry.live += 1;
        }
        OpaqueHeld {
            types,
            record: Some(self.clone()),
        }
    }

    /// A resource holding `types` is gone.
    fn release(&self, types: &[String]) {
        let mut record = crate::sync::lock(&self.0);
        for type_url in types {
            let key = record_key(type_url);
            if let Some(entry) = record.types.get_mut(key.as_ref()) {
                entry.live = entry.live.saturating_sub(1);
                if entry.live == 0 {
                    record.types.remove(key.as_ref());
                }
            }
        }
    }

    /// `upstream` gave no descriptors for `type_url`, for `reason`.
    pub fn explain(&self, type_url: &str, upstream: &str, reason: &str) {
        let mut record = crate::sync::lock(&self.0);
        if let Some(entry) = record.types.get_mut(record_key(type_url).as_ref()) {
            if entry.why.get(upstream).is_none_or(|r| r != reason) {
                entry.why.insert(upstream.to_owned(), reason.to_owned());
            }
        }
    }

    /// Drops every type `descriptors` now knows.
    pub fn forget_known(&self, descriptors: &Descriptors) {
        crate::sync::lock(&self.0)
            .types
            .retain(|type_url, _| !descriptors.knows(type_url));
    }

    /// Every type held, in type URL order, and how many more were seen.
    pub fn listed(&self) -> (Vec<(String, Opaque)>, u64) {
        let record = crate::sync::lock(&self.0);
        let types = record
            .types
            .iter()
            .map(|(t, o)| (t.clone(), o.clone()))
            .collect();
        (types, record.more)
    }
}

/// What the record holds `type_url` under: itself, or cut to
/// [`MAX_TYPE_URL_BYTES`] and marked with `…`.
fn record_key(type_url: &str) -> std::borrow::Cow<'_, str> {
    if type_url.len() <= MAX_TYPE_URL_BYTES {
        return std::borrow::Cow::Borrowed(type_url);
    }
    let mut cut = MAX_TYPE_URL_BYTES;
    while !type_url.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", &type_url[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(list: &[&str]) -> Box<[String]> {
        list.iter().map(|t| (*t).to_owned()).collect()
    }

    /// A type leaves the record once no live resource holds it (a long URL,
    /// held cut, too), and is not explained back into it.
    #[test]
    fn a_type_no_live_resource_holds_leaves_the_record() {
        let noted = OpaqueTypes::default();
        let long = format!("type.googleapis.com/{}", "y".repeat(2_000));
        let first = noted.note(types(&["a", "b", &long]));
        let second = noted.note(types(&["a"]));
        assert_eq!(noted.listed().0.len(), 3);
        drop(first);
        let left: Vec<(String, u64)> = noted
            .listed()
            .0
            .into_iter()
            .map(|(t, o)| (t, o.live))
            .collect();
        assert_eq!(left, [("a".to_owned(), 1)]);
        noted.explain("b", "istiod", "no reflection");
        assert_eq!(noted.listed().0.len(), 1);
        drop(second);
        assert!(noted.listed().0.is_empty());
    }

    #[test]
    fn clones_share_one_record() {
        let noted = OpaqueTypes::default();
        let read = noted.clone();
        let _ba = noted.note(types(&["b", "a"]));
        let _a = noted.note(types(&["a"]));
        noted.explain("a", "istiod", "no reflection");
        let listed: Vec<(String, u64)> = read
            .listed()
            .0
            .into_iter()
            .map(|(t, o)| (t, o.resources))
            .collect();
        assert_eq!(listed, vec![("a".into(), 2), ("b".into(), 1)]);
        assert_eq!(read.listed().0[0].1.why["istiod"], "no reflection");
    }

    #[test]
    fn a_type_the_pool_knows_leaves_the_record() {
        let noted = OpaqueTypes::default();
        let cluster = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
        let _held = noted.note(types(&[cluster, "type.googleapis.com/acme.Unknown"]));
        noted.forget_known(crate::xds::Codec::embedded().descriptors());
        let left: Vec<String> = noted.listed().0.into_iter().map(|(t, _)| t).collect();
        assert_eq!(left, ["type.googleapis.com/acme.Unknown"]);
    }

    /// An upstream choosing thousands of type URLs, or very long ones,
    /// does not grow the record past its bound.
    #[test]
    fn the_record_is_bounded() {
        let noted = OpaqueTypes::default();
        let many: Vec<String> = (0..3000)
            .map(|i| format!("type.googleapis.com/t{i}"))
            .collect();
        let _many = noted.note(many.into());
        let _long = noted.note(vec![format!("type.googleapis.com/{}", "x".repeat(200_000))].into());
        let (types, more) = noted.listed();
        assert_eq!(types.len(), MAX_OPAQUE_TYPES);
        assert_eq!(more, 3001 - MAX_OPAQUE_TYPES as u64);
        assert!(types.iter().all(|(t, _)| t.len() <= MAX_TYPE_URL_BYTES + 3));
    }
}
