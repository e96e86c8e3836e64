//! Test builds only (`test-support`): what the randomised tests of every
//! crate share. The random generator of a randomised test comes from a
//! fresh seed each run, printed so that a failure can be replayed
//! (`<VAR>=<seed> cargo test ...`): luck is not evidence, and no randomised
//! test uses a fixed seed. The corpus is the repository's real inputs.
//! A proptest driver runs as many cases as [`proptest_config`] says.

use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::SeedableRng;

/// The seed from `$var` if set (a replay), else a fresh random one,
/// printed with what it drives (`what`), and a generator seeded with it
/// (the seed is for the test's own failure messages).
pub fn seeded_rng(var: &str, what: &str) -> (u64, StdRng) {
    let seed: u64 = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{what} seed: {seed} ({var}={seed} replays it)");
    (seed, StdRng::seed_from_u64(seed))
}

/// The proptest configuration of a target that runs `default_cases` in the
/// test command (`XDS_FUZZ_CASES` overrides it).
pub fn proptest_config(default_cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("XDS_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    proptest::test_runner::Config {
        cases,
        // A failure prints its shrunk input; fuzz inputs are large, so
        // no regression file is written beside the source.
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// The Envoy request bodies of `tests/fuzz_corpus/discovery_request/`.
pub fn envoy_requests() -> Vec<Vec<u8>> {
    corpus("tests/fuzz_corpus/discovery_request")
}

/// Every `*.json` file directly in `relative` (a folder of the
/// repository), sorted by name; panics if none.
pub fn corpus(relative: &str) -> Vec<Vec<u8>> {
    // The repository's top: this crate sits at `crates/base`.
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = top.join(relative);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no corpus in {}", dir.display());
    paths
        .iter()
        .map(|path| std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display())))
        .collect()
}
