//! Data blocks written ahead of their sync for the intent log, and their adoption (OpenZFS
//! dmu_sync and the dbuf override states).
//!
//! # Theory
//! A log commit of a large write writes the dirty block where it will stay
//! ([`ObjectSet::prewrite_block`], through [`BlockIo::write_now`]) and records an *override*
//! in the block's dirty record: the sync of that txg puts the pointer into the tree instead of
//! writing the block (`sync_object`). The override holds only while the dirty record still
//! has the contents that were written: a later write of the block in the same txg, a free
//! covering it, or the object's removal *unoverrides* it, and the block written ahead is freed
//! in the txg's sync (`TxgDirty::unadopted`); a rollback discarding the dirty records gives
//! them back. A log record may still name such a block: it stays valid on disk until its txg
//! syncs (freed space is not reused for two more txgs), and once the txg has synced the record
//! is obsolete.
//!
//! The caller holds the block's txg open across the call, so the dirty record cannot start
//! syncing while the block is written; only its contents can change, which the pointer
//! comparison of the buffer detects.

use super::*;
use crate::block::blkptr::BlockPtr;

impl ObjectSet {
    /// Write data block `blkid` of `object` (generation `generation`) as it stands dirty in
    /// `txg`, which the caller holds, and have the sync of `txg` adopt it. Returns the pointer
    /// written, or `None` if the block is not dirty in `txg` as a plain block of
    /// that object (nothing to write ahead), or needs no space (a hole or embedded block).
    pub fn prewrite_block(
        &self,
        txg: Txg,
        object: ObjectId,
        generation: u64,
        blkid: u64,
        storage: &dyn SpaceStorage,
    ) -> Result<Option<BlockPtr>, ObjectError> {
        let dnode = self.current_dnode(object)?;
        if dnode.is_free() || dnode.generation.0 != generation {
            return Ok(None);
        }
        let data = {
            let state = self.state.lock();
            let syncing = state.syncing.as_ref().is_some_and(|s| s.txg >= txg);
            let record = state
                .dirty
                .get(&txg)
                .and_then(|dirty| dirty.objects.get(&object));
            match record {
                Some(record) if !syncing => {
                    // A stored payload (a compressed receive) is not written ahead.
                    let Some(DirtyBlock::Data(data)) = record.blocks.get(&blkid) else {
                        return Ok(None);
                    };
                    // Written ahead already, by an earlier commit, as it is now.
                    if let Some(bp) = record.overrides.get(&blkid) {
                        return Ok(Some(bp.clone()));
                    }
                    data.clone()
                }
                _ => return Ok(None),
            }
        };
        let props = tree::block_props(&dnode, 0);
        let Some(bp) = self.io.write_now(&data, &props, txg, storage)? else {
            return Ok(None);
        };
        let mut state = self.state.lock();
        let record = state
            .dirty
            .get_mut(&txg)
            .and_then(|dirty| dirty.objects.get_mut(&object));
        match record {
            Some(record)
                if record.blocks.get(&blkid).is_some_and(
                    |now| matches!(now, DirtyBlock::Data(now) if Arc::ptr_eq(now, &data)),
                ) =>
            {
                record.overrides.insert(blkid, bp.clone());
            }
            // Changed meanwhile: the block holds what the file had when it was read, still
            // valid for the log record that will name it; the sync frees it.
            _ => state.unoverride(txg, [bp.clone()]),
        }
        Ok(Some(bp))
    }

    /// Syncing context, first pass of `txg`: free the blocks written ahead in `txg` that the
    /// sync will not adopt.
    pub(super) fn free_unadopted(&self, txg: Txg) -> Result<(), ObjectError> {
        let unadopted = {
            let mut state = self.state.lock();
            match state.dirty.get_mut(&txg) {
                Some(dirty) => std::mem::take(&mut dirty.unadopted),
                None => return Ok(()),
            }
        };
        for bp in unadopted {
            self.io.free(&bp, txg)?;
        }
        Ok(())
    }

    /// Every block written ahead in the dirty records (adopted or not), with its txg: the
    /// records are being discarded (a rollback), and the caller gives the blocks back.
    pub(super) fn take_written_ahead(state: &mut State) -> Vec<(BlockPtr, Txg)> {
        let mut blocks = Vec::new();
        for (txg, dirty) in state.dirty.iter_mut() {
            blocks.extend(
                std::mem::take(&mut dirty.unadopted)
                    .into_iter()
                    .map(|bp| (bp, *txg)),
            );
            for record in dirty.objects.values_mut() {
                blocks.extend(
                    std::mem::take(&mut record.overrides)
                        .into_values()
                        .map(|bp| (bp, *txg)),
                );
            }
        }
        blocks
    }
}
