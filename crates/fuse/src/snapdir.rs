//! `.zfs/snapshot`: a file system's snapshots, read-only, inside its own mount.
//!
//! # Layout
//! The root of every tarn mount has a directory `.zfs` (as ZFS), holding one directory,
//! `snapshot`, whose entries are the file system's snapshots by name; each is that snapshot's
//! root directory. `.zfs` is left out of the root's listing unless the dataset property
//! `snapdir=visible` (default `hidden`); a lookup of `.zfs` works either way. A real entry named
//! `.zfs` in the root is shadowed (neither looked up nor listed), and no entry of that name can
//! be created there (EEXIST) or removed (EROFS). Everything below `.zfs` is read-only: changes
//! fail with EROFS, renames and links between the head and a snapshot (or two snapshots) with
//! EXDEV, and opening a snapshot's file for writing with EROFS.
//!
//! # Inode numbers
//! FUSE cannot mount a snapshot separately, so its files share the mount's 64-bit inode space.
//! The top bit tells them apart:
//!
//! ```text
//!  63  62 ........................ 39  38 ......................... 0
//! | 0 |            object number of the head's inode (< 2^63)          |  head
//! | 1 |  snapshot record (24 bits)   |  object number in it (39 bits)  |  snapshot
//! | 1 |              0               |   1: .zfs   2: .zfs/snapshot    |  control
//! ```
//!
//! The snapshot record is the MOS object of the snapshot's dataset record, unique in the pool
//! while the snapshot exists and unchanged by renames and imports, so every snapshot has its own
//! range and a remount gives every file the number it had. MOS object 0 is never a record, so
//! that range holds the two control directories. As the head's root is FUSE inode 1 in place of
//! its master node (object 1, never an inode), a snapshot's root is `(record, 1)`: the entries
//! of `.zfs/snapshot` get their inode numbers without opening the snapshots. Limits: records
//! below 2^24 (16.7 million MOS objects; the MOS does not reuse object numbers) and objects
//! below 2^39 (549 billion); a snapshot or file beyond them is refused with EOVERFLOW and a
//! line in the daemon's log, never given a number that could collide.
//!
//! # Generations
//! A head inode's generation is its object's (the txg that created it). A snapshot inode's is
//! the snapshot's creation txg in the upper 32 bits and the object's in the lower: a record
//! number reused after an export and import (a destroyed snapshot's, by a later snapshot) then
//! comes with a different generation, and the kernel never serves one snapshot's cached file for
//! another's. The control directories have generation 0: their identity never changes.
//!
//! # Opening snapshots
//! The adapter learns about snapshots only through [`SnapshotSource`] (list them, open one by
//! name), which the daemon implements over a weak reference to the pool. A snapshot is opened on
//! first use (a lookup of its name, or a request for one of its inodes after a remount) and kept
//! in [`SnapshotTable`], by record, with the engine's snapshot object. A snapshot's destroy
//! marks that object (in syncing context, before any of its blocks is freed, which happens in
//! the background in later txgs), and every request on a snapshot inode checks the mark: from
//! then on they fail with ESTALE and nothing more is read through the destroyed snapshot's
//! object set (a read already running when the mark is set finishes long before its blocks can
//! be reused). [`SnapshotTable::retain_listed`] drops the snapshots no longer listed (a renamed
//! one stays, under its new name); the daemon has that done after every destroy, rename and
//! rollback (`MountControl::snapshots_changed`), which also has the kernel forget the names
//! and pages it cached.

use std::collections::HashMap;
use std::sync::Arc;

use fuser::Errno;
use parking_lot::Mutex;
use tarn::{FileSystem, FsError, Snapshot, SnapshotInfo};

/// The name of the control directory in the root.
pub const ZFS_DIR_NAME: &[u8] = b".zfs";
/// The name of the snapshot directory in `.zfs`.
pub const SNAPSHOT_DIR_NAME: &[u8] = b"snapshot";

/// Set in every inode number that is not the head's.
pub const SNAPSHOT_BIT: u64 = 1 << 63;
/// Bits of the object number within a snapshot.
pub const OBJECT_BITS: u32 = 39;
/// Bits of the snapshot record's MOS object number.
pub const RECORD_BITS: u32 = 63 - OBJECT_BITS;
/// The largest object number a snapshot's file may have.
pub const SNAPSHOT_OBJECT_MAX: u64 = (1 << OBJECT_BITS) - 1;
/// The largest snapshot record object number.
pub const SNAPSHOT_RECORD_MAX: u64 = (1 << RECORD_BITS) - 1;
/// The largest object number a head's inode may have.
pub const HEAD_OBJECT_MAX: u64 = SNAPSHOT_BIT - 1;
/// `.zfs`.
pub const ZFS_DIR_INO: u64 = SNAPSHOT_BIT | 1;
/// `.zfs/snapshot`.
pub const SNAPSHOT_DIR_INO: u64 = SNAPSHOT_BIT | 2;
/// The object number standing for a snapshot's root in its inode numbers (its master node's,
/// never an inode; see the module documentation).
const SNAPSHOT_ROOT_SLOT: u64 = 1;

/// What a FUSE inode number (other than 1, the head's root) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InodeKind {
    /// An object of the head.
    Head(u64),
    ZfsDir,
    SnapshotDir,
    /// `object` of the snapshot whose record is `record`; `object` 1 is its root.
    Snapshot {
        record: u64,
        object: u64,
    },
    /// Not a number this scheme hands out.
    Invalid,
}

/// Decode a FUSE inode number.
pub fn decode(ino: u64) -> InodeKind {
    if ino & SNAPSHOT_BIT == 0 {
        return InodeKind::Head(ino);
    }
    let record = (ino & !SNAPSHOT_BIT) >> OBJECT_BITS;
    let object = ino & SNAPSHOT_OBJECT_MAX;
    match (record, ino) {
        (0, ZFS_DIR_INO) => InodeKind::ZfsDir,
        (0, SNAPSHOT_DIR_INO) => InodeKind::SnapshotDir,
        (0, _) => InodeKind::Invalid,
        _ if object == 0 => InodeKind::Invalid,
        _ => InodeKind::Snapshot { record, object },
    }
}

/// The FUSE inode number of a head object (EOVERFLOW past [`HEAD_OBJECT_MAX`]).
pub fn head_ino(object: u64) -> Result<u64, Errno> {
    if object > HEAD_OBJECT_MAX {
        log::error!(
            "tarn fuse: object {object} is beyond the largest inode number a head may have \
             ({HEAD_OBJECT_MAX})"
        );
        return Err(Errno::EOVERFLOW);
    }
    Ok(object)
}

/// The FUSE inode number of `object` in the snapshot whose record is `record`, whose root
/// directory is `root` (EOVERFLOW past the limits).
pub fn snapshot_ino(record: u64, root: u64, object: u64) -> Result<u64, Errno> {
    let slot = if object == root {
        SNAPSHOT_ROOT_SLOT
    } else {
        object
    };
    if record == 0 || record > SNAPSHOT_RECORD_MAX {
        log::error!(
            "tarn fuse: snapshot record object {record} is beyond the .zfs inode scheme's limit \
             ({SNAPSHOT_RECORD_MAX})"
        );
        return Err(Errno::EOVERFLOW);
    }
    if (slot <= SNAPSHOT_ROOT_SLOT && object != root) || slot > SNAPSHOT_OBJECT_MAX {
        log::error!(
            "tarn fuse: object {object} of a snapshot (record {record}) has no .zfs inode number \
             (the scheme holds objects 2 to {SNAPSHOT_OBJECT_MAX})"
        );
        return Err(Errno::EOVERFLOW);
    }
    Ok(SNAPSHOT_BIT | (record << OBJECT_BITS) | slot)
}

/// The FUSE inode number of the root of the snapshot whose record is `record`.
pub fn snapshot_root_ino(record: u64) -> Result<u64, Errno> {
    // Any root above 1 gives the root's slot.
    snapshot_ino(record, u64::MAX, u64::MAX)
}

/// The object a snapshot inode's object part names, given the snapshot's root.
pub fn snapshot_object(slot: u64, root: u64) -> u64 {
    if slot == SNAPSHOT_ROOT_SLOT {
        root
    } else {
        slot
    }
}

/// The generation of a snapshot's inode: the snapshot's creation txg above, the object's
/// generation below (32 bits each; see the module documentation).
pub fn snapshot_generation(snapshot_txg: u64, object_generation: u64) -> u64 {
    (snapshot_txg << 32) | (object_generation & 0xffff_ffff)
}

/// Where the adapter learns about the mounted file system's snapshots.
pub trait SnapshotSource: Send + Sync {
    /// The file system's snapshots, oldest first.
    fn list(&self) -> Result<Vec<SnapshotInfo>, FsError>;
    /// Open the snapshot called `name` (the part after `@`) read-only, with its figures and
    /// the engine's snapshot (for [`Snapshot::is_destroyed`]). [`FsError::NotFound`] when
    /// there is none.
    fn open(&self, name: &str) -> Result<(SnapshotInfo, FileSystem, Arc<Snapshot>), FsError>;
}

/// A file system without snapshots (mounts made without a source).
pub struct NoSnapshots;

impl SnapshotSource for NoSnapshots {
    fn list(&self) -> Result<Vec<SnapshotInfo>, FsError> {
        Ok(Vec::new())
    }

    fn open(&self, _name: &str) -> Result<(SnapshotInfo, FileSystem, Arc<Snapshot>), FsError> {
        Err(FsError::NotFound)
    }
}

/// The part of `POOL/fs@snap` after the `@`.
pub fn short_name(full: &str) -> &str {
    full.rsplit_once('@').map_or(full, |(_, name)| name)
}

/// An opened snapshot.
pub struct OpenSnapshot {
    /// Its record's MOS object number (its inode range).
    pub record: u64,
    pub creation_txg: u64,
    pub fs: Arc<FileSystem>,
    /// The engine's snapshot: destroyed means its blocks are being freed.
    snapshot: Arc<Snapshot>,
}

impl OpenSnapshot {
    /// The FUSE inode number of `object`.
    pub fn ino(&self, object: u64) -> Result<u64, Errno> {
        snapshot_ino(self.record, self.fs.root(), object)
    }

    pub fn generation(&self, object_generation: u64) -> u64 {
        snapshot_generation(self.creation_txg, object_generation)
    }

    /// Whether the snapshot was destroyed (nothing more may be read through `fs`).
    pub fn is_destroyed(&self) -> bool {
        self.snapshot.is_destroyed()
    }
}

/// The snapshots opened so far, by record, over a [`SnapshotSource`].
pub struct SnapshotTable {
    source: Arc<dyn SnapshotSource>,
    open: Mutex<HashMap<u64, Arc<OpenSnapshot>>>,
}

impl SnapshotTable {
    pub fn new(source: Arc<dyn SnapshotSource>) -> SnapshotTable {
        SnapshotTable {
            source,
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn list(&self) -> Result<Vec<SnapshotInfo>, FsError> {
        self.source.list()
    }

    /// The snapshot called `name`, opened if it was not (found by its record, so a lookup of
    /// an opened snapshot opens nothing).
    pub fn by_name(&self, name: &[u8]) -> Result<Arc<OpenSnapshot>, FsError> {
        let name = std::str::from_utf8(name).map_err(|_| FsError::NotFound)?;
        let record = self
            .source
            .list()?
            .into_iter()
            .find(|info| short_name(&info.name) == name)
            .ok_or(FsError::NotFound)?
            .object;
        self.by_record(record)?.ok_or(FsError::NotFound)
    }

    /// The snapshot whose record is `record`, opened if it is still listed; None if it is not
    /// (destroyed: its destroy marks it before freeing anything, so no request reads it from
    /// then on, whether or not the daemon has called `snapshots_changed` yet).
    pub fn by_record(&self, record: u64) -> Result<Option<Arc<OpenSnapshot>>, FsError> {
        {
            let mut open = self.open.lock();
            if let Some(snapshot) = open.get(&record) {
                if !snapshot.is_destroyed() {
                    return Ok(Some(snapshot.clone()));
                }
                open.remove(&record);
                return Ok(None);
            }
        }
        let Some(info) = self
            .source
            .list()?
            .into_iter()
            .find(|info| info.object == record)
        else {
            return Ok(None);
        };
        match self.source.open(short_name(&info.name)) {
            Ok((info, fs, snapshot)) if info.object == record && !snapshot.is_destroyed() => {
                self.insert(info, fs, snapshot).map(Some)
            }
            // Destroyed or renamed between the two calls.
            Ok(_) | Err(FsError::NotFound) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Keep `fs` as the snapshot `info` unless another thread opened it first (a record must
    /// stay with one file system object, whose inode table the kernel's numbers refer to).
    fn insert(
        &self,
        info: SnapshotInfo,
        fs: FileSystem,
        snapshot: Arc<Snapshot>,
    ) -> Result<Arc<OpenSnapshot>, FsError> {
        if info.object == 0 || info.object > SNAPSHOT_RECORD_MAX {
            log::error!(
                "tarn fuse: snapshot {} has record object {}, beyond the .zfs inode scheme's \
                 limit ({SNAPSHOT_RECORD_MAX}): it cannot be shown",
                info.name,
                info.object
            );
            return Err(FsError::Invalid(format!(
                "snapshot {}: record object {} is beyond the .zfs inode limit",
                info.name, info.object
            )));
        }
        let mut open = self.open.lock();
        let entry = open.entry(info.object).or_insert_with(|| {
            Arc::new(OpenSnapshot {
                record: info.object,
                creation_txg: info.creation_txg,
                fs: Arc::new(fs),
                snapshot,
            })
        });
        Ok(entry.clone())
    }

    /// Drop the opened snapshots whose records are not in `listed`; returns their records.
    pub fn retain_listed(&self, listed: &[SnapshotInfo]) -> Vec<u64> {
        let mut open = self.open.lock();
        let gone: Vec<u64> = open
            .keys()
            .filter(|record| !listed.iter().any(|info| info.object == **record))
            .copied()
            .collect();
        for record in &gone {
            open.remove(record);
        }
        gone
    }

    /// Records of the snapshots open now.
    pub fn open_records(&self) -> Vec<u64> {
        self.open.lock().keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_numbers_pass_unchanged() {
        for object in [2, 3, 1000, 1 << 40, HEAD_OBJECT_MAX] {
            assert_eq!(head_ino(object), Ok(object));
            assert_eq!(decode(object), InodeKind::Head(object));
        }
        assert_eq!(head_ino(HEAD_OBJECT_MAX + 1), Err(Errno::EOVERFLOW));
        assert_eq!(head_ino(u64::MAX), Err(Errno::EOVERFLOW));
    }

    #[test]
    fn control_directories_have_fixed_numbers() {
        assert_eq!(decode(ZFS_DIR_INO), InodeKind::ZfsDir);
        assert_eq!(decode(SNAPSHOT_DIR_INO), InodeKind::SnapshotDir);
        assert_eq!(decode(SNAPSHOT_BIT), InodeKind::Invalid);
        assert_eq!(decode(SNAPSHOT_BIT | 3), InodeKind::Invalid);
        // A snapshot's object 0 is never handed out.
        assert_eq!(
            decode(SNAPSHOT_BIT | (5 << OBJECT_BITS)),
            InodeKind::Invalid
        );
    }

    #[test]
    fn snapshot_numbers_round_trip() {
        let root = 34;
        for record in [1, 2, 77, SNAPSHOT_RECORD_MAX] {
            for object in [2, 3, root, 4096, SNAPSHOT_OBJECT_MAX] {
                let ino = snapshot_ino(record, root, object).unwrap();
                assert_ne!(ino & SNAPSHOT_BIT, 0);
                let InodeKind::Snapshot {
                    record: r,
                    object: slot,
                } = decode(ino)
                else {
                    panic!("{ino:#x} does not decode as a snapshot inode");
                };
                assert_eq!(r, record);
                assert_eq!(snapshot_object(slot, root), object);
            }
        }
        // The root is (record, 1) whatever its object number.
        assert_eq!(
            snapshot_ino(9, root, root).unwrap(),
            SNAPSHOT_BIT | (9 << OBJECT_BITS) | 1
        );
    }

    #[test]
    fn numbers_never_collide() {
        let mut seen = std::collections::HashSet::new();
        let root = 4;
        for object in [1u64, 2, 3, 4, 5, 100, SNAPSHOT_OBJECT_MAX] {
            assert!(seen.insert(object), "head {object}");
        }
        assert!(seen.insert(ZFS_DIR_INO) && seen.insert(SNAPSHOT_DIR_INO));
        for record in [1, 2, 3, 1000, SNAPSHOT_RECORD_MAX] {
            for object in [2, 3, 4, 5, 100, SNAPSHOT_OBJECT_MAX] {
                let ino = snapshot_ino(record, root, object).unwrap();
                assert!(
                    seen.insert(ino),
                    "record {record} object {object}: {ino:#x}"
                );
            }
        }
    }

    #[test]
    fn limits_are_refused() {
        let root = 34;
        assert_eq!(
            snapshot_ino(SNAPSHOT_RECORD_MAX + 1, root, 5),
            Err(Errno::EOVERFLOW)
        );
        assert_eq!(snapshot_ino(0, root, 5), Err(Errno::EOVERFLOW));
        assert_eq!(
            snapshot_ino(3, root, SNAPSHOT_OBJECT_MAX + 1),
            Err(Errno::EOVERFLOW)
        );
        // Object 1 (the master node) is never an inode; nor is 0.
        assert_eq!(snapshot_ino(3, root, 1), Err(Errno::EOVERFLOW));
        assert_eq!(snapshot_ino(3, root, 0), Err(Errno::EOVERFLOW));
    }

    #[test]
    fn generations_differ_between_snapshots() {
        assert_ne!(snapshot_generation(100, 7), snapshot_generation(101, 7));
        assert_ne!(snapshot_generation(100, 7), snapshot_generation(100, 8));
        assert_eq!(snapshot_generation(100, 7) & 0xffff_ffff, 7);
    }

    #[test]
    fn short_names() {
        assert_eq!(short_name("tank/fs@monday"), "monday");
        assert_eq!(short_name("monday"), "monday");
    }
}
