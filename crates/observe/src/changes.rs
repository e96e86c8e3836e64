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
//! What a presented version stood for is looked up in [`AnswerLog`]: the
//! answers served recently (every body served records one), once per
//! version (its digest covers the names, the rewrite target and every
//! resource's content, so two clients served one version were served the
//! same answer), bounded by the resources they hold (an old answer keeps its
//! state's resources alive) and the names they were served for (a client
//! asking for a new set of thousands of names each time must not grow it
//! without bound). A version is only compared against what was served to
//! the client presenting it: the client book (`clients.rs`, keyed by
//! [`ClientKey`](crate::cache::ClientKey)) says whether a body at that
//! version went out to this client for these names
//! ([`ClientBook::was_served`](super::ClientBook::was_served)); another
//! client's version tells nothing about what that client held. A version not
//! held (or never served to this requester, or to other names or another
//! rewrite target), and the empty version, get the whole state with
//! `"fullState": true` (drop what you hold that is not listed).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use moka::sync::Cache;

use crate::cache::{by_name, Assembler, Names, Paired, TypeState};
use crate::xds::{rewrite::RestTarget, JsonError};

/// Resources and names (summed over the answers) the remembered answers may
/// hold: a remembered answer keeps its state, and so its resources, alive,
/// and holds the names it was served for (about 60 bytes each, so names
/// alone stay under ~15 MB).
const HISTORY_ITEMS: u64 = 250_000;
/// Hex digits of a resource's content digest given as its `version`.
const RESOURCE_VERSION_HEX: usize = 16;

/// One answer as served: the state, the names and where config sources pointed.
#[derive(Debug, Clone)]
pub struct ServedAnswer {
    state: Arc<TypeState>,
    names: Names,
    target: Option<RestTarget>,
}

impl ServedAnswer {
    pub fn new(state: Arc<TypeState>, names: &Names, target: Option<&RestTarget>) -> ServedAnswer {
        ServedAnswer {
            state,
            names: names.clone(),
            target: target.cloned(),
        }
    }

    /// The answer at `version` in changes form, relative to `since` (the
    /// answer the client holds; `None`: unknown, so the full state).
    pub fn changes(
        &self,
        assembler: &Assembler,
        version: &str,
        since: Option<&ServedAnswer>,
    ) -> Result<Bytes, JsonError> {
        // Only the same type, names and rewrite can be compared resource by
        // resource.
        let since = since.filter(|s| {
            s.state.kind == self.state.kind && s.names == self.names && s.target == self.target
        });
        let mut pieces = Vec::new();
        let mut removed = Vec::new();
        let now = self.state.select(&self.names).map(|r| (&r.name, r));
        let before = since
            .into_iter()
            .flat_map(|s| s.state.select(&s.names))
            .map(|r| (&r.name, r));
        for (name, paired) in by_name(before, now) {
            let (resource, unchanged) = match paired {
                Paired::Old(_) => {
                    removed.push(json_string(name));
                    continue;
                }
                Paired::Both(old, resource) => (resource, old.digest == resource.digest),
                // Outside what was served before, yet maybe in the state
                // it was served from (a set's members are chosen by their
                // aliases, which a content change may change).
                Paired::New(resource) => (
                    resource,
                    since.is_some_and(|s| {
                        s.state
                            .resources
                            .get(name)
                            .is_some_and(|old| old.digest == resource.digest)
                    }),
                ),
            };
            if unchanged {
                continue;
            }
            let json = match &self.target {
                Some(t) => assembler.rewritten(resource, t)?,
                None => resource.json.clone(),
            };
            let digest = hex::encode(&resource.digest[..RESOURCE_VERSION_HEX / 2]);
            pieces.push((json_string(name), digest, json));
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

/// The answers served recently, by served version (who was served which
/// is the client book's).
#[derive(Debug, Clone)]
pub struct AnswerLog {
    answers: Cache<String, Arc<ServedAnswer>>,
}

impl AnswerLog {
    /// A log that also forgets an answer once nobody asked about it for `idle`
    /// (the gateway passes `--idle-timeout`: a client idle that long has lost
    /// its session too), so that a served version, which keeps its whole state
    /// alive, does not stay until the item bound pushes it out.
    pub fn with_idle(idle: std::time::Duration) -> AnswerLog {
        AnswerLog {
            answers: Cache::builder()
                .max_capacity(HISTORY_ITEMS)
                .time_to_idle(idle)
                .weigher(|_, served: &Arc<ServedAnswer>| {
                    let names = served.names.asked().map_or(0, |set| set.len());
                    let held = served.state.resources.len().saturating_add(names + 1);
                    u32::try_from(held).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// Remembers that `version` was served as `served()` (made only when
    /// `version` is not remembered yet: a body served again costs a lookup).
    pub fn remember(&self, version: &str, served: impl FnOnce() -> Arc<ServedAnswer>) {
        if !self.answers.contains_key(version) {
            self.answers.insert(version.to_owned(), served());
        }
    }

    /// What `version` was served as, if still remembered (whether it was
    /// served to the client asking is the client book's to say).
    pub fn recall(&self, version: &str) -> Option<Arc<ServedAnswer>> {
        if version.is_empty() {
            return None;
        }
        self.answers.get(version)
    }

    /// Answers remembered now, and the resources and names they weigh.
    #[cfg(any(test, feature = "test-support"))]
    pub fn held(&self) -> crate::cache::MemoSize {
        self.answers.run_pending_tasks();
        crate::cache::MemoSize {
            entries: self.answers.entry_count(),
            bytes: self.answers.weighted_size(),
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
    use crate::cache::{Assembler, Intake};
    use crate::xds::{Codec, ResourceType};
    use serde_json::Value;

    impl Default for AnswerLog {
        /// Forgetting an answer nobody recalled for 5 minutes.
        fn default() -> AnswerLog {
            AnswerLog::with_idle(std::time::Duration::from_secs(300))
        }
    }

    fn state(intake: &Intake, version: &str, clusters: &[(&str, &str)]) -> Arc<TypeState> {
        Arc::new(crate::cache::test_states::clusters(
            intake, version, "", clusters,
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
        let intake = Intake::new(Codec::embedded());
        let old = state(&intake, "1", &[("a", "1s"), ("b", "1s"), ("c", "1s")]);
        let new = state(&intake, "2", &[("a", "1s"), ("b", "2s"), ("d", "1s")]);
        let all = Names::Wildcard;
        let since = ServedAnswer::new(old, &all, None);
        let body = ServedAnswer::new(new.clone(), &all, None)
            .changes(&Assembler::new(Codec::embedded()), "2~x", Some(&since))
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
        let full = ServedAnswer::new(new.clone(), &all, None)
            .changes(&Assembler::new(Codec::embedded()), "2~x", None)
            .unwrap();
        let v: Value = serde_json::from_slice(&full).unwrap();
        assert_eq!(names_of(&v["resources"]), ["a", "b", "d"]);
        assert_eq!(v["fullState"], true);
        let other_names =
            ServedAnswer::new(new.clone(), &Names::from_request(vec!["a".into()]), None);
        let v: Value = serde_json::from_slice(
            &ServedAnswer::new(new, &all, None)
                .changes(
                    &Assembler::new(Codec::embedded()),
                    "2~x",
                    Some(&other_names),
                )
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v["fullState"], true);
    }

    #[test]
    fn history_is_bounded_and_ignores_the_empty_version() {
        let intake = Intake::new(Codec::embedded());
        let history = AnswerLog::default();
        let s = state(&intake, "1", &[("a", "1s")]);
        history.remember("1~x", || {
            Arc::new(ServedAnswer::new(s, &Names::Wildcard, None))
        });
        assert!(history.recall("1~x").is_some());
        assert!(history.recall("").is_none());
        assert!(history.recall("0~y").is_none());
        // Remembered once: a body served again makes nothing.
        history.remember("1~x", || unreachable!("already held"));
    }

    /// Answers served for many large, distinct name
    /// sets are weighed by their names too, so the history stays bounded.
    #[test]
    fn answers_for_many_names_are_weighed_by_their_names() {
        let intake = Intake::new(Codec::embedded());
        let state = state(&intake, "1", &[("a", "1s")]);
        let history = AnswerLog::default();
        for i in 0..30 {
            let names: Vec<String> = (0..10_000).map(|n| format!("c{i}-{n}")).collect();
            let names = Names::from_request(names);
            let served = ServedAnswer::new(state.clone(), &names, None);
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
