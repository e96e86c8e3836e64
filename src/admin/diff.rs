//! `GET /debug/diff`: what differs between two answers of one type, per
//! resource name.
//!
//! Side A is node `node` at version `from`, side B node `with` (else
//! `node` again) at version `to`; a version is one held in the node's
//! config history (as `/debug/history?version=` takes it), and a side
//! without one is what the node is served now (the answer a client asking
//! its session's names gets, as `/debug/config` shows it). So:
//!
//! - `?node=A&with=B&type=T`: what A and B are served now;
//! - `?node=A&from=V1&to=V2&type=T`: two versions of A;
//! - `?node=A&from=V1`: V1 against now; `?node=A&to=V2`: the version held
//!   before V2 against V2; `?node=A` alone: the version held before the
//!   current one against it (what the last push changed).
//!
//! The answer lists the names only in A, only in B, and per resource that
//! differs its changed fields as JSON paths with both values
//! ([`json_diff`](super::json_diff): `Any`s are compared decoded) and both
//! whole resources (canonical JSON, an `Any` with `@type`). `format=text`
//! gives the same in the style of `diff -u`, for a terminal.
//!
//! Errors, `google.rpc.Status` JSON: 400 for a missing or unknown
//! parameter, type or format; 404 for a node without a session or state of
//! the type, a version not held, or no version held before; 403 when the
//! caller may not see both nodes (see [`Sight`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::access::Sight;
use super::debug::{params_of, respond};
use super::history::{judged, node_and_kind, not_held};
use super::json_diff::{diff, FieldChange};
use super::{Admin, Peer};
use crate::cache::{by_name, Paired, TypeState};
use crate::face::ApiError;
use crate::observe::covered_names;
use crate::xds::ResourceType;

const PATH: &str = "/debug/diff";

/// What `/debug/diff` shows.
#[derive(Debug, Serialize)]
struct DiffView {
    #[serde(rename = "type")]
    kind: &'static str,
    a: Side,
    b: Side,
    /// Names only A is served, sorted.
    only_in_a: Vec<String>,
    /// Names only B is served, sorted.
    only_in_b: Vec<String>,
    /// Resources both are served that differ, by name.
    differing: Vec<ResourceDiff>,
    /// How many resources both are served alike.
    identical: usize,
}

#[derive(Debug, Serialize)]
struct Side {
    node_id: String,
    /// The gateway version (`<upstream version>~<digest>`) of that answer.
    version: String,
    /// The upstream's version it came from.
    upstream_version: String,
}

/// One resource both sides hold, which differs.
#[derive(Debug, Serialize)]
struct ResourceDiff {
    name: String,
    /// Every field that differs, in document order.
    fields: Vec<FieldChange>,
    /// The whole resource on each side (canonical JSON).
    a: Value,
    b: Value,
}

/// `GET /debug/diff`.
pub(super) async fn diff_view(
    State(admin): State<Arc<Admin>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    peer: Peer,
) -> Response {
    judged(&admin, PATH, &headers, peer, query, answer)
}

fn answer(admin: &Admin, sight: &Sight, query: &str) -> Result<Response, ApiError> {
    let params = params_of(
        query,
        PATH,
        &["node", "with", "from", "to", "type", "format", "pretty"],
    )?;
    let (node, kind) = node_and_kind(admin, &params, PATH)?;
    let text = match params.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("text") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "format={other:?} is not one of json, text"
            )))
        }
    };
    let (with, from, to) = (params.get("with"), params.get("from"), params.get("to"));
    let other = with.unwrap_or(node);
    let b = match to {
        Some(version) => held(admin, sight, kind, other, version)?,
        None => now(admin, sight, kind, other)?,
    };
    let a = match (from, with) {
        (Some(version), _) => held(admin, sight, kind, node, version)?,
        (None, Some(_)) => now(admin, sight, kind, node)?,
        (None, None) => before(admin, kind, node, &b)?,
    };
    let view = compare(kind, a, b);
    if text {
        // A String's response is `text/plain; charset=utf-8`.
        return Ok(unified(&view).into_response());
    }
    Ok(respond(&view, &params))
}

/// One side, found: whose, and the state it is served from.
struct Found {
    node: String,
    state: Arc<TypeState>,
}

/// What `node` is served now, if `sight` may see it.
fn now(admin: &Admin, sight: &Sight, kind: ResourceType, node: &str) -> Result<Found, ApiError> {
    sight.check(kind, node, None)?;
    for session in admin.source.sessions().iter().filter(|s| s.node_id == node) {
        sight.check(kind, node, Some(&session.cluster))?;
    }
    let state = admin
        .source
        .states_of(node)
        .into_iter()
        .find(|s| s.kind == kind)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no session serves {} to node {node:?} now (see /debug/sessions; /debug/history keeps what it was served)",
                kind.short_name()
            ))
        })?;
    Ok(Found {
        node: node.to_owned(),
        state,
    })
}

/// The version `version` of `node` held in the history, if `sight` may see it.
fn held(
    admin: &Admin,
    sight: &Sight,
    kind: ResourceType,
    node: &str,
    version: &str,
) -> Result<Found, ApiError> {
    sight.check(kind, node, None)?;
    refuse_past_secrets(kind)?;
    let history = &admin.history;
    let found = history
        .version(node, None, kind, version)
        .ok_or_else(|| not_held(node, kind, version, &history.timelines(node, None, kind)))?;
    sight.check(kind, node, Some(&found.cluster))?;
    past(kind, node, found.state)
}

/// Diffs of secrets compare only what nodes are served now: a held
/// version may be a rotated-away private key.
fn refuse_past_secrets(kind: ResourceType) -> Result<(), ApiError> {
    if kind != ResourceType::Secrets {
        return Ok(());
    }
    Err(ApiError::Forbidden(
        "diffs of secrets compare only what two nodes are served now (no from= or to=, and with=): \
         a version held in the history may be a rotated-away private key"
            .into(),
    ))
}

/// A held version of `node`, to compare; one holding key material as sent
/// (`--allow-secrets`) is not compared either: it may be a rotated-away
/// private key.
fn past(kind: ResourceType, node: &str, state: Arc<TypeState>) -> Result<Found, ApiError> {
    if !state.resources.holds_keys() {
        return Ok(Found {
            node: node.to_owned(),
            state,
        });
    }
    Err(ApiError::Forbidden(format!(
        "this version of {} holds private keys, and diffs of such versions compare only what two \
         nodes are served now (no from= or to=, and with=): it may be a rotated-away private key",
        kind.short_name()
    )))
}

/// The version of `node` held before the one `after` is served from.
fn before(admin: &Admin, kind: ResourceType, node: &str, after: &Found) -> Result<Found, ApiError> {
    refuse_past_secrets(kind)?;
    let found = admin
        .history
        .before(node, kind, &after.state)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "no version of {} for node {node:?} is held before the one it is served now \
                 (give from= and to=; see /debug/history)",
                kind.short_name()
            ))
        })?;
    past(kind, node, found.state)
}

/// The resources a client asking what `state` covers is served, by name,
/// as JSON (canonical: a resource is an `Any` with `@type`).
fn served(state: &TypeState) -> BTreeMap<String, Value> {
    let names = covered_names(state);
    state
        .select(&names)
        .map(|r| {
            let json = crate::xds::plain_json::from_slice(&r.json).unwrap_or(Value::Null);
            (r.name.clone(), json)
        })
        .collect()
}

fn side(found: &Found) -> Side {
    Side {
        node_id: found.node.clone(),
        version: found
            .state
            .served_version(&covered_names(&found.state), None),
        upstream_version: found.state.version.clone(),
    }
}

fn compare(kind: ResourceType, a: Found, b: Found) -> DiffView {
    let (left, right) = (served(&a.state), served(&b.state));
    let mut view = DiffView {
        kind: kind.short_name(),
        a: side(&a),
        b: side(&b),
        only_in_a: Vec::new(),
        only_in_b: Vec::new(),
        differing: Vec::new(),
        identical: 0,
    };
    for (name, paired) in by_name(&left, &right) {
        match paired {
            Paired::Old(_) => view.only_in_a.push(name.clone()),
            Paired::New(_) => view.only_in_b.push(name.clone()),
            Paired::Both(x, y) => {
                let fields = diff(x, y);
                if fields.is_empty() {
                    view.identical += 1;
                } else {
                    view.differing.push(ResourceDiff {
                        name: name.clone(),
                        fields,
                        a: x.clone(),
                        b: y.clone(),
                    });
                }
            }
        }
    }
    view
}

/// A name or version as a line of text: control characters escaped (an
/// upstream chooses them; a terminal must not run them).
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c.is_control() {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out
}

/// `value` on one line (serialising a `Value` cannot fail).
fn one_line(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The diff in the style of `diff -u`: per resource a `---`/`+++` header
/// (`a/<type>/<name>` and `b/...`, with the node and version), then a hunk
/// per changed field (`@@ <path> @@`, `-` its value in A, `+` in B, a
/// side's line absent when the field is). A resource only one side has is
/// against `/dev/null`, by name.
fn unified(view: &DiffView) -> String {
    let kind = view.kind;
    let label = |side: &Side| {
        format!(
            "node {} version {}",
            printable(&side.node_id),
            printable(&side.version)
        )
    };
    let (la, lb) = (label(&view.a), label(&view.b));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {kind}: {} only in a, {} only in b, {} differing, {} identical",
        view.only_in_a.len(),
        view.only_in_b.len(),
        view.differing.len(),
        view.identical
    );
    let _ = writeln!(out, "# a: {la}\n# b: {lb}");
    for resource in &view.differing {
        let name = printable(&resource.name);
        let _ = writeln!(out, "--- a/{kind}/{name}\t{la}\n+++ b/{kind}/{name}\t{lb}");
        for field in &resource.fields {
            let _ = writeln!(out, "@@ {} @@", printable(&field.path));
            if let Some(a) = &field.a {
                let _ = writeln!(out, "-{}", one_line(a));
            }
            if let Some(b) = &field.b {
                let _ = writeln!(out, "+{}", one_line(b));
            }
        }
    }
    for name in &view.only_in_a {
        let name = printable(name);
        let _ = writeln!(
            out,
            "--- a/{kind}/{name}\t{la}\n+++ /dev/null\n@@ $ @@\n-{name}"
        );
    }
    for name in &view.only_in_b {
        let name = printable(name);
        let _ = writeln!(
            out,
            "--- /dev/null\n+++ b/{kind}/{name}\t{lb}\n@@ $ @@\n+{name}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn side(node: &str) -> Side {
        Side {
            node_id: node.into(),
            version: "1~abc".into(),
            upstream_version: "1".into(),
        }
    }

    /// Names only in A and only in B, the differing and the identical,
    /// each in name order (what `compare` gave before it walked the two
    /// sides with `cache::by_name`).
    #[test]
    fn compare_sorts_every_name_into_one_list_in_name_order() {
        let intake = crate::cache::Intake::new(crate::xds::Codec::embedded());
        let found = |node: &str, clusters: &[(&str, &str)]| Found {
            node: node.into(),
            state: Arc::new(crate::cache::test_states::clusters(
                &intake, "1", "n", clusters,
            )),
        };
        let a = found(
            "a",
            &[
                ("c", "1s"),
                ("d", "1s"),
                ("e", "1s"),
                ("x", "1s"),
                ("z", "1s"),
            ],
        );
        let b = found(
            "b",
            &[
                ("a", "1s"),
                ("d", "2s"),
                ("e", "1s"),
                ("y", "1s"),
                ("z", "3s"),
            ],
        );
        let view = compare(ResourceType::Clusters, a, b);
        assert_eq!(view.only_in_a, ["c", "x"]);
        assert_eq!(view.only_in_b, ["a", "y"]);
        let differing: Vec<&str> = view.differing.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(differing, ["d", "z"]);
        assert_eq!(view.identical, 1);
    }

    #[test]
    fn the_text_form_reads_like_diff_u() {
        let view = DiffView {
            kind: "clusters",
            a: side("a"),
            b: side("b\n"),
            only_in_a: vec!["gone".into()],
            only_in_b: vec![],
            differing: vec![ResourceDiff {
                name: "c1".into(),
                fields: diff(
                    &json!({"connectTimeout": "1s", "x": 1}),
                    &json!({"connectTimeout": "2s"}),
                ),
                a: json!({}),
                b: json!({}),
            }],
            identical: 3,
        };
        let text = unified(&view);
        let expected = "# clusters: 1 only in a, 0 only in b, 1 differing, 3 identical\n\
# a: node a version 1~abc\n# b: node b\\n version 1~abc\n\
--- a/clusters/c1\tnode a version 1~abc\n+++ b/clusters/c1\tnode b\\n version 1~abc\n\
@@ $.connectTimeout @@\n-\"1s\"\n+\"2s\"\n@@ $.x @@\n-1\n\
--- a/clusters/gone\tnode a version 1~abc\n+++ /dev/null\n@@ $ @@\n-gone\n";
        assert_eq!(text, expected);
    }
}
