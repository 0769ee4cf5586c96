//! Freeing byte ranges of an object: in one transaction, or in chunks of bounded txgs for large
//! files and truncations (OpenZFS dmu_free_range, dmu_free_long_range).

use std::sync::Arc;

use crate::txg::{Tx, TxgManager};
use crate::types::ObjectId;

use super::phys;
use super::{ObjectError, ObjectSet};

impl ObjectSet {
    /// Free `length` bytes at `offset` (`u64::MAX` length: to the end). Whole blocks inside the
    /// range become holes; partly covered blocks at either end are zeroed in place.
    pub fn free_range(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<(), ObjectError> {
        let _writer = self.lock_object(object);
        self.free_range_locked(tx, object, offset, length)
    }

    /// [`ObjectSet::free_range`] for a caller already holding the object's writer lock.
    pub(crate) fn free_range_locked(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        let block_size = dnode.data_block_size as u64;
        // Nothing lies past what the tree can address (writes stop there), so the range is
        // clamped to it: a free there has nothing to do, and the blocks it would zero or
        // free all have ids the sync can place.
        let limit = phys::addressable_bytes(dnode.data_block_size, dnode.indirect_block_shift);
        if offset >= limit {
            return Ok(());
        }
        let end = match offset.saturating_add(length) {
            u64::MAX => u64::MAX,
            end => end.min(limit),
        };
        let first_whole = offset.div_ceil(block_size);
        let end_whole = if end == u64::MAX {
            u64::MAX
        } else {
            end / block_size
        };
        // Zero the partial head and tail blocks.
        if !offset.is_multiple_of(block_size) {
            let head_end = (first_whole * block_size).min(end);
            self.write_locked(tx, object, offset, &vec![0u8; (head_end - offset) as usize])?;
        }
        if end != u64::MAX && !end.is_multiple_of(block_size) && end / block_size >= first_whole {
            let tail_start = (end / block_size) * block_size;
            self.write_locked(
                tx,
                object,
                tail_start,
                &vec![0u8; (end - tail_start) as usize],
            )?;
        }
        if first_whole < end_whole {
            let mut state = self.state.lock();
            let record = state.record(tx.txg, object);
            record
                .blocks
                .retain(|blkid| blkid < first_whole || blkid >= end_whole);
            let freed_ahead = record
                .overrides
                .extract_if(first_whole..end_whole, |_, _| true)
                .map(|(_, bp)| bp)
                .collect::<Vec<_>>();
            state.unoverride(tx.txg, freed_ahead);
            let record = state.record(tx.txg, object);
            record.frees.push((first_whole, end_whole));
            if end_whole == u64::MAX {
                let last = first_whole.saturating_sub(1);
                record.truncated_to = Some(record.truncated_to.map_or(last, |t| t.min(last)));
            }
        }
        self.note_metadata_change(tx);
        Ok(())
    }

    /// Free `object`'s data from `offset` to its end in chunks (OpenZFS dmu_free_long_range):
    /// each chunk of at most `delete_blocks` blocks (DMU_MAX_DELETEBLKCNT), aligned to whole chunks and
    /// taken from the end backwards, is freed in a transaction of its own, and a txg takes
    /// chunks only while the indirect blocks they dirty stay within
    /// `per_txg_dirty_frees_percent` of `dirty_data_max` ([`TxgManager::charge_long_free`]);
    /// past that the caller waits for the txg to sync. So deleting or truncating a huge object
    /// never makes one giant txg. The object's size is not changed: a crash part-way leaves
    /// holes (zeros) at the end, never old data. Call with no transaction held.
    pub fn free_long_range(
        &self,
        txgs: &Arc<TxgManager>,
        object: ObjectId,
        offset: u64,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        let block_size = dnode.data_block_size as u64;
        let first_block = offset.div_ceil(block_size);
        let indirect_size = 1u64 << dnode.indirect_block_shift;
        let fanout = dnode.fanout();
        let chunk_blocks = self.io.tunables.delete_blocks.max(1);
        let mut end_block = dnode.max_blkid + 1;
        while end_block > first_block {
            let start_block = first_block.max((end_block - 1) / chunk_blocks * chunk_blocks);
            let cost = (end_block - start_block).div_ceil(fanout) * indirect_size;
            let hold = loop {
                let hold = txgs.assign()?;
                if txgs.charge_long_free(hold.txg(), cost) {
                    break hold;
                }
                let txg = hold.txg();
                drop(hold);
                txgs.wait_synced(Some(txg))?;
            };
            self.free_range(
                &hold.tx(),
                object,
                start_block * block_size,
                (end_block - start_block) * block_size,
            )?;
            drop(hold);
            end_block = start_block;
        }
        if !offset.is_multiple_of(block_size) && offset < (dnode.max_blkid + 1) * block_size {
            let hold = txgs.assign()?;
            let length = (first_block * block_size).min(u64::MAX - offset) - offset;
            self.free_range(&hold.tx(), object, offset, length)?;
        }
        Ok(())
    }
}
