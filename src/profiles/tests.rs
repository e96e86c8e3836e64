use std::path::Path;

use serde_json::json;

use super::*;
use crate::config::{ProfileTable, Settings};

impl NodeProfiles {
    /// Profiles of the given nodes (checked as at start-up), for tests.
    pub(crate) fn with(nodes: &[(&str, Value)]) -> NodeProfiles {
        let codec = test_codec();
        let mut profiles = NodeProfiles::default();
        for (name, node) in nodes {
            let Value::Object(node) = node.clone() else {
                panic!("{name}: a node is an object");
            };
            let origin = format!("test profile {name}");
            profiles
                .add(
                    name,
                    Profile { origin, node },
                    codec,
                    Config::default().max_node_bytes,
                )
                .unwrap_or_else(|e| panic!("{e}"));
        }
        profiles
    }
}

/// The embedded codec, decoded once for every test (decoding it takes a
/// while in a debug build).
pub(crate) fn test_codec() -> &'static Codec {
    static CODEC: std::sync::OnceLock<Codec> = std::sync::OnceLock::new();
    CODEC.get_or_init(Codec::embedded)
}

fn load(config: &Config) -> Result<NodeProfiles, ProfileError> {
    NodeProfiles::load(config, test_codec())
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn from_dir(files: &[(&str, &str)]) -> Result<NodeProfiles, ProfileError> {
    let dir = dir_with(files);
    load(&Config {
        node_profiles: Some(dir.path().to_owned()),
        ..Config::default()
    })
}

#[test]
fn every_file_form_gives_the_node_as_written() {
    let node = json!({"id": "n", "cluster": "c", "metadata": {"CLUSTER_ID": "east", "N": 1}});
    let forms = [
        node.clone(),
        json!({"node": node}),
        json!({"version_info": "", "node": node}),
        json!({"bootstrap": {"node": node, "admin": {}}}),
        json!({"configs": [
            {"@type": "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump",
             "bootstrap": {"node": node}, "last_updated": "2026-01-01T00:00:00Z"},
            {"@type": "type.googleapis.com/envoy.admin.v3.ClustersConfigDump"}
        ]}),
    ];
    for form in forms {
        let profiles = from_dir(&[
            ("p.json", &form.to_string()),
            ("README.md", "not a profile"),
        ])
        .unwrap_or_else(|e| panic!("{form}: {e}"));
        assert_eq!(profiles.names().collect::<Vec<_>>(), ["p"]);
        assert_eq!(Value::Object(profiles.get("p").unwrap().node.clone()), node);
    }
}

#[test]
fn a_node_over_the_node_limit_is_refused_at_load() {
    let big = json!({"id": "n", "metadata": {"LABELS": "x".repeat(2_000)}}).to_string();
    let dir = dir_with(&[("big.json", &big)]);
    let config = |max_node_bytes| Config {
        node_profiles: Some(dir.path().to_owned()),
        max_node_bytes,
        ..Config::default()
    };
    let err = load(&config(1_024)).unwrap_err().to_string();
    assert!(
        err.contains("\"big\"") && err.contains("--max-node-bytes (1024)"),
        "{err}"
    );
    assert!(load(&config(4_096)).is_ok());
}

#[test]
fn a_node_that_is_not_a_node_is_refused_naming_the_file() {
    for (text, says) in [
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        (r#"{"id": "n", "metdata": {}}"#, "metdata"),
        (r#"{"node": {"id": 5}}"#, "Node"),
        (r#"{"node": "n"}"#, "node is not a JSON object"),
        (r#"{"bootstrap": {"admin": {}}}"#, "no bootstrap.node"),
        (r#"{"configs": [{"@type": "x"}]}"#, "without a bootstrap"),
        (r#"{"configs": 5}"#, "without a bootstrap"),
        (r#"{"locality": {"region": "r", "city": "c"}}"#, "city"),
    ] {
        let err = from_dir(&[("bad-one.json", text)]).unwrap_err().to_string();
        assert!(
            err.contains("\"bad-one\"") && err.contains("bad-one.json") && err.contains(says),
            "{text}: {err}"
        );
    }
    let err = from_dir(&[("a b.json", "{}")]).unwrap_err().to_string();
    assert!(err.contains("profile name"), "{err}");
    let missing = load(&Config {
        node_profiles: Some("/nonexistent/profiles".into()),
        ..Config::default()
    })
    .unwrap_err();
    assert!(
        matches!(missing, ProfileError::Unreadable { .. }),
        "{missing}"
    );
}

#[test]
fn tables_and_files_share_one_namespace() {
    let dir = dir_with(&[("edge.json", r#"{"cluster": "edge"}"#)]);
    let table = ProfileTable {
        name: "edge".into(),
        ..ProfileTable::default()
    };
    let err = load(&Config {
        profiles: vec![table],
        node_profiles: Some(dir.path().to_owned()),
        ..Config::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("declared twice")
            && err.contains("--config file")
            && err.contains("edge.json"),
        "{err}"
    );
}

#[test]
fn a_table_is_checked_at_load_even_when_built_in_code() {
    // A build version becomes the Node field, which the strict codec takes.
    let table = ProfileTable {
        name: "t".into(),
        user_agent_build_version: Some("1.2.3".into()),
        ..ProfileTable::default()
    };
    let profiles = load(&Config {
        profiles: vec![table],
        ..Config::default()
    })
    .unwrap();
    let node = &profiles.get("t").unwrap().node;
    check_node(node, test_codec()).unwrap();
    // Built in code (never validated): the load still checks the name.
    let unnamed = ProfileTable::default();
    let err = load(&Config {
        profiles: vec![unnamed],
        ..Config::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("profile name"), "{err}");
}

/// examples/profiles: the TOML snippet as a `--config` file, the JSON
/// nodes as `--node-profiles`, all loaded together, each one a Node with
/// the keys its control plane reads.
#[test]
fn the_examples_load() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/profiles");
    let config = Config::from_settings(Settings {
        config: Some(examples.join("profiles.toml")),
        node_profiles: Some(examples.clone()),
        ..Settings::default()
    })
    .unwrap();
    let profiles = load(&config).unwrap();
    let names: Vec<&str> = profiles.names().collect();
    for name in [
        "envoy",
        "envoy-gateway",
        "istio-ingressgateway",
        "istio-sidecar",
        "toml-istio-sidecar",
        "toml-plain-envoy",
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    for name in [
        "istio-sidecar",
        "istio-ingressgateway",
        "toml-istio-sidecar",
    ] {
        let metadata = &profiles.get(name).unwrap().node["metadata"];
        for key in [
            "ISTIO_VERSION",
            "CLUSTER_ID",
            "NAMESPACE",
            "LABELS",
            "MESH_ID",
        ] {
            assert!(metadata.get(key).is_some(), "{name} lacks {key}");
        }
    }
    for name in &names {
        check_node(&profiles.get(name).unwrap().node, test_codec()).unwrap();
    }
}
