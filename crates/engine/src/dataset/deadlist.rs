//! Deadlists (OpenZFS dsl_deadlist.c): the blocks a dataset stopped referencing that an older
//! snapshot still holds, grouped by birth txg so that destroying a snapshot costs per group,
//! not per block (DESIGN.md §4 "Snapshots and clones").
//!
//! # Overview
//! Every dataset with a snapshot before it (a head or a later snapshot) has a deadlist. When the
//! head kills a block born at or before its previous snapshot's txg, the block cannot be freed:
//! it goes on the head's deadlist (`Dataset::block_kill`). When a snapshot is taken, the head's
//! deadlist becomes the snapshot's, and the head starts an empty one.
//!
//! A deadlist is a set of *entries*, each keyed by a txg `k` and holding one block-pointer list
//! ([`crate::object::bpobj`]); a block born in txg `b` is put in the entry with the largest key
//! below `b`. The keys are the txgs of the older snapshots (and 0), so an entry holds exactly
//! the blocks born in one snapshot interval `(k, next key]`. Entries are never split, but they
//! may be finer than the current snapshots (a key whose snapshot was destroyed stays): every
//! question asked of a deadlist is a range of keys, so a finer partition answers it the same.
//!
//! # Questions and moves (the cost is per entry)
//! - space born in a txg range (`space_range`): headers of the entries in it;
//! - destroy snapshot S (previous P, next N): N's entries with keys at or above P's txg hold
//!   blocks born after P that nothing references any more: [`Deadlist::take_from`] hands them
//!   to the pool's free list as whole lists; N's other entries (born at or before P, still P's)
//!   move into S's deadlist ([`Deadlist::merge`], a sub-list each), which becomes N's.
//!
//! # On-disk structure
//! A key/value object of the MOS: key = the entry's txg as 8 big-endian bytes, value = the list's
//! object id as a little-endian u64, 0 while the entry is empty (a list is created on the first
//! block). The totals of each entry are its list's header, so loading a deadlist reads the
//! key/value object and one bonus buffer per entry, never an entry's blocks.
//!
//! With feature `deadlist_totals` the key/value object's bonus buffer is a header holding the
//! deadlist's totals (OpenZFS dsl_deadlist_phys_t), rewritten by every `save` that changed
//! them. Import reads only that header for a snapshot's deadlist ([`DeadlistSummary`]): a
//! snapshot's deadlist has one key per older snapshot, mostly empty, so reading every one at
//! import read (and kept) keys in the square of the snapshots per file system. A deadlist
//! written before the feature was enabled has no header and is read whole.
//!
//! # Context
//! Changed only in syncing context by the sync thread (kills, snapshot create and destroy,
//! rollback); read by anyone through the dataset's lock. Memory: one map entry per key.

use std::collections::BTreeMap;

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::object::adapters::{create_kv_object, kv_entries, kv_object_error, KvObject};
use crate::object::bpobj::{BpObj, BpObjEntry, BpSpace, ObjectSetBpStore};
use crate::object::kv;
use crate::object::{ObjectError, ObjectProps, ObjectSet, Tx};
use crate::types::{ObjectId, Txg};

/// Where deadlists live: the MOS, with the properties of their objects.
pub struct DeadlistStore<'a> {
    pub mos: &'a ObjectSet,
    /// Properties of the key/value objects.
    pub kv_props: ObjectProps,
    /// Properties of the block-pointer lists.
    pub list_props: ObjectProps,
    /// Write the totals header (feature `deadlist_totals` enabled).
    pub write_totals: bool,
}

impl DeadlistStore<'_> {
    pub fn lists(&self) -> ObjectSetBpStore<'_> {
        ObjectSetBpStore {
            objset: self.mos,
            props: self.list_props,
        }
    }
}

/// One entry: its list (0 = empty, none created yet) and the list's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadlistEntry {
    pub list: ObjectId,
    pub space: BpSpace,
}

/// Bytes of the header in the key/value object's bonus buffer: a magic number, then the
/// totals (used, compressed, uncompressed), little-endian.
const HEADER_SIZE: usize = 32;
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"tarnDLH1");

fn encode_header(total: BpSpace) -> [u8; HEADER_SIZE] {
    let mut bytes = [0u8; HEADER_SIZE];
    for (at, value) in [
        HEADER_MAGIC,
        total.used_bytes,
        total.compressed_bytes,
        total.uncompressed_bytes,
    ]
    .into_iter()
    .enumerate()
    {
        bytes[at * 8..at * 8 + 8].copy_from_slice(&value.to_le_bytes());
    }
    bytes
}

/// Decode an untrusted header: `None` for an empty bonus (a deadlist written without the
/// feature), an error for anything else that is not a header.
fn decode_header(object: ObjectId, bytes: &[u8]) -> Result<Option<BpSpace>, ObjectError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let field = |at: usize| u64::from_le_bytes(bytes[at * 8..at * 8 + 8].try_into().unwrap());
    if bytes.len() != HEADER_SIZE || field(0) != HEADER_MAGIC {
        return Err(corrupt(
            object,
            format!("header of {} bytes is not a deadlist header", bytes.len()),
        ));
    }
    Ok(Some(BpSpace {
        used_bytes: field(1),
        compressed_bytes: field(2),
        uncompressed_bytes: field(3),
    }))
}

/// What a snapshot keeps of its deadlist in memory (the record names the object): the totals,
/// and the non-empty entries' totals when known. A snapshot's deadlist is frozen between the
/// sync tasks that change it (destroy, promote), which read it whole from disk
/// ([`Deadlist::load`]) and leave a new summary; the empty entries, one per older snapshot,
/// are never kept. The entries are unknown only for a deadlist whose header import read; the
/// questions that need them (a range of keys: a clone's split at its origin, unique bytes)
/// are asked of snapshots whose entries the pool loaded first ([`DeadlistSummary::is_whole`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadlistSummary {
    total: BpSpace,
    /// The non-empty entries' keys and totals, when known.
    filled: Option<Vec<(Txg, BpSpace)>>,
}

impl DeadlistSummary {
    /// The summary of a deadlist in memory (entries known).
    pub fn of(deadlist: &Deadlist) -> DeadlistSummary {
        DeadlistSummary {
            total: deadlist.total(),
            filled: Some(
                deadlist
                    .entries
                    .iter()
                    .filter(|(_, entry)| entry.list.0 != 0)
                    .map(|(key, entry)| (*key, entry.space))
                    .collect(),
            ),
        }
    }

    /// Import: the summary from the deadlist's header when it has one (entries unknown), or
    /// from the whole deadlist read when it has none or `whole` asks for the entries.
    pub fn load(
        store: &DeadlistStore,
        object: ObjectId,
        whole: bool,
    ) -> Result<DeadlistSummary, ObjectError> {
        if object.0 != 0 && !whole {
            if let Some(total) = decode_header(object, &store.mos.bonus(object)?)? {
                return Ok(DeadlistSummary {
                    total,
                    filled: None,
                });
            }
        }
        Ok(DeadlistSummary::of(&Deadlist::load(store, object)?))
    }

    pub fn total(&self) -> BpSpace {
        self.total
    }

    /// Whether the entries are known (every question can be answered).
    pub fn is_whole(&self) -> bool {
        self.filled.is_some()
    }

    /// As [`Deadlist::space_range`]. Entries unknown: the whole range is the total; any other
    /// range is a caller's error (debug builds stop), answered with the total.
    pub fn space_range(&self, min: Txg, max: Txg) -> BpSpace {
        let Some(filled) = &self.filled else {
            debug_assert!(
                min.0 == 0 && max.0 == u64::MAX,
                "a range of a deadlist summary whose entries were not loaded"
            );
            return if min < max {
                self.total
            } else {
                BpSpace::default()
            };
        };
        let mut total = BpSpace::default();
        for (_, space) in filled.iter().filter(|(key, _)| *key >= min && *key < max) {
            total.add(*space);
        }
        total
    }
}

/// The space questions a deadlist answers, whole or summarised.
pub trait DeadlistSpace {
    /// Space of every entry.
    fn total(&self) -> BpSpace;
    /// Space of the entries whose keys are in `min..max`.
    fn space_range(&self, min: Txg, max: Txg) -> BpSpace;
}

impl DeadlistSpace for Deadlist {
    fn total(&self) -> BpSpace {
        Deadlist::total(self)
    }

    fn space_range(&self, min: Txg, max: Txg) -> BpSpace {
        Deadlist::space_range(self, min, max)
    }
}

impl DeadlistSpace for DeadlistSummary {
    fn total(&self) -> BpSpace {
        DeadlistSummary::total(self)
    }

    fn space_range(&self, min: Txg, max: Txg) -> BpSpace {
        DeadlistSummary::space_range(self, min, max)
    }
}

/// A deadlist in memory, mirroring its key/value object.
#[derive(Clone, Debug, Default)]
pub struct Deadlist {
    /// The key/value object (0 until first written).
    object: ObjectId,
    entries: BTreeMap<Txg, DeadlistEntry>,
    /// The sum of every entry's totals, kept by every change: the space figures read it each
    /// txg, and summing a deadlist per snapshot per txg was most of a txg's cost once a pool
    /// held thousands of snapshots.
    total: BpSpace,
    /// Keys changed or removed since the last `save`.
    dirty: BTreeMap<Txg, bool>,
    /// The totals the on-disk header holds (None: no header), so that `save` writes one only
    /// when they changed.
    header: Option<BpSpace>,
}

/// The keys of the non-empty entries (`filled`, among all `keys`) that a `missing` key would
/// split: one falls above the entry's key and below the next key.
fn keys_to_split(
    filled: impl Iterator<Item = Txg>,
    keys: impl Iterator<Item = Txg>,
    missing: &[Txg],
) -> Vec<Txg> {
    let keys: Vec<Txg> = keys.collect();
    filled
        .filter(|key| {
            let next = keys
                .iter()
                .copied()
                .find(|other| other > key)
                .unwrap_or(Txg(u64::MAX));
            missing.iter().any(|new| new > key && *new < next)
        })
        .collect()
}

fn corrupt(object: ObjectId, what: impl std::fmt::Display) -> ObjectError {
    ObjectError::Corrupt(format!("deadlist {object}: {what}"))
}

impl Deadlist {
    /// An empty deadlist with the given keys (entries without lists).
    pub fn with_keys(keys: impl IntoIterator<Item = Txg>) -> Deadlist {
        let mut deadlist = Deadlist::default();
        for key in keys {
            deadlist.entries.insert(key, DeadlistEntry::default());
            deadlist.dirty.insert(key, true);
        }
        deadlist
    }

    /// Load a deadlist (object 0: an empty one with no keys). Untrusted: keys and values are
    /// checked, and every list's header is read for its totals.
    pub fn load(store: &DeadlistStore, object: ObjectId) -> Result<Deadlist, ObjectError> {
        let mut deadlist = Deadlist {
            object,
            ..Default::default()
        };
        if object.0 == 0 {
            return Ok(deadlist);
        }
        deadlist.header = decode_header(object, &store.mos.bonus(object)?)?;
        let lists = store.lists();
        for entry in kv_entries(store.mos, object)? {
            let key = <[u8; 8]>::try_from(entry.key.as_slice())
                .map_err(|_| corrupt(object, format!("key of {} bytes", entry.key.len())))?;
            let value = <[u8; 8]>::try_from(entry.value.as_slice())
                .map_err(|_| corrupt(object, format!("value of {} bytes", entry.value.len())))?;
            let list = ObjectId(u64::from_le_bytes(value));
            let space = if list.0 == 0 {
                BpSpace::default()
            } else {
                BpObj::open(&lists, list)?.space()
            };
            deadlist.total.add(space);
            deadlist
                .entries
                .insert(Txg(u64::from_be_bytes(key)), DeadlistEntry { list, space });
        }
        Ok(deadlist)
    }

    /// The totals the on-disk header held when loaded or last saved (None: no header); `check`
    /// compares them with the entries'.
    pub fn header(&self) -> Option<BpSpace> {
        self.header
    }

    /// The key/value object (0 if never written).
    pub fn object(&self) -> ObjectId {
        self.object
    }

    pub fn keys(&self) -> impl Iterator<Item = Txg> + '_ {
        self.entries.keys().copied()
    }

    pub fn entries(&self) -> impl Iterator<Item = (Txg, DeadlistEntry)> + '_ {
        self.entries.iter().map(|(key, entry)| (*key, *entry))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.values().all(|entry| entry.list.0 == 0)
    }

    /// Space of the entries whose keys are in `min..max`: the blocks born in `(min, max]` when
    /// `min` and `max` are keys.
    pub fn space_range(&self, min: Txg, max: Txg) -> BpSpace {
        let mut total = BpSpace::default();
        if min < max {
            for entry in self.entries.range(min..max).map(|(_, entry)| entry) {
                total.add(entry.space);
            }
        }
        total
    }

    /// Space of every entry (kept, constant time).
    pub fn total(&self) -> BpSpace {
        debug_assert_eq!(
            self.total,
            self.space_range(Txg(0), Txg(u64::MAX)),
            "deadlist {}: kept total",
            self.object
        );
        self.total
    }

    /// Add a key (an empty entry) if it is not there.
    pub fn add_key(&mut self, key: Txg) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.entries.entry(key) {
            slot.insert(DeadlistEntry::default());
            self.dirty.insert(key, true);
        }
    }

    /// The entry a block born in txg `birth` belongs to: the largest key below it.
    pub fn key_for(&self, birth: Txg) -> Option<Txg> {
        self.entries.range(..birth).next_back().map(|(key, _)| *key)
    }

    /// Make the partition at least as fine as `keys` (promote: a clone's deadlists must answer
    /// questions about its origin's snapshot intervals once those snapshots are its own). A new
    /// key that falls inside a non-empty entry splits it: that entry's blocks are read and put
    /// back on the refined entries, the old list dropped (its blocks are still dead, only
    /// regrouped). Clones inherit their origin's keys at creation (those made before promote
    /// existed did not), so nothing is split for them and the cost is one empty entry per
    /// missing key.
    pub fn refine(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        keys: impl IntoIterator<Item = Txg>,
    ) -> Result<(), ObjectError> {
        let missing: Vec<Txg> = keys
            .into_iter()
            .filter(|key| !self.entries.contains_key(key))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let split = keys_to_split(
            self.entries
                .iter()
                .filter(|(_, entry)| entry.list.0 != 0)
                .map(|(key, _)| *key),
            self.entries.keys().copied(),
            &missing,
        );
        let lists = store.lists();
        let mut blocks = Vec::new();
        for key in split {
            let entry = std::mem::take(self.entries.get_mut(&key).expect("listed above"));
            self.total.sub(entry.space);
            self.dirty.insert(key, true);
            let list = BpObj::open(&lists, entry.list)?;
            list.iterate(&mut |item| {
                if item.free {
                    return Err(corrupt(
                        self.object,
                        format!("entry {key} holds a FREE record"),
                    ));
                }
                blocks.push(item.bp.clone());
                Ok(())
            })?;
            list.destroy(tx)?;
        }
        for key in missing {
            self.add_key(key);
        }
        self.insert(store, tx, &blocks)
    }

    /// Put killed blocks on their entries: each on the entry with the largest key below its
    /// birth txg. One append per entry touched.
    pub fn insert(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        blocks: &[BlockPtr],
    ) -> Result<(), ObjectError> {
        self.insert_entries(
            store,
            tx,
            blocks.iter().cloned().map(BpObjEntry::alloc).collect(),
        )
    }

    /// As [`Deadlist::insert`], for entries that may carry the FREE flag (livelists).
    pub fn insert_entries(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        entries: Vec<BpObjEntry>,
    ) -> Result<(), ObjectError> {
        let mut by_key: BTreeMap<Txg, Vec<BpObjEntry>> = BTreeMap::new();
        for entry in entries {
            let birth = entry.bp.birth_physical;
            let Some(key) = self.key_for(birth) else {
                return Err(ObjectError::Invalid(format!(
                    "deadlist {}: no entry for a block born in txg {birth}",
                    self.object
                )));
            };
            by_key.entry(key).or_default().push(entry);
        }
        let lists = store.lists();
        for (key, new_entries) in by_key {
            let entry = self.entries.get_mut(&key).expect("key found above");
            if entry.list.0 == 0 {
                entry.list = BpObj::create(&lists, tx)?;
                self.dirty.insert(key, true);
            }
            let mut list = BpObj::open(&lists, entry.list)?;
            list.append(tx, &new_entries)?;
            self.total.sub(entry.space);
            entry.space = list.space();
            self.total.add(entry.space);
        }
        Ok(())
    }

    /// Replace the list of entry `key` with a new one holding `blocks` (livelist condensing);
    /// the old list is destroyed without freeing anything.
    pub fn replace_list(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        key: Txg,
        blocks: Vec<BlockPtr>,
    ) -> Result<(), ObjectError> {
        let entry = self
            .entries
            .get_mut(&key)
            .ok_or_else(|| corrupt(self.object, format!("no entry {key} to replace")))?;
        let lists = store.lists();
        if entry.list.0 != 0 {
            BpObj::open(&lists, entry.list)?.destroy(tx)?;
        }
        self.total.sub(entry.space);
        *entry = DeadlistEntry::default();
        self.dirty.insert(key, true);
        if !blocks.is_empty() {
            let object = BpObj::create(&lists, tx)?;
            let mut list = BpObj::open(&lists, object)?;
            let entries: Vec<BpObjEntry> = blocks.into_iter().map(BpObjEntry::alloc).collect();
            list.append(tx, &entries)?;
            *entry = DeadlistEntry {
                list: object,
                space: list.space(),
            };
            self.total.add(entry.space);
        }
        Ok(())
    }

    /// Remove entry `key` (its key too) and return it.
    pub fn take_key(&mut self, key: Txg) -> Option<(Txg, DeadlistEntry)> {
        let entry = self.entries.remove(&key)?;
        self.total.sub(entry.space);
        self.dirty.insert(key, false);
        Some((key, entry))
    }

    /// Remove key `key` (a destroyed snapshot's txg), its entry merged into the entry below as
    /// a sub-list: with the snapshot gone its interval and the one after it are one (OpenZFS
    /// dsl_deadlist_remove_key). Keys would otherwise only accumulate, one per snapshot ever
    /// taken, in every later deadlist. The lowest key is never removed.
    pub fn remove_key(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        key: Txg,
    ) -> Result<(), ObjectError> {
        if !self.entries.contains_key(&key) {
            return Ok(());
        }
        let Some(below) = self.key_for(key) else {
            return Ok(());
        };
        let (_, entry) = self.take_key(key).expect("present above");
        self.merge(store, tx, below, entry)
    }

    /// Remove and return the entries whose keys are `min` or above.
    pub fn take_from(&mut self, min: Txg) -> Vec<(Txg, DeadlistEntry)> {
        let taken = self.entries.split_off(&min);
        for (key, entry) in &taken {
            self.total.sub(entry.space);
            self.dirty.insert(*key, false);
        }
        taken.into_iter().collect()
    }

    /// Remove and return every entry (the keys stay, empty).
    pub fn take_all_lists(&mut self) -> Vec<(Txg, DeadlistEntry)> {
        let mut taken = Vec::new();
        for (key, entry) in self.entries.iter_mut() {
            if entry.list.0 != 0 {
                taken.push((*key, *entry));
                self.total.sub(entry.space);
                *entry = DeadlistEntry::default();
                self.dirty.insert(*key, true);
            }
        }
        taken
    }

    /// Merge another deadlist's entry into this one: into the entry with the same key as a
    /// sub-list (constant time), or as a new entry if the key is not here.
    pub fn merge(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        key: Txg,
        other: DeadlistEntry,
    ) -> Result<(), ObjectError> {
        self.dirty.insert(key, true);
        let entry = self.entries.entry(key).or_default();
        if other.list.0 == 0 {
            return Ok(());
        }
        if entry.list.0 == 0 {
            self.total.sub(entry.space);
            *entry = other;
            self.total.add(other.space);
            return Ok(());
        }
        let lists = store.lists();
        let mut list = BpObj::open(&lists, entry.list)?;
        list.enqueue_sublist(tx, other.list)?;
        self.total.sub(entry.space);
        entry.space = list.space();
        self.total.add(entry.space);
        Ok(())
    }

    /// Write the changed keys, creating the key/value object first if needed. Returns the
    /// object.
    pub fn save(&mut self, store: &DeadlistStore, tx: &Tx) -> Result<ObjectId, ObjectError> {
        if self.object.0 == 0 {
            self.object = create_kv_object(store.mos, tx, store.kv_props)?;
        }
        // Without the feature a header found is dropped, never left stale: a pool whose
        // config lost the feature (a crash before the labels caught up) may carry some.
        let header = store.write_totals.then_some(self.total);
        if self.header != header {
            let bytes = header.map(encode_header);
            store.mos.set_bonus(
                tx,
                self.object,
                ObjectType::BlockPtrList,
                bytes.as_ref().map_or(&[][..], |bytes| &bytes[..]),
            )?;
            self.header = header;
        }
        if self.dirty.is_empty() {
            return Ok(self.object);
        }
        let mut handle = KvObject::new(store.mos, self.object, Some(*tx))?;
        for (key, present) in std::mem::take(&mut self.dirty) {
            let name = key.0.to_be_bytes();
            let result = match self.entries.get(&key).filter(|_| present) {
                Some(entry) => {
                    kv::upsert(&mut handle, &name, &entry.list.0.to_le_bytes()).map(|_| ())
                }
                None => kv::remove(&mut handle, &name).map(|_| ()),
            };
            result.map_err(kv_object_error(self.object))?;
        }
        Ok(self.object)
    }

    /// Remove the key/value object; with `drop_lists`, also destroy every list (their blocks
    /// are accounted elsewhere: live again after a rollback). Entries taken out before are not
    /// touched.
    pub fn destroy(
        mut self,
        store: &DeadlistStore,
        tx: &Tx,
        drop_lists: bool,
    ) -> Result<(), ObjectError> {
        if drop_lists {
            let lists = store.lists();
            for (_, entry) in self.take_all_lists() {
                BpObj::open(&lists, entry.list)?.destroy(tx)?;
            }
        }
        if self.object.0 != 0 {
            store.mos.remove_object(tx, self.object)?;
        }
        Ok(())
    }

    /// Destroy lists taken out of a deadlist, dropping their entries (see `destroy`).
    pub fn drop_lists(
        store: &DeadlistStore,
        tx: &Tx,
        entries: &[(Txg, DeadlistEntry)],
    ) -> Result<(), ObjectError> {
        let lists = store.lists();
        for (_, entry) in entries.iter().filter(|(_, entry)| entry.list.0 != 0) {
            BpObj::open(&lists, entry.list)?.destroy(tx)?;
        }
        Ok(())
    }

    /// Every block on the deadlist with its entry's key (check, `debug dataset`).
    pub fn visit(
        &self,
        store: &DeadlistStore,
        visit: &mut dyn FnMut(Txg, &BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        self.visit_entries(store, &mut |key, item| {
            if item.free {
                return Err(corrupt(
                    self.object,
                    format!("entry {key} holds a FREE record"),
                ));
            }
            visit(key, &item.bp)
        })
    }

    /// Every list entry, FREE ones included (livelists), with its entry's key.
    pub fn visit_entries(
        &self,
        store: &DeadlistStore,
        visit: &mut dyn FnMut(Txg, &BpObjEntry) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let lists = store.lists();
        for (key, entry) in &self.entries {
            if entry.list.0 == 0 {
                continue;
            }
            BpObj::open(&lists, entry.list)?.iterate(&mut |item| visit(*key, item))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_anything_else_is_refused() {
        let total = BpSpace {
            used_bytes: 1 << 40,
            compressed_bytes: 12_345,
            uncompressed_bytes: u64::MAX,
        };
        let object = ObjectId(7);
        assert_eq!(
            decode_header(object, &encode_header(total)).unwrap(),
            Some(total)
        );
        // No header: a deadlist written without the feature.
        assert_eq!(decode_header(object, &[]).unwrap(), None);
        let mut wrong_magic = encode_header(total);
        wrong_magic[0] ^= 1;
        for bytes in [
            &wrong_magic[..],
            &encode_header(total)[..31],
            &[0u8; 64][..],
        ] {
            let error = decode_header(object, bytes).unwrap_err().to_string();
            assert!(error.contains("deadlist 7"), "{error}");
        }
    }

    #[test]
    fn a_summary_answers_ranges_from_its_filled_entries_only() {
        let space = |used_bytes| BpSpace {
            used_bytes,
            ..Default::default()
        };
        let summary = DeadlistSummary {
            total: space(7),
            filled: Some(vec![
                (Txg(0), space(1)),
                (Txg(10), space(2)),
                (Txg(30), space(4)),
            ]),
        };
        assert_eq!(summary.space_range(Txg(0), Txg(u64::MAX)), space(7));
        assert_eq!(summary.space_range(Txg(5), Txg(30)), space(2));
        assert_eq!(summary.space_range(Txg(10), Txg(31)), space(6));
        assert_eq!(summary.space_range(Txg(30), Txg(10)), space(0));
        // Import's header-only summary: the whole range is its total.
        let header_only = DeadlistSummary {
            total: space(7),
            filled: None,
        };
        assert!(!header_only.is_whole());
        assert_eq!(header_only.space_range(Txg(0), Txg(u64::MAX)), space(7));
    }

    #[test]
    fn only_entries_a_new_key_falls_inside_are_split() {
        let keys = [Txg(0), Txg(10), Txg(20)];
        // Entry 0 holds (0, 10]; a key 5 splits it, a key 15 splits entry 10, 25 the last.
        assert_eq!(
            keys_to_split(keys.into_iter(), keys.into_iter(), &[Txg(5)]),
            vec![Txg(0)]
        );
        assert_eq!(
            keys_to_split(keys.into_iter(), keys.into_iter(), &[Txg(15), Txg(25)]),
            vec![Txg(10), Txg(20)]
        );
        // An empty entry (not filled) is never split; a key equal to one there splits nothing.
        assert_eq!(
            keys_to_split([Txg(10)].into_iter(), keys.into_iter(), &[Txg(5)]),
            Vec::<Txg>::new()
        );
        assert_eq!(
            keys_to_split(keys.into_iter(), keys.into_iter(), &[Txg(10)]),
            Vec::<Txg>::new()
        );
    }
}
