//! Leaf blocks: the entries of one hash-prefix range, sorted by cookie.
//!
//! ```text
//! leaf block (block_size bytes)
//! offset        size  field
//!      0           4  magic "TKVL"
//!      4           1  local depth d (0..=TABLE_DEPTH_MAX): how many leading hash bits this leaf owns
//!      5           3  reserved, zero
//!      8           8  prefix: the top d bits of every entry's 48-bit hash (u64 LE, < 2^d)
//!     16           4  entry count n (u32 LE)
//!     20           4  heap start: offset of the lowest heap byte (u32 LE)
//!     24           8  reserved, zero
//!     32      16 * n  slot array, sorted by strictly increasing cookie
//!        ...          free space
//!   heap start .. block_size   heap: for each slot, key bytes then value bytes (unordered, may
//!                              hold garbage left by removals; compacted when space runs out)
//!
//! slot (16 bytes)
//!      0           8  cookie = hash48 << 15 | collision differentiator (u64 LE)
//!      8           4  heap offset of the key (u32 LE); the value follows the key directly
//!     12           2  key length (u16 LE, 1..=256)
//!     14           2  value length (u16 LE, 0..=1024)
//! ```
//!
//! Decoding validates the whole block (every slot: cookie order, cookie within the leaf's prefix,
//! lengths within limits, heap bytes inside the heap), so that after [`Leaf::decode`] every accessor
//! indexes only in-bounds bytes; a panic in an accessor would be a programmer error.

use std::sync::Arc;

use super::{
    cookie_hash, KvError, Result, CD_BITS, CD_MAX, COOKIE_END, COOKIE_FIRST, HASH_BITS,
    KEY_LEN_MAX, TABLE_DEPTH_MAX, VALUE_LEN_MAX,
};

pub(super) const LEAF_MAGIC: [u8; 4] = *b"TKVL";
pub(super) const LEAF_HEADER_SIZE: usize = 32;
pub(super) const SLOT_SIZE: usize = 16;

const OFFSET_DEPTH: usize = 4;
const OFFSET_PREFIX: usize = 8;
const OFFSET_COUNT: usize = 16;
const OFFSET_HEAP_START: usize = 20;

const _: () = assert!(OFFSET_HEAP_START + 4 + 8 == LEAF_HEADER_SIZE);
const _: () = assert!(8 + 4 + 2 + 2 == SLOT_SIZE);
// Lengths are stored as u16 and offsets as u32 (block sizes are at most 128 KiB).
const _: () = assert!(KEY_LEN_MAX <= u16::MAX as usize);
const _: () = assert!(VALUE_LEN_MAX <= u16::MAX as usize);

/// One decoded slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    pub cookie: u64,
    offset: usize,
    key_len: usize,
    pub value_len: usize,
}

/// A validated leaf block held in memory; modified in place and written back whole.
#[derive(Clone, Debug)]
pub(super) struct Leaf {
    pub blkid: u64,
    pub depth: u32,
    pub prefix: u64,
    count: usize,
    heap_start: usize,
    /// Shared with the block as read until the first change (copy on write).
    raw: Arc<Vec<u8>>,
}

/// Result of searching a leaf for a key.
pub(super) enum Found {
    /// The key is at this slot index.
    At(usize),
    /// The key is absent; a new entry would get this cookie (None: all collision
    /// differentiators of this hash are in use).
    Absent(Option<u64>),
}

fn le_u16(raw: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([raw[offset], raw[offset + 1]])
}
fn le_u32(raw: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(raw[offset..offset + 4].try_into().expect("4-byte slice"))
}
fn le_u64(raw: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(raw[offset..offset + 8].try_into().expect("8-byte slice"))
}

/// The top `depth` bits of a 48-bit hash.
pub(super) fn hash_prefix(hash: u64, depth: u32) -> u64 {
    debug_assert!(depth <= HASH_BITS);
    hash >> (HASH_BITS - depth)
}

impl Leaf {
    /// An empty leaf owning the hashes whose top `depth` bits equal `prefix`.
    pub fn empty(blkid: u64, block_size: usize, depth: u32, prefix: u64) -> Leaf {
        assert!(depth <= TABLE_DEPTH_MAX);
        assert!(prefix < (1u64 << depth));
        Leaf {
            blkid,
            depth,
            prefix,
            count: 0,
            heap_start: block_size,
            raw: Arc::new(vec![0; block_size]),
        }
    }

    /// Decode and validate a leaf read from block `blkid`.
    pub fn decode(blkid: u64, raw: impl Into<Arc<Vec<u8>>>, block_size: usize) -> Result<Leaf> {
        let raw: Arc<Vec<u8>> = raw.into();
        let corrupt = |what: String| KvError::Corrupt { what, block: blkid };
        if raw.len() != block_size {
            return Err(corrupt(format!(
                "leaf block is {} bytes, expected {block_size}",
                raw.len()
            )));
        }
        if raw[0..4] != LEAF_MAGIC {
            return Err(corrupt("leaf magic is wrong".into()));
        }
        let depth = u32::from(raw[OFFSET_DEPTH]);
        if depth > TABLE_DEPTH_MAX {
            return Err(corrupt(format!(
                "leaf depth {depth} exceeds {TABLE_DEPTH_MAX}"
            )));
        }
        if raw[5..8].iter().any(|&byte| byte != 0) || raw[24..32].iter().any(|&byte| byte != 0) {
            return Err(corrupt("leaf reserved bytes are not zero".into()));
        }
        let prefix = le_u64(&raw, OFFSET_PREFIX);
        if prefix >= (1u64 << depth) {
            return Err(corrupt(format!(
                "leaf prefix {prefix:#x} is wider than depth {depth}"
            )));
        }
        let count = le_u32(&raw, OFFSET_COUNT) as u64;
        let heap_start = le_u32(&raw, OFFSET_HEAP_START) as u64;
        let slots_end = LEAF_HEADER_SIZE as u64 + count * SLOT_SIZE as u64;
        if slots_end > heap_start || heap_start > block_size as u64 {
            return Err(corrupt(format!(
                "leaf entry count {count} and heap start {heap_start} do not fit the block"
            )));
        }
        let leaf = Leaf {
            blkid,
            depth,
            prefix,
            count: count as usize,
            heap_start: heap_start as usize,
            raw,
        };
        let mut cookie_previous = 0u64;
        let mut bytes_live = 0usize;
        for index in 0..leaf.count {
            let slot = leaf.slot(index);
            let what = |problem: &str| corrupt(format!("leaf slot {index}: {problem}"));
            if slot.cookie < COOKIE_FIRST || slot.cookie >= COOKIE_END {
                return Err(what("cookie out of range"));
            }
            if index > 0 && slot.cookie <= cookie_previous {
                return Err(what("cookies not strictly increasing"));
            }
            cookie_previous = slot.cookie;
            if hash_prefix(cookie_hash(slot.cookie), depth) != prefix {
                return Err(what("hash outside the leaf's prefix"));
            }
            if slot.key_len == 0 || slot.key_len > KEY_LEN_MAX {
                return Err(what("key length out of range"));
            }
            if slot.value_len > VALUE_LEN_MAX {
                return Err(what("value length out of range"));
            }
            if slot.offset < leaf.heap_start
                || slot.offset + slot.key_len + slot.value_len > block_size
            {
                return Err(what("entry bytes outside the heap"));
            }
            bytes_live += slot.key_len + slot.value_len;
        }
        // Slots may not share heap bytes to claim more than the block holds: compaction and
        // splits rely on the entries fitting a fresh leaf of the same size.
        if slots_end as usize + bytes_live > block_size {
            return Err(corrupt(format!(
                "leaf entries claim {bytes_live} heap bytes, more than the block holds"
            )));
        }
        Ok(leaf)
    }

    /// The block's bytes with the header fields brought up to date.
    /// The block's bytes for a change: copied first if still shared with the block as read.
    fn raw_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.raw)
    }

    /// [`Leaf::encode`], the block shared rather than borrowed.
    pub fn encoded(&mut self) -> Arc<Vec<u8>> {
        self.encode();
        self.raw.clone()
    }

    pub fn encode(&mut self) -> &[u8] {
        self.raw_mut()[0..4].copy_from_slice(&LEAF_MAGIC);
        self.raw_mut()[OFFSET_DEPTH] = u8::try_from(self.depth).expect("depth fits a byte");
        self.raw_mut()[5..8].fill(0);
        let prefix = self.prefix.to_le_bytes();
        self.raw_mut()[OFFSET_PREFIX..OFFSET_PREFIX + 8].copy_from_slice(&prefix);
        let count = u32::try_from(self.count).expect("count fits u32");
        self.raw_mut()[OFFSET_COUNT..OFFSET_COUNT + 4].copy_from_slice(&count.to_le_bytes());
        let heap_start = u32::try_from(self.heap_start).expect("heap start fits u32");
        self.raw_mut()[OFFSET_HEAP_START..OFFSET_HEAP_START + 4]
            .copy_from_slice(&heap_start.to_le_bytes());
        self.raw_mut()[24..32].fill(0);
        &self.raw
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn slot(&self, index: usize) -> Slot {
        assert!(index < self.count);
        let base = LEAF_HEADER_SIZE + index * SLOT_SIZE;
        Slot {
            cookie: le_u64(&self.raw, base),
            offset: le_u32(&self.raw, base + 8) as usize,
            key_len: usize::from(le_u16(&self.raw, base + 12)),
            value_len: usize::from(le_u16(&self.raw, base + 14)),
        }
    }

    pub fn key(&self, slot: &Slot) -> &[u8] {
        &self.raw[slot.offset..slot.offset + slot.key_len]
    }

    pub fn value(&self, slot: &Slot) -> &[u8] {
        let start = slot.offset + slot.key_len;
        &self.raw[start..start + slot.value_len]
    }

    /// Index of the first slot whose cookie is ≥ `cookie` (binary search).
    pub fn lower_bound(&self, cookie: u64) -> usize {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = (low + high) / 2;
            if self.slot(middle).cookie < cookie {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// Look for `key` with 48-bit hash `hash`; when absent, choose the smallest free collision
    /// differentiator for it (cookies below [`COOKIE_FIRST`] are never handed out).
    pub fn find(&self, hash: u64, key: &[u8]) -> Found {
        debug_assert_eq!(hash_prefix(hash, self.depth), self.prefix);
        let first = hash << CD_BITS;
        let mut candidate = first.max(COOKIE_FIRST);
        let mut index = self.lower_bound(first);
        while index < self.count {
            let slot = self.slot(index);
            if cookie_hash(slot.cookie) != hash {
                break;
            }
            if self.key(&slot) == key {
                return Found::At(index);
            }
            if slot.cookie == candidate {
                candidate += 1;
            }
            index += 1;
        }
        if candidate - first > CD_MAX {
            Found::Absent(None)
        } else {
            Found::Absent(Some(candidate))
        }
    }

    /// Overwrite the value of slot `index` with one of the same length.
    pub fn set_value_same_length(&mut self, index: usize, value: &[u8]) {
        let slot = self.slot(index);
        assert_eq!(slot.value_len, value.len());
        let start = slot.offset + slot.key_len;
        self.raw_mut()[start..start + value.len()].copy_from_slice(value);
    }

    /// Remove slot `index`; its heap bytes become garbage (reclaimed by compaction).
    pub fn remove_at(&mut self, index: usize) {
        let slot = self.slot(index);
        let base = LEAF_HEADER_SIZE + index * SLOT_SIZE;
        let slots_end = LEAF_HEADER_SIZE + self.count * SLOT_SIZE;
        self.raw_mut()
            .copy_within(base + SLOT_SIZE..slots_end, base);
        self.raw_mut()[slots_end - SLOT_SIZE..slots_end].fill(0);
        self.count -= 1;
        if self.count == 0 {
            self.heap_start = self.raw.len();
        } else if slot.offset == self.heap_start {
            self.heap_start += slot.key_len + slot.value_len;
        }
    }

    fn bytes_live(&self) -> usize {
        (0..self.count)
            .map(|index| {
                let slot = self.slot(index);
                slot.key_len + slot.value_len
            })
            .sum()
    }

    /// Whether an entry of these lengths fits once garbage is compacted away.
    pub fn fits(&self, key_len: usize, value_len: usize) -> bool {
        LEAF_HEADER_SIZE + (self.count + 1) * SLOT_SIZE + self.bytes_live() + key_len + value_len
            <= self.raw.len()
    }

    /// Insert an entry at slot `index` (which must keep cookies sorted). Compacts the heap if
    /// needed. Returns false, leaving the leaf unchanged, if the entry cannot fit.
    pub fn try_insert_at(&mut self, index: usize, cookie: u64, key: &[u8], value: &[u8]) -> bool {
        assert!(index <= self.count);
        assert!(index == 0 || self.slot(index - 1).cookie < cookie);
        assert!(index == self.count || self.slot(index).cookie > cookie);
        let entry_len = key.len() + value.len();
        let slots_end = LEAF_HEADER_SIZE + self.count * SLOT_SIZE;
        if slots_end + SLOT_SIZE + entry_len > self.heap_start {
            if !self.fits(key.len(), value.len()) {
                return false;
            }
            self.compact();
        }
        self.heap_start -= entry_len;
        let offset = self.heap_start;
        self.raw_mut()[offset..offset + key.len()].copy_from_slice(key);
        self.raw_mut()[offset + key.len()..offset + entry_len].copy_from_slice(value);
        let base = LEAF_HEADER_SIZE + index * SLOT_SIZE;
        self.raw_mut()
            .copy_within(base..slots_end, base + SLOT_SIZE);
        self.write_slot(index, cookie, offset, key.len(), value.len());
        self.count += 1;
        true
    }

    fn write_slot(
        &mut self,
        index: usize,
        cookie: u64,
        offset: usize,
        key_len: usize,
        value_len: usize,
    ) {
        let base = LEAF_HEADER_SIZE + index * SLOT_SIZE;
        self.raw_mut()[base..base + 8].copy_from_slice(&cookie.to_le_bytes());
        let offset = u32::try_from(offset).expect("offset fits u32");
        self.raw_mut()[base + 8..base + 12].copy_from_slice(&offset.to_le_bytes());
        let key_len = u16::try_from(key_len).expect("key length fits u16");
        self.raw_mut()[base + 12..base + 14].copy_from_slice(&key_len.to_le_bytes());
        let value_len = u16::try_from(value_len).expect("value length fits u16");
        self.raw_mut()[base + 14..base + 16].copy_from_slice(&value_len.to_le_bytes());
    }

    /// Append an entry whose cookie is greater than every present one (used by split and
    /// compaction, which fill a fresh leaf in cookie order).
    fn push(&mut self, cookie: u64, key: &[u8], value: &[u8]) {
        let inserted = self.try_insert_at(self.count, cookie, key, value);
        assert!(inserted, "a fresh leaf holds what an old one held");
    }

    /// Rewrite the heap without garbage.
    fn compact(&mut self) {
        let mut fresh = Leaf::empty(self.blkid, self.raw.len(), self.depth, self.prefix);
        for index in 0..self.count {
            let slot = self.slot(index);
            fresh.push(slot.cookie, self.key(&slot), self.value(&slot));
        }
        *self = fresh;
    }

    /// Split by the next hash bit: the left half keeps this block, the right half goes to
    /// `right_blkid`.
    pub fn split(&self, right_blkid: u64) -> (Leaf, Leaf) {
        assert!(self.depth < TABLE_DEPTH_MAX);
        let depth = self.depth + 1;
        let block_size = self.raw.len();
        let mut left = Leaf::empty(self.blkid, block_size, depth, self.prefix << 1);
        let mut right = Leaf::empty(right_blkid, block_size, depth, (self.prefix << 1) | 1);
        let right_first_cookie = (right.prefix << (HASH_BITS - depth)) << CD_BITS;
        for index in 0..self.count {
            let slot = self.slot(index);
            let half = if slot.cookie < right_first_cookie {
                &mut left
            } else {
                &mut right
            };
            half.push(slot.cookie, self.key(&slot), self.value(&slot));
        }
        (left, right)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BLOCK_SIZE: usize = 4096;

    fn found_cookie(found: Found) -> u64 {
        match found {
            Found::Absent(Some(cookie)) => cookie,
            _ => panic!("expected a free cookie"),
        }
    }

    #[test]
    fn collision_differentiators_are_smallest_free_and_reused() {
        let mut leaf = Leaf::empty(1, BLOCK_SIZE, 0, 0);
        let hash = 0x1234_5678_9abc;
        let mut cookies = Vec::new();
        for key in [b"a", b"b", b"c"] {
            let cookie = found_cookie(leaf.find(hash, key));
            let index = leaf.lower_bound(cookie);
            assert!(leaf.try_insert_at(index, cookie, key, b"v"));
            cookies.push(cookie);
        }
        assert_eq!(
            cookies,
            vec![
                hash << CD_BITS,
                (hash << CD_BITS) + 1,
                (hash << CD_BITS) + 2
            ]
        );
        assert!(matches!(leaf.find(hash, b"b"), Found::At(1)));
        leaf.remove_at(1);
        // The freed differentiator is reused by the next colliding key.
        assert_eq!(found_cookie(leaf.find(hash, b"d")), (hash << CD_BITS) + 1);
    }

    #[test]
    fn hash_zero_never_gets_a_cookie_below_three() {
        let leaf = Leaf::empty(1, BLOCK_SIZE, 0, 0);
        assert_eq!(found_cookie(leaf.find(0, b"x")), COOKIE_FIRST);
    }

    #[test]
    fn compaction_reclaims_removed_bytes() {
        let mut leaf = Leaf::empty(1, BLOCK_SIZE, 0, 0);
        let value = vec![7u8; 1000];
        for hash in 1..=3u64 {
            let cookie = hash << CD_BITS;
            let index = leaf.lower_bound(cookie);
            assert!(leaf.try_insert_at(index, cookie, b"k", &value));
        }
        assert!(!leaf.fits(1, 1000));
        leaf.remove_at(1); // not at heap start: leaves garbage
        assert!(leaf.fits(1, 1000));
        assert!(leaf.try_insert_at(2, 9 << CD_BITS, b"z", &value));
        assert_eq!(leaf.len(), 3);
        let mut copy = leaf.clone();
        let decoded = Leaf::decode(1, copy.encode().to_vec(), BLOCK_SIZE).unwrap();
        assert_eq!(decoded.value(&decoded.slot(2)), &value[..]);
        assert_eq!(decoded.key(&decoded.slot(0)), b"k");
    }

    #[test]
    fn truncated_count_is_corrupt() {
        let mut leaf = Leaf::empty(5, BLOCK_SIZE, 0, 0);
        assert!(leaf.try_insert_at(0, 100 << CD_BITS, b"k", b"v"));
        let mut raw = leaf.encode().to_vec();
        raw[OFFSET_COUNT..OFFSET_COUNT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Leaf::decode(5, raw.clone(), BLOCK_SIZE),
            Err(KvError::Corrupt { block: 5, .. })
        ));
        raw[OFFSET_COUNT..OFFSET_COUNT + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            Leaf::decode(5, raw.clone(), BLOCK_SIZE),
            Err(KvError::Corrupt { block: 5, .. })
        ));
        assert!(Leaf::decode(5, raw[..100].to_vec(), BLOCK_SIZE).is_err());
    }

    /// Overlapping heap entries: slots pointing at the same bytes could claim more bytes than
    /// a block holds, and compaction or a split (which copy entries into a fresh leaf) would
    /// then overflow it. Decoding must reject such a leaf.
    #[test]
    fn overlapping_entries_claiming_too_much_are_corrupt() {
        let mut leaf = Leaf::empty(4, BLOCK_SIZE, 0, 0);
        let value = vec![1u8; VALUE_LEN_MAX];
        for hash in 1..=3u64 {
            let cookie = hash << CD_BITS;
            assert!(leaf.try_insert_at(leaf.len(), cookie, b"k", &value));
        }
        let mut raw = leaf.encode().to_vec();
        // Add a fourth and fifth slot reusing the first slot's heap bytes.
        let first_slot = raw[LEAF_HEADER_SIZE..LEAF_HEADER_SIZE + SLOT_SIZE].to_vec();
        for extra in 0..2u64 {
            let base = LEAF_HEADER_SIZE + (3 + extra as usize) * SLOT_SIZE;
            raw[base..base + SLOT_SIZE].copy_from_slice(&first_slot);
            raw[base..base + 8].copy_from_slice(&((4 + extra) << CD_BITS).to_le_bytes());
        }
        raw[OFFSET_COUNT..OFFSET_COUNT + 4].copy_from_slice(&5u32.to_le_bytes());
        assert!(matches!(
            Leaf::decode(4, raw, BLOCK_SIZE),
            Err(KvError::Corrupt { block: 4, .. })
        ));
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = Leaf::decode(3, bytes, BLOCK_SIZE);
        }

        #[test]
        fn mutated_leaf_never_panics(
            entries in proptest::collection::btree_map(1u64..(1 << 48), (proptest::collection::vec(any::<u8>(), 1..40), proptest::collection::vec(any::<u8>(), 0..40)), 0..40),
            flips in proptest::collection::vec((0usize..BLOCK_SIZE, any::<u8>()), 1..8),
        ) {
            let mut leaf = Leaf::empty(2, BLOCK_SIZE, 0, 0);
            for (hash, (key, value)) in &entries {
                let cookie = hash << CD_BITS;
                let index = leaf.lower_bound(cookie);
                prop_assert!(leaf.try_insert_at(index, cookie, key, value));
            }
            let mut raw = leaf.encode().to_vec();
            // Valid values round-trip.
            let decoded = Leaf::decode(2, raw.clone(), BLOCK_SIZE).unwrap();
            prop_assert_eq!(decoded.len(), entries.len());
            for (index, (hash, (key, value))) in entries.iter().enumerate() {
                let slot = decoded.slot(index);
                prop_assert_eq!(slot.cookie, hash << CD_BITS);
                prop_assert_eq!(decoded.key(&slot), &key[..]);
                prop_assert_eq!(decoded.value(&slot), &value[..]);
            }
            for (offset, byte) in flips {
                raw[offset] ^= byte;
            }
            if let Ok(leaf) = Leaf::decode(2, raw, BLOCK_SIZE) {
                for index in 0..leaf.len() {
                    let slot = leaf.slot(index);
                    let _ = (leaf.key(&slot), leaf.value(&slot));
                }
            }
        }
    }
}
