//! Write admission for the pool (OpenZFS dsl_dir_tempreserve_space against
//! spa_get_slop_space): the `WriteReservation` datasets ask before they dirty data (space
//! outside the slop, with the indirect blocks a write will rewrite), and the space check of
//! administrative changes ([`SpaceCheck`]). Frees, the other way space moves, are the sync
//! driver's (`PoolFreer` in `sync.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::sync::Weak;

use crate::block::pipeline::BlockIo;
use crate::dataset::Dataset;
use crate::object::{Admission, ObjectError, ObjectSet, Tx, WriteEstimate, WriteReservation};
use crate::txg::TxgManager;
use crate::types::Txg;

use super::{PoolCore, PoolError};

/// Admission of new data into the pool's datasets: a write is refused with "no space" when the
/// data already in flight plus this write, doubled for copies, plus the indirect blocks the
/// writes in flight will rewrite (each write's estimate, reserved in the txg layer until its
/// txg has synced) would not fit in the free space outside the slop (OpenZFS's tempreserve
/// against spa_get_slop_space, with dmu_tx_count_write's indirect estimate). Frees
/// are never refused, and syncing can always use the slop, so a full pool stays writable for
/// deletes and never suspends for lack of space.
///
/// Data in flight is only an estimate of what will be allocated: when it is what tips the
/// balance, the writer first waits for the txgs before its own to sync (their allocations and
/// frees then show in the free space, and their dirty bytes leave the estimate), as OpenZFS
/// retries a tempreserve after a txg wait, and is refused only if the write still does not
/// fit. A fast writer on a small pool is thus slowed, not failed.
///
/// The free space comes from the space layer's counters, which take no lock: admission never
/// waits for the sync thread, which holds a metaslab group's lock through that group's sync
/// and through metaslab loads.
///
/// When some dataset of the pool sets a quota or a reservation, a write is also admitted
/// against the limits of its dataset and those above it (`limits.rs`), waiting for the
/// earlier txgs in the same way before it is refused.
pub(super) struct PoolReservation {
    pub(super) io: Arc<BlockIo>,
    pub(super) txgs: Arc<TxgManager>,
    /// Space held back for write-backs of kernel caches (see [`WriteReservation`]), shared
    /// by every dataset of the pool: `PoolCore::held_back`.
    pub(super) held_back: Arc<AtomicU64>,
    /// The dataset written, and the pool's limits.
    pub(super) dataset: Weak<Dataset>,
    pub(super) limits: Arc<super::limits::PoolLimits>,
}

impl PoolReservation {
    fn fits(&self, bytes: u64, metadata: u64, admission: Admission) -> bool {
        let (held_back, slop_kept) = match admission {
            Admission::Ordinary => (self.held_back.load(Ordering::Relaxed), SlopKept::All),
            Admission::WriteBack => (0, SlopKept::All),
            Admission::Replay => (0, SlopKept::Half),
        };
        admission_fits(&self.io, &self.txgs, bytes, metadata, held_back, slop_kept)
    }
}

/// How much of the slop a write leaves alone.
#[derive(Clone, Copy)]
enum SlopKept {
    All,
    /// An intent-log replay's write ([`Admission::Replay`]).
    Half,
}

/// Would a write of `bytes` (and `metadata` bytes of indirect blocks) be admitted now (see
/// [`PoolReservation`]), leaving `held_back` bytes and the slop (or half of it) free? Takes
/// no space-layer lock.
fn admission_fits(
    io: &BlockIo,
    txgs: &TxgManager,
    bytes: u64,
    metadata: u64,
    held_back: u64,
    slop_kept: SlopKept,
) -> bool {
    let totals = io.space.counters();
    let (dirty, reserved) = txgs.dirty_and_reserved();
    let needed = dirty
        .saturating_add(bytes)
        .saturating_mul(2)
        .saturating_add(reserved)
        .saturating_add(metadata)
        .saturating_add(held_back);
    let slop = totals.slop(io.tunables.spa_min_slop);
    let kept = match slop_kept {
        SlopKept::All => slop,
        SlopKept::Half => slop / 2,
    };
    needed <= totals.free.saturating_sub(kept)
}

impl PoolReservation {
    /// Admit `estimate` in `txg` now, or say why not: the pool's space first, then the
    /// limits (which, admitting, charge the estimate in flight).
    fn admit(
        &self,
        objset: &ObjectSet,
        txg: Txg,
        estimate: &WriteEstimate,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        if !self.fits(estimate.bytes, estimate.metadata, admission) {
            return Err(ObjectError::NoSpace);
        }
        let Some(dataset) = self.dataset.upgrade() else {
            return Ok(());
        };
        // The owners' quotas first (`owner_quotas.rs`): they charge only what they admit.
        if let Some(owners) = estimate.owners {
            PoolCore::owner_admit_write(&dataset, objset, txg, owners, estimate.charge, admission)?;
        }
        self.limits
            .admit(&self.io, &dataset, Some(txg), estimate.charge, admission)
    }
}

impl WriteReservation for PoolReservation {
    fn reserve(
        &self,
        objset: &ObjectSet,
        tx: &Tx,
        estimate: &WriteEstimate,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        if let Err(refusal) = self.admit(objset, tx.txg, estimate, admission) {
            // Earlier txgs are closed: waiting for them never waits on the caller's own hold.
            let previous = Txg(tx.txg.0.saturating_sub(1));
            if self.txgs.last_synced() >= previous {
                return Err(refusal);
            }
            self.txgs.wait_synced(Some(previous))?;
            self.admit(objset, tx.txg, estimate, admission)?;
        }
        self.txgs.reserve_metadata(tx.txg, estimate.metadata);
        Ok(())
    }

    fn admits(&self, bytes: u64, admission: Admission) -> Result<(), ObjectError> {
        if !PoolReservation::fits(self, bytes, 0, admission) {
            return Err(ObjectError::NoSpace);
        }
        match self.dataset.upgrade() {
            Some(dataset) => self
                .limits
                .admit(&self.io, &dataset, None, bytes, admission),
            None => Ok(()),
        }
    }

    fn charge_metadata(&self, tx: &Tx, charge: u64) -> Result<(), ObjectError> {
        let Some(dataset) = self.dataset.upgrade() else {
            return Ok(());
        };
        let admit = || {
            self.limits.admit(
                &self.io,
                &dataset,
                Some(tx.txg),
                charge,
                Admission::Ordinary,
            )
        };
        if let Err(refusal) = admit() {
            let previous = Txg(tx.txg.0.saturating_sub(1));
            if self.txgs.last_synced() >= previous {
                return Err(refusal);
            }
            self.txgs.wait_synced(Some(previous))?;
            admit()?;
        }
        Ok(())
    }

    fn owner_admits(
        &self,
        owners: crate::object::owners::Owners,
        previous: Option<crate::object::owners::Owners>,
        objects: u64,
    ) -> Result<(), ObjectError> {
        match self.dataset.upgrade() {
            Some(dataset) => {
                PoolCore::owner_admits(&dataset, self.txgs.open_txg(), owners, previous, objects, 0)
            }
            None => Ok(()),
        }
    }

    fn owner_write_admits(
        &self,
        owners: crate::object::owners::Owners,
        bytes: u64,
    ) -> Result<(), ObjectError> {
        match self.dataset.upgrade() {
            Some(dataset) => {
                PoolCore::owner_admits(&dataset, self.txgs.open_txg(), owners, None, 0, bytes)
            }
            None => Ok(()),
        }
    }

    fn hold_back(&self, bytes: u64) {
        self.held_back.fetch_add(bytes, Ordering::Relaxed);
        if let Some(dataset) = self.dataset.upgrade() {
            super::limits::for_each_level(&dataset, |level| level.limits.hold_back(bytes));
        }
    }

    fn release_held_back(&self, bytes: u64) {
        // Saturating: a release never takes more than was held.
        let _ = self
            .held_back
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(held.saturating_sub(bytes))
            });
        if let Some(dataset) = self.dataset.upgrade() {
            super::limits::for_each_level(&dataset, |level| level.limits.release_held_back(bytes));
        }
    }
}

impl PoolCore {
    /// Would a write of `bytes` into this pool's datasets be admitted now? The check writers
    /// make before they dirty data; it never waits for the sync thread.
    pub fn write_fits(&self, bytes: u64) -> bool {
        admission_fits(
            &self.io,
            &self.txgs,
            bytes,
            0,
            self.held_back.load(Ordering::Relaxed),
            SlopKept::All,
        )
    }
}

/// How much of the slop an administrative change (a snapshot, a clone, a property) may use,
/// as OpenZFS's `zfs_space_check_t` decides for its sync tasks. Their metadata is not counted
/// by write admission, so without this check a pool refusing writes still took snapshots
/// and clones until their metadata had eaten the slop that syncing relies on (tarn-stress
/// found a 176 MiB pool 89% allocated with half of it kept as slop, too fragmented for a
/// log block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceCheck {
    /// Changes that create things (snapshots, clones, file systems, bookmarks): refused
    /// where user writes are, once only the slop is free (ZFS_SPACE_CHECK_NORMAL).
    Normal,
    /// Changes an administrator makes to recover space (a property set, a rename, a
    /// promote): they may use half the slop (ZFS_SPACE_CHECK_RESERVED). Destroys are never
    /// checked: they are the way out.
    Reserved,
}

/// Space counted for each change of a space check: the blocks a dataset change rewrites
/// (its record, directory, name maps), at OpenZFS's average of 16 KiB each.
const SPACE_PER_CHANGE: u64 = 4 * (16 << 10);

impl PoolCore {
    /// Refuse `changes` administrative changes described by `what` ("create snapshot
    /// tank@a") when they would take free space below what `check` keeps.
    pub(super) fn check_space(
        &self,
        check: SpaceCheck,
        changes: usize,
        what: &str,
    ) -> Result<(), PoolError> {
        let totals = self.io.space.counters();
        let slop = totals.slop(self.io.tunables.spa_min_slop);
        let kept = match check {
            SpaceCheck::Normal => slop,
            SpaceCheck::Reserved => slop / 2,
        };
        let needed = SPACE_PER_CHANGE.saturating_mul(changes as u64);
        if totals.free.saturating_sub(kept) < needed {
            return Err(PoolError::OutOfSpace(what.to_string()));
        }
        Ok(())
    }
}
