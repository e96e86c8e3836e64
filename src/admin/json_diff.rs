//! Field-by-field differences between two JSON documents, as JSON paths
//! with both values: what `/debug/diff` shows of a resource that differs.
//!
//! The documents are canonical proto3 JSON (`Resource::json`), where an
//! `Any` is an object holding `@type` and the decoded message's fields, so
//! comparing them compares `Any`s after decoding, never as bytes. Two
//! objects of different `@type` are one change (the whole value): their
//! fields mean different things. Arrays are compared index by index (xDS
//! lists are ordered: an inserted element shows as a change at each later
//! index and an addition at the end). A field absent on one side is absent
//! from that side of the change (proto3 JSON leaves out default values, so
//! absent means "the default").
//!
//! Paths are written `$.field[index]`, with `$["key"]` for a key that is
//! not a plain identifier (`@type`, map keys of `Struct` metadata).

use serde::Serialize;
use serde_json::Value;

/// One field that differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FieldChange {
    /// Where, as a JSON path from the resource (`$.connectTimeout`).
    pub(crate) path: String,
    /// The value on the first side; absent when the field is not there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) a: Option<Value>,
    /// The value on the second side; absent when the field is not there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) b: Option<Value>,
}

/// Every field that differs from `a` to `b`, in document order (object keys
/// sorted); empty when they are equal.
pub(crate) fn diff(a: &Value, b: &Value) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    walk("$".to_owned(), Some(a), Some(b), &mut changes);
    changes
}

fn walk(path: String, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<FieldChange>) {
    match (a, b) {
        // Field by field unless they are `Any`s of different types.
        (Some(Value::Object(x)), Some(Value::Object(y))) if x.get("@type") == y.get("@type") => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                walk(member(&path, key), x.get(key), y.get(key), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                walk(format!("{path}[{i}]"), x.get(i), y.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldChange {
            path,
            a: a.cloned(),
            b: b.cloned(),
        }),
    }
}

/// `path.key`, or `path["key"]` when `key` is not a plain identifier.
fn member(path: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        format!("{path}.{key}")
    } else {
        // Serialising a &str cannot fail.
        let quoted = serde_json::to_string(key).unwrap_or_default();
        format!("{path}[{quoted}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(a: Value, b: Value) -> Vec<(String, Option<Value>, Option<Value>)> {
        diff(&a, &b)
            .into_iter()
            .map(|c| (c.path, c.a, c.b))
            .collect()
    }

    #[test]
    fn equal_documents_have_no_changes() {
        let doc = json!({"name": "c", "x": [1, {"y": null}], "@type": "t"});
        assert!(diff(&doc, &doc.clone()).is_empty());
    }

    #[test]
    fn one_field_names_exactly_its_path_and_both_values() {
        let a = json!({"name": "c", "connectTimeout": "1s", "lbPolicy": "ROUND_ROBIN"});
        let b = json!({"name": "c", "connectTimeout": "2s", "lbPolicy": "ROUND_ROBIN"});
        assert_eq!(
            paths(a, b),
            [(
                "$.connectTimeout".into(),
                Some(json!("1s")),
                Some(json!("2s"))
            )]
        );
    }

    #[test]
    fn nested_fields_arrays_and_absent_fields() {
        let a = json!({"lb": {"eps": [{"port": 1}, {"port": 2}]}, "gone": true});
        let b = json!({"lb": {"eps": [{"port": 1}, {"port": 3}, {"port": 4}]}, "new": 5});
        assert_eq!(
            paths(a, b),
            [
                ("$.gone".into(), Some(json!(true)), None),
                ("$.lb.eps[1].port".into(), Some(json!(2)), Some(json!(3))),
                ("$.lb.eps[2]".into(), None, Some(json!({"port": 4}))),
                ("$.new".into(), None, Some(json!(5))),
            ]
        );
    }

    /// `Any`s are compared decoded: a field inside one is named by its
    /// path; two `Any`s of different types are one change, shown whole.
    #[test]
    fn anys_are_compared_by_their_decoded_fields() {
        let hcm = |prefix: &str| json!({"typedConfig": {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", "statPrefix": prefix}});
        assert_eq!(
            paths(hcm("in"), hcm("out")),
            [(
                "$.typedConfig.statPrefix".into(),
                Some(json!("in")),
                Some(json!("out"))
            )]
        );
        let other = json!({"typedConfig": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy", "statPrefix": "in"}});
        let changes = paths(hcm("in"), other.clone());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].0, "$.typedConfig");
        assert_eq!(changes[0].2.as_ref(), Some(&other["typedConfig"]));
    }

    #[test]
    fn keys_that_are_not_identifiers_are_quoted() {
        let a = json!({"metadata": {"filterMetadata": {"envoy.lb": {"a b": 1, "@type": "x"}}}});
        let b = json!({"metadata": {"filterMetadata": {"envoy.lb": {"a b": 2, "@type": "x"}}}});
        assert_eq!(
            paths(a, b)[0].0,
            r#"$.metadata.filterMetadata["envoy.lb"]["a b"]"#
        );
        assert_eq!(member("$", "@type"), r#"$["@type"]"#);
        assert_eq!(member("$", "x\"y"), r#"$["x\"y"]"#);
        assert_eq!(member("$", "_ok9"), "$._ok9");
    }

    #[test]
    fn a_changed_kind_of_value_is_one_change() {
        assert_eq!(
            paths(json!({"x": [1]}), json!({"x": {"0": 1}})),
            [("$.x".into(), Some(json!([1])), Some(json!({"0": 1})))]
        );
        assert_eq!(
            paths(json!(1), json!("1")),
            [("$".into(), Some(json!(1)), Some(json!("1")))]
        );
    }
}
