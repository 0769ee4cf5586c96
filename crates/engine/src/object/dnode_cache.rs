//! The dnode cache: decoded dnodes of an object set's tree, so that a lookup, stat or write of
//! a file decodes its dnode from the meta-dnode's block once rather than on every use (OpenZFS
//! keeps dnode handles for the same reason).
//!
//! # Theory
//! What the cache holds is "the dnode of object N as the tree describes it": the synced tree
//! or, while a txg syncs, the tree being synced. Changes not yet synced live in the dirty
//! records and are applied on top by the reader (`ObjectSet::current_dnode`), never cached.
//! The tree's answer for an object changes only when a sync pass rewrites that object's dnode,
//! and such dnodes are kept in the syncing state's own map, which readers consult before the
//! cache; so a cached entry can only go stale at the moment the sync installs its tree
//! (`sync_done`), which forgets exactly the objects that txg rewrote, and at a rollback
//! (`reset_to`), which forgets everything.
//!
//! A reader that misses decodes the dnode without the object set's lock and inserts it after.
//! If an installation happened in between, its decoded copy may predate it: each installation
//! bumps an epoch, and an insert made under an older epoch is dropped.
//!
//! The cache is bounded by the `dnode_cache_entries` tunable (0 turns it off); when full, the
//! oldest entry makes room (first in, first out: a queue of object numbers in insertion order,
//! where numbers forgotten meanwhile are skipped, compacted when it grows to twice the bound).
//! An entry is one decoded dnode (about 600 bytes with its bonus).

use std::collections::VecDeque;
use std::sync::Arc;

use super::phys::{DnodePhys, DNODE_SIZE};
use super::{tree, ObjectError, ObjectSet};
use crate::types::{FastHashMap, ObjectId};

impl ObjectSet {
    /// The dnode of `object` as the tree being synced (or else the synced tree) describes it:
    /// from the syncing state, the cache, or decoded from its meta-dnode block (then cached).
    pub(super) fn tree_dnode(&self, object: ObjectId) -> Result<DnodePhys, ObjectError> {
        let (meta, epoch) = {
            let state = self.state.lock();
            if let Some(syncing) = &state.syncing {
                if let Some(dnode) = syncing.dnodes.get(&object) {
                    return Ok(dnode.clone());
                }
            }
            // The usage objects' dnodes sit in the header (`accounting.rs`).
            if let Some(slot) = super::accounting::usage_slot(object) {
                let accounting = match &state.syncing {
                    Some(syncing) => syncing.accounting.as_ref(),
                    None => state.synced_accounting.as_ref(),
                };
                return Ok(accounting.map_or_else(DnodePhys::free, |dnodes| dnodes[slot].clone()));
            }
            if let Some(dnode) = state.dnode_cache.get(object) {
                return Ok(dnode.clone());
            }
            let meta = match &state.syncing {
                Some(syncing) => syncing.meta_dnode.clone(),
                None => state.synced_meta_dnode.clone(),
            };
            (meta, state.dnode_cache.epoch())
        };
        let dnode = self.dnode_from_meta(&meta, object)?;
        self.state.lock().dnode_cache.insert(object, &dnode, epoch);
        Ok(dnode)
    }

    pub(super) fn dnode_from_meta(
        &self,
        meta: &DnodePhys,
        object: ObjectId,
    ) -> Result<DnodePhys, ObjectError> {
        let per_block = meta.data_block_size as u64 / DNODE_SIZE as u64;
        let blkid = object.0 / per_block;
        if blkid > meta.max_blkid {
            return Ok(DnodePhys::free());
        }
        let _l2 = self.l2_scope();
        let bp = tree::lookup_block(&self.io, meta, blkid)?;
        if bp.is_hole() {
            return Ok(DnodePhys::free());
        }
        let data = self.io.read(&bp)?;
        let slot = ((object.0 % per_block) as usize) * DNODE_SIZE;
        if data.len() < slot + DNODE_SIZE {
            return Err(ObjectError::Corrupt(format!(
                "dnode block {blkid} of {} bytes",
                data.len()
            )));
        }
        Ok(DnodePhys::decode(&data[slot..slot + DNODE_SIZE])?)
    }
}

/// Decoded dnodes of the tree; see the module documentation.
pub(super) struct DnodeCache {
    entries: FastHashMap<ObjectId, Arc<DnodePhys>>,
    /// Object numbers in insertion order (some possibly forgotten since): eviction order.
    order: VecDeque<ObjectId>,
    capacity: usize,
    /// Bumped whenever entries may have gone stale; inserts from an older epoch are dropped.
    epoch: u64,
}

impl DnodeCache {
    pub(super) fn new(capacity: u64) -> DnodeCache {
        DnodeCache {
            entries: FastHashMap::default(),
            order: VecDeque::new(),
            capacity: usize::try_from(capacity).unwrap_or(usize::MAX),
            epoch: 0,
        }
    }

    pub(super) fn get(&self, object: ObjectId) -> Option<&DnodePhys> {
        self.entries.get(&object).map(|dnode| dnode.as_ref())
    }

    /// The epoch a reader notes before it decodes a dnode without the lock.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Keep `dnode`, decoded by a reader that noted `epoch` before reading the tree.
    pub(super) fn insert(&mut self, object: ObjectId, dnode: &DnodePhys, epoch: u64) {
        if self.capacity == 0 || epoch != self.epoch {
            return;
        }
        if self
            .entries
            .insert(object, Arc::new(dnode.clone()))
            .is_some()
        {
            return;
        }
        self.order.push_back(object);
        while self.entries.len() > self.capacity {
            match self.order.pop_front() {
                Some(oldest) => {
                    self.entries.remove(&oldest);
                }
                None => break,
            }
        }
        if self.order.len() > 2 * self.capacity.max(1) {
            let entries = &self.entries;
            self.order.retain(|object| entries.contains_key(object));
        }
    }

    /// The sync installed a tree that rewrote `objects`' dnodes.
    pub(super) fn forget(&mut self, objects: impl IntoIterator<Item = ObjectId>) {
        self.epoch += 1;
        for object in objects {
            self.entries.remove(&object);
        }
    }

    /// The tree was replaced wholesale (a rollback).
    pub(super) fn clear(&mut self) {
        self.epoch += 1;
        self.entries.clear();
        self.order.clear();
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dnode(max_blkid: u64) -> DnodePhys {
        DnodePhys {
            max_blkid,
            ..DnodePhys::free()
        }
    }

    #[test]
    fn an_insert_from_before_an_installation_is_dropped() {
        let mut cache = DnodeCache::new(8);
        let epoch = cache.epoch();
        cache.forget([ObjectId(7)]);
        cache.insert(ObjectId(5), &dnode(1), epoch);
        assert!(cache.get(ObjectId(5)).is_none());
        cache.insert(ObjectId(5), &dnode(1), cache.epoch());
        assert_eq!(cache.get(ObjectId(5)).map(|d| d.max_blkid), Some(1));
    }

    #[test]
    fn forget_drops_only_the_rewritten_objects() {
        let mut cache = DnodeCache::new(8);
        for object in 1..=3 {
            cache.insert(ObjectId(object), &dnode(object), cache.epoch());
        }
        cache.forget([ObjectId(2)]);
        assert!(cache.get(ObjectId(2)).is_none());
        assert_eq!(cache.get(ObjectId(3)).map(|d| d.max_blkid), Some(3));
        cache.clear();
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_capacity_bounds_the_entries_and_zero_turns_it_off() {
        let mut cache = DnodeCache::new(4);
        for object in 1..=100 {
            cache.insert(ObjectId(object), &dnode(object), cache.epoch());
        }
        assert_eq!(cache.len(), 4);
        // The four newest stay.
        assert!((97..=100).all(|object| cache.get(ObjectId(object)).is_some()));
        // Forgotten numbers are skipped in the queue; it stays bounded.
        for object in 101..=1000 {
            cache.insert(ObjectId(object), &dnode(object), cache.epoch());
            cache.forget([ObjectId(object - 1)]);
        }
        assert!(cache.order.len() <= 8);
        assert!(cache.get(ObjectId(1000)).is_some());
        let mut off = DnodeCache::new(0);
        off.insert(ObjectId(1), &dnode(1), off.epoch());
        assert_eq!(off.len(), 0);
    }
}
