//! The README's test command is the whole of CI, and it sets up a fresh
//! machine itself.
//!
//! - `.ci/run` runs `./scripts/test` and nothing else (a CI that installed
//!   more than the README's command hid a red first run once: issue 36);
//! - the command the README gives is the one `.ci/run` runs;
//! - every Debian package a test names in its "apt-get install" hint, and
//!   every tool the README examples need, is one `scripts/test` installs.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The lines of a shell script that do something: no blank lines, no
/// comments, no shebang.
fn commands(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

#[test]
fn ci_runs_the_readme_command_and_nothing_else() {
    let ci = read(".ci/run");
    let allowed = ["set -euo pipefail", "cd \"$(dirname \"$0\")/..\""];
    let mut lines = commands(&ci);
    assert_eq!(
        lines.pop(),
        Some("exec ./scripts/test"),
        ".ci/run must end by running ./scripts/test:\n{ci}"
    );
    for line in lines {
        assert!(
            allowed.contains(&line),
            ".ci/run does more than run ./scripts/test (`{line}`): put set-up steps in \
             scripts/test, which a newcomer runs, so a fresh machine is green for them too"
        );
    }
    let readme = read("README.md");
    assert!(
        readme.lines().any(|line| line.trim() == "./scripts/test"),
        "README.md must give `./scripts/test` as the test command"
    );
}

/// The packages in `SYSTEM_PACKAGES=(...)` of `scripts/test`.
fn installed_packages(script: &str) -> BTreeSet<String> {
    let line = script
        .lines()
        .find_map(|line| line.strip_prefix("SYSTEM_PACKAGES=("))
        .expect("scripts/test declares SYSTEM_PACKAGES=(...)");
    let list = line.split(')').next().unwrap_or_default();
    list.split_whitespace().map(str::to_owned).collect()
}

/// Every `apt-get install [-y] NAME` a file names, NAME a literal Debian
/// package name (lowercase letters, digits, `+-.`; a `{placeholder}` or
/// anything else is no package).
fn install_hints(text: &str) -> Vec<String> {
    let is_package = |word: &str| {
        word.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
    };
    let mut hints = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("apt-get install") {
        rest = &rest[at + "apt-get install".len()..];
        let word = rest
            .split_whitespace()
            .find(|word| !word.starts_with('-'))
            .unwrap_or_default()
            .trim_end_matches(|c: char| ";,.)`'\"".contains(c));
        if is_package(word) {
            hints.push(word.to_owned());
        }
    }
    hints
}

#[test]
fn every_package_a_test_asks_for_is_installed_by_the_test_command() {
    let script = read("scripts/test");
    let installed = installed_packages(&script);
    assert!(
        installed.contains("chromium") && installed.contains("nginx"),
        "scripts/test installs {installed:?}"
    );
    let mut files = Vec::new();
    for dir in ["tests", "tests/support"] {
        for entry in std::fs::read_dir(Path::new(ROOT).join(dir)).expect("tests dir") {
            let path = entry.expect("dir entry").path();
            // This file names the phrase in its own text.
            if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("test_command.rs") {
                files.push(path);
            }
        }
    }
    let mut asked = BTreeSet::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("read test file");
        for name in install_hints(&text) {
            asked.insert((name, path.display().to_string()));
        }
    }
    // The README examples need these two (tests/readme_examples.rs names
    // them through a variable); bash is in every Debian base system.
    asked.insert(("curl".into(), "tests/readme_examples.rs".into()));
    assert!(asked.len() > 2, "found no install hints at all: {asked:?}");
    for (name, file) in &asked {
        assert!(
            installed.contains(name),
            "{file} tells a user to `apt-get install {name}`, but scripts/test does not install it \
             (SYSTEM_PACKAGES: {installed:?})"
        );
    }
}

#[test]
fn install_hints_are_read_as_package_names() {
    assert_eq!(
        install_hints("x (Debian: apt-get install -y chromium; .ci/run) or apt-get install curl"),
        ["chromium", "curl"]
    );
    assert!(install_hints("install it (Debian: apt-get install {tool})").is_empty());
    assert!(install_hints("a test names in its \"apt-get install\" hint").is_empty());
    assert_eq!(install_hints("(apt-get install curl)"), ["curl"]);
    assert_eq!(
        installed_packages("SYSTEM_PACKAGES=(a b-c)\n"),
        BTreeSet::from(["a".to_owned(), "b-c".to_owned()])
    );
}
