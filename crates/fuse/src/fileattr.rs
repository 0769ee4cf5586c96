//! File attributes through ioctl(2): `FS_IOC_FSGETXATTR` / `FS_IOC_FSSETXATTR` (a `struct
//! fsxattr`) and `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` (the ext2 flag word), the way
//! `chattr -p`, `chattr +P`, `lsattr -p`, `xfs_io -c chproj` and `xfs_quota -x -c project`
//! reach a node's project ID and a directory's project inherit flag (the engine's
//! `fs/project.rs`).
//!
//! # How the kernel sends them
//! Since Linux 5.13 the VFS answers these four ioctls itself through the inode's
//! `fileattr_get` / `fileattr_set`, which FUSE implements by opening the inode on its own
//! (FUSE_OPEN or FUSE_OPENDIR, read-only), sending FUSE_IOCTL with the command and a buffer of
//! the structure's size (4 bytes for the flag word, 28 for `struct fsxattr`), and releasing
//! it. No FUSE_INIT flag is involved, and only regular files and directories get here (the
//! kernel answers ENOTTY for the rest). A set is always preceded by a get (`FS_IOC_FSGETXATTR`)
//! from which the VFS fills in what the caller left out; it has checked that the caller owns
//! the inode or has CAP_FOWNER, that project state changes only from the initial user
//! namespace, and that a new project ID is valid; a read-only mount is refused there with
//! EROFS.
//!
//! # What is answered
//! A get reports the project ID and, for a directory with the inherit flag,
//! `FS_XFLAG_PROJINHERIT` (`FS_PROJINHERIT_FL` in the flag word); nothing else (no extent size
//! hints, extents not counted). A set accepts that flag and a project ID: any other flag is
//! EOPNOTSUPP, as OpenZFS answers for flags it does not keep. The inherit flag asked for a
//! regular file is dropped, as ext4 and XFS drop it, so that `chattr -R +P DIR` works over a
//! tree (the engine refuses the flag on anything but a directory). A change of project ID or
//! of the flag takes root (the caller's uid 0), stricter than Linux, which lets the owner do it
//! from the initial namespace: a project quota is an administrator's limit, which an owner who
//! could leave the project would escape. A set that changes nothing is allowed to anyone the
//! kernel let through. Below `.zfs` every set is EROFS; a snapshot's nodes report their
//! projects. Any other ioctl is ENOTTY.

use fuser::{Errno, INodeNo};
use tarn::FileKind;

use crate::route::Node;
use crate::TarnFuse;

/// Linux's `_IOC` encoding of an ioctl number (asm-generic/ioctl.h): direction, size of the
/// argument, type and number.
const fn ioctl_number(direction: u32, kind: u8, number: u8, size: usize) -> u32 {
    (direction << 30) | ((size as u32) << 16) | ((kind as u32) << 8) | number as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Bytes of `struct fsxattr` (linux/fs.h):
///
/// ```text
///   offset  size  field
///        0     4  fsx_xflags     (FS_XFLAG_*)
///        4     4  fsx_extsize    (extent size hint: 0 here)
///        8     4  fsx_nextents   (extents: 0 here)
///       12     4  fsx_projid     (project ID)
///       16     4  fsx_cowextsize (copy-on-write extent size hint: 0 here)
///       20     8  fsx_pad
/// ```
/// In the host's byte order, as every ioctl argument.
pub const FSXATTR_SIZE: usize = 28;
/// The ext2 flag word of `FS_IOC_GETFLAGS` / `FS_IOC_SETFLAGS` as FUSE carries it (an
/// `unsigned int`, though the command's number says `long`).
const FLAGS_SIZE: usize = 4;

pub const FS_IOC_FSGETXATTR: u32 = ioctl_number(IOC_READ, b'X', 31, FSXATTR_SIZE);
pub const FS_IOC_FSSETXATTR: u32 = ioctl_number(IOC_WRITE, b'X', 32, FSXATTR_SIZE);
pub const FS_IOC_GETFLAGS: u32 = ioctl_number(IOC_READ, b'f', 1, size_of::<libc::c_long>());
pub const FS_IOC_SETFLAGS: u32 = ioctl_number(IOC_WRITE, b'f', 2, size_of::<libc::c_long>());
/// The 32-bit variants of the flag commands (a compat caller's numbers).
const FS_IOC32_GETFLAGS: u32 = ioctl_number(IOC_READ, b'f', 1, 4);
const FS_IOC32_SETFLAGS: u32 = ioctl_number(IOC_WRITE, b'f', 2, 4);
const _: () = assert!(FS_IOC_FSGETXATTR == 0x801c_581f && FS_IOC_FSSETXATTR == 0x401c_5820);
const _: () = assert!(FS_IOC32_GETFLAGS == 0x8004_6601 && FS_IOC32_SETFLAGS == 0x4004_6602);

/// `fsx_xflags` bit: new nodes in this directory inherit its project ID.
pub const FS_XFLAG_PROJINHERIT: u32 = 0x0000_0200;
/// The same in the ext2 flag word.
pub const FS_PROJINHERIT_FL: u32 = 0x2000_0000;

/// The fields of `struct fsxattr` this file system keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsXattr {
    pub xflags: u32,
    pub project: u32,
}

impl FsXattr {
    pub fn encode(&self) -> [u8; FSXATTR_SIZE] {
        let mut out = [0u8; FSXATTR_SIZE];
        out[0..4].copy_from_slice(&self.xflags.to_ne_bytes());
        out[12..16].copy_from_slice(&self.project.to_ne_bytes());
        out
    }

    /// The caller's `struct fsxattr`: EINVAL if it is short. The extent size hints and the
    /// extent count are not kept, so whatever they say is ignored (the VFS has already
    /// cleared the hint flags whose sizes are zero).
    pub fn decode(raw: &[u8]) -> Result<FsXattr, Errno> {
        if raw.len() < FSXATTR_SIZE {
            return Err(Errno::EINVAL);
        }
        let u32_at = |at: usize| u32::from_ne_bytes(raw[at..at + 4].try_into().expect("4 bytes"));
        Ok(FsXattr {
            xflags: u32_at(0),
            project: u32_at(12),
        })
    }
}

/// What a set asks for, once its flags are checked: the project and whether it is inherited.
fn wanted_from_xflags(xflags: u32, project: u32) -> Result<(u32, bool), Errno> {
    if xflags & !FS_XFLAG_PROJINHERIT != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok((project, xflags & FS_XFLAG_PROJINHERIT != 0))
}

/// `value` as the reply to a caller whose buffer holds `out_size` bytes (EINVAL if it cannot
/// hold it).
fn sized(value: &[u8], out_size: u32) -> Result<Vec<u8>, Errno> {
    if (out_size as usize) < value.len() {
        return Err(Errno::EINVAL);
    }
    Ok(value.to_vec())
}

impl TarnFuse {
    /// Answer the ioctl `command` on FUSE inode `ino` from the caller `caller_uid` with
    /// argument `input`: the bytes of the reply (see the module documentation).
    pub(crate) fn file_attr_ioctl(
        &self,
        ino: INodeNo,
        caller_uid: u32,
        command: u32,
        input: &[u8],
        out_size: u32,
    ) -> Result<Vec<u8>, Errno> {
        match command {
            FS_IOC_FSGETXATTR => {
                let (project, inherit) = self.project_of(ino)?;
                let xflags = if inherit { FS_XFLAG_PROJINHERIT } else { 0 };
                sized(&FsXattr { xflags, project }.encode(), out_size)
            }
            FS_IOC_FSSETXATTR => {
                let asked = FsXattr::decode(input)?;
                let (project, inherit) = wanted_from_xflags(asked.xflags, asked.project)?;
                self.set_project_of(ino, caller_uid, project, inherit)?;
                Ok(Vec::new())
            }
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let (_, inherit) = self.project_of(ino)?;
                let flags = if inherit { FS_PROJINHERIT_FL } else { 0 };
                sized(&flags.to_ne_bytes(), out_size)
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                let Some(raw) = input.first_chunk::<FLAGS_SIZE>() else {
                    return Err(Errno::EINVAL);
                };
                let flags = u32::from_ne_bytes(*raw);
                if flags & !FS_PROJINHERIT_FL != 0 {
                    return Err(Errno::EOPNOTSUPP);
                }
                let (project, _) = self.project_of(ino)?;
                self.set_project_of(ino, caller_uid, project, flags & FS_PROJINHERIT_FL != 0)?;
                Ok(Vec::new())
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    /// The project ID of FUSE inode `ino` and its inherit flag (none for the control
    /// directories).
    fn project_of(&self, ino: INodeNo) -> Result<(u32, bool), Errno> {
        let result = match self.resolve(ino)? {
            Node::Head(object) => self.fs.project(object),
            Node::Snapshot(snapshot, object) => snapshot.fs.project(object),
            Node::ZfsDir | Node::SnapshotDir => return Ok((0, false)),
        };
        result.map_err(|error| self.fail("project", error))
    }

    /// Put FUSE inode `ino` in project `project` with the inherit flag `inherit`, for the
    /// caller `caller_uid` (module documentation).
    fn set_project_of(
        &self,
        ino: INodeNo,
        caller_uid: u32,
        project: u32,
        inherit: bool,
    ) -> Result<(), Errno> {
        let object = self.head(ino)?;
        if self.fs.is_read_only() {
            return Err(Errno::EROFS);
        }
        let attr = self
            .fs
            .getattr(object)
            .map_err(|error| self.fail("getattr", error))?;
        // As ext4 and XFS: the flag means nothing on a file and is dropped there.
        let inherit = inherit && attr.kind == FileKind::Directory;
        if self.project_of(ino)? == (project, inherit) {
            return Ok(());
        }
        if caller_uid != 0 {
            return Err(Errno::EPERM);
        }
        self.fs
            .set_project(object, project, inherit)
            .map_err(|error| self.fail("set project", error))?;
        // The ctime changed.
        self.shared.kernel.invalidate_attributes(ino.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsxattr_round_trips_and_short_ones_are_refused() {
        let attr = FsXattr {
            xflags: FS_XFLAG_PROJINHERIT,
            project: 42,
        };
        let encoded = attr.encode();
        assert_eq!(encoded.len(), FSXATTR_SIZE);
        assert_eq!(encoded[12..16], 42u32.to_ne_bytes());
        assert_eq!(FsXattr::decode(&encoded), Ok(attr));
        assert_eq!(FsXattr::decode(&encoded[..27]), Err(Errno::EINVAL));
    }

    #[test]
    fn only_the_inherit_flag_is_settable() {
        assert_eq!(wanted_from_xflags(0, 7), Ok((7, false)));
        assert_eq!(wanted_from_xflags(FS_XFLAG_PROJINHERIT, 7), Ok((7, true)));
        // FS_XFLAG_IMMUTABLE and FS_XFLAG_EXTSIZE.
        assert_eq!(wanted_from_xflags(0x8, 7), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            wanted_from_xflags(FS_XFLAG_PROJINHERIT | 0x800, 7),
            Err(Errno::EOPNOTSUPP)
        );
    }

    #[test]
    fn ioctl_numbers_are_linux_ones() {
        if size_of::<libc::c_long>() == 8 {
            assert_eq!(FS_IOC_GETFLAGS, 0x8008_6601);
            assert_eq!(FS_IOC_SETFLAGS, 0x4008_6602);
        }
    }
}
