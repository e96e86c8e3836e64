//! The `cargo fuzz` corpora, replayed in the test command on stable Rust:
//! every file of `fuzz/corpus/<target>/` through the target's function
//! ([`super::TARGETS`]), which must not panic, and some of which must be
//! accepted (a corpus that only reaches early rejections fuzzes nothing).
//! An input a fuzzer once failed on stays in its corpus, so this is also
//! every finding's regression test. And each target of the list has its
//! `fuzz/fuzz_targets/<name>.rs`, calling that function and no other.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use super::{Target, TARGETS};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/corpus/<name>/`, sorted; panics if there are none.
fn corpus(name: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("corpus").join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    files
}

/// Runs every corpus file of `name`; fails naming each file that panicked.
fn replay(name: &str) {
    let target: &Target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no target {name}"));
    let files = corpus(name);
    let mut accepted = 0;
    let mut failed = Vec::new();
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        match catch_unwind(AssertUnwindSafe(|| (target.run)(&data))) {
            Ok(true) => accepted += 1,
            Ok(false) => {}
            Err(_) => failed.push(path.display().to_string()),
        }
    }
    eprintln!("{name}: {} corpus files, {accepted} accepted", files.len());
    assert!(failed.is_empty(), "{name}: these inputs fail: {failed:#?}");
    assert!(
        accepted > 0,
        "{name}: no corpus file gets past the parser: the target reaches nothing"
    );
}

#[test]
fn replay_upstream_response() {
    replay("upstream_response");
}

#[test]
fn replay_discovery_post() {
    replay("discovery_post");
}

#[test]
fn replay_discovery_get() {
    replay("discovery_get");
}

#[test]
fn replay_json_to_proto() {
    replay("json_to_proto");
}

#[test]
fn replay_proto_to_json() {
    replay("proto_to_json");
}

#[test]
fn replay_rewrite() {
    replay("rewrite");
}

#[test]
fn replay_xdstp() {
    replay("xdstp");
}

#[test]
fn replay_auth_policy() {
    replay("auth_policy");
}

#[test]
fn replay_config_toml() {
    replay("config_toml");
}

#[test]
fn replay_snapshot() {
    replay("snapshot");
}

/// Each target of the list is a `cargo fuzz` target calling its function,
/// and `fuzz/Cargo.toml` declares exactly those.
#[test]
fn every_target_is_a_cargo_fuzz_target() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let declared: Vec<&str> = manifest
        .lines()
        .filter_map(|line| line.strip_prefix("path = \"fuzz_targets/"))
        .filter_map(|rest| rest.strip_suffix(".rs\""))
        .collect();
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(declared, names, "fuzz/Cargo.toml's targets, in order");
    for name in names {
        let path = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let calls: Vec<&str> = source
            .match_indices("xds_gateway::fuzz::")
            .map(|(at, prefix)| {
                let rest = &source[at + prefix.len()..];
                &rest[..rest.find('(').unwrap_or(rest.len())]
            })
            .collect();
        assert_eq!(calls, [name], "{} calls", path.display());
    }
}
