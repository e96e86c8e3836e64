//! Our JSON codec against protobuf's reference JSON mapping.
//!
//! Every resource in `tests/corpus/*.json` (a JSON `Any`, snake_case) goes
//! through [`Codec`] and through Python's `google.protobuf.json_format` with
//! the `xds-protos` package (`tests/support/json_reference.py`, one process
//! per test run). Both sides must build the same message from the corpus,
//! each must parse the other's JSON back to that message, the two JSON texts
//! must agree value for value with every nested `Any` carrying `"@type"`, and
//! our render must be a fixed point from the first render on.
//!
//! Messages are compared field by field with nested `Any`s decoded, never as
//! raw bytes: map entries serialize in hash order. Python comes from
//! `XDS_GATEWAY_PYTHON` (set by `scripts/test`) or `.venv/bin/python`; without
//! either the reference tests fail, saying how to install it.
//!
//! `known_discrepancies` (ignored) pins the one case where the codec still
//! differs from the reference (non-finite float wrappers); un-ignore it once fixed.

#[path = "support/process.rs"]
mod process;

#[path = "support/json_reference.rs"]
mod json_reference;

use std::path::{Path, PathBuf};

use json_reference::reference;

use prost_reflect::{DynamicMessage, ReflectMessage, Value};
use serde_json::json;
use xds_gateway::xds::{Codec, ResourceType};

struct Case {
    name: String,
    text: String,
}

/// The corpus files, sorted by name.
fn corpus() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| Case {
            name: path.file_name().unwrap().to_string_lossy().into_owned(),
            text: std::fs::read_to_string(&path).unwrap(),
        })
        .collect()
}

/// The `Any` a reference result describes, or python's error.
fn any_of(result: &serde_json::Value) -> Result<prost_types::Any, String> {
    if let Some(error) = result.get("error") {
        return Err(format!("python: {error}"));
    }
    Ok(prost_types::Any {
        type_url: result["type_url"].as_str().unwrap().to_owned(),
        value: hex::decode(result["value_hex"].as_str().unwrap()).unwrap(),
    })
}

fn render(codec: &Codec, any: &prost_types::Any) -> String {
    let bytes = codec.render_any(&any.type_url, &any.value).unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Where two `Any`s differ (nested `Any`s decoded, maps by key), if they do.
fn any_diff(codec: &Codec, a: &prost_types::Any, b: &prost_types::Any) -> Option<String> {
    if a.type_url != b.type_url {
        return Some(format!("type URL {} vs {}", a.type_url, b.type_url));
    }
    let decode = |any: &prost_types::Any| codec.decode_any(&any.type_url, &any.value);
    let (a_msg, b_msg) = match (decode(a), decode(b)) {
        (Ok(a_msg), Ok(b_msg)) => (a_msg, b_msg),
        (a_msg, b_msg) => return Some(format!("decoding: {:?} vs {:?}", a_msg.err(), b_msg.err())),
    };
    message_diff(codec, &a_msg, &b_msg, &a.type_url)
}

fn message_diff(
    codec: &Codec,
    a: &DynamicMessage,
    b: &DynamicMessage,
    path: &str,
) -> Option<String> {
    let desc = a.descriptor();
    if desc.full_name() == "google.protobuf.Any" {
        let parts = |m: &DynamicMessage| prost_types::Any {
            type_url: m
                .get_field_by_name("type_url")
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned(),
            value: m
                .get_field_by_name("value")
                .unwrap()
                .as_bytes()
                .unwrap()
                .to_vec(),
        };
        return any_diff(codec, &parts(a), &parts(b)).map(|d| format!("{path}: {d}"));
    }
    if a.unknown_fields().count() + b.unknown_fields().count() > 0 {
        return Some(format!("{path}: unknown fields"));
    }
    let diff = desc.fields().find_map(|field| {
        let path = format!("{path}.{}", field.name());
        match (a.has_field(&field), b.has_field(&field)) {
            (false, false) => None,
            (true, true) => value_diff(codec, &a.get_field(&field), &b.get_field(&field), &path),
            (x, y) => Some(format!("{path}: present {x} vs {y}")),
        }
    });
    diff
}

fn value_diff(codec: &Codec, a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Message(x), Value::Message(y)) => message_diff(codec, x, y, path),
        (Value::List(x), Value::List(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (x, y))| value_diff(codec, x, y, &format!("{path}[{i}]"))),
        (Value::Map(x), Value::Map(y)) if x.len() == y.len() => x.iter().find_map(|(k, v)| {
            let path = format!("{path}[{k:?}]");
            match y.get(k) {
                Some(w) => value_diff(codec, v, w, &path),
                None => Some(format!("{path}: missing on the right")),
            }
        }),
        // Bit for bit, so that NaN equals NaN and -0.0 differs from 0.0.
        (Value::F64(x), Value::F64(y)) if x.to_bits() == y.to_bits() => None,
        (Value::F32(x), Value::F32(y)) if x.to_bits() == y.to_bits() => None,
        _ => (a != b).then(|| format!("{path}: {a:?} vs {b:?}")),
    }
}

fn type_markers(json: &str) -> usize {
    json.matches("\"@type\"").count()
}

#[test]
fn corpus_covers_every_rest_resource_type() {
    let codec = Codec::embedded();
    let cases = corpus();
    for kind in ResourceType::BUILT_IN {
        let covered = cases
            .iter()
            .any(|c| codec.parse_any(c.text.as_bytes()).unwrap().type_url == kind.type_url());
        assert!(covered, "no corpus file for {}", kind.type_url());
    }
}

/// Runs every reference check on `cases` (one Python process) and returns
/// one message per failing case, with both JSON texts.
fn reference_failures(python: &Path, codec: &Codec, cases: &[Case]) -> Vec<String> {
    let ours: Vec<Result<(prost_types::Any, String), String>> = cases
        .iter()
        .map(|c| {
            let any = codec
                .parse_any(c.text.as_bytes())
                .map_err(|e| format!("we cannot parse it: {e}"))?;
            let json = render(codec, &any);
            Ok((any, json))
        })
        .collect();
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let our_json: Vec<&str> = ours
        .iter()
        .map(|o| o.as_ref().map_or("", |(_, json)| json.as_str()))
        .collect();
    let responses = reference(
        python,
        &[
            json!({"op": "roundtrip", "items": texts}),
            json!({"op": "parse", "items": our_json}),
        ],
    );
    let results = |i: usize| -> &Vec<serde_json::Value> {
        let results = responses[i]["results"].as_array();
        let results = results.unwrap_or_else(|| panic!("bad response: {}", responses[i]));
        assert_eq!(results.len(), cases.len());
        results
    };
    let (from_corpus, from_our_json) = (results(0), results(1));
    let failures = cases.iter().enumerate().filter_map(|(i, case)| {
        let their_json = from_corpus[i]["json"].as_str().unwrap_or("");
        check_case(codec, &ours[i], &from_corpus[i], &from_our_json[i])
            .err()
            .map(|why| {
                let our_json = ours[i].as_ref().map_or("", |(_, json)| json.as_str());
                format!(
                    "{}: {why}\n  ours:   {our_json}\n  python: {their_json}",
                    case.name
                )
            })
    });
    failures.collect()
}

/// The checks for one case, given our parse and render of it, python's
/// roundtrip of the original text and python's parse of our JSON.
fn check_case(
    codec: &Codec,
    ours: &Result<(prost_types::Any, String), String>,
    from_corpus: &serde_json::Value,
    from_our_json: &serde_json::Value,
) -> Result<(), String> {
    let (ours, our_json) = ours.as_ref().map_err(Clone::clone)?;
    let theirs = any_of(from_corpus)?;
    let their_json = from_corpus["json"].as_str().unwrap();
    if let Some(diff) = any_diff(codec, ours, &theirs) {
        return Err(format!("the original parses differently: {diff}"));
    }
    let reparsed = any_of(from_our_json).map_err(|e| format!("on our JSON, {e}"))?;
    if let Some(diff) = any_diff(codec, ours, &reparsed) {
        return Err(format!("python reads our JSON differently: {diff}"));
    }
    let back = codec
        .parse_any(their_json.as_bytes())
        .map_err(|e| format!("we cannot parse python's JSON: {e}"))?;
    if let Some(diff) = any_diff(codec, ours, &back) {
        return Err(format!("we read python's JSON differently: {diff}"));
    }
    if type_markers(our_json) != type_markers(their_json) {
        return Err("the \"@type\" counts differ".into());
    }
    let ours_value: serde_json::Value = serde_json::from_str(our_json).unwrap();
    let theirs_value: serde_json::Value = serde_json::from_str(their_json).unwrap();
    if ours_value != theirs_value {
        return Err("the JSON values differ".into());
    }
    Ok(())
}

#[test]
fn codec_agrees_with_protobuf_reference_json() {
    let python = process::require_python("json_reference");
    let codec = Codec::embedded();
    let cases = corpus();
    for case in &cases {
        let any = codec.parse_any(case.text.as_bytes()).unwrap();
        let ours = render(&codec, &any);
        let (name, want) = (&case.name, type_markers(&case.text));
        assert_eq!(
            type_markers(&ours),
            want,
            "{name}: an Any lost its \"@type\"\n{ours}"
        );
    }
    let failures = reference_failures(&python, &codec, &cases);
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// Cases where the codec once differed from the reference and was fixed:
/// 32-bit floats in their shortest form, and an `Any` holding `Empty`
/// written (and read) without `"value"`, as C++ (Envoy) and Python do.
#[test]
fn fixed_discrepancies_stay_fixed() {
    let python = process::require_python("json_reference");
    let any = |name: &str, body: &str| Case {
        name: name.to_owned(),
        text: format!(r#"{{"@type":"type.googleapis.com/{body}}}"#),
    };
    let cases = [
        any(
            "float_wrapper",
            r#"envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin","error_utilization_penalty":0.1"#,
        ),
        any(
            "float_field",
            r#"envoy.extensions.http.cache.file_system_http_cache.v3.FileSystemHttpCacheConfig","evict_fraction":0.05"#,
        ),
        any(
            "any_empty",
            r#"envoy.config.core.v3.Metadata","typed_filter_metadata":{"x":{"@type":"type.googleapis.com/google.protobuf.Empty"}}"#,
        ),
    ];
    let failures = reference_failures(&python, &Codec::embedded(), &cases);
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// Known discrepancy, not fixed: prost-reflect 0.16.5 renders a non-finite
/// `DoubleValue`/`FloatValue` as `null` (its well-known-type serializer lacks
/// the "NaN"/"Infinity" strings plain float fields get); Python writes "NaN".
/// `cargo test --test json_reference -- --ignored` shows it.
#[test]
#[ignore = "known codec discrepancy: non-finite float wrappers render as null (prost-reflect)"]
fn known_discrepancies() {
    let python = process::require_python("json_reference");
    let cases = [Case {
        name: "nan_wrapper".to_owned(),
        text: r#"{"@type":"type.googleapis.com/envoy.config.core.v3.Metadata","typed_filter_metadata":{"x":{"@type":"type.googleapis.com/google.protobuf.DoubleValue","value":"NaN"}}}"#.to_owned(),
    }];
    let failures = reference_failures(&python, &Codec::embedded(), &cases);
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn render_is_a_fixed_point() {
    let codec = Codec::embedded();
    for case in corpus() {
        let name = &case.name;
        let first = codec.parse_any(case.text.as_bytes()).unwrap();
        let first_json = render(&codec, &first);
        let second = codec.parse_any(first_json.as_bytes()).unwrap();
        let second_json = render(&codec, &second);
        let third = codec.parse_any(second_json.as_bytes()).unwrap();
        let third_json = render(&codec, &third);
        assert_eq!(first_json, second_json, "{name}: second render differs");
        assert_eq!(second_json, third_json, "{name}: third render differs");
        if let Some(diff) = any_diff(&codec, &first, &second) {
            panic!("{name}: re-parsing our JSON changes the message: {diff}\n{first_json}");
        }
    }
}
