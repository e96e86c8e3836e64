//! The `--node-profiles DIR` directory: every `NAME.json` in it is the
//! profile `NAME` (other files are left alone). A file holds a JSON object
//! that is, or holds, an `envoy.config.core.v3.Node`:
//! - the Node itself (`{"id": ..., "metadata": {...}}`);
//! - an object with a `node` field (a `DiscoveryRequest` body, or a
//!   bootstrap);
//! - `{"bootstrap": {"node": ...}}`: the `BootstrapConfigDump` entry of an
//!   Envoy's `/config_dump`;
//! - an Envoy's `/config_dump` (`{"configs": [...]}`, whole or as
//!   `?mask=bootstrap.node` cuts it): its bootstrap's node.

use std::path::Path;

use serde_json::{Map, Value};

use super::{Profile, ProfileError};

/// The profiles of the directory at `path`, in file name order.
pub(super) fn read(path: &Path) -> Result<Vec<(String, Profile)>, ProfileError> {
    let unreadable = |path: &Path, reason: String| ProfileError::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let entries = std::fs::read_dir(path).map_err(|e| unreadable(path, e.to_string()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| unreadable(path, e.to_string()))?;
        let file = entry.path();
        let Some(name) = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        if file.is_file() {
            files.push((name.to_owned(), file));
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|(name, file)| {
            let origin = file.display().to_string();
            let text = std::fs::read(&file).map_err(|e| unreadable(&file, e.to_string()))?;
            let node = node_of(&text).map_err(|reason| ProfileError::Invalid {
                name: name.clone(),
                origin: origin.clone(),
                reason,
            })?;
            Ok((name, Profile { origin, node }))
        })
        .collect()
}

/// The Node a file's bytes hold (see the module for the forms).
pub(super) fn node_of(text: &[u8]) -> Result<Map<String, Value>, String> {
    let value = crate::xds::plain_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut top) = value else {
        return Err("not a JSON object (a Node, or an object holding one as `node`)".into());
    };
    if let Some(configs) = top.remove("configs") {
        let bootstrap = configs
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c.get("bootstrap"))
            .ok_or("a /config_dump without a bootstrap entry (dump it whole, or with ?mask=bootstrap.node)")?;
        return object(bootstrap.get("node"), "configs[].bootstrap.node");
    }
    if let Some(bootstrap) = top.get("bootstrap") {
        return object(bootstrap.get("node"), "bootstrap.node");
    }
    if top.contains_key("node") {
        return object(top.get("node"), "node");
    }
    Ok(top)
}

fn object(value: Option<&Value>, at: &str) -> Result<Map<String, Value>, String> {
    match value {
        Some(Value::Object(node)) => Ok(node.clone()),
        Some(_) => Err(format!("{at} is not a JSON object")),
        None => Err(format!("no {at}")),
    }
}
