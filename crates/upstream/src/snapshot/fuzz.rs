//! The `snapshot` fuzz target (the gateway's `xds_gateway::fuzz` lists
//! them all): snapshot files (YAML or JSON, in any layer) loaded as a
//! whole, as the snapshot source loads a directory, without the directory:
//! the input is the files' text, split by `#! <path relative to the
//! snapshot root>` lines (text before the first is `base.yaml`; a `#!` line
//! is a YAML comment, so each part reads as it would alone). Paths the
//! loader would not read (deeper, or not `.yaml`/`.yml`/`.json`) are left
//! out, as it leaves them.
//!
//! Properties, each a panic when broken: nothing panics; the same files
//! load again with the same resources and the same versions in every view
//! (replicas and restarts agree); a view holds only named resources, each
//! under its own name.

use std::sync::OnceLock;

use super::*;
use crate::xds::Codec;

/// How many node ids and clusters the views are asked for, at most (the
/// layers the input names, then one it does not).
const VIEWS_PER_AXIS: usize = 4;

/// Loads the files of `data`; a snapshot that loads is checked.
/// Accepted: loaded.
pub fn snapshot(data: &[u8]) -> bool {
    static RENDERER: OnceLock<Intake> = OnceLock::new();
    let intake = RENDERER.get_or_init(|| Intake::new(Codec::embedded()));
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let files = files_of(text);
    let Ok(snapshot) = Snapshot::build(files.clone(), intake) else {
        return false;
    };
    let again = Snapshot::build(files, intake)
        .unwrap_or_else(|e| panic!("the same files do not load again: {e:?}"));
    assert_eq!(snapshot.len(), again.len());

    let mut nodes: Vec<&str> = snapshot.node_layers();
    nodes.truncate(VIEWS_PER_AXIS - 1);
    nodes.push("fuzz-no-such-node");
    let mut clusters: Vec<&str> = snapshot.clusters.keys().map(String::as_str).collect();
    clusters.sort_unstable();
    clusters.truncate(VIEWS_PER_AXIS - 1);
    clusters.push("");
    for kind in ResourceType::BUILT_IN {
        for node in &nodes {
            for cluster in &clusters {
                let view = snapshot.view(kind, node, cluster);
                let view_again = again.view(kind, node, cluster);
                assert_eq!(
                    view.version, view_again.version,
                    "{kind} of {node}/{cluster}"
                );
                assert_eq!(
                    view.resources.keys().collect::<Vec<_>>(),
                    view_again.resources.keys().collect::<Vec<_>>()
                );
                for (name, resource) in &view.resources {
                    assert!(!name.is_empty(), "a {kind} resource without a name");
                    assert_eq!(name, &resource.name, "a {kind} resource under another name");
                }
            }
        }
    }
    true
}

/// The snapshot files of the input, in input order.
fn files_of(text: &str) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut path = "base.yaml";
    let mut start = 0;
    let mut push = |path: &str, part: &str| {
        let relative = Path::new(path);
        if !is_snapshot_file(relative) {
            return;
        }
        if let Some(layer) = SourceFile::layer_of(relative) {
            files.push(SourceFile {
                layer,
                path: relative.to_owned(),
                text: part.to_owned(),
            });
        }
    };
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(next) = line.strip_prefix("#! ") {
            push(path, &text[start..offset]);
            path = next.trim_end_matches(['\n', '\r']);
            start = offset + line.len();
        }
        offset += line.len();
    }
    push(path, &text[start..]);
    files
}
