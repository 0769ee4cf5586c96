//! The log space map (pool feature `com.tarn:log_spacemap`; OpenZFS spa_log_spacemap.c).
//!
//! # Overview
//!
//! Without the log, every metaslab that a txg allocates in or frees from has its own space map
//! appended in that txg: on a fragmented pool under random writes that is one or more blocks
//! per metaslab per txg, hundreds per vdev. With the log, a txg appends the changes of every
//! metaslab to one pool-wide space map, the txg's *log*, in two-word entries carrying the vdev
//! id. Each metaslab keeps its changes not yet in its own map, the *unflushed* allocations and
//! frees, in memory ([`Unflushed`]), and every txg *flushes* a few metaslabs: their unflushed
//! changes are appended to their own maps, in larger blocks (`metaslab_sm_blksz_with_log`),
//! and they start over. A log whose txg precedes every metaslab's last flush holds nothing
//! needed any more and is freed.
//!
//! # On-disk structures (byte layout in docs/design/02-space.md §2.6a)
//!
//! - One log per txg that changed any metaslab: a space-map object (bonus: the usual header,
//!   shift 9) with blocks of `log_sm_blksz`, all runs in two-word form with a vdev id.
//! - Per top-level vdev, the *unflushed-txg array*: u64 `unflushed_txg` at `8 * metaslab id`.
//!   Entries of a log of txg `L` belong to metaslab `m` only if `L >= unflushed_txg(m)`; older
//!   ones are already in its map. 0: the metaslab never had a change under the log.
//! - The *log directory*, one object named by the MOS directory key `log_spacemap`: the map
//!   from txg to log object and from vdev to unflushed-txg array ([`LogDirectoryPhys`]).
//!
//! # Invariants
//!
//! - For every metaslab, its map plus the log entries of txgs `>= unflushed_txg` replayed in
//!   txg order equals its state at the last synced txg; in memory, map + unflushed allocations
//!   − unflushed frees equals its allocated space (asserted at every sync).
//! - The unflushed allocations and frees of a metaslab are disjoint: an allocation of space
//!   whose free is unflushed cancels that free, and a free cancels an unflushed allocation.
//! - A metaslab is flushed in pass 1 of txg T before T's changes are logged, so its
//!   `unflushed_txg` becomes T and log T still applies to it.
//! - No log is freed while a metaslab's `unflushed_txg` is at or below its txg.
//!
//! # Flushing (once per txg, pass 1; reference §4.3)
//!
//! The count comes from the log summary ([`LogSummaryRow`]: logs grouped oldest first into at
//! most `max_logsm_summary_length` rows) by OpenZFS's estimate: project the incoming block
//! rate (the mean of the last `max_log_walking` logs) and flush at the steady rate that keeps
//! the log under `clamp(dirty metaslabs × unflushed_log_block_pct / 100,
//! unflushed_log_block_min, unflushed_log_block_max)` blocks and under
//! `unflushed_log_txg_max` txgs at every point the summary covers. Metaslabs are walked
//! oldest `unflushed_txg` first: a dirty one is flushed, a clean one only has its
//! `unflushed_txg` moved to T (no map I/O). A metaslab whose defer trees still hold frees that
//! cancelled an unflushed allocation (allocated and freed since its last flush) is not clean:
//! only the logs record those frees, so the flush writes them to the map stamped with the txg
//! that freed them, and they stay deferred across import ([`Metaslab::needs_flush`]). The walk goes on past the estimate while the
//! unflushed changes take more than `unflushed_max_mem_amt` bytes of memory or the oldest
//! metaslab is `unflushed_log_txg_max` txgs behind. Export flushes every metaslab.
//!
//! # Cost per txg
//!
//! The log's blocks written in the txg (usually one, rewritten by each pass), the flushed
//! metaslabs' map tails, one block of each unflushed-txg array touched, and the log directory
//! when a log is created or freed: a few blocks instead of one per dirty metaslab.
//!
//! # Import (docs/design/10-pool.md §5b)
//!
//! Before any allocation: read the directory and the arrays, then replay the logs oldest first
//! into the unflushed trees of the metaslabs they still apply to, putting frees of the last
//! two synced txgs in the defer trees (invariant 3 holds across import as without the log),
//! and set each metaslab's allocated bytes to map + unflushed. Bad entries are corruption.
//!
//! # Crash behaviour
//!
//! Everything here is written in the syncing txg through [`SpaceStorage`] and becomes visible
//! with that txg's uberblock: a crash leaves the previous directory, arrays, logs and maps,
//! which replay to the previous txg's state. A flush writes the map and the array entry in the
//! same txg, so no crash can see one without the other.

use super::metaslab::Metaslab;
use super::range_tree::RangeTree;
use super::space_map::{SpaceMap, SpaceMapEntry, LOG_SPACE_MAP_SHIFT};
use super::storage::{SpaceStorage, StorageError};
use super::unflushed::Unflushed;
use super::{Group, SpaceError, SpaceManager};
use crate::tunables::Tunables;
use crate::types::{ObjectId, Txg, VdevId};
use std::collections::BTreeMap;

/// Version word at the start of the log directory.
pub const LOG_DIRECTORY_VERSION: u64 = 1;

/// The log directory's contents (docs/design/02-space.md §2.6a): little-endian u64 words
/// `[version, vdev count V, log count L, V × (vdev id, array object), L × (txg, log object)]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogDirectoryPhys {
    pub arrays: BTreeMap<u32, ObjectId>,
    pub logs: BTreeMap<u64, ObjectId>,
}

impl LogDirectoryPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut words = vec![
            LOG_DIRECTORY_VERSION,
            self.arrays.len() as u64,
            self.logs.len() as u64,
        ];
        for (vdev, object) in &self.arrays {
            words.extend([*vdev as u64, object.0]);
        }
        for (txg, object) in &self.logs {
            words.extend([*txg, object.0]);
        }
        words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    /// Decode untrusted bytes: counts, ordering and ids are checked, never trusted.
    pub fn decode(bytes: &[u8], object: ObjectId) -> Result<LogDirectoryPhys, SpaceError> {
        let corrupt = |what: String| {
            SpaceError::corrupt(what, format!("log space map directory object {object}"))
        };
        let word = |index: usize| -> Result<u64, SpaceError> {
            bytes
                .get(index * 8..index * 8 + 8)
                .map(|slice| u64::from_le_bytes(slice.try_into().expect("8 bytes")))
                .ok_or_else(|| corrupt(format!("cut off at word {index}")))
        };
        if word(0)? != LOG_DIRECTORY_VERSION {
            return Err(corrupt(format!("version {} unknown", word(0)?)));
        }
        let (vdevs, logs) = (word(1)?, word(2)?);
        // Checked before the loops below trust the counts.
        let fits = vdevs
            .checked_add(logs)
            .and_then(|pairs| pairs.checked_mul(2))
            .and_then(|words| words.checked_add(3))
            .is_some_and(|words| words <= (bytes.len() / 8) as u64);
        if !fits {
            return Err(corrupt(format!(
                "{vdevs} arrays and {logs} logs do not fit {} bytes",
                bytes.len()
            )));
        }
        let mut phys = LogDirectoryPhys::default();
        let mut index = 3usize;
        for _ in 0..vdevs {
            let (vdev, array) = (word(index)?, word(index + 1)?);
            index += 2;
            if vdev > u32::MAX as u64 || array == 0 {
                return Err(corrupt(format!(
                    "bad array entry (vdev {vdev}, object {array})"
                )));
            }
            if phys.arrays.insert(vdev as u32, ObjectId(array)).is_some() {
                return Err(corrupt(format!("vdev {vdev} listed twice")));
            }
        }
        for _ in 0..logs {
            let (txg, log) = (word(index)?, word(index + 1)?);
            index += 2;
            if txg == 0 || log == 0 {
                return Err(corrupt(format!("bad log entry (txg {txg}, object {log})")));
            }
            if phys.logs.insert(txg, ObjectId(log)).is_some() {
                return Err(corrupt(format!("txg {txg} listed twice")));
            }
        }
        Ok(phys)
    }

    /// Bytes the encoding of a directory of `arrays` vdevs and `logs` logs takes.
    fn encoded_len(arrays: usize, logs: usize) -> usize {
        (3 + 2 * (arrays + logs)) * 8
    }
}

/// The storage the txg's log is written through during one pass. Every dirty metaslab appends
/// its batches to the same log block, hundreds of small sequential writes into one 128 KiB
/// block, each of which the object layer would copy the block for; this collects consecutive
/// appends and writes them once, at [`AppendBuffer::flush`] (end of the pass). Anything else
/// passes through (after flushing what is collected, so the order of writes is kept).
pub(super) struct AppendBuffer<'a> {
    inner: &'a dyn SpaceStorage,
    pending: parking_lot::Mutex<Option<PendingAppend>>,
}

/// Bytes collected by [`AppendBuffer`]: (object, offset of the first byte, bytes, txg).
type PendingAppend = (ObjectId, u64, Vec<u8>, Txg);

impl<'a> AppendBuffer<'a> {
    pub(super) fn new(inner: &'a dyn SpaceStorage) -> AppendBuffer<'a> {
        AppendBuffer {
            inner,
            pending: parking_lot::Mutex::new(None),
        }
    }

    /// Write what is collected. Returns whether anything was.
    pub(super) fn flush(&self) -> Result<bool, StorageError> {
        match self.pending.lock().take() {
            Some((object, offset, bytes, txg)) => {
                self.inner.write(object, offset, &bytes, txg)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl SpaceStorage for AppendBuffer<'_> {
    fn create_object(&self, block_size: u32, txg: Txg) -> Result<ObjectId, StorageError> {
        self.flush()?;
        self.inner.create_object(block_size, txg)
    }
    fn free_object(&self, object: ObjectId, txg: Txg) -> Result<(), StorageError> {
        self.flush()?;
        self.inner.free_object(object, txg)
    }
    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.flush()?;
        self.inner.read(object, offset, buf)
    }
    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        txg: Txg,
    ) -> Result<(), StorageError> {
        let mut pending = self.pending.lock();
        if let Some((pending_object, start, bytes, pending_txg)) = pending.as_mut() {
            if *pending_object == object
                && *pending_txg == txg
                && *start + bytes.len() as u64 == offset
            {
                bytes.extend_from_slice(data);
                return Ok(());
            }
        }
        let previous = pending.replace((object, offset, data.to_vec(), txg));
        drop(pending);
        if let Some((object, offset, bytes, txg)) = previous {
            self.inner.write(object, offset, &bytes, txg)?;
        }
        Ok(())
    }
    fn truncate(&self, object: ObjectId, length: u64, txg: Txg) -> Result<(), StorageError> {
        self.flush()?;
        self.inner.truncate(object, length, txg)
    }
    fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError> {
        self.flush()?;
        self.inner.read_bonus(object)
    }
    fn write_bonus(&self, object: ObjectId, bonus: &[u8], txg: Txg) -> Result<(), StorageError> {
        self.flush()?;
        self.inner.write_bonus(object, bonus, txg)
    }
}

/// One log in memory.
#[derive(Clone, Debug)]
struct LogMap {
    map: SpaceMap,
}

/// One row of the log summary: consecutive logs, oldest first (OpenZFS `log_summary_entry_t`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogSummaryRow {
    pub start_txg: u64,
    pub end_txg: u64,
    pub txg_count: u64,
    pub blocks: u64,
    /// Metaslabs whose `unflushed_txg` falls in the row (flushing them frees its logs).
    pub metaslabs: u64,
    /// Of those, the ones with unflushed changes.
    pub metaslabs_dirty: u64,
}

/// One log, for `tarn debug logs`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogInfo {
    pub txg: u64,
    pub object: u64,
    pub length_bytes: u64,
    pub blocks: u64,
    /// Metaslabs whose `unflushed_txg` is this log's txg.
    pub metaslabs: u64,
}

/// The log space map as a whole, for `tarn debug logs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogSpaceStats {
    pub directory_object: u64,
    pub logs: Vec<LogInfo>,
    pub summary: Vec<LogSummaryRow>,
    pub blocks: u64,
    pub block_limit: u64,
    pub metaslabs_unflushed: u64,
    pub memory_bytes: u64,
    pub memory_limit: u64,
    pub oldest_unflushed_txg: u64,
}

/// The pool-wide state of the log space map (OpenZFS `spa_sm_logs_by_txg` and friends).
#[derive(Debug, Default)]
pub struct LogState {
    directory: Option<ObjectId>,
    /// The directory was created and the MOS directory does not name it yet.
    directory_created: bool,
    directory_dirty: bool,
    arrays: BTreeMap<u32, ObjectId>,
    logs: BTreeMap<u64, LogMap>,
    /// The syncing txg's log was appended in the current pass (its header needs writing).
    appended: bool,
    /// Export asked for every metaslab to be flushed in the next txg.
    flush_all: bool,
}

impl LogState {
    fn block_limit(dirty_metaslabs: u64, tunables: &Tunables) -> u64 {
        (dirty_metaslabs.saturating_mul(tunables.unflushed_log_block_pct) / 100).clamp(
            tunables.unflushed_log_block_min,
            tunables.unflushed_log_block_max,
        )
    }

    fn blocks(&self) -> u64 {
        self.logs.values().map(|log| log.map.blocks()).sum()
    }

    /// The summary rows, oldest first, from the logs and each metaslab's (unflushed txg,
    /// dirty). A row is full at `ceil(txg_max / rows)` txgs or `ceil(block_limit / rows)`
    /// blocks; a metaslab counts in the row of the first log at or after its unflushed txg.
    fn summary(
        &self,
        metaslabs: &[(u64, bool)],
        block_limit: u64,
        tunables: &Tunables,
    ) -> Vec<LogSummaryRow> {
        let rows = tunables.max_logsm_summary_length.max(1);
        let txgs_per_row = tunables.unflushed_log_txg_max.div_ceil(rows);
        let blocks_per_row = block_limit.div_ceil(rows).max(1);
        let mut summary: Vec<LogSummaryRow> = Vec::new();
        for (&txg, log) in &self.logs {
            let full = summary
                .last()
                .is_none_or(|row| row.txg_count >= txgs_per_row || row.blocks >= blocks_per_row);
            if full {
                summary.push(LogSummaryRow {
                    start_txg: txg,
                    ..LogSummaryRow::default()
                });
            }
            let row = summary.last_mut().expect("pushed above");
            row.end_txg = txg;
            row.txg_count += 1;
            row.blocks += log.map.blocks();
        }
        for &(unflushed_txg, dirty) in metaslabs {
            if let Some(row) = summary.iter_mut().find(|row| row.end_txg >= unflushed_txg) {
                row.metaslabs += 1;
                row.metaslabs_dirty += dirty as u64;
            }
        }
        summary
    }

    /// Metaslabs to flush in this txg (OpenZFS `spa_estimate_metaslabs_to_flush`).
    fn estimate_flushes(
        &self,
        summary: &[LogSummaryRow],
        block_limit: u64,
        tunables: &Tunables,
    ) -> u64 {
        let walked = tunables.max_log_walking.max(1) as usize;
        let recent: Vec<u64> = self
            .logs
            .values()
            .rev()
            .take(walked)
            .map(|log| log.map.blocks())
            .collect();
        let incoming = if recent.is_empty() {
            0
        } else {
            (recent.iter().sum::<u64>() / recent.len() as u64) as i128
        };
        let mut available_blocks = block_limit as i128 - self.blocks() as i128 - incoming;
        let mut available_txgs = tunables.unflushed_log_txg_max as i128
            - summary
                .iter()
                .map(|row| row.txg_count as i128)
                .sum::<i128>();
        let mut txgs_in_future: i128 = 1;
        let mut total_flushes: i128 = 0;
        let mut per_txg = tunables.min_metaslabs_to_flush as i128;
        for row in summary {
            if available_blocks >= 0 && available_txgs >= 0 {
                let skip = if incoming == 0 {
                    available_txgs + 1
                } else {
                    (available_txgs + 1).min(available_blocks / incoming + 1)
                };
                available_blocks -= skip * incoming;
                available_txgs -= skip;
                txgs_in_future += skip;
            }
            available_blocks += row.blocks as i128;
            available_txgs += row.txg_count as i128;
            total_flushes += row.metaslabs_dirty as i128;
            per_txg = per_txg.max((total_flushes + txgs_in_future - 1) / txgs_in_future);
        }
        per_txg.max(0) as u64
    }
}

/// Every metaslab as (unflushed txg, group index, metaslab index, dirty), for the flush walk
/// of `flush_txg`: dirty when a flush has something to write ([`Metaslab::needs_flush`]).
/// Without a flush txg (inspection), dirty when it has unflushed changes.
fn unflushed_metaslabs(
    groups: &[parking_lot::MutexGuard<'_, Group>],
    flush_txg: Option<Txg>,
) -> Vec<(u64, usize, usize, bool)> {
    let mut all = Vec::new();
    for (group_index, group) in groups.iter().enumerate() {
        for (index, metaslab) in group.metaslabs.iter().enumerate() {
            if metaslab.unflushed.txg != 0 {
                all.push((
                    metaslab.unflushed.txg,
                    group_index,
                    index,
                    match flush_txg {
                        Some(txg) => metaslab.needs_flush(txg),
                        None => !metaslab.unflushed.is_empty(),
                    },
                ));
            }
        }
    }
    all.sort_unstable();
    all
}

impl SpaceManager {
    /// Use the log space map (a pool with `com.tarn:log_spacemap`). Call before `add_vdev`:
    /// metaslab maps of such a pool have blocks of `metaslab_sm_blksz_with_log`.
    pub fn enable_log(&self) {
        let mut log = self.log.lock();
        if log.is_none() {
            *log = Some(LogState::default());
        }
    }

    pub fn log_enabled(&self) -> bool {
        self.log.lock().is_some()
    }

    /// Block size of this pool's metaslab maps (`metaslab_sm_blksz_with_log` with the log).
    pub fn metaslab_map_block_size(&self) -> u32 {
        if self.log_enabled() {
            self.tunables.metaslab_sm_blksz_with_log
        } else {
            self.tunables.metaslab_sm_blksz
        }
    }

    /// Flush every metaslab in the next txg (export), which then is synced even if idle.
    pub fn request_flush_all(&self) {
        if let Some(log) = self.log.lock().as_mut() {
            log.flush_all = true;
        }
    }

    /// Does the next txg have a flush to do that no dirty data announces?
    pub fn flush_all_pending(&self) -> bool {
        self.log.lock().as_ref().is_some_and(|log| log.flush_all)
    }

    /// The free space of metaslab `id` of `vdev` as its map and the log's unflushed changes say
    /// (for inspection of an unloaded metaslab: `tarn debug metaslabs -mmm`).
    pub fn metaslab_free_tree(
        &self,
        vdev: VdevId,
        id: u64,
        storage: &dyn SpaceStorage,
    ) -> Result<RangeTree, SpaceError> {
        self.with_group(vdev, |group| {
            let Some(metaslab) = group.metaslabs.get(id as usize) else {
                return Err(SpaceError::corrupt(
                    format!("no metaslab {id}"),
                    format!("vdev {vdev}"),
                ));
            };
            let mut free = match metaslab.space_map() {
                Some(map) => map.load_free_tree(storage, map.length_bytes())?,
                None => RangeTree::with_range(metaslab.start, metaslab.size),
            };
            metaslab.apply_unflushed(&mut free)?;
            Ok(free)
        })
    }

    /// The log directory object, once a sync has created it.
    pub fn log_directory(&self) -> Option<ObjectId> {
        self.log.lock().as_ref().and_then(|log| log.directory)
    }

    /// The log directory object when it was created by the last sync pass and the MOS
    /// directory does not name it yet (the pool records it under `log_spacemap`).
    pub fn take_created_log_directory(&self) -> Option<ObjectId> {
        let mut log = self.log.lock();
        let log = log.as_mut()?;
        if !log.directory_created {
            return None;
        }
        log.directory_created = false;
        log.directory
    }

    /// Import: read the log directory (None: the pool never synced a log), every vdev's
    /// unflushed-txg array, and replay the logs into the metaslabs' unflushed trees. Call after
    /// every `add_vdev` and before any allocation. `last_synced` is the txg being opened.
    pub fn open_log(
        &self,
        directory: Option<ObjectId>,
        storage: &dyn SpaceStorage,
        last_synced: Txg,
    ) -> Result<(), SpaceError> {
        let mut guard = self.log.lock();
        let Some(log) = guard.as_mut() else {
            return Ok(());
        };
        let Some(directory) = directory else {
            return Ok(());
        };
        let phys = read_log_directory(storage, directory)?;
        let groups = self.groups.read();
        let mut locked: Vec<_> = groups.iter().map(|group| group.lock()).collect();
        for (&vdev, &array) in &phys.arrays {
            let Some(group) = locked.iter_mut().find(|group| group.vdev.0 == vdev) else {
                return Err(SpaceError::corrupt(
                    format!("unflushed-txg array of vdev {vdev}, which the pool does not have"),
                    format!("log space map directory object {directory}"),
                ));
            };
            let txgs = read_unflushed_txgs(storage, array, group, last_synced)?;
            for (metaslab, txg) in group.metaslabs.iter_mut().zip(txgs) {
                metaslab.unflushed.txg = txg;
            }
        }
        let block_size = self.tunables.log_sm_blksz;
        for (&txg, &object) in &phys.logs {
            if txg > last_synced.0 {
                return Err(SpaceError::corrupt(
                    format!("log of txg {txg}, after the last synced txg {last_synced}"),
                    format!("log space map directory object {directory}"),
                ));
            }
            let map = SpaceMap::open_log(storage, object, block_size)?;
            map.replay(storage, map.length_bytes(), |entry| {
                let metaslab = log_entry_metaslab(&mut locked, &entry, Txg(txg), object)?;
                self.track(metaslab, |metaslab| {
                    metaslab.replay_log_entry(&entry, Txg(txg), last_synced)
                })
            })?;
            log.logs.insert(txg, LogMap { map });
        }
        for group in locked.iter_mut() {
            for metaslab in group.metaslabs.iter_mut() {
                self.track(metaslab, |metaslab| metaslab.finish_log_replay())?;
            }
        }
        log.directory = Some(directory);
        log.arrays = phys.arrays;
        Ok(())
    }

    /// Pass 1 of `txg`, before its changes are logged: flush the metaslabs the estimate asks
    /// for, oldest first (all of them after `request_flush_all`), and free the logs no
    /// metaslab needs any more. See the module documentation.
    pub(super) fn flush_metaslabs(
        &self,
        log: &mut LogState,
        groups: &mut [parking_lot::MutexGuard<'_, Group>],
        txg: Txg,
        storage: &dyn SpaceStorage,
        log_storage: &dyn SpaceStorage,
    ) -> Result<(), SpaceError> {
        let tunables = &self.tunables;
        let candidates = unflushed_metaslabs(groups, Some(txg));
        let dirty_count = candidates.iter().filter(|candidate| candidate.3).count() as u64;
        let block_limit = LogState::block_limit(dirty_count, tunables);
        let flush_all = std::mem::take(&mut log.flush_all);
        let mut wanted = if flush_all {
            u64::MAX
        } else if dirty_count == 0 {
            0
        } else {
            let by_txg: Vec<(u64, bool)> = candidates
                .iter()
                .map(|&(unflushed_txg, _, _, dirty)| (unflushed_txg, dirty))
                .collect();
            let summary = log.summary(&by_txg, block_limit, tunables);
            log.estimate_flushes(&summary, block_limit, tunables)
        };
        let mut memory: u64 = groups
            .iter()
            .flat_map(|group| group.metaslabs.iter())
            .map(|metaslab| metaslab.unflushed.memory_bytes())
            .sum();
        for (unflushed_txg, group_index, index, dirty) in candidates {
            if unflushed_txg >= txg.0 {
                continue;
            }
            let too_old = unflushed_txg.saturating_add(tunables.unflushed_log_txg_max) <= txg.0;
            if wanted == 0 && memory <= tunables.unflushed_max_mem_amt && !too_old {
                break;
            }
            let metaslab = &mut groups[group_index].metaslabs[index];
            if dirty {
                memory = memory.saturating_sub(metaslab.unflushed.memory_bytes());
                let condensed = metaslab.condense_count;
                self.track(metaslab, |metaslab| metaslab.flush(storage, txg, tunables))?;
                if metaslab.condense_count != condensed {
                    self.stats.condensed();
                }
                self.stats.flushed();
                wanted = wanted.saturating_sub(1);
            } else {
                metaslab.unflushed.txg = txg.0;
                metaslab.unflushed.txg_dirty = true;
            }
        }
        // Logs older than every metaslab's unflushed txg hold nothing needed.
        let oldest_needed = groups
            .iter()
            .flat_map(|group| group.metaslabs.iter())
            .map(|metaslab| metaslab.unflushed.txg)
            .filter(|&unflushed_txg| unflushed_txg != 0)
            .min()
            .unwrap_or(txg.0);
        let obsolete: Vec<u64> = log
            .logs
            .range(..oldest_needed)
            .map(|(&txg, _)| txg)
            .collect();
        for obsolete_txg in obsolete {
            let freed = log.logs.remove(&obsolete_txg).expect("listed above");
            log_storage.free_object(freed.map.object, txg)?;
            log.directory_dirty = true;
        }
        Ok(())
    }

    /// Log the changes of every dirty metaslab of `group` in this pass of `txg`, creating the
    /// txg's log on first use. Returns whether anything was written.
    pub(super) fn sync_group_to_log(
        &self,
        log: &mut LogState,
        group: &mut Group,
        txg: Txg,
        sync_pass: u32,
        storage: &dyn SpaceStorage,
        log_storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let mut wrote = false;
        let vdev = group.vdev.0;
        for metaslab in group.metaslabs.iter_mut() {
            if !metaslab.is_dirty(txg) {
                continue;
            }
            let map = match log.logs.entry(txg.0) {
                std::collections::btree_map::Entry::Occupied(entry) => &mut entry.into_mut().map,
                std::collections::btree_map::Entry::Vacant(entry) => {
                    let map = SpaceMap::create(
                        log_storage,
                        0,
                        u64::MAX,
                        LOG_SPACE_MAP_SHIFT,
                        self.tunables.log_sm_blksz,
                        txg,
                    )?;
                    log.directory_dirty = true;
                    &mut entry.insert(LogMap { map }).map
                }
            };
            wrote |= self.track(metaslab, |metaslab| {
                metaslab.sync_to_log(storage, log_storage, map, vdev, txg, sync_pass)
            })?;
            log.appended = true;
        }
        Ok(wrote)
    }

    /// Write the unflushed-txg array entries of `group` that changed (creating the array on
    /// first use). Returns whether anything was written.
    pub(super) fn write_unflushed_txgs(
        &self,
        log: &mut LogState,
        group: &mut Group,
        txg: Txg,
        storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        if !group
            .metaslabs
            .iter()
            .any(|metaslab| metaslab.unflushed.txg_dirty)
        {
            return Ok(false);
        }
        let array = match log.arrays.get(&group.vdev.0) {
            Some(&array) => array,
            None => {
                let array = storage.create_object(self.tunables.metaslab_sm_blksz, txg)?;
                storage.write(array, 0, &vec![0u8; group.metaslabs.len() * 8], txg)?;
                log.arrays.insert(group.vdev.0, array);
                log.directory_dirty = true;
                array
            }
        };
        for metaslab in group.metaslabs.iter_mut() {
            if std::mem::take(&mut metaslab.unflushed.txg_dirty) {
                storage.write(
                    array,
                    metaslab.id * 8,
                    &metaslab.unflushed.txg.to_le_bytes(),
                    txg,
                )?;
            }
        }
        Ok(true)
    }

    /// End of a pass: the syncing log's header and the directory, if they changed.
    pub(super) fn finish_log_pass(
        &self,
        log: &mut LogState,
        txg: Txg,
        storage: &dyn SpaceStorage,
        log_storage: &dyn SpaceStorage,
    ) -> Result<bool, SpaceError> {
        let mut wrote = false;
        if std::mem::take(&mut log.appended) {
            if let Some(current) = log.logs.get(&txg.0) {
                current.map.write_header(log_storage, txg)?;
                wrote = true;
            }
        }
        if std::mem::take(&mut log.directory_dirty) {
            let directory = match log.directory {
                Some(directory) => directory,
                None => {
                    let directory = storage.create_object(self.tunables.metaslab_sm_blksz, txg)?;
                    log.directory = Some(directory);
                    log.directory_created = true;
                    directory
                }
            };
            let phys = LogDirectoryPhys {
                arrays: log.arrays.clone(),
                logs: log
                    .logs
                    .iter()
                    .map(|(&txg, log)| (txg, log.map.object))
                    .collect(),
            };
            let bytes = phys.encode();
            storage.truncate(directory, 0, txg)?;
            storage.write(directory, 0, &bytes, txg)?;
            wrote = true;
        }
        Ok(wrote)
    }

    /// The log space map as a whole (None without the feature), for `tarn debug logs`.
    pub fn log_stats(&self) -> Option<LogSpaceStats> {
        let log = self.log.lock();
        let log = log.as_ref()?;
        let groups = self.groups.read();
        let locked: Vec<_> = groups.iter().map(|group| group.lock()).collect();
        let candidates = unflushed_metaslabs(&locked, None);
        let dirty_count = candidates.iter().filter(|candidate| candidate.3).count() as u64;
        let block_limit = LogState::block_limit(dirty_count, &self.tunables);
        let by_txg: Vec<(u64, bool)> = candidates
            .iter()
            .map(|&(unflushed_txg, _, _, dirty)| (unflushed_txg, dirty))
            .collect();
        let logs = log
            .logs
            .iter()
            .map(|(&txg, entry)| LogInfo {
                txg,
                object: entry.map.object.0,
                length_bytes: entry.map.length_bytes(),
                blocks: entry.map.blocks(),
                metaslabs: by_txg
                    .iter()
                    .filter(|(unflushed, _)| *unflushed == txg)
                    .count() as u64,
            })
            .collect();
        Some(LogSpaceStats {
            directory_object: log.directory.map_or(0, |object| object.0),
            logs,
            summary: log.summary(&by_txg, block_limit, &self.tunables),
            blocks: log.blocks(),
            block_limit,
            metaslabs_unflushed: dirty_count,
            memory_bytes: locked
                .iter()
                .flat_map(|group| group.metaslabs.iter())
                .map(|metaslab| metaslab.unflushed.memory_bytes())
                .sum(),
            memory_limit: self.tunables.unflushed_max_mem_amt,
            oldest_unflushed_txg: candidates.first().map_or(0, |candidate| candidate.0),
        })
    }
}

/// Read and decode the log directory (untrusted: counts are bounded before reading).
fn read_log_directory(
    storage: &dyn SpaceStorage,
    directory: ObjectId,
) -> Result<LogDirectoryPhys, SpaceError> {
    let header_len = LogDirectoryPhys::encoded_len(0, 0);
    let mut head = vec![0u8; header_len];
    storage.read(directory, 0, &mut head)?;
    let count = |index: usize| {
        u64::from_le_bytes(head[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
    };
    let pairs = count(1).saturating_add(count(2));
    if pairs > 1 << 24 {
        return Err(SpaceError::corrupt(
            format!("{pairs} entries"),
            format!("log space map directory object {directory}"),
        ));
    }
    let mut bytes = vec![0u8; header_len + pairs as usize * 16];
    storage.read(directory, 0, &mut bytes)?;
    LogDirectoryPhys::decode(&bytes, directory)
}

/// Read a vdev's unflushed-txg array: one txg per metaslab of `group`, none after
/// `last_synced`.
fn read_unflushed_txgs(
    storage: &dyn SpaceStorage,
    array: ObjectId,
    group: &Group,
    last_synced: Txg,
) -> Result<Vec<u64>, SpaceError> {
    let mut bytes = vec![0u8; group.metaslabs.len() * 8];
    storage.read(array, 0, &mut bytes)?;
    let txgs: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
        .collect();
    if let Some((id, txg)) = txgs
        .iter()
        .enumerate()
        .find(|(_, &txg)| txg > last_synced.0)
    {
        return Err(SpaceError::corrupt(
            format!(
                "metaslab {id} unflushed since txg {txg}, after the last synced txg {last_synced}"
            ),
            format!("unflushed-txg array object {array} of vdev {}", group.vdev),
        ));
    }
    Ok(txgs)
}

impl SpaceManager {
    /// `tarn check`: replay the logs on disk, as an import would, into fresh unflushed trees
    /// and compare them with each metaslab's in memory (which the space accounting of
    /// [`SpaceManager::allocated_from_space_maps`] applies). A difference is corruption: the
    /// logs would not bring back what the pool now believes. Call between syncs.
    pub fn verify_log_on_disk(&self, storage: &dyn SpaceStorage) -> Result<(), SpaceError> {
        let guard = self.log.lock();
        let Some(log) = guard.as_ref() else {
            return Ok(());
        };
        let Some(directory) = log.directory else {
            return Ok(());
        };
        let phys = read_log_directory(storage, directory)?;
        let groups = self.groups.read();
        let mut locked: Vec<_> = groups.iter().map(|group| group.lock()).collect();
        let mut replayed: BTreeMap<(u32, u64), Unflushed> = BTreeMap::new();
        let mut txgs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (&vdev, &array) in &phys.arrays {
            let Some(group) = locked.iter().find(|group| group.vdev.0 == vdev) else {
                return Err(SpaceError::corrupt(
                    format!("unflushed-txg array of vdev {vdev}, which the pool does not have"),
                    format!("log space map directory object {directory}"),
                ));
            };
            txgs.insert(
                vdev,
                read_unflushed_txgs(storage, array, group, Txg(u64::MAX))?,
            );
        }
        for (&log_txg, &object) in &phys.logs {
            let map = SpaceMap::open_log(storage, object, self.tunables.log_sm_blksz)?;
            map.replay(storage, map.length_bytes(), |entry| {
                let metaslab = log_entry_metaslab(&mut locked, &entry, Txg(log_txg), object)?;
                let vdev = entry.vdev.expect("checked by log_entry_metaslab");
                let unflushed_txg = txgs
                    .get(&vdev)
                    .and_then(|txgs| txgs.get(metaslab.id as usize))
                    .copied()
                    .unwrap_or(0);
                if log_txg < unflushed_txg {
                    return Ok(());
                }
                let (start, size, ashift) = (metaslab.start, metaslab.size, metaslab.ashift);
                replayed
                    .entry((vdev, metaslab.id))
                    .or_insert_with(|| Unflushed::new(start, size, ashift))
                    .record(entry.action, entry.start, entry.size)
                    .map_err(|error| {
                        SpaceError::corrupt(
                            format!(
                                "{:?} of [{:#x}, {:#x}): {error}",
                                entry.action,
                                entry.start,
                                entry.start + entry.size
                            ),
                            format!("log space map object {object} of txg {log_txg}"),
                        )
                    })
            })?;
        }
        for group in &locked {
            for metaslab in &group.metaslabs {
                let same = match replayed.get(&(group.vdev.0, metaslab.id)) {
                    Some(disk) => {
                        disk.allocs.iter().eq(metaslab.unflushed.allocs.iter())
                            && disk.frees.iter().eq(metaslab.unflushed.frees.iter())
                    }
                    None => metaslab.unflushed.is_empty(),
                };
                if !same {
                    return Err(SpaceError::corrupt(
                        format!(
                            "the logs on disk replay to {} bytes allocated and {} freed unflushed, memory holds {} and {}",
                            replayed.get(&(group.vdev.0, metaslab.id)).map_or(0, |disk| disk.allocs.space()),
                            replayed.get(&(group.vdev.0, metaslab.id)).map_or(0, |disk| disk.frees.space()),
                            metaslab.unflushed.allocs.space(),
                            metaslab.unflushed.frees.space()
                        ),
                        format!("vdev {} metaslab {}", group.vdev, metaslab.id),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The metaslab an entry of the log of `log_txg` belongs to, validated (entries come from disk).
fn log_entry_metaslab<'a>(
    groups: &'a mut [parking_lot::MutexGuard<'_, Group>],
    entry: &SpaceMapEntry,
    log_txg: Txg,
    object: ObjectId,
) -> Result<&'a mut Metaslab, SpaceError> {
    let where_ = || format!("log space map object {object} of txg {log_txg}");
    let Some(vdev) = entry.vdev else {
        return Err(SpaceError::corrupt(
            "log entry without a vdev id".into(),
            where_(),
        ));
    };
    let Some(group) = groups.iter_mut().find(|group| group.vdev == VdevId(vdev)) else {
        return Err(SpaceError::corrupt(
            format!("log entry for vdev {vdev}, which the pool does not have"),
            where_(),
        ));
    };
    group.metaslab_for(entry.start, entry.size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::space_map::SpaceMapAction;
    use proptest::prelude::*;

    #[test]
    fn estimate_flushes_more_when_the_log_is_over_its_limits() {
        let tunables = Tunables::tiny();
        let mut state = LogState::default();
        let storage = crate::space::space_map::tests::MemoryStorage::default();
        for txg in 1..=40u64 {
            let mut map = SpaceMap::create(&storage, 0, u64::MAX, 9, 4096, Txg(txg)).unwrap();
            map.header.length_bytes = 3 * 4096;
            state.logs.insert(txg, LogMap { map });
        }
        let metaslabs: Vec<(u64, bool)> = (1..=40u64).map(|txg| (txg, true)).collect();
        let limit = LogState::block_limit(40, &tunables);
        let summary = state.summary(&metaslabs, limit, &tunables);
        assert!(summary.len() as u64 <= tunables.max_logsm_summary_length);
        assert_eq!(summary.iter().map(|row| row.txg_count).sum::<u64>(), 40);
        assert_eq!(
            summary.iter().map(|row| row.metaslabs_dirty).sum::<u64>(),
            40
        );
        // 120 blocks against a limit of 160 and 40 txgs against 32: over the txg limit.
        let flushes = state.estimate_flushes(&summary, limit, &tunables);
        assert!(flushes > 1, "{flushes}");
        // A short, small log needs only the minimum.
        let short = LogState::default();
        assert_eq!(short.estimate_flushes(&[], limit, &tunables), 1);
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn directory_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = LogDirectoryPhys::decode(&bytes, ObjectId(7));
        }

        /// Mutations of a valid directory: refused with an error naming the object, or
        /// decoded to a directory that encodes and decodes to itself.
        #[test]
        fn mutated_directories_never_panic(
            arrays in proptest::collection::btree_map(0u32..64, 1u64..1000, 0..4),
            logs in proptest::collection::btree_map(1u64..10_000, 1u64..1000, 0..20),
            mutations in crate::fuzz::mutations(),
        ) {
            let phys = LogDirectoryPhys {
                arrays: arrays.into_iter().map(|(vdev, object)| (vdev, ObjectId(object))).collect(),
                logs: logs.into_iter().map(|(txg, object)| (txg, ObjectId(object))).collect(),
            };
            let bytes = crate::fuzz::mutate(phys.encode(), &mutations);
            match LogDirectoryPhys::decode(&bytes, ObjectId(7)) {
                Ok(decoded) => {
                    prop_assert_eq!(LogDirectoryPhys::decode(&decoded.encode(), ObjectId(7)).unwrap(), decoded);
                }
                Err(error) => prop_assert!(error.to_string().contains("object 7"), "{}", error),
            }
        }

        #[test]
        fn directory_round_trips(
            arrays in proptest::collection::btree_map(0u32..64, 1u64..1000, 0..4),
            logs in proptest::collection::btree_map(1u64..10_000, 1u64..1000, 0..20),
        ) {
            let phys = LogDirectoryPhys {
                arrays: arrays.into_iter().map(|(vdev, object)| (vdev, ObjectId(object))).collect(),
                logs: logs.into_iter().map(|(txg, object)| (txg, ObjectId(object))).collect(),
            };
            prop_assert_eq!(LogDirectoryPhys::decode(&phys.encode(), ObjectId(7)).unwrap(), phys);
        }

        /// Log entries (two-word, with a vdev id) decode to what was written, and any bytes
        /// decode to entries or a corruption error, never a panic.
        #[test]
        fn log_entries_round_trip_and_garbage_is_an_error(
            runs in proptest::collection::vec((0u64..1 << 20, 1u64..64), 1..40),
            vdev in 0u32..1000,
            garbage in proptest::collection::vec(any::<u64>(), 0..64),
        ) {
            let storage = crate::space::space_map::tests::MemoryStorage::default();
            let mut tree = RangeTree::new();
            for (offset, length) in runs {
                tree.add_missing(offset << 9, length << 9);
            }
            let mut map = SpaceMap::create(&storage, 0, u64::MAX, 9, 4096, Txg(3)).unwrap();
            map.append_with_vdev(&storage, &tree, SpaceMapAction::Alloc, Txg(3), 1, Some(vdev)).unwrap();
            map.write_header(&storage, Txg(3)).unwrap();
            let map = SpaceMap::open_log(&storage, map.object, 4096).unwrap();
            let mut decoded = RangeTree::new();
            let mut vdevs = Vec::new();
            map.replay(&storage, map.length_bytes(), |entry| {
                vdevs.push(entry.vdev);
                decoded.add(entry.start, entry.size);
                Ok(())
            }).unwrap();
            prop_assert!(vdevs.iter().all(|found| *found == Some(vdev)));
            prop_assert_eq!(decoded.iter().collect::<Vec<_>>(), tree.iter().collect::<Vec<_>>());
            let bytes: Vec<u8> = garbage.iter().flat_map(|word| word.to_le_bytes()).collect();
            storage.write(map.object, 0, &bytes, Txg(4)).unwrap();
            let mut header = map.header.clone();
            header.length_bytes = bytes.len() as u64;
            storage.write_bonus(map.object, &header.encode(), Txg(4)).unwrap();
            let map = SpaceMap::open_log(&storage, map.object, 4096).unwrap();
            let _ = map.replay(&storage, map.length_bytes(), |_| Ok(()));
        }
    }
}
