//! Key/value objects: tarn's one key/value object type (the equivalent of OpenZFS's fat ZAP).
//!
//! # Overview
//!
//! A key/value object maps byte-string keys (1..=[`KEY_LEN_MAX`] bytes) to byte-string values
//! (0..=[`VALUE_LEN_MAX`] bytes). It serves file-system directories (fast at 100k+ entries,
//! with readdir cookies stable under concurrent insert and remove), the MOS object directory,
//! dataset children and properties, and later deadlist keys, the log space map's txg map,
//! livelists and receive resume state.
//!
//! The map is stored in the data blocks of one object, which this module sees only through the
//! [`KvBlocks`] trait (implemented by the object layer). The API is free functions taking the
//! blocks: [`create`], [`insert`], [`upsert`], [`update`], [`lookup`], [`remove`], [`count`],
//! [`list`], and the u64 helpers [`lookup_u64`], [`insert_u64`], [`upsert_u64`].
//!
//! # On-disk structures
//!
//! Extendible hashing, as the fat ZAP. Block pointers to these blocks carry object type
//! `KeyValue`. All integers are little-endian.
//!
//! - Every key gets a 48-bit hash: the first 8 bytes (LE) of blake3(salt LE ‖ key), shifted right
//!   by 16. The salt is random per object (in the header), so hash order differs between objects
//!   and crafted key sets cannot be aimed at an object they have not seen.
//! - Every entry has a **cookie** = `hash48 << 15 | cd`, where the 15-bit collision
//!   differentiator `cd` is the smallest value not used by another entry with the same hash
//!   (and at least 3 when the hash is 0). Cookies are unique, in `3..2^63`, and never change
//!   while the entry exists (splits move entries between leaves, never re-number them; an
//!   upsert keeps the cookie).
//! - **Block 0** is the header (`header.rs` has the byte diagram): magic, format version, salt,
//!   entry count, block shift, pointer-table geometry, the next unused block id and the leaf
//!   count. Its second half holds the pointer table while that has at most `block_size / 16`
//!   entries; beyond that the table lives in `2^T * 8 / block_size` consecutive blocks of its
//!   own.
//! - The **pointer table** has `2^T` entries (T = table depth); entry `i` is the block id of the
//!   leaf owning hashes whose top T bits are `i`. A leaf of local depth `d ≤ T` is pointed to by
//!   `2^(T-d)` consecutive entries.
//! - **Leaf blocks** (`leaf.rs` has the byte diagram) hold a header (magic, local depth, prefix,
//!   entry count, heap start), a slot array sorted by cookie, and a heap of key and value bytes
//!   growing down from the block's end.
//!
//! # Invariants
//!
//! 1. Every entry lives in the leaf whose prefix is the top `d` bits of its hash; within a leaf,
//!    slots are sorted by strictly increasing cookie. Hence the whole map, read leaf by leaf in
//!    prefix order, is in cookie order.
//! 2. For each table index `i`, the leaf it names has depth `d ≤ T` and prefix `i >> (T - d)`.
//! 3. The header's entry count equals the number of slots in all leaves.
//! 4. Block ids below the header's next block are the header, leaves, the current table, or
//!    holes left by earlier tables; ids are never reused (the object is sparse).
//!
//! Lookup touches O(1) blocks: the header, at most one pointer-table block, and one leaf.
//!
//! # Operations
//!
//! - *Insert*: hash the key, find its leaf, pick a cookie, insert the slot (compacting the heap
//!   if removals left garbage). If the leaf is full it splits by the next hash bit (doubling the
//!   pointer table first when the leaf's depth equals T) and the insert retries. A leaf whose
//!   entries all share the longest indexable prefix (`TABLE_DEPTH_MAX` = 32 bits) cannot split:
//!   [`KvError::Full`]. So does a hash with all 2^15 differentiators in use.
//! - *Remove*: delete the slot. Leaves are never merged and never freed: a map that shrank keeps
//!   its leaves (an emptied leaf costs one block). Merging is left for later; it would not change
//!   the format.
//! - *List*: from a cookie, walk leaves in prefix order, returning slots with cookie ≥ the given
//!   one. **Stability guarantee**: a listing resumed across calls with `last.cookie + 1`, with
//!   any inserts, upserts and removes in between, returns every entry present for the whole
//!   listing exactly once, and never returns anything twice. (Cookies of present entries never
//!   change and the listing visits cookies in strictly increasing order.) Entries inserted or
//!   removed during the listing may or may not be returned.
//! - *Table doubling* copies the table block by block into a new run of blocks at the next
//!   unused id, then frees the old run; the embedded table first doubles in place, then moves
//!   to one block of its own.
//!
//! # Context and locking
//!
//! The functions hold no locks and keep no state between calls: every call reads the header
//! afresh. The caller serialises modifying calls on one object (the object layer's transaction
//! and buffer locks); reads may run concurrently with each other.
//!
//! # Crash behaviour
//!
//! A modifying call writes leaves first, then pointer-table blocks, then the header. The caller
//! puts all writes of one call into one transaction, so a crash exposes either all or none of
//! them (DESIGN.md §3 invariant 7). If a call returns an error part-way (a storage error, or
//! corruption found mid-split), the writes already made are consistent on their own (a split
//! is visible only once the table points at the new leaf) but the caller should not commit a
//! transaction whose operation failed.
//!
//! # Corruption
//!
//! Every block read is validated before use (the header's geometry against the object's block
//! size, every leaf slot, every table pointer against the block-id range, every leaf against
//! the table index that led to it). Bad contents give [`KvError::Corrupt`] naming the block;
//! decoding never panics.

mod header;
mod leaf;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use header::{embedded_capacity, HeaderBlock, HEADER_BLOCK};
use leaf::{hash_prefix, Found, Leaf};

/// Longest key, in bytes. Keys are at least one byte.
pub const KEY_LEN_MAX: usize = 256;
/// Longest value, in bytes. Values may be empty.
pub const VALUE_LEN_MAX: usize = 1024;
/// The smallest cookie ever handed out (FUSE reserves smaller readdir offsets for `.` and `..`).
pub const COOKIE_FIRST: u64 = 3;
/// Cookies are below this (they travel as i64 readdir offsets).
pub const COOKIE_END: u64 = 1 << 63;

/// Bits of key hash kept per entry.
const HASH_BITS: u32 = 48;
/// Bits of collision differentiator in a cookie.
const CD_BITS: u32 = 15;
const CD_MAX: u64 = (1 << CD_BITS) - 1;
/// The deepest pointer table (2^32 entries) and thus the deepest leaf. A leaf at this depth
/// whose entries all share its prefix cannot split further.
const TABLE_DEPTH_MAX: u32 = 32;
/// Splits one insert may need before it is abandoned: one per depth, plus slack.
const SPLITS_PER_INSERT_MAX: u32 = TABLE_DEPTH_MAX + 2;

const _: () = assert!(HASH_BITS + CD_BITS == 63, "cookies must stay below 2^63");
const _: () = assert!(TABLE_DEPTH_MAX <= HASH_BITS);

/// One object's data blocks, as the key/value code sees them. Implemented by the object layer.
pub trait KvBlocks {
    /// The object's data block size in bytes (a power of two, 4 KiB to 128 KiB).
    fn block_size(&self) -> usize;
    /// Read block `blkid`; None if it is a hole (never written or freed). The block is shared
    /// with the cache or the dirty records, not copied.
    fn read_block(&self, blkid: u64) -> Result<Option<Arc<Vec<u8>>>, KvError>;
    /// Replace block `blkid` with `data` (exactly block_size bytes), which the object layer
    /// keeps as it is: an insert copies each block it changes once (to change the copy that
    /// the dirty records or the cache share), not again to hand it over.
    fn write_block(&mut self, blkid: u64, data: Arc<Vec<u8>>) -> Result<(), KvError>;
    /// Turn block `blkid` into a hole.
    fn free_block(&mut self, blkid: u64) -> Result<(), KvError>;
}

/// Errors of key/value operations.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// `insert` of a key that is present.
    #[error("key already exists")]
    Exists,
    /// `update` of a key that is absent.
    #[error("key not found")]
    NotFound,
    /// The key is empty or longer than [`KEY_LEN_MAX`].
    #[error("key length outside 1..={KEY_LEN_MAX} bytes")]
    KeyTooLong,
    /// The value is longer than [`VALUE_LEN_MAX`].
    #[error("value longer than {VALUE_LEN_MAX} bytes")]
    ValueTooLong,
    /// A block read from storage failed validation.
    #[error("key/value object corrupt at block {block}: {what}")]
    Corrupt { what: String, block: u64 },
    /// The storage below failed.
    #[error("key/value storage: {0}")]
    Storage(String),
    /// A pathological hash pile-up: a full leaf cannot be split further.
    #[error("key/value object full: hash pile-up cannot be split")]
    Full,
}

pub type Result<T, E = KvError> = std::result::Result<T, E>;

/// One entry returned by [`list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEntry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Stable position of the entry; resume a listing with `cookie + 1`.
    pub cookie: u64,
}

/// The hash part of a cookie.
fn cookie_hash(cookie: u64) -> u64 {
    cookie >> CD_BITS
}

#[cfg(test)]
thread_local! {
    /// Tests narrow the hash with this mask to force collisions.
    static HASH_MASK_FOR_TESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

/// The 48-bit hash of `key` under `salt`.
fn hash_key(salt: u64, key: &[u8]) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&salt.to_le_bytes());
    hasher.update(key);
    let digest = hasher.finalize();
    let first = u64::from_le_bytes(digest.as_bytes()[0..8].try_into().expect("8-byte slice"));
    let hash = first >> (64 - HASH_BITS);
    #[cfg(test)]
    let hash = hash & HASH_MASK_FOR_TESTS.with(|mask| mask.get());
    hash
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > KEY_LEN_MAX {
        return Err(KvError::KeyTooLong);
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > VALUE_LEN_MAX {
        return Err(KvError::ValueTooLong);
    }
    Ok(())
}

fn read_header(blocks: &dyn KvBlocks) -> Result<HeaderBlock> {
    let raw = blocks.read_block(HEADER_BLOCK)?.ok_or(KvError::Corrupt {
        what: "header block is a hole".into(),
        block: HEADER_BLOCK,
    })?;
    HeaderBlock::decode(raw, blocks.block_size())
}

fn write_header(blocks: &mut dyn KvBlocks, header: &mut HeaderBlock) -> Result<()> {
    header.encode();
    blocks.write_block(HEADER_BLOCK, header.raw.clone())
}

fn write_leaf(blocks: &mut dyn KvBlocks, leaf: &mut Leaf) -> Result<()> {
    let blkid = leaf.blkid;
    blocks.write_block(blkid, leaf.encoded())
}

/// Read a pointer-table block (external table), validated for size.
fn read_table_block(blocks: &dyn KvBlocks, blkid: u64) -> Result<Arc<Vec<u8>>> {
    let raw = blocks.read_block(blkid)?.ok_or(KvError::Corrupt {
        what: "pointer-table block is a hole".into(),
        block: blkid,
    })?;
    if raw.len() != blocks.block_size() {
        return Err(KvError::Corrupt {
            what: format!("pointer-table block is {} bytes", raw.len()),
            block: blkid,
        });
    }
    Ok(raw)
}

fn table_entry(raw: &[u8], index: usize) -> u64 {
    u64::from_le_bytes(
        raw[index * 8..index * 8 + 8]
            .try_into()
            .expect("8-byte slice"),
    )
}

fn set_table_entry(raw: &mut [u8], index: usize, blkid: u64) {
    raw[index * 8..index * 8 + 8].copy_from_slice(&blkid.to_le_bytes());
}

/// The block holding table entry `index` and the entry's position in it.
fn table_position(header: &HeaderBlock, block_size: usize, index: u64) -> (u64, usize) {
    let per_block = (block_size / 8) as u64;
    (
        header.header.table_first_block + index / per_block,
        (index % per_block) as usize,
    )
}

/// Leaf block id from table entry `index`, checked against the block-id range.
fn table_get(blocks: &dyn KvBlocks, header: &HeaderBlock, index: u64) -> Result<u64> {
    let fields = &header.header;
    debug_assert!(index < (1u64 << fields.table_depth));
    let (blkid, table_block) = if fields.table_embedded {
        (header.embedded_get(index), HEADER_BLOCK)
    } else {
        let (table_block, position) = table_position(header, blocks.block_size(), index);
        let raw = read_table_block(blocks, table_block)?;
        (table_entry(&raw, position), table_block)
    };
    let in_table = !fields.table_embedded
        && blkid >= fields.table_first_block
        && blkid - fields.table_first_block < fields.table_block_count;
    if blkid == HEADER_BLOCK || blkid >= fields.next_block || in_table {
        return Err(KvError::Corrupt {
            what: format!("pointer-table entry {index} names block {blkid}, not a leaf"),
            block: table_block,
        });
    }
    Ok(blkid)
}

/// Point table entries `start..end` at `blkid`.
fn table_set_range(
    blocks: &mut dyn KvBlocks,
    header: &mut HeaderBlock,
    start: u64,
    end: u64,
    blkid: u64,
) -> Result<()> {
    assert!(start < end && end <= 1u64 << header.header.table_depth);
    if header.header.table_embedded {
        for index in start..end {
            header.embedded_set(index, blkid);
        }
        return Ok(());
    }
    let block_size = blocks.block_size();
    let mut index = start;
    while index < end {
        let (table_block, position) = table_position(header, block_size, index);
        let mut raw = read_table_block(blocks, table_block)?;
        let in_block = ((block_size / 8 - position) as u64).min(end - index);
        let table: &mut Vec<u8> = Arc::make_mut(&mut raw);
        for offset in 0..in_block as usize {
            set_table_entry(table, position + offset, blkid);
        }
        blocks.write_block(table_block, raw)?;
        index += in_block;
    }
    Ok(())
}

/// Double the pointer table: entry `i` becomes entries `2i` and `2i + 1`. Writes table blocks;
/// the caller writes the header.
fn table_double(blocks: &mut dyn KvBlocks, header: &mut HeaderBlock) -> Result<()> {
    let block_size = blocks.block_size();
    let depth = header.header.table_depth;
    if depth >= TABLE_DEPTH_MAX {
        return Err(KvError::Full);
    }
    let entries_new = 1u64 << (depth + 1);
    if header.header.table_embedded && entries_new <= embedded_capacity(block_size) {
        // In place, from the top down so that no entry is overwritten before it is copied.
        for index in (0..1u64 << depth).rev() {
            let blkid = header.embedded_get(index);
            header.embedded_set(2 * index, blkid);
            header.embedded_set(2 * index + 1, blkid);
        }
        header.header.table_depth = depth + 1;
        return Ok(());
    }
    let per_block = block_size / 8;
    let first_new = header.header.next_block;
    if header.header.table_embedded {
        // The embedded table holds exactly half a block of entries: doubled, one block.
        debug_assert_eq!(entries_new, per_block as u64);
        let mut raw = vec![0u8; block_size];
        for index in 0..1u64 << depth {
            let blkid = header.embedded_get(index);
            set_table_entry(&mut raw, 2 * index as usize, blkid);
            set_table_entry(&mut raw, 2 * index as usize + 1, blkid);
        }
        blocks.write_block(first_new, Arc::new(raw))?;
        header.embedded_clear();
        header.header.table_embedded = false;
        header.header.table_first_block = first_new;
        header.header.table_block_count = 1;
        header.header.next_block = first_new.checked_add(1).ok_or(KvError::Corrupt {
            what: "block ids exhausted".into(),
            block: HEADER_BLOCK,
        })?;
        header.header.table_depth = depth + 1;
        return Ok(());
    }
    let first_old = header.header.table_first_block;
    let count_old = header.header.table_block_count;
    let corrupt_geometry = || KvError::Corrupt {
        what: "pointer table would overflow block ids".into(),
        block: HEADER_BLOCK,
    };
    let next_block = count_old
        .checked_mul(2)
        .and_then(|count| first_new.checked_add(count))
        .ok_or_else(corrupt_geometry)?;
    for old in 0..count_old {
        let raw_old = read_table_block(blocks, first_old + old)?;
        for half in 0..2 {
            let mut raw = vec![0u8; block_size];
            for position in 0..per_block {
                let blkid = table_entry(&raw_old, half * per_block / 2 + position / 2);
                set_table_entry(&mut raw, position, blkid);
            }
            blocks.write_block(first_new + 2 * old + half as u64, Arc::new(raw))?;
        }
    }
    for old in 0..count_old {
        blocks.free_block(first_old + old)?;
    }
    header.header.table_first_block = first_new;
    header.header.table_block_count = 2 * count_old;
    header.header.next_block = next_block;
    header.header.table_depth = depth + 1;
    Ok(())
}

/// Read and validate the leaf owning `hash`.
fn locate(blocks: &dyn KvBlocks, header: &HeaderBlock, hash: u64) -> Result<Leaf> {
    let depth = header.header.table_depth;
    let index = hash_prefix(hash, depth);
    let blkid = table_get(blocks, header, index)?;
    let raw = blocks.read_block(blkid)?.ok_or(KvError::Corrupt {
        what: "leaf block is a hole".into(),
        block: blkid,
    })?;
    let leaf = Leaf::decode(blkid, raw, blocks.block_size())?;
    if leaf.depth > depth || leaf.prefix != index >> (depth - leaf.depth) {
        return Err(KvError::Corrupt {
            what: format!(
                "leaf of depth {} and prefix {:#x} is not the one for table entry {index}",
                leaf.depth, leaf.prefix
            ),
            block: blkid,
        });
    }
    Ok(leaf)
}

/// Split `leaf` by its next hash bit, doubling the table first if needed.
fn split_leaf(blocks: &mut dyn KvBlocks, header: &mut HeaderBlock, leaf: &Leaf) -> Result<()> {
    if leaf.depth >= TABLE_DEPTH_MAX {
        return Err(KvError::Full);
    }
    if leaf.depth == header.header.table_depth {
        table_double(blocks, header)?;
    }
    let right_blkid = header.header.next_block;
    header.header.next_block = right_blkid.checked_add(1).ok_or(KvError::Corrupt {
        what: "block ids exhausted".into(),
        block: HEADER_BLOCK,
    })?;
    header.header.leaf_count += 1;
    let (mut left, mut right) = leaf.split(right_blkid);
    write_leaf(blocks, &mut right)?;
    write_leaf(blocks, &mut left)?;
    let shift = header.header.table_depth - right.depth;
    let start = right.prefix << shift;
    table_set_range(blocks, header, start, start + (1u64 << shift), right_blkid)?;
    write_header(blocks, header)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PutMode {
    Insert,
    Upsert,
    Update,
}

/// Insert or replace; returns whether a new entry was added.
fn put(blocks: &mut dyn KvBlocks, key: &[u8], value: &[u8], mode: PutMode) -> Result<bool> {
    check_key(key)?;
    check_value(value)?;
    let mut header = read_header(blocks)?;
    let hash = hash_key(header.header.salt, key);
    for _ in 0..SPLITS_PER_INSERT_MAX {
        let mut leaf = locate(blocks, &header, hash)?;
        match leaf.find(hash, key) {
            Found::At(index) => {
                if mode == PutMode::Insert {
                    return Err(KvError::Exists);
                }
                let slot = leaf.slot(index);
                if slot.value_len == value.len() {
                    leaf.set_value_same_length(index, value);
                    write_leaf(blocks, &mut leaf)?;
                    return Ok(false);
                }
                let unchanged = leaf.clone();
                leaf.remove_at(index);
                // Keep the cookie, so that a listing in progress neither repeats nor misses it.
                if leaf.try_insert_at(index, slot.cookie, key, value) {
                    write_leaf(blocks, &mut leaf)?;
                    return Ok(false);
                }
                split_leaf(blocks, &mut header, &unchanged)?;
            }
            Found::Absent(cookie) => {
                if mode == PutMode::Update {
                    return Err(KvError::NotFound);
                }
                let cookie = cookie.ok_or(KvError::Full)?;
                let index = leaf.lower_bound(cookie);
                if leaf.try_insert_at(index, cookie, key, value) {
                    write_leaf(blocks, &mut leaf)?;
                    header.header.entry_count =
                        header
                            .header
                            .entry_count
                            .checked_add(1)
                            .ok_or(KvError::Corrupt {
                                what: "entry count overflows".into(),
                                block: HEADER_BLOCK,
                            })?;
                    write_header(blocks, &mut header)?;
                    return Ok(true);
                }
                split_leaf(blocks, &mut header, &leaf)?;
            }
        }
    }
    Err(KvError::Full)
}

/// Initialise an empty key/value object in `blocks` (whose blocks should all be holes), with
/// a random hash salt.
pub fn create(blocks: &mut dyn KvBlocks) -> Result<()> {
    create_with_salt(blocks, rand::random())
}

/// As [`create`], with a given salt (tests, and receive when it reproduces an object).
pub fn create_with_salt(blocks: &mut dyn KvBlocks, salt: u64) -> Result<()> {
    let block_size = blocks.block_size();
    let first_leaf = HEADER_BLOCK + 1;
    let mut header = HeaderBlock::new(block_size, salt, first_leaf);
    let mut leaf = Leaf::empty(first_leaf, block_size, 0, 0);
    write_leaf(blocks, &mut leaf)?;
    write_header(blocks, &mut header)
}

/// Add `key`; [`KvError::Exists`] if it is present.
pub fn insert(blocks: &mut dyn KvBlocks, key: &[u8], value: &[u8]) -> Result<()> {
    put(blocks, key, value, PutMode::Insert).map(|_| ())
}

/// Add `key` or replace its value (its cookie is kept). Returns true if the key was new.
pub fn upsert(blocks: &mut dyn KvBlocks, key: &[u8], value: &[u8]) -> Result<bool> {
    put(blocks, key, value, PutMode::Upsert)
}

/// Replace the value of a present key (its cookie is kept); [`KvError::NotFound`] if absent.
pub fn update(blocks: &mut dyn KvBlocks, key: &[u8], value: &[u8]) -> Result<()> {
    put(blocks, key, value, PutMode::Update).map(|_| ())
}

/// The value and the leaf block id of `key`.
fn lookup_with_block(blocks: &dyn KvBlocks, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
    check_key(key)?;
    let header = read_header(blocks)?;
    let hash = hash_key(header.header.salt, key);
    let leaf = locate(blocks, &header, hash)?;
    Ok(match leaf.find(hash, key) {
        Found::At(index) => Some((leaf.value(&leaf.slot(index)).to_vec(), leaf.blkid)),
        Found::Absent(_) => None,
    })
}

/// The value of `key`, if present. Reads at most three blocks.
pub fn lookup(blocks: &dyn KvBlocks, key: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(lookup_with_block(blocks, key)?.map(|(value, _)| value))
}

/// Remove `key`; returns whether it was present.
pub fn remove(blocks: &mut dyn KvBlocks, key: &[u8]) -> Result<bool> {
    check_key(key)?;
    let mut header = read_header(blocks)?;
    let hash = hash_key(header.header.salt, key);
    let mut leaf = locate(blocks, &header, hash)?;
    let Found::At(index) = leaf.find(hash, key) else {
        return Ok(false);
    };
    let count = header
        .header
        .entry_count
        .checked_sub(1)
        .ok_or(KvError::Corrupt {
            what: "entry count is zero but a leaf holds an entry".into(),
            block: HEADER_BLOCK,
        })?;
    leaf.remove_at(index);
    write_leaf(blocks, &mut leaf)?;
    header.header.entry_count = count;
    write_header(blocks, &mut header)?;
    Ok(true)
}

/// Number of entries (from the header; one block read).
pub fn count(blocks: &dyn KvBlocks) -> Result<u64> {
    Ok(read_header(blocks)?.header.entry_count)
}

/// Up to `max_entries` entries in increasing cookie order, starting at the first entry whose
/// cookie is ≥ `cookie`. Resume with `last.cookie + 1`; an empty result means the end. See the
/// module documentation for the stability guarantee across resumed calls.
pub fn list(blocks: &dyn KvBlocks, cookie: u64, max_entries: usize) -> Result<Vec<KvEntry>> {
    let mut entries = Vec::new();
    if max_entries == 0 || cookie >= COOKIE_END {
        return Ok(entries);
    }
    let header = read_header(blocks)?;
    let mut cookie = cookie.max(COOKIE_FIRST);
    loop {
        let hash = cookie_hash(cookie);
        let leaf = locate(blocks, &header, hash)?;
        for index in leaf.lower_bound(cookie)..leaf.len() {
            let slot = leaf.slot(index);
            entries.push(KvEntry {
                key: leaf.key(&slot).to_vec(),
                value: leaf.value(&slot).to_vec(),
                cookie: slot.cookie,
            });
            if entries.len() == max_entries {
                return Ok(entries);
            }
        }
        // The next leaf starts where this leaf's prefix range ends; this strictly advances.
        let hash_next = (leaf.prefix + 1) << (HASH_BITS - leaf.depth);
        if hash_next >= 1u64 << HASH_BITS {
            return Ok(entries);
        }
        cookie = hash_next << CD_BITS;
    }
}

fn u64_value(value: &[u8], blkid: u64) -> Result<u64> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| KvError::Corrupt {
        what: format!("u64 entry holds a {}-byte value", value.len()),
        block: blkid,
    })?;
    Ok(u64::from_le_bytes(bytes))
}

/// The u64 (LE, 8 bytes) stored under a string key. A present value of another length is
/// reported as corruption of its leaf.
pub fn lookup_u64(blocks: &dyn KvBlocks, key: &str) -> Result<Option<u64>> {
    lookup_with_block(blocks, key.as_bytes())?
        .map(|(value, blkid)| u64_value(&value, blkid))
        .transpose()
}

/// Insert a u64 (LE) under a string key; [`KvError::Exists`] if present.
pub fn insert_u64(blocks: &mut dyn KvBlocks, key: &str, value: u64) -> Result<()> {
    insert(blocks, key.as_bytes(), &value.to_le_bytes())
}

/// Insert or replace a u64 (LE) under a string key; returns true if the key was new.
pub fn upsert_u64(blocks: &mut dyn KvBlocks, key: &str, value: u64) -> Result<bool> {
    upsert(blocks, key.as_bytes(), &value.to_le_bytes())
}
