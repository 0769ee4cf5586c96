//! Extended attributes (OpenZFS zfs_xattr.c, zfs_sa.c): get, set, list and remove, stored
//! as system attributes in the znode's bonus buffer and its object's spill block
//! (`xattr=sa`) or in a hidden per-file directory (`xattr=dir`).
//!
//! # Where an xattr lives
//! - *SA*: small xattrs are packed after the znode in its object's bonus buffer (the SA
//!   region, byte layout in [`phys::Znode`]). Reading one costs nothing beyond the znode that
//!   every operation reads anyway, and setting one rewrites only the dnode.
//! - *Spill*: SA xattrs that do not fit the bonus buffer continue in the object's spill
//!   block (one block of up to 128 KiB under a second block pointer in the dnode, layout in
//!   [`phys::encode_spill`]), as OpenZFS's SA spill. With a spill block the bonus buffer
//!   keeps 192 bytes; [`phys::sa_split`] decides which entries stay there (all while they fit
//!   the 320-byte buffer, else the longest prefix that fits 192 bytes). Reading one costs one
//!   block read; setting one rewrites the dnode and the spill block.
//! - *Directory*: the znode names a hidden key/value object, the file's *xattr directory*
//!   (it is in no directory, so no path reaches it). Key = the xattr's full name, value = a
//!   [`XattrDirValue`]: the value itself up to [`XATTR_DIR_INLINE_MAX`] bytes, else the number
//!   of a plain object holding it (one block, sized to the value).
//!
//! With `xattr=sa` (the default) a set goes to the SA entries when all of them, with the new
//! value, still fit the bonus buffer and the spill block, and to the directory otherwise (as
//! OpenZFS falls back to the directory once the SA area and its spill are full); with
//! `xattr=dir` it always goes to the directory. A symlink whose inline target leaves less than
//! 192 bytes' room has no spill block: its SA entries stay within the 320-byte bonus buffer.
//! A name lives in exactly one place: a set that moves it removes it from the other in the
//! same transaction. Reads look everywhere, so changing the property affects only later sets.
//!
//! # Names and limits (as Linux and ext4)
//! Names carry a namespace: `user.`, `trusted.`, `security.` or `system.`; any other is
//! [`FsError::NotSupported`] (EOPNOTSUPP), an empty suffix [`FsError::Invalid`]. Names are
//! 1..=255 bytes ([`FsError::Range`], ERANGE, beyond), values at most 64 KiB
//! ([`FsError::TooBig`], E2BIG). The list of one file's names (each with its NUL) stays within
//! 64 KiB, what `listxattr` can return at all; a set that would pass it is
//! [`FsError::NoSpace`] (ENOSPC, as ext4 when an inode's xattr space is full). Missing names
//! are [`FsError::NoData`] (ENODATA); `XATTR_CREATE` on an existing name is
//! [`FsError::Exists`], `XATTR_REPLACE` on a missing one [`FsError::NoData`]. A snapshot's
//! file system refuses every change ([`FsError::ReadOnly`]). The access checks (trusted needs
//! CAP_SYS_ADMIN, user xattrs only on regular files and directories, write permission) are
//! the kernel's, before a request reaches the engine.
//!
//! # Locking, transactions, cost
//! A read of a name in the SA region takes no lock (the znode is read whole). A read that
//! goes to the spill block or the directory, and a listing of a file that has either, take
//! the inode's stripe lock: a concurrent set may move a name between places, rewrite the
//! spill block, or remove the value object just found. A change takes the inode's stripe lock, reads the znode (and looks the name up in the
//! directory) before its transaction, then makes every change in one transaction: the value
//! object first (so that a write refused for lack of space changes nothing), then the
//! directory entry, then the znode (ctime, SA region, directory pointer). A set in the SA
//! region dirties one dnode; a set in the directory dirties the directory's blocks on its path
//! and, for values over 1 KiB, one new object. Adding a new name lists the directory to
//! enforce the list limit only when its blocks could hold 64 KiB of names.
//!
//! # Crash behaviour and freeing
//! Each change is one transaction, so after a crash an xattr is wholly old or wholly new.
//! Removing a file (`FileSystem::remove_inode`) removes its xattr directory and every value
//! object in the same transaction as the file's own object, so no space is left behind.

use crate::block::blkptr::ObjectType;
use crate::object::adapters::KvObject;
use crate::object::kv::{self, COOKIE_FIRST};
use crate::object::phys::DNODE_BONUS_SIZE_MAX;
use crate::object::{ObjectProps, Tx};
use crate::types::ObjectId;
use crate::zil::record::RecordBody;

use super::acl::{is_acl_name, Acl, ACL_ACCESS, ACL_DEFAULT};
pub use super::phys::XATTR_VALUE_LEN_MAX;
use super::phys::{
    decode_spill, encode_spill, sa_split, FileKind, SaXattr, SpillXattrs, Timestamp, XattrDirValue,
    Znode, XATTR_DIR_INLINE_MAX, XATTR_NAME_LEN_MAX, ZNODE_SIZE,
};
use super::{kv_error, FileSystem, FsError, Result};

/// `setxattr` flag: fail with [`FsError::Exists`] if the name exists (Linux's value).
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail with [`FsError::NoData`] if the name does not exist (Linux's value).
pub const XATTR_REPLACE: u32 = 2;
/// Largest `listxattr` result (Linux's XATTR_LIST_MAX): names, each followed by a NUL.
pub const XATTR_LIST_BYTES_MAX: usize = 65536;
/// The namespaces Linux knows; a name starts with one of them.
pub const XATTR_NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];
/// Block size of xattr directories (key/value objects: 4 KiB is the smallest they take).
const XATTR_DIR_BLOCK_SIZE: u32 = 4096;
/// Entries read per listing of an xattr directory.
const XATTR_LIST_BATCH: usize = 256;

/// Where `xattr` (the dataset property) puts new xattrs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrLayout {
    /// In the znode's bonus buffer while they fit, else in the xattr directory.
    #[default]
    Sa,
    /// Always in the xattr directory.
    Dir,
}

/// Check an xattr name: a known namespace, a non-empty suffix, 1..=255 bytes, no NUL.
pub fn check_xattr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_LEN_MAX {
        return Err(FsError::Range);
    }
    if name.contains(&0) {
        return Err(FsError::Invalid("xattr name holds a NUL".into()));
    }
    let Some(namespace) = XATTR_NAMESPACES
        .iter()
        .find(|namespace| name.starts_with(namespace))
    else {
        return Err(FsError::NotSupported);
    };
    if name.len() == namespace.len() {
        return Err(FsError::Invalid("xattr name has an empty suffix".into()));
    }
    Ok(())
}

/// Where a name was found.
#[derive(Clone, Debug)]
pub(super) enum Found {
    /// Entry `index` of the file's SA xattrs: the bonus buffer's, then the spill block's.
    Sa(usize),
    Dir(XattrDirValue),
}

/// The SA xattrs of `znode` in order, the bonus buffer's then the spill block's (loaded by
/// [`FileSystem::load_spill`]).
fn sa_entries(znode: &Znode) -> Vec<SaXattr> {
    let mut entries = znode.sa_xattrs.clone();
    if let SpillXattrs::Read(spilled) = &znode.spill {
        entries.extend(spilled.iter().cloned());
    }
    entries
}

/// Entry `index` of [`sa_entries`] without copying them all.
fn sa_entry(znode: &Znode, index: usize) -> Option<&SaXattr> {
    let bonus = znode.sa_xattrs.len();
    match &znode.spill {
        _ if index < bonus => znode.sa_xattrs.get(index),
        SpillXattrs::Read(spilled) => spilled.get(index - bonus),
        _ => None,
    }
}

/// Bytes `znode` takes in the bonus buffer without its SA entries.
fn sa_base_len(znode: &Znode) -> usize {
    znode.encoded_len() - Znode::sa_region_len(&znode.sa_xattrs)
}

/// Spread `entries` over `znode`'s bonus buffer (the first `kept`, from [`sa_split`]) and its
/// spill block (the rest).
fn spread_sa(znode: &mut Znode, mut entries: Vec<SaXattr>, kept: usize) {
    let spilled = entries.split_off(kept);
    znode.sa_xattrs = entries;
    if znode.spill != SpillXattrs::None || !spilled.is_empty() {
        znode.spill = SpillXattrs::Read(spilled);
    }
}

impl FileSystem {
    /// The value of xattr `name` of `ino`; [`FsError::NoData`] if it has none.
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        self.check_name_allowed(name, true)?;
        let znode = self.znode(ino)?;
        if let Some(entry) = znode.sa_xattrs.iter().find(|entry| entry.name == name) {
            return Ok(entry.value.clone());
        }
        if znode.xattr_dir == 0 && znode.spill == SpillXattrs::None {
            return Err(FsError::NoData);
        }
        // The spill block may be rewritten, a value in the directory replaced and its object
        // removed meanwhile: read them under the inode's lock (a snapshot never changes).
        let _guards = (!self.read_only).then(|| self.lock_inodes(&[ino]));
        let mut znode = self.znode(ino)?;
        match self.find_xattr(ino, &mut znode, name)? {
            Some(Found::Sa(index)) => {
                Ok(sa_entry(&znode, index).expect("found there").value.clone())
            }
            Some(Found::Dir(value)) => self.read_dir_value(znode.xattr_dir, value),
            None => Err(FsError::NoData),
        }
    }

    /// The names of `ino`'s xattrs: the SA region's first, then the directory's.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let mut znode = self.znode(ino)?;
        if (znode.xattr_dir == 0 && znode.spill == SpillXattrs::None) || self.read_only {
            return self.xattr_names(ino, &mut znode);
        }
        // A set may move a name between the znode, the spill block and the directory between
        // the reads: read them under the inode's lock (a snapshot never changes).
        let _guards = self.lock_inodes(&[ino]);
        self.xattr_names(ino, &mut self.znode(ino)?)
    }

    /// An upper bound of the bytes `listxattr` returns for `znode` of `ino`, without listing:
    /// the SA names, plus every byte of the xattr directory's blocks (each entry stores its
    /// name and at least one byte more, which covers the NUL). Only a file near the limit is
    /// listed.
    fn list_bytes_bound(&self, ino: u64, znode: &mut Znode) -> Result<usize> {
        self.load_spill(ino, znode)?;
        let sa: usize = sa_entries(znode)
            .iter()
            .map(|entry| entry.name.len() + 1)
            .sum();
        if znode.xattr_dir == 0 {
            return Ok(sa);
        }
        let info = self.objset.info(ObjectId(znode.xattr_dir))?;
        let directory = (info.max_blkid + 1).saturating_mul(info.data_block_size as u64);
        Ok(sa.saturating_add(usize::try_from(directory).unwrap_or(usize::MAX)))
    }

    /// The names of the xattrs of `znode` of `ino`, read as they are (the caller holds the
    /// inode's lock, or knows nothing changes it).
    fn xattr_names(&self, ino: u64, znode: &mut Znode) -> Result<Vec<Vec<u8>>> {
        self.load_spill(ino, znode)?;
        let mut names: Vec<Vec<u8>> = sa_entries(znode)
            .into_iter()
            .map(|entry| entry.name)
            .collect();
        if znode.xattr_dir != 0 {
            names.extend(
                self.xattr_dir_entries(znode.xattr_dir)?
                    .into_iter()
                    .map(|(name, _)| name),
            );
        }
        Ok(names)
    }

    /// Set xattr `name` of `ino` to `value`; `flags` is 0, [`XATTR_CREATE`] or
    /// [`XATTR_REPLACE`]. Setting the access ACL also sets the mode ([`super::acl`]).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let _gate = self.change()?;
        self.check_name_allowed(name, false)?;
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 || flags == XATTR_CREATE | XATTR_REPLACE {
            return Err(FsError::Invalid(format!("setxattr flags {flags:#x}")));
        }
        if value.len() > XATTR_VALUE_LEN_MAX {
            return Err(FsError::TooBig);
        }
        let acl = if is_acl_name(name) {
            Some(Acl::decode(value)?)
        } else {
            None
        };
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        if name == ACL_DEFAULT && znode.kind() != FileKind::Directory {
            return Err(FsError::Invalid("a default ACL on a non-directory".into()));
        }
        let found = self.find_xattr(ino, &mut znode, name)?;
        match (&found, flags) {
            (Some(_), XATTR_CREATE) => return Err(FsError::Exists),
            (None, XATTR_REPLACE) => return Err(FsError::NoData),
            _ => {}
        }
        if found.is_none()
            && self.list_bytes_bound(ino, &mut znode)? + name.len() + 1 > XATTR_LIST_BYTES_MAX
        {
            let names = self.xattr_names(ino, &mut znode)?;
            let list_bytes: usize = names.iter().map(|name| name.len() + 1).sum();
            if list_bytes + name.len() + 1 > XATTR_LIST_BYTES_MAX {
                return Err(FsError::NoSpace);
            }
        }
        let generation = self.generation_of(ino)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        // The value may go to the xattr directory: its object counts as one more.
        self.charge_namespace(&tx, &[ino, znode.xattr_dir], value.len() as u64)?;
        match acl {
            // The access ACL sets the mode; one that says no more than the mode is not kept.
            Some(acl) if name == ACL_ACCESS => {
                znode.mode = (znode.mode & !0o777) | acl.mode_bits();
                if acl.is_minimal() {
                    if let Some(found) = found {
                        self.drop_xattr(tx, ino, &mut znode, name, found)?;
                    }
                } else {
                    self.store_xattr(tx, ino, &mut znode, name, &acl.encode(), found)?;
                }
            }
            _ => self.store_xattr(tx, ino, &mut znode, name, value, found)?,
        }
        znode.ctime = Timestamp::now();
        self.put_znode_logged(&tx, ino, &znode)?;
        self.log_record(
            &tx,
            ino,
            generation,
            &[],
            RecordBody::Xattr {
                name: name.to_vec(),
                value: Some(value.to_vec()),
            },
        );
        drop(hold);
        self.sync_always(ino)?;
        Ok(())
    }

    /// Remove xattr `name` of `ino`; [`FsError::NoData`] if it has none.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        let _gate = self.change()?;
        self.check_name_allowed(name, false)?;
        let _guards = self.lock_inodes(&[ino]);
        let mut znode = self.znode(ino)?;
        let found = self
            .find_xattr(ino, &mut znode, name)?
            .ok_or(FsError::NoData)?;
        let generation = self.generation_of(ino)?;
        let hold = self.txgs.assign()?;
        let tx = hold.tx();
        self.drop_xattr(tx, ino, &mut znode, name, found)?;
        znode.ctime = Timestamp::now();
        self.put_znode_logged(&tx, ino, &znode)?;
        self.log_record(
            &tx,
            ino,
            generation,
            &[],
            RecordBody::Xattr {
                name: name.to_vec(),
                value: None,
            },
        );
        drop(hold);
        self.sync_always(ino)?;
        Ok(())
    }

    /// A valid name that this file system's settings allow: the ACL names only with
    /// `acltype=posix`, and no other `system.` name. A snapshot's file system (which has no
    /// dataset settings of its own) lets its ACLs be read, so that the kernel can check
    /// permissions below `.zfs/snapshot` of a mount with POSIX ACLs.
    fn check_name_allowed(&self, name: &[u8], reading: bool) -> Result<()> {
        check_xattr_name(name)?;
        let acl = is_acl_name(name);
        let acl_allowed = self.config().acl_posix || (reading && self.read_only);
        if (acl && !acl_allowed) || (!acl && name.starts_with(b"system.")) {
            return Err(FsError::NotSupported);
        }
        Ok(())
    }

    /// Store `name` = `value` in `znode`, inode `ino`'s (written back by the caller) in `tx`,
    /// where the layout says (module documentation), removing it from where it was (`found`).
    /// Data is written first (a symlink target moved out of the bonus buffer, then the value
    /// object), so a write refused for lack of space changes nothing.
    pub(super) fn store_xattr(
        &self,
        tx: Tx,
        ino: u64,
        znode: &mut Znode,
        name: &[u8],
        value: &[u8],
        found: Option<Found>,
    ) -> Result<()> {
        self.load_spill(ino, znode)?;
        let mut sa = sa_entries(znode);
        if let Some(Found::Sa(index)) = found {
            sa.remove(index);
        }
        sa.push(SaXattr {
            name: name.to_vec(),
            value: value.to_vec(),
        });
        let split = if self.config().xattr == XattrLayout::Sa && value.len() <= u16::MAX as usize {
            sa_split(sa_base_len(znode), &sa)
        } else {
            None
        };
        if let Some(kept) = split {
            if let Some(Found::Dir(old)) = found {
                self.remove_dir_entry(tx, znode.xattr_dir, name, old)?;
            }
            spread_sa(znode, sa, kept);
            return Ok(());
        }
        // The new value goes to the directory.
        sa.pop();
        if znode.xattr_dir == 0 && ZNODE_SIZE + znode.inline_target.len() + 8 > DNODE_BONUS_SIZE_MAX
        {
            // A symlink target that leaves no room for the directory pointer moves to the
            // object's data, where readlink finds targets that are not inline.
            self.write_file_data(&tx, ino, 0, &znode.inline_target)?;
            znode.inline_target.clear();
        }
        let entry = self.write_dir_value(tx, value)?;
        if znode.xattr_dir == 0 {
            let directory = match self.create_xattr_dir(tx) {
                Ok(directory) => directory,
                Err(error) => {
                    self.forget_dir_value(tx, &entry)?;
                    return Err(error);
                }
            };
            znode.xattr_dir = directory;
        }
        // The directory pointer takes 8 bytes of the bonus buffer: SA entries move to the
        // directory, first ones first, until the rest fit (a few at most, each small).
        let kept = loop {
            if let Some(kept) = sa_split(sa_base_len(znode), &sa) {
                break kept;
            }
            let moved = sa.remove(0);
            let moved_entry = self.write_dir_value(tx, &moved.value)?;
            self.put_dir_entry(tx, znode.xattr_dir, &moved.name, &moved_entry)?;
        };
        spread_sa(znode, sa, kept);
        self.put_dir_entry(tx, znode.xattr_dir, name, &entry)?;
        if let Some(Found::Dir(XattrDirValue::Object { object, .. })) = found {
            self.objset.remove_object(&tx, ObjectId(object))?;
        }
        Ok(())
    }

    /// Remove `name` (found at `found`) from `znode` (written back by the caller) in `tx`.
    pub(super) fn drop_xattr(
        &self,
        tx: Tx,
        ino: u64,
        znode: &mut Znode,
        name: &[u8],
        found: Found,
    ) -> Result<()> {
        match found {
            Found::Sa(index) => {
                self.load_spill(ino, znode)?;
                let mut sa = sa_entries(znode);
                sa.remove(index);
                // Fewer entries than a layout that fitted always fit.
                let kept = sa_split(sa_base_len(znode), &sa).ok_or_else(|| {
                    FsError::Corrupt(format!("inode {ino}: SA xattrs that do not fit"))
                })?;
                spread_sa(znode, sa, kept);
                Ok(())
            }
            Found::Dir(old) => self.remove_dir_entry(tx, znode.xattr_dir, name, old),
        }
    }

    /// The value of `name` in `znode` of `ino`, None if it has none (for the ACL code).
    pub(super) fn xattr_of(
        &self,
        ino: u64,
        znode: &Znode,
        name: &[u8],
    ) -> Result<Option<(Vec<u8>, Found)>> {
        let mut znode = znode.clone();
        Ok(match self.find_xattr(ino, &mut znode, name)? {
            Some(Found::Sa(index)) => {
                let entry = sa_entry(&znode, index).expect("found there");
                Some((entry.value.clone(), Found::Sa(index)))
            }
            Some(Found::Dir(value)) => Some((
                self.read_dir_value(znode.xattr_dir, value.clone())?,
                Found::Dir(value),
            )),
            None => None,
        })
    }

    /// Read `ino`'s spill block into `znode` (once; nothing to do without one).
    fn load_spill(&self, ino: u64, znode: &mut Znode) -> Result<()> {
        if znode.spill != SpillXattrs::Unread {
            return Ok(());
        }
        let raw = self.objset.spill(ObjectId(ino))?.ok_or_else(|| {
            FsError::Corrupt(format!(
                "inode {ino}: the znode names a spill block the object does not have"
            ))
        })?;
        znode.spill = SpillXattrs::Read(decode_spill(&raw, ino)?);
        Ok(())
    }

    /// Write `znode` (whose SA entries end in `spilled`) as `ino`'s bonus buffer and spill
    /// block, in the order the object layer's limit allows: a bonus buffer beside a spill
    /// block holds at most 192 bytes, so a spill block is removed before the bonus grows and
    /// written after it shrinks. An unchanged spill block is not rewritten.
    pub(super) fn put_znode_and_spill(
        &self,
        tx: &Tx,
        ino: u64,
        znode: &Znode,
        spilled: &[SaXattr],
    ) -> Result<()> {
        let object = ObjectId(ino);
        let bonus = znode.encode();
        if spilled.is_empty() {
            if self.objset.has_spill(object)? {
                self.objset.set_spill(tx, object, None)?;
            }
            self.objset
                .set_bonus(tx, object, ObjectType::None, &bonus)?;
            return Ok(());
        }
        self.objset
            .set_bonus(tx, object, ObjectType::None, &bonus)?;
        let spill = encode_spill(spilled);
        if self.objset.spill(object)?.as_deref() != Some(&spill) {
            self.objset.set_spill(tx, object, Some(spill))?;
        }
        Ok(())
    }

    /// Remove inode `ino`'s object in `tx`, with its xattr directory and value objects. A
    /// znode that cannot be read is logged and its object removed alone (its xattr objects, if
    /// any, stay allocated: space lost, nothing broken).
    pub(super) fn remove_inode(&self, tx: Tx, ino: u64) -> Result<()> {
        let xattr_dir = match self
            .objset
            .bonus(ObjectId(ino))
            .map_err(FsError::from)
            .and_then(|bonus| Znode::decode(&bonus, ino))
        {
            Ok(znode) => znode.xattr_dir,
            Err(error) => {
                log::warn!("removing inode {ino} without its xattrs: {error}");
                0
            }
        };
        if xattr_dir != 0 && self.objset.exists(ObjectId(xattr_dir)) {
            for (_, value) in self.xattr_dir_entries(xattr_dir)? {
                if let XattrDirValue::Object { object, .. } = value {
                    if self.objset.exists(ObjectId(object)) {
                        self.objset.remove_object(&tx, ObjectId(object))?;
                    }
                }
            }
            self.objset.remove_object(&tx, ObjectId(xattr_dir))?;
        }
        self.objset.remove_object(&tx, ObjectId(ino))?;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Helpers.

    /// Where `name` is among the xattrs of `znode` of `ino` (reading its spill block into it
    /// if the bonus buffer does not have the name).
    pub(super) fn find_xattr(
        &self,
        ino: u64,
        znode: &mut Znode,
        name: &[u8],
    ) -> Result<Option<Found>> {
        if let Some(index) = znode.sa_xattrs.iter().position(|entry| entry.name == name) {
            return Ok(Some(Found::Sa(index)));
        }
        self.load_spill(ino, znode)?;
        if let SpillXattrs::Read(spilled) = &znode.spill {
            if let Some(index) = spilled.iter().position(|entry| entry.name == name) {
                return Ok(Some(Found::Sa(znode.sa_xattrs.len() + index)));
            }
        }
        if znode.xattr_dir == 0 {
            return Ok(None);
        }
        let raw = {
            let handle = KvObject::new(&self.objset, ObjectId(znode.xattr_dir), None)?;
            kv::lookup(&handle, name).map_err(kv_error(znode.xattr_dir))?
        };
        raw.map(|raw| XattrDirValue::decode(&raw, znode.xattr_dir).map(Found::Dir))
            .transpose()
    }

    /// Every entry of the xattr directory `directory`, decoded.
    fn xattr_dir_entries(&self, directory: u64) -> Result<Vec<(Vec<u8>, XattrDirValue)>> {
        let mut entries = Vec::new();
        let mut cookie = COOKIE_FIRST;
        loop {
            let batch = {
                let handle = KvObject::new(&self.objset, ObjectId(directory), None)?;
                kv::list(&handle, cookie, XATTR_LIST_BATCH).map_err(kv_error(directory))?
            };
            let Some(last) = batch.last() else {
                return Ok(entries);
            };
            cookie = last.cookie + 1;
            for entry in batch {
                let value = XattrDirValue::decode(&entry.value, directory)?;
                entries.push((entry.key, value));
            }
        }
    }

    fn read_dir_value(&self, directory: u64, value: XattrDirValue) -> Result<Vec<u8>> {
        match value {
            XattrDirValue::Inline(value) => Ok(value),
            XattrDirValue::Object { object, length } => {
                let info = self.objset.info(ObjectId(object)).map_err(|error| {
                    FsError::Corrupt(format!(
                        "xattr directory {directory}: value object {object}: {error}"
                    ))
                })?;
                if info.object_type != ObjectType::PlainFile {
                    return Err(FsError::Corrupt(format!(
                        "xattr directory {directory}: value object {object} is a {:?}",
                        info.object_type
                    )));
                }
                let mut data = vec![0u8; length as usize];
                self.objset.read(ObjectId(object), 0, &mut data)?;
                Ok(data)
            }
        }
    }

    /// Store `value` for an xattr-directory entry: inline, or in a new object (written first,
    /// so that a write refused for lack of space leaves nothing behind).
    fn write_dir_value(&self, tx: Tx, value: &[u8]) -> Result<XattrDirValue> {
        if value.len() <= XATTR_DIR_INLINE_MAX {
            return Ok(XattrDirValue::Inline(value.to_vec()));
        }
        let config = self.config();
        let block_size = (value.len() as u32).next_power_of_two().max(512);
        let props = ObjectProps {
            object_type: ObjectType::PlainFile,
            data_block_size: block_size,
            indirect_block_shift: config.indirect_block_shift,
            checksum: config.checksum,
            compression: config.compression,
            copies: config.copies,
        };
        let object = self
            .objset
            .create_object(&tx, props, ObjectType::None, &[])?;
        if let Err(error) = self.objset.write(&tx, object, 0, value) {
            self.objset.remove_object(&tx, object)?;
            return Err(error.into());
        }
        Ok(XattrDirValue::Object {
            object: object.0,
            length: value.len() as u32,
        })
    }

    /// Undo [`FileSystem::write_dir_value`] for a value not stored after all.
    fn forget_dir_value(&self, tx: Tx, value: &XattrDirValue) -> Result<()> {
        if let XattrDirValue::Object { object, .. } = value {
            self.objset.remove_object(&tx, ObjectId(*object))?;
        }
        Ok(())
    }

    fn create_xattr_dir(&self, tx: Tx) -> Result<u64> {
        let config = self.config();
        let props = ObjectProps {
            object_type: ObjectType::KeyValue,
            data_block_size: XATTR_DIR_BLOCK_SIZE,
            indirect_block_shift: config.indirect_block_shift,
            checksum: config.checksum,
            compression: config.compression,
            copies: config.copies,
        };
        let object = self
            .objset
            .create_object(&tx, props, ObjectType::None, &[])?;
        kv::create(&mut KvObject::new(&self.objset, object, Some(tx))?)
            .map_err(kv_error(object.0))?;
        Ok(object.0)
    }

    fn put_dir_entry(
        &self,
        tx: Tx,
        directory: u64,
        name: &[u8],
        value: &XattrDirValue,
    ) -> Result<()> {
        let mut handle = KvObject::new(&self.objset, ObjectId(directory), Some(tx))?;
        kv::upsert(&mut handle, name, &value.encode()).map_err(kv_error(directory))?;
        Ok(())
    }

    fn remove_dir_entry(
        &self,
        tx: Tx,
        directory: u64,
        name: &[u8],
        old: XattrDirValue,
    ) -> Result<()> {
        {
            let mut handle = KvObject::new(&self.objset, ObjectId(directory), Some(tx))?;
            if !kv::remove(&mut handle, name).map_err(kv_error(directory))? {
                return Err(FsError::Corrupt(format!(
                    "xattr directory {directory}: entry vanished under its lock"
                )));
            }
        }
        self.forget_dir_value(tx, &old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_linux_does() {
        assert!(check_xattr_name(b"user.a").is_ok());
        assert!(check_xattr_name(b"system.posix_acl_access").is_ok());
        assert!(matches!(check_xattr_name(b""), Err(FsError::Range)));
        let mut long = b"user.".to_vec();
        long.resize(256, b'x');
        assert!(matches!(check_xattr_name(&long), Err(FsError::Range)));
        long.truncate(255);
        assert!(check_xattr_name(&long).is_ok());
        assert!(matches!(
            check_xattr_name(b"other.a"),
            Err(FsError::NotSupported)
        ));
        assert!(matches!(
            check_xattr_name(b"user."),
            Err(FsError::Invalid(_))
        ));
        assert!(matches!(
            check_xattr_name(b"user.a\0b"),
            Err(FsError::Invalid(_))
        ));
    }
}
