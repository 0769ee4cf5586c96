//! Writing a data block ahead of its txg's sync, for the intent log (OpenZFS dmu_sync).
//!
//! # Theory
//! An fsync of a large write need not copy the data into log blocks (writing it twice, once
//! in the log and once at sync): the block is written now to the place it will have in the
//! tree, and the log records only its pointer (WR_INDIRECT, zil/). The sync of the block's
//! txg then *adopts* that pointer instead of writing the block again (object/prewrite.rs).
//!
//! [`BlockIo::write_now`] encodes the block exactly as the sync would (same compression,
//! checksum, copies, birth txg), allocates it in the block's txg (which the caller holds
//! open, so that the txg cannot sync before the block is on disk and the space maps of that
//! txg record the allocation), and writes every copy in the `sync_write` class without a
//! flush: the log commit flushes once for its data and log blocks together. No gang blocks
//! (a pool too full to place the block whole makes the caller copy the data into the log).
//!
//! A block written ahead and then not adopted (the file changed again in the same txg) is
//! given back by [`BlockIo::give_back`]: freed in the sync of a txg that recorded its
//! allocation, or unallocated if that txg will never sync.
//!
//! # Crash behaviour
//! Until its txg syncs, the block's allocation is in memory only; after a crash, claim at
//! import takes its space back from the allocator for the record that names it (zil/claim.rs),
//! replay copies its data into the file, and the block is freed with the log.

use std::sync::Arc;

use super::blkptr::{BlockPtr, DVAS_MAX};
use super::pipeline::{BlockIo, Encoded, PipelineError, SyncPoint, WriteProps};
use crate::space::storage::SpaceStorage;
use crate::types::Txg;
use crate::vdev::IoClass;

impl BlockIo {
    /// Write data block `data` now, born in `txg` (held open by the caller), as the sync of
    /// `txg` would write it. `None` if the block needs no space (a hole or an embedded block:
    /// the caller logs its bytes instead). The block is not flushed.
    pub fn write_now(
        &self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<Option<BlockPtr>, PipelineError> {
        if !self.is_writable() {
            return Err(PipelineError::WriteFailed("the pool is read-only".into()));
        }
        let at = SyncPoint { txg, pass: 1 };
        let (mut bp, padded, size_allocated) =
            match self.encode(data, Some(data), None, props, 1, at, None) {
                Encoded::Done(_) => return Ok(None),
                Encoded::Physical {
                    bp,
                    padded,
                    size_allocated,
                    ..
                } => (bp, padded, size_allocated),
            };
        let copies = (props.copies as usize).clamp(1, DVAS_MAX);
        let dvas = self.allocate_copies(size_allocated, copies, txg, true, storage)?;
        bp.dvas[..dvas.len()].copy_from_slice(&dvas);
        for dva in bp.copies() {
            let written = self
                .vdevs
                .top(dva.vdev)
                .ok_or_else(|| PipelineError::WriteFailed(format!("no vdev {}", dva.vdev)))
                .and_then(|top| {
                    top.write(IoClass::SyncWrite, dva.offset, &padded)
                        .map_err(|error| PipelineError::WriteFailed(error.to_string()))
                });
            if let Err(error) = written {
                self.give_back(&bp, txg, None)?;
                return Err(error);
            }
        }
        Ok(Some(bp))
    }

    /// Give back a block allocated in txg `allocated` and referenced by no tree: freed in the
    /// sync of `syncing` if `allocated` is that txg or an older one (its allocation is
    /// recorded there), unallocated otherwise (`syncing` None: from open context, where the
    /// allocating txg has not synced).
    pub fn give_back(
        &self,
        bp: &BlockPtr,
        allocated: Txg,
        syncing: Option<Txg>,
    ) -> Result<(), PipelineError> {
        match syncing {
            Some(txg) if allocated <= txg => self.free(bp, txg),
            _ => {
                for dva in bp.copies() {
                    self.space
                        .unalloc(dva.vdev, dva.offset, dva.size_allocated, allocated)?;
                }
                Ok(())
            }
        }
    }
}
