//! Files written whole for the gateway's watchers (a snapshot directory,
//! rotated certificates): through a rename, as a deploying or rotating tool
//! writes them, so a watcher never reads half a file.
//!
//! Include it with `#[path = "support/files.rs"] mod files;`.

use std::path::Path;

/// Writes `text` to `path` through a rename from a file beside it.
pub fn write_whole(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path)
        .unwrap_or_else(|e| panic!("rename {} into place: {e}", path.display()));
}
