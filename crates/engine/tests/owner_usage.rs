//! Usage by owner (`object/accounting.rs`): each sync charges every file-system object to its
//! znode's user, group and project, in three objects of the object set; the figures equal
//! what the nodes' `st_blocks` sum to (what `du` counts), follow chown and removal, survive
//! export and import, stay with a snapshot, and are counted from scratch for a file system
//! that had none.

use crate::common;

use std::collections::BTreeMap;

use tarn::fs::{FileSystem, SetAttr};
use tarn::object::accounting::OwnerUsage;
use tarn::object::owners::OwnerKind;
use tarn::object::ObjectSet;

use common::*;

/// What the nodes of `fs` sum to per owner of kind `kind`: `st_blocks` × 512 and the count,
/// walking the tree from the root (each inode once).
fn du_by_owner(fs: &FileSystem, kind: OwnerKind) -> BTreeMap<u32, OwnerUsage> {
    let mut seen = std::collections::HashSet::new();
    let mut totals: BTreeMap<u32, OwnerUsage> = BTreeMap::new();
    let mut stack = vec![fs.root()];
    while let Some(dir) = stack.pop() {
        if !seen.insert(dir) {
            continue;
        }
        let attr = fs.getattr(dir).unwrap();
        let owner = match kind {
            OwnerKind::User => attr.uid,
            OwnerKind::Group => attr.gid,
            OwnerKind::Project => 0,
        };
        let entry = totals.entry(owner).or_default();
        entry.bytes += attr.blocks * 512;
        entry.objects += 1;
        for entry in fs.readdir(dir, 0, 100_000).unwrap() {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let child = fs.getattr(entry.ino).unwrap();
            if child.kind == tarn::fs::FileKind::Directory {
                stack.push(entry.ino);
            } else if seen.insert(entry.ino) {
                let owner = match kind {
                    OwnerKind::User => child.uid,
                    OwnerKind::Group => child.gid,
                    OwnerKind::Project => 0,
                };
                let usage = totals.entry(owner).or_default();
                usage.bytes += child.blocks * 512;
                usage.objects += 1;
            }
        }
    }
    totals
}

fn usage(objset: &ObjectSet, kind: OwnerKind) -> BTreeMap<u32, OwnerUsage> {
    objset
        .owner_usage_all(kind)
        .unwrap()
        .expect("the file system keeps usage by owner")
}

fn assert_usage_is_du(pool: &tarn::Pool, fs: &FileSystem, what: &str) {
    pool.sync().unwrap();
    for kind in OwnerKind::ALL {
        assert_eq!(
            usage(&pool.root_objset(), kind),
            du_by_owner(fs, kind),
            "{what}: {kind:?} usage"
        );
    }
}

#[test]
fn usage_by_owner_is_what_du_counts_through_chown_removal_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ou", single(dir.path(), "a.img"), tiny());
    let fs = open_fs(&pool);
    let mut files = Vec::new();
    for (index, uid) in [1000u32, 1000, 1001, 1002, 0].iter().enumerate() {
        let attr = fs
            .create(
                fs.root(),
                format!("f{index}").as_bytes(),
                0o644,
                *uid,
                uid + 5,
            )
            .unwrap();
        fs.write(attr.ino, 0, &pattern(index as u64, 100_000 * (index + 1)))
            .unwrap();
        files.push(attr.ino);
    }
    let sub = fs.mkdir(fs.root(), b"d", 0o755, 1001, 1006).unwrap();
    fs.create(sub.ino, b"inner", 0o644, 1001, 1006).unwrap();
    assert_usage_is_du(&pool, &fs, "after writing");
    let users = usage(&pool.root_objset(), OwnerKind::User);
    assert_eq!(users[&1000].objects, 2);
    assert!(users[&1000].bytes >= 200_000, "{users:?}");

    fs.setattr(
        files[0],
        SetAttr {
            uid: Some(1002),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.unlink(fs.root(), b"f2").unwrap();
    assert_usage_is_du(&pool, &fs, "after chown and unlink");
    let users = usage(&pool.root_objset(), OwnerKind::User);
    assert_eq!(
        users[&1001].objects, 2,
        "the directory and its file stay: {users:?}"
    );
    assert_eq!(users[&1000].objects, 1, "{users:?}");

    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "ou", tiny());
    let fs = open_fs(&pool);
    assert_usage_is_du(&pool, &fs, "after import");
    drop(fs);
    check_clean(&pool, "owner usage");
}

/// A user quota stops that user's writes (and only that user's) with "quota exceeded",
/// never past the quota once synced; an object quota stops creates; chown to an owner at
/// its quota is refused; a snapshot keeps the usage it was taken with.
#[test]
fn a_user_quota_stops_the_users_writes_at_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "uq", single(dir.path(), "a.img"), tiny());
    pool.set_property("uq", "compression", Some("off")).unwrap();
    const QUOTA: u64 = 6 << 20;
    pool.set_property("uq", "userquota@1000", Some("6M"))
        .unwrap();
    pool.set_property("uq", "groupobjquota@50", Some("3"))
        .unwrap();
    assert_eq!(
        pool.owner_property("uq", "userquota@1000").unwrap().0,
        QUOTA.to_string()
    );
    let fs = pool.open_file_system("uq").unwrap();
    let limited = fs
        .create(fs.root(), b"limited", 0o644, 1000, 1000)
        .unwrap()
        .ino;
    let free = fs
        .create(fs.root(), b"free", 0o644, 1001, 1001)
        .unwrap()
        .ino;
    let chunk = 128 << 10;
    let mut written = 0u64;
    let refusal = loop {
        match fs.write(limited, written, &pattern(written, chunk)) {
            Ok(length) => written += length as u64,
            Err(error) => break error,
        }
        assert!(written <= QUOTA, "{written} bytes accepted past the quota");
    };
    assert!(
        matches!(refusal, tarn::fs::FsError::QuotaExceeded),
        "{refusal:?}"
    );
    assert!(written >= QUOTA * 3 / 4, "refused early: {written} bytes");
    // Another user writes on.
    for offset in (0..QUOTA).step_by(chunk) {
        fs.write(free, offset, &pattern(offset + 7, chunk)).unwrap();
    }
    pool.sync().unwrap();
    let used: u64 = pool
        .owner_property("uq", "userused@1000")
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert!(
        used <= QUOTA,
        "user 1000 holds {used} bytes under a quota of {QUOTA}"
    );
    // At the quota: a chown to 1000 is refused; to a third user it is not.
    let third = fs
        .create(fs.root(), b"third", 0o644, 1002, 1002)
        .unwrap()
        .ino;
    fs.write(third, 0, &pattern(3, 4096)).unwrap();
    let chown = |ino, uid| {
        fs.setattr(
            ino,
            SetAttr {
                uid: Some(uid),
                ..SetAttr::default()
            },
        )
    };
    pool.sync().unwrap();
    // Below the quota a chown is admitted (zfs refuses only at or over it); with a quota
    // set below what the user holds (allowed, as in zfs), it is refused.
    chown(third, 1000).unwrap();
    chown(third, 1002).unwrap();
    pool.set_property("uq", "userquota@1000", Some(&(used / 2).to_string()))
        .unwrap();
    let error = chown(third, 1000).unwrap_err();
    assert!(
        matches!(error, tarn::fs::FsError::QuotaExceeded),
        "a chown to a user over its quota: {error:?}"
    );
    chown(third, 1003).unwrap();
    pool.set_property("uq", "userquota@1000", Some("6M"))
        .unwrap();
    // The group's object quota: three nodes of group 50, then refused.
    for index in 0..3 {
        fs.create(fs.root(), format!("g{index}").as_bytes(), 0o644, 2000, 50)
            .unwrap();
        pool.sync().unwrap();
    }
    let error = fs.create(fs.root(), b"g3", 0o644, 2000, 50).unwrap_err();
    assert!(
        matches!(error, tarn::fs::FsError::QuotaExceeded),
        "{error:?}"
    );

    // A snapshot keeps the usage of its time.
    pool.create_snapshots(&["uq@before".to_string()], false)
        .unwrap();
    fs.unlink(fs.root(), b"limited").unwrap();
    pool.sync().unwrap();
    let rows = pool.owner_space("uq@before", OwnerKind::User).unwrap();
    let row = rows.iter().find(|row| row.id == 1000).unwrap();
    assert_eq!(row.used, used);
    assert_eq!(row.quota, Some(QUOTA));
    let now = pool.owner_space("uq", OwnerKind::User).unwrap();
    let row = now.iter().find(|row| row.id == 1000).unwrap();
    assert_eq!(
        (row.used, row.objects),
        (0, 0),
        "only the quota is left: {row:?}"
    );
    // With room again, user 1000 writes.
    let again = fs
        .create(fs.root(), b"again", 0o644, 1000, 1000)
        .unwrap()
        .ino;
    fs.write(again, 0, &pattern(9, chunk)).unwrap();
    drop(fs);
    pool.export().unwrap();
    let pool = import(dir.path(), "uq", tiny());
    assert_eq!(
        pool.owner_property("uq", "userquota@1000").unwrap().0,
        QUOTA.to_string(),
        "the quota is kept across import"
    );
    check_clean(&pool, "user quotas");
}

/// A file system written without the feature has no usage by owner; enabling the feature
/// counts its objects once, in the next sync, and from then on each sync keeps it.
#[test]
fn enabling_the_feature_counts_an_existing_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool_without(
        dir.path(),
        "up",
        single(dir.path(), "a.img"),
        tiny(),
        &["user_accounting"],
    );
    let fs = open_fs(&pool);
    for (index, uid) in [5u32, 6, 6].into_iter().enumerate() {
        let ino = fs
            .create(fs.root(), format!("f{index}").as_bytes(), 0o644, uid, uid)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(u64::from(uid), 50_000)).unwrap();
    }
    pool.sync().unwrap();
    assert!(!pool.root_objset().has_owner_usage());
    assert!(pool.owner_space("up", OwnerKind::User).is_err());
    pool.enable_feature("user_accounting").unwrap();
    let ino = fs.create(fs.root(), b"late", 0o644, 7, 7).unwrap().ino;
    fs.write(ino, 0, &pattern(7, 10_000)).unwrap();
    assert_usage_is_du(&pool, &fs, "after the feature was enabled");
    drop(fs);
    check_clean(&pool, "counted usage");
}

/// The receiving side counts what it receives (the usage objects never travel): after a full
/// and an incremental receive the received file system's usage is what its nodes hold; a
/// rollback brings back the snapshot's usage; a clone starts with its origin's.
#[test]
fn receive_rollback_and_clone_keep_usage_true() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "rx", single(dir.path(), "a.img"), tiny());
    pool.create_dataset("rx/src", &[], false).unwrap();
    let fs = pool.open_file_system("rx/src").unwrap();
    let write = |name: &str, uid: u32, bytes: usize| {
        let ino = fs
            .create(fs.root(), name.as_bytes(), 0o644, uid, uid)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(u64::from(uid), bytes)).unwrap();
    };
    write("a", 10, 70_000);
    write("b", 11, 20_000);
    pool.create_snapshots(&["rx/src@one".to_string()], false)
        .unwrap();
    write("c", 10, 30_000);
    fs.unlink(fs.root(), b"b").unwrap();
    pool.sync().unwrap();
    pool.create_snapshots(&["rx/src@two".to_string()], false)
        .unwrap();

    let full = send_to_vec(&pool, "rx/src@one", None);
    let incremental = send_to_vec(&pool, "rx/src@two", Some("rx/src@one"));
    let options = tarn::send::ReceiveOptions::default();
    tarn::send::receive(&pool, "rx/dst", &mut &full[..], &options).unwrap();
    let received = |what: &str| {
        let dst = pool.open_file_system("rx/dst").unwrap();
        pool.sync().unwrap();
        for kind in OwnerKind::ALL {
            let objset = pool.dataset_objset("rx/dst").unwrap();
            assert_eq!(
                usage(&objset, kind),
                du_by_owner(&dst, kind),
                "{what}: {kind:?}"
            );
        }
    };
    received("after the full receive");
    tarn::send::receive(&pool, "rx/dst", &mut &incremental[..], &options).unwrap();
    received("after the incremental receive");
    let source = usage(&pool.dataset_objset("rx/src").unwrap(), OwnerKind::User);
    assert_eq!(
        usage(&pool.dataset_objset("rx/dst").unwrap(), OwnerKind::User)
            .keys()
            .collect::<Vec<_>>(),
        source.keys().collect::<Vec<_>>(),
        "the same owners on both sides"
    );

    // Rollback to @one: user 11 is back, with what it had then.
    let at_one = usage(
        &pool.snapshot_objset("rx/src@one").unwrap(),
        OwnerKind::User,
    );
    drop(fs);
    pool.rollback("rx/src@one", true).unwrap();
    pool.sync().unwrap();
    assert_eq!(
        usage(&pool.dataset_objset("rx/src").unwrap(), OwnerKind::User),
        at_one
    );
    pool.create_clone("rx/src@one", "rx/copy", &[]).unwrap();
    assert_eq!(
        usage(&pool.dataset_objset("rx/copy").unwrap(), OwnerKind::User),
        at_one
    );
    let copy = pool.open_file_system("rx/copy").unwrap();
    let ino = copy.create(copy.root(), b"new", 0o644, 12, 12).unwrap().ino;
    copy.write(ino, 0, &pattern(12, 5000)).unwrap();
    pool.sync().unwrap();
    for kind in OwnerKind::ALL {
        assert_eq!(
            usage(&pool.dataset_objset("rx/copy").unwrap(), kind),
            du_by_owner(&copy, kind),
            "the clone: {kind:?}"
        );
    }
    drop(copy);
    check_clean(&pool, "receive, rollback, clone");
}

/// `send -p` carries user, group and project quotas; a receiver without the feature drops
/// them with a warning and the receive stands.
#[test]
fn send_with_properties_carries_owner_quotas() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "sp", single(dir.path(), "a.img"), tiny());
    pool.create_dataset("sp/src", &[], false).unwrap();
    pool.set_property("sp/src", "userquota@10", Some("1G"))
        .unwrap();
    pool.set_property("sp/src", "projectobjquota@3", Some("500"))
        .unwrap();
    pool.create_snapshots(&["sp/src@s".to_string()], false)
        .unwrap();
    let mut stream = Vec::new();
    let options = tarn::send::SendOptions {
        properties: true,
        ..tarn::send::SendOptions::default()
    };
    tarn::send::send(&pool, "sp/src@s", &options, &mut stream, &mut |_| {}).unwrap();
    let receive = tarn::send::ReceiveOptions::default();
    tarn::send::receive(&pool, "sp/dst", &mut &stream[..], &receive).unwrap();
    assert_eq!(
        pool.owner_property("sp/dst", "userquota@10").unwrap().0,
        (1u64 << 30).to_string()
    );
    assert_eq!(
        pool.owner_property("sp/dst", "projectobjquota@3")
            .unwrap()
            .0,
        "500"
    );
    assert_eq!(
        pool.owner_property("sp/dst", "userquota@11").unwrap().0,
        "none"
    );

    let other_dir = tempfile::tempdir().unwrap();
    let other = create_pool_without(
        other_dir.path(),
        "nf",
        single(other_dir.path(), "b.img"),
        tiny(),
        &["user_accounting"],
    );
    tarn::send::receive(&other, "nf/dst", &mut &stream[..], &receive).unwrap();
    assert_eq!(
        other.owner_property("nf/dst", "userquota@10").unwrap().0,
        "none"
    );
    check_clean(&pool, "owner quotas sent");
    check_clean(&other, "owner quotas dropped");
}

/// `tarn check` called every stored owner quota (`userquota@1000`, ...) an "invalid stored
/// property", since it knew only the settable properties: a pool whose file system had a user,
/// group or project quota failed its check. And the owners of a snapshot (`fs@snap`) could not
/// be read: its name went whole to the dataset name check, which refused the `@`. Quotas of
/// every kind and measure, set and removed, now check clean, and the owner properties and
/// listings of a file system and its snapshot read back as they were set.
#[test]
fn owner_quotas_check_clean_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "oq", single(dir.path(), "a.img"), tiny());
    for (name, value) in [
        ("userquota@1000", "10M"),
        ("userobjquota@1000", "100"),
        ("groupquota@5", "1G"),
        ("groupobjquota@5", "7"),
        ("projectquota@42", "5M"),
        ("projectobjquota@42", "9"),
        ("userquota@7", "1M"),
    ] {
        pool.set_property("oq", name, Some(value)).unwrap();
    }
    pool.set_property("oq", "userquota@7", Some("none"))
        .unwrap();
    let (value, source) = pool.owner_property("oq", "userquota@1000").unwrap();
    assert_eq!(
        (value.as_str(), source),
        ("10485760", tarn::PropertySource::Local)
    );
    let (value, source) = pool.owner_property("oq", "userquota@7").unwrap();
    assert_eq!(
        (value.as_str(), source),
        ("none", tarn::PropertySource::Default)
    );
    let (_, source) = pool.owner_property("oq", "userused@1000").unwrap();
    assert_eq!(source, tarn::PropertySource::None, "usage is a statistic");
    pool.create_snapshots(&["oq@s".to_string()], false).unwrap();
    for name in ["oq", "oq@s"] {
        let groups = pool.owner_space(name, OwnerKind::Group).unwrap();
        let five = groups
            .iter()
            .find(|row| row.id == 5)
            .expect("group 5 listed");
        assert_eq!(
            (five.quota, five.object_quota),
            (Some(1 << 30), Some(7)),
            "{name}"
        );
        let (value, _) = pool.owner_property(name, "groupquota@5").unwrap();
        assert_eq!(value, (1u64 << 30).to_string(), "{name}");
        let (used, _) = pool.owner_property(name, "userused@0").unwrap();
        assert!(
            used.parse::<u64>().unwrap() > 0,
            "{name}: the root directory is root's"
        );
    }
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "oq", tiny());
    let (value, _) = pool.owner_property("oq", "projectobjquota@42").unwrap();
    assert_eq!(value, "9");
    assert_clean(&pool);
}

/// A pool of two users' files with a user quota, exported, every copy of the user usage
/// object's blocks of the levels `levels` overwritten; its vdev's directory and the files.
fn pool_with_damaged_user_usage(
    dir: &std::path::Path,
    name: &str,
    levels: std::ops::RangeInclusive<u8>,
) -> Vec<u64> {
    let pool = create_pool(dir, name, single(dir, "a.img"), tiny());
    pool.set_property(name, "userquota@1000", Some("64M"))
        .unwrap();
    let fs = open_fs(&pool);
    let mut files = Vec::new();
    for uid in [1000u32, 1001] {
        let ino = fs
            .create(fs.root(), format!("u{uid}").as_bytes(), 0o644, uid, uid)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(u64::from(uid), 300_000)).unwrap();
        files.push(ino);
    }
    drop(fs);
    pool.sync().unwrap();
    let dnode = pool
        .root_objset()
        .synced_objects()
        .unwrap()
        .into_iter()
        .find(|(object, _)| *object == tarn::object::accounting::USER_USAGE_OBJECT)
        .expect("the user usage object")
        .1;
    let mut blocks = Vec::new();
    tarn::object::tree::visit_tree(&pool.core.io, &dnode, &mut |bp| {
        if levels.contains(&bp.level) {
            blocks.push(bp.clone());
        }
        Ok(())
    })
    .unwrap();
    assert!(!blocks.is_empty(), "no block of levels {levels:?}");
    pool.export().unwrap();
    destroy_every_copy(&dir.join("a.img"), &blocks);
    files
}

/// After damage to the user usage: asking for it gives a clear error, `check` names the
/// damage, and the files read and write (the quota'd user's too: a quota whose usage cannot
/// be read admits, as zfs_id_overquota does).
fn damaged_usage_costs_no_file(pool: &tarn::Pool, name: &str, files: &[u64]) {
    let error = pool
        .owner_space(name, OwnerKind::User)
        .expect_err("the user usage cannot be read");
    assert!(error.to_string().contains("usage"), "{error}");
    let report = tarn::check::check_pool(pool, false).unwrap();
    assert!(!report.is_clean(), "check must name the damaged usage");
    let fs = open_fs(pool);
    for (index, uid) in [1000u32, 1001].into_iter().enumerate() {
        assert_eq!(
            read_all(&fs, files[index]),
            pattern(u64::from(uid), 300_000)
        );
        fs.write(files[index], 300_000, &pattern(9, 100_000))
            .unwrap_or_else(|error| panic!("user {uid}'s write: {error}"));
    }
    fs.create(fs.root(), b"new", 0o644, 1000, 1000).unwrap();
    drop(fs);
    pool.sync().unwrap();
}

/// Every copy of the user usage object's data blocks destroyed: import succeeds and nothing
/// but the usage suffers (`damaged_usage_costs_no_file`); the next sync that changes the
/// usage counts it again from the tree into new objects (the damaged blocks freed, which
/// reads none of them), after which it is what `du` counts, `check` is clean, and stays so
/// across export and import.
#[test]
fn a_damaged_usage_object_is_counted_again() {
    let dir = tempfile::tempdir().unwrap();
    let files = pool_with_damaged_user_usage(dir.path(), "du", 0..=0);
    let pool = import(dir.path(), "du", tiny());
    damaged_usage_costs_no_file(&pool, "du", &files);
    let fs = open_fs(&pool);
    assert_usage_is_du(&pool, &fs, "counted again after damage");
    drop(fs);
    check_clean(&pool, "usage counted again");
    pool.export().unwrap();
    let pool = import(dir.path(), "du", tiny());
    let fs = open_fs(&pool);
    assert_usage_is_du(&pool, &fs, "after import");
    drop(fs);
    check_clean(&pool, "after import");
}

/// Every copy of every block of the user usage object destroyed, its indirect block too:
/// freeing the object would read a damaged block, so the usage is not counted again (that
/// would leak the blocks under it); it stays unreadable, and costs nothing else, across
/// syncs, export and import.
#[test]
fn a_usage_object_with_a_damaged_indirect_block_stays_unreadable_and_costs_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let files = pool_with_damaged_user_usage(dir.path(), "di", 0..=u8::MAX);
    let pool = import(dir.path(), "di", tiny());
    damaged_usage_costs_no_file(&pool, "di", &files);
    pool.export().unwrap();
    let pool = import(dir.path(), "di", tiny());
    let fs = open_fs(&pool);
    assert_eq!(
        read_all(&fs, files[1])[..300_000],
        pattern(1001, 300_000)[..]
    );
    drop(fs);
    assert!(pool.owner_space("di", OwnerKind::User).is_err());
    pool.export().unwrap();
}
