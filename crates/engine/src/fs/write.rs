//! Writes of file data (OpenZFS zfs_vnops.c `zfs_write`): [`FileSystem::write`] and
//! [`FileSystem::write_from`], the space a write may use by where it comes from
//! ([`WriteSource`]), and the space held back for the write-backs of a kernel cache
//! ([`HeldBack`]).
//!
//! A file's data is its object's data blocks: a new file has one block of 512 bytes that grows
//! with the file up to the recordsize, after which its blocks are of the recordsize. A write
//! stores its data first in its transaction, and changes the znode (size, mtime, ctime) and
//! makes its intent-log record only once the data is admitted, so a write refused for lack of
//! space changes nothing. A write refused for space first waits once for its own txg to sync
//! (which turns the txg's estimates into real allocations); a direct write is then cut short,
//! halving down to [`SHORT_WRITE_MIN`] bytes, and any other write is refused whole.

use std::sync::Arc;

use crate::object::{Admission, ObjectError, Tx, WriteReservation};
use crate::types::ObjectId;

use super::phys::{FileKind, Timestamp};
use super::{FileSystem, FsError, Result, FILE_SIZE_MAX, IO_BYTES_MAX};

/// Stands for the node a namespace change is making, in [`FileSystem::charge_namespace`].
pub(super) const NEW_NODE: u64 = u64::MAX;

/// The smallest piece a caller's write is cut to when it does not fit whole (see
/// [`FileSystem::write_from`]).
pub const SHORT_WRITE_MIN: usize = 4096;

/// Where a write comes from, which decides the space it may use (see
/// [`FileSystem::write_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteSource {
    /// A caller waiting for the answer (an engine call, a replay, a receive): the write is
    /// stored whole or refused.
    Caller,
    /// A write(2) that reaches the engine before it returns (direct I/O): cut to what fits
    /// when the pool is nearly full (a short write), as POSIX has write(2) do.
    Direct,
    /// The write-back of pages a kernel cache accepted earlier; `after_loss` once an
    /// earlier write-back of the same file was lost.
    WriteBack { after_loss: bool },
    /// A write the intent log replays at import ([`Admission::Replay`]).
    Replay,
}

impl WriteSource {
    /// The space a write from here may use.
    fn admission(self) -> Admission {
        match self {
            WriteSource::Caller | WriteSource::Direct => Admission::Ordinary,
            WriteSource::WriteBack { .. } => Admission::WriteBack,
            WriteSource::Replay => Admission::Replay,
        }
    }
}

/// Space held back for write-backs while this lives ([`FileSystem::hold_back_for_write_backs`]).
pub struct HeldBack {
    reservation: Option<Arc<dyn WriteReservation>>,
    bytes: u64,
}

impl Drop for HeldBack {
    fn drop(&mut self) {
        if let Some(reservation) = &self.reservation {
            reservation.release_held_back(self.bytes);
        }
    }
}

impl FileSystem {
    /// Write `data` at `offset` of file (or long symlink) `ino`'s object: its single block grows
    /// with the file up to the recordsize, as OpenZFS's `zfs_write` grows `z_blksz`, so that a
    /// file of a few KiB is stored, cached, compressed and checksummed as a block of a few KiB
    /// rather than as a whole record.
    pub(crate) fn write_file_data(
        &self,
        tx: &Tx,
        ino: u64,
        offset: u64,
        data: &[u8],
    ) -> std::result::Result<(), ObjectError> {
        self.write_file_data_as(tx, ino, offset, data, Admission::Ordinary)
    }

    fn write_file_data_as(
        &self,
        tx: &Tx,
        ino: u64,
        offset: u64,
        data: &[u8],
        admission: Admission,
    ) -> std::result::Result<(), ObjectError> {
        let record = self.config().file_block_size;
        self.objset
            .write_growing_as(tx, ObjectId(ino), offset, data, record, admission)
    }

    /// Write `data` at `offset` into a regular file, extending it as needed; returns the
    /// number of bytes written ([`FileSystem::write_from`] for a caller that waits).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_from(ino, offset, data, WriteSource::Caller)
    }

    /// [`FileSystem::write`] from `source`. A direct write that does not fit whole is cut to
    /// what fits, halving down to [`SHORT_WRITE_MIN`] bytes (a short write, as POSIX has
    /// write(2) do when a device fills), and is refused with `NoSpace` only when not even that
    /// fits. Other writes are all or nothing; after a lost write-back (`after_loss`) one that
    /// would start past the stored end of the file is refused, so that the file never
    /// covers the lost bytes with a hole that reads as zeros.
    pub fn write_from(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        source: WriteSource,
    ) -> Result<usize> {
        let _gate = self.change()?;
        if data.len() > IO_BYTES_MAX {
            return Err(FsError::Invalid(format!("write of {} bytes", data.len())));
        }
        offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= FILE_SIZE_MAX)
            .ok_or_else(|| FsError::Invalid("write past the largest file size".into()))?;
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        match znode.kind() {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            kind => return Err(FsError::Invalid(format!("write to a {kind:?}"))),
        }
        if source == (WriteSource::WriteBack { after_loss: true }) && offset > znode.size {
            return Err(FsError::NoSpace);
        }
        let admission = source.admission();
        let now = Timestamp::now();
        let mut waited_for_sync = false;
        let mut length = data.len();
        let hold = loop {
            let hold = self.txgs.assign()?;
            let tx = hold.tx();
            // The data first: a write refused for lack of space changes nothing.
            if data.is_empty() {
                break hold;
            }
            match self.write_file_data_as(&tx, ino, offset, &data[..length], admission) {
                Ok(()) => break hold,
                // The space admission counts the dirty data of our own txg, which cannot
                // sync while we hold it: let it go, wait for it to reach disk (its estimate
                // becomes real allocations) and try once more, as zfs retries a tempreserve
                // after txg_wait_open. Only then is the pool really full.
                Err(error) if error.is_out_of_space() && !waited_for_sync => {
                    drop(hold);
                    self.txgs.wait_synced(Some(tx.txg))?;
                    waited_for_sync = true;
                }
                Err(error)
                    if error.is_out_of_space()
                        && source == WriteSource::Direct
                        && length > SHORT_WRITE_MIN =>
                {
                    length = (length / 2).max(SHORT_WRITE_MIN);
                }
                Err(error) => return Err(error.into()),
            }
        };
        let tx = hold.tx();
        if length > 0 {
            znode.size = znode.size.max(offset + length as u64);
        }
        znode.mtime = now;
        znode.ctime = now;
        self.put_znode_logged(&tx, ino, &znode)?;
        self.log_change(
            &tx,
            ino,
            crate::zil::Change::Write {
                offset,
                length: length as u64,
            },
        )?;
        drop(hold);
        self.sync_always(ino)?;
        Ok(length)
    }

    /// Would a write of `bytes` from `source` be admitted now (ignoring what waiting for
    /// the syncing txgs would free)? Never waits.
    pub fn write_fits(&self, bytes: u64, source: WriteSource) -> bool {
        self.write_refusal(bytes, source).is_none()
    }

    /// Why a write of `bytes` from `source` would be refused now (`NoSpace` or
    /// `QuotaExceeded`), if it would. Never waits.
    pub fn write_refusal(&self, bytes: u64, source: WriteSource) -> Option<FsError> {
        let admission = source.admission();
        self.objset
            .reservation()
            .and_then(|reservation| reservation.admits(bytes, admission).err())
            .map(FsError::from)
    }

    /// Why a caller's write of `bytes` would be refused, as [`FileSystem::write`] decides it:
    /// when the quick look says no, the data in flight (counted twice until it is allocated)
    /// is let sync first and the space looked at again. May wait for a txg sync.
    pub fn caller_write_refusal(&self, bytes: u64) -> Result<Option<FsError>> {
        if self.write_fits(bytes, WriteSource::Caller) {
            return Ok(None);
        }
        self.txgs.wait_synced(None)?;
        Ok(self.write_refusal(bytes, WriteSource::Caller))
    }

    /// Why a write of `bytes` into file `ino` from `source` would be refused now: by the
    /// pool or the dataset's quotas ([`FileSystem::write_refusal`]), or, for an ordinary
    /// write, by the quota of the file's user, group or project (`pool/owner_quotas.rs`).
    /// Never waits.
    pub fn file_write_refusal(&self, ino: u64, bytes: u64, source: WriteSource) -> Option<FsError> {
        if let Some(refusal) = self.write_refusal(bytes, source) {
            return Some(refusal);
        }
        if source.admission() != Admission::Ordinary {
            return None;
        }
        let reservation = self.objset.reservation()?;
        let owners = self.objset.owners_of(ObjectId(ino)).ok().flatten()?;
        reservation
            .owner_write_admits(owners, bytes)
            .err()
            .map(FsError::from)
    }

    /// [`FileSystem::file_write_refusal`] for a caller's write, as [`FileSystem::write`]
    /// decides it: when the quick look says no, the data in flight is let sync first (its
    /// estimate becomes what it really took) and the look made again. May wait for a sync.
    pub fn caller_file_write_refusal(&self, ino: u64, bytes: u64) -> Result<Option<FsError>> {
        if self
            .file_write_refusal(ino, bytes, WriteSource::Caller)
            .is_none()
        {
            return Ok(None);
        }
        self.txgs.wait_synced(None)?;
        Ok(self.file_write_refusal(ino, bytes, WriteSource::Caller))
    }

    /// Charge a namespace change that adds (a node, a name, an xattr of `extra` bytes) to the
    /// dataset's quotas, for the objects `inos` it dirties (a node being made counts as one
    /// not yet dirty: pass [`NEW_NODE`]). Refused with `QuotaExceeded` at a full quota, as zfs
    /// refuses a create there; removals are never charged.
    pub(super) fn charge_namespace(&self, tx: &Tx, inos: &[u64], extra: u64) -> Result<()> {
        let Some(reservation) = self.objset.reservation() else {
            return Ok(());
        };
        let objects: Vec<ObjectId> = inos.iter().map(|&ino| ObjectId(ino)).collect();
        let charge = self.objset.namespace_charge(tx.txg, &objects) + extra;
        reservation.charge_metadata(tx, charge)?;
        Ok(())
    }

    /// Hold `bytes` of the pool back from callers' writes for the write-backs of a kernel
    /// cache, until the guard is dropped (see `object::WriteReservation`). Nothing is held
    /// for a file system without space admission (a snapshot's, a test's bare object set).
    pub fn hold_back_for_write_backs(&self, bytes: u64) -> HeldBack {
        let reservation = self.objset.reservation();
        if let Some(reservation) = &reservation {
            reservation.hold_back(bytes);
        }
        HeldBack { reservation, bytes }
    }
}
