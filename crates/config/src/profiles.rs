//! Node profiles as the `--config` file declares them: the `[[profile]]`
//! tables, checked (names unique and fit for a query string, metadata
//! that JSON can hold) and turned into the `envoy.config.core.v3.Node`
//! JSON each one stands for. Checking that JSON against the Node message
//! (with the codec, and the profiles of `--node-profiles`) is
//! the gateway's `profiles`' business.
//!
//! ```toml
//! [[profile]]
//! name = "istio-sidecar"
//! cluster = "reviews.default"          # node.cluster (a GET's ?cluster= wins)
//! user-agent-name = "envoy"
//! user-agent-version = "1.31.2"        # or user-agent-build-version = "1.31.2"
//! locality = { region = "us-east1", zone = "us-east1-b" }
//! [profile.metadata]                   # node.metadata, a google.protobuf.Struct
//! ISTIO_VERSION = "1.23.2"
//! NAMESPACE = "default"
//! LABELS = { app = "reviews", version = "v1" }
//! ```

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{invalid, ConfigError};

/// One `[[profile]]` table as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ProfileTable {
    /// What `?profile=` names it by.
    pub name: String,
    /// `node.id` when a GET gives no `?node=` (default: empty).
    pub id: Option<String>,
    pub cluster: Option<String>,
    pub user_agent_name: Option<String>,
    /// `node.user_agent_version` (free text).
    pub user_agent_version: Option<String>,
    /// `node.user_agent_build_version` as `MAJOR.MINOR.PATCH`.
    pub user_agent_build_version: Option<String>,
    pub locality: Option<LocalityTable>,
    /// `node.metadata`: any TOML table but dates (a Struct has none).
    pub metadata: Option<toml::Table>,
}

/// `locality = { region = ..., zone = ..., sub-zone = ... }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LocalityTable {
    pub region: Option<String>,
    pub zone: Option<String>,
    pub sub_zone: Option<String>,
}

/// Whether `name` may name a profile: what a query string and a file name
/// carry as they are (letters, digits, `.`, `_`, `-`; at most 128).
pub fn valid_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl ProfileTable {
    /// The Node JSON (snake_case field names) this table stands for.
    pub fn node(&self) -> Result<Map<String, Value>, String> {
        let mut node = strings([
            ("id", &self.id),
            ("cluster", &self.cluster),
            ("user_agent_name", &self.user_agent_name),
            ("user_agent_version", &self.user_agent_version),
        ]);
        if let Some(build) = &self.user_agent_build_version {
            if self.user_agent_version.is_some() {
                return Err(
                    "user-agent-version and user-agent-build-version are one choice in a Node: give one"
                        .into(),
                );
            }
            node.insert("user_agent_build_version".into(), build_version(build)?);
        }
        if let Some(locality) = &self.locality {
            let fields = strings([
                ("region", &locality.region),
                ("zone", &locality.zone),
                ("sub_zone", &locality.sub_zone),
            ]);
            node.insert("locality".into(), Value::Object(fields));
        }
        if let Some(metadata) = &self.metadata {
            node.insert("metadata".into(), object_of(metadata, "metadata")?);
        }
        Ok(node)
    }
}

/// The `fields` that are set, as JSON strings.
fn strings<const N: usize>(fields: [(&str, &Option<String>); N]) -> Map<String, Value> {
    let set =
        |(key, value): (&str, &Option<String>)| Some((key.into(), Value::String(value.clone()?)));
    fields.into_iter().filter_map(set).collect()
}

/// `{"version": {"major_number": .., "minor_number": .., "patch": ..}}` of
/// `MAJOR.MINOR.PATCH`.
fn build_version(text: &str) -> Result<Value, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let numbers: Option<Vec<u32>> = parts.iter().map(|p| p.parse().ok()).collect();
    match numbers.as_deref() {
        Some([major, minor, patch]) => Ok(serde_json::json!({
            "version": {"major_number": major, "minor_number": minor, "patch": patch}
        })),
        _ => Err(format!(
            "user-agent-build-version {text:?} is not MAJOR.MINOR.PATCH (like 1.31.2)"
        )),
    }
}

/// A TOML value as the JSON of a `google.protobuf.Value`.
fn json_of(value: &toml::Value, path: &str) -> Result<Value, String> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{path}: {f} is not a number JSON can hold"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(_) => {
            return Err(format!(
                "{path}: a date has no form in node metadata; write it as a string"
            ))
        }
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| json_of(v, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => object_of(table, path)?,
    })
}

/// A TOML table as the JSON of a `google.protobuf.Struct`.
fn object_of(table: &toml::Table, path: &str) -> Result<Value, String> {
    table
        .iter()
        .map(|(k, v)| Ok((k.clone(), json_of(v, &format!("{path}.{k}"))?)))
        .collect::<Result<_, String>>()
        .map(Value::Object)
}

/// Checks the tables: names valid and unique, each table's node well formed.
pub(super) fn check(tables: &[ProfileTable]) -> Result<(), ConfigError> {
    let mut names = BTreeSet::new();
    for table in tables {
        if !valid_profile_name(&table.name) {
            return Err(invalid(
                "profile",
                &format!(
                    "name {:?}: a profile name is 1 to 128 letters, digits, '.', '_' or '-' (not starting with '.')",
                    table.name
                ),
            ));
        }
        if !names.insert(table.name.as_str()) {
            return Err(invalid(
                "profile",
                &format!("two [[profile]] tables are named {:?}", table.name),
            ));
        }
        table
            .node()
            .map_err(|reason| invalid("profile", &format!("{:?}: {reason}", table.name)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Result<ProfileTable, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn a_table_becomes_its_node() {
        let t = table(
            r#"name = "sidecar"
cluster = "reviews.default"
user-agent-name = "envoy"
user-agent-build-version = "1.31.2"
locality = { region = "r", sub-zone = "s" }
[metadata]
ISTIO_VERSION = "1.23.2"
PORTS = [9080, 15090]
RATIO = 0.5
LABELS = { app = "reviews" }
"#,
        )
        .unwrap();
        let node = Value::Object(t.node().unwrap());
        assert_eq!(
            node,
            serde_json::json!({
                "cluster": "reviews.default",
                "user_agent_name": "envoy",
                "user_agent_build_version": {"version": {"major_number": 1, "minor_number": 31, "patch": 2}},
                "locality": {"region": "r", "sub_zone": "s"},
                "metadata": {"ISTIO_VERSION": "1.23.2", "PORTS": [9080, 15090], "RATIO": 0.5, "LABELS": {"app": "reviews"}},
            })
        );
        check(&[t]).unwrap();
    }

    #[test]
    fn mistakes_are_refused_naming_the_profile() {
        // Unknown keys, in the table and in its locality.
        assert!(table("name = \"a\"\nnod = \"x\"").is_err());
        assert!(table("name = \"a\"\nlocality = { region = \"r\", city = \"c\" }").is_err());
        let bad = |text: &str| {
            let t = table(text).unwrap();
            check(&[t]).unwrap_err().to_string()
        };
        assert!(bad("name = \"a b\"").contains("\"a b\""));
        assert!(bad("name = \"\"").contains("profile name"));
        assert!(
            bad("name = \"a\"\nuser-agent-build-version = \"1.2\"").contains("MAJOR.MINOR.PATCH")
        );
        assert!(bad(
            "name = \"a\"\nuser-agent-version = \"1\"\nuser-agent-build-version = \"1.2.3\""
        )
        .contains("one choice"));
        let dated = bad("name = \"a\"\n[metadata]\nWHEN = 1979-05-27");
        assert!(
            dated.contains("metadata.WHEN") && dated.contains("\"a\""),
            "{dated}"
        );
        let nan = bad("name = \"a\"\n[metadata]\nX = { y = [nan] }");
        assert!(nan.contains("metadata.X.y[0]"), "{nan}");
        let twice = vec![
            table("name = \"a\"").unwrap(),
            table("name = \"a\"").unwrap(),
        ];
        assert!(check(&twice)
            .unwrap_err()
            .to_string()
            .contains("two [[profile]]"));
    }

    #[test]
    fn names_fit_a_query_and_a_file_name() {
        for good in ["istio-sidecar", "a", "gw_1.2", "A-b"] {
            assert!(valid_profile_name(good), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "a b", "é", "a&b", &"x".repeat(129)] {
            assert!(!valid_profile_name(bad), "{bad}");
        }
    }
}
