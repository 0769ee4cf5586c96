//! Writes in open context (OpenZFS dmu_write and dbuf_dirty): a data block written whole or
//! patched, and put in the dirty record that holds it until its txg syncs (`dirty.rs`; see the
//! module documentation of [`super`], "Dirty records and txgs"). A partial write of a block the
//! open txg already holds is patched in place; any other partial write reads the block first
//! (under the object's writer lock, not the object set's lock) and dirties the whole new copy.
//!
//! Before a write dirties anything it is checked against what the object's tree can address,
//! so that the sync never meets a block it cannot place, and admitted by the pool's space
//! reservation for its data and for the indirect blocks it will make the sync rewrite
//! ([`ObjectSet::indirect_estimate`]). The per-object writer lock
//! ([`ObjectSet::lock_object`]) serialises the writers of one object, so that two partial
//! writes of one block cannot lose each other's bytes.
//!
//! Cost: [`ObjectSet::write`] takes, per call, the dnode, the admission reservation, the
//! object's writer lock, the object set's lock per block and the txg manager's lock per new
//! block, and copies each whole block once into its dirty record. [`ObjectSet::write_blocks`]
//! (a receive's batch of whole blocks of one object) takes each of those once per call and
//! copies nothing: the buffers it is given become the dirty records.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::Compression;
use crate::cache::ReadFor;
use crate::txg::Tx;
use crate::types::{ObjectId, Txg};

use super::dirty::DirtyBlock;
use super::phys::{self, DnodePhys};
use super::{write_copies, Admission, ObjectError, ObjectSet, WriteEstimate};

/// The unit a block's allocated size is rounded up to in a write's charge: the largest
/// sector tarn pools use (ashift 12).
const ALLOCATED_SIZE_UNIT: u64 = 4096;

/// Whether data blocks `first..=last` of the object `dnode` describes lie within what its
/// tree can address ([`phys::check_addressable`]): open context refuses a write past it, so
/// that the sync never meets a block it cannot place.
fn check_blocks_addressable(dnode: &DnodePhys, first: u64, last: u64) -> Result<(), ObjectError> {
    let block_size = u64::from(dnode.data_block_size);
    let range = first.checked_mul(block_size).and_then(|offset| {
        let length = (last.checked_sub(first)?.checked_add(1)?).checked_mul(block_size)?;
        Some((offset, length))
    });
    let Some((offset, length)) = range else {
        return Err(ObjectError::TooLarge(format!(
            "blocks {first}..={last} of {block_size} bytes end past the largest offset"
        )));
    };
    check_range_addressable(dnode, offset, length)
}

/// Whether `length` bytes at `offset` of the object `dnode` describes lie within what its
/// tree can address ([`phys::check_addressable`]).
fn check_range_addressable(dnode: &DnodePhys, offset: u64, length: u64) -> Result<(), ObjectError> {
    phys::check_addressable(
        dnode.data_block_size,
        dnode.indirect_block_shift,
        offset,
        length,
    )
    .map_err(ObjectError::TooLarge)
}

/// A whole data block for [`ObjectSet::write_blocks`].
pub enum WholeBlock {
    /// Its bytes, exactly the object's block size.
    Data(Vec<u8>),
    /// The block compressed with `compression`, as stored (a payload, zero padding allowed),
    /// which the caller has checked decompresses to the object's block size (a compressed
    /// receive): stored as it is, never decompressed unless read before its txg syncs.
    Stored {
        compression: Compression,
        payload: Vec<u8>,
        /// The payload's fletcher4 checksum, if known (see `DirtyBlock::Stored`); it must be
        /// that of these bytes.
        fletcher4: Option<[u8; 32]>,
    },
}

/// A held writer lock of one object; see [`ObjectSet::lock_object`].
pub struct ObjectLockGuard {
    object: ObjectId,
    table: Arc<Mutex<crate::types::FastHashMap<ObjectId, Arc<Mutex<()>>>>>,
    guard: Option<parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>>,
}

impl Drop for ObjectLockGuard {
    fn drop(&mut self) {
        let guard = self.guard.take().expect("held until drop");
        let lock = parking_lot::ArcMutexGuard::mutex(&guard).clone();
        drop(guard);
        let mut table = self.table.lock();
        // The table's reference and `lock`: nobody else holds or waits for it.
        if Arc::strong_count(&lock) == 2 {
            table.remove(&self.object);
        }
    }
}

/// The block size a write ending at `end` grows `dnode`'s object to (see
/// [`ObjectSet::write_growing`]), or None if it does not grow: it has more than one block, the
/// write ends within its block, or the block is already `block_size_max` or larger.
pub(super) fn grown_block_size(dnode: &DnodePhys, end: u64, block_size_max: u32) -> Option<u32> {
    let current = u64::from(dnode.data_block_size);
    if dnode.max_blkid > 0 || end <= current || current >= u64::from(block_size_max) {
        return None;
    }
    Some(
        end.next_multiple_of(512)
            .min(u64::from(block_size_max))
            .min(crate::types::SPA_MAXBLOCKSIZE) as u32,
    )
}

impl ObjectSet {
    /// Write bytes at `offset` in `tx`. Partly covered blocks are read first, under the object's
    /// writer lock but not the object set's lock.
    pub fn write(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ObjectError> {
        self.write_growing(tx, object, offset, data, 0)
    }

    /// [`ObjectSet::write`] to an object whose single block grows with it up to
    /// `block_size_max` bytes (a file and its `recordsize`), as OpenZFS's `zfs_write` grows a
    /// file's block (`zfs_grow_blocksize`): while the object has at most one block, smaller
    /// than `block_size_max`, a write ending past that block first grows it to the write's
    /// end rounded up to 512 bytes, at most `block_size_max` (write.rs). A small file thus
    /// has one block of about its size rather than a whole record, and a file past one record
    /// has records. With `block_size_max` 0 nothing grows.
    pub fn write_growing(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        block_size_max: u32,
    ) -> Result<(), ObjectError> {
        self.write_growing_as(
            tx,
            object,
            offset,
            data,
            block_size_max,
            Admission::Ordinary,
        )
    }

    /// [`ObjectSet::write_growing`] admitted as `admission` says.
    pub fn write_growing_as(
        &self,
        tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        block_size_max: u32,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| ObjectError::Invalid("write past the largest offset".into()))?;
        let reservation = self.reservation.lock().clone();
        if let Some(reservation) = reservation {
            let mut dnode = self.existing_dnode(object)?;
            // Estimated with the block size the write will grow the object to.
            if let Some(size) = grown_block_size(&dnode, end, block_size_max) {
                dnode.data_block_size = size;
            }
            let mut estimate =
                self.write_estimate(&dnode, tx.txg, object, offset, data.len() as u64);
            estimate.owners = self.owner_of().and_then(|owner_of| owner_of(&dnode.bonus));
            reservation.reserve(self, tx, &estimate, admission)?;
        }
        let _writer = self.lock_object(object);
        if !data.is_empty() {
            self.grow_block_locked(tx, object, end, block_size_max)?;
        }
        self.write_locked(tx, object, offset, data)
    }

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
        check_range_addressable(&dnode, offset, data.len() as u64)?;
        let mut done = 0usize;
        while done < data.len() {
            let position = offset + done as u64;
            let blkid = position / block_size;
            let within = (position % block_size) as usize;
            let chunk = (block_size as usize - within).min(data.len() - done);
            let bytes = &data[done..done + chunk];
            if chunk == block_size as usize {
                self.dirty_block(
                    tx,
                    object,
                    blkid,
                    DirtyBlock::Data(Arc::new(bytes.to_vec())),
                );
            } else if !self.patch_dirty_block(tx, object, blkid, within, bytes)? {
                let old =
                    self.read_block_sized(object, blkid, block_size as usize, ReadFor::Rewrite)?;
                let mut block = Arc::unwrap_or_clone(old);
                block[within..within + chunk].copy_from_slice(bytes);
                self.dirty_block(tx, object, blkid, DirtyBlock::Data(Arc::new(block)));
            }
            done += chunk;
        }
        Ok(())
    }

    /// Grow the single block of `object` so that it holds `end` bytes, when the object has at
    /// most one block and its block size is below `block_size_max` (OpenZFS's
    /// `dnode_set_blksz`): the new size is `end` rounded up to 512 bytes, at most
    /// `block_size_max`. Block 0, if it holds data, is dirtied at the new size in the same
    /// change that records the size, zero-extended, so that no reader ever finds the block
    /// and the size disagreeing. The caller holds the object's writer lock.
    pub(super) fn grow_block_locked(
        &self,
        tx: &Tx,
        object: ObjectId,
        end: u64,
        block_size_max: u32,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        let Some(size) = grown_block_size(&dnode, end, block_size_max) else {
            return Ok(());
        };
        let size = size as usize;
        // Read outside the object set's lock; the writer lock keeps block 0 as it is.
        let grown = self.read_block_if_present(object, 0)?.map(|old| {
            let mut grown = Vec::with_capacity(size);
            grown.extend_from_slice(&old[..old.len().min(size)]);
            grown.resize(size, 0);
            DirtyBlock::Data(Arc::new(grown))
        });
        let added = {
            let mut state = self.state.lock();
            let record = state.record(tx.txg, object);
            record.block_size = Some(size as u32);
            let Some(grown) = grown else {
                return Ok(());
            };
            let replaced = record.blocks.insert(0, grown);
            let written_ahead = record.overrides.remove(&0);
            state.unoverride(tx.txg, written_ahead);
            size as u64 - replaced.map_or(0, |old| old.size_logical())
        };
        if let Some(manager) = self.dirty_accounting.lock().as_ref() {
            manager.add_dirty(tx.txg, added);
        }
        Ok(())
    }

    /// Write `bytes` at `within` into data block `blkid` if `tx`'s txg already holds a new
    /// copy of that block: in place, without reading or copying the whole block (a reader's
    /// clone is left alone: the copy is then made here; a stored payload is decompressed
    /// first). False if the txg has no such copy.
    fn patch_dirty_block(
        &self,
        tx: &Tx,
        object: ObjectId,
        blkid: u64,
        within: usize,
        bytes: &[u8],
    ) -> Result<bool, ObjectError> {
        let mut state = self.state.lock();
        let Some(record) = state
            .dirty
            .get_mut(&tx.txg)
            .and_then(|dirty| dirty.objects.get_mut(&object))
        else {
            return Ok(false);
        };
        let Some(block) = record.blocks.plain_mut(blkid) else {
            return Ok(false);
        };
        block?[within..within + bytes.len()].copy_from_slice(bytes);
        let written_ahead = record.overrides.remove(&blkid);
        state.unoverride(tx.txg, written_ahead);
        Ok(true)
    }

    pub(super) fn dirty_block(&self, tx: &Tx, object: ObjectId, blkid: u64, block: DirtyBlock) {
        let bytes = block.size_logical();
        let replaced = {
            let mut state = self.state.lock();
            let record = state.record(tx.txg, object);
            let replaced = record.blocks.insert(blkid, block).is_some();
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

    /// Write whole data blocks of `object` in `tx`, by block id (a receive's batch): admitted
    /// as [`ObjectSet::write`] is, for the range they span, with the dnode, the reservation,
    /// the object's writer lock, the object set's lock and the dirty-data accounting each
    /// taken once for all of them, and their buffers kept as they are.
    pub fn write_blocks(
        &self,
        tx: &Tx,
        object: ObjectId,
        blocks: Vec<(u64, WholeBlock)>,
    ) -> Result<(), ObjectError> {
        let (Some(first), Some(last)) = (
            blocks.iter().map(|(blkid, _)| *blkid).min(),
            blocks.iter().map(|(blkid, _)| *blkid).max(),
        ) else {
            return Ok(());
        };
        let dnode = self.existing_dnode(object)?;
        let block_size = dnode.data_block_size;
        let mut dirty = Vec::with_capacity(blocks.len());
        for (blkid, block) in blocks {
            let block = match block {
                WholeBlock::Data(data) if data.len() == block_size as usize => {
                    DirtyBlock::Received(Arc::new(data))
                }
                WholeBlock::Stored {
                    compression,
                    payload,
                    fletcher4,
                } if !payload.is_empty() && compression != super::Compression::Off => {
                    DirtyBlock::Stored {
                        compression,
                        payload: Arc::new(payload),
                        size_logical: block_size,
                        fletcher4,
                    }
                }
                _ => {
                    return Err(ObjectError::Invalid(format!(
                        "block {blkid} of object {object} is not a whole block of {block_size} \
                         bytes"
                    )))
                }
            };
            dirty.push((blkid, block));
        }
        check_blocks_addressable(&dnode, first, last)?;
        let reservation = self.reservation.lock().clone();
        if let Some(reservation) = reservation {
            let offset = first * u64::from(block_size);
            let length = (last.saturating_sub(first) + 1).saturating_mul(u64::from(block_size));
            let mut estimate = self.write_estimate(&dnode, tx.txg, object, offset, length);
            estimate.bytes = dirty.len() as u64 * u64::from(block_size);
            reservation.reserve(self, tx, &estimate, Admission::Ordinary)?;
        }
        let _writer = self.lock_object(object);
        let mut added = 0u64;
        {
            let mut state = self.state.lock();
            let mut written_ahead = Vec::new();
            let record = state.record(tx.txg, object);
            for (blkid, block) in dirty {
                let bytes = block.size_logical();
                if record.blocks.insert(blkid, block).is_none() {
                    added += bytes;
                }
                written_ahead.extend(record.overrides.remove(&blkid));
            }
            state.unoverride(tx.txg, written_ahead);
        }
        if added > 0 {
            if let Some(manager) = self.dirty_accounting.lock().as_ref() {
                manager.add_dirty(tx.txg, added);
            }
        }
        Ok(())
    }

    /// Bytes of indirect blocks a write of `length` bytes at `offset` will make the sync of
    /// `txg` rewrite beyond what the txg already dirtied: every level-1 block above the written
    /// blocks that has no dirty child in `txg` yet, with its copies, once per level above the
    /// data. Random small writes are dominated by this: an 8 KiB overwrite makes its indirect
    /// block, in two copies, and the blocks above it new, while the old ones stay allocated
    /// until their frees are two txgs old. Sequential writes share one indirect block per
    /// `fanout` blocks and add little. An indirect block is compressed (lz4), and its holes
    /// compress to almost nothing, so its size is taken as 128 bytes per child the object can
    /// have under it (its blocks up to `max_blkid` or the write's end), rounded up to 4 KiB:
    /// for full indirect blocks the uncompressed size, an upper bound, as OpenZFS's
    /// dmu_tx_count_write estimate is.
    pub fn indirect_estimate(
        &self,
        txg: Txg,
        object: ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<u64, ObjectError> {
        if length == 0 {
            return Ok(0);
        }
        let dnode = self.existing_dnode(object)?;
        let (first, last) = block_span(&dnode, offset, length);
        let state = self.state.lock();
        let record = state.dirty_record(txg, object);
        Ok(indirect_bytes(&dnode, record, first, last))
    }

    /// What a write of `length` bytes at `offset` of `object` (dnode `dnode`, its block size
    /// the one the write grows it to) may cost in `txg` (see [`WriteEstimate`]): one look at
    /// the txg's dirty record of the object, under one lock, answers all three parts.
    fn write_estimate(
        &self,
        dnode: &DnodePhys,
        txg: Txg,
        object: ObjectId,
        offset: u64,
        length: u64,
    ) -> WriteEstimate {
        if length == 0 {
            return WriteEstimate::default();
        }
        let (first, last) = block_span(dnode, offset, length);
        let (metadata, dirty_already, dnode_block) = {
            let state = self.state.lock();
            let record = state.dirty_record(txg, object);
            (
                indirect_bytes(dnode, record, first, last),
                // A block the txg has dirtied already was charged then: it is written once.
                record.map_or(0, |record| record.blocks.range(first..=last).count() as u64),
                // So was the object's dnode block, if the txg has dirtied the object.
                if record.is_none() {
                    state.dnode_block_charge(0)
                } else {
                    0
                },
            )
        };
        let block_size = (dnode.data_block_size as u64).max(1);
        let blocks = (last - first + 1).saturating_sub(dirty_already);
        let data_copies = write_copies(dnode.object_type, 0, dnode.copies) as u64;
        let data = blocks
            .saturating_mul(block_size.next_multiple_of(ALLOCATED_SIZE_UNIT))
            .saturating_mul(data_copies);
        WriteEstimate {
            bytes: length,
            metadata,
            charge: data.saturating_add(metadata).saturating_add(dnode_block),
            owners: None,
        }
    }

    /// The writer lock of `object` (one per object, made on demand): held across a read-modify-write, and by a
    /// key/value handle for its whole life, since one key/value operation touches several blocks.
    pub(crate) fn lock_object(&self, object: ObjectId) -> ObjectLockGuard {
        let lock = self
            .object_locks
            .lock()
            .entry(object)
            .or_insert_with(|| Arc::new(Mutex::new(())))
            .clone();
        let guard = lock.lock_arc();
        ObjectLockGuard {
            object,
            table: self.object_locks.clone(),
            guard: Some(guard),
        }
    }

    /// Replace data block `blkid` whole (the key/value object and space maps write whole blocks).
    pub fn write_block(
        &self,
        tx: &Tx,
        object: ObjectId,
        blkid: u64,
        block: Arc<Vec<u8>>,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        check_blocks_addressable(&dnode, blkid, blkid)?;
        if block.len() != dnode.data_block_size as usize {
            return Err(ObjectError::Invalid(format!(
                "block of {} bytes for block size {}",
                block.len(),
                dnode.data_block_size
            )));
        }
        self.dirty_block(tx, object, blkid, DirtyBlock::Data(block));
        Ok(())
    }
}

/// The first and last block a write of `length` (> 0) bytes at `offset` touches.
fn block_span(dnode: &DnodePhys, offset: u64, length: u64) -> (u64, u64) {
    let block_size = (dnode.data_block_size as u64).max(1);
    (
        offset / block_size,
        offset.saturating_add(length.max(1) - 1) / block_size,
    )
}

/// [`ObjectSet::indirect_estimate`] for blocks `first..=last` of an object (dnode `dnode`)
/// whose dirty record in the txg is `record`.
fn indirect_bytes(
    dnode: &DnodePhys,
    record: Option<&super::dirty::ObjectDirty>,
    first: u64,
    last: u64,
) -> u64 {
    let fanout = dnode.fanout().max(1);
    let end = dnode.max_blkid.max(last) + 1;
    let parent_bytes: u64 = (first / fanout..=last / fanout)
        .filter(|parent| {
            record.is_none_or(|record| {
                let children = parent * fanout..(parent + 1) * fanout;
                record.blocks.range(children).next().is_none()
            })
        })
        .map(|parent| {
            let children = end.saturating_sub(parent * fanout).min(fanout);
            (children * crate::block::blkptr::BLKPTR_SIZE as u64).next_multiple_of(4096)
        })
        .sum();
    let copies = write_copies(dnode.object_type, 1, dnode.copies) as u64;
    let levels_above = (dnode.levels.max(2) - 1) as u64;
    parent_bytes * copies * levels_above
}
