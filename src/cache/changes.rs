//! The "what changed" form of an answer (`?changes`): relative to the
//! version a client presents, the resources added or modified and the names
//! removed, shaped like a `DeltaDiscoveryResponse` in canonical JSON:
//!
//! ```json
//! {"systemVersionInfo": "<served version>",
//!  "resources": [{"name": "a", "version": "<content digest>", "resource": {"@type": ...}}],
//!  "removedResources": ["b"],
//!  "typeUrl": "...",
//!  "fullState": false}
//! ```
//!
//! What a presented version stood for is looked up in [`History`]: the
//! answers served recently (every body served records one), bounded by the
//! resources they hold (an old answer keeps its state's resources alive) and
//! the names they were served for (a client asking for thousands of names,
//! a new set each time, must not make it hold thousands per answer without
//! bound: issue 20, finding 4).
//! A version it no longer holds (or never served, or served to other names
//! or another rewrite target) cannot be diffed against: the answer is then
//! the whole state with `"fullState": true` (drop what you hold that is not
//! listed), which is also what an empty version gets.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use moka::sync::Cache;

use super::resource::Renderer;
use super::state::{Names, TypeState};
use crate::xds::rewrite::RestTarget;
use crate::xds::JsonError;

/// Resources and names (summed over the answers) the remembered answers may
/// hold: a remembered answer keeps its state, and so its resources, alive,
/// and holds the names it was served for (about 60 bytes each, so names
/// alone stay under ~15 MB).
const HISTORY_ITEMS: u64 = 250_000;
/// Hex digits of a resource's content digest given as its `version`.
const RESOURCE_VERSION_HEX: usize = 16;

/// One answer as served: the state, the names and where config sources pointed.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    state: Arc<TypeState>,
    names: Names,
    target: Option<RestTarget>,
}

impl Served {
    pub(crate) fn new(state: Arc<TypeState>, names: &Names, target: Option<&RestTarget>) -> Served {
        Served {
            state,
            names: names.clone(),
            target: target.cloned(),
        }
    }

    /// The answer at `version` in changes form, relative to `since` (the
    /// answer the client holds; `None`: unknown, so the full state).
    pub(crate) fn changes(
        &self,
        renderer: &Renderer,
        version: &str,
        since: Option<&Served>,
    ) -> Result<Bytes, JsonError> {
        // Only the same names and rewrite can be compared resource by resource.
        let since = since.filter(|s| s.names == self.names && s.target == self.target);
        let mut pieces = Vec::new();
        let mut removed = Vec::new();
        for resource in self.state.select(&self.names) {
            let unchanged = since.is_some_and(|s| {
                s.state
                    .resources
                    .get(&resource.name)
                    .is_some_and(|old| old.digest == resource.digest)
            });
            if unchanged {
                continue;
            }
            let json = match &self.target {
                Some(t) => renderer.rewritten(resource, t)?,
                None => resource.json.clone(),
            };
            let mut digest = hex::encode(resource.digest);
            digest.truncate(RESOURCE_VERSION_HEX);
            pieces.push((json_string(&resource.name), digest, json));
        }
        if let Some(since) = since {
            for old in since.state.select(&since.names) {
                let present = self.state.select(&self.names).any(|r| r.name == old.name);
                if !present {
                    removed.push(json_string(&old.name));
                }
            }
        }
        let size: usize = pieces
            .iter()
            .map(|(n, v, j)| n.len() + v.len() + j.len() + 40)
            .sum::<usize>()
            + 200;
        let mut out = BytesMut::with_capacity(size);
        out.put_slice(b"{\"systemVersionInfo\":");
        out.put_slice(json_string(version).as_bytes());
        out.put_slice(b",\"resources\":[");
        for (i, (name, digest, json)) in pieces.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_slice(b"{\"name\":");
            out.put_slice(name.as_bytes());
            out.put_slice(b",\"version\":\"");
            out.put_slice(digest.as_bytes());
            out.put_slice(b"\",\"resource\":");
            out.put_slice(json);
            out.put_u8(b'}');
        }
        out.put_slice(b"],\"removedResources\":[");
        out.put_slice(removed.join(",").as_bytes());
        out.put_slice(b"],\"typeUrl\":\"");
        out.put_slice(self.state.kind.type_url().as_bytes());
        out.put_slice(b"\",\"fullState\":");
        out.put_slice(if since.is_some() { b"false" } else { b"true" });
        out.put_u8(b'}');
        Ok(out.freeze())
    }
}

/// The answers served recently, by served version.
#[derive(Debug, Clone)]
pub(crate) struct History(Cache<String, Arc<Served>>);

impl Default for History {
    fn default() -> History {
        History(
            Cache::builder()
                .max_capacity(HISTORY_ITEMS)
                .weigher(|_, served: &Arc<Served>| {
                    let names = match &served.names {
                        Names::Wildcard => 0,
                        Names::Named(set) => set.len(),
                    };
                    let held = served.state.resources.len().saturating_add(names + 1);
                    u32::try_from(held).unwrap_or(u32::MAX)
                })
                .build(),
        )
    }
}

impl History {
    /// Remembers that `version` was served as `served()` (made only when
    /// `version` is not remembered yet: a body served again costs a lookup).
    pub(crate) fn remember(&self, version: &str, served: impl FnOnce() -> Arc<Served>) {
        if !self.0.contains_key(version) {
            self.0.insert(version.to_owned(), served());
        }
    }

    /// What `version` was served as, if still remembered.
    pub(crate) fn recall(&self, version: &str) -> Option<Arc<Served>> {
        if version.is_empty() {
            return None;
        }
        self.0.get(version)
    }

    /// Answers remembered now, and the resources and names they weigh.
    #[cfg(test)]
    pub(crate) fn held(&self) -> super::request::Held {
        self.0.run_pending_tasks();
        super::request::Held {
            entries: self.0.entry_count(),
            bytes: self.0.weighted_size(),
        }
    }
}

fn json_string(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Coverage;
    use crate::xds::{Codec, ResourceType};
    use serde_json::{json, Value};

    fn state(renderer: &Renderer, version: &str, clusters: &[(&str, &str)]) -> Arc<TypeState> {
        let kind = ResourceType::Clusters;
        let resources = clusters
            .iter()
            .map(|(name, timeout)| {
                let json =
                    json!({"@type": kind.type_url(), "name": name, "connect_timeout": timeout});
                let any = renderer
                    .codec()
                    .parse_any(json.to_string().as_bytes())
                    .unwrap();
                let resource = renderer.resource(kind, any.value.into()).unwrap();
                (name.to_string(), resource)
            })
            .collect();
        let coverage = Coverage {
            wildcard: true,
            names: Default::default(),
        };
        Arc::new(TypeState::new(
            kind,
            version.into(),
            String::new(),
            resources,
            coverage,
        ))
    }

    fn names_of(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|r| r.get("name").unwrap_or(r).as_str().unwrap())
            .collect()
    }

    #[test]
    fn lists_exactly_what_was_added_modified_and_removed() {
        let renderer = Renderer::new(Codec::embedded());
        let old = state(&renderer, "1", &[("a", "1s"), ("b", "1s"), ("c", "1s")]);
        let new = state(&renderer, "2", &[("a", "1s"), ("b", "2s"), ("d", "1s")]);
        let all = Names::Wildcard;
        let since = Served::new(old, &all, None);
        let body = Served::new(new.clone(), &all, None)
            .changes(&renderer, "2~x", Some(&since))
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["systemVersionInfo"], "2~x");
        assert_eq!(names_of(&v["resources"]), ["b", "d"]);
        assert_eq!(v["resources"][0]["resource"]["connectTimeout"], "2s");
        assert_eq!(v["resources"][0]["version"].as_str().unwrap().len(), 16);
        assert_eq!(names_of(&v["removedResources"]), ["c"]);
        assert_eq!(v["fullState"], false);
        assert_eq!(v["typeUrl"], ResourceType::Clusters.type_url());

        // Unknown (or other names): the whole state, saying so.
        let full = Served::new(new.clone(), &all, None)
            .changes(&renderer, "2~x", None)
            .unwrap();
        let v: Value = serde_json::from_slice(&full).unwrap();
        assert_eq!(names_of(&v["resources"]), ["a", "b", "d"]);
        assert_eq!(v["fullState"], true);
        let other_names = Served::new(new.clone(), &Names::from_request(vec!["a".into()]), None);
        let v: Value = serde_json::from_slice(
            &Served::new(new, &all, None)
                .changes(&renderer, "2~x", Some(&other_names))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v["fullState"], true);
    }

    #[test]
    fn history_is_bounded_and_ignores_the_empty_version() {
        let renderer = Renderer::new(Codec::embedded());
        let history = History::default();
        let s = state(&renderer, "1", &[("a", "1s")]);
        history.remember("1~x", || Arc::new(Served::new(s, &Names::Wildcard, None)));
        assert!(history.recall("1~x").is_some());
        assert!(history.recall("").is_none());
        assert!(history.recall("0~y").is_none());
    }

    /// Issue 20, finding 4: answers served for many large, distinct name
    /// sets are weighed by their names too, so the history stays bounded.
    #[test]
    fn answers_for_many_names_are_weighed_by_their_names() {
        let renderer = Renderer::new(Codec::embedded());
        let state = state(&renderer, "1", &[("a", "1s")]);
        let history = History::default();
        for i in 0..30 {
            let names: Vec<String> = (0..10_000).map(|n| format!("c{i}-{n}")).collect();
            let names = Names::from_request(names);
            let served = Served::new(state.clone(), &names, None);
            history.remember(&format!("1~{i:012x}"), || Arc::new(served));
        }
        let held = history.held();
        assert!(held.bytes <= HISTORY_ITEMS, "{held:?}");
        assert!(
            held.entries <= 25,
            "300,000 names cannot all be kept: {held:?}"
        );
    }
}
