//! POSIX ACLs (OpenZFS zpl_xattr.c with `acltype=posix`, Linux fs/posix_acl.c): the access
//! and default ACLs are the xattrs `system.posix_acl_access` and `system.posix_acl_default`,
//! stored like any other xattr ([`super::xattr`]); the kernel enforces them (FUSE's POSIX ACL
//! support, which implies `default_permissions`). What the file system must do itself:
//! - keep the mode and the access ACL in step: setting an access ACL sets the mode's rwx bits
//!   from it (an ACL that says no more than the mode is not stored at all, as ext4 does), and
//!   a chmod rewrites the owner, mask (or group) and other entries of a stored ACL;
//! - inherit a directory's default ACL when something is created in it: the new inode's
//!   access ACL is the default ACL masked by the requested mode (the umask is not applied),
//!   and a new directory gets the default ACL as its own default too. Without a default ACL
//!   the umask applies as usual.
//!
//! All of it happens in the transaction of the operation that causes it.
//!
//! With `acltype=off` the ACL names are [`FsError::NotSupported`] and nothing is inherited.
//!
//! # The xattr value (Linux's posix_acl_xattr format, little-endian)
//! ```text
//!   0    4  version (2)
//!   then N entries of 8 bytes:
//!        2  tag: 0x01 owner, 0x02 named user, 0x04 owning group, 0x08 named group,
//!               0x10 mask, 0x20 other
//!        2  permissions (rwx bits, 0..=7)
//!        4  uid or gid for named users and groups; 0xffffffff for the others
//! ```
//! Entries come in the kernel's canonical order (owner, users, owning group, groups, mask,
//! other), exactly one owner, owning group and other, and a mask whenever a named entry is
//! there. A value that breaks any of this is [`FsError::Invalid`] (EINVAL); decoding never
//! panics.

use super::phys::Znode;
use super::{FileKind, FileSystem, FsError, Result};

/// The access ACL's xattr name.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL's xattr name (directories only).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
const ACL_XATTR_VERSION: u32 = 2;
const ACL_HEADER_SIZE: usize = 4;
const ACL_ENTRY_SIZE: usize = 8;
/// The id stored for entries that name no user or group.
const ACL_UNDEFINED_ID: u32 = u32::MAX;
/// Most entries accepted (Linux allows what fits in 64 KiB; ext4 about 500 in a block).
pub const ACL_ENTRIES_MAX: usize = 1024;

pub const TAG_USER_OBJ: u16 = 0x01;
pub const TAG_USER: u16 = 0x02;
pub const TAG_GROUP_OBJ: u16 = 0x04;
pub const TAG_GROUP: u16 = 0x08;
pub const TAG_MASK: u16 = 0x10;
pub const TAG_OTHER: u16 = 0x20;

/// Whether `name` is one of the two ACL xattrs.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// One ACL entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A decoded, valid POSIX ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

impl Acl {
    /// Decode and validate an ACL xattr value.
    pub fn decode(raw: &[u8]) -> Result<Acl, FsError> {
        let invalid = |what: String| FsError::Invalid(format!("POSIX ACL: {what}"));
        let Some((version, body)) = raw.split_first_chunk::<ACL_HEADER_SIZE>() else {
            return Err(invalid(format!("{} bytes", raw.len())));
        };
        if u32::from_le_bytes(*version) != ACL_XATTR_VERSION {
            return Err(invalid(format!("version {}", u32::from_le_bytes(*version))));
        }
        if body.is_empty() || body.len() % ACL_ENTRY_SIZE != 0 {
            return Err(invalid(format!("{} bytes of entries", body.len())));
        }
        if body.len() / ACL_ENTRY_SIZE > ACL_ENTRIES_MAX {
            return Err(invalid(format!("{} entries", body.len() / ACL_ENTRY_SIZE)));
        }
        let entries: Vec<AclEntry> = body
            .chunks_exact(ACL_ENTRY_SIZE)
            .map(|chunk| {
                let tag = u16::from_le_bytes([chunk[0], chunk[1]]);
                let id = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
                AclEntry {
                    tag,
                    perm: u16::from_le_bytes([chunk[2], chunk[3]]),
                    id: if matches!(tag, TAG_USER | TAG_GROUP) {
                        id
                    } else {
                        ACL_UNDEFINED_ID
                    },
                }
            })
            .collect();
        let acl = Acl { entries };
        acl.validate().map_err(invalid)?;
        Ok(acl)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ACL_HEADER_SIZE + self.entries.len() * ACL_ENTRY_SIZE);
        out.extend_from_slice(&ACL_XATTR_VERSION.to_le_bytes());
        for entry in &self.entries {
            out.extend_from_slice(&entry.tag.to_le_bytes());
            out.extend_from_slice(&entry.perm.to_le_bytes());
            out.extend_from_slice(&entry.id.to_le_bytes());
        }
        out
    }

    /// Linux's posix_acl_valid: canonical order, one owner, owning group and other, a mask
    /// if there is any named entry, permissions within rwx, ids unique within their tag.
    fn validate(&self) -> Result<(), String> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for (index, entry) in self.entries.iter().enumerate() {
            if entry.perm & !7 != 0 {
                return Err(format!("entry {index}: permissions {:#o}", entry.perm));
            }
            state = match (entry.tag, state) {
                (TAG_USER_OBJ, State::UserObj) => State::User,
                (TAG_USER, State::User) => {
                    needs_mask = true;
                    State::User
                }
                (TAG_GROUP_OBJ, State::User) => State::Group,
                (TAG_GROUP, State::Group) => {
                    needs_mask = true;
                    State::Group
                }
                (TAG_MASK, State::Group) => State::Other,
                (TAG_OTHER, State::Other) => State::Done,
                (TAG_OTHER, State::Group) if !needs_mask => State::Done,
                (tag, _) => return Err(format!("entry {index}: tag {tag:#x} out of order")),
            };
        }
        if state != State::Done {
            return Err("an owner, owning group or other entry is missing".into());
        }
        for tag in [TAG_USER, TAG_GROUP] {
            let mut ids: Vec<u32> = self
                .entries
                .iter()
                .filter(|entry| entry.tag == tag)
                .map(|entry| entry.id)
                .collect();
            let count = ids.len();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() != count {
                return Err(format!("an id appears twice under tag {tag:#x}"));
            }
        }
        Ok(())
    }

    /// Whether the ACL says no more than a mode (owner, owning group and other only).
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }

    fn perm_of(&self, tag: u16) -> Option<u32> {
        self.entries
            .iter()
            .find(|entry| entry.tag == tag)
            .map(|entry| entry.perm as u32)
    }

    /// The rwx bits (0o777) the ACL implies for the mode (posix_acl_equiv_mode): owner, then
    /// the mask if there is one (else the owning group), then other.
    pub fn mode_bits(&self) -> u32 {
        let owner = self.perm_of(TAG_USER_OBJ).unwrap_or(0);
        let group = self
            .perm_of(TAG_MASK)
            .or_else(|| self.perm_of(TAG_GROUP_OBJ))
            .unwrap_or(0);
        let other = self.perm_of(TAG_OTHER).unwrap_or(0);
        (owner << 6) | (group << 3) | other
    }

    /// A chmod to `mode` (posix_acl_chmod): owner, mask (or owning group) and other take the
    /// mode's bits; named entries stay.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.perm_of(TAG_MASK).is_some();
        for entry in &mut self.entries {
            match entry.tag {
                TAG_USER_OBJ => entry.perm = ((mode >> 6) & 7) as u16,
                TAG_MASK => entry.perm = ((mode >> 3) & 7) as u16,
                TAG_GROUP_OBJ if !has_mask => entry.perm = ((mode >> 3) & 7) as u16,
                TAG_OTHER => entry.perm = (mode & 7) as u16,
                _ => {}
            }
        }
    }

    /// Inheritance at create (posix_acl_create_masq): mask this default ACL's owner, mask (or
    /// owning group) and other by the requested `mode`, and return the new inode's rwx bits.
    pub fn create_masq(&mut self, mode: u32) -> u32 {
        let mut mode = mode & 0o777;
        let has_mask = self.perm_of(TAG_MASK).is_some();
        for entry in &mut self.entries {
            let perm = entry.perm as u32;
            match entry.tag {
                TAG_USER_OBJ => {
                    let kept = perm & (mode >> 6);
                    entry.perm = kept as u16;
                    mode = (mode & !0o700) | (kept << 6);
                }
                TAG_OTHER => {
                    let kept = perm & mode & 7;
                    entry.perm = kept as u16;
                    mode = (mode & !0o007) | kept;
                }
                TAG_MASK => {
                    let kept = perm & ((mode >> 3) & 7);
                    entry.perm = kept as u16;
                    mode = (mode & !0o070) | (kept << 3);
                }
                TAG_GROUP_OBJ if !has_mask => {
                    let kept = perm & ((mode >> 3) & 7);
                    entry.perm = kept as u16;
                    mode = (mode & !0o070) | (kept << 3);
                }
                _ => {}
            }
        }
        mode
    }
}

/// An xattr a new inode inherits: its name and value.
pub(super) type InheritedXattr = (&'static [u8], Vec<u8>);

impl FileSystem {
    /// The mode of a new `kind` inode in the directory `parent`, and the ACL xattrs it
    /// inherits (see the module documentation). `mode` may carry type bits; they are kept.
    pub(super) fn inherit_acls(
        &self,
        parent_ino: u64,
        parent: &Znode,
        kind: FileKind,
        mode: u32,
        umask: u32,
    ) -> Result<(u32, Vec<InheritedXattr>)> {
        let default = if self.config().acl_posix && kind != FileKind::Symlink {
            self.xattr_of(parent_ino, parent, ACL_DEFAULT)?
        } else {
            None
        };
        let Some((raw, _)) = default else {
            return Ok((mode & !(umask & 0o777), Vec::new()));
        };
        let default = Acl::decode(&raw)
            .map_err(|error| FsError::Corrupt(format!("a directory's default ACL: {error}")))?;
        let mut access = default.clone();
        let bits = access.create_masq(mode);
        let mut inherited = Vec::new();
        if !access.is_minimal() {
            inherited.push((ACL_ACCESS, access.encode()));
        }
        if kind == FileKind::Directory {
            inherited.push((ACL_DEFAULT, default.encode()));
        }
        Ok(((mode & !0o777) | bits, inherited))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    fn extended() -> Acl {
        Acl {
            entries: vec![
                entry(TAG_USER_OBJ, 7, ACL_UNDEFINED_ID),
                entry(TAG_USER, 6, 1000),
                entry(TAG_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
                entry(TAG_GROUP, 4, 50),
                entry(TAG_MASK, 6, ACL_UNDEFINED_ID),
                entry(TAG_OTHER, 1, ACL_UNDEFINED_ID),
            ],
        }
    }

    #[test]
    fn acls_round_trip_and_imply_modes() {
        let acl = extended();
        assert_eq!(Acl::decode(&acl.encode()).unwrap(), acl);
        assert_eq!(acl.mode_bits(), 0o761, "the mask stands for the group");
        assert!(!acl.is_minimal());
        let minimal = Acl {
            entries: vec![
                entry(TAG_USER_OBJ, 6, ACL_UNDEFINED_ID),
                entry(TAG_GROUP_OBJ, 4, ACL_UNDEFINED_ID),
                entry(TAG_OTHER, 0, ACL_UNDEFINED_ID),
            ],
        };
        assert!(minimal.is_minimal());
        assert_eq!(minimal.mode_bits(), 0o640);
    }

    #[test]
    fn chmod_and_create_follow_linux() {
        let mut acl = extended();
        acl.chmod(0o750);
        assert_eq!(acl.mode_bits(), 0o750);
        assert_eq!(acl.entries[1].perm, 6, "named entries stay");
        assert_eq!(
            acl.entries[2].perm, 5,
            "the owning group stays under a mask"
        );
        let mut inherited = extended();
        // A file created with 0666 under this default ACL.
        assert_eq!(inherited.create_masq(0o666), 0o660);
        assert_eq!(inherited.entries[0].perm, 6);
        assert_eq!(inherited.entries[4].perm, 6);
        assert_eq!(inherited.entries[5].perm, 0);
    }

    #[test]
    fn bad_acls_are_refused() {
        let good = extended().encode();
        for (what, bytes) in [
            ("empty", Vec::new()),
            ("header only", good[..4].to_vec()),
            ("cut entry", good[..good.len() - 3].to_vec()),
            ("version 1", {
                let mut bad = good.clone();
                bad[0] = 1;
                bad
            }),
            ("perm 8", {
                let mut bad = good.clone();
                bad[6] = 8;
                bad
            }),
            ("no mask with named entries", {
                let mut acl = extended();
                acl.entries.remove(4);
                acl.encode()
            }),
            ("out of order", {
                let mut acl = extended();
                acl.entries.swap(0, 2);
                acl.encode()
            }),
            ("duplicate user", {
                let mut acl = extended();
                acl.entries.insert(1, entry(TAG_USER, 1, 1000));
                acl.encode()
            }),
        ] {
            assert!(Acl::decode(&bytes).is_err(), "{what}");
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn arbitrary_acl_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(acl) = Acl::decode(&raw) {
                prop_assert_eq!(Acl::decode(&acl.encode()).unwrap(), acl);
            }
        }

        #[test]
        fn corrupted_acl_never_panics(at in 0usize..52, byte: u8) {
            let mut raw = extended().encode();
            raw[at] = byte;
            let _ = Acl::decode(&raw);
        }

        #[test]
        fn chmod_then_mode_bits_is_the_mode(mode in 0u32..0o777) {
            let mut acl = extended();
            acl.chmod(mode);
            prop_assert_eq!(acl.mode_bits(), mode);
        }
    }
}
