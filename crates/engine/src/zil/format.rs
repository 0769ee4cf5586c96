//! On-disk format of the intent log (OpenZFS zil.h): the log block (a self-checksummed chain
//! link) and the records inside it. The log header kept in the object-set header, the rule a
//! log block pointer follows and [`LogFormatError`] are the object layer's
//! (`object/log_header.rs`, re-exported here), since the object-set header holds the header.
//!
//! # Theory
//! A log block is written once, before anything points to it durably except the previous
//! block's `next` field, which was written knowing only where the block would go. So a block
//! cannot be verified by a checksum in its parent, as every other block is; it carries its own
//! (fletcher4 of the used bytes with the checksum field zeroed) and the pointer that leads to it
//! carries the *seed*: the object set's guid and the block's sequence number, both repeated in
//! the block. A block that is missing, torn, stale (an older block once written at the same
//! place) or of another object set fails one of these and ends the chain there. Decoding never
//! panics: anything malformed is a [`LogFormatError`], which the reader treats as the chain end.
//!
//! # Byte layouts (little-endian)
//! The log header's is in `object/log_header.rs`.
//!
//! Log block, `size_logical` bytes (a multiple of 4 KiB, at most 128 KiB):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `TARNZIL1` |
//! | 8 | 8 | object-set (dataset) guid |
//! | 16 | 8 | chain id: random, new for each chain (so a stale block of an earlier chain at the same place, with the same sequence number, does not continue this one; OpenZFS's zc_word guids) |
//! | 24 | 8 | block sequence number (the first block of a chain has 1) |
//! | 32 | 4 | bytes used (header and records), 208..=block size |
//! | 36 | 4 | flags: bit 0, the commit continues in the next block (replay applies a commit's records only once its last block is read); other bits zero |
//! | 40 | 128 | next block pointer (allocated before this block was written) |
//! | 168 | 32 | fletcher4 of bytes `0..used` with this field zeroed |
//! | 200 | 8 | reserved, zero |
//! | 208 | used − 208 | records, back to back |
//!
//! A log block pointer's checksum field holds the seed: words 0, 1 and 3 (little-endian u64)
//! are the object-set guid, the chain id and the sequence number, word 2 is zero.
//!
//! The records inside a block are laid out in [`super::record`].

use crate::block::blkptr::ChecksumType;
use crate::block::blkptr::{BlockPtr, BLKPTR_SIZE};
use crate::block::checksum::{self};

pub use crate::object::log_header::{
    check_log_pointer, LogFormatError, LogHeader, BLOCK_SIZE_MAX, BLOCK_SIZE_UNIT, LOG_HEADER_SIZE,
};

use super::fields::{bad, put_u32, put_u64, u32_at, u64_at};
use super::record::{decode_records, Record};

/// Size of a log block's header.
pub const BLOCK_HEADER_SIZE: usize = 208;
/// Magic of a log block.
pub const BLOCK_MAGIC: [u8; 8] = *b"TARNZIL1";

/// Who a log block belongs to and where in its chain: the seed its pointer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed {
    pub guid: u64,
    pub chain: u64,
    pub sequence: u64,
}

impl Seed {
    pub fn encode(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        put_u64(&mut out, 0, self.guid);
        put_u64(&mut out, 8, self.chain);
        put_u64(&mut out, 24, self.sequence);
        out
    }

    /// The seed of a log block pointer.
    pub fn of(bp: &BlockPtr) -> Seed {
        Seed {
            guid: u64_at(&bp.checksum, 0),
            chain: u64_at(&bp.checksum, 8),
            sequence: u64_at(&bp.checksum, 24),
        }
    }

    /// The seed of the block after this one.
    pub fn next(self) -> Seed {
        Seed {
            sequence: self.sequence + 1,
            ..self
        }
    }
}

/// What a log block decodes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBlock {
    pub sequence: u64,
    /// The commit that wrote this block continues in the next one.
    pub continues: bool,
    pub next: BlockPtr,
    pub records: Vec<Record>,
}

fn block_checksum(block: &[u8], used: usize) -> [u8; 32] {
    let mut copy = block[..used].to_vec();
    copy[168..200].fill(0);
    checksum::compute(ChecksumType::Fletcher4, &copy)
}

/// Encode a log block of `size` bytes holding `records` (already encoded, back to back).
pub fn encode_block(
    size: usize,
    seed: Seed,
    next: &BlockPtr,
    records: &[u8],
    continues: bool,
) -> Vec<u8> {
    let used = BLOCK_HEADER_SIZE + records.len();
    assert!(used <= size, "log block of {size} bytes cannot hold {used}");
    let mut block = vec![0u8; size];
    block[0..8].copy_from_slice(&BLOCK_MAGIC);
    put_u64(&mut block, 8, seed.guid);
    put_u64(&mut block, 16, seed.chain);
    put_u64(&mut block, 24, seed.sequence);
    put_u32(&mut block, 32, used as u32);
    put_u32(&mut block, 36, u32::from(continues));
    next.encode_into(&mut block[40..40 + BLKPTR_SIZE]);
    block[BLOCK_HEADER_SIZE..used].copy_from_slice(records);
    let sum = block_checksum(&block, used);
    block[168..200].copy_from_slice(&sum);
    block
}

/// Verify and decode a log block read from where a pointer seeded `expected` said it would be.
/// Every failure is a chain end.
pub fn decode_block(block: &[u8], expected: Seed) -> Result<LogBlock, LogFormatError> {
    if block.len() < BLOCK_HEADER_SIZE {
        return bad(format!("log block of {} bytes", block.len()));
    }
    if block[0..8] != BLOCK_MAGIC {
        return bad("log block: bad magic");
    }
    let found = Seed {
        guid: u64_at(block, 8),
        chain: u64_at(block, 16),
        sequence: u64_at(block, 24),
    };
    if found != expected {
        return bad(format!("log block {found:?}, expected {expected:?}"));
    }
    let sequence = found.sequence;
    let used = u32_at(block, 32) as usize;
    let flags = u32_at(block, 36);
    if used < BLOCK_HEADER_SIZE || used > block.len() || flags > 1 || block[200..208] != [0u8; 8] {
        return bad(format!("log block: {used} bytes used of {}", block.len()));
    }
    if block_checksum(block, used)[..] != block[168..200] {
        return bad(format!("log block sequence {sequence}: checksum mismatch"));
    }
    let next = BlockPtr::decode(&block[40..40 + BLKPTR_SIZE])
        .map_err(|error| LogFormatError(format!("log block next pointer: {error}")))?;
    check_log_pointer(&next)?;
    let records = decode_records(&block[BLOCK_HEADER_SIZE..used])?;
    Ok(LogBlock {
        sequence,
        continues: flags & 1 != 0,
        next,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::super::record::{setattr_mask, LogTime, RecordBody};
    use super::*;
    use crate::block::blkptr::{Compression, Dva, ObjectType};
    use crate::types::Txg;
    use proptest::prelude::*;

    fn seed(sequence: u64) -> Seed {
        Seed {
            guid: 42,
            chain: 77,
            sequence,
        }
    }

    fn log_bp(sequence: u64) -> BlockPtr {
        let mut bp = BlockPtr::hole(Txg(7), ObjectType::IntentLog, 0);
        bp.dvas[0] = Dva {
            vdev: crate::types::VdevId(0),
            offset: 1 << 20,
            size_allocated: 8192,
            gang: false,
        };
        bp.size_logical = 8192;
        bp.size_physical = 8192;
        bp.compression = Compression::Off;
        bp.fill_count = 1;
        bp.checksum = seed(sequence).encode();
        bp
    }

    fn write(sequence: u64, data: Vec<u8>) -> Record {
        Record {
            sequence,
            txg: Txg(9),
            object: 5,
            generation: 3,
            body: RecordBody::Write { offset: 100, data },
        }
    }

    #[test]
    fn block_round_trip_and_chain_end_on_damage() {
        let records = [
            write(1, b"hello".to_vec()),
            Record {
                sequence: 2,
                txg: Txg(10),
                object: 5,
                generation: 3,
                body: RecordBody::Setattr {
                    mask: setattr_mask::SIZE | setattr_mask::MTIME,
                    mode: 0,
                    uid: 0,
                    gid: 0,
                    size: 3,
                    atime: LogTime::default(),
                    mtime: LogTime {
                        seconds: -5,
                        nanoseconds: 7,
                    },
                    project: 0,
                    project_inherit: false,
                },
            },
        ];
        let mut encoded = Vec::new();
        for record in &records {
            record.encode_into(&mut encoded);
        }
        let block = encode_block(8192, seed(3), &log_bp(4), &encoded, true);
        assert!(decode_block(&block, seed(3)).unwrap().continues);
        let decoded = decode_block(&block, seed(3)).unwrap();
        assert_eq!(decoded.records, records);
        assert_eq!(decoded.next, log_bp(4));
        let other_set = Seed {
            guid: 43,
            ..seed(3)
        };
        assert!(
            decode_block(&block, other_set).is_err(),
            "another object set's block"
        );
        let other_chain = Seed {
            chain: 78,
            ..seed(3)
        };
        assert!(
            decode_block(&block, other_chain).is_err(),
            "an earlier chain's block"
        );
        assert!(decode_block(&block, seed(4)).is_err(), "a stale block");
        let mut torn = block.clone();
        torn[200] ^= 1;
        assert!(decode_block(&torn, seed(3)).is_err(), "a torn block");
    }

    #[test]
    fn header_round_trip() {
        assert_eq!(LogHeader::default().encode(), [0u8; LOG_HEADER_SIZE]);
        let header = LogHeader {
            first: log_bp(1),
            claim_txg: Txg(12),
            claimed_through: Txg(11),
            replayed_through: 17,
        };
        assert_eq!(LogHeader::decode(&header.encode()).unwrap(), header);
        let mut bad_reserved = header.encode();
        bad_reserved[160] = 1;
        assert!(LogHeader::decode(&bad_reserved).is_err());
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn block_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            let _ = decode_block(&bytes, seed(1));
        }

        #[test]
        fn mutated_blocks_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            mutations in crate::fuzz::mutations(),
            reseal: bool,
        ) {
            let mut records = Vec::new();
            write(1, data).encode_into(&mut records);
            let block = encode_block(2048, seed(3), &log_bp(4), &records, false);
            let mut bytes = crate::fuzz::mutate(block, &mutations);
            // Resealed, the damage reaches the records behind the checksum.
            if reseal && bytes.len() >= BLOCK_HEADER_SIZE {
                let used = (u32_at(&bytes, 32) as usize).clamp(BLOCK_HEADER_SIZE, bytes.len());
                let sum = block_checksum(&bytes, used);
                bytes[168..200].copy_from_slice(&sum);
            }
            let _ = decode_block(&bytes, seed(3));
        }

        #[test]
        fn mutated_headers_never_panic(mutations in crate::fuzz::mutations()) {
            let header = LogHeader {
                first: log_bp(1),
                claim_txg: Txg(12),
                claimed_through: Txg(11),
                replayed_through: 17,
            };
            let bytes = crate::fuzz::mutate(header.encode().to_vec(), &mutations);
            if let Ok(decoded) = LogHeader::decode(&bytes) {
                // A hole as the first block encodes as zeros whatever its birth and type said.
                let again = LogHeader::decode(&decoded.encode()).unwrap();
                prop_assert_eq!(again.first.is_hole(), decoded.first.is_hole());
                if !decoded.first.is_hole() {
                    prop_assert_eq!(&again.first, &decoded.first);
                }
                prop_assert_eq!(again.claim_txg, decoded.claim_txg);
                prop_assert_eq!(again.claimed_through, decoded.claimed_through);
                prop_assert_eq!(again.replayed_through, decoded.replayed_through);
            }
        }
    }
}
