//! What the gateway knows of one (node identity, type): the upstream's latest
//! accepted state, and the response bodies assembled from it.
//!
//! A [`TypeState`] is immutable once built except for its memo of assembled
//! bodies, which doubles as the record of what was served at this version: a
//! request is answered 304 only if its version is this state's version *and*
//! a body for exactly its names (and presentation) was already served from
//! this state. So a client that adds a name at an unchanged version gets a
//! 200, and an empty `version_info` never gets a 304.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};

use super::resource::{Renderer, Resource};
use crate::xds::rewrite::RestTarget;
use crate::xds::{JsonError, ResourceType};

/// The names a request asks for: everything, or a sorted, de-duplicated set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Names {
    Wildcard,
    Named(BTreeSet<String>),
}

impl Names {
    /// An empty list means wildcard (what LDS/CDS mean by it; for other
    /// types the upstream decides what "all" is).
    pub fn from_request(names: Vec<String>) -> Names {
        let set: BTreeSet<String> = names.into_iter().filter(|n| n != "*").collect();
        if set.is_empty() {
            Names::Wildcard
        } else {
            Names::Named(set)
        }
    }
}

/// What upstream subscription a state answers: a snapshot of the session's
/// subscription when the state arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub wildcard: bool,
    pub names: BTreeSet<String>,
}

impl Coverage {
    /// Whether a state with this coverage can answer `names` completely.
    pub fn covers(&self, names: &Names) -> bool {
        match names {
            Names::Wildcard => self.wildcard,
            Names::Named(set) => self.wildcard || set.is_subset(&self.names),
        }
    }
}

/// Key of an assembled body within one state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BodyKey {
    names: Names,
    target: Option<RestTarget>,
}

/// At most this many distinct bodies are remembered per state; beyond it,
/// bodies are still served but not memoised (so never answered 304).
const MAX_BODIES_PER_STATE: usize = 256;

/// The upstream's state of one type for one node identity.
#[derive(Debug)]
pub struct TypeState {
    pub kind: ResourceType,
    pub version: String,
    pub nonce: String,
    pub resources: BTreeMap<String, Arc<Resource>>,
    pub coverage: Coverage,
    bodies: Mutex<HashMap<BodyKey, Bytes>>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    NotModified,
    /// A complete `DiscoveryResponse` JSON body; `cached` if it was assembled before.
    Body {
        json: Bytes,
        cached: bool,
    },
}

impl TypeState {
    pub fn new(
        kind: ResourceType,
        version: String,
        nonce: String,
        resources: BTreeMap<String, Arc<Resource>>,
        coverage: Coverage,
    ) -> TypeState {
        TypeState {
            kind,
            version,
            nonce,
            resources,
            coverage,
            bodies: Mutex::new(HashMap::new()),
        }
    }

    /// Answers a request that presented `client_version` for `names`.
    pub fn answer(
        &self,
        renderer: &Renderer,
        names: &Names,
        client_version: &str,
        target: Option<&RestTarget>,
    ) -> Result<Answer, JsonError> {
        let key = BodyKey {
            names: names.clone(),
            target: target.cloned(),
        };
        if let Some(json) = self.bodies_lock().get(&key).cloned() {
            if !client_version.is_empty() && client_version == self.version {
                return Ok(Answer::NotModified);
            }
            return Ok(Answer::Body { json, cached: true });
        }
        let json = self.assemble(renderer, names, target)?;
        let mut bodies = self.bodies_lock();
        if bodies.len() < MAX_BODIES_PER_STATE {
            bodies.insert(key, json.clone());
        }
        Ok(Answer::Body {
            json,
            cached: false,
        })
    }

    /// Whether a body for `names` has been served from this state.
    pub fn has_served(&self, names: &Names, target: Option<&RestTarget>) -> bool {
        let key = BodyKey {
            names: names.clone(),
            target: target.cloned(),
        };
        self.bodies_lock().contains_key(&key)
    }

    fn bodies_lock(&self) -> std::sync::MutexGuard<'_, HashMap<BodyKey, Bytes>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (single inserts), so a poisoned lock is still usable.
        self.bodies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resources a request for `names` gets, in name order.
    pub fn select<'a>(
        &'a self,
        names: &'a Names,
    ) -> Box<dyn Iterator<Item = &'a Arc<Resource>> + 'a> {
        match names {
            Names::Wildcard => Box::new(self.resources.values()),
            Names::Named(set) => Box::new(set.iter().filter_map(|n| self.resources.get(n))),
        }
    }

    /// Concatenates pre-rendered resources into a `DiscoveryResponse` body.
    fn assemble(
        &self,
        renderer: &Renderer,
        names: &Names,
        target: Option<&RestTarget>,
    ) -> Result<Bytes, JsonError> {
        let mut pieces = Vec::new();
        for resource in self.select(names) {
            pieces.push(match target {
                Some(t) => renderer.rewritten(resource, t)?,
                None => resource.json.clone(),
            });
        }
        let version = json_string(&self.version);
        let nonce = json_string(&self.nonce);
        let size: usize = pieces.iter().map(|p| p.len() + 1).sum::<usize>() + version.len() + 160;
        let mut out = BytesMut::with_capacity(size);
        out.put_slice(b"{\"versionInfo\":");
        out.put_slice(version.as_bytes());
        out.put_slice(b",\"resources\":[");
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_slice(piece);
        }
        out.put_slice(b"],\"typeUrl\":\"");
        out.put_slice(self.kind.type_url().as_bytes());
        out.put_slice(b"\"");
        if !self.nonce.is_empty() {
            out.put_slice(b",\"nonce\":");
            out.put_slice(nonce.as_bytes());
        }
        out.put_u8(b'}');
        Ok(out.freeze())
    }
}

fn json_string(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::Codec;

    fn state(version: &str, names: &[&str]) -> (Renderer, TypeState) {
        let codec = Codec::embedded();
        let renderer = Renderer::new(codec.clone());
        let mut resources = BTreeMap::new();
        for name in names {
            let json = format!(
                r#"{{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"{name}"}}"#
            );
            let any = codec.parse_any(json.as_bytes()).unwrap();
            let r = renderer
                .resource(ResourceType::Clusters, any.value.into())
                .unwrap();
            resources.insert(r.name.clone(), r);
        }
        let coverage = Coverage {
            wildcard: true,
            names: BTreeSet::new(),
        };
        let s = TypeState::new(
            ResourceType::Clusters,
            version.into(),
            "n1".into(),
            resources,
            coverage,
        );
        (renderer, s)
    }

    fn named(names: &[&str]) -> Names {
        Names::from_request(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn not_modified_only_after_serving_the_same_names_at_the_same_version() {
        let (r, s) = state("v1", &["a", "b"]);
        let wild = Names::Wildcard;
        // a client claiming v1 before anything was served gets the body
        assert!(matches!(
            s.answer(&r, &wild, "v1", None).unwrap(),
            Answer::Body { cached: false, .. }
        ));
        assert_eq!(
            s.answer(&r, &wild, "v1", None).unwrap(),
            Answer::NotModified
        );
        // an empty version never gets 304
        assert!(matches!(
            s.answer(&r, &wild, "", None).unwrap(),
            Answer::Body { cached: true, .. }
        ));
        // a new name at the same version is a 200
        assert!(matches!(
            s.answer(&r, &named(&["a"]), "v1", None).unwrap(),
            Answer::Body { .. }
        ));
        // an older version gets the body
        assert!(matches!(
            s.answer(&r, &wild, "v0", None).unwrap(),
            Answer::Body { .. }
        ));
    }

    #[test]
    fn body_is_a_discovery_response_with_requested_names_in_order() {
        let (r, s) = state("7", &["b", "a", "c"]);
        let Answer::Body { json, .. } = s
            .answer(&r, &named(&["c", "a", "missing"]), "", None)
            .unwrap()
        else {
            panic!("expected a body")
        };
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["versionInfo"], "7");
        assert_eq!(v["typeUrl"], ResourceType::Clusters.type_url());
        let names: Vec<_> = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "c"]);
    }

    #[test]
    fn coverage_rules() {
        let c = Coverage {
            wildcard: false,
            names: ["a".to_string(), "b".to_string()].into(),
        };
        assert!(c.covers(&named(&["a"])));
        assert!(!c.covers(&named(&["a", "z"])));
        assert!(!c.covers(&Names::Wildcard));
        assert_eq!(named(&[]), Names::Wildcard);
        assert_eq!(named(&["*"]), Names::Wildcard);
    }
}
