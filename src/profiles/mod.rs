//! Node profiles: named `envoy.config.core.v3.Node` templates that a GET
//! presents with `?profile=NAME` (its id from `?node=`), so a curl sees what
//! a real sidecar, gateway or Envoy of that shape sees.
//!
//! They come from the `[[profile]]` tables of the `--config` file and from
//! the `NAME.json` files of `--node-profiles DIR` (`dir`), are checked
//! strictly against the Node message with the gateway's proto3 JSON codec
//! (an unknown field, a wrong type: start-up fails, naming the profile and
//! where it came from), and are read once at start-up (the `--config` file
//! is not reloaded, so neither are they). A profile keeps the JSON it was
//! written as: the node a GET presents is then byte for byte the node a
//! POST of the same JSON carries, down to the session identity it keys.
//!
//! What a GET adds to a profile (`?metadata=`, `?locality=`,
//! `?user_agent=`) is `query`'s business.

mod dir;
pub(crate) mod query;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{valid_profile_name, Config};
use crate::xds::Codec;

/// The message every profile must parse as.
pub(crate) const NODE_MESSAGE: &str = "envoy.config.core.v3.Node";

/// Why the profiles could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// One profile is not a valid node.
    #[error("node profile {name:?} ({origin}): {reason}")]
    Invalid {
        name: String,
        origin: String,
        reason: String,
    },
    /// The `--node-profiles` directory (or a file in it) cannot be read.
    #[error("--node-profiles {}: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    /// Two profiles of one name.
    #[error("node profile {name:?} is declared twice: {first} and {second}")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
}

/// One profile: its node as written, and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Profile {
    /// `[[profile]] "NAME" in the --config file`, or the file's path.
    pub(crate) origin: String,
    /// The Node JSON object as written (field names as written).
    pub(crate) node: Map<String, Value>,
}

/// Every profile, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeProfiles {
    by_name: BTreeMap<String, Profile>,
}

impl NodeProfiles {
    /// The profiles `config` declares (its `[[profile]]` tables and its
    /// `--node-profiles` directory), each checked with `codec`.
    pub(crate) fn load(config: &Config, codec: &Codec) -> Result<NodeProfiles, ProfileError> {
        let mut profiles = NodeProfiles::default();
        for table in &config.profiles {
            let origin = format!("[[profile]] {:?} of the --config file", table.name);
            let node = table.node().map_err(|reason| ProfileError::Invalid {
                name: table.name.clone(),
                origin: origin.clone(),
                reason,
            })?;
            profiles.add(
                &table.name,
                Profile { origin, node },
                codec,
                config.max_node_bytes,
            )?;
        }
        if let Some(path) = &config.node_profiles {
            for (name, profile) in dir::read(path)? {
                profiles.add(&name, profile, codec, config.max_node_bytes)?;
            }
        }
        Ok(profiles)
    }

    /// Adds `profile` as `name` once it checks as a Node no bigger than
    /// `max_node_bytes` of JSON (`--max-node-bytes`: a bigger one would load,
    /// and then every GET of it would be refused).
    fn add(
        &mut self,
        name: &str,
        profile: Profile,
        codec: &Codec,
        max_node_bytes: usize,
    ) -> Result<(), ProfileError> {
        let invalid = |reason: String| ProfileError::Invalid {
            name: name.to_owned(),
            origin: profile.origin.clone(),
            reason,
        };
        if !valid_profile_name(name) {
            return Err(invalid(
                "a profile name is 1 to 128 letters, digits, '.', '_' or '-' (not starting with '.')"
                    .into(),
            ));
        }
        check_node(&profile.node, codec).map_err(invalid)?;
        let bytes = serde_json::to_vec(&profile.node).map_or(0, |json| json.len());
        if bytes > max_node_bytes {
            return Err(invalid(format!(
                "the node is {bytes} bytes of JSON, over --max-node-bytes ({max_node_bytes}): every GET of it would be refused"
            )));
        }
        if let Some(first) = self.by_name.get(name) {
            return Err(ProfileError::Duplicate {
                name: name.to_owned(),
                first: first.origin.clone(),
                second: profile.origin,
            });
        }
        self.by_name.insert(name.to_owned(), profile);
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Profile> {
        self.by_name.get(name)
    }

    /// Every profile's name, sorted.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }
}

/// Whether `node` parses as a Node with `codec`, strictly (no unknown field).
pub(crate) fn check_node(node: &Map<String, Value>, codec: &Codec) -> Result<(), String> {
    let json = serde_json::to_vec(node).map_err(|e| e.to_string())?;
    codec
        .parse_message(NODE_MESSAGE, &json, false)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
