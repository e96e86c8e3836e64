//! The types the gateway had no descriptor for ([`OpaqueTypes`]): each
//! type URL an `Any` named that the codec does not know, and how many
//! resources of a new content held it. The intake notes them as it
//! renders; `/readyz` lists them. A clone shares the same record, so the
//! admin face reads it without holding the intake.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Type URL → resources of a new content that held it. Shared by clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpaqueTypes(Arc<Mutex<BTreeMap<String, u64>>>);

impl OpaqueTypes {
    /// One more resource held each of `types`.
    pub(crate) fn note(&self, types: &[String]) {
        let mut seen = crate::sync::lock(&self.0);
        for type_url in types {
            *seen.entry(type_url.clone()).or_default() += 1;
        }
    }

    /// Every type noted, in type URL order, with its count.
    pub(crate) fn listed(&self) -> Vec<(String, u64)> {
        let seen = crate::sync::lock(&self.0);
        seen.iter().map(|(t, n)| (t.clone(), *n)).collect()
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
        assert_eq!(read.listed(), vec![("a".into(), 2), ("b".into(), 1)]);
    }
}
