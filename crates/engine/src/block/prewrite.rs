//! Writing a data block ahead of its txg's sync, for the intent log (OpenZFS dmu_sync). These
//! methods of [`BlockIo`] are apart from the pipelines (`pipeline.rs`) because their caller
//! (the intent log, in open context) and their crash behaviour are their own.
//!
//! # Theory
//! An fsync of a large write need not copy the data into log blocks (writing it twice, once
//! in the log and once at sync): the block is written now to the place it will have in the
//! tree, and the log records only its pointer (WR_INDIRECT, zil/). The sync of the block's
//! txg then *adopts* that pointer instead of writing the block again (object/prewrite.rs).
//!
//! [`BlockIo::prepare_write_now`] encodes the block exactly as the sync would (same
//! compression, checksum, copies, birth txg) and allocates it in the block's txg (which the
//! caller holds open, so that the txg cannot sync before the block is on disk and the space
//! maps of that txg record the allocation); [`BlockIo::write_prepared`] writes every copy of a
//! commit's blocks in the `sync_write` class at once (each durable when it completes, no
//! flush), so that a commit of several blocks costs about one device round trip, not one per
//! block. No gang blocks (a pool too full to place the block whole makes the caller copy the
//! data into the log).
//!
//! A block written ahead and then not adopted (the file changed again in the same txg) is
//! given back by [`BlockIo::give_back`]: freed in the sync of a txg that recorded its
//! allocation, or unallocated if that txg will never sync.
//!
//! # Crash behaviour
//! Until its txg syncs, the block's allocation is in memory only; after a crash, claim at
//! import takes its space back from the allocator for the record that names it (zil/claim.rs),
//! replay copies its data into the file, and the block is freed with the log.

use std::cell::Cell;
use std::sync::Arc;

use super::blkptr::{BlockPtr, DVAS_MAX};
use super::pipeline::{BlockIo, Encoded, PipelineError, SyncPoint, WriteProps};
use crate::space::storage::SpaceStorage;
use crate::types::Txg;
use crate::vdev::IoClass;

thread_local! {
    /// Test hook, off: [`test_hook_write_in_place_not_durable`].
    static NOT_DURABLE: Cell<bool> = const { Cell::new(false) };
}

/// Test hook, off unless a test sets it: [`BlockIo::write_prepared`] called by this thread
/// writes in the `async_write` class, not durable when it completes, so that an fsync returns
/// with its log block durable and the data it names possibly still in a volatile cache. It
/// plants the intent-log ordering bug that tests/zil_indirect.rs shows the power-cut model
/// catching. Per thread, so that tests running beside it are untouched.
#[doc(hidden)]
pub fn test_hook_write_in_place_not_durable(on: bool) {
    NOT_DURABLE.set(on);
}

/// A block [`BlockIo::prepare_write_now`] encoded and allocated, to be written by
/// [`BlockIo::write_prepared`].
pub struct PreparedWrite {
    pub bp: BlockPtr,
    txg: Txg,
    padded: Arc<Vec<u8>>,
}

impl BlockIo {
    /// Encode data block `data`, born in `txg` (held open by the caller), as the sync of `txg`
    /// would write it, and allocate its copies. `None` if the block needs no space (a hole or
    /// an embedded block: the caller logs its bytes instead).
    pub fn prepare_write_now(
        &self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<Option<PreparedWrite>, PipelineError> {
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
        Ok(Some(PreparedWrite { bp, txg, padded }))
    }

    /// Write every copy of every block of `writes` in the `sync_write` class (each durable
    /// when it completes; no flush), all at once, so that the device and the host's journal
    /// take them together: every copy but the last goes to the vdev queues, the last is
    /// written by this thread (usually issued by it: vdev/queue.rs), then the rest are waited
    /// for. One result per block; a block that failed is given back.
    pub fn write_prepared(&self, writes: &[&PreparedWrite]) -> Vec<Result<(), PipelineError>> {
        let copies: Vec<(usize, &crate::block::blkptr::Dva)> = writes
            .iter()
            .enumerate()
            .flat_map(|(index, write)| write.bp.copies().map(move |dva| (index, dva)))
            .collect();
        let failures: Arc<parking_lot::Mutex<Vec<Option<String>>>> =
            Arc::new(parking_lot::Mutex::new(vec![None; writes.len()]));
        let outstanding = Arc::new((parking_lot::Mutex::new(0usize), parking_lot::Condvar::new()));
        let class = if NOT_DURABLE.get() {
            IoClass::AsyncWrite
        } else {
            IoClass::SyncWrite
        };
        let fail =
            |failures: &parking_lot::Mutex<Vec<Option<String>>>, index: usize, error: String| {
                failures.lock()[index].get_or_insert(error);
            };
        for (position, &(index, dva)) in copies.iter().enumerate() {
            let write = writes[index];
            let Some(top) = self.vdevs.top(dva.vdev) else {
                fail(&failures, index, format!("no vdev {}", dva.vdev));
                continue;
            };
            let padded = top.block_bytes(&write.padded, write.bp.size_physical as u64);
            if position + 1 == copies.len() {
                if let Err(error) = top.write_in_txg(class, dva.offset, &padded, write.txg.0) {
                    fail(&failures, index, error.to_string());
                }
                continue;
            }
            *outstanding.0.lock() += 1;
            let failures = failures.clone();
            let outstanding = outstanding.clone();
            top.write_async_in_txg(class, dva.offset, padded, write.txg.0, move |result| {
                if let Err(error) = result {
                    fail(&failures, index, error.to_string());
                }
                let (count, done) = &*outstanding;
                let mut count = count.lock();
                *count -= 1;
                if *count == 0 {
                    done.notify_all();
                }
            });
        }
        {
            let (count, done) = &*outstanding;
            let mut count = count.lock();
            while *count > 0 {
                done.wait(&mut count);
            }
        }
        let failures = std::mem::take(&mut *failures.lock());
        writes
            .iter()
            .zip(failures)
            .map(|(write, failure)| match failure {
                None => Ok(()),
                Some(error) => {
                    self.give_back(&write.bp, write.txg, None)?;
                    Err(PipelineError::WriteFailed(error))
                }
            })
            .collect()
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
