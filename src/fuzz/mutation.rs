//! The proptest side of fuzzing (test builds only): the real inputs,
//! a strategy that mutates them byte by byte, and how many cases each
//! proptest driver runs.
//!
//! The drivers live beside the code they fuzz (`http::tests::fuzz`: POST
//! bodies and GET queries through the router; `xds::fuzz`: the JSON codec
//! and the config-source rewrite; a few property tests elsewhere) and call
//! the same target bodies as the `cargo fuzz` targets where there is one.
//! Each runs a bounded number of cases in `cargo test` (a few seconds in
//! all); `XDS_FUZZ_CASES=N` runs every driver N cases instead, for a longer
//! hunt on stable Rust:
//!
//! ```text
//! XDS_FUZZ_CASES=20000 cargo test --lib fuzz_
//! ```
//!
//! Inputs start from real ones: `tests/fuzz_corpus/discovery_request/` holds
//! the request bodies a real Envoy 1.40 sent (`scripts/capture-fuzz-corpus.py`
//! captures them again), `tests/corpus/` the resources of every xDS type.
//! No coverage guidance here: random mutations of real inputs. The
//! coverage-guided targets are in `fuzz/` (`cargo fuzz`).

use proptest::prelude::*;
use proptest::sample::Index;

/// The proptest configuration of a target that runs `default_cases` in the
/// test command (`XDS_FUZZ_CASES` overrides it).
pub(crate) use xds_gateway_base::testing::proptest_config as config;

/// The Envoy request bodies of `tests/fuzz_corpus/discovery_request/`.
pub(crate) use xds_gateway_base::testing::envoy_requests;

/// The resources (JSON `Any`s, snake_case) of `tests/corpus/`.
pub(crate) fn resources() -> Vec<Vec<u8>> {
    xds_gateway_base::testing::corpus("tests/corpus")
}

/// Bytes that make JSON parsers take other paths.
const TOKENS: &[&[u8]] = &[
    b"null",
    b"true",
    b"0",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"\"",
    b"\"\\ud800\"",
    b"\"\\u0000\"",
    b"[]",
    b"{}",
    b"[",
    b"{",
    b"]",
    b"}",
    b"\"",
    b",",
    b":",
    b"\\",
    b"\xff",
    b"\xc3\xa9",
    b"\"@type\":",
    b"\"type.googleapis.com/google.protobuf.Empty\"",
    b"\"type.googleapis.com/envoy.config.core.v3.ConfigSource\"",
    b"\"ads\":{}",
    b"\"self\":{}",
];

/// One edit of an input.
#[derive(Debug, Clone)]
enum Edit {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Insert(Index, usize),
    Delete(Index, u8),
    /// Copies a range of the input over another place (repeats structure).
    Splice(Index, Index, u8),
    Truncate(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Edit::FlipBit(at, bit)),
        (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::SetByte(at, b)),
        (any::<Index>(), 0..TOKENS.len()).prop_map(|(at, t)| Edit::Insert(at, t)),
        (any::<Index>(), 1u8..32).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<Index>(), any::<Index>(), 1u8..64).prop_map(|(f, t, n)| Edit::Splice(f, t, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(input: &mut Vec<u8>, edit: &Edit) {
    let len = input.len();
    let at = |i: &Index| if len == 0 { 0 } else { i.index(len) };
    match edit {
        Edit::FlipBit(i, bit) if len > 0 => input[at(i)] ^= 1 << bit,
        Edit::SetByte(i, byte) if len > 0 => input[at(i)] = *byte,
        Edit::Insert(i, token) => {
            let pos = at(i);
            input.splice(pos..pos, TOKENS[*token].iter().copied());
        }
        Edit::Delete(i, n) if len > 0 => {
            let pos = at(i);
            input.drain(pos..(pos + usize::from(*n)).min(len));
        }
        Edit::Splice(from, to, n) if len > 0 => {
            let from = at(from);
            let piece: Vec<u8> = input[from..(from + usize::from(*n)).min(len)].to_vec();
            let to = at(to);
            input.splice(to..to, piece);
        }
        Edit::Truncate(i) => input.truncate(at(i)),
        _ => {}
    }
}

/// Inputs for a target: an entry of `corpus` with up to `max_edits` random
/// edits (none at all in some cases, so the real inputs themselves are
/// checked), or now and then a short run of arbitrary bytes.
pub(crate) fn mutated(corpus: Vec<Vec<u8>>, max_edits: usize) -> BoxedStrategy<Vec<u8>> {
    let from_corpus = (
        proptest::sample::select(corpus),
        proptest::collection::vec(edit(), 0..=max_edits),
    )
        .prop_map(|(mut input, edits)| {
            for e in &edits {
                apply(&mut input, e);
            }
            input
        });
    prop_oneof![
        9 => from_corpus,
        1 => proptest::collection::vec(any::<u8>(), 0..256),
    ]
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpora_are_there_and_are_json() {
        for body in envoy_requests().iter().chain(&resources()) {
            serde_json::from_slice::<serde_json::Value>(body).expect("corpus entries are JSON");
        }
        assert!(envoy_requests().len() >= 8);
    }

    proptest! {
        #[test]
        fn edits_stay_in_bounds(
            mut input in proptest::collection::vec(any::<u8>(), 0..4),
            edits in proptest::collection::vec(edit(), 0..16),
        ) {
            for e in &edits {
                apply(&mut input, e);
            }
        }
    }
}
