//! Transaction groups: the open → quiescing → syncing state machine, transaction holds, dirty
//! data accounting and the write throttle (OpenZFS txg.c, dsl_pool.c, dmu_tx.c).
//!
//! # Overview
//! Every change joins the *open* txg through a hold ([`TxgManager::assign`]). To sync, the open
//! txg is closed (a new one opens at once, so writers never wait for a sync), *quiesced* (we wait
//! until every hold on it is released) and handed to the sync thread, which the pool layer runs
//! ([`TxgManager::run_sync_thread`]). So up to three txgs are in flight: open, quiescing, syncing.
//!
//! # Triggers
//! A sync starts when `txg_timeout` seconds have passed since the last one and there is dirty
//! data or pending work (deferred frees the pool still has to carry out, reported with
//! [`TxgManager::set_pending_work`]; a txg with neither is never started), when dirty data in
//! flight passes `dirty_data_sync_percent` of `dirty_data_max`, when a waiter asks for a txg to
//! reach disk ([`TxgManager::wait_synced`]), or at shutdown.
//!
//! # Write throttle
//! Writers report the bytes they dirty. Past `delay_min_dirty_percent` of `dirty_data_max`, each
//! assignment is delayed by `delay_scale · (dirty − min) / (max − dirty)` nanoseconds, capped at
//! `delay_max_ns`; at `dirty_data_max` writers block until a sync frees room. The delay happens
//! before the hold is taken, with no locks held (DESIGN.md §4 "Threads").
//!
//! # History (`tarn stat txgs`)
//! As OpenZFS's `txgs` kstat, the manager keeps one [`TxgHistoryRow`] per recent txg, at most
//! `txg_history` of them, oldest dropped first: when the txg opened, its state, how long it
//! spent open, quiescing, waiting for the sync thread and syncing, the dirty bytes it carried,
//! and what its sync did to the devices (bytes and I/Os read and written during the sync, sync
//! passes, block copies written, device writes issued). The state machine fills in the times;
//! the pool's sync driver reports the I/O figures ([`TxgManager::record_sync_io`]). Keeping the
//! history costs one row update per state change, under the lock already taken for it.
//!
//! # Locking
//! One mutex and one condition variable; the sync callback runs without them. The history
//! lives under the same mutex.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use crate::tunables::Tunables;
use crate::types::{Txg, TXG_SIZE};

/// A transaction: the txg that changes made under it belong to. Obtained from the txg layer
/// (which holds the txg open until the transaction is dropped) or, in syncing context, made for
/// the syncing txg with [`Tx::syncing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tx {
    pub txg: Txg,
}

impl Tx {
    /// A transaction for changes made by the sync thread itself to the txg it is syncing.
    pub fn syncing(txg: Txg) -> Tx {
        Tx { txg }
    }
}

struct Inner {
    open: Txg,
    quiescing: Option<Txg>,
    syncing: Option<Txg>,
    synced: Txg,
    holds: [u64; TXG_SIZE],
    dirty_bytes: [u64; TXG_SIZE],
    /// Indirect-block bytes reserved by admitted writes, per txg slot (`reserve_metadata`).
    reserved_metadata: [u64; TXG_SIZE],
    /// Indirect-block bytes that chunked frees of large objects dirtied per txg (OpenZFS's
    /// dp_long_free_dirty_pertxg), capped by `per_txg_dirty_frees_percent`.
    long_free_bytes: [u64; TXG_SIZE],
    /// Highest txg someone is waiting to see on disk.
    wanted: Txg,
    last_sync_started: Instant,
    shutting_down: bool,
    /// Holders of [`SyncPause`]: while non-zero no new sync starts.
    paused: u32,
    /// Error of the last failed sync; the pool is suspended once a sync fails.
    failed: Option<String>,
    /// Recent txgs, oldest first, at most `txg_history` of them.
    history: VecDeque<HistoryEntry>,
}

/// Where a txg is, as OpenZFS's txgs kstat prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxgState {
    /// Accepting transactions.
    Open,
    /// Closed; waiting for its holds to be released.
    Quiescing,
    /// Quiesced; waiting for the sync thread.
    WaitingForSync,
    /// Being written.
    Syncing,
    /// On disk (or, with nothing to write, done).
    Committed,
}

impl TxgState {
    /// The letter OpenZFS prints: O, Q, W, S, C.
    pub fn letter(self) -> char {
        match self {
            TxgState::Open => 'O',
            TxgState::Quiescing => 'Q',
            TxgState::WaitingForSync => 'W',
            TxgState::Syncing => 'S',
            TxgState::Committed => 'C',
        }
    }
}

/// One txg's row of `tarn stat txgs` (OpenZFS's txgs kstat, then tarn's own columns). Times are
/// nanoseconds; a phase not reached yet is 0.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TxgHistoryRow {
    pub txg: u64,
    /// When the txg opened, in nanoseconds since the Unix epoch.
    pub birth_ns: u64,
    pub state: TxgState,
    /// Dirty bytes the txg carried into its sync (`ndirty`).
    pub dirty_bytes: u64,
    /// Bytes read from and written to the leaves while the txg synced (`nread`, `nwritten`):
    /// every leaf I/O in that window, as OpenZFS differences the root vdev's stats.
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Leaf read and write I/Os in the same window (`reads`, `writes`).
    pub reads: u64,
    pub writes: u64,
    /// Time open, quiescing, waiting for the sync thread, syncing.
    pub open_ns: u64,
    pub quiesce_ns: u64,
    pub wait_ns: u64,
    pub sync_ns: u64,
    /// Sync passes (0 when there was nothing to write).
    pub passes: u32,
    /// Block copies the sync wrote: every DVA of every block, in-place rewrites included.
    pub blocks_written: u64,
    /// Device writes the sync issued: after aggregation, one per leaf, uberblock and label
    /// writes included.
    pub write_ios: u64,
    /// What the space layer did (space-map writes, metaslab loads, allocation figures).
    #[serde(default, flatten)]
    pub space: crate::space::stats::SpaceTxgStats,
}

/// What a txg's sync did to the devices; see [`TxgManager::record_sync_io`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxgSyncIo {
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub blocks_written: u64,
    pub write_ios: u64,
    pub space: crate::space::stats::SpaceTxgStats,
}

struct HistoryEntry {
    row: TxgHistoryRow,
    /// When the row's current state began.
    since: Instant,
}

impl HistoryEntry {
    /// The row of a txg that opens now.
    fn opened(txg: Txg) -> HistoryEntry {
        HistoryEntry {
            row: TxgHistoryRow {
                txg: txg.0,
                birth_ns: unix_ns(),
                state: TxgState::Open,
                dirty_bytes: 0,
                read_bytes: 0,
                written_bytes: 0,
                reads: 0,
                writes: 0,
                open_ns: 0,
                quiesce_ns: 0,
                wait_ns: 0,
                sync_ns: 0,
                passes: 0,
                blocks_written: 0,
                write_ios: 0,
                space: Default::default(),
            },
            since: Instant::now(),
        }
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

/// Counters for `tarn stat txgs`.
#[derive(Clone, Debug, Default)]
pub struct TxgStats {
    pub open: u64,
    pub synced: u64,
    pub dirty_bytes: u64,
    pub delays: u64,
    pub delay_ns_total: u64,
    pub syncs: u64,
    pub last_sync_ns: u64,
    pub last_sync_passes: u32,
}

pub struct TxgManager {
    inner: Mutex<Inner>,
    changed: Condvar,
    tunables: Tunables,
    stats: Mutex<TxgStats>,
    sync_thread_alive: AtomicBool,
    /// Background work (queued frees) is pending: sync without waiting for the timer.
    background_work: AtomicBool,
    /// The pool has work that no dirty data announces (deferred frees): the timer syncs it.
    pending_work: AtomicBool,
}

/// A hold on an open txg. Changes made under [`TxHold::tx`] belong to that txg; the txg cannot
/// be quiesced until the hold is dropped.
pub struct TxHold {
    manager: Arc<TxgManager>,
    tx: Tx,
}

impl TxHold {
    pub fn tx(&self) -> Tx {
        self.tx
    }

    pub fn txg(&self) -> Txg {
        self.tx.txg
    }

    /// Account `bytes` of dirty data to this txg (for sync triggering and the throttle).
    pub fn add_dirty(&self, bytes: u64) {
        self.manager.add_dirty(self.tx.txg, bytes);
    }
}

impl Drop for TxHold {
    fn drop(&mut self) {
        let mut inner = self.manager.inner.lock();
        let slot = self.tx.txg.slot();
        assert!(inner.holds[slot] > 0);
        inner.holds[slot] -= 1;
        // Only a quiescing txg's holds are waited for (`wait_quiesced`): the last hold of the
        // open txg going away wakes nobody, so that a write or a log commit does not wake the
        // sync thread each time.
        if inner.holds[slot] == 0 && inner.open != self.tx.txg {
            self.manager.changed.notify_all();
        }
    }
}

/// While alive, no txg sync starts; see [`TxgManager::pause_syncs`].
pub struct SyncPause {
    manager: Arc<TxgManager>,
}

impl Drop for SyncPause {
    fn drop(&mut self) {
        let mut inner = self.manager.inner.lock();
        inner.paused -= 1;
        self.manager.changed.notify_all();
    }
}

/// Errors waiting for txgs.
#[derive(Debug, thiserror::Error)]
pub enum TxgError {
    #[error("the pool is suspended: a txg failed to sync ({0}); export and re-import it")]
    Suspended(String),
    #[error("the pool is shutting down")]
    ShuttingDown,
}

impl TxgManager {
    /// A manager whose last synced txg is `synced`; the open txg is the next one.
    pub fn new(synced: Txg, tunables: Tunables) -> Arc<TxgManager> {
        let mut history = VecDeque::new();
        if tunables.txg_history > 0 {
            history.push_back(HistoryEntry::opened(synced.next()));
        }
        Arc::new(TxgManager {
            inner: Mutex::new(Inner {
                open: synced.next(),
                quiescing: None,
                syncing: None,
                synced,
                holds: [0; TXG_SIZE],
                dirty_bytes: [0; TXG_SIZE],
                reserved_metadata: [0; TXG_SIZE],
                long_free_bytes: [0; TXG_SIZE],
                wanted: synced,
                last_sync_started: Instant::now(),
                shutting_down: false,
                paused: 0,
                failed: None,
                history,
            }),
            changed: Condvar::new(),
            tunables,
            stats: Mutex::new(TxgStats::default()),
            sync_thread_alive: AtomicBool::new(false),
            background_work: AtomicBool::new(false),
            pending_work: AtomicBool::new(false),
        })
    }

    fn dirty_total_of(inner: &Inner) -> u64 {
        inner.dirty_bytes.iter().sum()
    }

    /// Join the open txg, first waiting out the write throttle.
    pub fn assign(self: &Arc<Self>) -> Result<TxHold, TxgError> {
        let max = self.tunables.dirty_data_max.max(1);
        let min = max * self.tunables.delay_min_dirty_percent / 100;
        loop {
            let delay = {
                let mut inner = self.inner.lock();
                if let Some(error) = &inner.failed {
                    return Err(TxgError::Suspended(error.clone()));
                }
                if inner.shutting_down {
                    return Err(TxgError::ShuttingDown);
                }
                let dirty = Self::dirty_total_of(&inner);
                if dirty >= max {
                    // Full: ask for a sync and wait for room.
                    inner.wanted = inner.wanted.max(inner.open);
                    self.changed.notify_all();
                    self.changed
                        .wait_for(&mut inner, Duration::from_millis(100));
                    continue;
                }
                if dirty > min {
                    let ns = self.tunables.delay_scale.saturating_mul(dirty - min)
                        / (max - dirty).max(1);
                    Duration::from_nanos(ns.min(self.tunables.delay_max_ns))
                } else {
                    let txg = inner.open;
                    inner.holds[txg.slot()] += 1;
                    return Ok(TxHold {
                        manager: self.clone(),
                        tx: Tx { txg },
                    });
                }
            };
            {
                let mut stats = self.stats.lock();
                stats.delays += 1;
                stats.delay_ns_total += delay.as_nanos() as u64;
            }
            std::thread::sleep(delay);
            let mut inner = self.inner.lock();
            if inner.failed.is_none() && !inner.shutting_down {
                let txg = inner.open;
                inner.holds[txg.slot()] += 1;
                return Ok(TxHold {
                    manager: self.clone(),
                    tx: Tx { txg },
                });
            }
        }
    }

    /// Join the open txg without waiting out the write throttle (OpenZFS's TXG_NOTHROTTLE):
    /// for the intent log's commits, which dirty nothing but their log header. The writes an
    /// fsync commits were throttled when they were made; delaying the commit as well would
    /// make a synchronous writer beside a bulk writer pay for the bulk writer's dirty data
    /// twice.
    pub fn assign_nothrottle(self: &Arc<Self>) -> Result<TxHold, TxgError> {
        let mut inner = self.inner.lock();
        if let Some(error) = &inner.failed {
            return Err(TxgError::Suspended(error.clone()));
        }
        if inner.shutting_down {
            return Err(TxgError::ShuttingDown);
        }
        let txg = inner.open;
        inner.holds[txg.slot()] += 1;
        Ok(TxHold {
            manager: self.clone(),
            tx: Tx { txg },
        })
    }

    /// Account `bytes` of new dirty data to `txg` (object sets call this as blocks are dirtied).
    pub fn add_dirty(&self, txg: Txg, bytes: u64) {
        let mut inner = self.inner.lock();
        inner.dirty_bytes[txg.slot()] += bytes;
        let threshold = self.tunables.dirty_data_max * self.tunables.dirty_data_sync_percent / 100;
        if Self::dirty_total_of(&inner) >= threshold {
            inner.wanted = inner.wanted.max(txg);
            self.changed.notify_all();
        }
    }

    /// Dirty bytes of every txg in flight (open, quiescing, syncing).
    pub fn dirty_total(&self) -> u64 {
        Self::dirty_total_of(&self.inner.lock())
    }

    /// Reserve `bytes` of indirect-block space for writes admitted to `txg` (space admission
    /// only: the write throttle does not see them). Released when `txg` has synced.
    pub fn reserve_metadata(&self, txg: Txg, bytes: u64) {
        if bytes > 0 {
            self.inner.lock().reserved_metadata[txg.slot()] += bytes;
        }
    }

    /// Dirty bytes and reserved indirect-block bytes of every txg in flight, read together.
    pub fn dirty_and_reserved(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (
            Self::dirty_total_of(&inner),
            inner.reserved_metadata.iter().sum(),
        )
    }

    pub fn open_txg(&self) -> Txg {
        self.inner.lock().open
    }

    /// Whether background work is pending without dirty data: while it is, the sync thread
    /// syncs txgs back to back instead of waiting for the timer, and each sync bounds the time
    /// it spends on that work (OpenZFS's sync thread while `dsl_scan_active`).
    pub fn set_background_work(&self, pending: bool) {
        self.background_work.store(pending, Ordering::Release);
        if pending {
            self.changed.notify_all();
        }
    }

    /// Whether someone waits for `txg` (the one syncing) or a later one, or dirty data has
    /// reached the sync threshold: the cue for background work in `txg`'s sync to yield
    /// (OpenZFS's `txg_sync_waiting`). A command that waits for its own txg (a snapshot
    /// destroy) then returns after `free_min_time_ms` of freeing, not half a txg timeout.
    pub fn sync_waited_on(&self, txg: Txg) -> bool {
        let inner = self.inner.lock();
        let threshold = self.tunables.dirty_data_max * self.tunables.dirty_data_sync_percent / 100;
        inner.wanted >= txg || Self::dirty_total_of(&inner) >= threshold.max(1)
    }

    /// Charge `bytes` of chunked-free work to the open txg `txg` held by the caller, if the
    /// txg's share (`per_txg_dirty_frees_percent` of `dirty_data_max`) has room; a txg's first
    /// chunk is always admitted. A caller refused waits for `txg` to sync and tries again.
    pub fn charge_long_free(&self, txg: Txg, bytes: u64) -> bool {
        let cap = self.tunables.dirty_data_max * self.tunables.per_txg_dirty_frees_percent / 100;
        let mut inner = self.inner.lock();
        let charged = &mut inner.long_free_bytes[txg.slot()];
        if *charged > 0 && charged.saturating_add(bytes) > cap {
            return false;
        }
        *charged = charged.saturating_add(bytes);
        true
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.lock().shutting_down
    }

    pub fn last_synced(&self) -> Txg {
        self.inner.lock().synced
    }

    /// Ask for `txg` (or, with None, the currently open txg) to be synced, and wait until it is.
    pub fn wait_synced(&self, txg: Option<Txg>) -> Result<Txg, TxgError> {
        let mut inner = self.inner.lock();
        let target = txg.unwrap_or(inner.open);
        inner.wanted = inner.wanted.max(target);
        self.changed.notify_all();
        while inner.synced < target {
            if let Some(error) = &inner.failed {
                return Err(TxgError::Suspended(error.clone()));
            }
            if inner.shutting_down && !self.sync_thread_alive.load(Ordering::Acquire) {
                return Err(TxgError::ShuttingDown);
            }
            self.changed
                .wait_for(&mut inner, Duration::from_millis(200));
        }
        Ok(inner.synced)
    }

    /// Record that `txg` was synced outside the sync thread (the creating txg of a new pool).
    pub fn mark_synced(&self, txg: Txg) {
        let mut inner = self.inner.lock();
        assert_eq!(inner.holds[txg.slot()], 0, "txg {txg} synced while held");
        inner.synced = inner.synced.max(txg);
        inner.open = inner.open.max(txg.next());
        Self::history_enter(&mut inner, txg, TxgState::Committed, |_| {});
        self.history_opened(&mut inner);
        self.changed.notify_all();
    }

    /// Hold off new syncs until the returned guard is dropped, after waiting for a sync in
    /// progress to finish: the on-disk state then stays exactly the last synced txg (what
    /// `check` needs on a live pool). Writers keep going into the open txg meanwhile.
    pub fn pause_syncs(self: &Arc<Self>) -> SyncPause {
        let mut inner = self.inner.lock();
        inner.paused += 1;
        while inner.syncing.is_some() || inner.quiescing.is_some() {
            self.changed
                .wait_for(&mut inner, Duration::from_millis(100));
        }
        SyncPause {
            manager: self.clone(),
        }
    }

    /// Whether the pool has work pending that no dirty data announces (deferred frees): while
    /// set, the timer starts a sync even without dirty data.
    pub fn set_pending_work(&self, pending: bool) {
        self.pending_work.store(pending, Ordering::Release);
    }

    /// Ask for a sync without waiting.
    pub fn kick(&self) {
        let mut inner = self.inner.lock();
        inner.wanted = inner.wanted.max(inner.open);
        self.changed.notify_all();
    }

    pub fn stats(&self) -> TxgStats {
        let inner = self.inner.lock();
        let mut stats = self.stats.lock().clone();
        stats.open = inner.open.0;
        stats.synced = inner.synced.0;
        stats.dirty_bytes = Self::dirty_total_of(&inner);
        stats
    }

    pub fn failure(&self) -> Option<String> {
        self.inner.lock().failed.clone()
    }

    /// Close the open txg and wait for its holds to drain; returns it (now quiesced).
    #[cfg(test)]
    fn quiesce(&self) -> Txg {
        let mut inner = self.inner.lock();
        let txg = self.close_open_txg(&mut inner);
        drop(inner);
        self.wait_quiesced(txg)
    }

    /// Close the open txg (a new one opens) and mark it quiescing. Done under the same lock
    /// acquisition that decided to sync, so that [`TxgManager::pause_syncs`] can never slip in
    /// between the decision and the sync.
    fn close_open_txg(&self, inner: &mut Inner) -> Txg {
        let txg = inner.open;
        inner.open = txg.next();
        inner.quiescing = Some(txg);
        Self::history_enter(inner, txg, TxgState::Quiescing, |_| {});
        self.history_opened(inner);
        txg
    }

    /// Wait until every hold on the quiescing `txg` is released; it is then syncing.
    fn wait_quiesced(&self, txg: Txg) -> Txg {
        let mut inner = self.inner.lock();
        while inner.holds[txg.slot()] > 0 {
            self.changed.wait(&mut inner);
        }
        inner.quiescing = None;
        inner.syncing = Some(txg);
        Self::history_enter(&mut inner, txg, TxgState::WaitingForSync, |_| {});
        txg
    }

    /// The sync thread's body: wait for a trigger, quiesce, call `sync(txg)`, repeat until
    /// [`TxgManager::shutdown`]; at shutdown, sync whatever is dirty one last time. A failed sync
    /// suspends the pool (no more transactions are assigned; waiters get an error).
    pub fn run_sync_thread(
        &self,
        mut sync: impl FnMut(Txg) -> Result<u32, String>,
        mut has_changes: impl FnMut(Txg) -> bool,
    ) {
        self.sync_thread_alive.store(true, Ordering::Release);
        loop {
            let (txg, shutting_down) = {
                let mut inner = self.inner.lock();
                loop {
                    if inner.failed.is_some() {
                        self.sync_thread_alive.store(false, Ordering::Release);
                        self.changed.notify_all();
                        return;
                    }
                    if inner.paused > 0 && !inner.shutting_down {
                        self.changed
                            .wait_for(&mut inner, Duration::from_millis(100));
                        continue;
                    }
                    let timed_out =
                        inner.last_sync_started.elapsed() >= self.tunables.txg_timeout_duration();
                    let wanted = inner.wanted >= inner.open;
                    let dirty = inner.dirty_bytes[inner.open.slot()] > 0
                        || self.pending_work.load(Ordering::Acquire);
                    let background = self.background_work.load(Ordering::Acquire);
                    if inner.shutting_down || wanted || (timed_out && dirty) || background {
                        break;
                    }
                    if timed_out {
                        inner.last_sync_started = Instant::now();
                    }
                    let wait = self
                        .tunables
                        .txg_timeout_duration()
                        .saturating_sub(inner.last_sync_started.elapsed());
                    self.changed
                        .wait_for(&mut inner, wait.max(Duration::from_millis(10)));
                }
                inner.last_sync_started = Instant::now();
                (self.close_open_txg(&mut inner), inner.shutting_down)
            };
            let txg = self.wait_quiesced(txg);
            {
                let mut inner = self.inner.lock();
                let dirty_bytes = inner.dirty_bytes[txg.slot()];
                Self::history_enter(&mut inner, txg, TxgState::Syncing, |row| {
                    row.dirty_bytes = dirty_bytes;
                });
            }
            let started = Instant::now();
            let changed = has_changes(txg);
            let result = if changed || !shutting_down {
                sync(txg)
            } else {
                Ok(0)
            };
            let mut inner = self.inner.lock();
            match result {
                Ok(passes) => {
                    Self::history_enter(&mut inner, txg, TxgState::Committed, |row| {
                        row.passes = passes;
                    });
                    inner.synced = txg;
                    inner.syncing = None;
                    inner.dirty_bytes[txg.slot()] = 0;
                    inner.reserved_metadata[txg.slot()] = 0;
                    inner.long_free_bytes[txg.slot()] = 0;
                    let mut stats = self.stats.lock();
                    stats.syncs += 1;
                    stats.last_sync_ns = started.elapsed().as_nanos() as u64;
                    stats.last_sync_passes = passes;
                }
                Err(error) => {
                    inner.failed = Some(error);
                }
            }
            self.changed.notify_all();
            if inner.shutting_down
                && inner.holds.iter().all(|&h| h == 0)
                && inner.dirty_bytes.iter().all(|&d| d == 0)
                && !has_changes(inner.open)
            {
                self.sync_thread_alive.store(false, Ordering::Release);
                self.changed.notify_all();
                return;
            }
        }
    }

    /// Stop assigning transactions and let the sync thread write what is dirty and exit.
    pub fn shutdown(&self) {
        let mut inner = self.inner.lock();
        inner.shutting_down = true;
        self.changed.notify_all();
    }

    /// Mark the pool as suspended (a write reached no device).
    pub fn suspend(&self, why: String) {
        let mut inner = self.inner.lock();
        inner.failed.get_or_insert(why);
        self.changed.notify_all();
    }
}

/// The txg history (see the module documentation, "History").
impl TxgManager {
    /// Add a row for the open txg if it has none yet, dropping the oldest beyond `txg_history`.
    fn history_opened(&self, inner: &mut Inner) {
        let limit = self.tunables.txg_history as usize;
        let open = inner.open.0;
        if limit == 0
            || inner
                .history
                .back()
                .is_some_and(|entry| entry.row.txg >= open)
        {
            return;
        }
        inner.history.push_back(HistoryEntry::opened(inner.open));
        while inner.history.len() > limit {
            inner.history.pop_front();
        }
    }

    /// Move `txg`'s row to `state`, charging the time since its last change to the phase it
    /// leaves; `update` then adjusts the row.
    fn history_enter(
        inner: &mut Inner,
        txg: Txg,
        state: TxgState,
        update: impl FnOnce(&mut TxgHistoryRow),
    ) {
        let Some(entry) = inner
            .history
            .iter_mut()
            .rev()
            .find(|entry| entry.row.txg == txg.0)
        else {
            return;
        };
        let elapsed = entry.since.elapsed().as_nanos() as u64;
        let row = &mut entry.row;
        match row.state {
            TxgState::Open => row.open_ns += elapsed,
            TxgState::Quiescing => row.quiesce_ns += elapsed,
            TxgState::WaitingForSync => row.wait_ns += elapsed,
            TxgState::Syncing => row.sync_ns += elapsed,
            TxgState::Committed => {}
        }
        row.state = state;
        entry.since = Instant::now();
        update(row);
    }

    /// The rows of the recent txgs, oldest first (at most `txg_history`).
    pub fn history(&self) -> Vec<TxgHistoryRow> {
        let inner = self.inner.lock();
        inner
            .history
            .iter()
            .map(|entry| {
                let mut row = entry.row.clone();
                // A phase still running shows how long it has run so far, as OpenZFS does not;
                // that keeps `otime` of the open txg meaningful.
                let elapsed = entry.since.elapsed().as_nanos() as u64;
                match row.state {
                    TxgState::Open => row.open_ns += elapsed,
                    TxgState::Quiescing => row.quiesce_ns += elapsed,
                    TxgState::WaitingForSync => row.wait_ns += elapsed,
                    TxgState::Syncing => row.sync_ns += elapsed,
                    TxgState::Committed => {}
                }
                row
            })
            .collect()
    }

    /// Record what the sync of `txg` did to the devices (the pool's sync driver calls this
    /// from the sync callback, before it returns).
    pub fn record_sync_io(&self, txg: Txg, io: TxgSyncIo) {
        let mut inner = self.inner.lock();
        if let Some(entry) = inner.history.iter_mut().rev().find(|e| e.row.txg == txg.0) {
            let row = &mut entry.row;
            row.read_bytes += io.read_bytes;
            row.written_bytes += io.written_bytes;
            row.reads += io.reads;
            row.writes += io.writes;
            row.blocks_written += io.blocks_written;
            row.write_ios += io.write_ios;
            row.space = io.space;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_block_quiesce_and_writers_join_the_next_txg() {
        let manager = TxgManager::new(Txg(4), Tunables::tiny());
        let hold = manager.assign().unwrap();
        assert_eq!(hold.txg(), Txg(5));
        let quiescer = {
            let manager = manager.clone();
            std::thread::spawn(move || manager.quiesce())
        };
        std::thread::sleep(Duration::from_millis(50));
        // While txg 5 is quiescing, new transactions join txg 6.
        let next = manager.assign().unwrap();
        assert_eq!(next.txg(), Txg(6));
        assert!(
            !quiescer.is_finished(),
            "quiesce must wait for the hold on txg 5"
        );
        drop(hold);
        assert_eq!(quiescer.join().unwrap(), Txg(5));
    }

    #[test]
    fn wait_synced_returns_after_the_sync_thread_syncs() {
        let manager = TxgManager::new(Txg(4), Tunables::tiny());
        let syncer = {
            let manager = manager.clone();
            std::thread::spawn(move || manager.run_sync_thread(|_| Ok(1), |_| false))
        };
        let hold = manager.assign().unwrap();
        let txg = hold.txg();
        drop(hold);
        assert!(manager.wait_synced(Some(txg)).unwrap() >= txg);
        manager.shutdown();
        syncer.join().unwrap();
    }

    #[test]
    fn failed_sync_suspends() {
        let manager = TxgManager::new(Txg(4), Tunables::tiny());
        let syncer = {
            let manager = manager.clone();
            std::thread::spawn(move || {
                manager.run_sync_thread(|_| Err("disk gone".into()), |_| true)
            })
        };
        let result = manager.wait_synced(None);
        assert!(matches!(result, Err(TxgError::Suspended(_))));
        assert!(matches!(manager.assign(), Err(TxgError::Suspended(_))));
        syncer.join().unwrap();
    }

    /// Regression: `check` pauses syncs to walk one synced txg. The sync thread used to decide
    /// to sync, drop its lock and only then mark the txg quiescing, so a pause taken in between
    /// saw no sync in progress while one was about to start.
    #[test]
    fn paused_syncs_do_not_start_until_resumed() {
        let manager = TxgManager::new(Txg(4), Tunables::tiny());
        let syncer = {
            let manager = manager.clone();
            std::thread::spawn(move || manager.run_sync_thread(|_| Ok(1), |_| false))
        };
        for _ in 0..50 {
            manager.kick();
            let pause = manager.pause_syncs();
            let synced = manager.last_synced();
            {
                let inner = manager.inner.lock();
                assert!(
                    inner.syncing.is_none() && inner.quiescing.is_none(),
                    "a sync runs during a pause"
                );
            }
            manager.kick();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(manager.last_synced(), synced, "a txg synced during a pause");
            drop(pause);
        }
        manager.shutdown();
        syncer.join().unwrap();
    }
}
