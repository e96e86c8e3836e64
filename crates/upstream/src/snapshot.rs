//! Snapshot directories: Envoy resources in YAML or JSON files, loaded and
//! validated as a whole.
//!
//! Layout: files at the top of the directory are the shared base;
//! `clusters/<node cluster>/` and `nodes/<node id>/` hold per-cluster and
//! per-node files layered over it (node over cluster over base, by type and
//! name). A file holds one resource (`{"@type": ..., ...}`), a list of them,
//! an object with a `resources` list, or several YAML documents.
//!
//! The files come from a directory or, for the bundled demo, from the
//! binary itself (`embedded`).
//!
//! A resource's type comes from its `@type`, its name from its name field;
//! a type's version is a digest of its (name, content digest) pairs, so the
//! same files give the same versions on every replica and every restart.
//! Loading is all or nothing: one bad file fails the load with its path and
//! reason (and line, where the parser knows it).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use crate::cache::{Intake, Resource};
use crate::xds::ResourceType;

/// One problem with one file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub(super) struct SnapshotError {
    pub(super) path: PathBuf,
    pub(super) line: Option<usize>,
    pub(super) reason: String,
}

type Layer = BTreeMap<(ResourceType, String), Arc<Resource>>;

/// A loaded, validated snapshot directory.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    base: Layer,
    clusters: HashMap<String, Layer>,
    nodes: HashMap<String, Layer>,
}

/// What one node sees of one type.
#[derive(Debug, Clone)]
pub(super) struct View {
    pub(super) version: String,
    pub(super) resources: BTreeMap<String, Arc<Resource>>,
}

/// Which layer a file belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum LayerId {
    Base,
    Cluster(String),
    Node(String),
}

/// One snapshot file's text, from a directory or embedded in the binary.
#[derive(Debug, Clone)]
pub(super) struct SourceFile {
    pub(super) layer: LayerId,
    /// For messages: the file's path (or its embedded name).
    pub(super) path: PathBuf,
    pub(super) text: String,
}

impl SourceFile {
    /// The layer of a path relative to the snapshot root:
    /// `x.yaml`, `clusters/C/x.yaml`, `nodes/N/x.yaml`; anything deeper or
    /// elsewhere is not a snapshot file.
    pub(super) fn layer_of(relative: &Path) -> Option<LayerId> {
        let parts: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
        match parts.as_slice() {
            [_file] => Some(LayerId::Base),
            ["clusters", cluster, _file] => Some(LayerId::Cluster((*cluster).to_owned())),
            ["nodes", node, _file] => Some(LayerId::Node((*node).to_owned())),
            _ => None,
        }
    }
}

/// Paths of every snapshot file under `dir` (base, `clusters/*/`,
/// `nodes/*/`), in path order.
pub(super) fn snapshot_paths(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = sorted_entries(dir);
    for sub in ["clusters", "nodes"] {
        for d in sorted_entries(&dir.join(sub)).iter().filter(|p| p.is_dir()) {
            paths.extend(sorted_entries(d));
        }
    }
    paths.retain(|p| p.is_file() && is_snapshot_file(p));
    paths
}

/// Every snapshot file under `dir`, in path order.
pub(super) fn read_dir(dir: &Path) -> Result<Vec<SourceFile>, Vec<SnapshotError>> {
    // An unreadable root is a problem, not an empty snapshot: serving nothing
    // would make every Envoy drop its listeners and clusters.
    if let Err(e) = std::fs::read_dir(dir) {
        return Err(vec![SnapshotError {
            path: dir.to_owned(),
            line: None,
            reason: format!("cannot read the snapshot directory: {e}"),
        }]);
    }
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for path in snapshot_paths(dir) {
        let Some(layer) = path.strip_prefix(dir).ok().and_then(SourceFile::layer_of) else {
            continue;
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push(SourceFile { layer, path, text }),
            Err(e) => errors.push(SnapshotError {
                path,
                line: None,
                reason: e.to_string(),
            }),
        }
    }
    errors.is_empty().then_some(files).ok_or(errors)
}

impl Snapshot {
    pub(super) fn load(dir: &Path, intake: &Intake) -> Result<Snapshot, Vec<SnapshotError>> {
        Snapshot::build(read_dir(dir)?, intake)
    }

    /// Validates and layers `files`; every bad file is reported.
    pub(super) fn build(
        files: Vec<SourceFile>,
        intake: &Intake,
    ) -> Result<Snapshot, Vec<SnapshotError>> {
        let mut snapshot = Snapshot::default();
        let mut errors = Vec::new();
        for file in files {
            let layer = match &file.layer {
                LayerId::Base => &mut snapshot.base,
                LayerId::Cluster(c) => snapshot.clusters.entry(c.clone()).or_default(),
                LayerId::Node(n) => snapshot.nodes.entry(n.clone()).or_default(),
            };
            if let Err(err) = load_file(&file, intake, layer) {
                errors.push(err);
            }
        }
        errors.is_empty().then_some(snapshot).ok_or(errors)
    }

    /// The resources of `kind` node `node_id` of `cluster` sees, and their version.
    pub(super) fn view(&self, kind: ResourceType, node_id: &str, cluster: &str) -> View {
        let mut resources = BTreeMap::new();
        let layers = [
            Some(&self.base),
            self.clusters.get(cluster),
            self.nodes.get(node_id),
        ];
        for layer in layers.into_iter().flatten() {
            let start = (kind, String::new());
            for ((k, name), resource) in layer.range(start..) {
                if *k != kind {
                    break;
                }
                resources.insert(name.clone(), resource.clone());
            }
        }
        let mut hasher = Sha256::new();
        for (name, resource) in &resources {
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(resource.digest);
        }
        let version = hex::encode(&hasher.finalize()[..8]);
        View { version, resources }
    }

    /// The node ids with a per-node layer (`nodes/<id>/`), sorted.
    pub(super) fn node_layers(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.nodes.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// How many resources the snapshot holds, all layers together.
    pub(super) fn len(&self) -> usize {
        let layers = self.clusters.values().chain(self.nodes.values());
        self.base.len() + layers.map(BTreeMap::len).sum::<usize>()
    }
}

/// serde_json positions point into the JSON the loader builds from the
/// file, not into the file: drop them.
fn without_json_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) if message[i..].contains(" column ") => message[..i].to_owned(),
        _ => message.to_owned(),
    }
}

/// Files the loader reads: `.yaml`, `.yml`, `.json`.
fn is_snapshot_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Directory entries in name order (missing directory: none).
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.sort();
    paths
}

fn load_file(file: &SourceFile, intake: &Intake, layer: &mut Layer) -> Result<(), SnapshotError> {
    let error = |line: Option<usize>, reason: String| SnapshotError {
        path: file.path.clone(),
        line,
        reason,
    };
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&file.text) {
        use serde::Deserialize;
        let value = serde_json::Value::deserialize(document)
            .map_err(|e| error(e.location().map(|l| l.line()), e.to_string()))?;
        documents.push(value);
    }
    let mut index = 0;
    for document in documents {
        for resource in resources_of(document) {
            index += 1;
            let (kind, resource) = decode(intake, &resource)
                .map_err(|reason| error(None, format!("resource #{index}: {reason}")))?;
            let key = (kind, resource.name.clone());
            if layer.insert(key, resource).is_some() {
                return Err(error(
                    None,
                    format!("resource #{index}: a {kind} resource of this name is defined twice in this layer"),
                ));
            }
        }
    }
    Ok(())
}

/// A document's resources: one, a list, or a `resources` list; null is none.
fn resources_of(document: serde_json::Value) -> Vec<serde_json::Value> {
    match document {
        serde_json::Value::Null => Vec::new(),
        serde_json::Value::Array(items) => items,
        serde_json::Value::Object(mut map)
            if !map.contains_key("@type") && map.contains_key("resources") =>
        {
            match map.remove("resources") {
                Some(serde_json::Value::Array(items)) => items,
                Some(other) => vec![other],
                None => Vec::new(),
            }
        }
        other => vec![other],
    }
}

fn decode(
    intake: &Intake,
    value: &serde_json::Value,
) -> Result<(ResourceType, Arc<Resource>), String> {
    let type_url = value
        .get("@type")
        .and_then(|t| t.as_str())
        .ok_or("has no \"@type\" (e.g. \"type.googleapis.com/envoy.config.cluster.v3.Cluster\")")?;
    let kind = ResourceType::from_type_url(type_url)
        .filter(|kind| !kind.delta_only())
        .ok_or_else(|| {
            format!("{type_url} is not a type a snapshot serves (listeners, routes, scoped routes, clusters, endpoints, secrets, runtime, extension configs; virtual hosts and LEDS endpoints come from a delta upstream only)")
        })?;
    let json = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    let any = intake
        .codec()
        .parse_any(&json)
        .map_err(|e| without_json_position(&e.to_string()))?;
    let resource = intake
        .resource(kind, any.value.into())
        .map_err(|e| e.to_string())?;
    if resource.name.is_empty() {
        return Err(format!("{type_url} resource has no name"));
    }
    Ok((kind, resource))
}

/// A snapshot compiled into the binary (the bundled `examples/demo/`):
/// each file as its path relative to the snapshot's root and its text.
pub(super) fn embedded(files: &[(&str, &str)]) -> Vec<SourceFile> {
    files
        .iter()
        .filter_map(|(rel, text)| {
            Some(SourceFile {
                layer: SourceFile::layer_of(Path::new(rel))?,
                path: PathBuf::from("examples/demo").join(rel),
                text: (*text).to_owned(),
            })
        })
        .collect()
}

#[cfg(any(test, feature = "fuzzing"))]
pub(super) mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::Codec;

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    const CLUSTER_A: &str = "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: a\nconnect_timeout: 1s\n";

    #[test]
    fn layers_and_deterministic_versions() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "base.yaml", CLUSTER_A);
        write(
            dir.path(),
            "more.json",
            r#"[{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"b"}]"#,
        );
        write(
            dir.path(),
            "nodes/n1/override.yaml",
            "resources:\n- '@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n  connect_timeout: 9s\n",
        );
        let r = Intake::new(Codec::embedded());
        let s = Snapshot::load(dir.path(), &r).unwrap();
        let plain = s.view(ResourceType::Clusters, "other", "");
        let n1 = s.view(ResourceType::Clusters, "n1", "");
        assert_eq!(plain.resources.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_ne!(plain.version, n1.version);
        assert!(std::str::from_utf8(&n1.resources["a"].json)
            .unwrap()
            .contains("9s"));
        let again = Snapshot::load(dir.path(), &r).unwrap();
        assert_eq!(
            again.view(ResourceType::Clusters, "n1", "").version,
            n1.version
        );
        assert!(s
            .view(ResourceType::Listeners, "n1", "")
            .resources
            .is_empty());
    }

    /// Found by the `snapshot` fuzz target: protobuf maps (a Struct, a
    /// cluster's metadata, a nested Any's) were encoded in hash order, so the
    /// same files gave other bytes, digests and versions on every load (every
    /// replica, restart and reload). Regression: fuzz/corpus/snapshot/seed-corpus-runtime.
    #[test]
    fn maps_load_to_the_same_version_every_time() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "maps.yaml",
            "'@type': type.googleapis.com/envoy.service.runtime.v3.Runtime\nname: rtds\nlayer: {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: {h: 7, i: 8, j: 9}}\n\
             ---\n'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\n\
             metadata: {filter_metadata: {a: {x: 1}, b: {y: 2}, c: {z: 3}, d: {w: 4}}}\n\
             typed_extension_protocol_options:\n  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n    \
             '@type': type.googleapis.com/google.protobuf.Struct\n    value: {k1: 1, k2: 2, k3: 3, k4: 4, k5: 5}\n",
        );
        let intake = Intake::new(Codec::embedded());
        let versions = |snapshot: &Snapshot| {
            [ResourceType::Runtime, ResourceType::Clusters]
                .map(|kind| snapshot.view(kind, "n", "c").version)
        };
        let first = Snapshot::load(dir.path(), &intake).unwrap();
        assert_eq!(first.len(), 2);
        for _ in 0..8 {
            let again = Snapshot::load(dir.path(), &intake).unwrap();
            assert_eq!(versions(&again), versions(&first));
        }
    }

    #[test]
    fn a_missing_directory_is_a_problem_not_an_empty_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let errors = Snapshot::load(&missing, &Intake::new(Codec::embedded())).unwrap_err();
        assert!(errors[0].to_string().contains("cannot read"), "{errors:?}");
        assert_eq!(
            without_json_position("bad field at line 1 column 112"),
            "bad field"
        );
        assert_eq!(without_json_position("fine"), "fine");
    }

    /// The demo's files, read as the binary's build script embeds them,
    /// make a snapshot of every type.
    #[test]
    fn an_embedded_snapshot_loads() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/demo");
        let read: Vec<(String, String)> = snapshot_paths(&root)
            .into_iter()
            .map(|path| {
                let rel = path.strip_prefix(&root).unwrap().to_string_lossy();
                (rel.into_owned(), std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        let pairs: Vec<(&str, &str)> = read.iter().map(|(r, t)| (&r[..], &t[..])).collect();
        let files = embedded(&pairs);
        assert!(!files.is_empty());
        let s = Snapshot::build(files, &Intake::new(Codec::embedded())).unwrap();
        for kind in [
            ResourceType::Listeners,
            ResourceType::Routes,
            ResourceType::Clusters,
            ResourceType::Endpoints,
        ] {
            assert!(!s.view(kind, "any", "any").resources.is_empty(), "{kind}");
        }
    }

    #[test]
    fn bad_files_are_reported_with_path_and_line() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "ok.yaml", CLUSTER_A);
        write(dir.path(), "broken.yaml", "name: [unclosed\n");
        write(
            dir.path(),
            "unknown.yaml",
            "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nno_such_field: 1\n",
        );
        let errors = Snapshot::load(dir.path(), &Intake::new(Codec::embedded())).unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 2, "{text:?}");
        assert!(text[0].contains("broken.yaml:"), "{text:?}");
        assert!(
            text[1].contains("unknown.yaml") && text[1].contains("no_such_field"),
            "{text:?}"
        );
    }

    #[test]
    fn a_resource_envoy_would_reject_is_a_problem_naming_the_rule() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "bad.yaml",
            "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster\nname: c\nconnect_timeout: -1s\n",
        );
        let errors = Snapshot::load(dir.path(), &Intake::new(Codec::embedded())).unwrap_err();
        let text = errors[0].to_string();
        assert!(
            text.contains("bad.yaml")
                && text.contains("connect_timeout")
                && text.contains("duration.gt"),
            "{text}"
        );
        // Not checked when validation is off.
        let intake = Intake::new(Codec::embedded()).validating(false);
        assert!(Snapshot::load(dir.path(), &intake).is_ok());
    }
}
