//! The unlinked set and the end of an inode's life (OpenZFS zfs_dir.c `zfs_unlinked_*`,
//! zfs_znode.c `zfs_rmnode`): files unlinked while open, files too large to free in one
//! transaction (freed in chunks, parked here meanwhile), the drain at mount after a crash, and
//! the open counts that decide when an unlinked file goes.

use crate::object::adapters::KvObject;
use crate::object::kv::{self, COOKIE_FIRST};
use crate::object::Tx;
use crate::types::ObjectId;

use super::phys::{self, Znode, ZNODE_FLAG_UNLINKED};
use super::{kv_error, Attr, FileSystem, FsError, Result};

/// Unlinked-set entries removed per transaction when draining.
const DRAIN_BATCH: usize = 256;

/// What became of an inode whose last link went away ([`FileSystem::drop_inode`]).
pub(super) enum Dropped {
    /// Removed in the same transaction.
    Removed,
    /// Parked in the unlinked set until its last release.
    Open,
    /// Parked in the unlinked set, to be freed in chunks once the transaction is released.
    Large,
}

impl FileSystem {
    /// Objects in the unlinked set (for tests and inspection).
    pub fn unlinked_objects(&self) -> Result<Vec<u64>> {
        let mut objects = Vec::new();
        let mut cookie = COOKIE_FIRST;
        loop {
            let entries = {
                let handle = KvObject::new(&self.objset, ObjectId(self.unlinked_set), None)?;
                kv::list(&handle, cookie, DRAIN_BATCH).map_err(kv_error(self.unlinked_set))?
            };
            let Some(last) = entries.last() else {
                return Ok(objects);
            };
            cookie = last.cookie + 1;
            for entry in &entries {
                objects.push(phys::decode_unlinked_key(&entry.key)?);
            }
        }
    }

    pub(super) fn drain_unlinked(&self) -> Result<()> {
        loop {
            let entries = {
                let handle = KvObject::new(&self.objset, ObjectId(self.unlinked_set), None)?;
                kv::list(&handle, COOKIE_FIRST, DRAIN_BATCH).map_err(kv_error(self.unlinked_set))?
            };
            if entries.is_empty() {
                return Ok(());
            }
            // Large objects are freed in chunks (each removes its own entry); the rest go in
            // one transaction per batch.
            let mut small = Vec::new();
            for entry in &entries {
                match phys::decode_unlinked_key(&entry.key) {
                    Ok(object)
                        if object != self.root
                            && object != self.unlinked_set
                            && self.objset.exists(ObjectId(object))
                            && self.is_large(object)? =>
                    {
                        self.remove_parked(object)?
                    }
                    decoded => small.push((decoded.ok(), &entry.key)),
                }
            }
            let hold = self.txgs.assign()?;
            let tx = hold.tx();
            for (object, key) in small {
                // A bad key is removed too: it names nothing we could free.
                if let Some(object) = object {
                    if object != self.root
                        && object != self.unlinked_set
                        && self.objset.exists(ObjectId(object))
                    {
                        self.remove_inode(tx, object)?;
                    }
                }
                let mut handle =
                    KvObject::new(&self.objset, ObjectId(self.unlinked_set), Some(tx))?;
                kv::remove(&mut handle, key).map_err(kv_error(self.unlinked_set))?;
            }
        }
    }

    pub(super) fn is_open(&self, ino: u64) -> bool {
        self.open_counts.lock().contains_key(&ino)
    }

    /// The last link of `ino` went away in `tx`: remove the object, or park it in the unlinked
    /// set, if it is open (removed at its last release) or too large to free in one
    /// transaction (the caller frees it with [`FileSystem::remove_parked`] once `tx` is
    /// released, OpenZFS's zfs_delete_blocks).
    pub(super) fn drop_inode(&self, tx: Tx, ino: u64, znode: &mut Znode) -> Result<Dropped> {
        assert_eq!(znode.links, 0, "inode {ino} still has links");
        let dropped = if self.is_open(ino) {
            Dropped::Open
        } else if self.is_large(ino)? {
            Dropped::Large
        } else {
            self.remove_inode(tx, ino)?;
            return Ok(Dropped::Removed);
        };
        znode.flags |= ZNODE_FLAG_UNLINKED;
        let mut handle = KvObject::new(&self.objset, ObjectId(self.unlinked_set), Some(tx))?;
        kv::insert(&mut handle, &phys::unlinked_key(ino), &[])
            .map_err(kv_error(self.unlinked_set))?;
        Ok(dropped)
    }

    /// Whether removing `ino` must free it in chunks rather than in one transaction.
    pub(super) fn is_large(&self, ino: u64) -> Result<bool> {
        let blocks = self.objset.info(ObjectId(ino))?.max_blkid + 1;
        Ok(blocks > self.objset.io().tunables.delete_blocks)
    }

    /// Remove a parked (unlinked, closed) inode: free its data in chunks of bounded txgs, then
    /// the object and its unlinked-set entry. A crash part-way leaves it parked, and
    /// [`FileSystem::open`] goes on from there. Call with no transaction held.
    pub(super) fn remove_parked(&self, ino: u64) -> Result<()> {
        let _gate = self.change()?;
        self.objset.free_long_range(&self.txgs, ObjectId(ino), 0)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        self.remove_inode(tx, ino)?;
        let mut handle = KvObject::new(&self.objset, ObjectId(self.unlinked_set), Some(tx))?;
        kv::remove(&mut handle, &phys::unlinked_key(ino)).map_err(kv_error(self.unlinked_set))?;
        Ok(())
    }

    /// Note one more open of `ino`: its last unlink then keeps it until the last release.
    pub fn open_inode(&self, ino: u64) -> Result<Attr> {
        let _guards = self.lock_inodes(&[ino]);
        let znode = self.znode(ino)?;
        *self.open_counts.lock().entry(ino).or_insert(0) += 1;
        self.attr_of(ino, &znode)
    }

    /// Undo one `open`; the last release of an unlinked inode removes it.
    pub fn release(&self, ino: u64) -> Result<()> {
        let _guards = self.lock_inodes(&[ino]);
        {
            let mut counts = self.open_counts.lock();
            let count = counts
                .get_mut(&ino)
                .ok_or_else(|| FsError::Invalid(format!("release of inode {ino}, not open")))?;
            *count -= 1;
            if *count > 0 {
                return Ok(());
            }
            counts.remove(&ino);
        }
        let znode = self.znode(ino)?;
        if znode.links > 0 {
            return Ok(());
        }
        self.remove_parked(ino)
    }

    /// Whether `ino` is open (for tests and the FUSE adapter).
    pub fn open_count(&self, ino: u64) -> u64 {
        self.open_counts.lock().get(&ino).copied().unwrap_or(0)
    }
}
