//! A real headless browser, Debian's `chromium`, loading one page: the DOM
//! it built, and a screenshot of it. The browser runs in its own process
//! group ([`run_in_group`]) with a throwaway profile, no proxy and no
//! background networking; past [`LOAD_TIMEOUT`] the group (the browser and
//! its helpers) is killed and the test fails. Without
//! chromium the test fails saying how to install it.
//!
//! Include it with `#[path = "support/browser.rs"] mod browser;` (it needs
//! `mod process;` beside it).

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::process::run_in_group;

/// Bound on one page load (start, load, DOM, screenshot, exit).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// The browser: `$CHROMIUM` if set, else `chromium` on the `PATH`.
fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("chromium"))
}

/// Panics, saying how to install it, unless chromium runs.
pub fn require_chromium(test: &str) -> PathBuf {
    let bin = chromium();
    let ok = std::process::Command::new(&bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{test}: a headless browser is needed to check the admin status page: `{}` does not run; \
         install it (Debian: apt-get install -y chromium; .ci/run does it) or point $CHROMIUM at one",
        bin.display()
    );
    bin
}

/// Loads `url` in headless chromium, saves a screenshot to `screenshot`,
/// and returns the serialised DOM after load. `profile` is a directory for
/// the browser's throwaway profile.
pub async fn load(test: &str, url: &str, screenshot: &Path, profile: &Path) -> String {
    let bin = require_chromium(test);
    let mut command = tokio::process::Command::new(&bin);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-proxy-server",
            "--window-size=1280,1000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(url);
    let what = format!("{test}: chromium ({}) loading {url}", bin.display());
    let done = run_in_group(command, LOAD_TIMEOUT, &what).await;
    assert!(
        done.success && !done.stdout.is_empty(),
        "{what} failed ({}):\n{}",
        done.status,
        done.stderr
    );
    done.stdout
}

/// Where a test keeps its screenshot: `target/tmp/artifacts/<file>` (kept
/// after the run, for a person to look at).
pub fn artifact(file: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir.join(file)
}
