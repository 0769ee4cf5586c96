//! Owners of objects and the space charged to them (OpenZFS's user, group and project
//! accounting, dmu_objset_userquota_*): what the object layer knows of a file system's owners.
//!
//! The object layer cannot read a znode, so a file system's object set is given an
//! [`OwnerOf`] hook by the pool (the file-system layer's `znode_owners`): from an object's
//! bonus buffer it says which user, group and project the object is charged to. Everything
//! else, the usage kept per owner and its sync, is this layer's (`accounting.rs`).

/// The three kinds of owner an object is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnerKind {
    User,
    Group,
    Project,
}

impl OwnerKind {
    pub const ALL: [OwnerKind; 3] = [OwnerKind::User, OwnerKind::Group, OwnerKind::Project];

    /// The word zfs uses for the kind in property names (`userquota@`, `groupused@`, ...).
    pub fn word(self) -> &'static str {
        match self {
            OwnerKind::User => "user",
            OwnerKind::Group => "group",
            OwnerKind::Project => "project",
        }
    }
}

/// The user, group and project an object is charged to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Owners {
    pub user: u32,
    pub group: u32,
    pub project: u32,
}

impl Owners {
    /// The owner of kind `kind`.
    pub fn id(&self, kind: OwnerKind) -> u32 {
        match kind {
            OwnerKind::User => self.user,
            OwnerKind::Group => self.group,
            OwnerKind::Project => self.project,
        }
    }
}

/// Which owners an object with this bonus buffer is charged to, None for an object charged to
/// no one (not a file-system node).
pub type OwnerOf = fn(&[u8]) -> Option<Owners>;
