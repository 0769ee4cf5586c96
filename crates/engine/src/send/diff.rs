//! `tarn diff` (docs/design/11-send.md §2.17a): what changed in a file system between a
//! snapshot and a later snapshot or the file system itself (OpenZFS dmu_diff.c,
//! zfs_obj_to_path and libzfs_diff.c).
//!
//! # What it computes
//! The objects that changed are found from the block trees, not by walking both trees file by
//! file: the walk an incremental send makes ([`super::generate::walk_changed`]) over the
//! later side's meta-dnode, from the earlier snapshot's creation txg, visits every dnode block
//! born since (some dnode in it changed) and every hole born since (objects freed). Each
//! object of such a block is then compared in both sides, as libzfs_diff does:
//! - a node (an object whose bonus buffer holds a znode with links) only in the later side is
//!   added (`+`), only in the earlier side removed (`-`);
//! - in both with the same generation (dnode creation txg) and file kind: unchanged if its
//!   ctime is the same (a neighbour in the dnode block changed), else renamed (`R`) if its path
//!   differs, else modified (`M`); a regular file whose link count changed is `M` with the
//!   change (`(+1)`), named in the earlier side when links were added, as zfs does;
//! - in both with another generation or kind: the number was freed and reused, `-` of the old
//!   and `+` of the new.
//!
//! Objects that are no nodes (the master node, the unlinked set, xattr directories and their
//! value objects) are skipped; an xattr change is seen through the znode of its file, whose
//! ctime (and, for `xattr=sa`, bonus buffer) it changes. A node with no links (unlinked while
//! open, in the unlinked set) counts as absent. A directory whose entries changed is itself
//! modified (its blocks and ctime changed), as in zfs.
//!
//! # Names
//! Each node is named as `zfs_obj_to_path` names it: up the znode's parent pointers, finding in
//! each parent the entry whose object is the child. A file with several hard links is named
//! by one of them (the directory it was created or last renamed in). Each side's directories
//! are listed once and kept as object → name maps, so naming costs one listing per directory
//! that holds a change, not one per change. A node whose parent does not name it (a hard link's
//! first name removed) gets `/<object N>`, relative like the others.
//!
//! # Sides, holds and errors
//! The earlier side must be a snapshot (not a bookmark: its blocks are gone); the later one a
//! later snapshot of the same file system, of a clone of it made at or after the earlier one
//! (through the clone's origin chain), or the file system itself: then, as zfs, a temporary
//! snapshot is taken (`FS@tarn-diff-PID-N`), read and destroyed. Both snapshots are long-held
//! ([`Holder::Diff`]) while they are read. Everything else is refused with the reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::fs::phys::{Znode, ZNODE_MAGIC};
use crate::fs::{FileKind, FileSystem, FsError, Timestamp};
use crate::object::kv::COOKIE_FIRST;
use crate::object::phys::{DnodePhys, ObjsetHeader, DNODE_SIZE};
use crate::object::tree::lookup_block;
use crate::object::{ObjectError, ObjectSet};
use crate::pool::holds::{Holder, LongHold};
use crate::pool::{Pool, PoolError};

use super::generate::walk_changed;
use super::SendError;

/// What happened to one file between the two sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DiffKind {
    /// `M`: changed in place (contents, attributes, xattrs, entries, links).
    Modified,
    /// `+`: only in the later side.
    Added,
    /// `-`: only in the earlier side.
    Removed,
    /// `R`: moved to another name.
    Renamed,
}

impl DiffKind {
    /// zfs's one-character mark.
    pub fn mark(self) -> char {
        match self {
            DiffKind::Modified => 'M',
            DiffKind::Added => '+',
            DiffKind::Removed => '-',
            DiffKind::Renamed => 'R',
        }
    }
}

/// One line of a diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffRecord {
    pub kind: DiffKind,
    /// Path relative to the file system's root, beginning with `/` (the root is `/`); for a
    /// rename the old path, for a removal the path in the earlier side.
    pub path: Vec<u8>,
    /// A rename's new path.
    pub new_path: Option<Vec<u8>>,
    /// The file's kind (the earlier side's for a removal, else the later side's).
    pub file_kind: FileKind,
    /// Its ctime on the same side.
    pub ctime: Timestamp,
    /// The change of a regular file's link count (0: none), as zfs's `M path (+1)`.
    pub link_change: i64,
    /// The object (inode) number.
    pub object: u64,
}

/// A diff and what it compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffReport {
    /// The file system of the later side (whose mountpoint names the paths).
    pub file_system: String,
    /// The earlier snapshot, full name.
    pub from: String,
    /// The later side: a snapshot's full name, or the file system's.
    pub to: String,
    /// In object order, as zfs prints them.
    pub records: Vec<DiffRecord>,
}

/// Temporary snapshots taken for a diff against a file system, numbered per process.
static TEMPORARY_SNAPSHOTS: AtomicU64 = AtomicU64::new(0);

/// Compare snapshot `from` (`FS@SNAP`, or `@SNAP` of `to`'s file system) with `to`: a later
/// snapshot (`FS@SNAP`, or `@SNAP` of `from`'s file system) or a file system (its current
/// state). See the module documentation.
pub fn diff(pool: &Pool, from: &str, to: &str) -> Result<DiffReport, SendError> {
    let refuse = |why: String| SendError::Refused(format!("cannot diff {from} and {to}: {why}"));
    if from.contains('#') || to.contains('#') {
        return Err(refuse(
            "a bookmark has no blocks to compare; name snapshots".into(),
        ));
    }
    let to_fs_part = to.split('@').next().unwrap_or_default();
    let from_full = match from.strip_prefix('@') {
        Some(short) if !to_fs_part.is_empty() => format!("{to_fs_part}@{short}"),
        Some(_) => return Err(refuse("name the earlier snapshot as FS@SNAP".into())),
        None => from.to_string(),
    };
    let Some((from_fs, _)) = from_full.split_once('@') else {
        return Err(SendError::Refused(format!(
            "cannot diff {from}: the first argument must be a snapshot, FS@SNAP"
        )));
    };
    let to_full = match to.strip_prefix('@') {
        Some(short) => format!("{from_fs}@{short}"),
        None => to.to_string(),
    };
    let from_info = pool.snapshot_info(&from_full)?;
    let (to_fs, temporary) = match to_full.split_once('@') {
        Some((to_fs, _)) => {
            let to_info = pool.snapshot_info(&to_full)?;
            check_lineage(
                pool,
                &from_full,
                from_info.creation_txg,
                &to_full,
                to_fs,
                to_info.creation_txg,
            )?;
            (to_fs.to_string(), None)
        }
        None => {
            if !pool.has_dataset(&to_full) {
                return Err(PoolError::DatasetNotFound(to_full.clone()).into());
            }
            // Checked before a temporary snapshot is taken: a refused diff changes nothing.
            check_lineage(
                pool,
                &from_full,
                from_info.creation_txg,
                &to_full,
                &to_full,
                u64::MAX,
            )?;
            let name = format!(
                "{to_full}@tarn-diff-{}-{}",
                std::process::id(),
                TEMPORARY_SNAPSHOTS.fetch_add(1, Ordering::Relaxed)
            );
            pool.create_snapshots(std::slice::from_ref(&name), false)?;
            (to_full.clone(), Some(TemporarySnapshot { pool, name }))
        }
    };
    let to_snapshot = temporary
        .as_ref()
        .map_or(to_full.clone(), |temporary| temporary.name.clone());
    let result: Result<DiffReport, SendError> = (|| {
        let from_hold = hold(pool, &from_full, from_info.guid)?;
        let to_info = pool.snapshot_info(&to_snapshot)?;
        let to_hold = hold(pool, &to_snapshot, to_info.guid)?;
        let records = compare(pool, &from_hold, &to_hold, from_info.creation_txg)?;
        Ok(DiffReport {
            file_system: to_fs.clone(),
            from: from_full.clone(),
            to: to_full.clone(),
            records,
        })
    })();
    if let Some(temporary) = temporary {
        // The diff's own error, if it failed, is the one reported.
        let destroyed = temporary.destroy();
        if result.is_ok() {
            destroyed?;
        }
    }
    result
}

/// A snapshot taken to read a file system's current state, destroyed after the diff.
struct TemporarySnapshot<'a> {
    pool: &'a Pool,
    name: String,
}

impl TemporarySnapshot<'_> {
    fn destroy(self) -> Result<(), SendError> {
        self.pool
            .destroy_snapshots(&self.name, false)
            .map(|_| ())
            .map_err(|error| {
                SendError::Refused(format!(
                    "the diff's temporary snapshot {} could not be destroyed: {error}",
                    self.name
                ))
            })
    }
}

fn hold(pool: &Pool, name: &str, guid: u64) -> Result<LongHold, SendError> {
    let hold = pool.long_hold(name, Holder::Diff)?;
    if hold.snapshot().phys().guid.0 != guid {
        return Err(SendError::Refused(format!(
            "cannot diff {name}: it was destroyed and made again as the diff started"
        )));
    }
    Ok(hold)
}

/// Refuse unless `from` (created in `from_txg`, of `from_fs`) is an earlier snapshot of
/// `to_fs` (at `to_txg`; `u64::MAX` for its current state) or of the origin chain of it (zfs's
/// `dsl_dataset_is_before`).
fn check_lineage(
    pool: &Pool,
    from: &str,
    from_txg: u64,
    to: &str,
    to_fs: &str,
    to_txg: u64,
) -> Result<(), SendError> {
    let from_fs = from.split('@').next().unwrap_or_default();
    let datasets = pool.datasets();
    let mut file_system = to_fs.to_string();
    // Snapshots of `file_system` before this txg are earlier than `to`.
    let mut before = to_txg;
    for _ in 0..=datasets.len() {
        if file_system == from_fs {
            if from_txg < before {
                return Ok(());
            }
            break;
        }
        let Some(origin) = datasets
            .iter()
            .find(|dataset| dataset.name == file_system)
            .and_then(|dataset| dataset.origin.clone())
        else {
            break;
        };
        let origin_txg = pool.snapshot_info(&origin)?.creation_txg;
        file_system = origin.split('@').next().unwrap_or_default().to_string();
        // The origin itself is shared whole with the clone: it counts as earlier.
        before = origin_txg.saturating_add(1);
    }
    Err(SendError::Refused(format!(
        "cannot diff {from} and {to}: {from} is not an earlier snapshot from the same fs \
         (nor of a file system {to_fs} was cloned from)"
    )))
}

/// One side's view of an object: a node with links, or nothing.
#[derive(Clone, Debug)]
struct Node {
    generation: u64,
    znode: Znode,
}

/// The node object `object` is in `dnode`, if it is one.
fn node_of(object: u64, dnode: &DnodePhys) -> Result<Option<Node>, SendError> {
    if dnode.is_free() || dnode.bonus.len() < 4 || dnode.bonus[0..4] != ZNODE_MAGIC.to_le_bytes() {
        return Ok(None);
    }
    let znode = Znode::decode(&dnode.bonus, object).map_err(fs_error)?;
    if znode.links == 0 {
        return Ok(None);
    }
    Ok(Some(Node {
        generation: dnode.generation.0,
        znode,
    }))
}

fn fs_error(error: FsError) -> SendError {
    match error {
        FsError::Corrupt(what) => SendError::Object(ObjectError::Corrupt(what)),
        other => SendError::Refused(format!("cannot read the file system: {other}")),
    }
}

/// The dnodes of meta-dnode block `blkid` of a side, None where the block is a hole.
fn dnode_block(
    objset: &ObjectSet,
    meta: &DnodePhys,
    blkid: u64,
) -> Result<Option<Arc<Vec<u8>>>, SendError> {
    if blkid > meta.max_blkid {
        return Ok(None);
    }
    let bp = lookup_block(objset.io(), meta, blkid)?;
    if bp.is_hole() {
        return Ok(None);
    }
    Ok(Some(objset.io().read(&bp)?))
}

fn dnode_at(block: Option<&Arc<Vec<u8>>>, slot: u64) -> Result<Option<DnodePhys>, SendError> {
    let Some(block) = block else {
        return Ok(None);
    };
    let start = slot as usize * DNODE_SIZE;
    let raw = block
        .get(start..start + DNODE_SIZE)
        .ok_or_else(|| ObjectError::Corrupt("short dnode block".into()))?;
    Ok(Some(DnodePhys::decode(raw)?))
}

/// The changed objects of `to` since `from_txg`, compared with `from` and named.
fn compare(
    pool: &Pool,
    from: &LongHold,
    to: &LongHold,
    from_txg: u64,
) -> Result<Vec<DiffRecord>, SendError> {
    let from_objset = pool.held_objset(from)?;
    let to_objset = pool.held_objset(to)?;
    let io = to_objset.io().clone();
    let from_meta = ObjsetHeader::decode(&io.read(&from_objset.synced_root())?)?.meta_dnode;
    let to_meta = ObjsetHeader::decode(&io.read(&to_objset.synced_root())?)?.meta_dnode;
    let per_block = (to_meta.data_block_size as u64 / DNODE_SIZE as u64).max(1);
    let from_per_block = (from_meta.data_block_size as u64 / DNODE_SIZE as u64).max(1);
    if per_block != from_per_block {
        return Err(
            ObjectError::Corrupt("the two sides' dnode blocks differ in size".into()).into(),
        );
    }
    // (object, earlier side, later side) of every object in a changed dnode block.
    let mut changed: Vec<(u64, Option<Node>, Option<Node>)> = Vec::new();
    walk_changed::<SendError>(&io, &to_meta, from_txg, &mut |blkid, span, bp| {
        let blocks = if bp.is_hole() {
            // Freed since: what the earlier side had there went away (none past its end).
            blkid
                ..blkid
                    .saturating_add(span)
                    .min(from_meta.max_blkid.saturating_add(1))
        } else {
            blkid..blkid + 1
        };
        let to_block = if bp.is_hole() {
            None
        } else {
            Some(io.read(bp)?)
        };
        for block in blocks {
            let from_block = dnode_block(&from_objset, &from_meta, block)?;
            if from_block.is_none() && to_block.is_none() {
                continue;
            }
            for slot in 0..per_block {
                let object = block * per_block + slot;
                if object == 0 {
                    continue;
                }
                let before = match dnode_at(from_block.as_ref(), slot)? {
                    Some(dnode) => node_of(object, &dnode)?,
                    None => None,
                };
                let after = match dnode_at(to_block.as_ref(), slot)? {
                    Some(dnode) => node_of(object, &dnode)?,
                    None => None,
                };
                if before.is_some() || after.is_some() {
                    changed.push((object, before, after));
                }
            }
        }
        Ok(())
    })?;
    let txgs = pool.core.txgs.clone();
    let mut before_names =
        Namer::new(FileSystem::open_read_only(from_objset, txgs.clone()).map_err(fs_error)?);
    let mut after_names =
        Namer::new(FileSystem::open_read_only(to_objset, txgs).map_err(fs_error)?);
    let mut records = Vec::new();
    for (object, before, after) in changed {
        let record = |kind, path, node: &Node| DiffRecord {
            kind,
            path,
            new_path: None,
            file_kind: node.znode.kind(),
            ctime: node.znode.ctime,
            link_change: 0,
            object,
        };
        match (before, after) {
            (None, None) => {}
            (Some(old), None) => {
                let path = before_names.path(object, &old.znode)?;
                records.push(record(DiffKind::Removed, path, &old));
            }
            (None, Some(new)) => {
                let path = after_names.path(object, &new.znode)?;
                records.push(record(DiffKind::Added, path, &new));
            }
            (Some(old), Some(new)) => {
                if old.generation != new.generation || old.znode.kind() != new.znode.kind() {
                    let path = before_names.path(object, &old.znode)?;
                    records.push(record(DiffKind::Removed, path, &old));
                    let path = after_names.path(object, &new.znode)?;
                    records.push(record(DiffKind::Added, path, &new));
                    continue;
                }
                if old.znode.ctime == new.znode.ctime {
                    continue;
                }
                let old_path = before_names.path(object, &old.znode)?;
                let new_path = after_names.path(object, &new.znode)?;
                let link_change = if new.znode.kind() == FileKind::Directory {
                    0
                } else {
                    new.znode.links as i64 - old.znode.links as i64
                };
                if link_change != 0 {
                    let path = if link_change > 0 { old_path } else { new_path };
                    let mut line = record(DiffKind::Modified, path, &new);
                    line.link_change = link_change;
                    records.push(line);
                } else if old_path == new_path {
                    records.push(record(DiffKind::Modified, new_path, &new));
                } else {
                    let mut line = record(DiffKind::Renamed, old_path, &new);
                    line.new_path = Some(new_path);
                    records.push(line);
                }
            }
        }
    }
    Ok(records)
}

/// Names the nodes of one side (see "Names" in the module documentation).
struct Namer {
    fs: FileSystem,
    /// Per directory listed: child object → the first name that names it.
    entries: HashMap<u64, HashMap<u64, Vec<u8>>>,
    /// Paths of directories already named (None: no path).
    directories: HashMap<u64, Option<Vec<u8>>>,
}

/// Levels walked at most: a parent chain longer than this is taken as corruption.
const PATH_DEPTH_MAX: usize = 4096;
/// Directory entries read per listing call.
const LISTING_BATCH: usize = 1024;

impl Namer {
    fn new(fs: FileSystem) -> Namer {
        Namer {
            fs,
            entries: HashMap::new(),
            directories: HashMap::new(),
        }
    }

    /// The path of node `object` (whose znode is `znode`), or `/<object N>` when its parent
    /// chain does not name it.
    fn path(&mut self, object: u64, znode: &Znode) -> Result<Vec<u8>, SendError> {
        Ok(self
            .named(object, znode)?
            .unwrap_or_else(|| format!("/<object {object}>").into_bytes()))
    }

    fn named(&mut self, object: u64, znode: &Znode) -> Result<Option<Vec<u8>>, SendError> {
        let root = self.fs.root();
        if object == root {
            return Ok(Some(b"/".to_vec()));
        }
        let Some(name) = self.name_in(znode.parent, object)? else {
            return Ok(None);
        };
        let Some(mut path) = self.directory_path(znode.parent)? else {
            return Ok(None);
        };
        if path != b"/" {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        Ok(Some(path))
    }

    /// The path of directory `dir`, walking up its parents (each named once).
    fn directory_path(&mut self, dir: u64) -> Result<Option<Vec<u8>>, SendError> {
        let root = self.fs.root();
        // Up the chain to a directory already named (or the root), then back down.
        let mut chain = Vec::new();
        let mut current = dir;
        let mut path = loop {
            if current == root {
                break Some(b"/".to_vec());
            }
            if let Some(known) = self.directories.get(&current) {
                break known.clone();
            }
            if chain.len() >= PATH_DEPTH_MAX || chain.contains(&current) {
                break None;
            }
            let dnode = self
                .fs
                .objset()
                .synced_dnode(crate::types::ObjectId(current))?;
            let Some(node) = node_of(current, &dnode)? else {
                break None;
            };
            if node.znode.parent == current {
                break None;
            }
            chain.push(current);
            current = node.znode.parent;
        };
        // `chain` runs from `dir` up; name each below its parent, top down.
        let mut parent = current;
        for &child in chain.iter().rev() {
            path = match path {
                Some(mut path) => match self.name_in(parent, child)? {
                    Some(name) => {
                        if path != b"/" {
                            path.push(b'/');
                        }
                        path.extend_from_slice(&name);
                        Some(path)
                    }
                    None => None,
                },
                None => None,
            };
            self.directories.insert(child, path.clone());
            parent = child;
        }
        Ok(path)
    }

    /// The name under which directory `dir` lists `child`, if it does.
    fn name_in(&mut self, dir: u64, child: u64) -> Result<Option<Vec<u8>>, SendError> {
        if !self.entries.contains_key(&dir) {
            let mut names: HashMap<u64, Vec<u8>> = HashMap::new();
            let mut cookie = COOKIE_FIRST;
            loop {
                let entries = match self.fs.readdir(dir, cookie, LISTING_BATCH) {
                    Ok(entries) => entries,
                    Err(FsError::NotFound | FsError::NotDir) => Vec::new(),
                    Err(error) => return Err(fs_error(error)),
                };
                let Some(last) = entries.last() else {
                    break;
                };
                cookie = last.next_cookie;
                for entry in entries {
                    names.entry(entry.ino).or_insert(entry.name);
                }
            }
            self.entries.insert(dir, names);
        }
        Ok(self.entries[&dir].get(&child).cloned())
    }
}
