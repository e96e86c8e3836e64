//! PyPI's `kubernetes-validate --strict`, the validator the shipped
//! Kubernetes documents (`deploy/kubernetes/`, the Helm chart's renderings)
//! must pass, run from the test venv's Python.
//!
//! Include it with `#[path = "support/kubernetes_validate.rs"] mod kubernetes_validate;`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the documents are validated against.
pub const KUBERNETES: &str = "1.33.0";

const INSTALL: &str =
    "run ./scripts/test, or `.venv/bin/pip install -r tests/support/requirements.txt`";

/// `kubernetes-validate --strict` on `files` with `python`: (success,
/// output). Panics, saying how to install it, if the module is missing.
pub fn validate(python: &Path, files: &[PathBuf]) -> (bool, String) {
    let output = Command::new(python)
        .args(["-m", "kubernetes_validate", "--strict", "-k", KUBERNETES])
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("No module named kubernetes_validate"),
        "kubernetes-validate is not installed in {}; {INSTALL}",
        python.display()
    );
    (output.status.success(), text)
}
