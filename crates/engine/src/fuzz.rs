//! Shared strategies for the decoders' property tests (docs/design.md §6, invariant 6): each
//! decoder of bytes from a disk or a stream is fed random bytes and mutations of a valid
//! encoding, and must return a value or an error, never panic or allocate by an unchecked
//! count.
//!
//! CI runs each fuzzer at proptest's default of 256 cases (or fewer where a test says so). For
//! a long run, raise the case count through the environment, which proptest reads, and run the
//! fuzzers alone (the test profile is optimized; the filters name the decoders' fuzzers):
//!
//! ```text
//! PROPTEST_CASES=1000000 cargo test -p tarn-engine --lib -- never_panic without_panic \
//!     flipped_byte garbage_is_an_error truncated_record truncated_or_extended
//! PROPTEST_CASES=1000000 cargo test -p tarn-engine --test receive_hostile
//! ```

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
