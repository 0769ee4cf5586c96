//! Project IDs in the file system layer, on a real pool: a directory with the inherit flag
//! passes its project (and, to directories, the flag) to the nodes created in it; a link or
//! rename into it from another project is refused with EXDEV and changes nothing; `set_project`
//! refuses what it must; projects survive export and import, and a crash through the intent
//! log's replay; the owner quota admission is asked at create, chown and project change (and
//! not on replay), and its refusal changes nothing. `check` is clean after each test.

use crate::common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use tarn::fs::{FileKind, FileSystem, FsError, SetAttr, RENAME_EXCHANGE, RENAME_WHITEOUT};
use tarn::object::owners::Owners;
use tarn::object::{Admission, ObjectError, ObjectSet, Tx, WriteEstimate, WriteReservation};
use tarn::pool::Pool;

use common::*;

const POOL: &str = "projects";

fn crash(pool: Pool, fs: FileSystem) {
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);
}

fn new_pool(dir: &Path) -> (Pool, FileSystem) {
    let pool = create_pool(dir, POOL, single(dir, "vdev.img"), tiny());
    let fs = open_fs(&pool);
    (pool, fs)
}

fn project(fs: &FileSystem, ino: u64) -> (u32, bool) {
    fs.project(ino).expect("project of a node")
}

#[test]
fn new_nodes_inherit_the_project_of_a_directory_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    assert_eq!(
        project(&fs, root),
        (0, false),
        "the root starts in no project"
    );
    let tree = fs.mkdir(root, b"tree", 0o755, 1, 2).unwrap().ino;
    let before = fs.getattr(tree).unwrap().ctime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.set_project(tree, 42, true).unwrap();
    assert_eq!(project(&fs, tree), (42, true));
    assert!(
        fs.getattr(tree).unwrap().ctime > before,
        "set_project moves ctime"
    );

    let file = fs.create(tree, b"file", 0o644, 1, 2).unwrap().ino;
    let sub = fs.mkdir(tree, b"sub", 0o755, 1, 2).unwrap().ino;
    let link = fs.symlink(tree, b"link", b"file", 1, 2).unwrap().ino;
    let fifo = fs.mknod(tree, b"fifo", 0o010_644, 0, 1, 2).unwrap().ino;
    let deep = fs.create(sub, b"deep", 0o644, 1, 2).unwrap().ino;
    let deeper = fs.mkdir(sub, b"deeper", 0o755, 1, 2).unwrap().ino;
    assert_eq!(
        project(&fs, file),
        (42, false),
        "a file gets the project, not the flag"
    );
    assert_eq!(project(&fs, sub), (42, true), "a directory gets both");
    assert_eq!(project(&fs, link), (42, false));
    assert_eq!(project(&fs, fifo), (42, false));
    assert_eq!(project(&fs, deep), (42, false), "through two levels");
    assert_eq!(project(&fs, deeper), (42, true));

    // A project without the flag is the directory's own: nothing below inherits it.
    let plain = fs.mkdir(root, b"plain", 0o755, 1, 2).unwrap().ino;
    fs.set_project(plain, 9, false).unwrap();
    let outside = fs.create(plain, b"outside", 0o644, 1, 2).unwrap().ino;
    assert_eq!(project(&fs, outside), (0, false));
    assert_eq!(
        project(&fs, fs.mkdir(root, b"top", 0o755, 0, 0).unwrap().ino),
        (0, false)
    );

    // Clearing the flag stops the inheritance, and the project stays.
    fs.set_project(tree, 42, false).unwrap();
    let after = fs.create(tree, b"after", 0o644, 1, 2).unwrap().ino;
    assert_eq!(project(&fs, after), (0, false));
    assert_eq!(project(&fs, tree), (42, false));
    // Projects of files can be set one by one, and back to none.
    fs.set_project(after, 42, false).unwrap();
    assert_eq!(project(&fs, after), (42, false));
    fs.set_project(file, 0, false).unwrap();
    assert_eq!(project(&fs, file), (0, false));

    // A whiteout is made in the old directory and takes its project like any new node.
    fs.set_project(tree, 42, true).unwrap();
    let moving = fs.create(tree, b"moving", 0o644, 1, 2).unwrap().ino;
    fs.rename(tree, b"moving", sub, b"moved", RENAME_WHITEOUT)
        .unwrap();
    let whiteout = fs.lookup(tree, b"moving").unwrap();
    assert_eq!(whiteout.kind, FileKind::CharDevice);
    assert_eq!(project(&fs, whiteout.ino), (42, false));
    assert_eq!(project(&fs, moving), (42, false));
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn set_project_refuses_what_it_must() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    let file = fs.create(root, b"file", 0o644, 0, 0).unwrap().ino;
    let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
    let symlink = fs.symlink(root, b"link", b"file", 0, 0).unwrap().ino;
    for ino in [file, symlink] {
        assert!(
            matches!(fs.set_project(ino, 5, true), Err(FsError::Invalid(_))),
            "the inherit flag on a non-directory"
        );
        assert_eq!(project(&fs, ino), (0, false), "a refusal changes nothing");
    }
    assert!(matches!(
        fs.set_project(sub, u32::MAX, false),
        Err(FsError::Invalid(_))
    ));
    assert_eq!(project(&fs, sub), (0, false));
    fs.set_project(sub, u32::MAX - 1, true).unwrap();
    assert_eq!(
        project(&fs, sub),
        (u32::MAX - 1, true),
        "the largest project ID"
    );
    assert!(matches!(
        fs.set_project(999_999, 1, false),
        Err(FsError::NotFound)
    ));
    assert!(matches!(fs.project(999_999), Err(FsError::NotFound)));
    assert!(fs.project_ids_allowed());

    // Setting what is there already changes nothing, not even ctime.
    let ctime = fs.getattr(sub).unwrap().ctime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.set_project(sub, u32::MAX - 1, true).unwrap();
    assert_eq!(fs.getattr(sub).unwrap().ctime, ctime);

    pool.sync().unwrap();
    let read_only = FileSystem::open_read_only(pool.root_objset(), pool.core.txgs.clone()).unwrap();
    assert_eq!(project(&read_only, sub), (u32::MAX - 1, true));
    assert!(matches!(
        read_only.set_project(file, 1, false),
        Err(FsError::ReadOnly)
    ));
    drop(read_only);
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A link or rename into a directory that passes on another project is EXDEV (ext4, XFS and
/// OpenZFS alike), within one directory too, and an exchange checks both ways; a refused one
/// leaves every name where it was.
#[test]
fn links_and_renames_into_another_project_are_exdev() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    let one = fs.mkdir(root, b"one", 0o755, 0, 0).unwrap().ino;
    let two = fs.mkdir(root, b"two", 0o755, 0, 0).unwrap().ino;
    fs.set_project(one, 1, true).unwrap();
    fs.set_project(two, 2, true).unwrap();
    let plain = fs.mkdir(root, b"plain", 0o755, 0, 0).unwrap().ino;
    let a = fs.create(one, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(two, b"b", 0o644, 0, 0).unwrap().ino;
    let subdir = fs.mkdir(one, b"subdir", 0o755, 0, 0).unwrap().ino;
    let exdev = |result: Result<(), FsError>, what: &str| match result {
        Err(FsError::CrossProject {
            node: 1,
            directory: 2,
        }) => {}
        other => panic!("{what}: {other:?}, expected EXDEV"),
    };

    exdev(fs.link(a, two, b"a-link").map(|_| ()), "link");
    exdev(fs.rename(one, b"a", two, b"a", 0), "rename of a file");
    exdev(
        fs.rename(one, b"subdir", two, b"subdir", 0),
        "rename of a directory",
    );
    exdev(fs.rename(one, b"a", two, b"b", 0), "rename over a file");
    exdev(
        fs.rename(one, b"a", two, b"b", RENAME_EXCHANGE),
        "exchange, a into two",
    );
    assert_eq!(fs.lookup(one, b"a").unwrap().ino, a);
    assert_eq!(fs.lookup(two, b"b").unwrap().ino, b);
    assert_eq!(fs.lookup(one, b"subdir").unwrap().ino, subdir);
    assert!(fs.lookup(two, b"a-link").is_err());
    assert_eq!(fs.getattr(a).unwrap().nlink, 1);

    // Out of a project into a directory that passes none on is allowed, and back in too
    // (the node kept its project).
    fs.rename(one, b"a", plain, b"a", 0).unwrap();
    fs.link(a, plain, b"a-link").unwrap();
    fs.rename(plain, b"a", one, b"a", 0).unwrap();
    // An exchange checks the other node against the directory it goes to as well.
    fs.set_project(b, 1, false).unwrap();
    let c = fs.create(plain, b"c", 0o644, 0, 0).unwrap().ino;
    match fs.rename(two, b"b", plain, b"c", RENAME_EXCHANGE) {
        Err(FsError::CrossProject {
            node: 0,
            directory: 2,
        }) => {}
        other => panic!("exchange, c into two: {other:?}"),
    }
    assert_eq!(fs.lookup(plain, b"c").unwrap().ino, c);
    fs.set_project(c, 2, false).unwrap();
    fs.rename(two, b"b", plain, b"c", RENAME_EXCHANGE).unwrap();
    assert_eq!(fs.lookup(plain, b"c").unwrap().ino, b);
    assert_eq!(fs.lookup(two, b"b").unwrap().ino, c);

    // Within one directory as well, as ext4, XFS and OpenZFS: a node the directory's project
    // does not cover cannot be renamed in place until it is put in that project.
    fs.set_project(one, 3, true).unwrap();
    assert!(matches!(
        fs.rename(one, b"a", one, b"renamed", 0),
        Err(FsError::CrossProject {
            node: 1,
            directory: 3
        })
    ));
    fs.set_project(a, 3, false).unwrap();
    fs.rename(one, b"a", one, b"renamed", 0).unwrap();
    assert_eq!(fs.lookup(one, b"renamed").unwrap().ino, a);
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn projects_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    let tree = fs.mkdir(root, b"tree", 0o755, 0, 0).unwrap().ino;
    fs.set_project(tree, 77, true).unwrap();
    let file = fs.create(tree, b"file", 0o644, 0, 0).unwrap().ino;
    let sub = fs.mkdir(tree, b"sub", 0o755, 0, 0).unwrap().ino;
    let other = fs.create(root, b"other", 0o644, 0, 0).unwrap().ino;
    fs.set_project(other, 5, false).unwrap();
    drop(fs);
    pool.export().unwrap();

    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    assert_eq!(project(&fs, tree), (77, true));
    assert_eq!(project(&fs, file), (77, false));
    assert_eq!(project(&fs, sub), (77, true));
    assert_eq!(project(&fs, other), (5, false));
    assert_eq!(project(&fs, root), (0, false));
    let later = fs.create(sub, b"later", 0o644, 0, 0).unwrap().ino;
    assert_eq!(project(&fs, later), (77, false), "inheritance after import");
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A project change is logged and ordered with the namespace records: the fsync of a file
/// created in a directory just put in a project commits the directory's change too, so replay
/// makes the file in the project again. None of it waits for a txg.
#[test]
fn project_changes_replay_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    let tree = fs.mkdir(root, b"tree", 0o755, 0, 0).unwrap().ino;
    let old = fs.create(root, b"old", 0o644, 0, 0).unwrap().ino;
    let cleared = fs.mkdir(root, b"cleared", 0o755, 0, 0).unwrap().ino;
    fs.set_project(cleared, 8, true).unwrap();
    pool.sync().unwrap();
    let synced = pool.core.txgs.last_synced();
    let zil = fs.intent_log().unwrap().clone();
    let waits_before = zil.stats.txg_waits.load(Ordering::Relaxed);

    let pause = pool.core.txgs.pause_syncs();
    fs.set_project(tree, 42, true).unwrap();
    let file = fs.create(tree, b"file", 0o644, 0, 0).unwrap().ino;
    let sub = fs.mkdir(tree, b"sub", 0o755, 0, 0).unwrap().ino;
    let deep = fs.create(sub, b"deep", 0o644, 0, 0).unwrap().ino;
    // Only the new file is fsynced: the directory's project change comes with it.
    fs.fsync(deep).unwrap();
    fs.set_project(old, 6, false).unwrap();
    fs.fsync(old).unwrap();
    fs.set_project(cleared, 0, false).unwrap();
    fs.fsync(cleared).unwrap();
    assert_eq!(
        pool.core.txgs.last_synced(),
        synced,
        "an fsync waited for a txg"
    );
    assert_eq!(zil.stats.txg_waits.load(Ordering::Relaxed), waits_before);
    drop(pause);
    crash(pool, fs);

    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    assert!(
        fs.intent_log()
            .unwrap()
            .stats
            .replayed
            .load(Ordering::Relaxed)
            > 0
    );
    assert_eq!(project(&fs, tree), (42, true));
    assert_eq!(project(&fs, file), (42, false));
    assert_eq!(project(&fs, sub), (42, true));
    assert_eq!(project(&fs, deep), (42, false));
    assert_eq!(project(&fs, old), (6, false));
    assert_eq!(project(&fs, cleared), (0, false));
    pool.sync().unwrap();
    check_clean(&pool, "after replay");
    drop(fs);
    pool.export().unwrap();
}

/// The dataset's admission, with a rule of the test's own for owners: every question is
/// recorded, and owners the rule refuses get `QuotaExceeded`. Everything else goes to the
/// pool's admission.
struct OwnerRule {
    inner: Arc<dyn WriteReservation>,
    refuse: fn(&Owners) -> bool,
    asked: Mutex<Vec<Owners>>,
}

impl WriteReservation for OwnerRule {
    fn reserve(
        &self,
        objset: &ObjectSet,
        tx: &Tx,
        estimate: &WriteEstimate,
        admission: Admission,
    ) -> Result<(), ObjectError> {
        self.inner.reserve(objset, tx, estimate, admission)
    }

    fn admits(&self, bytes: u64, admission: Admission) -> Result<(), ObjectError> {
        self.inner.admits(bytes, admission)
    }

    fn charge_metadata(&self, tx: &Tx, charge: u64) -> Result<(), ObjectError> {
        self.inner.charge_metadata(tx, charge)
    }

    fn owner_admits(
        &self,
        owners: Owners,
        previous: Option<Owners>,
        objects: u64,
    ) -> Result<(), ObjectError> {
        assert_eq!(objects, 1, "one object at a time");
        self.asked.lock().push(owners);
        if (self.refuse)(&owners) {
            return Err(ObjectError::QuotaExceeded);
        }
        self.inner.owner_admits(owners, previous, objects)
    }

    fn hold_back(&self, bytes: u64) {
        self.inner.hold_back(bytes)
    }

    fn release_held_back(&self, bytes: u64) {
        self.inner.release_held_back(bytes)
    }
}

/// Put `rule` in front of the admission of `pool`'s root object set.
fn install(pool: &Pool, refuse: fn(&Owners) -> bool) -> Arc<OwnerRule> {
    let objset = pool.root_objset();
    let rule = Arc::new(OwnerRule {
        inner: objset.reservation().expect("a dataset has an admission"),
        refuse,
        asked: Mutex::new(Vec::new()),
    });
    objset.set_reservation(rule.clone());
    rule
}

fn owners(user: u32, group: u32, project: u32) -> Owners {
    Owners {
        user,
        group,
        project,
    }
}

#[test]
fn owner_quotas_are_asked_at_create_chown_and_project_change() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let rule = install(&pool, |owners| owners.user == 1000 || owners.project == 7);
    let root = fs.root();
    let asked = |rule: &OwnerRule| std::mem::take(&mut *rule.asked.lock());

    // Creates ask for the new node's owners, project included, before anything is made.
    let tree = fs.mkdir(root, b"tree", 0o755, 1, 2).unwrap().ino;
    assert_eq!(asked(&rule), vec![owners(1, 2, 0)]);
    fs.set_project(tree, 5, true).unwrap();
    assert_eq!(asked(&rule), vec![owners(1, 2, 5)]);
    let file = fs.create(tree, b"file", 0o644, 3, 4).unwrap().ino;
    assert_eq!(asked(&rule), vec![owners(3, 4, 5)]);
    assert!(matches!(
        fs.create(tree, b"refused", 0o644, 1000, 4),
        Err(FsError::QuotaExceeded)
    ));
    assert!(matches!(
        fs.symlink(root, b"refused", b"x", 1000, 4),
        Err(FsError::QuotaExceeded)
    ));
    assert!(fs.lookup(tree, b"refused").is_err());
    assert!(fs.lookup(root, b"refused").is_err());
    asked(&rule);

    // A project change asks for the new project; the flag alone asks nothing.
    assert!(matches!(
        fs.set_project(file, 7, false),
        Err(FsError::QuotaExceeded)
    ));
    assert_eq!(project(&fs, file), (5, false), "refused: unchanged");
    assert_eq!(asked(&rule), vec![owners(3, 4, 7)]);
    fs.set_project(tree, 5, false).unwrap();
    assert_eq!(asked(&rule), Vec::new());

    // A chown or chgrp asks for the new owners, only when they change.
    let chown = |uid: Option<u32>, gid: Option<u32>| {
        fs.setattr(
            file,
            SetAttr {
                uid,
                gid,
                ..SetAttr::default()
            },
        )
    };
    assert!(matches!(
        chown(Some(1000), None),
        Err(FsError::QuotaExceeded)
    ));
    assert_eq!(fs.getattr(file).unwrap().uid, 3, "refused: unchanged");
    assert_eq!(asked(&rule), vec![owners(1000, 4, 5)]);
    chown(None, Some(9)).unwrap();
    assert_eq!(asked(&rule), vec![owners(3, 9, 5)]);
    chown(Some(3), Some(9)).unwrap();
    fs.setattr(
        file,
        SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(asked(&rule), Vec::new(), "no owner changed");
    // Moving a file into a project is no new object: a rename asks nothing.
    fs.rename(tree, b"file", root, b"file", 0).unwrap();
    assert_eq!(asked(&rule), Vec::new());
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Replay applies what was admitted when it was made: a log whose records a quota would now
/// refuse (a create for a user, a chown, a project change) replays whole, asking nothing.
#[test]
fn replay_is_never_refused_by_owner_quotas() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = new_pool(dir.path());
    let root = fs.root();
    let tree = fs.mkdir(root, b"tree", 0o755, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let pause = pool.core.txgs.pause_syncs();
    fs.set_project(tree, 7, true).unwrap();
    let file = fs.create(tree, b"file", 0o644, 1000, 1000).unwrap().ino;
    let chowned = fs.create(root, b"chowned", 0o644, 0, 0).unwrap().ino;
    fs.setattr(
        chowned,
        SetAttr {
            uid: Some(1000),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.fsync(file).unwrap();
    fs.fsync(chowned).unwrap();
    drop(pause);
    crash(pool, fs);

    let pool = import(dir.path(), POOL, tiny());
    let rule = install(&pool, |owners| owners.user == 1000 || owners.project == 7);
    let fs = open_fs(&pool);
    assert!(rule.asked.lock().is_empty(), "replay asked the admission");
    assert_eq!(project(&fs, tree), (7, true));
    assert_eq!(project(&fs, file), (7, false));
    assert_eq!(fs.getattr(file).unwrap().uid, 1000);
    assert_eq!(fs.getattr(chowned).unwrap().uid, 1000);
    // After replay the rule holds again.
    assert!(matches!(
        fs.create(tree, b"new", 0o644, 0, 0),
        Err(FsError::QuotaExceeded)
    ));
    pool.sync().unwrap();
    check_clean(&pool, "after replay");
    drop(fs);
    pool.export().unwrap();
}
