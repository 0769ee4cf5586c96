//! The file system's side of the intent log (OpenZFS zfs_log.c, zfs_replay.c, zfs_fsync):
//! which changes make records, what an fsync commits, and replay at open.
//!
//! # Theory
//! These changes make log records: `write` (its range), `setattr` without an ACL rewrite (the
//! resulting attribute values), `set_project` (a setattr record with the project bit, ordered
//! as the namespace records are: fs/project.rs), the namespace changes `create` / `mkdir` /
//! `mknod` / `symlink`, `link`, `unlink` / `rmdir` and `rename` (without RENAME_WHITEOUT),
//! and xattr set and remove (`copy_range` writes through `write`). A namespace record is filed
//! under the object it names and under the directories it touched, so the fsync of any of them
//! commits it; and a commit takes every namespace record of the set up to its newest record,
//! in order (zil/mod.rs), so a file's name never depends on a directory change left out. Every
//! other change of an inode (fallocate, a chmod that rewrites an ACL, a rename with a whiteout)
//! goes through [`FileSystem::put_znode`], which notes the txg in the log's unlogged table
//! (shared by every handle on the set): a commit whose records name that inode first waits for
//! that txg to sync. So an fsync always makes the file's contents and attributes, and the
//! directory operations that made its name, durable: through the log, or the slow way for
//! what the log does not record.
//!
//! Replay runs in [`FileSystem::open`], before anything else changes the file system, on the
//! tree as synced through the header's claimed-through txg *T*: each record of a later txg is
//! applied through the same operation (`write`, `setattr`, `make_node` at the record's object
//! number, `link`, `remove_entry`, `rename`, `setxattr`), in order. A record applies to its
//! object only if that is the same object: with the generation it carries when that is *T* or
//! older, or, for an object born after *T*, one made by replay (a generation after *T*: within
//! a chain's life an object number is never reused, so the number identifies it). A namespace
//! record applies only if its name still says what it said before the change: a create whose
//! object exists, a remove or rename whose old name no longer names the record's object, a
//! link whose name is taken, are skipped. Each operation is one transaction, so a crash during
//! replay leaves a prefix of the records applied, and replaying again from the start skips
//! that prefix's changes that still stand and redoes the rest in the same order: it converges
//! on the same tree. A record that fails (an in-place block a power cut lost, say) ends replay
//! there, as OpenZFS's zil_replay stops at its first error: applying later records over a
//! missing one could make a state the file system never had. Objects replay makes without a record of their own (an xattr directory)
//! are numbered above every object a record names, so they never take a number a later
//! create needs.

use std::sync::Arc;

use crate::object::{ObjectError, Tx};
use crate::types::{ObjectId, Txg};
use crate::zil::record::{setattr_mask, LogTime, Record, RecordBody, RENAME_FLAGS_LOGGED};
use crate::zil::{Change, Logbias, SyncMode, Zil};

use super::nodes::NodeOrigin;
use super::phys::{fs_time, log_time, FileKind, Znode, MODE_PERMISSION_MASK};
use super::write::WriteSource;
use super::{FileSystem, FsError, Result, SetAttr, Staged};

thread_local! {
    /// Test hook, off: [`test_hook_fail_replay_of`].
    static REPLAY_FAILS_FOR: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Test hook, off unless a test sets it: replay on this thread fails the first record of
/// `object` as a record that cannot be applied would (an unreadable in-place block, say).
/// Per thread, so that tests running beside it are untouched.
#[doc(hidden)]
pub fn test_hook_fail_replay_of(object: Option<u64>) {
    REPLAY_FAILS_FOR.set(object);
}

fn test_hook_replay_fails_for(object: u64) -> bool {
    REPLAY_FAILS_FOR.get() == Some(object)
}

thread_local! {
    /// Test hook, off: [`test_hook_sync_each_replayed_record`].
    static SYNC_EACH_REPLAYED_RECORD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Test hook, off unless a test sets it: replay on this thread waits for a txg sync after
/// each record, as a busy pool's txg timer may sync part way through a long replay; a power
/// cut during it then leaves a tree with a prefix of the records applied and synced.
#[doc(hidden)]
pub fn test_hook_sync_each_replayed_record(on: bool) {
    SYNC_EACH_REPLAYED_RECORD.set(on);
}

/// The setattr record mask for `changes` (a size change also sets mtime).
pub(super) fn setattr_mask_of(changes: &SetAttr) -> u32 {
    let mut mask = 0;
    if changes.mode.is_some() {
        mask |= setattr_mask::MODE;
    }
    if changes.uid.is_some() {
        mask |= setattr_mask::UID;
    }
    if changes.gid.is_some() {
        mask |= setattr_mask::GID;
    }
    if changes.size.is_some() {
        mask |= setattr_mask::SIZE | setattr_mask::MTIME;
    }
    if changes.atime.is_some() {
        mask |= setattr_mask::ATIME;
    }
    if changes.mtime.is_some() {
        mask |= setattr_mask::MTIME;
    }
    mask
}

impl FileSystem {
    /// The `sync` setting of this file system's log.
    pub fn sync_mode(&self) -> SyncMode {
        self.zil
            .as_ref()
            .map_or(SyncMode::Standard, |zil| zil.mode())
    }

    /// Change the `sync` setting (the dataset property changed).
    pub fn set_sync_mode(&self, mode: SyncMode) {
        if let Some(zil) = &self.zil {
            zil.set_mode(mode);
        }
    }

    /// Change the `logbias` setting (the dataset property changed).
    pub fn set_logbias(&self, logbias: Logbias) {
        if let Some(zil) = &self.zil {
            zil.set_logbias(logbias);
        }
    }

    /// The intent log, if this file system has one.
    pub fn intent_log(&self) -> Option<&Arc<Zil>> {
        self.zil.as_ref()
    }

    pub(super) fn note_unlogged(&self, txg: Txg, ino: u64) {
        if let Some(zil) = &self.zil {
            zil.note_unlogged(txg, ino, self.txgs.last_synced());
        }
    }

    /// Record a change of `ino` in the log (without a log, fsync waits for a txg anyway).
    pub(super) fn log_change(&self, tx: &Tx, ino: u64, change: Change) -> Result<()> {
        if let Some(zil) = self
            .zil
            .as_ref()
            .filter(|zil| zil.mode() != SyncMode::Disabled || zil.is_replaying())
        {
            let generation = self.objset.info(ObjectId(ino))?.generation.0;
            zil.log(tx.txg, ino, generation, change);
        }
        Ok(())
    }

    /// Record a change of `ino` (generation `generation`) that the fsync of each of
    /// `related` needs as well: a namespace change, an xattr change. The caller holds `tx`.
    pub(super) fn log_record(
        &self,
        tx: &Tx,
        ino: u64,
        generation: u64,
        related: &[u64],
        body: RecordBody,
    ) {
        if let Some(zil) = &self.zil {
            zil.log_related(tx.txg, ino, generation, related, Change::Record(body));
        }
    }

    /// Store the staged znodes but those `removed`, for an operation the log does not record.
    pub(super) fn write_staged(&self, tx: &Tx, staged: &Staged, removed: &[u64]) -> Result<()> {
        for &ino in staged.znodes.keys() {
            self.note_unlogged(tx.txg, ino);
        }
        self.write_staged_logged(tx, staged, removed)
    }

    /// [`FileSystem::write_staged`] for an operation whose log record the caller makes.
    pub(super) fn write_staged_logged(
        &self,
        tx: &Tx,
        staged: &Staged,
        removed: &[u64],
    ) -> Result<()> {
        for (&ino, znode) in &staged.znodes {
            if !removed.contains(&ino) {
                self.put_znode_logged(tx, ino, znode)?;
            }
        }
        Ok(())
    }

    /// The generation of `ino` (for a record made after it is gone).
    pub(super) fn generation_of(&self, ino: u64) -> Result<u64> {
        Ok(self.objset.info(ObjectId(ino))?.generation.0)
    }

    /// Whether a rename with `flags` is recorded (a whiteout makes an object of its own, which
    /// the log does not record: such a rename waits for its txg).
    pub(super) fn rename_is_logged(flags: u32) -> bool {
        flags & !RENAME_FLAGS_LOGGED == 0
    }

    /// Record the attributes in `mask` as `znode` now has them (with
    /// [`setattr_mask::PROJECT`], its project ID and inherit flag).
    pub(super) fn log_setattr(&self, tx: &Tx, ino: u64, znode: &Znode, mask: u32) -> Result<()> {
        if mask == 0 {
            return Ok(());
        }
        let has_project = mask & setattr_mask::PROJECT != 0;
        self.log_change(
            tx,
            ino,
            Change::Record(RecordBody::Setattr {
                mask,
                mode: znode.mode & MODE_PERMISSION_MASK,
                uid: znode.uid,
                gid: znode.gid,
                size: znode.size,
                atime: log_time(znode.atime),
                mtime: log_time(znode.mtime),
                project: if has_project { znode.project } else { 0 },
                project_inherit: has_project && znode.project_inherit(),
            }),
        )
    }

    /// With `sync=always`, a change returns only once committed.
    pub(super) fn sync_always(&self, ino: u64) -> Result<()> {
        if self.sync_mode() == SyncMode::Always {
            self.fsync(ino)?;
        }
        Ok(())
    }

    /// fsync / fdatasync / O_SYNC: make every change of `ino` so far durable. Commits its log
    /// records (sharing the log write with concurrent fsyncs); waits for a txg only for a
    /// change the log does not record.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        if self.read_only || self.sync_mode() == SyncMode::Disabled {
            return Ok(());
        }
        let Some(zil) = &self.zil else {
            // No log: on a read-only pool nothing changes; otherwise whatever changed is in
            // the open txg at most.
            if self.objset.io().is_writable() {
                self.txgs.wait_synced(None)?;
            }
            return Ok(());
        };
        if let Some(txg) = zil
            .unlogged(ino)
            .filter(|txg| *txg > self.txgs.last_synced())
        {
            zil.stats
                .txg_waits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.txgs.wait_synced(Some(txg))?;
        }
        let read = |object: u64, generation: u64, offset: u64, length: usize| {
            self.read_for_log(object, generation, offset, length)
        };
        zil.commit(&self.objset, ino, &read)
            .map_err(|error| FsError::Engine(error.to_string()))
    }

    /// A file's current bytes for a write record (clipped to its size); None if the object
    /// is gone or another one.
    fn read_for_log(
        &self,
        object: u64,
        generation: u64,
        offset: u64,
        length: usize,
    ) -> Option<Vec<u8>> {
        let info = self.objset.info(ObjectId(object)).ok()?;
        if info.generation.0 != generation {
            return None;
        }
        let znode = self.znode(object).ok()?;
        if znode.kind() != FileKind::Regular {
            return None;
        }
        let length = (length as u64).min(znode.size.saturating_sub(offset)) as usize;
        let mut data = Vec::new();
        if length > 0 {
            self.read_blocks(
                object,
                offset,
                length,
                super::read::ReadSink::Copy(&mut data),
            )
            .ok()?;
        }
        Some(data)
    }

    /// Replay a claimed log (at open, before anything else changes).
    pub(super) fn replay_log(&self) -> Result<()> {
        let Some(zil) = &self.zil else {
            return Ok(());
        };
        let Some(replay) = zil.pending_replay() else {
            return Ok(());
        };
        let mut applied = 0usize;
        let mut skipped = 0usize;
        if let Some(highest) = replay.records.iter().map(|record| record.object).max() {
            self.objset
                .reserve_object_numbers(highest.saturating_add(1));
        }
        let mut abandoned = 0usize;
        let synced = replay.header.claimed_through;
        // Records whose changes synced during an earlier replay that a crash cut short: not
        // applied again (a link, say, whose name a later record renamed away would come back).
        let replayed_through = if replay.keeps_progress {
            replay.header.replayed_through
        } else {
            0
        };
        for (index, record) in replay.records.iter().enumerate() {
            if record.sequence <= replayed_through {
                skipped += 1;
                continue;
            }
            zil.set_replaying(Some(record.sequence));
            let outcome = if test_hook_replay_fails_for(record.object) {
                Err(FsError::Engine("replay failure injected by a test".into()))
            } else {
                self.replay_record(record, synced)
            };
            zil.set_replaying(None);
            if SYNC_EACH_REPLAYED_RECORD.get() {
                self.txgs.wait_synced(None)?;
            }
            match outcome {
                Ok(true) => applied += 1,
                Ok(false) => skipped += 1,
                Err(error) => {
                    // Stop here, as OpenZFS's zil_replay does: a record applied after one that
                    // failed could make a state the file system never had (a later write over
                    // an earlier one missing, a rename of a name never made); the records
                    // before it are a state it had.
                    abandoned = replay.records.len() - index;
                    log::error!(
                        "intent log replay: record {} (object {}) failed: {error}; it and the {} \
                         records after it are not replayed, and what fsync promised for them is \
                         lost",
                        record.sequence,
                        record.object,
                        abandoned - 1
                    );
                    break;
                }
            }
        }
        zil.stats
            .replayed
            .fetch_add(applied as u64, std::sync::atomic::Ordering::Relaxed);
        zil.stats
            .replay_abandoned
            .fetch_add(abandoned as u64, std::sync::atomic::Ordering::Relaxed);
        // A pool that cannot sync (suspended by I/O errors) fails the open here and keeps the
        // log for the next import; only a record that failed on a working pool is given up.
        self.txgs.wait_synced(None)?;
        zil.finish_replay(&self.objset)
            .map_err(|error| FsError::Engine(error.to_string()))?;
        log::info!(
            "intent log replayed: {applied} records applied, {skipped} skipped as already \
             there, {abandoned} not replayed"
        );
        Ok(())
    }

    /// Whether `object` is the object a record of generation `generation` names, on a tree
    /// synced through `synced` plus the records replayed so far (module documentation).
    fn is_recorded_object(&self, object: u64, generation: u64, synced: Txg) -> Result<bool> {
        let info = match self.objset.info(ObjectId(object)) {
            Ok(info) => info,
            Err(ObjectError::NoSuchObject(_)) => return Ok(false),
            Err(error) => return Err(error.into()),
        };
        Ok(info.generation.0 == generation || (generation > synced.0 && info.generation > synced))
    }

    /// Whether `name` in `dir` names `object` now.
    fn names(&self, dir: u64, name: &[u8], object: u64) -> Result<bool> {
        if self.directory(dir).is_err() {
            return Ok(false);
        }
        Ok(self
            .dir_lookup(dir, name)?
            .is_some_and(|entry| entry.object == object))
    }

    /// Apply one record; false if it does not apply (already there, or its object is gone).
    fn replay_record(&self, record: &Record, synced: Txg) -> Result<bool> {
        let object = record.object;
        if let RecordBody::Create {
            dir,
            name,
            mode,
            umask,
            uid,
            gid,
            rdev,
            time,
            target,
        } = &record.body
        {
            return self.replay_create(
                record,
                *dir,
                name,
                *mode,
                *umask,
                (*uid, *gid),
                *rdev,
                *time,
                target,
                synced,
            );
        }
        if !self.is_recorded_object(object, record.generation, synced)? {
            return Ok(false);
        }
        match &record.body {
            RecordBody::Write { offset, data } => {
                if self.znode(object)?.kind() != FileKind::Regular {
                    return Ok(false);
                }
                self.write_from(object, *offset, data, WriteSource::Replay)?;
            }
            RecordBody::WriteIndirect {
                offset,
                length,
                block_offset,
                bp,
            } => {
                if self.znode(object)?.kind() != FileKind::Regular {
                    return Ok(false);
                }
                // Verified against the pointer's checksum: a block the commit wrote but a
                // power cut lost fails here, and the record is skipped (that commit never
                // returned).
                let block = self.objset.io().read(bp).map_err(ObjectError::from)?;
                let start = *block_offset as usize;
                let data = &block[start..start + *length as usize];
                self.write_from(object, *offset, data, WriteSource::Replay)?;
            }
            RecordBody::Setattr {
                mask,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                project,
                project_inherit,
            } => {
                let set = |bit: u32| mask & bit != 0;
                if mask & !setattr_mask::PROJECT != 0 {
                    self.setattr(
                        object,
                        SetAttr {
                            mode: set(setattr_mask::MODE).then_some(*mode),
                            uid: set(setattr_mask::UID).then_some(*uid),
                            gid: set(setattr_mask::GID).then_some(*gid),
                            size: set(setattr_mask::SIZE).then_some(*size),
                            atime: set(setattr_mask::ATIME).then_some(fs_time(*atime)),
                            mtime: set(setattr_mask::MTIME).then_some(fs_time(*mtime)),
                        },
                    )?;
                }
                if set(setattr_mask::PROJECT) {
                    self.change_project(object, *project, *project_inherit)?;
                }
            }
            RecordBody::Create { .. } => unreachable!("handled above"),
            RecordBody::Remove {
                dir,
                name,
                directory,
            } => {
                if !self.names(*dir, name, object)? {
                    return Ok(false);
                }
                self.remove_entry(*dir, name, *directory)?;
            }
            RecordBody::Link { dir, name } => {
                if self.directory(*dir).is_err() || self.dir_lookup(*dir, name)?.is_some() {
                    return Ok(false);
                }
                self.link(object, *dir, name)?;
            }
            RecordBody::Rename {
                olddir,
                oldname,
                newdir,
                newname,
                flags,
            } => {
                if !self.names(*olddir, oldname, object)? {
                    return Ok(false);
                }
                self.rename(*olddir, oldname, *newdir, newname, *flags)?;
            }
            RecordBody::Xattr { name, value } => match value {
                Some(value) => self.setxattr(object, name, value, 0)?,
                None => match self.removexattr(object, name) {
                    Ok(()) => {}
                    Err(FsError::NoData) => return Ok(false),
                    Err(error) => return Err(error),
                },
            },
        }
        Ok(true)
    }

    /// Replay a create: make the node at the record's object number, unless replay made it
    /// already (a crash during an earlier replay) or its name is taken.
    #[allow(clippy::too_many_arguments)]
    fn replay_create(
        &self,
        record: &Record,
        dir: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        (uid, gid): (u32, u32),
        rdev: u64,
        time: LogTime,
        target: &[u8],
        synced: Txg,
    ) -> Result<bool> {
        match self.objset.info(ObjectId(record.object)) {
            Ok(info) if info.generation > synced => return Ok(false),
            Ok(info) => {
                return Err(FsError::Corrupt(format!(
                    "object {} is in use by an object of generation {}, older than the log",
                    record.object, info.generation
                )))
            }
            Err(ObjectError::NoSuchObject(_)) => {}
            Err(error) => return Err(error.into()),
        }
        if self.directory(dir).is_err() || self.dir_lookup(dir, name)?.is_some() {
            return Ok(false);
        }
        let kind = FileKind::from_mode(mode)
            .ok_or_else(|| FsError::Corrupt(format!("create record mode {mode:#o}")))?;
        let target = (kind == FileKind::Symlink).then_some(target);
        let origin = NodeOrigin::Replayed {
            object: record.object,
            time: fs_time(time),
        };
        self.make_node(dir, name, kind, mode, umask, uid, gid, rdev, target, origin)?;
        Ok(true)
    }

    /// Start the log's chain so that the first fsync finds its header on disk. Best effort:
    /// a pool too full (or too fragmented) for a log block still opens its file systems, as
    /// OpenZFS's do; the first commit tries again, and when it cannot allocate either it
    /// waits for a txg sync instead (`Zil::commit`), so nothing an fsync promises is lost.
    pub(super) fn start_log(&self) {
        if let Some(zil) = &self.zil {
            if let Err(error) = zil.start(&self.objset) {
                log::warn!("intent log not started, the first fsync starts it: {error}");
            }
        }
    }
}
