//! Shared strategies for the decoders' property tests (docs/design/invariants.md §6, invariant 6):
//! each decoder of bytes from a disk or a stream is fed random bytes and mutations of a valid
//! encoding, and must return a value or an error, never panic or allocate by an unchecked
//! count.
//!
//! Every fuzzer's `proptest!` block is configured by [`fuzz_config!`](crate::fuzz_config)
//! with its number of cases in CI (256 for most; fewer where a case is costly), which
//! `TARN_FUZZ_CASES` overrides for a long run. `scripts/fuzz-long.sh` finds the fuzzers by that
//! macro, runs each in an optimized build to a number of cases or a time budget, and prints a
//! table of the cases each ran; `scripts/fuzz-long.sh -l` lists them with their CI counts.

use proptest::prelude::*;
use proptest::sample::Index;

/// One change to an encoded structure.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Flip one bit of the byte at a position.
    Flip(Index, u8),
    /// Overwrite the byte at a position.
    Set(Index, u8),
    /// Cut the bytes at a position.
    Truncate(Index),
    /// Append bytes.
    Extend(Vec<u8>),
}

/// One to four mutations, mostly in place (a decoder's interesting failures are in the
/// fields, not in the length).
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let mutation = prop_oneof![
        4 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        4 => (any::<Index>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set(at, value)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Extend),
    ];
    proptest::collection::vec(mutation, 1..=4)
}

/// `bytes` with `mutations` applied in order.
pub fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        match mutation {
            Mutation::Flip(at, bit) if !bytes.is_empty() => {
                let at = at.index(bytes.len());
                bytes[at] ^= 1 << bit;
            }
            Mutation::Set(at, value) if !bytes.is_empty() => {
                let at = at.index(bytes.len());
                bytes[at] = *value;
            }
            Mutation::Truncate(at) if !bytes.is_empty() => {
                let at = at.index(bytes.len());
                bytes.truncate(at);
            }
            Mutation::Extend(tail) => bytes.extend_from_slice(tail),
            _ => {}
        }
    }
    bytes
}
