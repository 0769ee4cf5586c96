//! Block-pointer lists (OpenZFS bpobj.c): the one on-disk list of block pointers that deferred
//! frees, the pool's pending frees, snapshot deadlists and clone livelists all use
//! (DESIGN.md §4 "One block-pointer list format").
//!
//! # Overview
//! A list is an object of type [`ObjectType::BlockPtrList`] whose data is an array of 128-byte
//! entries and whose bonus buffer is a 64-byte header carrying the entry count and the list's
//! space totals. Whole lists merge in constant time: [`BpObj::enqueue_sublist`] adds another
//! list's object id to this list's *sub-list array* (an [`ObjectType::ObjectArray`] of u64 object
//! ids) and adds its totals to this header, without reading a single entry. A list's totals
//! always include its sub-lists', so "how much space does this deadlist hold" is one header read.
//!
//! # On-disk structures
//! Header (the list object's bonus buffer, little-endian):
//!
//! ```text
//! byte  0                                       8                                       16
//!       +---------------------------------------+---------------------------------------+
//!   0   | entry_count u64 (own array only)      | used_bytes u64 (net, all copies)      |
//!  16   | compressed_bytes u64 (net physical)   | uncompressed_bytes u64 (net logical)  |
//!  32   | sublist_array u64 (object id, 0=none) | sublist_count u64                     |
//!  48   | freed_count u64 (own FREE entries)    | reserved u64 (zero)                   |
//!  64   +---------------------------------------+---------------------------------------+
//! ```
//!
//! Entry `i` sits at byte `i * 128` of the list object: a block pointer as
//! [`crate::block::blkptr`] lays it out, except that bit 7 of byte 60 (a flag bit block pointers
//! in trees never set) is the entry's FREE flag. A FREE entry records that the block was freed
//! after an earlier entry recorded its allocation (livelists); it counts negatively in the
//! totals, which are therefore *net* and kept with wrapping arithmetic (a consistent list never
//! goes below zero). Holes and embedded pointers own no space and are never listed.
//!
//! Sub-list `j`'s object id is the u64 at byte `j * 8` of the sub-list array. A sub-list is a
//! list in its own right and may have sub-lists; nesting deeper than [`SUBLIST_DEPTH_MAX`] is
//! corruption (it also stops a cycle on a damaged disk from recursing forever).
//!
//! # Operations and their cost
//! - `append`: one write of the new entries (read-modify-write of the last partly filled block)
//!   and one header update.
//! - `enqueue_sublist`: one header read of the sub-list, one u64 write, one header update.
//! - `space`: the header alone.
//! - `iterate`: every entry, one data block in memory at a time (sub-lists recursively, at most
//!   [`SUBLIST_DEPTH_MAX`] levels deep), read only.
//! - `drain`: removes entries from the end (the last sub-list first, then the own array from its
//!   last entry back) handing each to a callback, until a budget of entries is spent; the list is
//!   truncated as it goes, so the work is resumable from whatever the last synced txg holds and
//!   memory stays at one block however long the list. Emptied sub-lists are destroyed.
//! - `clear`: empties a list without sub-lists in one step, keeping its first block.
//!
//! # Trust
//! Headers, counts and entries come from disk: every count is checked against the object's size
//! and every entry is decoded as an untrusted block pointer, so a damaged list is a
//! [`ObjectError::Corrupt`] naming the list, never a panic.
//!
//! # Context
//! Lists are changed by one thread at a time for a given list (the sync thread for pool lists);
//! the caller serializes. Changes go through the object set's transactions like any object.

use std::collections::HashSet;

use crate::block::blkptr::{BlockPtr, ObjectType, BLKPTR_SIZE};
use crate::object::{ObjectError, ObjectProps, ObjectSet, Tx};
use crate::types::ObjectId;

/// Bytes of the list header in the bonus buffer.
pub const BPOBJ_HEADER_SIZE: usize = 64;
/// Bytes of one entry.
pub const BPOBJ_ENTRY_SIZE: usize = BLKPTR_SIZE;
/// Deepest nesting of sub-lists accepted from disk.
pub const SUBLIST_DEPTH_MAX: u32 = 16;
/// Byte of an entry holding its flags, and the bit of it that marks a FREE entry.
const ENTRY_FLAGS_OFFSET: usize = 60;
const ENTRY_FLAG_FREE: u8 = 1 << 7;

const _: () = assert!(BPOBJ_HEADER_SIZE <= crate::object::phys::DNODE_BONUS_SIZE_MAX);

/// The storage a list lives in: objects with a bonus header and a byte array. Implemented for
/// [`ObjectSet`] (every real list) and, in tests, in memory.
pub trait BpObjStore {
    /// Create an object of `object_type` with `header` as its bonus buffer.
    fn create(
        &self,
        tx: &Tx,
        object_type: ObjectType,
        header: &[u8],
    ) -> Result<ObjectId, ObjectError>;
    fn remove(&self, tx: &Tx, object: ObjectId) -> Result<(), ObjectError>;
    fn object_type(&self, object: ObjectId) -> Result<ObjectType, ObjectError>;
    fn header(&self, object: ObjectId) -> Result<Vec<u8>, ObjectError>;
    fn set_header(&self, tx: &Tx, object: ObjectId, header: &[u8]) -> Result<(), ObjectError>;
    /// Bytes the object can hold without growing (its blocks times their size): an upper bound
    /// for counts read from disk.
    fn capacity(&self, object: ObjectId) -> Result<u64, ObjectError>;
    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError>;
    fn write(&self, tx: &Tx, object: ObjectId, offset: u64, data: &[u8])
        -> Result<(), ObjectError>;
    /// Drop every byte from `length` on.
    fn truncate(&self, tx: &Tx, object: ObjectId, length: u64) -> Result<(), ObjectError>;
    /// Bytes read per step when walking a list (the object's block size).
    fn chunk_size(&self, object: ObjectId) -> Result<usize, ObjectError>;
    /// The bytes `bp` counts for in a list's totals ([`crate::block::pipeline::BlockIo::dsize`]).
    fn dsize(&self, bp: &BlockPtr) -> u64;
}

/// An object set as list storage; new list and sub-list-array objects take `props` (whose
/// object type is replaced by the kind being created).
pub struct ObjectSetBpStore<'a> {
    pub objset: &'a ObjectSet,
    pub props: ObjectProps,
}

impl BpObjStore for ObjectSetBpStore<'_> {
    fn create(
        &self,
        tx: &Tx,
        object_type: ObjectType,
        header: &[u8],
    ) -> Result<ObjectId, ObjectError> {
        let props = ObjectProps {
            object_type,
            ..self.props
        };
        self.objset.create_object(tx, props, object_type, header)
    }

    fn remove(&self, tx: &Tx, object: ObjectId) -> Result<(), ObjectError> {
        self.objset.remove_object(tx, object)
    }

    fn object_type(&self, object: ObjectId) -> Result<ObjectType, ObjectError> {
        Ok(self.objset.info(object)?.object_type)
    }

    fn header(&self, object: ObjectId) -> Result<Vec<u8>, ObjectError> {
        self.objset.bonus(object)
    }

    fn set_header(&self, tx: &Tx, object: ObjectId, header: &[u8]) -> Result<(), ObjectError> {
        self.objset
            .set_bonus(tx, object, ObjectType::BlockPtrList, header)
    }

    fn capacity(&self, object: ObjectId) -> Result<u64, ObjectError> {
        let info = self.objset.info(object)?;
        Ok((info.max_blkid + 1).saturating_mul(info.data_block_size as u64))
    }

    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        self.objset.read(object, offset, buf)
    }

    fn write(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ObjectError> {
        self.objset.write(tx, object, offset, data)
    }

    fn truncate(&self, tx: &Tx, object: ObjectId, length: u64) -> Result<(), ObjectError> {
        self.objset.free_range(tx, object, length, u64::MAX)
    }

    fn chunk_size(&self, object: ObjectId) -> Result<usize, ObjectError> {
        Ok(self.objset.info(object)?.data_block_size as usize)
    }

    fn dsize(&self, bp: &BlockPtr) -> u64 {
        self.objset.io().dsize(bp)
    }
}

/// Net space held by a list (sub-lists included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpSpace {
    /// Allocated bytes, every copy.
    pub used_bytes: u64,
    /// Physical (stored, after compression) bytes.
    pub compressed_bytes: u64,
    /// Logical bytes, as datasets account them (`BlockPtr::size_uncompressed_accounted`:
    /// metadata counts its physical size).
    pub uncompressed_bytes: u64,
}

impl BpSpace {
    /// The space one block pointer stands for, with `used_bytes` its [`crate::block::pipeline::BlockIo::dsize`].
    pub fn of(bp: &BlockPtr, used_bytes: u64) -> BpSpace {
        BpSpace {
            used_bytes,
            compressed_bytes: bp.size_physical as u64,
            uncompressed_bytes: bp.size_uncompressed_accounted(),
        }
    }

    pub fn add(&mut self, other: BpSpace) {
        self.used_bytes = self.used_bytes.wrapping_add(other.used_bytes);
        self.compressed_bytes = self.compressed_bytes.wrapping_add(other.compressed_bytes);
        self.uncompressed_bytes = self
            .uncompressed_bytes
            .wrapping_add(other.uncompressed_bytes);
    }

    pub fn sub(&mut self, other: BpSpace) {
        self.used_bytes = self.used_bytes.wrapping_sub(other.used_bytes);
        self.compressed_bytes = self.compressed_bytes.wrapping_sub(other.compressed_bytes);
        self.uncompressed_bytes = self
            .uncompressed_bytes
            .wrapping_sub(other.uncompressed_bytes);
    }

    /// The space an entry of a list in `store` contributes to its totals (negative for a
    /// FREE entry).
    fn of_entry(entry: &BpObjEntry, store: &dyn BpObjStore) -> BpSpace {
        let mut space = BpSpace::default();
        let own = BpSpace::of(&entry.bp, store.dsize(&entry.bp));
        if entry.free {
            space.sub(own);
        } else {
            space.add(own);
        }
        space
    }
}

/// One list entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpObjEntry {
    pub bp: BlockPtr,
    /// The entry records a free of a block allocated earlier (livelists).
    pub free: bool,
}

impl BpObjEntry {
    pub fn alloc(bp: BlockPtr) -> BpObjEntry {
        BpObjEntry { bp, free: false }
    }

    pub fn encode(&self) -> [u8; BPOBJ_ENTRY_SIZE] {
        let mut bytes = self.bp.encode();
        if self.free {
            bytes[ENTRY_FLAGS_OFFSET] |= ENTRY_FLAG_FREE;
        }
        bytes
    }

    /// Decode an untrusted entry.
    pub fn decode(bytes: &[u8]) -> Result<BpObjEntry, String> {
        if bytes.len() != BPOBJ_ENTRY_SIZE {
            return Err(format!("entry of {} bytes", bytes.len()));
        }
        let mut copy = [0u8; BPOBJ_ENTRY_SIZE];
        copy.copy_from_slice(bytes);
        let free = copy[ENTRY_FLAGS_OFFSET] & ENTRY_FLAG_FREE != 0;
        copy[ENTRY_FLAGS_OFFSET] &= !ENTRY_FLAG_FREE;
        let bp = BlockPtr::decode(&copy).map_err(|error| error.to_string())?;
        if bp.is_hole() || bp.embedded {
            return Err("a hole or embedded pointer, which owns no space".into());
        }
        Ok(BpObjEntry { bp, free })
    }
}

/// A list's header (see the module documentation for its layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpObjHeader {
    pub entry_count: u64,
    pub space: BpSpace,
    pub sublist_array: u64,
    pub sublist_count: u64,
    pub freed_count: u64,
}

fn word(bytes: &[u8], index: usize) -> u64 {
    u64::from_le_bytes(bytes[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
}

impl BpObjHeader {
    pub fn encode(&self) -> [u8; BPOBJ_HEADER_SIZE] {
        let words = [
            self.entry_count,
            self.space.used_bytes,
            self.space.compressed_bytes,
            self.space.uncompressed_bytes,
            self.sublist_array,
            self.sublist_count,
            self.freed_count,
            0,
        ];
        let mut bytes = [0u8; BPOBJ_HEADER_SIZE];
        for (index, value) in words.iter().enumerate() {
            bytes[index * 8..index * 8 + 8].copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    /// Decode an untrusted header. An empty bonus (a list created before any header was
    /// written) reads as the empty list.
    pub fn decode(bytes: &[u8]) -> Result<BpObjHeader, String> {
        if bytes.is_empty() {
            return Ok(BpObjHeader::default());
        }
        if bytes.len() < BPOBJ_HEADER_SIZE {
            return Err(format!("header of {} bytes", bytes.len()));
        }
        if word(bytes, 7) != 0 {
            return Err("reserved header word is not zero".into());
        }
        let header = BpObjHeader {
            entry_count: word(bytes, 0),
            space: BpSpace {
                used_bytes: word(bytes, 1),
                compressed_bytes: word(bytes, 2),
                uncompressed_bytes: word(bytes, 3),
            },
            sublist_array: word(bytes, 4),
            sublist_count: word(bytes, 5),
            freed_count: word(bytes, 6),
        };
        if header.freed_count > header.entry_count {
            return Err(format!(
                "{} FREE entries among {} entries",
                header.freed_count, header.entry_count
            ));
        }
        if (header.sublist_count > 0) != (header.sublist_array != 0) {
            return Err(format!(
                "{} sub-lists but sub-list array object {}",
                header.sublist_count, header.sublist_array
            ));
        }
        Ok(header)
    }
}

/// What [`BpObj::drain`] reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// The list is empty (its sub-lists destroyed); only the list object itself remains.
    Empty,
    /// The budget ran out first; call again (in this txg or a later one) to go on.
    Paused,
}

/// An open list: its storage, object and header.
pub struct BpObj<'a> {
    store: &'a dyn BpObjStore,
    object: ObjectId,
    header: BpObjHeader,
}

fn corrupt(object: ObjectId, what: impl std::fmt::Display) -> ObjectError {
    ObjectError::Corrupt(format!("block-pointer list {object}: {what}"))
}

impl<'a> BpObj<'a> {
    /// Create an empty list.
    pub fn create(store: &dyn BpObjStore, tx: &Tx) -> Result<ObjectId, ObjectError> {
        store.create(
            tx,
            ObjectType::BlockPtrList,
            &BpObjHeader::default().encode(),
        )
    }

    /// Open a list, validating its header against the object.
    pub fn open(store: &'a dyn BpObjStore, object: ObjectId) -> Result<BpObj<'a>, ObjectError> {
        let object_type = store.object_type(object)?;
        if object_type != ObjectType::BlockPtrList {
            return Err(corrupt(object, format!("object of type {object_type:?}")));
        }
        let header =
            BpObjHeader::decode(&store.header(object)?).map_err(|why| corrupt(object, why))?;
        let capacity = store.capacity(object)?;
        if header.entry_count > capacity / BPOBJ_ENTRY_SIZE as u64 {
            return Err(corrupt(
                object,
                format!(
                    "header claims {} entries but the object holds at most {}",
                    header.entry_count,
                    capacity / BPOBJ_ENTRY_SIZE as u64
                ),
            ));
        }
        if header.sublist_count > 0 {
            let array = ObjectId(header.sublist_array);
            let array_type = store.object_type(array)?;
            let array_capacity = store.capacity(array)?;
            if array_type != ObjectType::ObjectArray || header.sublist_count > array_capacity / 8 {
                return Err(corrupt(
                    object,
                    format!(
                        "{} sub-lists in object {array} ({array_type:?}, {array_capacity} bytes)",
                        header.sublist_count
                    ),
                ));
            }
        }
        Ok(BpObj {
            store,
            object,
            header,
        })
    }

    pub fn object(&self) -> ObjectId {
        self.object
    }

    pub fn header(&self) -> BpObjHeader {
        self.header
    }

    /// Net space of the list, sub-lists included: the header alone.
    pub fn space(&self) -> BpSpace {
        self.header.space
    }

    /// Entries in this list and all its sub-lists are none.
    pub fn is_empty(&self) -> bool {
        self.header.entry_count == 0 && self.header.sublist_count == 0
    }

    fn save_header(&self, tx: &Tx) -> Result<(), ObjectError> {
        self.store
            .set_header(tx, self.object, &self.header.encode())
    }

    /// Append entries to the list's own array.
    pub fn append(&mut self, tx: &Tx, entries: &[BpObjEntry]) -> Result<(), ObjectError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::with_capacity(entries.len() * BPOBJ_ENTRY_SIZE);
        for entry in entries {
            if entry.bp.is_hole() || entry.bp.embedded {
                return Err(ObjectError::Invalid(format!(
                    "a hole or embedded block pointer on list {}",
                    self.object
                )));
            }
            bytes.extend_from_slice(&entry.encode());
            self.header.space.add(BpSpace::of_entry(entry, self.store));
            self.header.freed_count += entry.free as u64;
        }
        let offset = self.header.entry_count * BPOBJ_ENTRY_SIZE as u64;
        self.store.write(tx, self.object, offset, &bytes)?;
        self.header.entry_count += entries.len() as u64;
        self.save_header(tx)
    }

    /// Merge list `sublist` into this one: its totals join this header and its object id the
    /// sub-list array. `sublist` then belongs to this list. An empty sub-list is destroyed
    /// instead. A sub-list that has sub-lists of its own hands them over first (one u64 each)
    /// and joins with its own entries alone, so that repeated merges (snapshot destroys) never
    /// nest lists deeper than one level: the cost is per sub-list, never per entry.
    pub fn enqueue_sublist(&mut self, tx: &Tx, sublist: ObjectId) -> Result<(), ObjectError> {
        if sublist == self.object {
            return Err(ObjectError::Invalid(format!(
                "list {sublist} cannot be its own sub-list"
            )));
        }
        let mut sub = BpObj::open(self.store, sublist)?;
        if sub.header.sublist_count > 0 {
            for index in 0..sub.header.sublist_count {
                let grandchild = sub.sublist_at(index)?;
                if grandchild == self.object {
                    return Err(corrupt(
                        sublist,
                        format!(
                            "sub-list {index} is list {}, which it is merged into",
                            self.object
                        ),
                    ));
                }
                let grand = BpObj::open(self.store, grandchild)?;
                sub.header.space.sub(grand.space());
                self.push_sublist(tx, grandchild, grand.space())?;
            }
            self.store.remove(tx, ObjectId(sub.header.sublist_array))?;
            sub.header.sublist_array = 0;
            sub.header.sublist_count = 0;
            sub.save_header(tx)?;
        }
        if sub.is_empty() {
            self.save_header(tx)?;
            return sub.destroy_object(tx);
        }
        let space = sub.space();
        self.push_sublist(tx, sublist, space)?;
        self.save_header(tx)
    }

    /// Add one sub-list id and its totals (the header is saved by the caller).
    fn push_sublist(
        &mut self,
        tx: &Tx,
        sublist: ObjectId,
        space: BpSpace,
    ) -> Result<(), ObjectError> {
        if self.header.sublist_array == 0 {
            self.header.sublist_array = self.store.create(tx, ObjectType::ObjectArray, &[])?.0;
        }
        self.store.write(
            tx,
            ObjectId(self.header.sublist_array),
            self.header.sublist_count * 8,
            &sublist.0.to_le_bytes(),
        )?;
        self.header.sublist_count += 1;
        self.header.space.add(space);
        Ok(())
    }

    fn sublist_at(&self, index: u64) -> Result<ObjectId, ObjectError> {
        let mut bytes = [0u8; 8];
        self.store
            .read(ObjectId(self.header.sublist_array), index * 8, &mut bytes)?;
        let id = u64::from_le_bytes(bytes);
        if id == 0 || id == self.object.0 || id == self.header.sublist_array {
            return Err(corrupt(
                self.object,
                format!("sub-list {index} is object {id}"),
            ));
        }
        Ok(ObjectId(id))
    }

    /// Read entries `first..first + count` of the own array.
    fn read_entries(&self, first: u64, count: u64) -> Result<Vec<BpObjEntry>, ObjectError> {
        let mut bytes = vec![0u8; count as usize * BPOBJ_ENTRY_SIZE];
        self.store
            .read(self.object, first * BPOBJ_ENTRY_SIZE as u64, &mut bytes)?;
        bytes
            .chunks_exact(BPOBJ_ENTRY_SIZE)
            .enumerate()
            .map(|(index, chunk)| {
                BpObjEntry::decode(chunk).map_err(|why| {
                    corrupt(
                        self.object,
                        format!("entry {}: {why}", first + index as u64),
                    )
                })
            })
            .collect()
    }

    fn entries_per_chunk(&self) -> Result<u64, ObjectError> {
        Ok((self.store.chunk_size(self.object)? / BPOBJ_ENTRY_SIZE).max(1) as u64)
    }

    /// Visit every entry, own array first, then each sub-list in order; one block of entries in
    /// memory at a time. The visitor may stop the walk by returning an error.
    pub fn iterate(
        &self,
        visit: &mut dyn FnMut(&BpObjEntry) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        self.iterate_at_depth(visit, 0, &mut HashSet::from([self.object]))
    }

    /// As [`BpObj::iterate`]; `seen` holds every list entered so far. Sub-lists form a tree (a
    /// merge hands a list over, never shares it), so a list met twice is damage: without the
    /// check, lists that each name the next many times make a walk exponential in the depth.
    fn iterate_at_depth(
        &self,
        visit: &mut dyn FnMut(&BpObjEntry) -> Result<(), ObjectError>,
        depth: u32,
        seen: &mut HashSet<ObjectId>,
    ) -> Result<(), ObjectError> {
        if depth > SUBLIST_DEPTH_MAX {
            return Err(corrupt(self.object, "sub-lists nested too deep"));
        }
        let step = self.entries_per_chunk()?;
        let mut first = 0;
        while first < self.header.entry_count {
            let count = step.min(self.header.entry_count - first);
            for entry in self.read_entries(first, count)? {
                visit(&entry)?;
            }
            first += count;
        }
        for index in 0..self.header.sublist_count {
            let sublist = self.sublist_at(index)?;
            if !seen.insert(sublist) {
                return Err(corrupt(
                    self.object,
                    format!("sub-list {index} is list {sublist}, which the walk already entered"),
                ));
            }
            let sub = BpObj::open(self.store, sublist)?;
            sub.iterate_at_depth(visit, depth + 1, seen)?;
        }
        Ok(())
    }

    /// Remove up to `*budget` entries from the end of the list (the last sub-list first), handing
    /// each to `visit` before it is removed; `*budget` is decreased by the entries removed. The
    /// list is left consistent after every step, so a crash or a budget that runs out loses
    /// nothing: the next call goes on where this one stopped.
    pub fn drain(
        &mut self,
        tx: &Tx,
        budget: &mut u64,
        visit: &mut dyn FnMut(&BpObjEntry) -> Result<(), ObjectError>,
    ) -> Result<Drained, ObjectError> {
        self.drain_at_depth(tx, budget, visit, 0)
            .map(|(drained, _)| drained)
    }

    /// As [`BpObj::drain`]; also returns the space removed (to be taken off a parent's totals).
    fn drain_at_depth(
        &mut self,
        tx: &Tx,
        budget: &mut u64,
        visit: &mut dyn FnMut(&BpObjEntry) -> Result<(), ObjectError>,
        depth: u32,
    ) -> Result<(Drained, BpSpace), ObjectError> {
        if depth > SUBLIST_DEPTH_MAX {
            return Err(corrupt(self.object, "sub-lists nested too deep"));
        }
        let mut removed = BpSpace::default();
        while self.header.sublist_count > 0 {
            if *budget == 0 {
                return Ok((Drained::Paused, removed));
            }
            let index = self.header.sublist_count - 1;
            let mut sub = BpObj::open(self.store, self.sublist_at(index)?)?;
            let (drained, sub_removed) = sub.drain_at_depth(tx, budget, visit, depth + 1)?;
            removed.add(sub_removed);
            self.header.space.sub(sub_removed);
            if drained == Drained::Paused {
                self.save_header(tx)?;
                return Ok((Drained::Paused, removed));
            }
            // What is left of an emptied sub-list is its net total (zero for a consistent one).
            self.header.space.sub(sub.space());
            sub.destroy_object(tx)?;
            self.header.sublist_count = index;
            self.store.truncate(
                tx,
                ObjectId(self.header.sublist_array),
                self.header.sublist_count * 8,
            )?;
            if self.header.sublist_count == 0 {
                self.store.remove(tx, ObjectId(self.header.sublist_array))?;
                self.header.sublist_array = 0;
            }
            self.save_header(tx)?;
        }
        let step = self.entries_per_chunk()?;
        while self.header.entry_count > 0 {
            if *budget == 0 {
                return Ok((Drained::Paused, removed));
            }
            // The last (partial) chunk first, so truncation frees whole blocks.
            let chunk_first = (self.header.entry_count - 1) / step * step;
            let first = chunk_first.max(self.header.entry_count.saturating_sub(*budget));
            let entries = self.read_entries(first, self.header.entry_count - first)?;
            for entry in entries.iter().rev() {
                visit(entry)?;
                let space = BpSpace::of_entry(entry, self.store);
                removed.add(space);
                self.header.space.sub(space);
                self.header.freed_count -= entry.free as u64;
            }
            *budget -= entries.len() as u64;
            self.header.entry_count = first;
            self.store
                .truncate(tx, self.object, first * BPOBJ_ENTRY_SIZE as u64)?;
            self.save_header(tx)?;
        }
        Ok((Drained::Empty, removed))
    }

    /// Empty a list that has no sub-lists, keeping its first block: a list emptied and refilled
    /// in the same txg (the pool's deferred frees: emptied in sync pass 1, appended to in later
    /// passes) then rewrites that block in place instead of allocating it anew in a late pass.
    pub fn clear(&mut self, tx: &Tx) -> Result<(), ObjectError> {
        if self.header.sublist_count > 0 {
            return Err(ObjectError::Invalid(format!(
                "list {} has sub-lists; drain it instead",
                self.object
            )));
        }
        if self.header.entry_count == 0 {
            return Ok(());
        }
        let chunk = self.store.chunk_size(self.object)? as u64;
        self.store.truncate(tx, self.object, chunk)?;
        self.store
            .write(tx, self.object, 0, &[0u8; BPOBJ_ENTRY_SIZE])?;
        self.header = BpObjHeader::default();
        self.save_header(tx)
    }

    /// Remove the list object and its sub-list array, which must hold no sub-lists.
    fn destroy_object(self, tx: &Tx) -> Result<(), ObjectError> {
        if self.header.sublist_count > 0 {
            return Err(ObjectError::Invalid(format!(
                "list {} still has {} sub-lists",
                self.object, self.header.sublist_count
            )));
        }
        self.store.remove(tx, self.object)
    }

    /// Destroy the list and every sub-list (their entries are dropped, not visited): for lists
    /// whose blocks are accounted elsewhere. Costs one step per sub-list, not per entry.
    pub fn destroy(mut self, tx: &Tx) -> Result<(), ObjectError> {
        self.destroy_at_depth(tx, 0)
    }

    fn destroy_at_depth(&mut self, tx: &Tx, depth: u32) -> Result<(), ObjectError> {
        if depth > SUBLIST_DEPTH_MAX {
            return Err(corrupt(self.object, "sub-lists nested too deep"));
        }
        for index in 0..self.header.sublist_count {
            let mut sub = BpObj::open(self.store, self.sublist_at(index)?)?;
            sub.destroy_at_depth(tx, depth + 1)?;
        }
        if self.header.sublist_array != 0 {
            self.store.remove(tx, ObjectId(self.header.sublist_array))?;
        }
        self.store.remove(tx, self.object)
    }
}

#[cfg(test)]
mod tests;
