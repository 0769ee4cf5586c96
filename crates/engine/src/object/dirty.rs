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
    pub(super) blocks: DirtyBlocks,
    /// Highest block id written in this txg, and whether a free ran to the end of the object.
    pub(super) truncated_to: Option<u64>,
    /// The data block size the object grew to in this txg (write.rs, `grow_block_locked`):
    /// only while it has at most one block, which this record then holds at the new size.
    pub(super) block_size: Option<u32>,
    /// Blocks of `blocks` already written by the intent log (prewrite.rs): the sync adopts
    /// these pointers instead of writing the blocks.
    pub(super) overrides: BTreeMap<u64, BlockPtr>,
}

/// The data blocks a record holds, by block id, with their logical bytes kept as a running
/// sum: `st_blocks` of a file being written asks for it on every getattr, and summing
/// thousands of dirty blocks each time cost a fifth of the daemon's CPU under 4 KiB random
/// writes. Reads go through `Deref` to the map; every change goes through a method here, so
/// the sum cannot drift.
#[derive(Clone, Default)]
pub(super) struct DirtyBlocks {
    blocks: BTreeMap<u64, DirtyBlock>,
    /// Sum of `size_logical` over `blocks`.
    bytes: u64,
}

impl std::ops::Deref for DirtyBlocks {
    type Target = BTreeMap<u64, DirtyBlock>;

    fn deref(&self) -> &Self::Target {
        &self.blocks
    }
}

impl<'a> IntoIterator for &'a DirtyBlocks {
    type Item = (&'a u64, &'a DirtyBlock);
    type IntoIter = std::collections::btree_map::Iter<'a, u64, DirtyBlock>;

    fn into_iter(self) -> Self::IntoIter {
        self.blocks.iter()
    }
}

impl DirtyBlocks {
    /// Logical bytes of the blocks held (dirty-data accounting, `st_blocks`).
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `block` as block `blkid`, returning the block it replaces.
    pub(super) fn insert(&mut self, blkid: u64, block: DirtyBlock) -> Option<DirtyBlock> {
        self.bytes += block.size_logical();
        let replaced = self.blocks.insert(blkid, block);
        if let Some(old) = &replaced {
            self.bytes -= old.size_logical();
        }
        replaced
    }

    /// Keeps only the blocks whose id `keep` accepts.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let mut dropped = 0;
        self.blocks.retain(|&blkid, block| {
            let kept = keep(blkid);
            if !kept {
                dropped += block.size_logical();
            }
            kept
        });
        self.bytes -= dropped;
    }

    /// The bytes of block `blkid` to change in place (at most their length: the block keeps
    /// its size), a stored payload decompressed first; `None` if the record holds no such
    /// block.
    pub(super) fn plain_mut(&mut self, blkid: u64) -> Option<Result<&mut [u8], ObjectError>> {
        let block = self.blocks.get_mut(&blkid)?;
        if !matches!(block, DirtyBlock::Data(_)) {
            match block.contents() {
                Ok(contents) => *block = DirtyBlock::Data(contents),
                Err(e) => return Some(Err(e)),
            }
        }
        let DirtyBlock::Data(data) = block else {
            unreachable!("made plain above");
        };
        Some(Ok(Arc::make_mut(data).as_mut_slice()))
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

    /// Bytes of data blocks of `object` written in txgs not yet synced (for `st_blocks`).
    pub fn dirty_bytes_of(&self, object: ObjectId) -> u64 {
        let state = self.state.lock();
        state
            .dirty
            .values()
            .filter_map(|dirty| dirty.objects.get(&object))
            .map(|record| record.blocks.bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize) -> DirtyBlock {
        DirtyBlock::Data(Arc::new(vec![7; len]))
    }

    fn summed(blocks: &DirtyBlocks) -> u64 {
        blocks.values().map(DirtyBlock::size_logical).sum()
    }

    #[test]
    fn the_running_sum_follows_every_change() {
        let mut blocks = DirtyBlocks::default();
        assert!(blocks.insert(0, data(4096)).is_none());
        assert!(blocks.insert(5, data(16384)).is_none());
        assert_eq!(blocks.bytes(), 4096 + 16384);
        // A replacement of another size counts the new size only.
        assert_eq!(blocks.insert(0, data(8192)).unwrap().size_logical(), 4096);
        assert_eq!(blocks.bytes(), 8192 + 16384);
        let stored = crate::block::compress::compress(Compression::Lz4, &[0u8; 2048]).unwrap();
        blocks.insert(
            9,
            DirtyBlock::Stored {
                compression: Compression::Lz4,
                payload: Arc::new(stored),
                size_logical: 2048,
                fletcher4: None,
            },
        );
        assert_eq!(blocks.bytes(), summed(&blocks));
        // Made plain to patch in place: the size stays.
        blocks.plain_mut(9).unwrap().unwrap()[..2].copy_from_slice(&[1, 2]);
        assert!(matches!(blocks.get(&9), Some(DirtyBlock::Data(_))));
        assert!(blocks.plain_mut(4).is_none());
        assert_eq!(blocks.bytes(), summed(&blocks));
        blocks.retain(|blkid| blkid != 5);
        assert_eq!(blocks.bytes(), 8192 + 2048);
        blocks.retain(|_| false);
        assert_eq!(blocks.bytes(), 0);
        assert!(blocks.is_empty());
    }
}
