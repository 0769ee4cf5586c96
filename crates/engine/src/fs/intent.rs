//! The file system's side of the intent log (OpenZFS zfs_log.c, zfs_replay.c, zfs_fsync):
//! which changes make records, what an fsync commits, and replay at open.
//!
//! # Theory
//! `write` and `setattr` (without an ACL rewrite) make log records: a write's range, a
//! setattr's resulting attribute values (`copy_range` writes through `write`). Every other
//! change of an inode (create, link, unlink, rename, xattrs, fallocate) goes through
//! [`FileSystem::put_znode`], which notes the txg in the log's unlogged table (shared by every
//! handle on the set): an fsync of that inode first waits for that txg to sync, then commits
//! the log records newer than it. So an fsync always makes the file's contents and
//! attributes, and the directory operations that made its name, durable: the slow way for what
//! the log does not record yet.
//!
//! Replay runs in [`FileSystem::open`], before anything else changes the file system: each
//! record whose txg the claim did not find synced is applied through `write` / `setattr` to the
//! object it names, if that object still exists with the generation the record carries (an
//! object the crash took away, or a different object under the number, is skipped).

use super::*;
use crate::types::Txg;
use crate::zil::format::{setattr_mask, LogTime, Record, RecordBody};
use crate::zil::{Change, SyncMode};

fn log_time(time: Timestamp) -> LogTime {
    LogTime {
        seconds: time.seconds,
        nanoseconds: time.nanoseconds,
    }
}

fn fs_time(time: LogTime) -> Timestamp {
    Timestamp {
        seconds: time.seconds,
        nanoseconds: time.nanoseconds,
    }
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
            .filter(|zil| zil.mode() != SyncMode::Disabled)
        {
            let generation = self.objset.info(ObjectId(ino))?.generation.0;
            zil.log(tx.txg, ino, generation, change);
        }
        Ok(())
    }

    /// Record the attributes in `mask` as `znode` now has them.
    pub(super) fn log_setattr(&self, tx: &Tx, ino: u64, znode: &Znode, mask: u32) -> Result<()> {
        if mask == 0 {
            return Ok(());
        }
        self.log_change(
            tx,
            ino,
            Change::Setattr(RecordBody::Setattr {
                mask,
                mode: znode.mode & MODE_PERMISSION_MASK,
                uid: znode.uid,
                gid: znode.gid,
                size: znode.size,
                atime: log_time(znode.atime),
                mtime: log_time(znode.mtime),
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
        let mut data = vec![0u8; length];
        if length > 0 {
            self.read_blocks(object, offset, &mut data).ok()?;
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
        for record in &replay.records {
            match self.replay_record(record) {
                Ok(true) => applied += 1,
                Ok(false) => skipped += 1,
                Err(error) => {
                    log::warn!(
                        "intent log replay: record {} (object {}): {error}; skipped",
                        record.sequence,
                        record.object
                    );
                    skipped += 1;
                }
            }
        }
        zil.stats
            .replayed
            .fetch_add(applied as u64, std::sync::atomic::Ordering::Relaxed);
        self.txgs.wait_synced(None)?;
        zil.finish_replay(&self.objset)
            .map_err(|error| FsError::Engine(error.to_string()))?;
        log::info!("intent log replayed: {applied} records applied, {skipped} skipped");
        Ok(())
    }

    fn replay_record(&self, record: &Record) -> Result<bool> {
        let info = match self.objset.info(ObjectId(record.object)) {
            Ok(info) => info,
            Err(ObjectError::NoSuchObject(_)) => return Ok(false),
            Err(error) => return Err(error.into()),
        };
        if info.generation.0 != record.generation {
            return Ok(false);
        }
        match &record.body {
            RecordBody::Write { offset, data } => {
                if self.znode(record.object)?.kind() != FileKind::Regular {
                    return Ok(false);
                }
                self.write(record.object, *offset, data)?;
            }
            RecordBody::Setattr {
                mask,
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
            } => {
                let set = |bit: u32| mask & bit != 0;
                self.setattr(
                    record.object,
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
        }
        Ok(true)
    }

    /// Start the log's chain so that the first fsync finds its header on disk.
    pub(super) fn start_log(&self) -> Result<()> {
        if let Some(zil) = &self.zil {
            zil.start(&self.objset)
                .map_err(|error| FsError::Engine(error.to_string()))?;
        }
        Ok(())
    }
}
