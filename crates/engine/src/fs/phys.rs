//! On-disk structures of the file system layer: the znode (stored in each object's bonus
//! buffer) with its system-attribute tail (the hidden xattr directory's object number and the
//! packed small xattrs of `xattr=sa`), the spill block of SA xattrs that overflow the bonus
//! buffer, directory entry values, xattr-directory entry values, unlinked-set keys and the
//! master node's keys.
//!
//! All integers are little-endian. Decoders take untrusted bytes and never panic: they return
//! [`FsError::Corrupt`] saying what was wrong and where.

use super::FsError;
use crate::object::phys::{bonus_size_max, DNODE_BONUS_SIZE_MAX, SPILL_SIZE_MAX, SPILL_SIZE_MIN};

/// Master node keys (the master node is a key/value object at [`MASTER_NODE_OBJECT`]).
pub const MASTER_KEY_VERSION: &str = "VERSION";
pub const MASTER_KEY_ROOT: &str = "ROOT";
pub const MASTER_KEY_UNLINKED_SET: &str = "UNLINKED_SET";
/// The object number of the master node in every file system's object set.
pub const MASTER_NODE_OBJECT: u64 = 1;
/// The file-system format version written by `format`, and the only one `open` accepts.
pub const FS_VERSION: u64 = 1;

/// "ZNOD" in little-endian byte order.
pub const ZNODE_MAGIC: u32 = u32::from_le_bytes(*b"ZNOD");
pub const ZNODE_FORMAT_VERSION: u16 = 1;
/// Bytes of the fixed part of a znode.
pub const ZNODE_SIZE: usize = 128;
/// Longest symlink target kept in the bonus buffer after the znode; longer ones go in the
/// object's data.
pub const INLINE_TARGET_MAX: usize = DNODE_BONUS_SIZE_MAX - ZNODE_SIZE;
const _: () = assert!(ZNODE_SIZE + INLINE_TARGET_MAX == DNODE_BONUS_SIZE_MAX);
const _: () = assert!(INLINE_TARGET_MAX >= 128);
/// Offset of the last fixed field (rdev, 8 bytes): the fixed part ends exactly at ZNODE_SIZE.
const ZNODE_RDEV_OFFSET: usize = 120;
const _: () = assert!(ZNODE_RDEV_OFFSET + 8 == ZNODE_SIZE);
/// Four timestamps of 16 bytes from the atime on end where the parent field starts.
const ZNODE_ATIME_OFFSET: usize = 40;
const ZNODE_PARENT_OFFSET: usize = 104;
const TIMESTAMP_SIZE: usize = 16;
const _: () = assert!(ZNODE_ATIME_OFFSET + 4 * TIMESTAMP_SIZE == ZNODE_PARENT_OFFSET);

/// Znode flag: the object has no links and sits in the unlinked set until its last release
/// (or the next mount after a crash) removes it.
pub const ZNODE_FLAG_UNLINKED: u64 = 1 << 0;
/// Znode layout flag: 8 bytes after the inline target hold the object number of the file's
/// hidden xattr directory. Set by `encode` from [`Znode::xattr_dir`], never kept in
/// [`Znode::flags`]. A build that predates it refuses the znode (unknown flag) rather than
/// dropping the xattrs it cannot see.
pub const ZNODE_FLAG_XATTR_DIR: u64 = 1 << 1;
/// Znode layout flag: a packed system-attribute region of small xattrs ends the bonus buffer
/// (`xattr=sa`). Set by `encode` from [`Znode::sa_xattrs`].
pub const ZNODE_FLAG_SA_XATTRS: u64 = 1 << 2;
/// Znode layout flag: the object's spill block holds more SA xattrs (the bonus buffer is then
/// at most 192 bytes). Set by `encode` from [`Znode::spill`].
pub const ZNODE_FLAG_SPILL: u64 = 1 << 3;
/// Znode flag, directories only: nodes created in this directory get its project ID, and
/// directories created in it get this flag too (ext4's and XFS's PROJINHERIT, OpenZFS's
/// ZFS_PROJINHERIT), so that a tree stays in one project. A real flag, kept in
/// [`Znode::flags`]. A build that predates it refuses the znode (unknown flag) rather than
/// create nodes outside the project.
pub const ZNODE_FLAG_PROJECT_INHERIT: u64 = 1 << 4;
/// The layout flags, derived from the fields on encode.
pub const ZNODE_FLAGS_LAYOUT: u64 = ZNODE_FLAG_XATTR_DIR | ZNODE_FLAG_SA_XATTRS | ZNODE_FLAG_SPILL;
/// Every flag this version knows; others are refused as corruption.
pub const ZNODE_FLAGS_KNOWN: u64 =
    ZNODE_FLAG_UNLINKED | ZNODE_FLAGS_LAYOUT | ZNODE_FLAG_PROJECT_INHERIT;
/// The project ID no node may have: Linux's `(projid_t)-1`, its invalid ID, which the kernel
/// never passes on and OpenZFS refuses (ZFS_INVALID_PROJID). Every other u32 is a project.
pub const PROJECT_ID_INVALID: u32 = u32::MAX;
/// The project of a node no one put in a project (ext4's, XFS's and OpenZFS's default).
pub const PROJECT_ID_DEFAULT: u32 = 0;
/// Longest xattr name (Linux's XATTR_NAME_MAX), in the SA region and the xattr directory.
pub const XATTR_NAME_LEN_MAX: usize = 255;
/// Bytes of an SA region's header (the entry count) and of each entry's header (name length
/// u8, value length u16).
pub const SA_HEADER_SIZE: usize = 2;
pub const SA_ENTRY_HEADER_SIZE: usize = 3;

/// File-type bits of a mode (POSIX `S_IFMT`), with the Linux values, fixed here so that the
/// on-disk format does not depend on the host's headers.
pub const MODE_TYPE_MASK: u32 = 0o170_000;
pub const MODE_FIFO: u32 = 0o010_000;
pub const MODE_CHAR_DEVICE: u32 = 0o020_000;
pub const MODE_DIRECTORY: u32 = 0o040_000;
pub const MODE_BLOCK_DEVICE: u32 = 0o060_000;
pub const MODE_REGULAR: u32 = 0o100_000;
pub const MODE_SYMLINK: u32 = 0o120_000;
pub const MODE_SOCKET: u32 = 0o140_000;
/// Permission bits, setuid, setgid and sticky.
pub const MODE_PERMISSION_MASK: u32 = 0o7777;

/// The kind of an inode; its code is stored in directory entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// The code stored in a directory entry.
    pub fn code(self) -> u8 {
        match self {
            FileKind::Regular => 1,
            FileKind::Directory => 2,
            FileKind::Symlink => 3,
            FileKind::Fifo => 4,
            FileKind::Socket => 5,
            FileKind::CharDevice => 6,
            FileKind::BlockDevice => 7,
        }
    }

    pub fn from_code(code: u8) -> Option<FileKind> {
        Some(match code {
            1 => FileKind::Regular,
            2 => FileKind::Directory,
            3 => FileKind::Symlink,
            4 => FileKind::Fifo,
            5 => FileKind::Socket,
            6 => FileKind::CharDevice,
            7 => FileKind::BlockDevice,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => MODE_REGULAR,
            FileKind::Directory => MODE_DIRECTORY,
            FileKind::Symlink => MODE_SYMLINK,
            FileKind::Fifo => MODE_FIFO,
            FileKind::Socket => MODE_SOCKET,
            FileKind::CharDevice => MODE_CHAR_DEVICE,
            FileKind::BlockDevice => MODE_BLOCK_DEVICE,
        }
    }

    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & MODE_TYPE_MASK {
            MODE_REGULAR => FileKind::Regular,
            MODE_DIRECTORY => FileKind::Directory,
            MODE_SYMLINK => FileKind::Symlink,
            MODE_FIFO => FileKind::Fifo,
            MODE_SOCKET => FileKind::Socket,
            MODE_CHAR_DEVICE => FileKind::CharDevice,
            MODE_BLOCK_DEVICE => FileKind::BlockDevice,
            _ => return None,
        })
    }
}

/// A point in time: seconds since the Unix epoch (may be negative) and nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub seconds: i64,
    /// 0..1_000_000_000.
    pub nanoseconds: u32,
}

/// A time as the intent log records it.
pub(super) fn log_time(time: Timestamp) -> crate::zil::record::LogTime {
    crate::zil::record::LogTime {
        seconds: time.seconds,
        nanoseconds: time.nanoseconds,
    }
}

/// A time the intent log recorded, as the file system keeps it.
pub(super) fn fs_time(time: crate::zil::record::LogTime) -> Timestamp {
    Timestamp {
        seconds: time.seconds,
        nanoseconds: time.nanoseconds,
    }
}

impl Timestamp {
    pub fn now() -> Timestamp {
        let now = std::time::SystemTime::now();
        match now.duration_since(std::time::UNIX_EPOCH) {
            Ok(since) => Timestamp {
                seconds: since.as_secs() as i64,
                nanoseconds: since.subsec_nanos(),
            },
            Err(_) => Timestamp::default(),
        }
    }

    fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.seconds.to_le_bytes());
        out[8..12].copy_from_slice(&self.nanoseconds.to_le_bytes());
        out[12..16].fill(0);
    }

    fn decode(raw: &[u8], what: &str) -> Result<Timestamp, FsError> {
        let seconds = i64::from_le_bytes(raw[0..8].try_into().expect("8 bytes"));
        let nanoseconds = u32::from_le_bytes(raw[8..12].try_into().expect("4 bytes"));
        if nanoseconds >= 1_000_000_000 {
            return Err(FsError::Corrupt(format!(
                "znode {what}: {nanoseconds} nanoseconds"
            )));
        }
        Ok(Timestamp {
            seconds,
            nanoseconds,
        })
    }
}

/// Offsets of the owners in a znode: uid, gid and project ID (u32 each).
const ZNODE_UID_OFFSET: usize = 12;
const ZNODE_GID_OFFSET: usize = 16;
const ZNODE_PROJECT_OFFSET: usize = 20;

/// The owners a file-system object with bonus buffer `bonus` is charged to (the object
/// layer's [`crate::object::owners::OwnerOf`] for file systems): its znode's uid, gid and
/// project ID, or None for an object that is no node (the master node, an unlinked set, an
/// xattr directory's entries). Reads three fields after the magic; the znode is decoded in
/// full wherever it is used.
pub fn znode_owners(bonus: &[u8]) -> Option<crate::object::owners::Owners> {
    if bonus.len() < ZNODE_SIZE || bonus[0..4] != ZNODE_MAGIC.to_le_bytes() {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(bonus[at..at + 4].try_into().expect("4"));
    Some(crate::object::owners::Owners {
        user: u32_at(ZNODE_UID_OFFSET),
        group: u32_at(ZNODE_GID_OFFSET),
        project: u32_at(ZNODE_PROJECT_OFFSET),
    })
}

/// The znode: the POSIX attributes of one inode, in its object's bonus buffer.
///
/// ```text
///   offset  size  field
///        0     4  magic "ZNOD"
///        4     2  format version (1)
///        6     2  inline symlink target length (bytes after offset 128; 0 if none)
///        8     4  mode: S_IFMT type bits | permission bits (0o7777)
///       12     4  uid
///       16     4  gid
///       20     4  project ID (0: none; 0xffffffff is refused)
///       24     8  links (hard link count; directories: 2 + subdirectories)
///       32     8  size in bytes (directories: number of entries; symlinks: target length)
///       40    16  atime:  i64 seconds, u32 nanoseconds, u32 zero
///       56    16  mtime
///       72    16  ctime
///       88    16  crtime (creation)
///      104     8  parent directory object (the root is its own parent)
///      112     8  flags (bit 0: unlinked; bit 1: xattr directory follows;
///                    bit 2: SA xattr region follows; bit 3: more SA xattrs in the
///                    object's spill block; bit 4: directories only, new nodes inherit
///                    the project ID)
///      120     8  rdev (character and block devices)
///      128     T  inline symlink target (T = the length at offset 6, 0..=192)
///   then, if flag bit 1:
///            8  object number of the hidden xattr directory (a key/value object)
///   then, if flag bit 2, the SA region of small xattrs (to the end of the bonus buffer):
///            2  entry count N (>= 1)
///   N times: 1  name length L (1..=255)
///            2  value length V
///            L  name (full name with its namespace, no NUL)
///            V  value
/// ```
/// A znode written before xattrs existed has neither flag and ends after the inline target,
/// so it reads unchanged. The project ID took a field that was always zero, so a node in no
/// project without the inherit flag encodes to the bytes it had before projects existed. The
/// bonus buffer holds at most 320 bytes in all (192 beside a spill block pointer): the SA
/// region takes what the fixed part, the inline target and the directory pointer leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Znode {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// The project the node is charged to for project quotas ([`PROJECT_ID_DEFAULT`] for
    /// none); never [`PROJECT_ID_INVALID`].
    pub project: u32,
    pub links: u64,
    pub size: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    pub parent: u64,
    pub flags: u64,
    pub rdev: u64,
    /// A symlink target short enough to live in the bonus buffer.
    pub inline_target: Vec<u8>,
    /// The hidden xattr directory's object number, 0 if the file has none.
    pub xattr_dir: u64,
    /// Small xattrs packed in the bonus buffer (`xattr=sa`), in insertion order.
    pub sa_xattrs: Vec<SaXattr>,
    /// The SA xattrs that follow `sa_xattrs` in the object's spill block.
    pub spill: SpillXattrs,
}

/// The SA xattrs of a znode's spill block, as far as the znode in memory knows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SpillXattrs {
    /// The object has no spill block.
    #[default]
    None,
    /// The object has a spill block, not read (writing the znode back leaves it as it is).
    Unread,
    /// The spill block should hold these (none: the object should have no spill block).
    Read(Vec<SaXattr>),
}

impl SpillXattrs {
    /// Whether the znode written from this state says a spill block follows.
    pub fn on_disk(&self) -> bool {
        match self {
            SpillXattrs::None => false,
            SpillXattrs::Unread => true,
            SpillXattrs::Read(entries) => !entries.is_empty(),
        }
    }
}

/// One xattr in a znode's SA region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaXattr {
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

impl SaXattr {
    /// Bytes this entry takes in the SA region.
    pub fn encoded_len(&self) -> usize {
        SA_ENTRY_HEADER_SIZE + self.name.len() + self.value.len()
    }
}

impl Znode {
    pub fn kind(&self) -> FileKind {
        FileKind::from_mode(self.mode).expect("decoded znodes have a valid type")
    }

    /// The user, group and project the node is charged to (what [`znode_owners`] reads from
    /// the encoded znode).
    pub fn owners(&self) -> crate::object::owners::Owners {
        crate::object::owners::Owners {
            user: self.uid,
            group: self.gid,
            project: self.project,
        }
    }

    /// Whether nodes created in this directory inherit its project ID.
    pub fn project_inherit(&self) -> bool {
        self.flags & ZNODE_FLAG_PROJECT_INHERIT != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.inline_target.len() <= INLINE_TARGET_MAX,
            "inline symlink target too long"
        );
        assert!(FileKind::from_mode(self.mode).is_some(), "znode mode type");
        let length = self.encoded_len();
        assert!(
            length <= bonus_size_max(self.spill.on_disk()),
            "znode of {length} bytes"
        );
        assert_eq!(
            self.flags & ZNODE_FLAGS_LAYOUT,
            0,
            "layout flags are derived"
        );
        let mut out = vec![0u8; ZNODE_SIZE + self.inline_target.len()];
        out[0..4].copy_from_slice(&ZNODE_MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&ZNODE_FORMAT_VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&(self.inline_target.len() as u16).to_le_bytes());
        out[8..12].copy_from_slice(&self.mode.to_le_bytes());
        out[ZNODE_UID_OFFSET..ZNODE_UID_OFFSET + 4].copy_from_slice(&self.uid.to_le_bytes());
        out[ZNODE_GID_OFFSET..ZNODE_GID_OFFSET + 4].copy_from_slice(&self.gid.to_le_bytes());
        assert_ne!(self.project, PROJECT_ID_INVALID, "znode project ID");
        assert!(
            self.flags & ZNODE_FLAG_PROJECT_INHERIT == 0 || self.kind() == FileKind::Directory,
            "project inherit flag on a non-directory"
        );
        out[ZNODE_PROJECT_OFFSET..ZNODE_PROJECT_OFFSET + 4]
            .copy_from_slice(&self.project.to_le_bytes());
        out[24..32].copy_from_slice(&self.links.to_le_bytes());
        out[32..40].copy_from_slice(&self.size.to_le_bytes());
        self.atime.encode(&mut out[40..56]);
        self.mtime.encode(&mut out[56..72]);
        self.ctime.encode(&mut out[72..88]);
        self.crtime.encode(&mut out[88..104]);
        out[ZNODE_PARENT_OFFSET..ZNODE_PARENT_OFFSET + 8]
            .copy_from_slice(&self.parent.to_le_bytes());
        let mut flags = self.flags;
        if self.xattr_dir != 0 {
            flags |= ZNODE_FLAG_XATTR_DIR;
        }
        if !self.sa_xattrs.is_empty() {
            flags |= ZNODE_FLAG_SA_XATTRS;
        }
        if self.spill.on_disk() {
            flags |= ZNODE_FLAG_SPILL;
        }
        out[112..120].copy_from_slice(&flags.to_le_bytes());
        out[ZNODE_RDEV_OFFSET..ZNODE_SIZE].copy_from_slice(&self.rdev.to_le_bytes());
        out[ZNODE_SIZE..].copy_from_slice(&self.inline_target);
        if self.xattr_dir != 0 {
            out.extend_from_slice(&self.xattr_dir.to_le_bytes());
        }
        if !self.sa_xattrs.is_empty() {
            encode_sa_region(&self.sa_xattrs, &mut out);
        }
        debug_assert_eq!(out.len(), length);
        out
    }

    /// Bytes the encoded znode takes; callers keep it within [`DNODE_BONUS_SIZE_MAX`], or 192
    /// bytes with a spill block (the xattr code moves xattrs to the spill block or the xattr
    /// directory rather than overflow it).
    pub fn encoded_len(&self) -> usize {
        ZNODE_SIZE
            + self.inline_target.len()
            + if self.xattr_dir != 0 { 8 } else { 0 }
            + Znode::sa_region_len(&self.sa_xattrs)
    }

    /// Bytes the SA region of `entries` takes (0 for none).
    pub fn sa_region_len(entries: &[SaXattr]) -> usize {
        if entries.is_empty() {
            0
        } else {
            SA_HEADER_SIZE + entries.iter().map(SaXattr::encoded_len).sum::<usize>()
        }
    }

    /// Decode the bonus buffer of object `object`.
    pub fn decode(raw: &[u8], object: u64) -> Result<Znode, FsError> {
        let corrupt = |what: String| FsError::Corrupt(format!("znode of object {object}: {what}"));
        if raw.len() < ZNODE_SIZE {
            return Err(corrupt(format!("{} bytes, need {ZNODE_SIZE}", raw.len())));
        }
        let u16_at = |at: usize| u16::from_le_bytes(raw[at..at + 2].try_into().expect("2"));
        let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8"));
        let magic = u32_at(0);
        if magic != ZNODE_MAGIC {
            return Err(corrupt(format!("magic {magic:#010x}")));
        }
        let version = u16_at(4);
        if version != ZNODE_FORMAT_VERSION {
            return Err(corrupt(format!("unknown format version {version}")));
        }
        let flags = u64_at(112);
        if flags & !ZNODE_FLAGS_KNOWN != 0 {
            return Err(corrupt(format!("unknown flags {flags:#x}")));
        }
        let inline_length = u16_at(6) as usize;
        let inline_end = ZNODE_SIZE + inline_length;
        let has_tail = flags & ZNODE_FLAGS_LAYOUT != 0;
        if inline_length > INLINE_TARGET_MAX
            || inline_end > raw.len()
            || (!has_tail && inline_end != raw.len())
        {
            return Err(corrupt(format!(
                "inline target of {inline_length} bytes in a bonus of {} bytes",
                raw.len()
            )));
        }
        let (xattr_dir, sa_xattrs) = decode_xattr_tail(&raw[inline_end..], flags)
            .map_err(|what| corrupt(format!("{what} (at byte {inline_end} on)")))?;
        let spill = if flags & ZNODE_FLAG_SPILL != 0 {
            if raw.len() > bonus_size_max(true) {
                return Err(corrupt(format!("{} bytes beside a spill block", raw.len())));
            }
            SpillXattrs::Unread
        } else {
            SpillXattrs::None
        };
        let mode = u32_at(8);
        if FileKind::from_mode(mode).is_none()
            || mode & !(MODE_TYPE_MASK | MODE_PERMISSION_MASK) != 0
        {
            return Err(corrupt(format!("mode {mode:#o}")));
        }
        let project = u32_at(ZNODE_PROJECT_OFFSET);
        if project == PROJECT_ID_INVALID {
            return Err(corrupt(format!("project ID {project:#x}")));
        }
        if flags & ZNODE_FLAG_PROJECT_INHERIT != 0 && mode & MODE_TYPE_MASK != MODE_DIRECTORY {
            return Err(corrupt("project inherit flag on a non-directory".into()));
        }
        let inline_target = raw[ZNODE_SIZE..inline_end].to_vec();
        if !inline_target.is_empty() && mode & MODE_TYPE_MASK != MODE_SYMLINK {
            return Err(corrupt("inline target on a non-symlink".into()));
        }
        Ok(Znode {
            mode,
            uid: u32_at(ZNODE_UID_OFFSET),
            gid: u32_at(ZNODE_GID_OFFSET),
            project,
            links: u64_at(24),
            size: u64_at(32),
            atime: Timestamp::decode(&raw[40..56], "atime").map_err(|e| corrupt(e.to_string()))?,
            mtime: Timestamp::decode(&raw[56..72], "mtime").map_err(|e| corrupt(e.to_string()))?,
            ctime: Timestamp::decode(&raw[72..88], "ctime").map_err(|e| corrupt(e.to_string()))?,
            crtime: Timestamp::decode(&raw[88..104], "crtime")
                .map_err(|e| corrupt(e.to_string()))?,
            parent: u64_at(ZNODE_PARENT_OFFSET),
            flags: flags & !ZNODE_FLAGS_LAYOUT,
            rdev: u64_at(ZNODE_RDEV_OFFSET),
            inline_target,
            xattr_dir,
            sa_xattrs,
            spill,
        })
    }
}

/// Append the SA region of `entries` (at least one) to `out`.
fn encode_sa_region(entries: &[SaXattr], out: &mut Vec<u8>) {
    assert!(
        !entries.is_empty() && entries.len() <= u16::MAX as usize,
        "SA entry count"
    );
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for entry in entries {
        assert!(
            (1..=XATTR_NAME_LEN_MAX).contains(&entry.name.len())
                && entry.value.len() <= u16::MAX as usize,
            "SA entry sizes"
        );
        out.push(entry.name.len() as u8);
        out.extend_from_slice(&(entry.value.len() as u16).to_le_bytes());
        out.extend_from_slice(&entry.name);
        out.extend_from_slice(&entry.value);
    }
}

/// Decode an SA region at the start of `raw`: its entries and the bytes after it.
fn decode_sa_region(raw: &[u8]) -> Result<(Vec<SaXattr>, &[u8]), String> {
    let Some((count, mut rest)) = raw.split_first_chunk::<2>() else {
        return Err("SA region cut short".into());
    };
    let count = u16::from_le_bytes(*count);
    if count == 0 {
        return Err("SA region with no entries".into());
    }
    let mut entries: Vec<SaXattr> = Vec::new();
    let mut names = std::collections::HashSet::new();
    for index in 0..count {
        let Some((header, body)) = rest.split_first_chunk::<SA_ENTRY_HEADER_SIZE>() else {
            return Err(format!("SA entry {index} header cut short"));
        };
        let name_length = header[0] as usize;
        let value_length = u16::from_le_bytes([header[1], header[2]]) as usize;
        if name_length == 0 || name_length + value_length > body.len() {
            return Err(format!(
                "SA entry {index}: name of {name_length} and value of {value_length} bytes in {} bytes",
                body.len()
            ));
        }
        let (name, body) = body.split_at(name_length);
        let (value, body) = body.split_at(value_length);
        if name.contains(&0) {
            return Err(format!("SA entry {index}: name holds a NUL"));
        }
        if !names.insert(name) {
            return Err(format!("SA entry {index}: name appears twice"));
        }
        entries.push(SaXattr {
            name: name.to_vec(),
            value: value.to_vec(),
        });
        rest = body;
    }
    Ok((entries, rest))
}

/// "SPIL" in little-endian byte order: the first bytes of a spill block of SA xattrs.
pub const SPILL_MAGIC: u32 = u32::from_le_bytes(*b"SPIL");
pub const SPILL_FORMAT_VERSION: u16 = 1;
/// Bytes of a spill block's header (magic, version, reserved).
pub const SPILL_HEADER_SIZE: usize = 8;

/// Encode the spill block holding `entries` (at least one): a header and an SA region,
/// zero-padded to a multiple of 512 bytes.
///
/// ```text
///   offset  size  field
///        0     4  magic "SPIL"
///        4     2  format version (1)
///        6     2  reserved, zero
///        8     R  SA region, as in the bonus buffer (entry count N >= 1, then N entries)
///      8+R        zeros to the end of the block (512 bytes to 128 KiB, a multiple of 512)
/// ```
pub fn encode_spill(entries: &[SaXattr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(spill_len(entries));
    out.extend_from_slice(&SPILL_MAGIC.to_le_bytes());
    out.extend_from_slice(&SPILL_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    encode_sa_region(entries, &mut out);
    out.resize(out.len().next_multiple_of(SPILL_SIZE_MIN), 0);
    assert!(
        out.len() <= SPILL_SIZE_MAX,
        "spill block of {} bytes",
        out.len()
    );
    out
}

/// Bytes of the spill block holding `entries`, before padding.
pub fn spill_len(entries: &[SaXattr]) -> usize {
    SPILL_HEADER_SIZE + Znode::sa_region_len(entries)
}

/// Decode the spill block of object `object`. Every byte is accounted for: the padding must
/// be zeros.
pub fn decode_spill(raw: &[u8], object: u64) -> Result<Vec<SaXattr>, FsError> {
    let corrupt =
        |what: String| FsError::Corrupt(format!("spill block of object {object}: {what}"));
    let Some((header, region)) = raw.split_first_chunk::<SPILL_HEADER_SIZE>() else {
        return Err(corrupt(format!("{} bytes", raw.len())));
    };
    let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    if magic != SPILL_MAGIC {
        return Err(corrupt(format!("magic {magic:#010x}")));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != SPILL_FORMAT_VERSION || header[6..8] != [0, 0] {
        return Err(corrupt(format!(
            "format version {version} or reserved bytes"
        )));
    }
    let (entries, padding) = decode_sa_region(region).map_err(corrupt)?;
    if padding.iter().any(|&byte| byte != 0) || padding.len() >= SPILL_SIZE_MIN {
        return Err(corrupt(format!(
            "{} bytes of padding that are not zeros",
            padding.len()
        )));
    }
    Ok(entries)
}

/// How many of `entries` (a file's SA xattrs in order) the bonus buffer keeps, the rest going
/// to the spill block, for a znode that encodes to `base_len` bytes without them: all of them
/// if they fit the 320-byte bonus buffer; otherwise the longest prefix that fits its 192 bytes
/// beside a spill pointer, if the rest fits a spill block. None if they do not fit at all.
pub fn sa_split(base_len: usize, entries: &[SaXattr]) -> Option<usize> {
    if base_len + Znode::sa_region_len(entries) <= DNODE_BONUS_SIZE_MAX {
        return Some(entries.len());
    }
    let room = bonus_size_max(true).checked_sub(base_len)?;
    let mut kept = 0;
    let mut region = SA_HEADER_SIZE;
    while kept < entries.len() && region + entries[kept].encoded_len() <= room {
        region += entries[kept].encoded_len();
        kept += 1;
    }
    (spill_len(&entries[kept..]) <= SPILL_SIZE_MAX).then_some(kept)
}

/// Decode what follows a znode's inline target, as its layout `flags` say: the xattr
/// directory's object number and the SA region. Every byte must be accounted for.
fn decode_xattr_tail(mut raw: &[u8], flags: u64) -> Result<(u64, Vec<SaXattr>), String> {
    let mut xattr_dir = 0;
    if flags & ZNODE_FLAG_XATTR_DIR != 0 {
        let Some((object, rest)) = raw.split_first_chunk::<8>() else {
            return Err("xattr directory pointer cut short".into());
        };
        xattr_dir = u64::from_le_bytes(*object);
        if xattr_dir <= MASTER_NODE_OBJECT {
            return Err(format!("xattr directory object {xattr_dir}"));
        }
        raw = rest;
    }
    let mut entries: Vec<SaXattr> = Vec::new();
    if flags & ZNODE_FLAG_SA_XATTRS != 0 {
        let (decoded, rest) = decode_sa_region(raw)?;
        entries = decoded;
        raw = rest;
    }
    if !raw.is_empty() {
        return Err(format!("{} trailing bytes", raw.len()));
    }
    Ok((xattr_dir, entries))
}

/// The value of an entry of a hidden xattr directory (the key is the xattr's full name).
///
/// ```text
///   tag 0, inline:    0      1  tag
///                     1      V  the value (V <= 1023, the rest of the entry)
///   tag 1, in object: 0      1  tag
///                     1      8  object number of a plain object holding the value in its
///                                data from offset 0
///                     9      4  value length in bytes (<= 65536)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrDirValue {
    Inline(Vec<u8>),
    Object { object: u64, length: u32 },
}

/// Longest value kept inline in an xattr-directory entry.
pub const XATTR_DIR_INLINE_MAX: usize = crate::object::kv::VALUE_LEN_MAX - 1;
/// Largest xattr value (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_LEN_MAX: usize = 65536;
const XATTR_DIR_OBJECT_VALUE_SIZE: usize = 1 + 8 + 4;

impl XattrDirValue {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            XattrDirValue::Inline(value) => {
                assert!(value.len() <= XATTR_DIR_INLINE_MAX, "inline xattr value");
                let mut out = Vec::with_capacity(1 + value.len());
                out.push(0);
                out.extend_from_slice(value);
                out
            }
            XattrDirValue::Object { object, length } => {
                let mut out = Vec::with_capacity(XATTR_DIR_OBJECT_VALUE_SIZE);
                out.push(1);
                out.extend_from_slice(&object.to_le_bytes());
                out.extend_from_slice(&length.to_le_bytes());
                out
            }
        }
    }

    /// Decode an entry of the xattr directory `directory`.
    pub fn decode(raw: &[u8], directory: u64) -> Result<XattrDirValue, FsError> {
        let corrupt =
            |what: String| FsError::Corrupt(format!("xattr directory {directory}: {what}"));
        match raw.split_first() {
            Some((0, value)) if value.len() <= XATTR_DIR_INLINE_MAX => {
                Ok(XattrDirValue::Inline(value.to_vec()))
            }
            Some((1, rest)) if rest.len() == XATTR_DIR_OBJECT_VALUE_SIZE - 1 => {
                let object = u64::from_le_bytes(rest[0..8].try_into().expect("8 bytes"));
                let length = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes"));
                if object <= MASTER_NODE_OBJECT || length as usize > XATTR_VALUE_LEN_MAX {
                    return Err(corrupt(format!("value object {object} of {length} bytes")));
                }
                Ok(XattrDirValue::Object { object, length })
            }
            Some((tag, rest)) => Err(corrupt(format!(
                "entry tag {tag} with {} bytes after it",
                rest.len()
            ))),
            None => Err(corrupt("empty entry".into())),
        }
    }
}

/// The value of a directory entry (the key is the name).
///
/// ```text
///   offset  size  field
///        0     8  object number of the entry's inode
///        8     1  file kind code (FileKind::code: 1 regular .. 7 block device)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntryValue {
    pub object: u64,
    pub kind: FileKind,
}

pub const DIR_ENTRY_VALUE_SIZE: usize = 9;
const _: () = assert!(DIR_ENTRY_VALUE_SIZE == 8 + 1);
const _: () = assert!(DIR_ENTRY_VALUE_SIZE <= crate::object::kv::VALUE_LEN_MAX);

impl DirEntryValue {
    pub fn encode(&self) -> [u8; DIR_ENTRY_VALUE_SIZE] {
        let mut out = [0u8; DIR_ENTRY_VALUE_SIZE];
        out[0..8].copy_from_slice(&self.object.to_le_bytes());
        out[8] = self.kind.code();
        out
    }

    /// Decode the entry of directory `directory`.
    pub fn decode(raw: &[u8], directory: u64) -> Result<DirEntryValue, FsError> {
        if raw.len() != DIR_ENTRY_VALUE_SIZE {
            return Err(FsError::Corrupt(format!(
                "directory {directory}: entry value of {} bytes",
                raw.len()
            )));
        }
        let object = u64::from_le_bytes(raw[0..8].try_into().expect("8 bytes"));
        let kind = FileKind::from_code(raw[8]).ok_or_else(|| {
            FsError::Corrupt(format!("directory {directory}: file kind code {}", raw[8]))
        })?;
        if object <= MASTER_NODE_OBJECT {
            return Err(FsError::Corrupt(format!(
                "directory {directory}: entry names object {object}"
            )));
        }
        Ok(DirEntryValue { object, kind })
    }
}

/// The key of an unlinked-set entry: the object number, 8 bytes little-endian (the value is
/// empty).
pub fn unlinked_key(object: u64) -> [u8; 8] {
    object.to_le_bytes()
}

pub fn decode_unlinked_key(raw: &[u8]) -> Result<u64, FsError> {
    let bytes: [u8; 8] = raw
        .try_into()
        .map_err(|_| FsError::Corrupt(format!("unlinked set: key of {} bytes", raw.len())))?;
    let object = u64::from_le_bytes(bytes);
    if object <= MASTER_NODE_OBJECT {
        return Err(FsError::Corrupt(format!("unlinked set: object {object}")));
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn timestamp() -> impl Strategy<Value = Timestamp> {
        (any::<i64>(), 0u32..1_000_000_000).prop_map(|(seconds, nanoseconds)| Timestamp {
            seconds,
            nanoseconds,
        })
    }

    fn kind() -> impl Strategy<Value = FileKind> {
        (1u8..=7).prop_map(|code| FileKind::from_code(code).unwrap())
    }

    fn sa_xattrs() -> impl Strategy<Value = Vec<SaXattr>> {
        sa_xattrs_counted(0..4)
    }

    /// Generated, not filtered, where at least one entry is needed: a filter would discard a
    /// quarter of the cases, and a long run (`TARN_FUZZ_CASES` in the hundreds of thousands)
    /// would spend that share generating cases it throws away.
    fn sa_xattrs_counted(count: std::ops::Range<usize>) -> impl Strategy<Value = Vec<SaXattr>> {
        proptest::collection::vec(
            (
                proptest::collection::vec(1u8..=255, 0..12),
                proptest::collection::vec(any::<u8>(), 0..40),
            ),
            count,
        )
        .prop_map(|entries| {
            entries
                .into_iter()
                .enumerate()
                .map(|(index, (suffix, value))| {
                    // The index keeps names unique.
                    let mut name = format!("user.{index}.").into_bytes();
                    name.extend(suffix);
                    SaXattr { name, value }
                })
                .collect()
        })
    }

    prop_compose! {
        fn znode_unchecked()(kind in kind(), permissions in 0u32..=0o7777, uid: u32, gid: u32,
                   links: u64, size: u64, atime in timestamp(), mtime in timestamp(),
                   ctime in timestamp(), crtime in timestamp(), parent: u64, unlinked: bool,
                   rdev: u64,
                   target in proptest::collection::vec(any::<u8>(), 0..=INLINE_TARGET_MAX),
                   xattr_dir in prop_oneof![Just(0u64), 2u64..], sa_xattrs in sa_xattrs(),
                   spill: bool,
                   project in prop_oneof![Just(0u32), 1..PROJECT_ID_INVALID],
                   inherit: bool)
                   -> Znode {
            let inherit = inherit && kind == FileKind::Directory;
            Znode {
                mode: kind.mode_bits() | permissions,
                uid, gid, project, links, size, atime, mtime, ctime, crtime, parent,
                flags: if unlinked { ZNODE_FLAG_UNLINKED } else { 0 }
                    | if inherit { ZNODE_FLAG_PROJECT_INHERIT } else { 0 },
                rdev,
                inline_target: if kind == FileKind::Symlink { target } else { Vec::new() },
                xattr_dir,
                sa_xattrs,
                spill: if spill { SpillXattrs::Unread } else { SpillXattrs::None },
            }
        }
    }

    /// Znodes that fit a bonus buffer (as the xattr code keeps them).
    fn znode() -> impl Strategy<Value = Znode> {
        znode_unchecked().prop_map(|mut znode| {
            while znode.encoded_len() > bonus_size_max(znode.spill.on_disk()) {
                if znode.sa_xattrs.pop().is_none() {
                    znode.inline_target.truncate(INLINE_TARGET_MAX - 8);
                    znode.xattr_dir = 0;
                    znode.spill = SpillXattrs::None;
                }
            }
            znode
        })
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn znodes_round_trip(znode in znode()) {
            let encoded = znode.encode();
            prop_assert!(encoded.len() <= DNODE_BONUS_SIZE_MAX);
            prop_assert_eq!(Znode::decode(&encoded, 7).unwrap(), znode);
        }

        #[test]
        fn arbitrary_bonus_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..=DNODE_BONUS_SIZE_MAX)) {
            let _ = Znode::decode(&raw, 7);
        }

        #[test]
        fn corrupted_znode_never_panics(znode in znode(), at in 0usize..DNODE_BONUS_SIZE_MAX, byte: u8) {
            let mut encoded = znode.encode();
            let at = at % encoded.len();
            encoded[at] = byte;
            if let Ok(decoded) = Znode::decode(&encoded, 7) {
                // Whatever decodes accounts for every byte (only the timestamps' padding is
                // not checked) and round-trips.
                let again = decoded.encode();
                prop_assert_eq!(again.len(), encoded.len());
                prop_assert_eq!(Znode::decode(&again, 7).unwrap(), decoded);
            }
        }

        #[test]
        fn truncated_or_extended_znode_is_refused(znode in znode(), cut in 1usize..64) {
            let encoded = znode.encode();
            let cut = cut.min(encoded.len());
            prop_assert!(Znode::decode(&encoded[..encoded.len() - cut], 7).is_err());
            let mut longer = encoded.clone();
            longer.push(0);
            prop_assert!(Znode::decode(&longer, 7).is_err());
        }

        #[test]
        fn spill_blocks_round_trip(entries in sa_xattrs_counted(1..4)) {
            let encoded = encode_spill(&entries);
            prop_assert!(encoded.len().is_multiple_of(SPILL_SIZE_MIN));
            prop_assert_eq!(decode_spill(&encoded, 7).unwrap(), entries);
        }

        #[test]
        fn damaged_spill_block_never_panics(entries in sa_xattrs_counted(1..4), at: usize, byte: u8, cut in 0usize..600) {
            let mut encoded = encode_spill(&entries);
            let at = at % encoded.len();
            encoded[at] = byte;
            if let Ok(decoded) = decode_spill(&encoded, 7) {
                prop_assert_eq!(encode_spill(&decoded), encoded.clone());
            }
            let _ = decode_spill(&encoded[..encoded.len().saturating_sub(cut)], 7);
        }

        #[test]
        fn sa_split_keeps_what_fits(base in ZNODE_SIZE..=DNODE_BONUS_SIZE_MAX, entries in proptest::collection::vec((1usize..=255, 0usize..=4000), 0..60)) {
            let entries: Vec<SaXattr> = entries.into_iter().enumerate().map(|(index, (name, value))| SaXattr {
                name: { let mut name_bytes = format!("user.{index}.").into_bytes(); name_bytes.resize(name.max(name_bytes.len()).min(255), b'n'); name_bytes },
                value: vec![1; value],
            }).collect();
            match sa_split(base, &entries) {
                Some(kept) if kept == entries.len() && base + Znode::sa_region_len(&entries) <= DNODE_BONUS_SIZE_MAX => {}
                Some(kept) => {
                    prop_assert!(base + Znode::sa_region_len(&entries[..kept]) <= bonus_size_max(true));
                    prop_assert!(spill_len(&entries[kept..]) <= SPILL_SIZE_MAX);
                    prop_assert!(kept < entries.len());
                }
                None => {
                    prop_assert!(base + Znode::sa_region_len(&entries) > DNODE_BONUS_SIZE_MAX);
                    prop_assert!(base > bonus_size_max(true) || spill_len(&entries) > SPILL_SIZE_MAX);
                }
            }
        }

        #[test]
        fn xattr_dir_values_round_trip(value in proptest::collection::vec(any::<u8>(), 0..=XATTR_DIR_INLINE_MAX), object in 2u64.., length in 0u32..=XATTR_VALUE_LEN_MAX as u32) {
            for entry in [XattrDirValue::Inline(value.clone()), XattrDirValue::Object { object, length }] {
                prop_assert_eq!(XattrDirValue::decode(&entry.encode(), 3).unwrap(), entry);
            }
        }

        #[test]
        fn arbitrary_xattr_dir_value_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = XattrDirValue::decode(&raw, 3);
        }

        #[test]
        fn dir_entries_round_trip(object in 2u64.., kind in kind()) {
            let value = DirEntryValue { object, kind };
            prop_assert_eq!(DirEntryValue::decode(&value.encode(), 3).unwrap(), value);
        }

        #[test]
        fn arbitrary_dir_entry_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = DirEntryValue::decode(&raw, 3);
        }

        #[test]
        fn unlinked_keys_round_trip(object in 2u64..) {
            prop_assert_eq!(decode_unlinked_key(&unlinked_key(object)).unwrap(), object);
        }

        #[test]
        fn arbitrary_unlinked_key_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = decode_unlinked_key(&raw);
        }
    }

    #[test]
    fn bad_znodes_are_refused() {
        let znode = Znode {
            mode: MODE_REGULAR | 0o644,
            uid: 1,
            gid: 2,
            project: 0,
            links: 1,
            size: 10,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            parent: 2,
            flags: 0,
            rdev: 0,
            inline_target: Vec::new(),
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        };
        let good = znode.encode();
        assert!(Znode::decode(&good, 1).is_ok());
        assert!(Znode::decode(&good[..100], 1).is_err(), "short");
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert!(Znode::decode(&bad, 1).is_err(), "magic");
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&0o644u32.to_le_bytes());
        assert!(Znode::decode(&bad, 1).is_err(), "no type bits");
        let mut bad = good.clone();
        bad[48..52].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        assert!(Znode::decode(&bad, 1).is_err(), "nanoseconds");
        let mut bad = good.clone();
        bad[112] = 2;
        assert!(Znode::decode(&bad, 1).is_err(), "unknown flag");
        let mut bad = good.clone();
        bad.push(b'x');
        assert!(Znode::decode(&bad, 1).is_err(), "trailing bytes");
        // A znode of the first format (no xattr tail) is exactly what a file without xattrs
        // still encodes to, so old pools read unchanged.
        assert_eq!(good.len(), ZNODE_SIZE);
        assert_eq!(u64::from_le_bytes(good[112..120].try_into().unwrap()), 0);
        let mut with_xattrs = znode.clone();
        with_xattrs.xattr_dir = 9;
        with_xattrs.sa_xattrs.push(SaXattr {
            name: b"user.a".to_vec(),
            value: b"1".to_vec(),
        });
        let tailed = with_xattrs.encode();
        assert_eq!(Znode::decode(&tailed, 1).unwrap(), with_xattrs);
        let mut bad = tailed.clone();
        bad[112] &= !(ZNODE_FLAG_SA_XATTRS as u8);
        assert!(Znode::decode(&bad, 1).is_err(), "SA bytes without the flag");
        let mut bad = tailed.clone();
        bad[ZNODE_SIZE..ZNODE_SIZE + 8].copy_from_slice(&1u64.to_le_bytes());
        assert!(Znode::decode(&bad, 1).is_err(), "xattr directory 1");
        let mut duplicate = with_xattrs.clone();
        duplicate.sa_xattrs.push(duplicate.sa_xattrs[0].clone());
        assert!(
            Znode::decode(&duplicate.encode(), 1).is_err(),
            "a name twice"
        );
        assert!(XattrDirValue::decode(&[], 1).is_err());
        assert!(XattrDirValue::decode(&[2, 0], 1).is_err(), "tag 2");
        assert!(
            XattrDirValue::decode(&[1; 13], 1).is_err(),
            "length too large"
        );
        assert!(DirEntryValue::decode(&[0; 9], 1).is_err(), "kind 0");
        assert!(DirEntryValue::decode(&[5, 0, 0, 0, 0, 0, 0, 0, 8], 1).is_err());
    }

    /// Project IDs took the field at offset 20 that every earlier znode had zero and the
    /// decoder refused otherwise: a node in no project without the inherit flag must still
    /// encode to exactly those bytes, or a pool written before would not read back the same,
    /// and a project, the inherit flag and both together must round-trip.
    #[test]
    fn project_ids_round_trip_and_keep_the_old_bytes() {
        let directory = Znode {
            mode: MODE_DIRECTORY | 0o755,
            uid: 7,
            gid: 8,
            project: PROJECT_ID_DEFAULT,
            links: 2,
            size: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            parent: 2,
            flags: 0,
            rdev: 0,
            inline_target: Vec::new(),
            xattr_dir: 0,
            sa_xattrs: Vec::new(),
            spill: SpillXattrs::None,
        };
        let old = directory.encode();
        assert_eq!(old.len(), ZNODE_SIZE);
        assert_eq!(
            old[20..24],
            [0; 4],
            "no project leaves the old reserved field zero"
        );
        assert_eq!(old[112..120], [0; 8], "and no flag set");

        let mut in_project = directory.clone();
        in_project.project = 42;
        in_project.flags = ZNODE_FLAG_PROJECT_INHERIT;
        let encoded = in_project.encode();
        assert_eq!(Znode::decode(&encoded, 3).unwrap(), in_project);
        assert!(Znode::decode(&encoded, 3).unwrap().project_inherit());
        assert_eq!(encoded[20..24], 42u32.to_le_bytes());
        assert_eq!(encoded[112..120], ZNODE_FLAG_PROJECT_INHERIT.to_le_bytes());
        let differing: Vec<usize> = (0..ZNODE_SIZE)
            .filter(|&at| encoded[at] != old[at])
            .collect();
        assert_eq!(
            differing,
            vec![20, 112],
            "only the project and the flag differ"
        );
        let owners = znode_owners(&encoded).unwrap();
        assert_eq!((owners.user, owners.group, owners.project), (7, 8, 42));
        assert_eq!(owners, in_project.owners());

        let mut largest = directory.clone();
        largest.project = PROJECT_ID_INVALID - 1;
        assert_eq!(Znode::decode(&largest.encode(), 3).unwrap(), largest);

        let mut bad = encoded.clone();
        bad[20..24].copy_from_slice(&PROJECT_ID_INVALID.to_le_bytes());
        assert!(Znode::decode(&bad, 3).is_err(), "the invalid project ID");
        let mut file = in_project.clone();
        file.mode = MODE_REGULAR | 0o644;
        file.flags = 0;
        file.links = 1;
        let mut bad = file.encode();
        assert_eq!(Znode::decode(&bad, 3).unwrap().project, 42);
        bad[112] |= ZNODE_FLAG_PROJECT_INHERIT as u8;
        assert!(
            Znode::decode(&bad, 3).is_err(),
            "the inherit flag on a regular file"
        );
    }
}
