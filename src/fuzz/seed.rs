//! Test builds only: the random generator of a randomised unit test, from
//! a fresh seed each run, printed so that a failure can be replayed
//! (`<VAR>=<seed> cargo test ...`). Luck is not evidence: no randomised
//! test here uses a fixed seed.

use rand::rngs::StdRng;
use rand::SeedableRng;

/// The seed from `$var` if set (a replay), else a fresh random one,
/// printed with what it drives (`what`), and a generator seeded with it
/// (the seed is for the test's own failure messages).
pub(crate) fn seeded_rng(var: &str, what: &str) -> (u64, StdRng) {
    let seed: u64 = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("{what} seed: {seed} ({var}={seed} replays it)");
    (seed, StdRng::seed_from_u64(seed))
}
