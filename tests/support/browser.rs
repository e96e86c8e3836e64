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
         install it (Debian: apt-get install -y chromium; scripts/test does it) or point $CHROMIUM at one",
        bin.display()
    );
    bin
}

/// What a page load came to, read from what the browser wrote rather than
/// from its exit code or its log format, which differ between builds
/// (Chromium 156 exits 0 on a refused load and prints no DOM; older builds
/// showed the error page's DOM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageLoad {
    /// The page loaded: the serialised DOM after load.
    Rendered(String),
    /// The browser refused or failed the load: the `net::ERR_*` code it
    /// named (for example `net::ERR_INVALID_AUTH_CREDENTIALS` for a 401 it
    /// had credentials for and no one to ask for others).
    Refused(String),
}

impl PageLoad {
    /// Reads a finished browser run: the DOM on stdout (from its first
    /// `<!DOCTYPE` or `<html`, so that nothing a wrapper script prints
    /// before it counts), else the first `net::ERR_*` code on stderr.
    /// `None` when it wrote neither: the browser did not load anything.
    pub fn read(stdout: &str, stderr: &str) -> Option<PageLoad> {
        let lower = stdout.to_ascii_lowercase();
        let dom_at = ["<!doctype", "<html"]
            .iter()
            .filter_map(|tag| lower.find(tag))
            .min();
        if let Some(at) = dom_at {
            return Some(PageLoad::Rendered(stdout[at..].to_owned()));
        }
        let at = stderr.find("net::ERR_")?;
        let code: String = stderr[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        Some(PageLoad::Refused(code))
    }
}

/// Loads `url` in headless chromium, saving a screenshot to `screenshot`
/// when it renders. `profile` is a directory for the browser's throwaway
/// profile. Panics if the browser neither rendered a page nor named why it
/// did not (it crashed, or could not start), or ran past [`LOAD_TIMEOUT`].
pub async fn load(test: &str, url: &str, screenshot: &Path, profile: &Path) -> PageLoad {
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
    PageLoad::read(&done.stdout, &done.stderr).unwrap_or_else(|| {
        panic!(
            "{what}: neither a page nor a load error ({}):\nstdout:\n{}\nstderr:\n{}",
            done.status, done.stdout, done.stderr
        )
    })
}

/// Loads `url` as [`load`] does and returns the DOM; panics if the browser
/// refused the load.
pub async fn render(test: &str, url: &str, screenshot: &Path, profile: &Path) -> String {
    match load(test, url, screenshot, profile).await {
        PageLoad::Rendered(dom) => dom,
        PageLoad::Refused(error) => panic!("{test}: chromium refused {url}: {error}"),
    }
}

/// Where a test keeps its screenshot: `target/tmp/artifacts/<file>` (kept
/// after the run, for a person to look at).
pub fn artifact(file: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir.join(file)
}

#[cfg(test)]
mod tests {
    use super::PageLoad;

    #[test]
    fn a_dom_is_read_past_what_a_wrapper_prints_before_it() {
        let stdout =
            "bytes written to file /tmp/x.png\n<!DOCTYPE html><html><body>ok</body></html>\n";
        assert_eq!(
            PageLoad::read(stdout, "/usr/bin/chromium: 9: [: 1: unexpected operator\n"),
            Some(PageLoad::Rendered(
                "<!DOCTYPE html><html><body>ok</body></html>\n".to_owned()
            ))
        );
        assert_eq!(
            PageLoad::read("<html><head></head></html>", ""),
            Some(PageLoad::Rendered("<html><head></head></html>".to_owned()))
        );
    }

    #[test]
    fn a_refused_load_is_read_from_the_error_code_wherever_it_is_logged() {
        let stderr = "[1:1:1124/023003.187337:ERROR:components/headless/command_handler/\
                      headless_command_handler.cc:403] Page load failed: net::ERR_INVALID_AUTH_CREDENTIALS\n\
                      [1:2:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n";
        assert_eq!(
            PageLoad::read("", stderr),
            Some(PageLoad::Refused(
                "net::ERR_INVALID_AUTH_CREDENTIALS".to_owned()
            ))
        );
        assert_eq!(PageLoad::read("", "dbus noise only\n"), None);
    }
}
