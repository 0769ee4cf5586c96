//! The persistent error log: data blocks with no good copy, by dataset, object and block
//! (OpenZFS `spa_errlog.c`, `zpool status -v`'s "Permanent errors").
//!
//! # Overview
//! A read that finds no verifying copy of a data block (or of an indirect block above it)
//! fails with EIO, and its object set notes `(object, blkid, birth)` (`object/read_errors.rs`).
//! The pool drains those notes into this log, adding the dataset; a scrub or resilver adds
//! each block it finds with no good copy the moment it finds it (by the walk's position in the
//! tree, `PoolCore::record_scan_damage`), and `check` adds the objects whose blocks it found
//! unreadable. `pool status` counts the entries; `pool status -v` names
//! them by path ([`crate::fs::FileSystem::path_of`]) or, when the file has no path any more,
//! as `<dataset>:<0xobject>` as zpool does.
//!
//! # Lifecycle of an entry
//! - Added by a failed read, by a scan, or by `check` ([`BLKID_UNKNOWN`] is for an entry that
//!   names an object but no block, as a damaged spill block does; it drops out only when the
//!   object is gone).
//! - Dropped when its block is no longer referenced: the object is gone, the block became a
//!   hole, or the block pointer's birth txg differs from the one that failed (the file was
//!   rewritten). This is decided each time the list is read ([`PoolCore::error_entries`]),
//!   and the dropped entries leave the on-disk list in the next sync.
//! - `tarn pool clear` empties the log, as `zpool clear` does.
//! - A finished `check` (the verification tarn has in place of a finished scrub) replaces the
//!   log with what it found unreadable plus what reads noted while it ran: OpenZFS keeps the
//!   last scrub's list and the current one and drops the older at the end of a scrub; here
//!   the verification is one synchronous pass, so one list and a swap at its end do the same.
//!   A finished scrub only adds: its walk of an object set stops at an indirect block it
//!   cannot read, so it does not show that the blocks it did not reach are good.
//!
//! # On-disk format (docs/design/10-pool.md §2.20)
//! MOS directory entry `errlog` names a key/value object (16 KiB blocks). Each entry's key is
//! 24 bytes, little-endian: dataset record object (u64), object (u64), data block id (u64);
//! its value is a u64, the physical birth txg of the block pointer that failed (0: unknown,
//! an indirect block above it failed or `check` reported it). When the log changes, the sync
//! writes a new object with every entry, points the directory entry at it and removes the old
//! one, all in one txg: a crash leaves either list whole.
//!
//! # Cost
//! Memory: the entries, at most [`ERRLOG_ENTRIES_MAX`]. Per txg: nothing unless the log
//! changed; then one object rewritten (entries × 32 bytes or so).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::blkptr::ObjectType;
use crate::object::adapters::KvObject;
use crate::object::kv;
use crate::object::read_errors::BlockNow;
use crate::object::traverse::BlockPosition;
use crate::object::{ObjectSet, Tx};
use crate::types::{ObjectId, Txg};

use super::{kv_create, kv_set_u64, lookup_mos_directory, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the error log.
pub const ERRLOG_KEY: &str = "errlog";
/// The most entries kept; further errors are counted in the status but not named.
pub const ERRLOG_ENTRIES_MAX: usize = 16384;
/// The block id of an entry that names an object but not which block of it.
pub const BLKID_UNKNOWN: u64 = u64::MAX;
/// Bytes of one entry's key.
const ERRLOG_KEY_SIZE: usize = 24;
/// Entries read per listing call at open.
const ERRLOG_LISTING_BATCH: usize = 1024;

/// Where a damaged block is: the dataset's record object in the MOS, the object, the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ErrorBookmark {
    pub dataset: ObjectId,
    pub object: ObjectId,
    pub blkid: u64,
}

impl ErrorBookmark {
    pub fn encode(&self) -> [u8; ERRLOG_KEY_SIZE] {
        let mut key = [0u8; ERRLOG_KEY_SIZE];
        key[0..8].copy_from_slice(&self.dataset.0.to_le_bytes());
        key[8..16].copy_from_slice(&self.object.0.to_le_bytes());
        key[16..24].copy_from_slice(&self.blkid.to_le_bytes());
        key
    }

    pub fn decode(key: &[u8]) -> Option<ErrorBookmark> {
        if key.len() != ERRLOG_KEY_SIZE {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
        Some(ErrorBookmark {
            dataset: ObjectId(word(0)),
            object: ObjectId(word(8)),
            blkid: word(16),
        })
    }
}

/// One entry as `pool status -v` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorEntry {
    pub bookmark: ErrorBookmark,
    /// The dataset's full name, if it still exists.
    pub dataset_name: Option<String>,
    /// The object's path in its file system (from `/`), if it has one.
    pub path: Option<String>,
}

impl ErrorEntry {
    /// The name zpool prints: `DATASET/PATH` (or the mountpoint-relative path the caller
    /// prefers), else `<DATASET>:<0xOBJECT>`.
    pub fn display_name(&self) -> String {
        let dataset = self
            .dataset_name
            .clone()
            .unwrap_or_else(|| format!("<0x{:x}>", self.bookmark.dataset.0));
        match &self.path {
            Some(path) => format!("{dataset}:{path}"),
            None => format!("{dataset}:<0x{:x}>", self.bookmark.object.0),
        }
    }
}

#[derive(Default)]
struct ErrlogState {
    /// Every known entry with the birth txg of the block pointer that failed.
    entries: BTreeMap<ErrorBookmark, u64>,
    /// The MOS object holding the synced list (0: none).
    object: u64,
    /// The entries differ from the synced list.
    dirty: bool,
    /// While a verification (`check`) runs: the entries noted since it began.
    since_verification: Option<BTreeMap<ErrorBookmark, u64>>,
    /// The block I/O's count of noted read errors when the object sets were last drained
    /// (`BlockIo::read_errors_noted`): while it has not moved, no object set holds a note.
    read_errors_drained: u64,
}

/// The pool's error log (see the module documentation).
#[derive(Default)]
pub struct ErrorLog {
    state: Mutex<ErrlogState>,
}

impl ErrorLog {
    fn add(&self, bookmark: ErrorBookmark, birth: u64) {
        let mut state = self.state.lock();
        if let Some(since) = state.since_verification.as_mut() {
            since.insert(bookmark, birth);
        }
        if state.entries.get(&bookmark) == Some(&birth) {
            return;
        }
        if state.entries.len() < ERRLOG_ENTRIES_MAX || state.entries.contains_key(&bookmark) {
            state.entries.insert(bookmark, birth);
            state.dirty = true;
        }
    }
}

impl PoolCore {
    /// At open: load the synced list.
    pub(super) fn load_errlog(&self) -> Result<(), PoolError> {
        let Some(object) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, ERRLOG_KEY)?
        else {
            return Ok(());
        };
        let handle = KvObject::new(&self.mos, ObjectId(object), None)?;
        let corrupt = |error: kv::KvError| PoolError::Corrupt(format!("error log: {error}"));
        let mut entries = BTreeMap::new();
        let mut cookie = 0;
        loop {
            let batch = kv::list(&handle, cookie, ERRLOG_LISTING_BATCH).map_err(corrupt)?;
            let Some(last) = batch.last() else { break };
            cookie = last.cookie + 1;
            for entry in batch {
                let bookmark = ErrorBookmark::decode(&entry.key);
                let birth = entry
                    .value
                    .as_slice()
                    .try_into()
                    .ok()
                    .map(u64::from_le_bytes);
                match (bookmark, birth) {
                    (Some(bookmark), Some(birth)) if entries.len() < ERRLOG_ENTRIES_MAX => {
                        entries.insert(bookmark, birth);
                    }
                    (Some(_), Some(_)) => {}
                    _ => {
                        return Err(PoolError::Corrupt(format!(
                            "error log entry of {} + {} bytes",
                            entry.key.len(),
                            entry.value.len()
                        )))
                    }
                }
            }
        }
        let mut state = self.errlog.state.lock();
        state.entries = entries;
        state.object = object;
        state.dirty = false;
        Ok(())
    }

    /// Take over the read errors every dataset's object set, and every opened snapshot's
    /// (`.zfs/snapshot`), has noted.
    pub(super) fn collect_read_errors(&self) {
        let noted = self.io.read_errors_noted();
        if self.errlog.state.lock().read_errors_drained == noted {
            return;
        }
        // Read before the walk: a note made during it moves the count again, and the next
        // drain walks once more.
        self.errlog.state.lock().read_errors_drained = noted;
        for (dataset_name, objset, dataset) in self.object_sets_with_names() {
            for error in objset.read_errors().take() {
                log::warn!(
                    "pool {}: dataset {dataset_name}: object {} block {} has no good copy",
                    self.name,
                    error.object,
                    error.blkid
                );
                self.errlog.add(
                    ErrorBookmark {
                        dataset,
                        object: error.object,
                        blkid: error.blkid,
                    },
                    error.birth,
                );
            }
        }
    }

    /// Every open object set of a file system or snapshot: (full name, object set, record
    /// object).
    fn object_sets_with_names(&self) -> Vec<(String, Arc<ObjectSet>, ObjectId)> {
        let mut sets = Vec::new();
        for (_, dataset) in self.dataset_list() {
            let name = dataset.name();
            for snapshot in dataset.snapshots() {
                if let Some(objset) = snapshot.opened_objset() {
                    let full = format!("{name}@{}", snapshot.short_name());
                    sets.push((full, objset, snapshot.object));
                }
            }
            if let Some(objset) = dataset.try_objset() {
                sets.push((name, objset, dataset.object));
            }
        }
        sets
    }

    /// Whether the error log has changes to sync (or notes to take over).
    pub(super) fn errlog_dirty(&self) -> bool {
        let state = self.errlog.state.lock();
        if state.dirty {
            return true;
        }
        if state.read_errors_drained == self.io.read_errors_noted() {
            return false;
        }
        drop(state);
        self.object_sets_with_names()
            .iter()
            .any(|(_, objset, _)| !objset.read_errors().is_empty())
    }

    /// Whether the error log, the history or failmode has something for the next sync (a
    /// reason to sync a txg with no other change).
    pub(super) fn records_pending(&self) -> bool {
        self.errlog_dirty() || self.history_pending() || self.failmode_dirty()
    }

    /// Record an unreadable block found by `check` (by dataset record object and object).
    pub fn record_unreadable(&self, dataset: ObjectId, object: ObjectId, blkid: u64, birth: u64) {
        self.errlog.add(
            ErrorBookmark {
                dataset,
                object,
                blkid,
            },
            birth,
        );
    }

    /// Syncing context: a scan found no good copy of the block `bp` at `position` of dataset
    /// record `walked`'s tree (a head's or a snapshot's): log it now, as OpenZFS's scrub does
    /// from its read's completion (`spa_log_error` with the zio's bookmark), so that `pool status
    /// -v` names the file as soon as the scan has read it; the sync that ends the scan (or the
    /// next) writes the log. Blocks of the MOS and of the dnodes and header of an object set
    /// name no file and are only counted by the scan.
    pub(super) fn record_scan_damage(
        &self,
        walked: ObjectId,
        position: BlockPosition,
        bp: &crate::block::blkptr::BlockPtr,
    ) {
        let (object, blkid, birth) = match position {
            BlockPosition::Object {
                object,
                level: 0,
                first_blkid,
            } => (object, first_blkid, bp.birth_physical.0),
            // An indirect block: its data blocks' own pointers are unknown (birth 0).
            BlockPosition::Object {
                object,
                first_blkid,
                ..
            } => (object, first_blkid, 0),
            BlockPosition::Spill { object } => (object, BLKID_UNKNOWN, 0),
            BlockPosition::Dnodes { .. } | BlockPosition::Header => return,
        };
        if walked.0 == 0 {
            return;
        }
        let object = ObjectId(object);
        // The head whose chain `walked` belongs to, and its object set.
        let head = self.dataset_list().into_iter().find_map(|(_, dataset)| {
            let ours = dataset.object == walked
                || dataset
                    .snapshots()
                    .iter()
                    .any(|snapshot| snapshot.object == walked);
            ours.then(|| (dataset.object, dataset.try_objset()))
        });
        let dataset = match head {
            Some((head, objset)) => {
                error_owner(walked, head, objset.as_deref(), object, blkid, birth)
            }
            None => walked,
        };
        self.record_unreadable(dataset, object, blkid, birth);
    }

    /// A verification of the whole pool begins: notes from now on survive its end.
    pub fn errlog_verification_begins(&self) {
        self.errlog.state.lock().since_verification = Some(BTreeMap::new());
    }

    /// A verification ended and found `found` unreadable: the log becomes that plus whatever
    /// was noted while it ran.
    pub fn errlog_verification_ends(&self, found: Vec<(ErrorBookmark, u64)>) {
        self.collect_read_errors();
        let mut state = self.errlog.state.lock();
        let mut entries = state.since_verification.take().unwrap_or_default();
        for (bookmark, birth) in found {
            if entries.len() < ERRLOG_ENTRIES_MAX {
                entries.insert(bookmark, birth);
            }
        }
        if entries != state.entries {
            state.entries = entries;
            state.dirty = true;
        }
    }

    /// `pool clear`: forget every entry.
    pub fn clear_errlog(&self) {
        self.collect_read_errors();
        let mut state = self.errlog.state.lock();
        if !state.entries.is_empty() {
            state.entries.clear();
            state.dirty = true;
        }
    }

    /// `pool clear [DEV]`: reset the error counts of every leaf and cache device (a faulted
    /// cache device is used again), or of the one whose path (or file name) is `device`;
    /// without a device, forget the error log too. A pool suspended by
    /// a failed sync stays suspended here, and that is reported: the daemon's `pool clear`
    /// retries by closing and importing the pool again (docs/design/10-pool.md §2.20).
    pub fn clear_errors(&self, device: Option<&str>) -> Result<(), PoolError> {
        let named = |path: &std::path::Path| {
            device.is_none_or(|device| {
                path == std::path::Path::new(device)
                    || path.file_name() == Some(std::ffi::OsStr::new(device))
            })
        };
        let leaves: Vec<_> = self.io.vdevs.leaves().filter(|l| named(&l.path)).collect();
        // Cache devices too: their counts, and a fault from repeated I/O errors.
        let caches: Vec<_> = self
            .io
            .l2arc()
            .devices()
            .into_iter()
            .filter(|cache| named(&cache.path))
            .collect();
        for cache in &caches {
            cache.leaf.stats.clear_errors();
            cache.clear_fault();
        }
        if let (Some(device), true) = (device, leaves.is_empty() && caches.is_empty()) {
            return Err(PoolError::Refused(format!(
                "no such device in pool {}: {device}",
                self.name
            )));
        }
        for leaf in leaves {
            leaf.stats.clear_errors();
        }
        if device.is_none() {
            self.clear_errlog();
        }
        if let Some(why) = self.txgs.failure() {
            return Err(PoolError::Refused(format!(
                "error counts cleared, but pool {} stays suspended (a txg failed to sync: {why}); export and import the pool to retry (the daemon's pool clear does that)",
                self.name
            )));
        }
        Ok(())
    }

    /// The current entries, those whose block is no longer referenced dropped (and removed from
    /// the on-disk list at the next sync), each with its dataset name and its path when known.
    pub fn error_entries(&self) -> Vec<ErrorEntry> {
        self.error_entries_with(true)
    }

    /// As [`PoolCore::error_entries`]; `with_paths` false skips the path lookups (a walk up
    /// the parent pointers and a directory scan per level, per entry), for counting.
    pub fn error_entries_with(&self, with_paths: bool) -> Vec<ErrorEntry> {
        self.collect_read_errors();
        let entries: Vec<(ErrorBookmark, u64)> = self
            .errlog
            .state
            .lock()
            .entries
            .iter()
            .map(|(bookmark, birth)| (*bookmark, *birth))
            .collect();
        // Heads and opened snapshots by record object: (full name, object set).
        let datasets: BTreeMap<ObjectId, (String, Arc<ObjectSet>)> = self
            .object_sets_with_names()
            .into_iter()
            .map(|(name, objset, object)| (object, (name, objset)))
            .collect();
        let mut stale = Vec::new();
        let mut shown = Vec::new();
        // One read-only file system per dataset named, opened at its first entry.
        let mut file_systems: BTreeMap<ObjectId, Option<crate::fs::FileSystem>> = BTreeMap::new();
        for (bookmark, birth) in entries {
            let found = datasets
                .get(&bookmark.dataset)
                .cloned()
                .or_else(|| self.open_snapshot_by_object(bookmark.dataset));
            let Some((dataset_name, objset)) = found else {
                // A destroyed dataset, or a snapshot that cannot be opened (its entry is named
                // by object number, and kept: a snapshot never changes).
                if self.record_is_gone(bookmark.dataset) {
                    stale.push(bookmark);
                } else {
                    shown.push(ErrorEntry {
                        bookmark,
                        dataset_name: None,
                        path: None,
                    });
                }
                continue;
            };
            if is_stale(&objset, &bookmark, birth) {
                stale.push(bookmark);
                continue;
            }
            let path = if with_paths {
                file_systems
                    .entry(bookmark.dataset)
                    .or_insert_with(|| {
                        crate::fs::FileSystem::open_read_only(objset, self.txgs.clone()).ok()
                    })
                    .as_ref()
                    .and_then(|fs| fs.path_of(bookmark.object.0).ok().flatten())
            } else {
                None
            };
            shown.push(ErrorEntry {
                bookmark,
                dataset_name: Some(dataset_name),
                path,
            });
        }
        if !stale.is_empty() {
            let mut state = self.errlog.state.lock();
            for bookmark in stale {
                if state.entries.remove(&bookmark).is_some() {
                    state.dirty = true;
                }
            }
        }
        shown
    }

    /// Syncing context, pass 1: write the list if it changed (see the module documentation).
    pub(super) fn sync_errlog(&self, txg: Txg) -> Result<(), PoolError> {
        self.collect_read_errors();
        let (entries, old) = {
            let mut state = self.errlog.state.lock();
            if !state.dirty {
                return Ok(());
            }
            state.dirty = false;
            (state.entries.clone(), state.object)
        };
        let tx = Tx::syncing(txg);
        let object = if entries.is_empty() {
            0
        } else {
            let object = kv_create(&self.mos, &tx, &self.tunables)?;
            let mut handle = KvObject::new(&self.mos, object, Some(tx))?;
            for (bookmark, birth) in &entries {
                kv::upsert(&mut handle, &bookmark.encode(), &birth.to_le_bytes())
                    .map_err(|error| PoolError::Corrupt(format!("error log: {error}")))?;
            }
            object.0
        };
        kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, ERRLOG_KEY, object)?;
        if old != 0 {
            self.mos.remove_object(&tx, ObjectId(old))?;
        }
        self.errlog.state.lock().object = object;
        Ok(())
    }
}

impl PoolCore {
    /// The snapshot whose record is `object`, opened: (full name, object set).
    fn open_snapshot_by_object(&self, object: ObjectId) -> Option<(String, Arc<ObjectSet>)> {
        self.dataset_list().into_iter().find_map(|(_, dataset)| {
            let snapshot = dataset
                .snapshots()
                .into_iter()
                .find(|snapshot| snapshot.object == object)?;
            let objset = snapshot.objset(&self.io).ok()?;
            Some((
                format!("{}@{}", dataset.name(), snapshot.short_name()),
                objset,
            ))
        })
    }

    /// Whether the dataset or snapshot record `object` no longer exists in the MOS.
    fn record_is_gone(&self, object: ObjectId) -> bool {
        !matches!(self.mos.info(object), Ok(info) if info.object_type == ObjectType::Dataset)
    }
}

/// The dataset under which an unreadable block found while walking dataset record `walked`
/// (head `head` or one of its snapshots) is logged: the head when the walk was the head's, when
/// the block's own pointer is unknown (`birth` 0: an indirect block above it failed), or when
/// the head still holds the same block (as a read of the live file would log it); else the
/// snapshot walked, the only one that names the damage.
pub fn error_owner(
    walked: ObjectId,
    head: ObjectId,
    head_objset: Option<&ObjectSet>,
    object: ObjectId,
    blkid: u64,
    birth: u64,
) -> ObjectId {
    if walked == head || birth == 0 {
        return head;
    }
    let in_head = head_objset.is_some_and(
        |objset| matches!(objset.block_now(object, blkid), Ok(BlockNow::Born(now)) if now == birth),
    );
    if in_head {
        head
    } else {
        walked
    }
}

/// Whether an entry's block is no longer referenced (see the module documentation).
fn is_stale(objset: &crate::object::ObjectSet, bookmark: &ErrorBookmark, birth: u64) -> bool {
    if bookmark.blkid == BLKID_UNKNOWN {
        return !objset.exists(bookmark.object);
    }
    match objset.block_now(bookmark.object, bookmark.blkid) {
        Ok(BlockNow::Gone) | Ok(BlockNow::Hole) => true,
        // Birth 0: an indirect block above it failed; readable again means rewritten.
        Ok(BlockNow::Born(now)) => birth == 0 || now != birth,
        Ok(BlockNow::Unreadable) | Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        /// An error log key is read from the MOS: any bytes decode to an entry (24 bytes) or
        /// to nothing, never a panic, and what decodes encodes back to the same bytes.
        #[test]
        fn error_bookmark_keys_never_panic(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            match ErrorBookmark::decode(&key) {
                Some(bookmark) => prop_assert_eq!(&bookmark.encode()[..], &key[..]),
                None => prop_assert_ne!(key.len(), ERRLOG_KEY_SIZE),
            }
        }
    }

    #[test]
    fn bookmarks_round_trip_and_reject_bad_keys() {
        let bookmark = ErrorBookmark {
            dataset: ObjectId(0x1234),
            object: ObjectId(77),
            blkid: BLKID_UNKNOWN,
        };
        assert_eq!(ErrorBookmark::decode(&bookmark.encode()), Some(bookmark));
        assert_eq!(ErrorBookmark::decode(&[0u8; 23]), None);
        assert_eq!(ErrorBookmark::decode(&[]), None);
    }

    #[test]
    fn entries_are_named_by_path_or_object_number() {
        let bookmark = ErrorBookmark {
            dataset: ObjectId(5),
            object: ObjectId(0x2a),
            blkid: 0,
        };
        let mut entry = ErrorEntry {
            bookmark,
            dataset_name: Some("tank/fs".into()),
            path: Some("/dir/file".into()),
        };
        assert_eq!(entry.display_name(), "tank/fs:/dir/file");
        entry.path = None;
        assert_eq!(entry.display_name(), "tank/fs:<0x2a>");
        entry.dataset_name = None;
        assert_eq!(entry.display_name(), "<0x5>:<0x2a>");
    }

    #[test]
    fn the_log_is_bounded_and_a_repeated_error_does_not_dirty_it() {
        let log = ErrorLog::default();
        let at = |blkid| ErrorBookmark {
            dataset: ObjectId(1),
            object: ObjectId(2),
            blkid,
        };
        log.add(at(0), 9);
        assert!(log.state.lock().dirty);
        log.state.lock().dirty = false;
        log.add(at(0), 9);
        assert!(!log.state.lock().dirty);
        for blkid in 0..(ERRLOG_ENTRIES_MAX as u64 + 5) {
            log.add(at(blkid), 9);
        }
        assert_eq!(log.state.lock().entries.len(), ERRLOG_ENTRIES_MAX);
    }
}
