//! Data blocks written ahead of their sync for the intent log, and their adoption (OpenZFS
//! dmu_sync and the dbuf override states).
//!
//! # Theory
//! A log commit of a large write writes the dirty block where it will stay
//! ([`ObjectSet::prepare_prewrite`] and [`ObjectSet::finish_prewrites`], through
//! [`BlockIo::write_prepared`], every block of a commit at once) and records an *override*
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

use std::sync::Arc;

use crate::block::blkptr::BlockPtr;
use crate::block::prewrite::PreparedWrite;
use crate::space::storage::SpaceStorage;
use crate::types::{ObjectId, Txg};

use super::dirty::DirtyBlock;
use super::tree;
use super::{ObjectError, ObjectSet, State};

/// What [`ObjectSet::prepare_prewrite`] found for a block.
pub enum Prewrite {
    /// Nothing to write ahead: the log takes the block's bytes instead.
    NotDirty,
    /// Written ahead already by an earlier commit, as it is now.
    Written(BlockPtr),
    /// Ready to be written by [`ObjectSet::finish_prewrites`].
    Prepared(PreparedPrewrite),
}

/// A block encoded and allocated for writing ahead, with what adopting it needs.
pub struct PreparedPrewrite {
    txg: Txg,
    object: ObjectId,
    blkid: u64,
    /// The dirty contents that were encoded (adopted only if still the block's).
    data: Arc<Vec<u8>>,
    write: PreparedWrite,
}

impl ObjectSet {
    /// Prepare the write ahead of data block `blkid` of `object` (generation `generation`) as
    /// it stands dirty in `txg`, which the caller holds: encoded and allocated, to be written
    /// with the commit's other blocks by [`ObjectSet::finish_prewrites`], which has the sync of
    /// `txg` adopt it. [`Prewrite::NotDirty`] if the block is not dirty in `txg` as a plain
    /// block of that object (nothing to write ahead) or needs no space (a hole or embedded
    /// block); [`Prewrite::Written`] if an earlier commit wrote it ahead as it is now.
    pub fn prepare_prewrite(
        &self,
        txg: Txg,
        object: ObjectId,
        generation: u64,
        blkid: u64,
        storage: &dyn SpaceStorage,
    ) -> Result<Prewrite, ObjectError> {
        let dnode = self.current_dnode(object)?;
        if dnode.is_free() || dnode.generation.0 != generation {
            return Ok(Prewrite::NotDirty);
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
                        return Ok(Prewrite::NotDirty);
                    };
                    // Written ahead already, by an earlier commit, as it is now.
                    if let Some(bp) = record.overrides.get(&blkid) {
                        return Ok(Prewrite::Written(bp.clone()));
                    }
                    data.clone()
                }
                _ => return Ok(Prewrite::NotDirty),
            }
        };
        let props = tree::block_props(&dnode, 0);
        Ok(
            match self.io.prepare_write_now(&data, &props, txg, storage)? {
                Some(write) => Prewrite::Prepared(PreparedPrewrite {
                    txg,
                    object,
                    blkid,
                    data,
                    write,
                }),
                None => Prewrite::NotDirty,
            },
        )
    }

    /// Write the blocks `prepared` all at once (`BlockIo::write_prepared`) and have the sync
    /// of their txg adopt each that was written: one result per block, its pointer or why it
    /// failed (a failed block is given back and not adopted).
    pub fn finish_prewrites(
        &self,
        prepared: Vec<PreparedPrewrite>,
    ) -> Vec<Result<BlockPtr, ObjectError>> {
        let writes: Vec<&PreparedWrite> = prepared.iter().map(|p| &p.write).collect();
        let results = self.io.write_prepared(&writes);
        let mut state = self.state.lock();
        prepared
            .into_iter()
            .zip(results)
            .map(|(prewrite, result)| {
                result?;
                let PreparedPrewrite {
                    txg,
                    object,
                    blkid,
                    data,
                    write,
                } = prewrite;
                let bp = write.bp;
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
                    // Changed meanwhile: the block holds what the file had when it was read,
                    // still valid for the log record that will name it; the sync frees it.
                    _ => state.unoverride(txg, [bp.clone()]),
                }
                Ok(bp)
            })
            .collect()
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
