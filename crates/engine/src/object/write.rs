//! Writes in open context: a data block written whole or patched, and the dirty records that
//! hold it until its txg syncs (see the module documentation of [`super`], "Dirty records and
//! txgs"). A partial write of a block the open txg already holds is patched in place; any
//! other partial write reads the block first (under the object's writer lock, not the object
//! set's lock) and dirties the whole new copy.

use std::sync::Arc;

use super::{Compression, ObjectError, ObjectId, ObjectSet, Tx};

impl ObjectSet {
    /// Write bytes at `offset` in `tx`, the object's writer lock held by the caller.
    pub(super) fn write_locked(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        let block_size = dnode.data_block_size as u64;
        if offset.checked_add(data.len() as u64).is_none() {
            return Err(ObjectError::Invalid("write past the largest offset".into()));
        }
        let mut done = 0usize;
        while done < data.len() {
            let position = offset + done as u64;
            let blkid = position / block_size;
            let within = (position % block_size) as usize;
            let chunk = (block_size as usize - within).min(data.len() - done);
            let bytes = &data[done..done + chunk];
            if chunk == block_size as usize {
                self.dirty_block(tx, object, blkid, bytes.to_vec());
            } else if !self.patch_dirty_block(tx, object, blkid, within, bytes) {
                let mut block = self
                    .read_block_sized(object, blkid, block_size as usize)?
                    .as_ref()
                    .clone();
                block[within..within + chunk].copy_from_slice(bytes);
                self.dirty_block(tx, object, blkid, block);
            }
            done += chunk;
        }
        Ok(())
    }

    /// Write `bytes` at `within` into data block `blkid` if `tx`'s txg already holds a new
    /// copy of that block: in place, without reading or copying the whole block (a reader's
    /// clone is left alone: the copy is then made here). False if the txg has no such copy.
    fn patch_dirty_block(
        &self,
        tx: &Tx,
        object: ObjectId,
        blkid: u64,
        within: usize,
        bytes: &[u8],
    ) -> bool {
        let mut state = self.state.lock();
        let Some(record) = state
            .dirty
            .get_mut(&tx.txg)
            .and_then(|dirty| dirty.objects.get_mut(&object))
        else {
            return false;
        };
        let Some(block) = record.blocks.get_mut(&blkid) else {
            return false;
        };
        Arc::make_mut(block)[within..within + bytes.len()].copy_from_slice(bytes);
        record.stored.remove(&blkid);
        let written_ahead = record.overrides.remove(&blkid);
        state.unoverride(tx.txg, written_ahead);
        true
    }

    pub(super) fn dirty_block(&self, tx: &Tx, object: ObjectId, blkid: u64, block: Vec<u8>) {
        self.dirty_block_stored(tx, object, blkid, block, None);
    }

    pub(super) fn dirty_block_stored(
        &self,
        tx: &Tx,
        object: ObjectId,
        blkid: u64,
        block: Vec<u8>,
        stored: Option<(Compression, Vec<u8>)>,
    ) {
        let bytes = block.len() as u64;
        let replaced = {
            let mut state = self.state.lock();
            let record = state.record(tx.txg, object);
            match stored {
                Some((kind, payload)) => record.stored.insert(blkid, (kind, Arc::new(payload))),
                None => record.stored.remove(&blkid),
            };
            let replaced = record.blocks.insert(blkid, Arc::new(block)).is_some();
            let written_ahead = record.overrides.remove(&blkid);
            state.unoverride(tx.txg, written_ahead);
            replaced
        };
        if !replaced {
            if let Some(manager) = self.dirty_accounting.lock().as_ref() {
                manager.add_dirty(tx.txg, bytes);
            }
        }
    }
}
