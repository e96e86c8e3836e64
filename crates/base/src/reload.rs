//! Files watched for changes: a fingerprint of a set of paths (size,
//! modification time and, on Unix, inode and change time, through
//! symlinks, so a Kubernetes secret's `..data` swap or a `cp -p`, `rsync -a`
//! or `touch -d` rewrite is seen), and a task that calls a reload function
//! whenever it changes. The set is either fixed (certificates, the auth
//! policy: [`watch`]) or listed again at each check (the snapshot
//! directory, where a file added or removed is a change: [`watch_listed`]).
//!
//! A reload that fails is the caller's to report; the watcher simply tries
//! again on the next change. Nothing here parses the files.

use std::path::{Path, PathBuf};
use std::sync::Weak;
use std::time::{Duration, SystemTime};

use crate::sync::AbortOnDrop;

/// How often watched files are checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// One file at one check; `None`: it could not be read.
type Stamp = Option<(u64, Option<SystemTime>, (u64, i64, i64))>;

/// What the files looked like at one check: each path, in the order
/// given, with its stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, Stamp)>);

impl Fingerprint {
    pub fn of(paths: &[PathBuf]) -> Fingerprint {
        Fingerprint(
            paths
                .iter()
                .map(|path| (path.clone(), stamp(path)))
                .collect(),
        )
    }
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok(), unix_identity(&meta)))
}

#[cfg(unix)]
fn unix_identity(meta: &std::fs::Metadata) -> (u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (meta.ino(), meta.ctime(), meta.ctime_nsec())
}

#[cfg(not(unix))]
fn unix_identity(_: &std::fs::Metadata) -> (u64, i64, i64) {
    (0, 0, 0)
}

/// The watching task; dropping it stops the watch.
pub type Watcher = AbortOnDrop;

/// Calls `reload(target)` whenever `paths` change (checked every
/// [`CHECK_EVERY`]), until `target` or the returned [`Watcher`] is dropped.
pub fn watch<T: Send + Sync + 'static>(
    paths: Vec<PathBuf>,
    target: Weak<T>,
    reload: fn(&T),
) -> Watcher {
    let seen = Fingerprint::of(&paths);
    watch_listed(seen, move || paths.clone(), CHECK_EVERY, target, reload)
}

/// Calls `reload(target)` whenever the files `list` gives at a check
/// (every `every`) differ from those `seen` last, the first time from
/// `seen` (taken by the caller before its first load, so that a change
/// during that load is not missed); until `target` or the returned
/// [`Watcher`] is dropped.
pub fn watch_listed<T: Send + Sync + 'static>(
    mut seen: Fingerprint,
    list: impl Fn() -> Vec<PathBuf> + Send + 'static,
    every: Duration,
    target: Weak<T>,
    reload: fn(&T),
) -> Watcher {
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(target) = target.upgrade() else {
                return;
            };
            let now = Fingerprint::of(&list());
            if now != seen {
                seen = now;
                reload(&target);
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_changes_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "one").unwrap();
        let paths = vec![path.clone(), dir.path().join("missing.pem")];
        let before = Fingerprint::of(&paths);
        assert_eq!(before, Fingerprint::of(&paths));
        // Same size, replaced by a new file (a new inode).
        let next = dir.path().join("next.pem");
        std::fs::write(&next, "two").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_ne!(before, Fingerprint::of(&paths));
    }
}
