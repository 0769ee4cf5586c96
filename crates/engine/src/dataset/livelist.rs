//! Livelists (OpenZFS PR 8416: a deadlist used as a livelist, `dsl_destroy_head`'s livelist
//! path, `spa_livelist_condense`): the blocks a clone allocated and freed since it was made, so
//! that destroying a clone costs what the clone wrote, not what its origin holds.
//!
//! # Overview
//! A clone head with a livelist records every block its object set writes (an ALLOC entry) and
//! every block born after its origin's txg that it stops referencing (a FREE entry: the same
//! block pointer with the list format's FREE flag, §2.13), whether the block is then freed or
//! goes on a deadlist because a snapshot of the clone holds it. The *live* entries (ALLOCs
//! without a matching FREE) are then exactly the blocks of the head's tree born after the
//! origin: what destroying the clone frees, once its snapshots are gone (their deadlists hold
//! the rest, freed by the snapshots' destroys). Blocks born at or before the origin are the
//! origin's and never recorded.
//!
//! # On-disk structure
//! The dataset record's livelist field (offset 272) names a key/value object of the MOS laid
//! out as a deadlist (§2.15): key = a txg `k` (8 bytes big-endian), value = a block-pointer list
//! (u64 LE) holding the entries of the blocks born in `(k, next key]`, 0 while empty. The first
//! key is the origin's txg. When the newest sub-list holds `livelist_max_entries` entries, the
//! flush of txg `T` adds the key `T - 1`, so a sub-list never spans a birth txg that another
//! one also covers; an ALLOC and its FREE are in the same sub-list (the one of the block's
//! birth), and a sub-list's totals (its header) are net: the live space of its blocks.
//!
//! # Context
//! Born and kill run in syncing context, pass 1, from the object set's sync; the entries are
//! kept in memory and appended right after that sync ([`Livelist::flush`], one append per
//! sub-list touched), with the record naming the livelist written in the same txg.
//!
//! # Condense (background)
//! A sub-list whose FREE entries are at least half its entries (and at least
//! `livelist_condense_min_frees`; [`worth_condensing`]) is rewritten with its live entries
//! alone; since each FREE cancels one ALLOC of the same list, that is a sub-list whose blocks
//! all died, and it is left empty. The next sub-list is merged into it (its key removed) when
//! both then hold at most `livelist_max_entries / 2` entries, so a clone that keeps rewriting
//! the same blocks does not pile up sub-lists (each of which a destroy frees in its own txg);
//! a sub-list left empty, neither the first nor the newest, loses its key too (no live block
//! was born in its range, and new blocks go to the newest), so the keys do not pile up either.
//!
//! Candidates are the sub-lists that took a FREE since they were last considered, kept in
//! memory; at import they are found again from the sub-lists' headers alone
//! ([`Livelist::find_condense_candidates`]), so an export or a crash forgets none. The pool's
//! livelist reader (`pool/livelists.rs`) takes a candidate ([`Livelist::take_condense_candidate`]),
//! checks its header against the rule, and reads it (and the merge partner) whole outside
//! syncing context ([`Livelist::read_sublist`]: at most about `livelist_max_entries` entries in
//! memory). The sync thread applies the read in pass 1 ([`Livelist::apply_condense`]) only if
//! it is still current: the same livelist object, each sub-list still at its key with the same
//! list object and the entry count read (lists are only appended to, so an equal count means
//! nothing was added); otherwise nothing changes and the candidate goes back to the set to be
//! read again. A merge partner that changed (it is the newest sub-list, which a clone written
//! every txg changes every txg) or is no longer the next key is left out: the first sub-list is
//! condensed alone, so condensing keeps up with a clone that never stops writing. Applying costs a header read per sub-list
//! read (one or two), never a whole list.

//! # Drop
//! A livelist is destroyed (its lists removed, no block freed) and never rebuilt when the clone
//! shares less than `livelist_min_percent_shared` percent of its referenced bytes with its
//! origin (its live space is then most of it, and walking its tree costs about the same), on
//! promote (its origin txg no longer holds), and on rollback (the head's tree is replaced
//! wholesale, not block by block). Without a livelist, destroy walks the tree (blocks born
//! after the origin).
//!
//! # Destroy
//! The pool queues the destroyed clone's livelist (`pool/livelists.rs`); its reader reads the
//! sub-lists oldest first outside syncing context, and the sync frees each one's live entries
//! ([`Livelist::take_oldest_if_current`]: only if it is still the oldest, unchanged). The
//! sub-list goes in the txg that frees its blocks, so a crash or an export resumes at the next
//! sub-list.
//!
//! # Crash behaviour
//! Every change is in the MOS of the txg that made it, together with the tree it describes.

use std::collections::{BTreeSet, HashMap};

use crate::block::blkptr::BlockPtr;
use crate::object::bpobj::{BpObj, BpObjEntry, BpSpace};
use crate::object::{ObjectError, Tx};
use crate::types::{ObjectId, Txg, VdevId};

use super::deadlist::{Deadlist, DeadlistEntry, DeadlistStore};

/// A livelist in memory: its sub-lists (a deadlist whose lists may hold FREE entries).
#[derive(Clone, Debug, Default)]
pub struct Livelist {
    lists: Deadlist,
    /// Sub-lists that took FREE entries since they were last considered for condensing (in
    /// memory; found again from the headers at import, see "Condense").
    condense_candidates: BTreeSet<Txg>,
}

/// One sub-list as stored, for `debug dataset` and check.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sublist {
    /// Blocks born after this txg (and at or before the next sub-list's key).
    pub key: Txg,
    /// The next sub-list's key (`u64::MAX` for the newest).
    pub next_key: Txg,
    pub list: ObjectId,
    /// Entries, FREE ones included, and FREE entries alone.
    pub entries: u64,
    pub frees: u64,
    /// Net (live) space.
    pub space: BpSpace,
}

/// A condense candidate taken for reading: the livelist, the sub-list and its successor (the
/// merge partner when both are small enough after condensing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CondenseTarget {
    pub livelist: ObjectId,
    pub key: Txg,
    pub list: ObjectId,
    pub next: Option<(Txg, ObjectId)>,
}

/// One sub-list read outside syncing context: what applying it needs, and what tells whether it
/// is still current (key, list, and the entry count as read: entries are only ever appended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SublistRead {
    pub key: Txg,
    pub list: ObjectId,
    pub entries: u64,
    /// Its live blocks (ALLOCs less FREEs).
    pub live: Vec<BlockPtr>,
}

/// A condense read: the candidate's survivors, and its successor's when the two are merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CondenseRead {
    pub livelist: ObjectId,
    pub first: SublistRead,
    pub merged: Option<SublistRead>,
}

/// What applying a condense read did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondenseOutcome {
    /// Applied as read.
    Applied,
    /// The merge partner changed since the read (it is the newest sub-list, still written to):
    /// the first sub-list was condensed alone.
    AppliedWithoutMerge,
    /// The first sub-list changed since the read: nothing was changed, the candidate goes back.
    Stale,
}

/// The condense rule: FREE entries at least half the entries and at least `min_frees` (1 at
/// least).
pub fn worth_condensing(entries: u64, frees: u64, min_frees: u64) -> bool {
    frees >= min_frees.max(1) && frees.saturating_mul(2) >= entries
}

/// The error a read ends with when its reader was told to stop (export, close).
pub fn read_stopped() -> ObjectError {
    ObjectError::Txg(crate::txg::TxgError::ShuttingDown)
}

/// A block's identity in a livelist: its first copy and its birth.
fn identity(bp: &BlockPtr) -> Option<(VdevId, u64, Txg)> {
    bp.copies()
        .next()
        .map(|dva| (dva.vdev, dva.offset, bp.birth_physical))
}

/// The live entries of a sub-list's entries: each FREE cancels one earlier ALLOC of the same
/// block. A FREE without an ALLOC is corruption (the list would free what it never held).
pub fn cancel(object: ObjectId, entries: Vec<BpObjEntry>) -> Result<Vec<BlockPtr>, ObjectError> {
    let mut live: Vec<Option<BlockPtr>> = Vec::with_capacity(entries.len());
    let mut index: HashMap<(VdevId, u64, Txg), Vec<usize>> = HashMap::new();
    for entry in entries {
        let key = identity(&entry.bp).ok_or_else(|| {
            ObjectError::Corrupt(format!("livelist list {object}: an entry with no copy"))
        })?;
        if entry.free {
            let slot = index
                .get_mut(&key)
                .and_then(|slots| slots.pop())
                .ok_or_else(|| {
                    ObjectError::Corrupt(format!(
                    "livelist list {object}: a FREE of <{}:{:#x}> born in txg {} without its ALLOC",
                    key.0, key.1, key.2
                ))
                })?;
            live[slot] = None;
        } else {
            index.entry(key).or_default().push(live.len());
            live.push(Some(entry.bp));
        }
    }
    Ok(live.into_iter().flatten().collect())
}

impl Livelist {
    /// A new, empty livelist of a clone whose origin is of txg `origin_txg`.
    pub fn new(origin_txg: Txg) -> Livelist {
        Livelist {
            lists: Deadlist::with_keys([origin_txg]),
            condense_candidates: BTreeSet::new(),
        }
    }

    /// Load a livelist (untrusted: every sub-list's header is checked).
    pub fn load(store: &DeadlistStore, object: ObjectId) -> Result<Livelist, ObjectError> {
        Ok(Livelist {
            lists: Deadlist::load(store, object)?,
            condense_candidates: BTreeSet::new(),
        })
    }

    /// The key/value object (0 until first saved).
    pub fn object(&self) -> ObjectId {
        self.lists.object()
    }

    /// Net live space: the bytes destroying the clone would free through it.
    pub fn space(&self) -> BpSpace {
        self.lists.total()
    }

    /// Append the entries recorded in one txg (`tx`), starting a new sub-list first when the
    /// newest one holds `max_entries` entries. Returns the key/value object.
    pub fn flush(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        entries: Vec<BpObjEntry>,
        max_entries: u64,
    ) -> Result<ObjectId, ObjectError> {
        if let Some((newest, entry)) = self.lists.entries().last() {
            let boundary = Txg(tx.txg.0.saturating_sub(1));
            if entry.list.0 != 0 && boundary > newest {
                let header = BpObj::open(&store.lists(), entry.list)?.header();
                if header.entry_count >= max_entries {
                    self.lists.add_key(boundary);
                }
            }
        }
        for entry in entries.iter().filter(|entry| entry.free) {
            if let Some(key) = self.lists.key_for(entry.bp.birth_physical) {
                self.condense_candidates.insert(key);
            }
        }
        self.lists.insert_entries(store, tx, entries)?;
        self.lists.save(store, tx)
    }

    /// Every sub-list with its counts (one header read each).
    pub fn sublists(&self, store: &DeadlistStore) -> Result<Vec<Sublist>, ObjectError> {
        let entries: Vec<(Txg, DeadlistEntry)> = self.lists.entries().collect();
        let mut out = Vec::with_capacity(entries.len());
        for (index, (key, entry)) in entries.iter().enumerate() {
            let next_key = entries
                .get(index + 1)
                .map_or(Txg(u64::MAX), |(next, _)| *next);
            let (count, frees) = if entry.list.0 == 0 {
                (0, 0)
            } else {
                let header = BpObj::open(&store.lists(), entry.list)?.header();
                (header.entry_count, header.freed_count)
            };
            out.push(Sublist {
                key: *key,
                next_key,
                list: entry.list,
                entries: count,
                frees,
                space: entry.space,
            });
        }
        Ok(out)
    }

    /// The live blocks of one sub-list's list (ALLOCs less FREEs).
    pub fn live_blocks(
        store: &DeadlistStore,
        list: ObjectId,
    ) -> Result<Vec<BlockPtr>, ObjectError> {
        let mut entries = Vec::new();
        BpObj::open(&store.lists(), list)?.iterate(&mut |entry| {
            entries.push(entry.clone());
            Ok(())
        })?;
        cancel(list, entries)
    }

    /// Find the condense candidates again from the sub-lists' headers alone (at import: the
    /// in-memory set does not survive an export or a crash): every sub-list that meets the
    /// condense rule now.
    pub fn find_condense_candidates(
        &mut self,
        store: &DeadlistStore,
        min_frees: u64,
    ) -> Result<(), ObjectError> {
        for sub in self.sublists(store)? {
            if sub.list.0 != 0 && worth_condensing(sub.entries, sub.frees, min_frees) {
                self.condense_candidates.insert(sub.key);
            }
        }
        Ok(())
    }

    /// Whether a sub-list waits to be considered for condensing.
    pub fn has_condense_candidates(&self) -> bool {
        !self.condense_candidates.is_empty()
    }

    /// Take the next condense candidate out of the in-memory set, with what the reader needs to
    /// read it outside syncing context: its list and its successor's (the merge partner).
    /// Returns None when no candidate is left.
    pub fn take_condense_candidate(&mut self) -> Option<CondenseTarget> {
        while let Some(key) = self.condense_candidates.pop_first() {
            let Some(list) = self
                .lists
                .entries()
                .find(|(candidate, entry)| *candidate == key && entry.list.0 != 0)
                .map(|(_, entry)| entry.list)
            else {
                continue;
            };
            let next = self
                .lists
                .entries()
                .find(|(candidate, _)| *candidate > key)
                .filter(|(_, entry)| entry.list.0 != 0)
                .map(|(next_key, entry)| (next_key, entry.list));
            return Some(CondenseTarget {
                livelist: self.object(),
                key,
                list,
                next,
            });
        }
        None
    }

    /// Read one sub-list whole outside syncing context: its entry count as read and its live
    /// blocks. `stop` is asked every 1024 entries; when it says so the read ends with
    /// [`read_stopped`]'s error.
    pub fn read_sublist(
        store: &DeadlistStore,
        key: Txg,
        list: ObjectId,
        stop: &dyn Fn() -> bool,
    ) -> Result<SublistRead, ObjectError> {
        let lists = store.lists();
        let bpobj = BpObj::open(&lists, list)?;
        let entries_count = bpobj.header().entry_count;
        let mut entries = Vec::with_capacity(entries_count.min(1 << 20) as usize);
        bpobj.iterate(&mut |entry| {
            if entries.len() % 1024 == 0 && stop() {
                return Err(read_stopped());
            }
            entries.push(entry.clone());
            Ok(())
        })?;
        Ok(SublistRead {
            key,
            list,
            entries: entries_count,
            live: cancel(list, entries)?,
        })
    }

    /// Whether a sub-list read earlier is still exactly what the livelist holds: the same key
    /// with the same list, and no entry appended since (one header read).
    pub fn still_current(
        &self,
        store: &DeadlistStore,
        read: &SublistRead,
    ) -> Result<bool, ObjectError> {
        let Some((_, entry)) = self
            .lists
            .entries()
            .find(|(key, entry)| *key == read.key && entry.list.0 != 0)
        else {
            return Ok(false);
        };
        Ok(entry.list == read.list
            && BpObj::open(&store.lists(), entry.list)?
                .header()
                .entry_count
                == read.entries)
    }

    /// Syncing context: apply a condense read (see the module documentation) as far as what it
    /// read is still current: the first sub-list's list replaced by its survivors and, if the
    /// merge partner is unchanged too, that successor's key removed and its list destroyed.
    /// When the first sub-list changed, nothing changes and the candidate goes back.
    pub fn apply_condense(
        &mut self,
        store: &DeadlistStore,
        tx: &Tx,
        read: CondenseRead,
    ) -> Result<CondenseOutcome, ObjectError> {
        let CondenseRead {
            livelist,
            first,
            merged,
        } = read;
        let merged_current = match &merged {
            None => true,
            Some(next) => {
                // The merge partner must still be the very next key.
                self.lists
                    .entries()
                    .find(|(candidate, _)| *candidate > first.key)
                    .is_some_and(|(key, _)| key == next.key)
                    && self.still_current(store, next)?
            }
        };
        if livelist != self.object() || !self.still_current(store, &first)? {
            self.condense_candidates.insert(first.key);
            return Ok(CondenseOutcome::Stale);
        }
        let outcome = if merged.is_some() && !merged_current {
            CondenseOutcome::AppliedWithoutMerge
        } else {
            CondenseOutcome::Applied
        };
        let mut live = first.live;
        if let Some(next) = merged.filter(|_| merged_current) {
            live.extend(next.live);
            let (_, taken) = self
                .lists
                .take_key(next.key)
                .expect("checked current above");
            BpObj::open(&store.lists(), taken.list)?.destroy(tx)?;
            self.condense_candidates.remove(&next.key);
        }
        let emptied = live.is_empty();
        self.lists.replace_list(store, tx, first.key, live)?;
        // A sub-list left with no live block, neither the first (the origin's txg) nor the
        // newest, goes with its key and its range joins the previous sub-list's: no block born
        // there is live, so no FREE can come for one, and new blocks go to the newest.
        let first_key = self.lists.keys().next();
        let newest_key = self.lists.keys().last();
        if emptied && first_key != Some(first.key) && newest_key != Some(first.key) {
            self.lists.take_key(first.key);
        }
        self.lists.save(store, tx)?;
        Ok(outcome)
    }

    /// Every sub-list that holds a list, oldest first: key and list (no read).
    pub fn lists(&self) -> Vec<(Txg, ObjectId)> {
        self.lists
            .entries()
            .filter(|(_, entry)| entry.list.0 != 0)
            .map(|(key, entry)| (key, entry.list))
            .collect()
    }

    /// Syncing context, destroy: free nothing, but take the oldest sub-list out if it is the
    /// one `read` describes, still current. Returns its entry (whose live blocks the caller
    /// frees from the read) or None when the read is stale.
    pub fn take_oldest_if_current(
        &mut self,
        store: &DeadlistStore,
        read: &SublistRead,
    ) -> Result<Option<DeadlistEntry>, ObjectError> {
        let oldest = self
            .lists
            .entries()
            .find(|(_, entry)| entry.list.0 != 0)
            .map(|(key, _)| key);
        if oldest != Some(read.key) || !self.still_current(store, read)? {
            return Ok(None);
        }
        Ok(self.lists.take_key(read.key).map(|(_, entry)| entry))
    }

    /// Whether no sub-list holds a list any more.
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Write the changed keys.
    pub fn save(&mut self, store: &DeadlistStore, tx: &Tx) -> Result<ObjectId, ObjectError> {
        self.lists.save(store, tx)
    }

    /// Remove the livelist and its lists without freeing anything (drop, or the end of a
    /// destroy).
    pub fn destroy(self, store: &DeadlistStore, tx: &Tx) -> Result<(), ObjectError> {
        self.lists.destroy(store, tx, true)
    }

    /// Every entry with its sub-list's key (check).
    pub fn visit(
        &self,
        store: &DeadlistStore,
        visit: &mut dyn FnMut(Txg, &BpObjEntry) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        self.lists.visit_entries(store, visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::{Dva, ObjectType};
    use proptest::prelude::*;

    fn block(offset: u64, birth: u64) -> BlockPtr {
        let mut bp = BlockPtr::hole(Txg(birth), ObjectType::PlainFile, 0);
        bp.dvas[0] = Dva {
            vdev: VdevId(0),
            offset: offset * 512,
            size_allocated: 512,
            gang: false,
        };
        bp.size_logical = 512;
        bp.size_physical = 512;
        bp.birth_physical = Txg(birth);
        bp
    }

    /// The condense rule, on the header counts the reader and the import scan see: FREEs at
    /// least half the entries (every ALLOC cancelled, since a FREE cancels one of its own
    /// list) and at least `min_frees`, which 0 does not turn into "always".
    #[test]
    fn condense_rule_on_header_counts() {
        assert!(worth_condensing(40, 20, 16));
        assert!(!worth_condensing(41, 20, 16), "one ALLOC left alive");
        assert!(!worth_condensing(20, 10, 16), "fewer FREEs than the floor");
        assert!(
            !worth_condensing(0, 0, 0),
            "an empty list is never condensed"
        );
        assert!(!worth_condensing(u64::MAX, u64::MAX / 2, 1), "no overflow");
        assert!(!worth_condensing(10, 5, u64::MAX));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Any sequence of ALLOCs and FREEs (FREEs of blocks never allocated included) gives
        /// either a corruption error or exactly the model's live multiset, never a panic.
        #[test]
        fn cancel_matches_a_model(ops in proptest::collection::vec((any::<bool>(), 0u64..6, 1u64..3), 0..60)) {
            let mut model: Vec<(u64, u64)> = Vec::new();
            let mut valid = true;
            let entries: Vec<BpObjEntry> = ops
                .iter()
                .map(|&(free, offset, birth)| {
                    if free {
                        match model.iter().rposition(|item| *item == (offset, birth)) {
                            Some(at) => {
                                model.remove(at);
                            }
                            None => valid = false,
                        }
                    } else {
                        model.push((offset, birth));
                    }
                    BpObjEntry { bp: block(offset, birth), free }
                })
                .collect();
            match cancel(ObjectId(9), entries) {
                Ok(live) => {
                    prop_assert!(valid);
                    let mut got: Vec<(u64, u64)> = live
                        .iter()
                        .map(|bp| (bp.dvas[0].offset / 512, bp.birth_physical.0))
                        .collect();
                    got.sort();
                    model.sort();
                    prop_assert_eq!(got, model);
                }
                Err(_) => prop_assert!(!valid),
            }
        }
    }
}
