//! Clearing setuid and setgid under `FUSE_HANDLE_KILLPRIV_V2` (see the crate documentation):
//! the kernel leaves it to the file system, which does what the VFS would on a write the
//! kernel marks, a truncate by a caller other than root, and a chown of anything but a
//! directory.

use fuser::{Errno, INodeNo};
use tarn::{FileKind, SetAttr};

use crate::TarnFuse;

/// `perm` without setuid, and without setgid if group execute is set (a setgid file without
/// group execute is a mandatory-locking candidate, which the VFS leaves alone too); None if
/// nothing changes.
fn perm_without_privileges(perm: u32) -> Option<u32> {
    let mut killed = perm & !libc::S_ISUID;
    if killed & libc::S_IXGRP != 0 {
        killed &= !libc::S_ISGID;
    }
    (killed != perm).then_some(killed)
}

impl TarnFuse {
    /// Clear setuid and setgid of head object `ino` (FUSE inode `fuse_ino`) if it has them
    /// (FUSE_HANDLE_KILLPRIV_V2), and have the kernel forget the mode it caches (it keeps it
    /// otherwise, though it asked for the change).
    pub(crate) fn kill_privileges(&self, fuse_ino: INodeNo, ino: u64) -> Result<(), Errno> {
        let attr = self
            .fs
            .getattr(ino)
            .map_err(|error| self.fail("getattr", error))?;
        if let Some(mode) = perm_without_privileges(attr.perm as u32) {
            let changes = SetAttr {
                mode: Some(mode),
                ..SetAttr::default()
            };
            self.fs
                .setattr(ino, changes)
                .map_err(|error| self.fail("setattr", error))?;
            self.shared.kernel.invalidate_attributes(fuse_ino.0);
        }
        Ok(())
    }

    /// The mode a setattr of head object `ino` sets, with setuid and setgid cleared where
    /// FUSE_HANDLE_KILLPRIV_V2 leaves that to the file system: a truncate by a caller other
    /// than root, a chown of anything but a directory.
    pub(crate) fn mode_after_setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        caller: u32,
        size: Option<u64>,
        owner: Option<u32>,
    ) -> Result<Option<u32>, Errno> {
        if (size.is_none() || caller == 0) && owner.is_none() {
            return Ok(mode);
        }
        let attr = match self.fs.getattr(ino) {
            Ok(attr) => attr,
            // The setattr itself reports a missing file.
            Err(_) => return Ok(mode),
        };
        if attr.kind == FileKind::Directory {
            return Ok(mode);
        }
        let perm = mode.map_or(attr.perm as u32, |mode| mode & 0o7777);
        Ok(perm_without_privileges(perm).or(mode))
    }
}
