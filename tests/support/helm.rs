//! Helm as a test tool (`tests/peers/helm/`, a Go module of its own that
//! pins `helm.sh/helm/v3` by its `go.mod`/`go.sum` and names
//! `helm.sh/helm/v3/cmd/helm` as its tool): `$HELM_BIN` (`scripts/test`
//! builds it once for every test binary), else built here with `go build`
//! once per test process into the target directory (Go's build cache makes a
//! rebuild take a second; a cold one takes minutes).
//!
//! Include it with `#[path = "support/helm.rs"] mod helm;`.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

#[path = "go_build.rs"]
mod go_build;

use go_build::GoProgram;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Bound on `go build` (a cold module download and build included).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
/// The package built: Helm's own command line.
const PACKAGE: &str = "helm.sh/helm/v3/cmd/helm";

/// Helm, pinned by a Go module of its own.
static PROGRAM: GoProgram = GoProgram {
    what: "helm",
    env: "HELM_BIN",
    module: "tests/peers/helm",
    package: PACKAGE,
    output: "helm",
    strip: true,
    timeout: BUILD_TIMEOUT,
};

/// The helm binary: `$HELM_BIN`, else built here once.
pub fn binary(test: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PROGRAM.binary(test, &BUILT)
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
