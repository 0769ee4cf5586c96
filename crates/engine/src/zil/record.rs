//! The records of the intent log (OpenZFS lr_*_t): what one change did, as it is encoded in a
//! log block (format.rs).
//!
//! # Theory
//! A record says what a change did in absolute terms: the bytes now at an offset, the
//! attribute values now set, the name made or removed and the object it names. Each carries
//! the txg of its change (replay skips records whose txg the claim found synced), the object it
//! is about and that object's generation (so that a record never lands on a different object
//! under the same number). Namespace records (create, remove, link, rename) name the
//! directories and names they touch and the object their name refers to, so that replay can
//! tell whether the change is already there: a name that already names the record's object, or
//! no longer does, is skipped, which makes replaying a prefix twice converge (fs/intent.rs).
//! Decoding never panics: a malformed record is a [`LogFormatError`], the chain's end.
//!
//! # Byte layouts (little-endian, docs/design/08-zil.md §2.4a)
//! Record, 8-byte aligned, common part 40 bytes:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 2 | type: 1 write, 2 setattr, 3 create, 4 remove, 5 link, 6 rename, 7 xattr, 8 write-indirect |
//! | 2 | 2 | reserved, zero |
//! | 4 | 4 | record length in bytes, a multiple of 8, ≥ 40 |
//! | 8 | 8 | record sequence number (increasing within a chain) |
//! | 16 | 8 | txg the change belongs to |
//! | 24 | 8 | object (inode) number |
//! | 32 | 8 | object generation (the txg that created it) |
//!
//! Then, by type (variable parts back to back, the record zero-padded to a multiple of 8):
//! - write (WR_IMMEDIATE): 40 `offset` u64, 48 `length` u64, 56 the data.
//! - write-indirect (WR_INDIRECT): 40 `offset` u64, 48 `length` u64, 56 offset of the bytes in
//!   the block u64, 64 the block pointer (128 bytes): 192 bytes. The block is a level-0 data
//!   block, neither a hole, embedded nor a gang; the bytes lie within it.
//! - setattr: 40 mask u32 (bit 0 mode, 1 uid, 2 gid, 3 size, 4 atime, 5 mtime, 6 project),
//!   44 mode u32, 48 uid u32, 52 gid u32, 56 size u64, 64 atime (i64 seconds, u32
//!   nanoseconds, 4 zero), 80 mtime (same): 96 bytes; with mask bit 6 (and only then) 8 more,
//!   OpenZFS's TX_SETATTR with an XAT_PROJID tail: 96 project ID u32 (not 0xffffffff),
//!   100 project flags u32 (bit 0: the directory's new nodes inherit the project; other bits
//!   zero): 104 bytes. A setattr without a project change keeps the 96 bytes it always had.
//! - create (TX_CREATE, TX_MKDIR, TX_MKNOD, TX_SYMLINK; the kind is in the mode's type bits):
//!   40 directory u64, 48 mode u32 (as requested), 52 umask u32, 56 uid u32, 60 gid u32,
//!   64 rdev u64, 72 time (as setattr's), 88 name length u16, 90 zero u16, 92 symlink target
//!   length u32, 96 name, then target. `object` is the new object.
//! - remove (TX_REMOVE, TX_RMDIR): 40 directory u64, 48 name length u16, 50 is-directory u8
//!   (0 or 1), 51 zero (5 bytes), 56 name. `object` is the object the name named.
//! - link (TX_LINK): 40 directory u64, 48 name length u16, 50 zero (6 bytes), 56 name.
//!   `object` is the object linked.
//! - rename (TX_RENAME): 40 old directory u64, 48 new directory u64, 56 flags u32 (Linux's
//!   RENAME_NOREPLACE 1, RENAME_EXCHANGE 2), 60 old name length u16, 62 new name length u16,
//!   64 old name, then new name. `object` is the object the old name named.
//! - xattr (TX_SETSAXATTR): 40 name length u16, 42 removed u8 (0 or 1), 43 zero, 44 value
//!   length u32, 48 name, then value (none when removed). `object` is the file.

use crate::block::blkptr::{BlockPtr, BLKPTR_SIZE};
use crate::types::Txg;

use super::fields::{bad, put_u32, put_u64, u32_at, u64_at};
use crate::object::log_header::LogFormatError;

/// Size of the part every record starts with.
pub const RECORD_COMMON_SIZE: usize = 40;
/// Size of a setattr record.
pub const SETATTR_RECORD_SIZE: usize = 96;
/// Size of a setattr record that changes the project (mask bit [`setattr_mask::PROJECT`]).
pub const SETATTR_PROJECT_RECORD_SIZE: usize = SETATTR_RECORD_SIZE + 8;
/// The project flag of a setattr record: the directory's new nodes inherit its project.
const SETATTR_PROJECT_INHERIT: u32 = 1;
/// The project ID no record may carry (Linux's invalid project ID, refused by the znode).
const PROJECT_ID_INVALID: u32 = u32::MAX;
/// Size of a write record's fixed part (data follows).
pub const WRITE_RECORD_FIXED: usize = 56;
/// Longest name in a namespace or xattr record (a directory entry's or xattr's limit).
pub const NAME_LEN_MAX: usize = 255;
/// Longest symlink target in a create record.
pub const TARGET_LEN_MAX: usize = 4096;
/// Longest xattr value in an xattr record.
pub const XATTR_VALUE_LEN_MAX: usize = 65536;
/// The rename flags a record may carry (RENAME_NOREPLACE, RENAME_EXCHANGE).
pub const RENAME_FLAGS_LOGGED: u32 = 3;

const RECORD_WRITE: u16 = 1;
const RECORD_SETATTR: u16 = 2;
const RECORD_CREATE: u16 = 3;
const RECORD_REMOVE: u16 = 4;
const RECORD_LINK: u16 = 5;
const RECORD_RENAME: u16 = 6;
const RECORD_XATTR: u16 = 7;
const RECORD_WRITE_INDIRECT: u16 = 8;

const CREATE_FIXED: usize = 96;
const REMOVE_FIXED: usize = 56;
const LINK_FIXED: usize = 56;
const RENAME_FIXED: usize = 64;
const XATTR_FIXED: usize = 48;
/// A write-indirect record: the common part, offset, length, offset in the block, pointer.
const WRITE_INDIRECT_SIZE: usize = 64 + BLKPTR_SIZE;

/// Which attributes a setattr record sets.
pub mod setattr_mask {
    pub const MODE: u32 = 1;
    pub const UID: u32 = 2;
    pub const GID: u32 = 4;
    pub const SIZE: u32 = 8;
    pub const ATIME: u32 = 16;
    pub const MTIME: u32 = 32;
    /// The project ID and the project inherit flag (8 more bytes).
    pub const PROJECT: u32 = 64;
    pub const ALL: u32 = 127;
}

/// A time in a record: seconds and nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogTime {
    pub seconds: i64,
    pub nanoseconds: u32,
}

/// What a record says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordBody {
    /// `data` was written at `offset` (WR_IMMEDIATE: the bytes are in the record).
    Write { offset: u64, data: Vec<u8> },
    /// `length` bytes were written at `offset`, and are bytes `block_offset..` of the data
    /// block `bp` names, written to its final place at commit (WR_INDIRECT): replay reads
    /// them from there; the txg's sync adopts the block instead of writing it again.
    WriteIndirect {
        offset: u64,
        length: u64,
        block_offset: u64,
        bp: BlockPtr,
    },
    /// Attributes set (those in `mask`); a size is a truncate or extend. `project` and
    /// `project_inherit` are 0 and false unless the mask has [`setattr_mask::PROJECT`].
    Setattr {
        mask: u32,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        atime: LogTime,
        mtime: LogTime,
        project: u32,
        project_inherit: bool,
    },
    /// The record's object was made as `name` in `dir`: a file, directory, device node or
    /// symlink (`target`), as the type bits of `mode` say; `mode` and `umask` as the caller
    /// gave them (replay applies the same umask and ACL inheritance), `time` its birth.
    Create {
        dir: u64,
        name: Vec<u8>,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        time: LogTime,
        target: Vec<u8>,
    },
    /// The entry `name` of `dir`, naming the record's object, was removed (rmdir if
    /// `directory`).
    Remove {
        dir: u64,
        name: Vec<u8>,
        directory: bool,
    },
    /// The record's object got the new name `name` in `dir`.
    Link { dir: u64, name: Vec<u8> },
    /// `oldname` in `olddir`, naming the record's object, was renamed to `newname` in `newdir`.
    Rename {
        olddir: u64,
        oldname: Vec<u8>,
        newdir: u64,
        newname: Vec<u8>,
        flags: u32,
    },
    /// The record's object's xattr `name` was set to `value`, or removed (`None`).
    Xattr {
        name: Vec<u8>,
        value: Option<Vec<u8>>,
    },
}

impl RecordBody {
    /// Whether this record changes a directory (create, remove, link, rename) or a project:
    /// such records are committed in order, every one of them up to the fsync's. A project
    /// change counts because the namespace changes after it depend on it: a create in a
    /// directory with the inherit flag takes the directory's project at replay as it did at
    /// first, and a link or rename into it is allowed only within that project, so replay
    /// must never see such a create without the project change that came before it.
    pub fn is_namespace(&self) -> bool {
        match self {
            RecordBody::Create { .. }
            | RecordBody::Remove { .. }
            | RecordBody::Link { .. }
            | RecordBody::Rename { .. } => true,
            RecordBody::Setattr { mask, .. } => mask & setattr_mask::PROJECT != 0,
            _ => false,
        }
    }
}

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub sequence: u64,
    pub txg: Txg,
    pub object: u64,
    pub generation: u64,
    pub body: RecordBody,
}

/// Encoded size of a write record carrying `data_len` bytes.
pub fn write_record_size(data_len: usize) -> usize {
    (WRITE_RECORD_FIXED + data_len).next_multiple_of(8)
}

fn put_time(out: &mut [u8], at: usize, time: LogTime) {
    out[at..at + 8].copy_from_slice(&time.seconds.to_le_bytes());
    put_u32(out, at + 8, time.nanoseconds);
}

fn time_at(bytes: &[u8], at: usize) -> Result<LogTime, LogFormatError> {
    let seconds = i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let nanoseconds = u32_at(bytes, at + 8);
    if nanoseconds >= 1_000_000_000 || u32_at(bytes, at + 12) != 0 {
        return bad(format!("record time with {nanoseconds} nanoseconds"));
    }
    Ok(LogTime {
        seconds,
        nanoseconds,
    })
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

/// The variable part of a record of `length` bytes whose fixed part is `fixed` bytes and
/// whose variable fields have `lengths`: the fields, after checking that the record is exactly
/// that long and its padding zero.
fn variable_fields<'a>(
    raw: &'a [u8],
    fixed: usize,
    lengths: &[usize],
) -> Result<Vec<&'a [u8]>, LogFormatError> {
    let used = fixed + lengths.iter().sum::<usize>();
    if used.next_multiple_of(8) != raw.len() {
        return bad(format!(
            "record of {} bytes for {used} bytes of fields",
            raw.len()
        ));
    }
    if raw[used..].iter().any(|&byte| byte != 0) {
        return bad("record padding is not zero");
    }
    let mut fields = Vec::with_capacity(lengths.len());
    let mut at = fixed;
    for &length in lengths {
        fields.push(&raw[at..at + length]);
        at += length;
    }
    Ok(fields)
}

/// A directory entry or xattr name: 1..=255 bytes.
fn check_name(name: &[u8]) -> Result<(), LogFormatError> {
    if name.is_empty() || name.len() > NAME_LEN_MAX {
        return bad(format!("record name of {} bytes", name.len()));
    }
    Ok(())
}

fn zero(raw: &[u8], range: std::ops::Range<usize>) -> Result<(), LogFormatError> {
    if raw[range.clone()].iter().any(|&byte| byte != 0) {
        return bad(format!("record bytes {range:?} are not zero"));
    }
    Ok(())
}

/// Copy `parts` back to back into `bytes` from `at`.
fn put_parts(bytes: &mut [u8], at: usize, parts: &[&[u8]]) {
    let mut at = at;
    for part in parts {
        bytes[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
}

impl Record {
    /// Encoded size in bytes.
    pub fn encoded_size(&self) -> usize {
        let used = match &self.body {
            RecordBody::Write { data, .. } => WRITE_RECORD_FIXED + data.len(),
            RecordBody::WriteIndirect { .. } => WRITE_INDIRECT_SIZE,
            RecordBody::Setattr { mask, .. } if mask & setattr_mask::PROJECT != 0 => {
                SETATTR_PROJECT_RECORD_SIZE
            }
            RecordBody::Setattr { .. } => SETATTR_RECORD_SIZE,
            RecordBody::Create { name, target, .. } => CREATE_FIXED + name.len() + target.len(),
            RecordBody::Remove { name, .. } => REMOVE_FIXED + name.len(),
            RecordBody::Link { name, .. } => LINK_FIXED + name.len(),
            RecordBody::Rename {
                oldname, newname, ..
            } => RENAME_FIXED + oldname.len() + newname.len(),
            RecordBody::Xattr { name, value } => {
                XATTR_FIXED + name.len() + value.as_ref().map_or(0, Vec::len)
            }
        };
        used.next_multiple_of(8)
    }

    /// Append the encoded record to `out`. The caller keeps names and values within the
    /// limits above (the file system's own).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let size = self.encoded_size();
        out.resize(start + size, 0);
        let bytes = &mut out[start..];
        let kind = match self.body {
            RecordBody::Write { .. } => RECORD_WRITE,
            RecordBody::WriteIndirect { .. } => RECORD_WRITE_INDIRECT,
            RecordBody::Setattr { .. } => RECORD_SETATTR,
            RecordBody::Create { .. } => RECORD_CREATE,
            RecordBody::Remove { .. } => RECORD_REMOVE,
            RecordBody::Link { .. } => RECORD_LINK,
            RecordBody::Rename { .. } => RECORD_RENAME,
            RecordBody::Xattr { .. } => RECORD_XATTR,
        };
        put_u16(bytes, 0, kind);
        put_u32(bytes, 4, size as u32);
        put_u64(bytes, 8, self.sequence);
        put_u64(bytes, 16, self.txg.0);
        put_u64(bytes, 24, self.object);
        put_u64(bytes, 32, self.generation);
        match &self.body {
            RecordBody::Write { offset, data } => {
                put_parts(bytes, WRITE_RECORD_FIXED, &[data]);
                put_u64(bytes, 40, *offset);
                put_u64(bytes, 48, data.len() as u64);
            }
            RecordBody::WriteIndirect {
                offset,
                length,
                block_offset,
                bp,
            } => {
                put_u64(bytes, 40, *offset);
                put_u64(bytes, 48, *length);
                put_u64(bytes, 56, *block_offset);
                bp.encode_into(&mut bytes[64..64 + BLKPTR_SIZE]);
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
                put_u32(bytes, 40, *mask);
                put_u32(bytes, 44, *mode);
                put_u32(bytes, 48, *uid);
                put_u32(bytes, 52, *gid);
                put_u64(bytes, 56, *size);
                put_time(bytes, 64, *atime);
                put_time(bytes, 80, *mtime);
                if mask & setattr_mask::PROJECT != 0 {
                    put_u32(bytes, 96, *project);
                    let flags = if *project_inherit {
                        SETATTR_PROJECT_INHERIT
                    } else {
                        0
                    };
                    put_u32(bytes, 100, flags);
                } else {
                    debug_assert!(
                        *project == 0 && !project_inherit,
                        "a project in a setattr record without the project bit"
                    );
                }
            }
            RecordBody::Create {
                dir,
                name,
                mode,
                umask,
                uid,
                gid,
                rdev,
                time,
                target,
            } => {
                put_parts(bytes, CREATE_FIXED, &[name, target]);
                put_u64(bytes, 40, *dir);
                put_u32(bytes, 48, *mode);
                put_u32(bytes, 52, *umask);
                put_u32(bytes, 56, *uid);
                put_u32(bytes, 60, *gid);
                put_u64(bytes, 64, *rdev);
                put_time(bytes, 72, *time);
                put_u16(bytes, 88, name.len() as u16);
                put_u32(bytes, 92, target.len() as u32);
            }
            RecordBody::Remove {
                dir,
                name,
                directory,
            } => {
                put_parts(bytes, REMOVE_FIXED, &[name]);
                put_u64(bytes, 40, *dir);
                put_u16(bytes, 48, name.len() as u16);
                bytes[50] = u8::from(*directory);
            }
            RecordBody::Link { dir, name } => {
                put_parts(bytes, LINK_FIXED, &[name]);
                put_u64(bytes, 40, *dir);
                put_u16(bytes, 48, name.len() as u16);
            }
            RecordBody::Rename {
                olddir,
                oldname,
                newdir,
                newname,
                flags,
            } => {
                put_parts(bytes, RENAME_FIXED, &[oldname, newname]);
                put_u64(bytes, 40, *olddir);
                put_u64(bytes, 48, *newdir);
                put_u32(bytes, 56, *flags);
                put_u16(bytes, 60, oldname.len() as u16);
                put_u16(bytes, 62, newname.len() as u16);
            }
            RecordBody::Xattr { name, value } => {
                let value_bytes: &[u8] = value.as_deref().unwrap_or(&[]);
                put_parts(bytes, XATTR_FIXED, &[name, value_bytes]);
                put_u16(bytes, 40, name.len() as u16);
                bytes[42] = u8::from(value.is_none());
                put_u32(bytes, 44, value_bytes.len() as u32);
            }
        }
    }
}

fn decode_write(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    let length = raw.len();
    if length < WRITE_RECORD_FIXED {
        return bad(format!("write record of {length} bytes"));
    }
    let offset = u64_at(raw, 40);
    let data_len = u64_at(raw, 48);
    if data_len == 0
        || write_record_size(data_len.min(u32::MAX as u64) as usize) != length
        || offset
            .checked_add(data_len)
            .is_none_or(|end| end > i64::MAX as u64)
    {
        return bad(format!(
            "write record of {length} bytes: {data_len} bytes at {offset}"
        ));
    }
    let data = variable_fields(raw, WRITE_RECORD_FIXED, &[data_len as usize])?;
    Ok(RecordBody::Write {
        offset,
        data: data[0].to_vec(),
    })
}

fn decode_write_indirect(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() != WRITE_INDIRECT_SIZE {
        return bad(format!("write-indirect record of {} bytes", raw.len()));
    }
    let offset = u64_at(raw, 40);
    let length = u64_at(raw, 48);
    let block_offset = u64_at(raw, 56);
    let bp = BlockPtr::decode(&raw[64..64 + BLKPTR_SIZE])
        .map_err(|error| LogFormatError(format!("write-indirect record: {error}")))?;
    let block_size = bp.size_logical as u64;
    let fits = length > 0
        && block_offset
            .checked_add(length)
            .is_some_and(|end| end <= block_size)
        && offset
            .checked_add(length)
            .is_some_and(|end| end <= i64::MAX as u64)
        && offset >= block_offset
        && (offset - block_offset).is_multiple_of(block_size.max(1));
    if !fits || bp.is_hole() || bp.embedded || bp.is_gang() || bp.level != 0 {
        return bad(format!(
            "write-indirect record: {length} bytes at {offset}, {block_offset} into {bp}"
        ));
    }
    Ok(RecordBody::WriteIndirect {
        offset,
        length,
        block_offset,
        bp,
    })
}

fn decode_setattr(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < SETATTR_RECORD_SIZE {
        return bad(format!("setattr record of {} bytes", raw.len()));
    }
    let mask = u32_at(raw, 40);
    if mask & !setattr_mask::ALL != 0 || mask == 0 {
        return bad(format!("setattr record mask {mask:#x}"));
    }
    let has_project = mask & setattr_mask::PROJECT != 0;
    let expected = if has_project {
        SETATTR_PROJECT_RECORD_SIZE
    } else {
        SETATTR_RECORD_SIZE
    };
    if raw.len() != expected {
        return bad(format!(
            "setattr record of {} bytes with mask {mask:#x}",
            raw.len()
        ));
    }
    let (project, project_inherit) = if has_project {
        let project = u32_at(raw, 96);
        let flags = u32_at(raw, 100);
        if project == PROJECT_ID_INVALID || flags & !SETATTR_PROJECT_INHERIT != 0 {
            return bad(format!(
                "setattr record: project {project:#x} with flags {flags:#x}"
            ));
        }
        (project, flags & SETATTR_PROJECT_INHERIT != 0)
    } else {
        (0, false)
    };
    Ok(RecordBody::Setattr {
        mask,
        mode: u32_at(raw, 44),
        uid: u32_at(raw, 48),
        gid: u32_at(raw, 52),
        size: u64_at(raw, 56),
        atime: time_at(raw, 64)?,
        mtime: time_at(raw, 80)?,
        project,
        project_inherit,
    })
}

fn decode_create(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < CREATE_FIXED {
        return bad(format!("create record of {} bytes", raw.len()));
    }
    zero(raw, 90..92)?;
    let name_len = u16_at(raw, 88) as usize;
    let target_len = u32_at(raw, 92) as usize;
    if target_len > TARGET_LEN_MAX {
        return bad(format!(
            "create record: symlink target of {target_len} bytes"
        ));
    }
    let fields = variable_fields(raw, CREATE_FIXED, &[name_len, target_len])?;
    check_name(fields[0])?;
    Ok(RecordBody::Create {
        dir: u64_at(raw, 40),
        name: fields[0].to_vec(),
        mode: u32_at(raw, 48),
        umask: u32_at(raw, 52),
        uid: u32_at(raw, 56),
        gid: u32_at(raw, 60),
        rdev: u64_at(raw, 64),
        time: time_at(raw, 72)?,
        target: fields[1].to_vec(),
    })
}

fn decode_remove(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < REMOVE_FIXED || raw[50] > 1 {
        return bad(format!("remove record of {} bytes", raw.len()));
    }
    zero(raw, 51..56)?;
    let fields = variable_fields(raw, REMOVE_FIXED, &[u16_at(raw, 48) as usize])?;
    check_name(fields[0])?;
    Ok(RecordBody::Remove {
        dir: u64_at(raw, 40),
        name: fields[0].to_vec(),
        directory: raw[50] == 1,
    })
}

fn decode_link(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < LINK_FIXED {
        return bad(format!("link record of {} bytes", raw.len()));
    }
    zero(raw, 50..56)?;
    let fields = variable_fields(raw, LINK_FIXED, &[u16_at(raw, 48) as usize])?;
    check_name(fields[0])?;
    Ok(RecordBody::Link {
        dir: u64_at(raw, 40),
        name: fields[0].to_vec(),
    })
}

fn decode_rename(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < RENAME_FIXED {
        return bad(format!("rename record of {} bytes", raw.len()));
    }
    let flags = u32_at(raw, 56);
    if flags & !RENAME_FLAGS_LOGGED != 0 {
        return bad(format!("rename record flags {flags:#x}"));
    }
    let lengths = [u16_at(raw, 60) as usize, u16_at(raw, 62) as usize];
    let fields = variable_fields(raw, RENAME_FIXED, &lengths)?;
    check_name(fields[0])?;
    check_name(fields[1])?;
    Ok(RecordBody::Rename {
        olddir: u64_at(raw, 40),
        oldname: fields[0].to_vec(),
        newdir: u64_at(raw, 48),
        newname: fields[1].to_vec(),
        flags,
    })
}

fn decode_xattr(raw: &[u8]) -> Result<RecordBody, LogFormatError> {
    if raw.len() < XATTR_FIXED || raw[42] > 1 || raw[43] != 0 {
        return bad(format!("xattr record of {} bytes", raw.len()));
    }
    let removed = raw[42] == 1;
    let value_len = u32_at(raw, 44) as usize;
    if value_len > XATTR_VALUE_LEN_MAX || (removed && value_len != 0) {
        return bad(format!("xattr record: value of {value_len} bytes"));
    }
    let fields = variable_fields(raw, XATTR_FIXED, &[u16_at(raw, 40) as usize, value_len])?;
    check_name(fields[0])?;
    Ok(RecordBody::Xattr {
        name: fields[0].to_vec(),
        value: (!removed).then(|| fields[1].to_vec()),
    })
}

/// Decode the records of a block's used area. Anything malformed is an error.
pub fn decode_records(mut bytes: &[u8]) -> Result<Vec<Record>, LogFormatError> {
    let mut records = Vec::new();
    let mut last_sequence = 0u64;
    while !bytes.is_empty() {
        if bytes.len() < RECORD_COMMON_SIZE {
            return bad(format!("{} stray bytes after the last record", bytes.len()));
        }
        let kind = u16_at(bytes, 0);
        let length = u32_at(bytes, 4) as usize;
        if bytes[2..4] != [0, 0]
            || length < RECORD_COMMON_SIZE
            || !length.is_multiple_of(8)
            || length > bytes.len()
        {
            return bad(format!("record of type {kind} and length {length}"));
        }
        let raw = &bytes[..length];
        let sequence = u64_at(raw, 8);
        if sequence <= last_sequence {
            return bad(format!("record sequence {sequence} after {last_sequence}"));
        }
        last_sequence = sequence;
        let body = match kind {
            RECORD_WRITE => decode_write(raw)?,
            RECORD_SETATTR => decode_setattr(raw)?,
            RECORD_CREATE => decode_create(raw)?,
            RECORD_REMOVE => decode_remove(raw)?,
            RECORD_LINK => decode_link(raw)?,
            RECORD_RENAME => decode_rename(raw)?,
            RECORD_XATTR => decode_xattr(raw)?,
            RECORD_WRITE_INDIRECT => decode_write_indirect(raw)?,
            other => return bad(format!("record type {other}")),
        };
        records.push(Record {
            sequence,
            txg: Txg(u64_at(raw, 16)),
            object: u64_at(raw, 24),
            generation: u64_at(raw, 32),
            body,
        });
        bytes = &bytes[length..];
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 1..=NAME_LEN_MAX)
    }

    fn time() -> impl Strategy<Value = LogTime> {
        (any::<i64>(), 0u32..1_000_000_000).prop_map(|(seconds, nanoseconds)| LogTime {
            seconds,
            nanoseconds,
        })
    }

    fn write_indirect() -> impl Strategy<Value = RecordBody> {
        (0u64..1 << 30, 0u64..8192, 1u64..=8192, any::<u64>()).prop_map(
            |(blkid, block_offset, length, checksum)| {
                use crate::block::blkptr::{Dva, ObjectType};
                let size = 8192u64;
                let length = length.min(size - block_offset).max(1);
                let block_offset = block_offset.min(size - length);
                let mut bp = BlockPtr::hole(Txg(9), ObjectType::PlainFile, 0);
                bp.dvas[0] = Dva {
                    vdev: crate::types::VdevId(0),
                    offset: blkid * 512,
                    size_allocated: size,
                    gang: false,
                };
                bp.size_logical = size as u32;
                bp.size_physical = size as u32;
                bp.fill_count = 1;
                bp.birth_physical = Txg(9);
                bp.checksum[..8].copy_from_slice(&checksum.to_le_bytes());
                RecordBody::WriteIndirect {
                    offset: blkid * size + block_offset,
                    length,
                    block_offset,
                    bp,
                }
            },
        )
    }

    fn body() -> impl Strategy<Value = RecordBody> {
        prop_oneof![
            write_indirect(),
            (
                0u64..1 << 40,
                proptest::collection::vec(any::<u8>(), 1..100)
            )
                .prop_map(|(offset, data)| RecordBody::Write { offset, data }),
            (
                1u32..=setattr_mask::ALL,
                any::<u32>(),
                any::<u64>(),
                time(),
                time(),
                (0..PROJECT_ID_INVALID, any::<bool>()),
            )
                .prop_map(|(mask, mode, size, atime, mtime, (project, inherit))| {
                    let has_project = mask & setattr_mask::PROJECT != 0;
                    RecordBody::Setattr {
                        mask,
                        mode,
                        uid: mode ^ 1,
                        gid: mode ^ 2,
                        size,
                        atime,
                        mtime,
                        project: if has_project { project } else { 0 },
                        project_inherit: has_project && inherit,
                    }
                }),
            (
                any::<u64>(),
                name(),
                any::<u32>(),
                any::<u64>(),
                time(),
                proptest::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(dir, name, mode, rdev, time, target)| RecordBody::Create {
                    dir,
                    name,
                    mode,
                    umask: mode >> 3,
                    uid: mode ^ 5,
                    gid: mode ^ 6,
                    rdev,
                    time,
                    target,
                }),
            (any::<u64>(), name(), any::<bool>()).prop_map(|(dir, name, directory)| {
                RecordBody::Remove {
                    dir,
                    name,
                    directory,
                }
            }),
            (any::<u64>(), name()).prop_map(|(dir, name)| RecordBody::Link { dir, name }),
            (any::<u64>(), name(), any::<u64>(), name(), 0u32..=3).prop_map(
                |(olddir, oldname, newdir, newname, flags)| RecordBody::Rename {
                    olddir,
                    oldname,
                    newdir,
                    newname,
                    flags,
                }
            ),
            (
                name(),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300))
            )
                .prop_map(|(name, value)| RecordBody::Xattr { name, value }),
        ]
    }

    fn encode_all(records: &[Record]) -> Vec<u8> {
        let mut encoded = Vec::new();
        for record in records {
            record.encode_into(&mut encoded);
            assert_eq!(encoded.len() % 8, 0);
        }
        encoded
    }

    fn records_of(bodies: Vec<RecordBody>) -> Vec<Record> {
        bodies
            .into_iter()
            .enumerate()
            .map(|(index, body)| Record {
                sequence: index as u64 + 1,
                txg: Txg(index as u64 * 3),
                object: index as u64 + 7,
                generation: 2,
                body,
            })
            .collect()
    }

    #[test]
    fn a_removed_xattr_and_an_empty_value_differ() {
        let records = records_of(vec![
            RecordBody::Xattr {
                name: b"user.a".to_vec(),
                value: None,
            },
            RecordBody::Xattr {
                name: b"user.a".to_vec(),
                value: Some(Vec::new()),
            },
        ]);
        assert_eq!(decode_records(&encode_all(&records)).unwrap(), records);
    }

    #[test]
    fn an_empty_name_is_an_error() {
        let mut encoded = encode_all(&records_of(vec![RecordBody::Link {
            dir: 3,
            name: b"abc".to_vec(),
        }]));
        // Name length 0 with the padding left as it is: the record is too long for its
        // fields, and a zero-length name is refused either way.
        encoded[48] = 0;
        assert!(decode_records(&encoded).is_err());
    }

    /// A setattr record with a project change: mask bit 6 and 8 bytes more (project ID and
    /// flags); without the bit the record keeps its 96 bytes, so logs written before project
    /// IDs read unchanged. The tail is refused where it does not belong, and bad values in it
    /// are refused.
    #[test]
    fn setattr_records_carry_a_project_only_with_its_bit() {
        let time = LogTime {
            seconds: 5,
            nanoseconds: 6,
        };
        let with_project = RecordBody::Setattr {
            mask: setattr_mask::PROJECT,
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            atime: time,
            mtime: time,
            project: 42,
            project_inherit: true,
        };
        assert!(with_project.is_namespace(), "project changes are ordered");
        let without = RecordBody::Setattr {
            mask: setattr_mask::MODE,
            mode: 0o644,
            uid: 0,
            gid: 0,
            size: 0,
            atime: time,
            mtime: time,
            project: 0,
            project_inherit: false,
        };
        assert!(!without.is_namespace());
        let records = records_of(vec![with_project, without]);
        let encoded = encode_all(&records);
        assert_eq!(records[0].encoded_size(), SETATTR_PROJECT_RECORD_SIZE);
        assert_eq!(records[1].encoded_size(), SETATTR_RECORD_SIZE);
        assert_eq!(decode_records(&encoded).unwrap(), records);

        let project_record = encode_all(&records[..1]);
        let mut bad = project_record.clone();
        bad[96..100].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_records(&bad).is_err(), "the invalid project ID");
        let mut bad = project_record.clone();
        bad[100] = 2;
        assert!(decode_records(&bad).is_err(), "an unknown project flag");
        let mut bad = project_record.clone();
        bad[40..44].copy_from_slice(&setattr_mask::MODE.to_le_bytes());
        assert!(
            decode_records(&bad).is_err(),
            "104 bytes without the project bit"
        );
        let mut bad = encode_all(&records[1..]);
        bad[40..44].copy_from_slice(&setattr_mask::PROJECT.to_le_bytes());
        assert!(decode_records(&bad).is_err(), "the project bit in 96 bytes");
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn record_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_records(&bytes);
        }

        #[test]
        fn records_round_trip(bodies in proptest::collection::vec(body(), 1..8)) {
            let records = records_of(bodies);
            prop_assert_eq!(decode_records(&encode_all(&records)).unwrap(), records);
        }

        #[test]
        fn flipped_byte_in_a_record_is_an_error_or_a_record(
            body in body(),
            at in 0usize..700,
            flip in 1u8..=255,
        ) {
            let mut encoded = encode_all(&records_of(vec![body]));
            let at = at % encoded.len();
            encoded[at] ^= flip;
            let _ = decode_records(&encoded);
        }

        #[test]
        fn a_truncated_record_is_an_error(body in body(), cut in 1usize..700) {
            let encoded = encode_all(&records_of(vec![body]));
            let keep = encoded.len() - (1 + cut % (encoded.len() - 1));
            prop_assert!(decode_records(&encoded[..keep]).is_err());
        }
    }
}
