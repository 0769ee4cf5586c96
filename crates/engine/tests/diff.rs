//! `tarn diff` (`tarn::send::diff`): the changes between a snapshot and a later snapshot or
//! the file system, found from the block trees and named through parent pointers, as zfs diff
//! reports them. Every test ends with `check` clean.

use crate::common;

use std::collections::BTreeSet;

use tarn::fs::FileSystem;
use tarn::pool::Pool;
use tarn::send::{diff, DiffKind, DiffRecord, SendError};
use tarn::FileKind;

use common::*;

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

fn file(fs: &FileSystem, dir: u64, name: &str, bytes: &[u8]) -> u64 {
    let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
    fs.write(ino, 0, bytes).unwrap();
    ino
}

/// A record as (mark, path, new path, link change), paths as text.
type Line = (char, String, Option<String>, i64);

fn lines(records: &[DiffRecord]) -> BTreeSet<Line> {
    records
        .iter()
        .map(|record| {
            (
                record.kind.mark(),
                String::from_utf8(record.path.clone()).unwrap(),
                record
                    .new_path
                    .as_ref()
                    .map(|path| String::from_utf8(path.clone()).unwrap()),
                record.link_change,
            )
        })
        .collect()
}

fn line(mark: char, path: &str) -> Line {
    (mark, path.to_string(), None, 0)
}

/// A file system with a few of everything, snapshotted as `@a`.
fn populated(dir: &std::path::Path, name: &str) -> (Pool, FileSystem) {
    let pool = create_pool(dir, name, single(dir, "d0"), tiny());
    pool.create_dataset(&format!("{name}/fs"), &[], false)
        .unwrap();
    let fs = pool.open_file_system(&format!("{name}/fs")).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let e = fs.mkdir(d, b"e", 0o755, 0, 0).unwrap().ino;
    for (parent, name) in [
        (root, "modified"),
        (root, "removed"),
        (root, "renamed"),
        (root, "xattr"),
        (root, "linked"),
        (e, "deep"),
    ] {
        file(&fs, parent, name, &pattern(7, 3000));
    }
    // Neighbours that stay the same, sharing dnode blocks with what changes.
    for index in 0..40 {
        file(&fs, root, &format!("still{index}"), b"x");
    }
    snapshot(&pool, &format!("{name}/fs@a"));
    (pool, fs)
}

/// Every kind of change, each reported as zfs reports it: contents and xattrs as `M`, a new
/// name as `+` (its directory `M`), an unlink as `-`, a move as `R`, a hard link as `M` of
/// the file with its link change; the unchanged neighbours not at all.
#[test]
fn each_kind_of_change_is_reported_as_zfs_does() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dk");
    let root = fs.root();
    let d = fs.lookup(root, b"d").unwrap().ino;
    let e = fs.lookup(d, b"e").unwrap().ino;
    let modified = fs.lookup(root, b"modified").unwrap().ino;
    fs.write(modified, 100, b"changed").unwrap();
    fs.unlink(root, b"removed").unwrap();
    fs.rename(root, b"renamed", d, b"moved", 0).unwrap();
    let xattr = fs.lookup(root, b"xattr").unwrap().ino;
    fs.setxattr(xattr, b"user.note", b"value", 0).unwrap();
    let linked = fs.lookup(root, b"linked").unwrap().ino;
    fs.link(linked, e, b"second").unwrap();
    file(&fs, d, "new file é", b"new");
    fs.mkdir(root, b"newdir", 0o755, 0, 0).unwrap();
    snapshot(&pool, "dk/fs@b");

    let report = diff(&pool, "dk/fs@a", "dk/fs@b").unwrap();
    assert_eq!(report.file_system, "dk/fs");
    let expected: BTreeSet<Line> = [
        line('M', "/"),
        line('M', "/d"),
        line('M', "/d/e"),
        line('M', "/modified"),
        line('-', "/removed"),
        ('R', "/renamed".into(), Some("/d/moved".into()), 0),
        line('M', "/xattr"),
        ('M', "/linked".into(), None, 1),
        line('+', "/d/new file é"),
        line('+', "/newdir"),
    ]
    .into_iter()
    .collect();
    assert_eq!(lines(&report.records), expected);
    // Kinds and ctimes are the side's own: a removal's from the earlier snapshot.
    for record in &report.records {
        let want = match record.path.as_slice() {
            b"/" | b"/d" | b"/d/e" | b"/newdir" => FileKind::Directory,
            _ => FileKind::Regular,
        };
        assert_eq!(record.file_kind, want, "{record:?}");
        assert!(record.ctime.seconds > 0, "{record:?}");
    }
    let renamed = report
        .records
        .iter()
        .find(|record| record.kind == DiffKind::Renamed)
        .unwrap();
    assert_eq!(renamed.ctime, fs.getattr(renamed.object).unwrap().ctime);
    // Records come in object order, as zfs prints them.
    let objects: Vec<u64> = report.records.iter().map(|record| record.object).collect();
    let mut sorted = objects.clone();
    sorted.sort();
    assert_eq!(objects, sorted);

    // Nothing changed between a snapshot and the next identical one.
    snapshot(&pool, "dk/fs@c");
    assert!(diff(&pool, "dk/fs@b", "dk/fs@c")
        .unwrap()
        .records
        .is_empty());
    drop(fs);
    assert_clean(&pool);
}

/// One write in a directory of many files is one `M` line: the neighbours whose dnodes share
/// its dnode block are compared and left out.
#[test]
fn unchanged_neighbours_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dn");
    let target = fs.lookup(fs.root(), b"still17").unwrap().ino;
    fs.write(target, 0, b"y").unwrap();
    snapshot(&pool, "dn/fs@b");
    let report = diff(&pool, "dn/fs@a", "dn/fs@b").unwrap();
    assert_eq!(lines(&report.records), [line('M', "/still17")].into());
    drop(fs);
    assert_clean(&pool);
}

/// Against the file system itself the diff sees its current state, through a temporary
/// snapshot that is gone afterwards; `@SNAP` names the other side's file system.
#[test]
fn a_file_system_is_compared_as_it_is_now() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dl");
    fs.unlink(fs.root(), b"removed").unwrap();
    let before = pool.core.snapshots_of("dl/fs").unwrap().len();
    let report = diff(&pool, "dl/fs@a", "dl/fs").unwrap();
    assert_eq!(
        lines(&report.records),
        [line('M', "/"), line('-', "/removed")].into()
    );
    assert_eq!(report.to, "dl/fs");
    assert_eq!(pool.core.snapshots_of("dl/fs").unwrap().len(), before);
    // A later change shows in the next diff: the state is read anew each time.
    file(&fs, fs.root(), "later", b"z");
    let again = diff(&pool, "@a", "dl/fs").unwrap();
    assert!(lines(&again.records).contains(&line('+', "/later")));
    snapshot(&pool, "dl/fs@b");
    let short = diff(&pool, "dl/fs@a", "@b").unwrap();
    assert_eq!(lines(&short.records), lines(&again.records));
    drop(fs);
    wait_freed(&pool);
    assert_clean(&pool);
}

/// A clone's own snapshot diffs against its origin or an earlier snapshot of the origin's
/// file system; a snapshot of the origin's after the clone was made does not.
#[test]
fn a_clone_diffs_against_its_origin_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dc");
    file(&fs, fs.root(), "after a", b"1");
    snapshot(&pool, "dc/fs@b");
    file(&fs, fs.root(), "after b", b"2");
    snapshot(&pool, "dc/fs@c");
    pool.create_clone("dc/fs@b", "dc/clone", &[]).unwrap();
    let clone = pool.open_file_system("dc/clone").unwrap();
    file(&clone, clone.root(), "in clone", b"3");
    snapshot(&pool, "dc/clone@x");
    let from_origin = diff(&pool, "dc/fs@b", "dc/clone@x").unwrap();
    assert_eq!(
        lines(&from_origin.records),
        [line('M', "/"), line('+', "/in clone")].into()
    );
    assert_eq!(from_origin.file_system, "dc/clone");
    let from_earlier = diff(&pool, "dc/fs@a", "dc/clone@x").unwrap();
    assert!(lines(&from_earlier.records).contains(&line('+', "/after a")));
    assert!(!lines(&from_earlier.records).contains(&line('+', "/after b")));
    let error = diff(&pool, "dc/fs@c", "dc/clone@x").unwrap_err();
    assert!(
        error.to_string().contains("not an earlier snapshot"),
        "{error}"
    );
    drop((fs, clone));
    assert_clean(&pool);
}

/// Bad input is refused with the reason, and changes nothing (no temporary snapshot left).
#[test]
fn bad_input_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dr");
    snapshot(&pool, "dr/fs@b");
    pool.create_dataset("dr/other", &[], false).unwrap();
    snapshot(&pool, "dr/other@o");
    pool.create_bookmark("dr/fs@a", "dr/fs#mark").unwrap();
    let refused = |from: &str, to: &str, wanted: &str| {
        let error: SendError = diff(&pool, from, to).unwrap_err();
        let message = error.to_string();
        assert!(message.contains(wanted), "{from} {to}: {message}");
    };
    refused("dr/fs", "dr/fs@b", "must be a snapshot");
    refused("dr/fs@b", "dr/fs@a", "not an earlier snapshot");
    refused("dr/fs@a", "dr/fs@a", "not an earlier snapshot");
    refused("dr/fs@a", "dr/other@o", "not an earlier snapshot");
    refused("dr/other@o", "dr/fs@b", "not an earlier snapshot");
    refused("dr/fs@a", "dr/other", "not an earlier snapshot");
    refused("dr/fs#mark", "dr/fs@b", "bookmark");
    refused("dr/fs@a", "dr/fs#mark", "bookmark");
    refused("dr/fs@nope", "dr/fs@b", "nope");
    refused("dr/fs@a", "dr/fs@nope", "nope");
    refused("dr/fs@a", "dr/none", "none");
    assert_eq!(pool.core.snapshots_of("dr/fs").unwrap().len(), 2);
    drop(fs);
    assert_clean(&pool);
}

/// With `xattr=dir` an xattr lives in objects of its own (the file's xattr directory and a
/// value object), which are no nodes: the change shows as `M` of the file alone, and the file's
/// removal as its `-` alone. A directory moved is one `R`: what it holds keeps its parent.
#[test]
fn xattr_objects_and_a_moved_directory_show_through_their_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "dx", single(dir.path(), "d0"), tiny());
    pool.create_dataset("dx/fs", &[("xattr".into(), "dir".into())], false)
        .unwrap();
    let fs = pool.open_file_system("dx/fs").unwrap();
    let root = fs.root();
    let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
    file(&fs, sub, "inner", b"i");
    let kept = file(&fs, root, "kept", b"k");
    let gone = file(&fs, root, "gone", b"g");
    fs.setxattr(gone, b"user.big", &pattern(3, 5000), 0)
        .unwrap();
    snapshot(&pool, "dx/fs@a");
    let objects_before = fs.objset().synced_objects().unwrap().len();
    fs.setxattr(kept, b"user.big", &pattern(4, 5000), 0)
        .unwrap();
    pool.sync().unwrap();
    // The xattr took objects besides the file's own.
    assert!(fs.objset().synced_objects().unwrap().len() >= objects_before + 2);
    snapshot(&pool, "dx/fs@b");
    assert_eq!(
        lines(&diff(&pool, "dx/fs@a", "dx/fs@b").unwrap().records),
        [line('M', "/kept")].into()
    );
    fs.unlink(root, b"gone").unwrap();
    fs.rename(root, b"sub", root, b"moved", 0).unwrap();
    snapshot(&pool, "dx/fs@c");
    assert_eq!(
        lines(&diff(&pool, "dx/fs@b", "dx/fs@c").unwrap().records),
        [
            line('M', "/"),
            line('-', "/gone"),
            ('R', "/sub".into(), Some("/moved".into()), 0),
        ]
        .into()
    );
    drop(fs);
    assert_clean(&pool);
}

/// The hold a diff takes on its snapshots refuses a destroy, naming the diff; released, the
/// destroy goes ahead.
#[test]
fn a_diff_hold_refuses_a_destroy_and_names_the_diff() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, fs) = populated(dir.path(), "dh");
    snapshot(&pool, "dh/fs@b");
    let hold = pool
        .long_hold("dh/fs@a", tarn::pool::holds::Holder::Diff)
        .unwrap();
    let error = pool.destroy_snapshots("dh/fs@a", false).unwrap_err();
    assert!(error.to_string().contains("tarn diff"), "{error}");
    drop(hold);
    diff(&pool, "dh/fs@a", "dh/fs@b").unwrap();
    pool.destroy_snapshots("dh/fs@a", false).unwrap();
    drop(fs);
    wait_freed(&pool);
    assert_clean(&pool);
}
