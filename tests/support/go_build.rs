//! A Go program the tests run (the peers under `tests/peers/`, each a Go
//! module pinned by its `go.mod`/`go.sum`): the binary an environment
//! variable names (`scripts/test` builds each once), else `go build` of it
//! into the target directory, once per test process. The build writes to a
//! name of this process's own and renames it into place (test binaries
//! build in parallel); its stderr is drained on a thread of its own (a cold
//! build can write more than a pipe holds); past its bound it is killed.
//!
//! Included by the peers' support modules (`#[path = "go_build.rs"]`).

#![allow(dead_code)] // each includer uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One Go program of the tests.
pub struct GoProgram {
    /// What it is, for messages ("the Istio test peer").
    pub what: &'static str,
    /// The variable naming a binary built beforehand.
    pub env: &'static str,
    /// Its module directory, under the repository.
    pub module: &'static str,
    /// The package to build (`.`: the module's own main).
    pub package: &'static str,
    /// The binary's name in the target directory.
    pub output: &'static str,
    /// Whether to strip it (`-ldflags=-s -w`).
    pub strip: bool,
    /// Bound on the build (a cold module download and build included).
    pub timeout: Duration,
}

impl GoProgram {
    /// The binary: `$env`, else built here once (`built` holds the result
    /// for the process).
    pub fn binary(
        &'static self,
        test: &str,
        built: &'static OnceLock<Result<PathBuf, String>>,
    ) -> PathBuf {
        if let Some(path) = std::env::var_os(self.env).filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        built
            .get_or_init(|| self.build())
            .clone()
            .unwrap_or_else(|e| panic!("{test}: {e}"))
    }

    fn module_dir(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(self.module)
    }

    fn build(&self) -> Result<PathBuf, String> {
        let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("peers");
        std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
        let target = out_dir.join(self.output);
        let partial = out_dir.join(format!("{}.{}", self.output, std::process::id()));
        let mut command = Command::new("go");
        command.args(["build", "-trimpath"]);
        if self.strip {
            command.arg("-ldflags=-s -w");
        }
        let mut child = command
            .arg("-o")
            .arg(&partial)
            .arg(self.package)
            .current_dir(self.module_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "{} is built from {} with a Go toolchain, 1.26 or newer (the pins of its go.mod \
                     need it), on the PATH (`go` does not run: {e}); install it (scripts/test does) \
                     or set {} to a built binary",
                    self.what, self.module, self.env
                )
            })?;
        let stderr = child.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = std::io::Read::read_to_string(&mut s, &mut text);
                text
            })
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "go build of {} ran past {:?}; killed",
                    self.what, self.timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        if !status.success() {
            return Err(format!(
                "go build {} in {} failed ({status}):\n{stderr}",
                self.package,
                self.module_dir().display()
            ));
        }
        std::fs::rename(&partial, &target).map_err(|e| format!("{}: {e}", target.display()))?;
        Ok(target)
    }
}
