//! The pool's queue of block trees being destroyed in the background (OpenZFS bptree.c and the
//! async-destroy half of dsl_scan.c).
//!
//! # Overview
//! Destroying a dataset must not cost one giant txg nor memory that grows with the dataset
//! (DESIGN.md §4 "Frees are background work"). So destroy only *queues* the dataset's object-set
//! root here, with the birth txg at or below which nothing is freed (blocks an older snapshot
//! still holds) and a resume [`Bookmark`], and returns. Then every txg, in syncing context,
//! [`BpTree::free_some`] walks the queued trees in post-order from their bookmarks
//! ([`crate::object::traverse`]), freeing each block it visits, until the caller's pause rule
//! says stop, and saves the bookmark in the same txg as the frees. A crash or export at any point
//! resumes from the last synced bookmark: the blocks before it were freed in the txgs that moved
//! it, the blocks after it are untouched and still readable.
//!
//! # On-disk structures
//! One MOS object of type [`ObjectType::BpTree`], named by the MOS directory entry `bptree`.
//! Header (bonus buffer, little-endian):
//!
//! ```text
//! byte  0                                       8                                       16
//!       +---------------------------------------+---------------------------------------+
//!   0   | begin u64 (first unfinished entry)    | end u64 (entries written)             |
//!  16   | used_bytes u64 (still to free)        | compressed_bytes u64                  |
//!  32   | uncompressed_bytes u64                | reserved u64 (zero)                   |
//!  48   +---------------------------------------+---------------------------------------+
//! ```
//!
//! Entry `i` at byte `i * 192` of the object:
//!
//! ```text
//!   0  root block pointer (128 bytes; the object-set header block of the destroyed dataset)
//! 128  min_birth u64: blocks born at or before it are not freed
//! 136  bookmark: object u64, blkid u64 (the next data block to free)
//! 152  flags u64: bit 0 = the walk hit an unreadable block and the entry is set aside
//! 160  reserved (32 bytes, zero)
//! ```
//!
//! The header's totals are the space still to be freed (the pool property `freeing`): an entry
//! adds its dataset's figures when queued, each freed block takes its own off. When `begin`
//! reaches `end` the object is emptied and the totals are zero.
//!
//! # Damage
//! A block of a queued tree that cannot be read stops that entry: it is flagged (its remaining
//! space stays in `freeing`, as OpenZFS keeps it unless `zfs_free_leak_on_eio`), the error is
//! reported to the caller, and the other entries go on. Later finished entries cannot advance
//! `begin` past a flagged one; they are marked finished in place. A flagged entry is retried
//! when the caller asks (once after each import): it resumes from its bookmark, which the
//! failed chunk never moved. A gang block of the tree whose header cannot be read is not the
//! walk's concern: the walk reads no data block, and the caller's `free` sets such a block
//! aside (`pool/background_free.rs`) and lets the entry go on.

use crate::block::blkptr::{BlockPtr, ObjectType, BLKPTR_SIZE};
use crate::block::pipeline::BlockIo;
use crate::object::bpobj::BpSpace;
use crate::object::traverse::{walk_post_order, Bookmark, WalkEnd, BOOKMARK_SIZE};
use crate::object::{ObjectError, ObjectProps, ObjectSet, Tx};
use crate::types::{ObjectId, Txg};

/// Bytes of the queue header.
pub const BPTREE_HEADER_SIZE: usize = 48;
/// Bytes of one queue entry.
pub const BPTREE_ENTRY_SIZE: usize = 192;
const ENTRY_FLAG_FAILED: u64 = 1;
/// Data blocks freed between two consultations of the pause rule.
const FREE_CHUNK_BLOCKS: u64 = 2048;

const _: () = assert!(BPTREE_HEADER_SIZE <= crate::object::phys::DNODE_BONUS_SIZE_MAX);
const _: () = assert!(BLKPTR_SIZE + 24 + BOOKMARK_SIZE + 24 <= BPTREE_ENTRY_SIZE);

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn corrupt(what: impl std::fmt::Display) -> ObjectError {
    ObjectError::Corrupt(format!("background destroy queue: {what}"))
}

/// The queue header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpTreeHeader {
    pub begin: u64,
    pub end: u64,
    pub space: BpSpace,
}

impl BpTreeHeader {
    pub fn encode(&self) -> [u8; BPTREE_HEADER_SIZE] {
        let mut bytes = [0u8; BPTREE_HEADER_SIZE];
        for (index, value) in [
            self.begin,
            self.end,
            self.space.used_bytes,
            self.space.compressed_bytes,
            self.space.uncompressed_bytes,
        ]
        .iter()
        .enumerate()
        {
            bytes[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<BpTreeHeader, ObjectError> {
        if bytes.len() < BPTREE_HEADER_SIZE {
            return Err(corrupt(format!("header of {} bytes", bytes.len())));
        }
        if word(bytes, 40) != 0 {
            return Err(corrupt("reserved header word is not zero"));
        }
        let header = BpTreeHeader {
            begin: word(bytes, 0),
            end: word(bytes, 8),
            space: BpSpace {
                used_bytes: word(bytes, 16),
                compressed_bytes: word(bytes, 24),
                uncompressed_bytes: word(bytes, 32),
            },
        };
        if header.begin > header.end {
            return Err(corrupt(format!(
                "begin {} past end {}",
                header.begin, header.end
            )));
        }
        Ok(header)
    }
}

/// One queued tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpTreeEntry {
    /// The object-set header block; a hole once the entry is finished.
    pub root: BlockPtr,
    pub min_birth: Txg,
    pub bookmark: Bookmark,
    pub failed: bool,
}

impl BpTreeEntry {
    pub fn encode(&self) -> [u8; BPTREE_ENTRY_SIZE] {
        let mut bytes = [0u8; BPTREE_ENTRY_SIZE];
        self.root.encode_into(&mut bytes[..BLKPTR_SIZE]);
        bytes[128..136].copy_from_slice(&self.min_birth.0.to_le_bytes());
        bytes[136..152].copy_from_slice(&self.bookmark.encode());
        let flags = if self.failed { ENTRY_FLAG_FAILED } else { 0 };
        bytes[152..160].copy_from_slice(&flags.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<BpTreeEntry, ObjectError> {
        if bytes.len() != BPTREE_ENTRY_SIZE {
            return Err(corrupt(format!("entry of {} bytes", bytes.len())));
        }
        let root = BlockPtr::decode(&bytes[..BLKPTR_SIZE])?;
        let flags = word(bytes, 152);
        if flags & !ENTRY_FLAG_FAILED != 0 || bytes[160..].iter().any(|&byte| byte != 0) {
            return Err(corrupt("reserved entry bits set"));
        }
        if !root.is_hole() && (root.object_type != ObjectType::Objset || root.level != 0) {
            return Err(corrupt(format!(
                "entry root is a level-{} {:?} block, not an object-set header",
                root.level, root.object_type
            )));
        }
        Ok(BpTreeEntry {
            root,
            min_birth: Txg(word(bytes, 128)),
            bookmark: Bookmark::decode(&bytes[136..152])?,
            failed: flags & ENTRY_FLAG_FAILED != 0,
        })
    }

    fn finished(&self) -> bool {
        self.root.is_hole()
    }
}

/// What one round of [`BpTree::free_some`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FreeRound {
    pub blocks_freed: u64,
    pub space_freed: BpSpace,
    /// Entries that hit an unreadable block this round, with the error.
    pub failures: Vec<String>,
    /// Whether live (unfinished, not failed) entries remain.
    pub work_left: bool,
    /// Whether the round stopped for the budget or the pause rule before the last entry.
    pub paused: bool,
}

/// The queue, open on the MOS.
pub struct BpTree<'a> {
    mos: &'a ObjectSet,
    object: ObjectId,
    header: BpTreeHeader,
}

impl<'a> BpTree<'a> {
    /// Create an empty queue object in `tx`.
    pub fn create(mos: &ObjectSet, tx: &Tx, props: ObjectProps) -> Result<ObjectId, ObjectError> {
        let props = ObjectProps {
            object_type: ObjectType::BpTree,
            ..props
        };
        mos.create_object(
            tx,
            props,
            ObjectType::BpTree,
            &BpTreeHeader::default().encode(),
        )
    }

    pub fn open(mos: &'a ObjectSet, object: ObjectId) -> Result<BpTree<'a>, ObjectError> {
        let info = mos.info(object)?;
        if info.object_type != ObjectType::BpTree {
            return Err(corrupt(format!(
                "object {object} has type {:?}",
                info.object_type
            )));
        }
        let header = BpTreeHeader::decode(&mos.bonus(object)?)?;
        let capacity = (info.max_blkid + 1).saturating_mul(info.data_block_size as u64);
        if header.end > capacity / BPTREE_ENTRY_SIZE as u64 {
            return Err(corrupt(format!(
                "{} entries in an object of {capacity} bytes",
                header.end
            )));
        }
        Ok(BpTree {
            mos,
            object,
            header,
        })
    }

    pub fn header(&self) -> BpTreeHeader {
        self.header
    }

    /// Space still to be freed (the pool's `freeing`).
    pub fn space(&self) -> BpSpace {
        self.header.space
    }

    fn entry(&self, index: u64) -> Result<BpTreeEntry, ObjectError> {
        let mut bytes = [0u8; BPTREE_ENTRY_SIZE];
        self.mos
            .read(self.object, index * BPTREE_ENTRY_SIZE as u64, &mut bytes)?;
        BpTreeEntry::decode(&bytes).map_err(|error| corrupt(format!("entry {index}: {error}")))
    }

    fn save_entry(&self, tx: &Tx, index: u64, entry: &BpTreeEntry) -> Result<(), ObjectError> {
        self.mos.write(
            tx,
            self.object,
            index * BPTREE_ENTRY_SIZE as u64,
            &entry.encode(),
        )
    }

    fn save_header(&self, tx: &Tx) -> Result<(), ObjectError> {
        self.mos
            .set_bonus(tx, self.object, ObjectType::BpTree, &self.header.encode())
    }

    /// Queue the tree under `root` (blocks born after `min_birth`), which holds `space`.
    pub fn enqueue(
        &mut self,
        tx: &Tx,
        root: &BlockPtr,
        min_birth: Txg,
        space: BpSpace,
    ) -> Result<(), ObjectError> {
        if root.is_hole() {
            return Ok(());
        }
        let entry = BpTreeEntry {
            root: root.clone(),
            min_birth,
            bookmark: Bookmark::default(),
            failed: false,
        };
        self.save_entry(tx, self.header.end, &entry)?;
        self.header.end += 1;
        add_space(&mut self.header.space, space);
        self.save_header(tx)
    }

    /// Whether any entry still has blocks to free that can be read.
    pub fn has_live_entries(&self) -> Result<bool, ObjectError> {
        for index in self.header.begin..self.header.end {
            let entry = self.entry(index)?;
            if !entry.finished() && !entry.failed {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether any entry was set aside after an unreadable block (to be retried).
    pub fn has_failed_entries(&self) -> Result<bool, ObjectError> {
        for index in self.header.begin..self.header.end {
            let entry = self.entry(index)?;
            if !entry.finished() && entry.failed {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every block not yet freed, for `check`: the unvisited rest of each live or failed entry.
    pub fn visit_pending_blocks(
        &self,
        io: &BlockIo,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        for index in self.header.begin..self.header.end {
            let entry = self.entry(index)?;
            if entry.finished() {
                continue;
            }
            let mut unlimited = u64::MAX;
            walk_post_order(
                io,
                &entry.root,
                entry.min_birth,
                entry.bookmark,
                &mut unlimited,
                visit,
            )?;
        }
        Ok(())
    }

    /// Free blocks of the queued trees in order, handing each to `free`, until `max_blocks`
    /// data blocks are freed or `should_pause` (asked every few thousand blocks) says stop.
    /// With `retry_failed`, entries set aside after an unreadable block are tried again.
    /// Bookmarks, finished entries and the totals are saved in `tx`, with the frees.
    pub fn free_some(
        &mut self,
        io: &BlockIo,
        tx: &Tx,
        max_blocks: u64,
        retry_failed: bool,
        free: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
        should_pause: &mut dyn FnMut() -> bool,
    ) -> Result<FreeRound, ObjectError> {
        let mut round = FreeRound::default();
        let mut data_blocks_freed = 0;
        let mut index = self.header.begin;
        let mut paused = false;
        while index < self.header.end && !paused {
            let mut entry = self.entry(index)?;
            if entry.finished() || (entry.failed && !retry_failed) {
                index += 1;
                continue;
            }
            entry.failed = false;
            loop {
                // A chunk's blocks are freed only once its walk succeeded, so a walk that stops
                // at an unreadable block leaves the bookmark exact (memory: one chunk of
                // pointers).
                let mut budget =
                    FREE_CHUNK_BLOCKS.min(max_blocks.saturating_sub(data_blocks_freed));
                let mut chunk: Vec<BlockPtr> = Vec::new();
                let walked = walk_post_order(
                    io,
                    &entry.root,
                    entry.min_birth,
                    entry.bookmark,
                    &mut budget,
                    &mut |bp| {
                        chunk.push(bp.clone());
                        Ok(())
                    },
                );
                if walked.is_ok() {
                    data_blocks_freed += chunk.iter().filter(|bp| bp.level == 0).count() as u64;
                    for bp in &chunk {
                        free(bp)?;
                        let space = BpSpace::of(bp, io.dsize(bp));
                        add_space(&mut round.space_freed, space);
                        sub_space(&mut self.header.space, space);
                    }
                    round.blocks_freed += chunk.len() as u64;
                }
                match walked {
                    Ok(WalkEnd::Done) => {
                        entry.root = BlockPtr::hole(Txg(0), ObjectType::None, 0);
                        entry.bookmark = Bookmark::default();
                        break;
                    }
                    Ok(WalkEnd::Paused(bookmark)) => {
                        entry.bookmark = bookmark;
                        if data_blocks_freed >= max_blocks || should_pause() {
                            paused = true;
                            break;
                        }
                    }
                    Err(error @ (ObjectError::Pipeline(_) | ObjectError::Corrupt(_))) => {
                        // Nothing of the failed chunk was freed: the bookmark still holds.
                        round.failures.push(format!("entry {index}: {error}"));
                        entry.failed = true;
                        break;
                    }
                    Err(error) => return Err(error),
                }
            }
            self.save_entry(tx, index, &entry)?;
            index += 1;
        }
        // Advance `begin` over finished entries; empty the queue when all are done.
        while self.header.begin < self.header.end && self.entry(self.header.begin)?.finished() {
            self.header.begin += 1;
        }
        if self.header.begin == self.header.end && self.header.end > 0 {
            self.mos.free_range(tx, self.object, 0, u64::MAX)?;
            self.header = BpTreeHeader::default();
        }
        self.save_header(tx)?;
        round.work_left = self.has_live_entries()?;
        round.paused = paused;
        Ok(round)
    }
}

fn add_space(total: &mut BpSpace, part: BpSpace) {
    total.used_bytes += part.used_bytes;
    total.compressed_bytes += part.compressed_bytes;
    total.uncompressed_bytes += part.uncompressed_bytes;
}

/// Freed space comes off the queue's totals; the totals were estimates made at enqueue (the
/// dataset's figures), so they stop at zero rather than wrap.
fn sub_space(total: &mut BpSpace, part: BpSpace) {
    total.used_bytes = total.used_bytes.saturating_sub(part.used_bytes);
    total.compressed_bytes = total.compressed_bytes.saturating_sub(part.compressed_bytes);
    total.uncompressed_bytes = total
        .uncompressed_bytes
        .saturating_sub(part.uncompressed_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_entries_round_trip_and_reject_damage() {
        let header = BpTreeHeader {
            begin: 2,
            end: 5,
            space: BpSpace {
                used_bytes: 10,
                compressed_bytes: 20,
                uncompressed_bytes: 30,
            },
        };
        assert_eq!(BpTreeHeader::decode(&header.encode()).unwrap(), header);
        let backwards = BpTreeHeader { begin: 6, ..header };
        assert!(BpTreeHeader::decode(&backwards.encode()).is_err());
        assert!(BpTreeHeader::decode(&[0u8; 7]).is_err());

        let mut root = BlockPtr::hole(Txg(9), ObjectType::Objset, 0);
        root.dvas[0] = crate::block::blkptr::Dva {
            vdev: crate::types::VdevId(0),
            offset: 0x4000,
            size_allocated: 0x1000,
            gang: false,
        };
        root.size_logical = 1024;
        root.size_physical = 1024;
        root.fill_count = 1;
        root.birth_physical = Txg(9);
        let entry = BpTreeEntry {
            root,
            min_birth: Txg(3),
            bookmark: Bookmark {
                object: 7,
                blkid: 11,
            },
            failed: true,
        };
        let bytes = entry.encode();
        assert_eq!(BpTreeEntry::decode(&bytes).unwrap(), entry);
        let mut reserved = bytes;
        reserved[170] = 1;
        assert!(BpTreeEntry::decode(&reserved).is_err());
        let mut wrong_type = entry.clone();
        wrong_type.root.object_type = ObjectType::PlainFile;
        assert!(BpTreeEntry::decode(&wrong_type.encode()).is_err());
    }

    // Fuzzers of the header and entry decoders (docs/design/invariants.md §6, invariant 6;
    // `crate::fuzz` says how to run them long).
    proptest::proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn header_decoder_never_panics(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 6),
            mutations in crate::fuzz::mutations(),
        ) {
            let valid: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
            let bytes = crate::fuzz::mutate(valid, &mutations);
            if let Ok(header) = BpTreeHeader::decode(&bytes) {
                proptest::prop_assert_eq!(&header.encode()[..], &bytes[..BPTREE_HEADER_SIZE]);
            }
        }

        #[test]
        fn entry_decoder_never_panics(
            root in crate::block::blkptr::tests::normal_strategy(),
            min_birth: u64,
            object: u64,
            blkid: u64,
            failed: bool,
            mutations in crate::fuzz::mutations(),
        ) {
            let mut root = root;
            root.object_type = ObjectType::Objset;
            root.level = 0;
            let entry = BpTreeEntry {
                root,
                min_birth: Txg(min_birth),
                bookmark: Bookmark { object, blkid },
                failed,
            };
            let bytes = crate::fuzz::mutate(entry.encode().to_vec(), &mutations);
            if let Ok(entry) = BpTreeEntry::decode(&bytes) {
                proptest::prop_assert_eq!(&entry.encode()[..], &bytes[..]);
            }
        }
    }
}
