//! The snapshot feeder (the default when no `--upstream` is given): loads
//! the snapshot directory (or the embedded demo), watches it, and feeds
//! sessions from it.
//!
//! The directory is re-read when a file is added or removed or any file's
//! size, modification time, inode or change time changes (checked every
//! [`WATCH_INTERVAL`] by `crate::reload`). A reload that fails keeps the
//! last good snapshot in service and records the problems (path, line,
//! reason) for the log and `/readyz`; nothing is half-applied. Each session
//! publishes the layered view of its node whenever a type's version changes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::snapshot::{embedded, snapshot_paths, Snapshot, SnapshotError};
use crate::cache::{Coverage, Intake, TypeState};
use crate::config::SessionKey;
use crate::log_escape::Escaped;
use crate::reload::{self, Fingerprint, Watcher};
use crate::store::{Command, Feeder, Publisher, SourceError};
use crate::sync::lock;
use crate::xds::ResourceType;

/// How often the directory is checked for changes.
const WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// Where the snapshot comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A directory, watched for changes.
    Dir(PathBuf),
    /// Files compiled into the binary, each as its path relative to the
    /// snapshot's root and its text (the demo, `examples/demo/`); never
    /// change.
    Embedded(&'static [(&'static str, &'static str)]),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Dir(dir) => write!(f, "snapshot directory {}", dir.display()),
            Origin::Embedded(_) => f.write_str("embedded demo snapshot (examples/demo)"),
        }
    }
}

/// Feeds sessions from a snapshot: a watched directory or the embedded demo.
#[derive(Debug)]
pub struct FileFeeder {
    source: Arc<FileSource>,
}

/// The loaded snapshot and the problems of the latest load.
#[derive(Debug)]
struct FileSource {
    origin: Origin,
    intake: Intake,
    /// Whether `nodes/<id>/` layers can be served: not when sessions are
    /// keyed by cluster (see [`FileSource::check_layers`]).
    per_node_layers: bool,
    /// `None` until a snapshot loads; never `None` again.
    snapshot: watch::Sender<Option<Arc<Snapshot>>>,
    problems: Mutex<Vec<String>>,
    /// The directory's watch (none for the embedded demo); it ends with
    /// the source.
    watcher: Mutex<Option<Watcher>>,
}

impl FileFeeder {
    /// Loads the snapshot now (a failed first load leaves the feeder empty
    /// and not ready, with its problems recorded) and, for a directory,
    /// watches it until the feeder is dropped.
    pub fn start(origin: Origin, intake: Intake, session_key: SessionKey) -> FileFeeder {
        let source = Arc::new(FileSource {
            origin,
            intake,
            per_node_layers: session_key == SessionKey::Node,
            snapshot: watch::Sender::new(None),
            problems: Mutex::default(),
            watcher: Mutex::default(),
        });
        let Origin::Dir(dir) = source.origin.clone() else {
            source.reload();
            return FileFeeder { source };
        };
        // Taken before the first load: a change during it is reloaded.
        let seen = Fingerprint::of(&snapshot_paths(&dir));
        source.reload();
        let watcher = reload::watch_listed(
            seen,
            move || snapshot_paths(&dir),
            WATCH_INTERVAL,
            Arc::downgrade(&source),
            FileSource::reload,
        );
        *lock(&source.watcher) = Some(watcher);
        FileFeeder { source }
    }
}

impl Feeder for FileFeeder {
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        tokio::spawn(run(self.source.clone(), session, commands))
    }

    fn unavailable(&self) -> Option<SourceError> {
        if self.source.is_loaded() {
            return None;
        }
        let problem = self.source.problems().into_iter().next();
        Some(SourceError::NotLoaded {
            origin: self.source.origin.to_string(),
            problem: problem.unwrap_or_else(|| "no files yet".to_owned()),
        })
    }

    fn answers_from(&self) -> &'static str {
        "the snapshot"
    }

    fn is_ready(&self) -> bool {
        self.source.is_loaded()
    }

    fn describe(&self) -> String {
        self.source.origin.to_string()
    }

    fn problems(&self) -> Vec<String> {
        self.source.problems()
    }
}

impl FileSource {
    /// Whether a snapshot has loaded (the first load may have failed).
    fn is_loaded(&self) -> bool {
        self.snapshot.borrow().is_some()
    }

    /// Problems of the latest load (empty when it succeeded).
    fn problems(&self) -> Vec<String> {
        lock(&self.problems).clone()
    }

    fn reload(&self) {
        let loaded = match &self.origin {
            Origin::Dir(dir) => Snapshot::load(dir, &self.intake),
            Origin::Embedded(files) => Snapshot::build(embedded(files), &self.intake),
        };
        let loaded = loaded.and_then(|snapshot| self.check_layers(snapshot));
        match loaded {
            Ok(snapshot) => {
                info!(origin = %self.origin, resources = snapshot.len(), "snapshot loaded");
                lock(&self.problems).clear();
                self.snapshot.send_replace(Some(Arc::new(snapshot)));
            }
            Err(errors) => {
                let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let outcome = if self.is_loaded() {
                    "snapshot not reloaded; the last good one stays in service"
                } else {
                    "snapshot not loaded; nothing is served until it is fixed"
                };
                for problem in &problems {
                    warn!(problem = %Escaped(problem), "{outcome}");
                }
                *lock(&self.problems) = problems;
            }
        }
    }

    /// With `--session-key cluster`, every node of a cluster shares one
    /// session, which publishes the view of the node that opened it: a
    /// per-node layer would then be served to the cluster's other nodes
    /// (their secrets included). Such a snapshot is refused, like any
    /// snapshot that does not load: the last good one stays in service.
    /// (Per-cluster layers are fine: a session's cluster is its key.)
    fn check_layers(&self, snapshot: Snapshot) -> Result<Snapshot, Vec<SnapshotError>> {
        let nodes = snapshot.node_layers();
        if self.per_node_layers || nodes.is_empty() {
            return Ok(snapshot);
        }
        let root = match &self.origin {
            Origin::Dir(dir) => dir.clone(),
            Origin::Embedded(_) => PathBuf::new(),
        };
        Err(nodes
            .into_iter()
            .map(|node| SnapshotError {
                path: root.join("nodes").join(node),
                line: None,
                reason: "a per-node layer cannot be served with --session-key cluster (every node \
                         of a cluster shares one session, so the cluster's other nodes would get \
                         this node's resources); use --session-key node, or move it to clusters/"
                    .into(),
            })
            .collect())
    }
}

/// Feeds `session` from `source` until the session closes.
async fn run(
    source: Arc<FileSource>,
    session: Publisher,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut snapshots = source.snapshot.subscribe();
    let mut published: BTreeMap<ResourceType, String> = BTreeMap::new();
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        if let Some(snapshot) = snapshot {
            publish_changed(&session, &snapshot, &mut published);
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            command = commands.recv() => match command {
                None => return,
                Some(Command::Resubscribe(_) | Command::Freshen { .. }) => {}
                Some(Command::Nack { kind, message, .. }) => {
                    warn!(%kind, message = %Escaped(&message), "suspected rejection (no upstream to NACK: snapshot source)");
                }
            },
        }
    }
}

/// Publishes, for every type the session's clients want, the node's view
/// when its version differs from the one published last.
fn publish_changed(
    session: &Publisher,
    snapshot: &Snapshot,
    published: &mut BTreeMap<ResourceType, String>,
) {
    for kind in ResourceType::all() {
        if session.subscription(kind).is_none() {
            continue;
        }
        let view = snapshot.view(kind, &session.node().id, &session.node().cluster);
        if published.get(&kind) == Some(&view.version) {
            continue;
        }
        published.insert(kind, view.version.clone());
        // The snapshot holds every resource: any name set is fully answered.
        let coverage = Coverage {
            wildcard: true,
            names: Default::default(),
        };
        session.publish(TypeState::new(
            kind,
            view.version,
            String::new(),
            view.resources,
            coverage,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::Codec;

    /// A 503 of a snapshot gateway never blames an upstream it does not have.
    #[tokio::test]
    async fn no_answer_names_the_snapshot() {
        let feeder = FileFeeder::start(
            Origin::Embedded(&[]),
            Intake::new(Codec::embedded()),
            SessionKey::Node,
        );
        let err = SourceError::NoAnswer {
            from: feeder.answers_from(),
            kind: ResourceType::Clusters,
            within: Duration::from_secs(5),
        };
        let message = err.to_string();
        assert!(
            message.starts_with("the snapshot has not answered"),
            "{message}"
        );
        assert!(!message.contains("upstream"), "{message}");
    }
}
