//! POSIX ACLs in the engine (`acltype`): refused when off; with posix, the access ACL and the
//! mode kept in step both ways (setfacl sets the mode, chmod rewrites the ACL), an ACL that
//! says no more than the mode not stored, default ACLs inherited at create (the umask ignored
//! then, applied otherwise), bad ACL bytes refused. Ends with `check` clean.

use crate::common;

use tarn::fs::acl::{Acl, AclEntry, ACL_ACCESS, ACL_DEFAULT};
use tarn::fs::acl::{TAG_GROUP, TAG_GROUP_OBJ, TAG_MASK, TAG_OTHER, TAG_USER, TAG_USER_OBJ};
use tarn::fs::{FileSystem, FsError, SetAttr};

use common::*;

fn acl(entries: &[(u16, u16, u32)]) -> Acl {
    Acl {
        entries: entries
            .iter()
            .map(|&(tag, perm, id)| AclEntry { tag, perm, id })
            .collect(),
    }
}

/// user::rwx user:1000:rw- group::r-x group:50:r-- mask::rw- other::--x
fn extended() -> Acl {
    acl(&[
        (TAG_USER_OBJ, 7, u32::MAX),
        (TAG_USER, 6, 1000),
        (TAG_GROUP_OBJ, 5, u32::MAX),
        (TAG_GROUP, 4, 50),
        (TAG_MASK, 6, u32::MAX),
        (TAG_OTHER, 1, u32::MAX),
    ])
}

fn enable(fs: &FileSystem) {
    let mut config = fs.config();
    config.acl_posix = true;
    fs.set_config(config);
}

fn perm(fs: &FileSystem, ino: u64) -> u16 {
    fs.getattr(ino).unwrap().perm
}

#[test]
fn acls_off_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "aoff", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let value = extended().encode();
    assert!(matches!(
        fs.setxattr(file, ACL_ACCESS, &value, 0),
        Err(FsError::NotSupported)
    ));
    assert!(matches!(
        fs.getxattr(file, ACL_ACCESS),
        Err(FsError::NotSupported)
    ));
    assert!(matches!(
        fs.setxattr(file, b"system.other", b"v", 0),
        Err(FsError::NotSupported)
    ));
    // Without a default ACL the umask applies.
    let masked = fs
        .create_node(fs.root(), b"m", 0o100_666, 0o027, 0, 0, 0)
        .unwrap();
    assert_eq!(masked.perm, 0o640);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn access_acl_and_mode_stay_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "aacc", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    enable(&fs);
    let file = fs.create(fs.root(), b"f", 0o4644, 0, 0).unwrap().ino;
    fs.setxattr(file, ACL_ACCESS, &extended().encode(), 0)
        .unwrap();
    assert_eq!(
        perm(&fs, file),
        0o4761,
        "rwx bits from the ACL, setuid kept"
    );
    assert_eq!(
        Acl::decode(&fs.getxattr(file, ACL_ACCESS).unwrap()).unwrap(),
        extended()
    );
    // chmod rewrites owner, mask and other.
    fs.setattr(
        file,
        SetAttr {
            mode: Some(0o750),
            ..Default::default()
        },
    )
    .unwrap();
    let stored = Acl::decode(&fs.getxattr(file, ACL_ACCESS).unwrap()).unwrap();
    assert_eq!(stored.mode_bits(), 0o750);
    assert_eq!(stored.entries[1].perm, 6, "named entries stay");
    // An ACL equal to a mode is not kept: only the mode changes.
    let minimal = acl(&[
        (TAG_USER_OBJ, 6, u32::MAX),
        (TAG_GROUP_OBJ, 4, u32::MAX),
        (TAG_OTHER, 0, u32::MAX),
    ]);
    fs.setxattr(file, ACL_ACCESS, &minimal.encode(), 0).unwrap();
    assert_eq!(perm(&fs, file), 0o640);
    assert!(matches!(
        fs.getxattr(file, ACL_ACCESS),
        Err(FsError::NoData)
    ));
    // Bad bytes and a default ACL on a file are refused.
    let mut bad = extended().encode();
    bad[6] = 9;
    assert!(matches!(
        fs.setxattr(file, ACL_ACCESS, &bad, 0),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.setxattr(file, ACL_DEFAULT, &extended().encode(), 0),
        Err(FsError::Invalid(_))
    ));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn default_acls_are_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "adef", single(dir.path(), "d0"), tiny());
    let fs = pool.file_system().unwrap();
    enable(&fs);
    let parent = fs.mkdir(fs.root(), b"p", 0o755, 0, 0).unwrap().ino;
    fs.setxattr(parent, ACL_DEFAULT, &extended().encode(), 0)
        .unwrap();
    // A file: the default ACL masked by the requested mode; the umask is ignored.
    let file = fs
        .create_node(parent, b"f", 0o100_666, 0o077, 0, 0, 0)
        .unwrap();
    assert_eq!(file.perm, 0o660);
    let access = Acl::decode(&fs.getxattr(file.ino, ACL_ACCESS).unwrap()).unwrap();
    assert_eq!(access.mode_bits(), 0o660);
    assert!(matches!(
        fs.getxattr(file.ino, ACL_DEFAULT),
        Err(FsError::NoData)
    ));
    // A directory gets both, and passes them on.
    let sub = fs
        .create_node(parent, b"d", 0o040_777, 0o077, 0, 0, 0)
        .unwrap();
    assert_eq!(sub.perm, 0o761);
    assert_eq!(
        Acl::decode(&fs.getxattr(sub.ino, ACL_DEFAULT).unwrap()).unwrap(),
        extended()
    );
    let deeper = fs
        .create_node(sub.ino, b"g", 0o100_640, 0o077, 0, 0, 0)
        .unwrap();
    assert_eq!(deeper.perm, 0o640);
    // A snapshot's file system lets the kernel read the ACLs (it has no acltype of its own).
    pool.create_snapshots(&["adef@s".to_string()], false)
        .unwrap();
    let snapshot = pool.snapshot_file_system("adef@s").unwrap();
    assert_eq!(
        Acl::decode(&snapshot.getxattr(sub.ino, ACL_DEFAULT).unwrap()).unwrap(),
        extended()
    );
    assert!(matches!(
        snapshot.setxattr(sub.ino, ACL_DEFAULT, &extended().encode(), 0),
        Err(FsError::ReadOnly)
    ));
    drop(snapshot);
    // Symlinks inherit nothing.
    let link = fs.symlink(parent, b"l", b"f", 0, 0).unwrap().ino;
    assert!(fs.listxattr(link).unwrap().is_empty());
    pool.sync().unwrap();
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "adef", tiny());
    let fs = pool.file_system().unwrap();
    enable(&fs);
    assert_eq!(
        Acl::decode(&fs.getxattr(sub.ino, ACL_DEFAULT).unwrap()).unwrap(),
        extended()
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
