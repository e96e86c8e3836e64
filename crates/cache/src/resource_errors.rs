//! The errors an upstream reported for single resources (`resource_errors`
//! of a SotW or delta response), remembered per type as the protocol
//! expects of a client: "the most recent error for a given resource across
//! responses", until "a response is received that contains the resource in
//! the 'resources' field". A NOT_FOUND entry is a removal, not an error
//! kept here (the stream drivers remove the resource).
//!
//! What is kept is untrusted input, bounded: at most [`MAX_ERRORS`] names
//! per type (a name held takes a newer report; a new name joins while there
//! is room) and [`MAX_MESSAGE_BYTES`] of each message.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// The names a request asks for: `None` for the wildcard.
pub(crate) type Asked<'a> = Option<&'a BTreeSet<String>>;

/// The most names with an error kept per type.
pub(crate) const MAX_ERRORS: usize = 1024;
/// The most of an error's message kept, in bytes.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;
/// gRPC's NOT_FOUND: the resource is gone.
pub const NOT_FOUND: i32 = 5;

/// One resource's error, a `google.rpc.Status` without its details.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportedError {
    pub code: i32,
    pub message: String,
}

impl ReportedError {
    /// `code` and `message`, the message cut to `MAX_MESSAGE_BYTES`.
    pub fn new(code: i32, message: &str) -> ReportedError {
        let mut end = message.len().min(MAX_MESSAGE_BYTES);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        ReportedError {
            code,
            message: message[..end].to_owned(),
        }
    }
}

/// One resource's error, as `/debug/sessions` and `/debug/config` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceErrorView {
    pub name: String,
    pub code: i32,
    pub message: String,
}

/// The errors held for one type, by resource name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceErrors(BTreeMap<String, ReportedError>);

impl ResourceErrors {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The first `limit` errors, by name, as the admin views show them.
    pub fn view(&self, limit: usize) -> Vec<ResourceErrorView> {
        self.0
            .iter()
            .take(limit)
            .map(|(name, error)| ResourceErrorView {
                name: name.clone(),
                code: error.code,
                message: error.message.clone(),
            })
            .collect()
    }

    /// The errors after a response: these, less the names it `carried` (or
    /// said are `gone`), plus what it `reported` (NOT_FOUND aside), bounded.
    pub fn after<'a>(
        &self,
        carried: impl IntoIterator<Item = &'a str>,
        gone: impl IntoIterator<Item = &'a str>,
        reported: impl IntoIterator<Item = (String, ReportedError)>,
    ) -> ResourceErrors {
        let mut held = self.0.clone();
        for name in carried.into_iter().chain(gone) {
            held.remove(name);
        }
        for (name, error) in reported {
            if error.code == NOT_FOUND {
                held.remove(&name);
            } else if held.len() < MAX_ERRORS || held.contains_key(&name) {
                held.insert(name, error);
            }
        }
        ResourceErrors(held)
    }

    /// The errors of several parts as one (their names are disjoint: a
    /// federated type's parts), bounded.
    pub fn union<'a>(parts: impl IntoIterator<Item = &'a ResourceErrors>) -> ResourceErrors {
        let mut all = BTreeMap::new();
        for (name, error) in parts.into_iter().flat_map(|part| &part.0) {
            if all.len() < MAX_ERRORS {
                all.insert(name.clone(), error.clone());
            }
        }
        ResourceErrors(all)
    }

    /// The errors of the resources a request for `names` asks about: every
    /// one for the wildcard, else those of the names it lists.
    pub fn for_names<'a>(
        &'a self,
        names: Asked<'a>,
    ) -> Box<dyn Iterator<Item = (&'a String, &'a ReportedError)> + 'a> {
        match names {
            None => Box::new(self.0.iter()),
            Some(set) => Box::new(set.iter().filter_map(|n| self.0.get_key_value(n))),
        }
    }

    /// `selection` (what a client asking `names` is answered, see `state`)
    /// with the errors it is told: the same selection when there are none.
    pub fn digest(&self, names: Asked<'_>, selection: [u8; 32]) -> [u8; 32] {
        let mut errors = self.for_names(names).peekable();
        if errors.peek().is_none() {
            return selection;
        }
        let mut hasher = Sha256::new();
        hasher.update(selection);
        for (name, error) in errors {
            for bytes in [
                name.as_bytes(),
                &error.code.to_be_bytes(),
                error.message.as_bytes(),
            ] {
                hasher.update((bytes.len() as u64).to_be_bytes());
                hasher.update(bytes);
            }
        }
        hasher.finalize().into()
    }

    /// `,"resourceErrors":[...]` in proto3 JSON for a client asking
    /// `names`, or nothing when it is told none.
    pub fn json_member(&self, names: Asked<'_>) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Entry<'a> {
            resource_name: Name<'a>,
            error_detail: &'a ReportedError,
        }
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        let entries: Vec<Entry<'_>> = self
            .for_names(names)
            .map(|(name, error)| Entry {
                resource_name: Name { name },
                error_detail: error,
            })
            .collect();
        if entries.is_empty() {
            return String::new();
        }
        // Serialising strings and numbers cannot fail.
        let list = serde_json::to_string(&entries).unwrap_or_else(|_| "[]".into());
        format!(",\"resourceErrors\":{list}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: i32, message: &str) -> ReportedError {
        ReportedError::new(code, message)
    }

    fn named(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn an_error_stays_until_a_response_carries_its_resource() {
        let none = ResourceErrors::default();
        let first = none.after([], [], [("a".to_owned(), error(3, "bad a"))]);
        assert_eq!(first.len(), 1);
        // A response that neither carries a nor reports it keeps the error.
        let second = first.after(["b"], [], []);
        assert_eq!(second, first);
        // A newer report replaces it.
        let third = second.after([], [], [("a".to_owned(), error(9, "worse a"))]);
        assert_eq!(third.view(1)[0].code, 9);
        // Carried again: cleared.
        assert!(third.after(["a"], [], []).is_empty());
        // Gone, or NOT_FOUND: nothing to remember.
        assert!(third.after([], ["a"], []).is_empty());
        assert!(third
            .after([], [], [("a".to_owned(), error(NOT_FOUND, "gone"))])
            .is_empty());
    }

    #[test]
    fn errors_are_bounded_and_messages_cut() {
        let many = (0..MAX_ERRORS + 10).map(|i| (format!("r{i}"), error(3, "x")));
        let held = ResourceErrors::default().after([], [], many);
        assert_eq!(held.len(), MAX_ERRORS);
        let long = ReportedError::new(3, &"\u{e9}".repeat(MAX_MESSAGE_BYTES));
        assert!(long.message.len() <= MAX_MESSAGE_BYTES);
        assert!(long.message.len() >= MAX_MESSAGE_BYTES - 1);
    }

    #[test]
    fn a_client_is_told_the_errors_of_what_it_asked() {
        let held = ResourceErrors::default().after(
            [],
            [],
            [
                ("a".to_owned(), error(3, "bad \"a\"")),
                ("b".to_owned(), error(14, "b down")),
            ],
        );
        let selection = [7; 32];
        assert_eq!(held.digest(Some(&named(&["c"])), selection), selection);
        assert_eq!(held.json_member(Some(&named(&["c"]))), "");
        assert_ne!(held.digest(Some(&named(&["a"])), selection), selection);
        assert_ne!(
            held.digest(Some(&named(&["a"])), selection),
            held.digest(None, selection)
        );
        let json = held.json_member(Some(&named(&["a", "c"])));
        assert_eq!(
            json,
            r#","resourceErrors":[{"resourceName":{"name":"a"},"errorDetail":{"code":3,"message":"bad \"a\""}}]"#
        );
        assert!(held.json_member(None).contains("b down"));
    }
}
