//! Helm as a test tool (`tests/peers/helm/`, a Go module of its own that
//! pins `helm.sh/helm/v3` by its `go.mod`/`go.sum` and names
//! `helm.sh/helm/v3/cmd/helm` as its tool): `$HELM_BIN` (`scripts/test`
//! builds it once for every test binary), else built here with `go build`
//! once per test process into the target directory (Go's build cache makes a
//! rebuild take a second; a cold one takes minutes).
//!
//! Include it with `#[path = "support/helm.rs"] mod helm;`.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bound on `go build` (a cold module download and build included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// The package built: Helm's own command line.
const PACKAGE: &str = "helm.sh/helm/v3/cmd/helm";

/// The module directory that pins Helm.
fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/helm")
}

/// The helm binary: `$HELM_BIN`, else built here once.
pub fn binary(test: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("HELM_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(build)
        .clone()
        .unwrap_or_else(|e| panic!("{test}: {e}"))
}

/// `go build` of Helm into the target directory: to a name of this
/// process's own, then renamed into place (test binaries build in parallel).
fn build() -> Result<PathBuf, String> {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("peers");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let target = out_dir.join("helm");
    let partial = out_dir.join(format!("helm.{}", std::process::id()));
    let mut child = Command::new("go")
        .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
        .arg(&partial)
        .arg(PACKAGE)
        .current_dir(module_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "helm is built from tests/peers/helm with a Go toolchain, 1.26 or newer, on the \
                 PATH (`go` does not run: {e}); install it (scripts/test does) or set HELM_BIN \
                 to a helm v3 binary"
            )
        })?;
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "go build of helm ran past {BUILD_TIMEOUT:?}; killed"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!(
            "go build {PACKAGE} in {} failed ({status}):\n{}",
            module_dir().display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::rename(&partial, &target).map_err(|e| format!("{}: {e}", target.display()))?;
    Ok(target)
}

/// Runs `helm args`: (success, stdout, stderr). Helm's own state (cache,
/// config, data) goes to a fresh directory, so the machine's is not read.
pub fn run(test: &str, args: &[&str]) -> (bool, String, String) {
    let bin = binary(test);
    let home = tempfile::tempdir().expect("a temp dir for helm's state");
    let output = Command::new(&bin)
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{test}: run {}: {e}", bin.display()));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
