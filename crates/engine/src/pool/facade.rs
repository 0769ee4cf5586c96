//! The pool's facade: what a holder of an imported pool (the daemon, the operator commands, an
//! embedding program) asks of it, named for the operation rather than for the part of the pool
//! that carries it out.
//!
//! A [`Pool`] is made of a shared [`PoolCore`] (the vdev tree, the block I/O pipeline, the
//! MOS, the txg manager, the scanner, the injector, ...) and the sync thread. The core is the
//! engine's own: its fields and their locking are internal and change as the engine does.
//! Callers outside the engine go through the methods here and in the other `impl Pool`
//! blocks of this module (create, import, export, datasets, snapshots, properties, stats)
//! instead of reaching through `pool.core`. Each method here is a thin delegation: the work is
//! done where the concept lives (scan in `scan.rs`, the error log in `errlog.rs`, the history
//! in `history.rs`, ...), so the facade adds no behaviour of its own.
//!
//! A [`WeakPool`] names a pool without keeping it open: what a mounted file system holds
//! (export waits for every strong reference to go), answering "gone" once the pool is closed.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use super::errlog::ErrorEntry;
use super::failmode::FailMode;
use super::history::HistoryRecord;
use super::scan::{ResilverRequest, ScanRequestError, ScanStatus};
use super::snapshots::SnapshotInfo;
use super::{Pool, PoolCore, PoolError};
use crate::block::blkptr::BlockPtr;
use crate::dataset::Snapshot;
use crate::fs::FileSystem;
use crate::object::adapters::MosSpaceStorage;
use crate::object::phys::DnodePhys;
use crate::object::{ObjectError, ObjectSet};
use crate::space::log::LogSpaceStats;
use crate::space::{MetaslabStats, RangeTree, SpaceError, SpaceMap, SpaceMapEntry, VdevSpaceStats};
use crate::types::{Guid, VdevId};
use crate::vdev::inject::{Injection, InjectionStatus};
use crate::vdev::{Leaf, TopVdev, VdevHealth};

/// Identity and state.
impl Pool {
    /// The pool's guid, fixed at creation (import by guid, the cache file, labels).
    pub fn guid(&self) -> Guid {
        self.core.guid
    }

    /// Whether the pool was imported read-only (`readonly=on`): nothing is ever written.
    pub fn is_readonly(&self) -> bool {
        self.core.readonly
    }

    /// Why the pool is suspended (a txg could not be written), or `None` while it is not:
    /// writes then fail and reads go on until the pool is cleared or re-imported.
    pub fn suspended_reason(&self) -> Option<String> {
        self.core.txgs.failure()
    }

    /// The `failmode` property: what a suspension does to writers.
    pub fn failmode(&self) -> FailMode {
        self.core.failmode()
    }

    /// Record a command that changed the pool in its history (written by the next sync).
    pub fn log_history(&self, command: &str, uid: u32) {
        self.core.log_history(command, uid)
    }

    /// The pool's history records, oldest first (`pool history`). Records still waiting for
    /// a sync are synced first on a writable pool, so that each shows the txg it went into
    /// (zpool's are written by the command's own sync task).
    pub fn history(&self) -> Result<Vec<HistoryRecord>, PoolError> {
        if !self.core.readonly && self.core.history_pending() {
            self.sync()?;
        }
        self.core.history()
    }

    /// The blocks with no good copy, as damaged files (`pool status -v`); `with_paths` false
    /// skips the path lookups, for counting.
    pub fn data_errors(&self, with_paths: bool) -> Vec<ErrorEntry> {
        self.core.error_entries_with(with_paths)
    }

    /// Clear the error counts of every device, or of the one named, and the error log
    /// (`pool clear`).
    pub fn clear_errors(&self, device: Option<&str>) -> Result<(), PoolError> {
        self.core.clear_errors(device)
    }
}

/// Scrub and resilver: requests take effect in the next txg.
impl Pool {
    /// Start a scrub (or resume a paused one).
    pub fn scrub(&self) -> Result<(), ScanRequestError> {
        self.core.request_scrub()
    }

    /// Pause the running scrub; [`Pool::scrub`] resumes it where it stopped.
    pub fn pause_scrub(&self) -> Result<(), ScanRequestError> {
        self.core.request_scan_pause()
    }

    /// Cancel the running scrub.
    pub fn cancel_scrub(&self) -> Result<(), ScanRequestError> {
        self.core.request_scan_cancel()
    }

    /// Resilver the devices that missed txgs, if any did.
    pub fn resilver(&self) -> Result<ResilverRequest, ScanRequestError> {
        self.core.request_resilver()
    }

    /// The state of the last or running scan, `None` for a pool never scanned.
    pub fn scan_status(&self) -> Option<ScanStatus> {
        self.core.scan_status()
    }
}

/// Fault injection (`tarn inject`): injections live in memory and end at export.
impl Pool {
    /// Inject a fault into the pool's devices; returns its id.
    pub fn inject(&self, injection: Injection) -> u64 {
        self.core.injector.add(injection)
    }

    /// The active injections.
    pub fn injections(&self) -> Vec<InjectionStatus> {
        self.core.injector.list()
    }

    /// End the injection `id`, or every one (`None`); returns how many ended.
    pub fn clear_injections(&self, id: Option<u64>) -> usize {
        self.core.injector.clear(id)
    }
}

/// The vdev tree, for `pool status` and the commands that name a device.
impl Pool {
    /// The pool's health: the worst of its top-level vdevs'.
    pub fn health(&self) -> VdevHealth {
        self.core.io.vdevs.health()
    }

    /// The top-level vdevs (data and log) in vdev-id order.
    pub fn top_vdevs(&self) -> Arc<Vec<Arc<TopVdev>>> {
        self.core.io.vdevs.tops()
    }

    /// Every leaf of every top-level vdev.
    pub fn leaves(&self) -> impl Iterator<Item = Arc<Leaf>> {
        self.core.io.vdevs.leaves()
    }

    /// The paths of the leaves of top-level vdev `id` (`None` if there is no such vdev).
    pub fn top_vdev_leaf_paths(&self, id: VdevId) -> Option<Vec<PathBuf>> {
        let top = self.core.io.vdevs.top(id)?;
        Some(top.children.iter().map(|leaf| leaf.path.clone()).collect())
    }
}

/// Reading the last synced state, for the debug verbs and injection by object.
impl Pool {
    /// A file system opened read-only on `objset` (a dataset's or a held snapshot's object
    /// set): no log replay, no unlinked-set drain, nothing written.
    pub fn read_only_file_system(&self, objset: Arc<ObjectSet>) -> Result<FileSystem, PoolError> {
        Ok(FileSystem::open_read_only(objset, self.core.txgs.clone())?)
    }

    /// Visit every block pointer of an object's tree (indirect blocks first, each with the
    /// first data block it covers).
    pub fn visit_object_blocks(
        &self,
        dnode: &DnodePhys,
        visit: &mut dyn FnMut(u64, &BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        crate::object::tree::visit_tree_blocks(&self.core.io, dnode, visit)
    }

    /// Every top-level vdev's metaslabs and their space figures.
    pub fn metaslab_stats(&self) -> Vec<VdevSpaceStats> {
        self.core.io.space.stats()
    }

    /// The log space map's figures, `None` when the pool does not use it.
    pub fn log_space_map_stats(&self) -> Option<LogSpaceStats> {
        self.core.io.space.log_stats()
    }

    /// A metaslab's free segments: its loaded tree, or one built from its space map.
    pub fn metaslab_free_tree(&self, vdev: VdevId, metaslab: u64) -> Result<RangeTree, SpaceError> {
        self.core
            .io
            .space
            .metaslab_free_tree(vdev, metaslab, &self.mos_space_storage())
    }

    /// Open a metaslab's space map (its row of [`Pool::metaslab_stats`] under top-level vdev
    /// `vdev`): the header read and checked; [`Pool::replay_space_map`] reads its entries.
    pub fn open_metaslab_space_map(
        &self,
        vdev: &VdevSpaceStats,
        metaslab: &MetaslabStats,
    ) -> Result<SpaceMap, SpaceError> {
        SpaceMap::open(
            &self.mos_space_storage(),
            metaslab.space_map_object,
            metaslab.start,
            metaslab.size,
            vdev.ashift,
            self.core.io.space.metaslab_map_block_size(),
        )
    }

    /// Every entry of a space map of this pool, oldest first.
    pub fn replay_space_map(
        &self,
        map: &SpaceMap,
        visit: impl FnMut(SpaceMapEntry) -> Result<(), SpaceError>,
    ) -> Result<(), SpaceError> {
        map.replay(&self.mos_space_storage(), map.header.length_bytes, visit)
    }

    fn mos_space_storage(&self) -> MosSpaceStorage<'_> {
        MosSpaceStorage {
            mos: &self.core.mos,
        }
    }
}

/// A pool named without being kept open (see the module comment).
#[derive(Clone)]
pub struct WeakPool(Weak<PoolCore>);

impl Pool {
    /// A reference to this pool that does not keep it from being exported.
    pub fn downgrade(&self) -> WeakPool {
        WeakPool(Arc::downgrade(&self.core))
    }
}

impl WeakPool {
    /// The snapshots of one file system (a full name), oldest first; none once the pool is
    /// closed.
    pub fn snapshots_of(&self, dataset: &str) -> Result<Vec<SnapshotInfo>, PoolError> {
        match self.0.upgrade() {
            Some(core) => core.snapshots_of(dataset),
            None => Ok(Vec::new()),
        }
    }

    /// Open `FS@SNAP` read-only (see [`PoolCore::open_snapshot`]); once the pool is closed,
    /// the snapshot is not found.
    pub fn open_snapshot(
        &self,
        full: &str,
    ) -> Result<(SnapshotInfo, FileSystem, Arc<Snapshot>), PoolError> {
        match self.0.upgrade() {
            Some(core) => core.open_snapshot(full),
            None => Err(PoolError::DatasetNotFound(full.to_string())),
        }
    }
}
