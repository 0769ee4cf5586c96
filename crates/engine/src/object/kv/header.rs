//! The header block (block 0): object-wide fields and, while it is small, the pointer table.
//!
//! ```text
//! header block (block_size bytes)
//! offset        size  field
//!      0           4  magic "TKVH"
//!      4           4  format version (u32 LE) = 1
//!      8           8  hash salt (u64 LE), random per object
//!     16           8  entry count (u64 LE)
//!     24           1  block shift: log2(block_size), 12..=17
//!     25           1  table depth T: the pointer table has 2^T entries (0..=TABLE_DEPTH_MAX)
//!     26           1  table embedded: 1 = the table lives in this block, 0 = in its own blocks
//!     27           5  reserved, zero
//!     32           8  first pointer-table block (u64 LE; 0 while embedded)
//!     40           8  pointer-table block count (u64 LE; 0 while embedded)
//!     48           8  next block: the lowest block id never used (u64 LE); ids are not reused
//!     56           8  leaf count (u64 LE)
//!     64          64  reserved, zero
//!    128  ..  block_size/2      unused, written as zeros, ignored on read
//!    block_size/2 .. block_size embedded pointer table: 2^T leaf block ids (u64 LE) while
//!                               embedded (capacity block_size/16 entries); zeros otherwise
//! ```
//!
//! An external pointer table is `2^T * 8 / block_size` consecutive blocks starting at the first
//! pointer-table block, each an array of `block_size / 8` leaf block ids (u64 LE). Entry `i`
//! is the leaf owning hashes whose top T bits equal `i`.

use std::sync::Arc;

use super::{KvError, Result, TABLE_DEPTH_MAX};

pub(super) const HEADER_MAGIC: [u8; 4] = *b"TKVH";
pub(super) const FORMAT_VERSION: u32 = 1;
pub(super) const HEADER_FIXED_SIZE: usize = 128;
pub(super) const HEADER_BLOCK: u64 = 0;
pub(super) const BLOCK_SHIFT_MIN: u32 = 12;
pub(super) const BLOCK_SHIFT_MAX: u32 = 17;

const _: () = assert!(56 + 8 + 64 == HEADER_FIXED_SIZE);
// The embedded table (second half of the smallest block) never overlaps the fixed fields.
const _: () = assert!(HEADER_FIXED_SIZE <= (1 << BLOCK_SHIFT_MIN) / 2);

/// The decoded header fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub salt: u64,
    pub entry_count: u64,
    pub block_shift: u32,
    pub table_depth: u32,
    pub table_embedded: bool,
    pub table_first_block: u64,
    pub table_block_count: u64,
    pub next_block: u64,
    pub leaf_count: u64,
}

/// The header block as read: the fields and the raw bytes (which hold the embedded table).
#[derive(Clone, Debug)]
pub(super) struct HeaderBlock {
    pub header: Header,
    /// Shared with the block as read until the first change (copy on write).
    pub raw: Arc<Vec<u8>>,
}

fn le_u64(raw: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(raw[offset..offset + 8].try_into().expect("8-byte slice"))
}

/// Entries the embedded table can hold for this block size.
pub(super) fn embedded_capacity(block_size: usize) -> u64 {
    (block_size / 16) as u64
}

impl HeaderBlock {
    /// A fresh header with a one-entry embedded table pointing at `first_leaf`.
    pub fn new(block_size: usize, salt: u64, first_leaf: u64) -> HeaderBlock {
        assert!(block_size.is_power_of_two());
        let block_shift = block_size.trailing_zeros();
        assert!((BLOCK_SHIFT_MIN..=BLOCK_SHIFT_MAX).contains(&block_shift));
        let mut block = HeaderBlock {
            header: Header {
                salt,
                entry_count: 0,
                block_shift,
                table_depth: 0,
                table_embedded: true,
                table_first_block: 0,
                table_block_count: 0,
                next_block: first_leaf + 1,
                leaf_count: 1,
            },
            raw: Arc::new(vec![0; block_size]),
        };
        block.embedded_set(0, first_leaf);
        block
    }

    /// Decode and validate block 0.
    pub fn decode(raw: impl Into<Arc<Vec<u8>>>, block_size: usize) -> Result<HeaderBlock> {
        let raw: Arc<Vec<u8>> = raw.into();
        let corrupt = |what: String| KvError::Corrupt {
            what,
            block: HEADER_BLOCK,
        };
        if raw.len() != block_size {
            return Err(corrupt(format!(
                "header block is {} bytes, expected {block_size}",
                raw.len()
            )));
        }
        if raw[0..4] != HEADER_MAGIC {
            return Err(corrupt("header magic is wrong".into()));
        }
        let version = u32::from_le_bytes(raw[4..8].try_into().expect("4-byte slice"));
        if version != FORMAT_VERSION {
            return Err(corrupt(format!("unknown format version {version}")));
        }
        let block_shift = u32::from(raw[24]);
        if !block_size.is_power_of_two() || block_size.trailing_zeros() != block_shift {
            return Err(corrupt(format!(
                "block shift {block_shift} does not match the object's block size {block_size}"
            )));
        }
        let table_depth = u32::from(raw[25]);
        if table_depth > TABLE_DEPTH_MAX {
            return Err(corrupt(format!(
                "table depth {table_depth} exceeds {TABLE_DEPTH_MAX}"
            )));
        }
        let table_embedded = match raw[26] {
            0 => false,
            1 => true,
            other => return Err(corrupt(format!("table-embedded flag is {other}"))),
        };
        if raw[27..32].iter().any(|&byte| byte != 0) || raw[64..128].iter().any(|&byte| byte != 0) {
            return Err(corrupt("header reserved bytes are not zero".into()));
        }
        let header = Header {
            salt: le_u64(&raw, 8),
            entry_count: le_u64(&raw, 16),
            block_shift,
            table_depth,
            table_embedded,
            table_first_block: le_u64(&raw, 32),
            table_block_count: le_u64(&raw, 40),
            next_block: le_u64(&raw, 48),
            leaf_count: le_u64(&raw, 56),
        };
        let table_entries = 1u64 << table_depth;
        if table_embedded {
            if table_entries > embedded_capacity(block_size)
                || header.table_first_block != 0
                || header.table_block_count != 0
            {
                return Err(corrupt(
                    "embedded pointer table geometry is inconsistent".into(),
                ));
            }
        } else {
            let expected_blocks = table_entries * 8 / block_size as u64;
            let table_end = header
                .table_first_block
                .checked_add(header.table_block_count);
            if table_entries <= embedded_capacity(block_size)
                || header.table_block_count != expected_blocks
                || header.table_first_block == HEADER_BLOCK
                || table_end.is_none_or(|end| end > header.next_block)
            {
                return Err(corrupt(
                    "external pointer table geometry is inconsistent".into(),
                ));
            }
        }
        if header.next_block < 2 || header.leaf_count == 0 || header.leaf_count >= header.next_block
        {
            return Err(corrupt("next block or leaf count is inconsistent".into()));
        }
        Ok(HeaderBlock { header, raw })
    }

    /// The block's bytes with the fields brought up to date.
    pub fn encode(&mut self) -> &[u8] {
        let header = &self.header;
        let raw = Arc::make_mut(&mut self.raw);
        raw[0..4].copy_from_slice(&HEADER_MAGIC);
        raw[4..8].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        raw[8..16].copy_from_slice(&header.salt.to_le_bytes());
        raw[16..24].copy_from_slice(&header.entry_count.to_le_bytes());
        raw[24] = u8::try_from(header.block_shift).expect("block shift fits a byte");
        raw[25] = u8::try_from(header.table_depth).expect("table depth fits a byte");
        raw[26] = u8::from(header.table_embedded);
        raw[27..32].fill(0);
        raw[32..40].copy_from_slice(&header.table_first_block.to_le_bytes());
        raw[40..48].copy_from_slice(&header.table_block_count.to_le_bytes());
        raw[48..56].copy_from_slice(&header.next_block.to_le_bytes());
        raw[56..64].copy_from_slice(&header.leaf_count.to_le_bytes());
        raw[64..128].fill(0);
        &self.raw
    }

    fn embedded_offset(&self, index: u64) -> usize {
        assert!(index < embedded_capacity(self.raw.len()));
        self.raw.len() / 2 + index as usize * 8
    }

    /// Entry `index` of the embedded table.
    pub fn embedded_get(&self, index: u64) -> u64 {
        le_u64(&self.raw, self.embedded_offset(index))
    }

    pub fn embedded_set(&mut self, index: u64, blkid: u64) {
        let offset = self.embedded_offset(index);
        Arc::make_mut(&mut self.raw)[offset..offset + 8].copy_from_slice(&blkid.to_le_bytes());
    }

    /// Zero the embedded table area (after the table moves to its own blocks).
    pub fn embedded_clear(&mut self) {
        let half = self.raw.len() / 2;
        Arc::make_mut(&mut self.raw)[half..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_block_size_mismatch() {
        let mut block = HeaderBlock::new(8192, 0xfeed, 1);
        block.header.entry_count = 42;
        let raw = block.encode().to_vec();
        let decoded = HeaderBlock::decode(raw.clone(), 8192).unwrap();
        assert_eq!(decoded.header, block.header);
        assert_eq!(decoded.embedded_get(0), 1);
        assert!(matches!(
            HeaderBlock::decode(raw[..4096].to_vec(), 4096),
            Err(KvError::Corrupt { block: 0, .. })
        ));
    }

    #[test]
    fn external_table_beyond_next_block_is_corrupt() {
        let mut block = HeaderBlock::new(4096, 1, 1);
        block.header.table_embedded = false;
        block.header.table_depth = 9; // 512 entries = 1 block of 4 KiB
        block.header.table_first_block = 2;
        block.header.table_block_count = 1;
        block.header.next_block = 3;
        block.embedded_clear();
        assert!(HeaderBlock::decode(block.encode().to_vec(), 4096).is_ok());
        block.header.next_block = 2;
        assert!(HeaderBlock::decode(block.encode().to_vec(), 4096).is_err());
        block.header.next_block = 3;
        block.header.table_first_block = u64::MAX;
        assert!(HeaderBlock::decode(block.encode().to_vec(), 4096).is_err());
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = HeaderBlock::decode(bytes, 4096);
        }

        #[test]
        fn mutated_header_never_panics(
            salt in any::<u64>(),
            count in any::<u64>(),
            flips in proptest::collection::vec((0usize..128, any::<u8>()), 1..6),
        ) {
            let mut block = HeaderBlock::new(4096, salt, 1);
            block.header.entry_count = count;
            let mut raw = block.encode().to_vec();
            let decoded = HeaderBlock::decode(raw.clone(), 4096).unwrap();
            prop_assert_eq!(&decoded.header, &block.header);
            for (offset, byte) in flips {
                raw[offset] ^= byte;
            }
            let _ = HeaderBlock::decode(raw, 4096);
        }
    }
}
