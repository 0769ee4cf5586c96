//! Dirty records (OpenZFS's dirty records of dbuf.c and the per-txg dirty lists of dnode.c):
//! what open context changed in each txg not yet synced, object by object, and the figures of
//! dirty data that the write throttle, the sync trigger and `st_blocks` read from them.
//!
//! A txg's record ([`TxgDirty`]) holds an [`ObjectDirty`] for each object the txg changed: its
//! creation or removal, a new bonus buffer, new settings, a new spill block, the block ranges
//! freed (applied before the writes), the data blocks written ([`DirtyBlock`]) and those of
//! them the intent log already wrote. It also says whether the intent log allocated or freed
//! in the txg, and which blocks written ahead for the log will not be adopted. Open context
//! adds only to the records of txgs not yet synced (`State::record` asserts it); a sync takes
//! the records of its txg, and [`ObjectSet::sync_done`] drops them. A change that dirties no
//! data block counts as one dnode's worth of dirty data, so that it too starts a sync when
//! the txg times out.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::block::blkptr::{BlockPtr, Compression, ObjectType};
use crate::txg::{Tx, TxgManager};
use crate::types::{ObjectId, Txg};

use super::phys::{DnodePhys, DNODE_SIZE};
use super::{ObjectError, ObjectSet, ObjectSettings, State};

#[derive(Clone, Default)]
pub(super) struct ObjectDirty {
    /// Created in this txg with this (empty) dnode.
    pub(super) create: Option<DnodePhys>,
    pub(super) removed: bool,
    pub(super) bonus: Option<(ObjectType, Vec<u8>)>,
    /// New settings for the object's blocks written from now on ([`ObjectSet::set_settings`]).
    pub(super) settings: Option<ObjectSettings>,
    /// A new spill block (`Some(None)`: the spill block removed).
    pub(super) spill: Option<Option<Arc<Vec<u8>>>>,
    /// Block ranges freed in this txg, applied before `blocks`.
    pub(super) frees: Vec<(u64, u64)>,
    pub(super) blocks: BTreeMap<u64, DirtyBlock>,
    /// Highest block id written in this txg, and whether a free ran to the end of the object.
    pub(super) truncated_to: Option<u64>,
    /// The data block size the object grew to in this txg (write.rs, `grow_block_locked`):
    /// only while it has at most one block, which this record then holds at the new size.
    pub(super) block_size: Option<u32>,
    /// Blocks of `blocks` already written by the intent log (prewrite.rs): the sync adopts
    /// these pointers instead of writing the blocks.
    pub(super) overrides: BTreeMap<u64, BlockPtr>,
}

impl ObjectDirty {
    /// Logical bytes of the data blocks this record holds (dirty-data accounting, `st_blocks`).
    fn data_bytes(&self) -> u64 {
        self.blocks.values().map(DirtyBlock::size_logical).sum()
    }
}

/// A data block written in a txg not yet synced.
#[derive(Clone)]
pub(super) enum DirtyBlock {
    /// Its bytes.
    Data(Arc<Vec<u8>>),
    /// Its bytes, written whole by a receive ([`ObjectSet::write_blocks`]): as `Data`, but the
    /// sync does not keep it in the cache (as OpenZFS's lightweight receive writes bypass the
    /// ARC: a stream's blocks are seldom read soon, and caching them costs memory and time).
    Received(Arc<Vec<u8>>),
    /// A block that arrived compressed (a compressed receive), kept only as its payload (which
    /// the writer checked decompresses to `size_logical` bytes): the sync stores the payload
    /// as it is ([`BlockIo::write_stored`]), and a read before then decompresses it. Holding
    /// no decompressed copy is what makes such a write cost one buffer, the one received.
    Stored {
        compression: Compression,
        payload: Arc<Vec<u8>>,
        size_logical: u32,
        /// The payload's fletcher4 checksum if the receive has it (the stream's payload
        /// digest): the sync derives the block's from it rather than reading the payload.
        fletcher4: Option<[u8; 32]>,
    },
}

impl DirtyBlock {
    pub(super) fn size_logical(&self) -> u64 {
        match self {
            DirtyBlock::Data(data) | DirtyBlock::Received(data) => data.len() as u64,
            DirtyBlock::Stored { size_logical, .. } => u64::from(*size_logical),
        }
    }

    /// The block's bytes (decompressed from a stored payload).
    pub(super) fn contents(&self) -> Result<Arc<Vec<u8>>, ObjectError> {
        match self {
            DirtyBlock::Data(data) | DirtyBlock::Received(data) => Ok(data.clone()),
            DirtyBlock::Stored {
                compression,
                payload,
                size_logical,
                ..
            } => Ok(Arc::new(crate::block::compress::decompress(
                *compression,
                payload,
                *size_logical as usize,
            )?)),
        }
    }
}

#[derive(Default)]
pub(super) struct TxgDirty {
    pub(super) objects: BTreeMap<ObjectId, ObjectDirty>,
    /// The intent log allocated or freed in this txg: the header must be written even if no
    /// object changed (zil/).
    pub(super) log: bool,
    /// Blocks written ahead for the intent log whose contents changed again before the sync
    /// (prewrite.rs): allocated in this txg, freed in its sync.
    pub(super) unadopted: Vec<BlockPtr>,
}

impl State {
    /// Blocks written ahead for the intent log in `txg` that will not be adopted: freed in
    /// the sync of `txg` (prewrite.rs).
    pub(super) fn unoverride(&mut self, txg: Txg, blocks: impl IntoIterator<Item = BlockPtr>) {
        let mut blocks = blocks.into_iter().peekable();
        if blocks.peek().is_some() {
            self.dirty.entry(txg).or_default().unadopted.extend(blocks);
        }
    }

    /// The dirty record of `object` in `txg`, if the txg has changed it.
    pub(super) fn dirty_record(&self, txg: Txg, object: ObjectId) -> Option<&ObjectDirty> {
        self.dirty.get(&txg)?.objects.get(&object)
    }

    /// The quota charge of dirtying one more object: its dnode block and `extra` bytes, in
    /// the most copies metadata gets.
    pub(super) fn dnode_block_charge(&self, extra: u64) -> u64 {
        (u64::from(self.synced_meta_dnode.data_block_size) + extra) * u64::from(super::COPIES_MAX)
    }

    /// The dirty record of `object` in `txg`, which must not have finished syncing.
    pub(super) fn record(&mut self, txg: Txg, object: ObjectId) -> &mut ObjectDirty {
        assert!(
            txg > self.last_synced,
            "change to object {object} joins txg {txg}, already synced (last synced {})",
            self.last_synced
        );
        self.dirty
            .entry(txg)
            .or_default()
            .objects
            .entry(object)
            .or_default()
    }
}

impl ObjectSet {
    /// Report this set's dirty bytes to `manager` from now on (the pool does this for every
    /// dataset; the MOS, written only in syncing context, is not throttled).
    pub fn set_dirty_accounting(&self, manager: Arc<TxgManager>) {
        *self.dirty_accounting.lock() = Some(manager);
    }

    /// Report a change that dirties no data block (create, remove, bonus, free) as one dnode's
    /// worth of dirty data, so that it too starts a sync when the txg times out.
    pub(super) fn note_metadata_change(&self, tx: &Tx) {
        if let Some(manager) = self.dirty_accounting.lock().as_ref() {
            manager.add_dirty(tx.txg, DNODE_SIZE as u64);
        }
    }

    /// Whether txg `txg` has changes not yet written by a sync pass.
    pub fn is_dirty(&self, txg: Txg) -> bool {
        let state = self.state.lock();
        let never_written = state.synced_root.is_hole() && state.syncing.is_none();
        state
            .dirty
            .get(&txg)
            .is_some_and(|dirty| !dirty.objects.is_empty() || dirty.log || never_written)
    }

    /// Bytes of data waiting in txg `txg` (for dirty-data accounting).
    pub fn dirty_bytes(&self, txg: Txg) -> u64 {
        let state = self.state.lock();
        state.dirty.get(&txg).map_or(0, |dirty| {
            dirty.objects.values().map(ObjectDirty::data_bytes).sum()
        })
    }

    /// Bytes of data blocks of `object` written in txgs not yet synced (for `st_blocks`).
    pub fn dirty_bytes_of(&self, object: ObjectId) -> u64 {
        let state = self.state.lock();
        state
            .dirty
            .values()
            .filter_map(|dirty| dirty.objects.get(&object))
            .map(ObjectDirty::data_bytes)
            .sum()
    }
}
