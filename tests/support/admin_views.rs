//! The admin listener's real answers checked against `openapi/admin.yaml`
//! by `admin_schema.py` (openapi-schema-validator, OpenAPI 3.0 dialect,
//! formats checked): status, content type and body of each path asked.
//!
//! Include it with `#[path = "support/admin_views.rs"] mod admin_views;`
//! (it needs `mod process;` from `support/process.rs` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::process::{http_exchange, require_python, HTTP_GET_TIMEOUT};

/// Bound on the validator's run.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// The admin listener's OpenAPI document.
pub fn document() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/admin.yaml")
}

/// GETs every one of `paths` on the admin listener at `admin` (with
/// `headers`), checks each answer against the document, and returns the
/// answers (status and body) in order.
pub async fn check_against_openapi(
    test: &str,
    admin: u16,
    paths: &[&str],
    headers: &[(&str, &str)],
) -> Vec<(u16, String)> {
    let mut answers = Vec::new();
    let mut replies = Vec::new();
    for path in paths {
        let exchange = http_exchange(admin, http::Method::GET, path, headers, bytes::Bytes::new());
        let (status, headers, body) = tokio::time::timeout(HTTP_GET_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| panic!("{test}: GET {path} on the admin listener timed out"))
            .unwrap_or_else(|e| panic!("{test}: GET {path} on the admin listener: {e}"));
        let body = String::from_utf8_lossy(&body).into_owned();
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        answers.push(json!({
            "path": path,
            "status": status,
            "content_type": content_type,
            "body": body,
        }));
        replies.push((status, body));
    }
    let report = validate(test, &Value::Array(answers)).await;
    eprintln!("{test}: admin answers against openapi/admin.yaml:\n{report}");
    replies
}

/// Runs `admin_schema.py` on `answers`; panics with its report unless every
/// answer matches. Returns the report.
pub async fn validate(test: &str, answers: &Value) -> String {
    let python = require_python(test);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/admin_schema.py");
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(document())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: run {}: {e}", python.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(answers.to_string().as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{test}: write to admin_schema.py: {e}"));
    drop(stdin);
    let output = tokio::time::timeout(CHECK_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("{test}: admin_schema.py did not finish within {CHECK_TIMEOUT:?}")
        })
        .unwrap_or_else(|e| panic!("{test}: admin_schema.py: {e}"));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !report.contains("No module named"),
        "{test}: {} lacks a module admin_schema.py needs: install the pinned test tools with \
         `{} -m pip install -r tests/support/requirements.txt` (./scripts/test does it)\n{report}",
        python.display(),
        python.display()
    );
    assert!(
        output.status.success(),
        "{test}: the admin listener's answers do not match openapi/admin.yaml:\n{report}"
    );
    report
}
