//! The config history's JSON-lines file (`--history-file`): every event the
//! history records (`observe::HistoryLine`: the node, its cluster and identity,
//! the type and the event as `/debug/history` shows it; not the content),
//! one JSON object per line, so the history outlives the process.
//!
//! The file rotates by size, the form log shippers (Vector, Fluent Bit,
//! Promtail) follow: a line that would take it past
//! `--history-file-max-bytes` first moves `PATH` to `PATH.1` (`.1` to `.2`,
//! up to [`KEEP`]; the oldest is dropped) and starts a new `PATH`. A line is
//! never split across files. A restarted gateway appends to `PATH`.
//!
//! Writing happens on a thread of its own, fed by a bounded queue: the push
//! path never waits for the disk. When the disk falls `QUEUE` lines
//! behind, further lines are dropped and counted (logged once per
//! `DROP_LOG_EVERY`); a failed write or rotation is logged and the writer
//! goes on with the next line.
//!
//! Under a policy of several principals, a principal's lines take at most
//! `--principal-share` of each file; its lines past that are dropped until the
//! file rotates, logged once per file, and its first line in a file always
//! goes in. One principal's churn can then at most hasten the rotations.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use tracing::warn;

use crate::log_escape::Escaped;
use crate::{HistoryLine, HistorySink};

/// Rotated files kept besides `PATH`: `PATH.1` (newest) to `PATH.3`.
pub const KEEP: usize = 3;
/// Lines queued for the writer at most.
const QUEUE: usize = 10_000;
/// A dropped line is logged once per this many.
const DROP_LOG_EVERY: u64 = 1_000;

/// Why the file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("--history-file {path}: {source}")]
pub struct HistoryFileError {
    path: PathBuf,
    source: std::io::Error,
}

/// The sink writing the history's JSON lines.
#[derive(Debug)]
pub struct HistoryFile {
    lines: SyncSender<HistoryLine>,
    dropped: AtomicU64,
}

impl HistoryFile {
    /// Opens `path` for appending (creating it) and starts the writer,
    /// rotating at `max_bytes`, a principal's lines taking at most
    /// `principal_share`% of each file.
    pub fn start(
        path: PathBuf,
        max_bytes: u64,
        principal_share: u8,
    ) -> Result<Arc<HistoryFile>, HistoryFileError> {
        let writer = Writer::open(path, max_bytes, principal_share)?;
        let (lines, queue) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("history-file".into())
            .spawn(move || writer.run(queue))
            .map_err(|source| HistoryFileError {
                path: PathBuf::from("(writer thread)"),
                source,
            })?;
        Ok(Arc::new(HistoryFile {
            lines,
            dropped: AtomicU64::new(0),
        }))
    }
}

impl HistorySink for HistoryFile {
    fn write(&self, line: HistoryLine) {
        if let Err(TrySendError::Full(_)) = self.lines.try_send(line) {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped % DROP_LOG_EVERY == 1 {
                warn!(
                    dropped,
                    "the history file's writer is behind: history lines dropped"
                );
            }
        }
    }
}

/// The writing end: the open file and how big it is.
struct Writer {
    path: PathBuf,
    max_bytes: u64,
    file: BufWriter<File>,
    size: u64,
    /// What one principal's lines may take of a file.
    share: u64,
    /// Bytes each principal wrote to the open file, and whether its lines
    /// past the share were logged yet.
    written: HashMap<Arc<str>, (u64, bool)>,
}

impl Writer {
    /// `path`, rotating at `max_bytes`, a principal's lines taking at most
    /// `percent`% of each file.
    fn open(path: PathBuf, max_bytes: u64, percent: u8) -> Result<Writer, HistoryFileError> {
        let (file, size) = append(&path).map_err(|source| HistoryFileError {
            path: path.clone(),
            source,
        })?;
        Ok(Writer {
            path,
            max_bytes,
            file: BufWriter::new(file),
            size,
            share: max_bytes.saturating_mul(u64::from(percent.min(100))) / 100,
            written: HashMap::new(),
        })
    }

    /// Writes every line sent, flushing whenever the queue runs dry; ends
    /// when the sink is dropped.
    fn run(mut self, queue: Receiver<HistoryLine>) {
        while let Ok(first) = queue.recv() {
            for line in std::iter::once(first).chain(queue.try_iter()) {
                // A struct of strings and numbers always serialises.
                let Ok(mut bytes) = serde_json::to_vec(&line) else {
                    continue;
                };
                bytes.push(b'\n');
                self.owned_line(line.owner, &bytes);
            }
            if let Err(e) = self.file.flush() {
                warn!(path = %Escaped(&self.path.display().to_string()), error = %e, "history file: flush failed");
            }
        }
    }

    /// Writes `line` of `owner` (rotating first when it would take the file
    /// past its bound), unless that principal's lines in this file already
    /// take its share.
    fn owned_line(&mut self, owner: Option<Arc<str>>, line: &[u8]) {
        let len = line.len() as u64;
        if self.size > 0 && self.size + len > self.max_bytes {
            if let Err(e) = self.rotate() {
                warn!(path = %Escaped(&self.path.display().to_string()), error = %e, "history file: rotation failed");
            }
        }
        if let Some(owner) = owner {
            let share = self.share;
            let (written, logged) = self.written.entry(owner.clone()).or_default();
            if *written > 0 && *written + len > share {
                if !*logged {
                    *logged = true;
                    warn!(
                        principal = %Escaped(&owner),
                        share_bytes = share,
                        "history file: this principal's lines take its share of the file \
                         (--principal-share); its further lines are dropped until the file rotates"
                    );
                }
                return;
            }
            *written += len;
        }
        match self.file.write_all(line) {
            Ok(()) => self.size += len,
            Err(e) => {
                warn!(path = %Escaped(&self.path.display().to_string()), error = %e, "history file: write failed")
            }
        }
    }

    /// `PATH.{KEEP-1}` to `PATH.{KEEP}` ... `PATH` to `PATH.1`, and a new `PATH`.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.written.clear();
        self.file.flush()?;
        for n in (1..KEEP).rev() {
            let from = rotated(&self.path, n);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, n + 1))?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        let (file, size) = append(&self.path)?;
        self.file = BufWriter::new(file);
        self.size = size;
        Ok(())
    }
}

/// `path` opened for appending (created if missing, readable by its owner
/// alone: it names every node and what it was served), and its
/// size.
fn append(path: &Path) -> std::io::Result<(File, u64)> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `PATH.n`.
pub fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn rotates_by_size_keeping_three_and_never_splits_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        let mut writer = Writer::open(path.clone(), 100, 100).unwrap();
        // 10 lines of 40 bytes: two fit in 100 bytes, so each file holds two.
        let line = |i: usize| format!("{{\"n\":{i:02},\"pad\":\"{}\"}}\n", "x".repeat(22));
        assert_eq!(line(0).len(), 40);
        for i in 0..10 {
            writer.owned_line(None, line(i).as_bytes());
        }
        writer.file.flush().unwrap();
        let n = |l: &String| l[5..7].parse::<usize>().unwrap();
        let numbers = |p: &Path| lines_of(p).iter().map(n).collect::<Vec<_>>();
        assert_eq!(numbers(&path), [8, 9]);
        assert_eq!(numbers(&rotated(&path, 1)), [6, 7]);
        assert_eq!(numbers(&rotated(&path, 2)), [4, 5]);
        assert_eq!(numbers(&rotated(&path, 3)), [2, 3]);
        assert!(!rotated(&path, 4).exists(), "only {KEEP} are kept");
        for file in [path.clone(), rotated(&path, 1)] {
            assert!(std::fs::metadata(&file).unwrap().len() <= 100);
        }
        // A restart appends, and rotates when the next line would not fit.
        drop(writer);
        let mut again = Writer::open(path.clone(), 100, 100).unwrap();
        assert_eq!(again.size, 80);
        again.owned_line(None, line(10).as_bytes());
        again.file.flush().unwrap();
        assert_eq!(numbers(&path), [10]);
        assert_eq!(numbers(&rotated(&path, 1)), [8, 9]);
    }

    /// The file (and each file rotation starts) is created 0600,
    /// whatever the umask lets through.
    #[cfg(unix)]
    #[test]
    fn files_are_created_for_their_owner_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = two_lines_past_ten_bytes(dir.path());
        for file in [path.clone(), rotated(&path, 1)] {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
        }
    }

    /// One principal's lines take at most its share
    /// of a file, so another's stay in the files however much the first
    /// writes; lines of no principal are not counted.
    #[test]
    fn a_principals_lines_take_at_most_its_share_of_each_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let mut writer = Writer::open(path.clone(), 110, 50).unwrap();
        let (quiet, flood): (Arc<str>, Arc<str>) = ("quiet".into(), "flood".into());
        // Lines of 22 bytes: five fit a file, a principal's share is 55.
        let line = |who: &str, i: usize| format!("{{\"{who:>5}\":{i:05},\"p\":1}}\n");
        assert_eq!(line("quiet", 0).len(), 22);
        writer.owned_line(Some(quiet.clone()), line("quiet", 0).as_bytes());
        for i in 0..40 {
            writer.owned_line(Some(flood.clone()), line("flood", i).as_bytes());
        }
        writer.owned_line(None, line(" none", 0).as_bytes());
        writer.file.flush().unwrap();
        let lines = lines_of(&path);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].contains("quiet"), "{lines:?}");
        assert_eq!(lines.iter().filter(|l| l.contains("flood")).count(), 2);
        assert!(
            !rotated(&path, 1).exists(),
            "the flood did not rotate the file"
        );
        // After a rotation the share starts again.
        writer.owned_line(None, format!("{}\n", "x".repeat(29)).as_bytes());
        writer.owned_line(Some(flood.clone()), line("flood", 99).as_bytes());
        writer.file.flush().unwrap();
        assert!(lines_of(&path).iter().any(|l| l.contains("00099")));
    }

    /// A file bounded at 10 bytes in `dir` after a line of 19 bytes and
    /// one of 8: the first rotated out, the second in the file.
    fn two_lines_past_ten_bytes(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("h.jsonl");
        let mut writer = Writer::open(path.clone(), 10, 100).unwrap();
        writer.owned_line(None, b"{\"a\":\"0123456789\"}\n");
        writer.owned_line(None, b"{\"b\":1}\n");
        writer.file.flush().unwrap();
        path
    }

    #[test]
    fn a_line_longer_than_the_bound_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = two_lines_past_ten_bytes(dir.path());
        assert_eq!(lines_of(&path), ["{\"b\":1}"]);
        assert_eq!(lines_of(&rotated(&path, 1)), ["{\"a\":\"0123456789\"}"]);
    }
}
