//! RAID-Z expansion at the pool layer (`pool attach POOL raidzN-M NEW_DEVICE`, OpenZFS 2.3):
//! the checks, the attach, the copy thread and its durable progress, and the end.
//!
//! # Theory
//! The attach (one txg) gives the vdev a new last column slot and marks it expanding; nothing
//! moves, every sector is at its old place (`vdev/raidz/placement.rs`) and the vdev's space is
//! unchanged. A copy thread (`tarn-reflow-<pool>`) then moves every sector of the address
//! space to its place in the wider stripe, lowest first (`vdev/raidz/reflow.rs`):
//!
//! 1. *The scratch phase*, in syncing context at the start of a txg: the first rows, whose new
//!    places overwrite old places still needed, go through every child's scratch area with an
//!    uberblock of their own ([`PoolCore::run_reflow_scratch_phase`]).
//! 2. *Metaslab by metaslab*: the metaslab takes no allocations while it is copied, its copy
//!    set is everything in it not free, and the copy runs in batches (each held exclusively
//!    against block I/O, flushed, then counted). A batch never passes the overwrite limit of
//!    the progress the last uberblock carries: at the limit the thread forces a txg.
//! 3. *The end*: once the last uberblock says every sector is copied, a txg gives the vdev its
//!    new width (for blocks born from three txgs on: open-context intent-log blocks of the next
//!    two were sized with the old one) and its grown space, and a scrub starts (the copy moved
//!    sectors without checking them).
//!
//! A degraded vdev (a child unusable, missing txgs, or being replaced) pauses the copy: it
//! reads one child per slot, raw. `pool status` shows the progress, from memory and from a
//! record in the MOS that survives export ([`RaidzExpansionStatus`]).
//!
//! The uberblock's reflow word is the copy's durable progress, so that an import after a
//! crash resumes where it stood; an import never falls back to an uberblock whose word differs
//! from the newest's (its old places may have been overwritten since).

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::uberblock::Uberblock;
use super::vdev_change::VdevChange;
use super::{
    kv_set_u64, lookup_mos_directory, now_seconds, Pool, PoolCore, PoolError, MOS_OBJECT_DIRECTORY,
    RAIDZ_EXPANSION_FEATURE,
};
use crate::object::Tx;
use crate::types::{Txg, VdevId, TXG_CONCURRENT_STATES};
use crate::vdev::raidz::expand::RaidzReflow;
use crate::vdev::raidz::progress::{ReflowProgress, ScratchState};
use crate::vdev::raidz::reflow::{next_batch, scratch_logical_sectors, scratch_sectors};
use crate::vdev::tree::raidz_reflow::{copy_batch, copy_sectors, Laid};
use crate::vdev::{TopVdev, RAIDZ_CHILDREN_MAX};

/// How long the copy thread sleeps while paused before it looks again (a resilver's end or
/// `pool clear` wakes it at once).
const PAUSED_WAIT: Duration = Duration::from_secs(1);

/// The MOS object directory keys of the newest expansion's record.
const KEY_VDEV: &str = "raidz_expand_vdev";
const KEY_STATE: &str = "raidz_expand_state";
const KEY_START: &str = "raidz_expand_start";
const KEY_END: &str = "raidz_expand_end";
const KEY_COPIED: &str = "raidz_expand_copied";
const KEY_WIDTH: &str = "raidz_expand_width";
const STATE_EXPANDING: u64 = 1;
const STATE_FINISHED: u64 = 2;

/// Where the newest RAID-Z expansion of a pool stands (`pool status`'s `expand:` line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaidzExpansionStatus {
    /// The vdev's name (`raidz1-0`).
    pub vdev: String,
    pub vdev_id: VdevId,
    /// Its width once expanded.
    pub width: u64,
    pub finished: bool,
    /// Why the copy waits, while it does.
    pub paused: Option<String>,
    /// Seconds since the Unix epoch.
    pub start_time: u64,
    pub end_time: Option<u64>,
    /// Bytes copied so far (finished: in all).
    pub copied: u64,
    /// Bytes of the vdev's address space reflowed (durable), of `total`.
    pub reflowed: u64,
    pub total: u64,
}

/// The pool's expansion state outside the vdev tree: the copy thread, the scratch phase's
/// request, the newest uberblock (the scratch phase writes copies of it), and the record.
#[derive(Default)]
pub(super) struct ExpandState {
    thread: Mutex<Option<JoinHandle<()>>>,
    stopping: AtomicBool,
    wake_lock: Mutex<()>,
    wake: Condvar,
    scratch_wanted: AtomicBool,
    scratch_error: Mutex<Option<String>>,
    last_uberblock: Mutex<Option<Uberblock>>,
    record: Mutex<Record>,
}

/// The newest expansion's record, as in the MOS plus what this process copied.
#[derive(Clone, Debug, Default)]
struct Record {
    vdev: Option<VdevId>,
    width: u64,
    state: u64,
    start: u64,
    end: u64,
    copied: u64,
    /// `copied` as the MOS has it.
    copied_persisted: u64,
    paused: Option<String>,
}

impl ExpandState {
    /// The commit of an uberblock (`sync.rs`).
    pub(super) fn committed(&self, uberblock: Uberblock) {
        *self.last_uberblock.lock() = Some(uberblock);
    }

    /// Wake the copy thread (a resilver ended, a device came back).
    pub(super) fn wake(&self) {
        let _held = self.wake_lock.lock();
        self.wake.notify_all();
    }

    fn sleep(&self, duration: Duration) {
        let mut held = self.wake_lock.lock();
        if !self.stopping.load(Ordering::Acquire) {
            self.wake.wait_for(&mut held, duration);
        }
    }
}

impl Pool {
    /// `pool attach POOL raidzN-M NEW_DEVICE`: add `new_path` to the RAID-Z vdev named `vdev`
    /// as a new column and start the copy that moves every sector to the wider stripe.
    /// Returns the txg of the attach; the copy runs in the background
    /// ([`Pool::raidz_expansion`], [`Pool::wait_raidz_expansion`]).
    pub fn expand_raidz(&self, vdev: &str, new_path: &Path, force: bool) -> Result<Txg, PoolError> {
        self.refuse_readonly("attach")?;
        let refused = |why: String| {
            Err(PoolError::Refused(format!(
                "cannot attach {} to {vdev}: {why}",
                new_path.display()
            )))
        };
        self.core.require_feature(
            RAIDZ_EXPANSION_FEATURE,
            &format!("cannot attach {} to {vdev}", new_path.display()),
            PoolError::Refused,
        )?;
        let _request = self.core.vdev_changes.request.lock();
        let tops = self.core.io.vdevs.tops();
        let Some(top) = tops
            .iter()
            .find(|top| top.kind.group_name(top.id.0).as_deref() == Some(vdev))
            .cloned()
        else {
            return refused("no such raidz vdev".into());
        };
        if top.raidz_geometry().is_none() {
            return refused(
                "only a raidz vdev can be expanded; attach to one of its devices to make a mirror"
                    .into(),
            );
        }
        if top.is_log() {
            return refused("it is a log vdev".into());
        }
        if let Some(other) = tops.iter().find(|other| other.raidz_expanding()) {
            return refused(format!(
                "raidz expansion of {} is already in progress (one at a time per pool)",
                other.kind.group_name(other.id.0).unwrap_or_default()
            ));
        }
        if let Some(why) = reflow_blocked(&top) {
            return refused(format!("{why}; the vdev must be healthy to expand"));
        }
        let width = top.raidz_slot_count();
        if width + 1 > RAIDZ_CHILDREN_MAX || (width as u64 + 1) > scratch_sectors(top.sector_size())
        {
            return refused(format!("{vdev} already has {width} children"));
        }
        let leaf = self.open_new_leaf(new_path, force, top.child_asize(), false)?;
        log::info!(
            "pool {}: expanding {vdev} with {} ({} to {} children)",
            self.core.name,
            leaf.path.display(),
            width,
            width + 1
        );
        let guid = leaf.guid;
        self.core
            .queue_vdev_change(VdevChange::RaidzExpand { top: top.id, leaf });
        let txg = self.sync()?;
        if self.core.io.vdevs.leaf_by_guid(guid).is_none() {
            return refused("the pool changed meanwhile; try again".into());
        }
        drop(_request);
        // Open-context writes of the txgs open at the attach went through the old generation,
        // at old places only: the copy starts once they have synced.
        let open_at_attach = Txg(txg.0 + TXG_CONCURRENT_STATES as u64 - 1);
        self.core.txgs.wait_synced(Some(open_at_attach))?;
        self.start_reflow_thread();
        Ok(txg)
    }

    /// Where the newest RAID-Z expansion stands, if the pool ever had one.
    pub fn raidz_expansion(&self) -> Option<RaidzExpansionStatus> {
        let record = self.core.raidz_expand.record.lock().clone();
        let vdev_id = record.vdev?;
        let top = self.core.io.vdevs.top(vdev_id)?;
        let (reflowed, total) = match top.raidz_reflow() {
            Some(_) => (
                self.core.durable_reflow_sectors(&top) * top.sector_size(),
                top.asize,
            ),
            None => (top.asize, top.asize),
        };
        Some(RaidzExpansionStatus {
            vdev: top.kind.group_name(top.id.0).unwrap_or_default(),
            vdev_id,
            width: record.width,
            finished: record.state == STATE_FINISHED,
            paused: record.paused.filter(|_| record.state != STATE_FINISHED),
            start_time: record.start,
            end_time: (record.state == STATE_FINISHED).then_some(record.end),
            copied: record.copied,
            reflowed: if record.state == STATE_FINISHED {
                total
            } else {
                reflowed
            },
            total,
        })
    }

    /// Wait until no RAID-Z expansion is under way (`pool wait -t raidz_expand`).
    pub fn wait_raidz_expansion(&self) -> Result<(), PoolError> {
        loop {
            let expanding = self
                .core
                .io
                .vdevs
                .tops()
                .iter()
                .any(|top| top.raidz_expanding());
            if !expanding {
                return Ok(());
            }
            if let Some(why) = self.core.txgs.failure() {
                return Err(PoolError::SyncFailed {
                    txg: self.core.txgs.last_synced(),
                    why,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Start the copy thread of a writable pool with an expansion under way.
    pub(super) fn start_reflow_thread(&self) {
        if self.core.readonly {
            return;
        }
        let mut thread = self.core.raidz_expand.thread.lock();
        if thread.as_ref().is_some_and(|handle| !handle.is_finished()) {
            return;
        }
        if !self
            .core
            .io
            .vdevs
            .tops()
            .iter()
            .any(|top| top.raidz_expanding())
        {
            return;
        }
        self.core
            .raidz_expand
            .stopping
            .store(false, Ordering::Release);
        let core = self.core.clone();
        match std::thread::Builder::new()
            .name(format!("tarn-reflow-{}", self.core.name))
            .spawn(move || core.run_reflow())
        {
            Ok(handle) => *thread = Some(handle),
            // Nothing is lost: the expansion resumes at the next import.
            Err(error) => log::warn!(
                "pool {}: no raidz reflow thread, the expansion waits for the next import: {error}",
                self.core.name
            ),
        }
    }

    /// Stop the copy thread (export, close): its progress not yet counted is copied again
    /// after the next import.
    pub(super) fn stop_reflow_thread(&self) {
        let expand = &self.core.raidz_expand;
        expand.stopping.store(true, Ordering::Release);
        expand.wake();
        if let Some(handle) = expand.thread.lock().take() {
            let _ = handle.join();
        }
    }
}

/// Why the copy cannot run on `top` now: it reads one child of each slot, raw, so every child
/// must be there and hold every txg.
fn reflow_blocked(top: &TopVdev) -> Option<String> {
    for slot in 0..top.raidz_slot_count() {
        let children = top.slot_children(slot);
        let leaf = &top.children[children[0]];
        if children.len() > 1 {
            return Some(format!("{} is being replaced", leaf.path.display()));
        }
        if !leaf.is_usable() {
            return Some(format!(
                "{} is {}",
                leaf.path.display(),
                leaf.health().as_str()
            ));
        }
        if !leaf.dtl.is_empty() {
            return Some(format!(
                "{} is missing data (let the resilver finish)",
                leaf.path.display()
            ));
        }
    }
    None
}

/// What one step of the copy thread came to.
enum Step {
    Continue,
    Done,
    Wait(String),
}

impl PoolCore {
    fn expanding_vdev(&self) -> Option<(Arc<TopVdev>, Arc<RaidzReflow>)> {
        self.io.vdevs.tops().iter().find_map(|top| {
            let reflow = top.raidz_reflow()?.clone();
            Some((top.clone(), reflow))
        })
    }

    /// Sectors of `top`'s address space the newest uberblock says are reflowed.
    fn durable_reflow_sectors(&self, top: &TopVdev) -> u64 {
        self.last_committed_reflow
            .lock()
            .as_ref()
            .filter(|word| word.vdev == top.id)
            .map_or(0, |word| word.offset / top.sector_size())
    }

    fn run_reflow(self: Arc<Self>) {
        let expand = &self.raidz_expand;
        while !expand.stopping.load(Ordering::Acquire) {
            let step = self.reflow_step();
            let paused = match step {
                Ok(Step::Continue) => None,
                Ok(Step::Done) => return,
                Ok(Step::Wait(why)) => Some(why),
                Err(error) => {
                    if self.txgs.failure().is_some() {
                        return;
                    }
                    Some(format!("{error}"))
                }
            };
            let mut record = expand.record.lock();
            if record.paused != paused {
                match &paused {
                    Some(why) => log::warn!("pool {}: raidz expansion paused: {why}", self.name),
                    None => log::info!("pool {}: raidz expansion resumed", self.name),
                }
                record.paused = paused.clone();
            }
            drop(record);
            if paused.is_some() {
                expand.sleep(PAUSED_WAIT);
            }
        }
    }

    /// One step: the scratch phase, one metaslab, or the end.
    fn reflow_step(&self) -> Result<Step, PoolError> {
        let Some((top, reflow)) = self.expanding_vdev() else {
            return Ok(Step::Done);
        };
        if let Some(why) = reflow_blocked(&top) {
            return Ok(Step::Wait(why));
        }
        let sector = top.sector_size();
        let total = top.asize / sector;
        let view = reflow.view();
        if view.synced == 0 || view.scratch {
            self.raidz_expand
                .scratch_wanted
                .store(true, Ordering::Release);
            self.txgs.wait_synced(None)?;
            if let Some(error) = self.raidz_expand.scratch_error.lock().take() {
                return Ok(Step::Wait(error));
            }
            return Ok(Step::Continue);
        }
        let stop_at = self.tunables.raidz_expand_max_reflow_bytes / sector;
        if view.next >= total || (stop_at > 0 && view.next >= stop_at) {
            if view.synced < view.next {
                top.flush()?;
                reflow.commit(view.next);
            }
            if self.durable_reflow_sectors(&top) < view.next {
                self.txgs.wait_synced(None)?;
                return Ok(Step::Continue);
            }
            if view.next < total {
                return Ok(Step::Wait(
                    "stopped at raidz_expand_max_reflow_bytes".to_string(),
                ));
            }
            self.queue_vdev_change(VdevChange::RaidzExpandDone { top: top.id });
            self.txgs.wait_synced(None)?;
            return Ok(Step::Continue);
        }
        let metaslab = (view.next * sector) >> top.ms_shift;
        let metaslab_end =
            (((metaslab + 1) << top.ms_shift).min(top.asize) / sector).min(if stop_at > 0 {
                stop_at.max(view.next + 1)
            } else {
                u64::MAX
            });
        let open = Txg(self.txgs.last_synced().0 + 1);
        let ranges =
            self.io
                .space
                .disable_metaslab(top.id, metaslab as usize, open, &self.storage())?;
        let copied = self.copy_metaslab(&top, &reflow, &ranges, metaslab_end);
        self.io.space.enable_metaslabs(top.id);
        copied?;
        Ok(Step::Continue)
    }

    /// Copy what is not free of one metaslab (`ranges`, bytes) up to sector `end`, then count
    /// the rest of it as copied (free space, which no allocation can take meanwhile).
    fn copy_metaslab(
        &self,
        top: &TopVdev,
        reflow: &RaidzReflow,
        ranges: &[Range<u64>],
        end: u64,
    ) -> Result<(), PoolError> {
        let sector = top.sector_size();
        let width = top.raidz_slot_count() as u64;
        let max_sectors = (self.tunables.raidz_expand_max_copy_bytes / sector).max(1);
        for range in ranges {
            let range =
                (range.start / sector).max(reflow.view().next)..range.end.div_ceil(sector).min(end);
            loop {
                if self.raidz_expand.stopping.load(Ordering::Acquire) {
                    return Ok(());
                }
                let view = reflow.view();
                if view.next >= range.end {
                    break;
                }
                reflow.skip_to(range.start);
                let durable = self.durable_reflow_sectors(top);
                match next_batch(
                    &range,
                    view.next.max(range.start),
                    durable,
                    width,
                    max_sectors,
                ) {
                    Some(batch) => {
                        if let Err(error) = copy_batch(top, batch.clone()) {
                            reflow.retreat(batch.start);
                            return Err(error.into());
                        }
                        top.flush()?;
                        reflow.commit(batch.end);
                        self.raidz_expand.record.lock().copied +=
                            (batch.end - batch.start) * sector;
                    }
                    // The overwrite limit of the durable progress: a txg makes it move (with
                    // the free space skipped up to here counted).
                    None => {
                        let view = reflow.view();
                        if view.synced < view.next {
                            top.flush()?;
                            reflow.commit(view.next);
                        }
                        self.txgs.wait_synced(None)?;
                    }
                }
            }
        }
        reflow.skip_to(end);
        Ok(())
    }

    /// Syncing context, at the start of a txg: the scratch phase the copy thread asked for
    /// (`vdev/raidz/reflow.rs`), and the copied bytes of the record. The first rows are read
    /// from their old places and written in the new layout to every child's scratch area; a
    /// copy of the newest uberblock saying so goes to the ring slot before it (the newest
    /// stays whole); the rows go to their real places; this txg's uberblock says they are
    /// there. A crash in between finds the scratch valid, and import copies it again.
    pub(super) fn run_reflow_scratch_phase(&self, txg: Txg) -> Result<(), PoolError> {
        self.persist_copied(txg)?;
        if !self
            .raidz_expand
            .scratch_wanted
            .swap(false, Ordering::AcqRel)
        {
            return Ok(());
        }
        let Some((top, reflow)) = self.expanding_vdev() else {
            return Ok(());
        };
        let outcome = self.scratch_phase(&top, &reflow);
        if let Err(error) = &outcome {
            log::warn!(
                "pool {}: the scratch phase of the raidz expansion failed: {error}",
                self.name
            );
        }
        *self.raidz_expand.scratch_error.lock() = outcome.err().map(|error| error.to_string());
        Ok(())
    }

    fn scratch_phase(&self, top: &TopVdev, reflow: &RaidzReflow) -> Result<(), PoolError> {
        let sector = top.sector_size();
        let width = top.raidz_slot_count() as u64;
        let view = reflow.view();
        if view.scratch {
            // A phase cut short by an error after the scratch was valid: copy it again.
            let _held = reflow.hold(0..view.synced);
            copy_sectors(top, 0..view.synced, Laid::Scratch, Laid::New)?;
            top.flush()?;
            reflow.commit(view.synced);
            return Ok(());
        }
        if view.synced > 0 {
            return Ok(());
        }
        let Some(newest) = self.raidz_expand.last_uberblock.lock().clone() else {
            return Err(PoolError::Refused("no uberblock committed yet".into()));
        };
        let sectors = scratch_logical_sectors(width, sector).min(top.asize / sector);
        let held = reflow.begin_batch(0..sectors, width);
        let copied = copy_sectors(top, 0..sectors, Laid::Old, Laid::Scratch)
            .map_err(PoolError::from)
            .and_then(|_| Ok(top.flush()?));
        if let Err(error) = copied {
            drop(held);
            reflow.retreat(0);
            return Err(error);
        }
        // From here the scratch area is valid: whatever fails, reads of the first rows go
        // there and the next uberblock says so, until they are at their real places.
        let valid = ReflowProgress {
            vdev: top.id,
            scratch: ScratchState::Valid,
            offset: sectors * sector,
        };
        reflow.set_committed(&valid);
        let scratch_uberblock = Uberblock {
            timestamp: newest.timestamp + 1,
            reflow: Some(valid),
            ..newest.clone()
        };
        self.write_uberblock(&scratch_uberblock, newest.txg.0.wrapping_sub(1))?;
        self.flush()?;
        copy_sectors(top, 0..sectors, Laid::Scratch, Laid::New)?;
        top.flush()?;
        reflow.commit(sectors);
        drop(held);
        self.raidz_expand.record.lock().copied += sectors * sector;
        log::info!(
            "pool {}: raidz expansion of vdev {}: the first {} bytes are reflowed",
            self.name,
            top.id,
            sectors * sector
        );
        Ok(())
    }

    /// Write the record's copied bytes when they changed (syncing context).
    fn persist_copied(&self, txg: Txg) -> Result<(), PoolError> {
        let copied = {
            let record = self.raidz_expand.record.lock();
            if record.vdev.is_none() || record.copied == record.copied_persisted {
                return Ok(());
            }
            record.copied
        };
        kv_set_u64(
            &self.mos,
            &Tx::syncing(txg),
            MOS_OBJECT_DIRECTORY,
            KEY_COPIED,
            copied,
        )?;
        self.raidz_expand.record.lock().copied_persisted = copied;
        Ok(())
    }

    /// Syncing context (`apply_vdev_changes`): the attach. Returns the new generation.
    pub(super) fn apply_raidz_expand(
        &self,
        top: &TopVdev,
        leaf: Arc<crate::vdev::Leaf>,
        txg: Txg,
    ) -> Result<Option<TopVdev>, PoolError> {
        if top.raidz_expanding() || self.expanding_vdev().is_some() {
            log::warn!(
                "pool {}: raidz expansion of vdev {}: another expansion is under way",
                self.name,
                top.id
            );
            return Ok(None);
        }
        let next = top.raidz_expanding_with(leaf.clone())?;
        self.feature_increment(RAIDZ_EXPANSION_FEATURE)?;
        let width = next.raidz_slot_count() as u64;
        let now = now_seconds();
        let tx = Tx::syncing(txg);
        for (key, value) in [
            (KEY_VDEV, top.id.0 as u64 + 1),
            (KEY_STATE, STATE_EXPANDING),
            (KEY_START, now),
            (KEY_END, 0),
            (KEY_COPIED, 0),
            (KEY_WIDTH, width),
        ] {
            kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, key, value)?;
        }
        *self.raidz_expand.record.lock() = Record {
            vdev: Some(top.id),
            width,
            state: STATE_EXPANDING,
            start: now,
            ..Record::default()
        };
        let name = top.kind.group_name(top.id.0).unwrap_or_default();
        self.log_history(
            &format!(
                "[internal] raidz vdev expansion started: {name} new width {width}, device {}",
                leaf.path.display()
            ),
            0,
        );
        log::info!(
            "pool {}: {} attached to {name} in txg {txg}: expanding to {width} children",
            self.name,
            leaf.path.display()
        );
        Ok(Some(next))
    }

    /// Syncing context (`apply_vdev_changes`): the end of an expansion whose copy the newest
    /// uberblock counts whole. Returns the new generation, wider and grown.
    pub(super) fn apply_raidz_expand_done(
        &self,
        top: &TopVdev,
        txg: Txg,
    ) -> Result<Option<TopVdev>, PoolError> {
        let Some(reflow) = top.raidz_reflow() else {
            return Ok(None);
        };
        let sector = top.sector_size();
        if reflow.view().synced < top.asize / sector
            || self.durable_reflow_sectors(top) < top.asize / sector
        {
            log::warn!(
                "pool {}: raidz expansion of vdev {}: asked to finish before the copy",
                self.name,
                top.id
            );
            return Ok(None);
        }
        let width = top.raidz_slot_count() as u64;
        let per_child = top
            .children
            .iter()
            .map(|leaf| leaf.allocatable_bytes())
            .min()
            .unwrap_or(0)
            / sector
            * sector;
        let mut asize = (per_child * width) >> top.ms_shift << top.ms_shift;
        if crate::space::check_metaslab_geometry(asize, top.ms_shift, top.ashift).is_err() {
            asize = top.asize;
        }
        let asize = asize.max(top.asize);
        let from = txg.0 + TXG_CONCURRENT_STATES as u64;
        let next = top.raidz_expanded(from, asize)?;
        self.io.space.grow_vdev(top.id, asize, next.alloc_unit())?;
        let now = now_seconds();
        let copied = {
            let mut record = self.raidz_expand.record.lock();
            record.state = STATE_FINISHED;
            record.end = now;
            record.paused = None;
            record.copied
        };
        let tx = Tx::syncing(txg);
        for (key, value) in [
            (KEY_STATE, STATE_FINISHED),
            (KEY_END, now),
            (KEY_COPIED, copied),
        ] {
            kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, key, value)?;
        }
        self.raidz_expand.record.lock().copied_persisted = copied;
        let name = top.kind.group_name(top.id.0).unwrap_or_default();
        self.log_history(
            &format!(
                "[internal] raidz vdev expansion completed: {name} new width {width}, copied {copied} bytes"
            ),
            0,
        );
        log::info!(
            "pool {}: raidz expansion of {name} finished in txg {txg}: {width} children, {} bytes of space (was {}); blocks born from txg {from} have the new width",
            self.name,
            asize,
            top.asize
        );
        Ok(Some(next))
    }

    /// After a txg that finished an expansion: the scrub that checks what the copy moved.
    pub(super) fn scrub_after_expansion(&self) {
        if self.tunables.scrub_after_expand {
            if let Err(error) = self.request_scrub() {
                log::info!(
                    "pool {}: no scrub after the raidz expansion: {error}",
                    self.name
                );
            }
        }
    }

    /// At import: the newest expansion's record from the MOS.
    pub(super) fn load_raidz_expansion(&self) -> Result<(), PoolError> {
        let get = |key| lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, key);
        let Some(vdev) = get(KEY_VDEV)?.filter(|&vdev| vdev > 0) else {
            return Ok(());
        };
        let copied = get(KEY_COPIED)?.unwrap_or(0);
        *self.raidz_expand.record.lock() = Record {
            vdev: Some(VdevId((vdev - 1) as u32)),
            width: get(KEY_WIDTH)?.unwrap_or(0),
            state: get(KEY_STATE)?.unwrap_or(0),
            start: get(KEY_START)?.unwrap_or(0),
            end: get(KEY_END)?.unwrap_or(0),
            copied,
            copied_persisted: copied,
            paused: None,
        };
        Ok(())
    }
}
