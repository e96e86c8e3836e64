//! The validator against the corpus: every resource in tests/corpus/invalid
//! breaks the rule (at the path) it names; every resource in tests/corpus
//! and the demo snapshot is valid. (tests/validation_envoy.rs checks the same
//! corpus against a real Envoy.)

use std::path::Path;

use super::*;
use crate::Codec;

fn decode(codec: &Codec, json: &serde_json::Value) -> DynamicMessage {
    let any = codec
        .parse_any(json.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{json}: {e}"));
    codec.decode_any(&any.type_url, &any.value).unwrap()
}

fn json_files(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), value)
        })
        .collect()
}

/// `rel` under the repository's top level (the corpus is the gateway's).
fn corpus(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

#[test]
fn every_invalid_resource_breaks_the_rule_it_names() {
    let codec = Codec::embedded();
    let validator = Validator::new(codec.pool());
    let cases = json_files(&corpus("tests/corpus/invalid"));
    assert!(cases.len() >= 10, "{}", cases.len());
    for (file, case) in cases {
        let message = decode(&codec, &case["resource"]);
        let violation = validator
            .validate(&message)
            .expect_err(&format!("{file}: passed"));
        assert_eq!(
            violation.rule,
            case["rule"].as_str().unwrap(),
            "{file}: {violation}"
        );
        assert_eq!(
            violation.path,
            case["path"].as_str().unwrap(),
            "{file}: {violation}"
        );
    }
}

#[test]
fn valid_resources_pass() {
    let codec = Codec::embedded();
    let validator = Validator::new(codec.pool());
    for (file, resource) in json_files(&corpus("tests/corpus")) {
        let message = decode(&codec, &resource);
        assert_eq!(validator.validate(&message), Ok(()), "{file}");
    }
}

#[test]
fn messages_say_what_was_expected() {
    let codec = Codec::embedded();
    let validator = Validator::new(codec.pool());
    let cluster = serde_json::json!({"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": "c", "connect_timeout": "-1s"});
    let violation = validator.validate(&decode(&codec, &cluster)).unwrap_err();
    assert_eq!(
        violation.to_string(),
        "connect_timeout: value must be greater than 0s [validate.rules.duration.gt]"
    );
}
