//! The uberblock: the root of everything, written into a ring of slots in every label of every
//! leaf at the end of each txg sync.
//!
//! ```text
//! Uberblock (256 bytes, little-endian, at the start of its ring slot; the rest of the slot is 0):
//!   0     8  magic 0x0074_6172_6e5f_7562 ("tarn_ub")
//!   8     8  format version (1)
//!   16    8  txg
//!   24    8  guid sum (wrapping sum of every vdev guid, top-level and leaf)
//!   32    8  timestamp (seconds since the Unix epoch)
//!   40    8  software version (crate version, major << 32 | minor << 16 | patch)
//!   48  128  block pointer of the MOS object-set header
//!   176   8  checkpoint txg (reserved, 0)
//!   184  16  RAID-Z reflow word (all 0 but while an expansion runs, vdev/raidz/progress.rs):
//!            184 4 vdev id + 1, 188 4 scratch state, 192 8 offset reflowed
//!   200  24  reserved (0)
//!   224  32  blake3 checksum of bytes 0..224
//! ```
//!
//! The uberblock carries its own checksum (nothing points to it). Import reads every slot of
//! every label of every leaf, keeps those whose magic, checksum and guid sum verify, and tries
//! them newest first (highest txg, then timestamp).

use crate::block::blkptr::{BlockError, BlockPtr, BLKPTR_SIZE};
use crate::types::Txg;
use crate::vdev::raidz::progress::{ReflowProgress, REFLOW_WORD_SIZE};

pub const UBERBLOCK_SIZE: usize = 256;
pub const UBERBLOCK_MAGIC: u64 = 0x0074_6172_6e5f_7562;
pub const UBERBLOCK_VERSION: u64 = 1;
const CHECKSUMMED_BYTES: usize = 224;
const REFLOW_WORD_AT: usize = 184;
const _: () = assert!(48 + BLKPTR_SIZE + 8 == REFLOW_WORD_AT);
const _: () = assert!(REFLOW_WORD_AT + REFLOW_WORD_SIZE + 24 == CHECKSUMMED_BYTES);
const _: () = assert!(CHECKSUMMED_BYTES + 32 == UBERBLOCK_SIZE);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uberblock {
    pub txg: Txg,
    pub guid_sum: u64,
    pub timestamp: u64,
    pub software_version: u64,
    pub mos_root: BlockPtr,
    /// The RAID-Z expansion under way and how far its copy is durable (`None` but while one
    /// runs): it must agree with this txg's MOS, so it is written with it.
    pub reflow: Option<ReflowProgress>,
}

pub fn software_version() -> u64 {
    let part = |name: &str| name.parse::<u64>().unwrap_or(0);
    (part(env!("CARGO_PKG_VERSION_MAJOR")) << 32)
        | (part(env!("CARGO_PKG_VERSION_MINOR")) << 16)
        | part(env!("CARGO_PKG_VERSION_PATCH"))
}

impl Uberblock {
    pub fn encode(&self) -> [u8; UBERBLOCK_SIZE] {
        let mut out = [0u8; UBERBLOCK_SIZE];
        out[0..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&UBERBLOCK_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.txg.0.to_le_bytes());
        out[24..32].copy_from_slice(&self.guid_sum.to_le_bytes());
        out[32..40].copy_from_slice(&self.timestamp.to_le_bytes());
        out[40..48].copy_from_slice(&self.software_version.to_le_bytes());
        self.mos_root.encode_into(&mut out[48..48 + BLKPTR_SIZE]);
        out[REFLOW_WORD_AT..REFLOW_WORD_AT + REFLOW_WORD_SIZE]
            .copy_from_slice(&ReflowProgress::encode(self.reflow.as_ref()));
        let checksum = blake3::hash(&out[..CHECKSUMMED_BYTES]);
        out[CHECKSUMMED_BYTES..].copy_from_slice(checksum.as_bytes());
        out
    }

    /// Decode a ring slot. Ok(None) for an empty (all-zero) slot; an error says why a non-empty
    /// slot is not a valid uberblock.
    pub fn decode(bytes: &[u8]) -> Result<Option<Uberblock>, BlockError> {
        if bytes.len() < UBERBLOCK_SIZE {
            return Err(BlockError::corrupt(
                "uberblock",
                format!("uberblock slot of {} bytes", bytes.len()),
            ));
        }
        let word = |offset: usize| {
            u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
        };
        if bytes[..UBERBLOCK_SIZE].iter().all(|&byte| byte == 0) {
            return Ok(None);
        }
        if word(0) != UBERBLOCK_MAGIC {
            return Err(BlockError::corrupt("uberblock", "uberblock magic"));
        }
        let checksum = blake3::hash(&bytes[..CHECKSUMMED_BYTES]);
        if checksum.as_bytes() != &bytes[CHECKSUMMED_BYTES..UBERBLOCK_SIZE] {
            return Err(BlockError::corrupt("uberblock", "uberblock checksum"));
        }
        if word(8) != UBERBLOCK_VERSION {
            return Err(BlockError::corrupt(
                "uberblock",
                format!("uberblock version {}", word(8)),
            ));
        }
        Ok(Some(Uberblock {
            txg: Txg(word(16)),
            guid_sum: word(24),
            timestamp: word(32),
            software_version: word(40),
            mos_root: BlockPtr::decode(&bytes[48..48 + BLKPTR_SIZE])?,
            reflow: ReflowProgress::decode(
                bytes[REFLOW_WORD_AT..REFLOW_WORD_AT + REFLOW_WORD_SIZE]
                    .try_into()
                    .expect("the word's bytes"),
            )
            .map_err(|what| BlockError::corrupt("uberblock", what))?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::ObjectType;
    use proptest::prelude::*;

    fn sample() -> Uberblock {
        Uberblock {
            txg: Txg(42),
            guid_sum: 0xdead_beef,
            timestamp: 1_800_000_000,
            software_version: software_version(),
            mos_root: BlockPtr::hole(Txg(42), ObjectType::Objset, 0),
            reflow: None,
        }
    }

    #[test]
    fn round_trips_and_detects_damage() {
        let encoded = sample().encode();
        assert_eq!(Uberblock::decode(&encoded).unwrap(), Some(sample()));
        let mut damaged = encoded;
        damaged[17] ^= 1;
        assert!(Uberblock::decode(&damaged).is_err());
        assert_eq!(Uberblock::decode(&[0u8; 1024]).unwrap(), None);
    }

    #[test]
    fn the_reflow_word_round_trips_and_is_zero_without_a_reflow() {
        assert!(sample().encode()[REFLOW_WORD_AT..CHECKSUMMED_BYTES]
            .iter()
            .all(|&byte| byte == 0));
        let reflowing = Uberblock {
            reflow: Some(ReflowProgress {
                vdev: crate::types::VdevId(2),
                scratch: crate::vdev::raidz::progress::ScratchState::Valid,
                offset: 3 << 20,
            }),
            ..sample()
        };
        assert_eq!(
            Uberblock::decode(&reflowing.encode()).unwrap(),
            Some(reflowing)
        );
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Uberblock::decode(&bytes);
        }

        #[test]
        fn decoding_mutated_uberblocks_never_panics(mutations in crate::fuzz::mutations(), reseal: bool) {
            let mut bytes = crate::fuzz::mutate(sample().encode().to_vec(), &mutations);
            // Resealed, the damage reaches the fields behind the checksum.
            if reseal && bytes.len() >= UBERBLOCK_SIZE {
                let checksum = blake3::hash(&bytes[..CHECKSUMMED_BYTES]);
                bytes[CHECKSUMMED_BYTES..UBERBLOCK_SIZE].copy_from_slice(checksum.as_bytes());
            }
            if let Ok(Some(uberblock)) = Uberblock::decode(&bytes) {
                // What decodes encodes to the same fields (the reserved bytes, 176..184 and
                // 200..224, are covered by the checksum but not required to be zero, §2.2).
                let encoded = uberblock.encode();
                prop_assert_eq!(&encoded[..176], &bytes[..176]);
                prop_assert_eq!(
                    &encoded[REFLOW_WORD_AT..REFLOW_WORD_AT + REFLOW_WORD_SIZE],
                    &bytes[REFLOW_WORD_AT..REFLOW_WORD_AT + REFLOW_WORD_SIZE]
                );
            }
        }
    }
}
