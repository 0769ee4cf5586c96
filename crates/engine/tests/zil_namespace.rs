//! The intent log's namespace records (create, mkdir, symlink, link, unlink, rmdir, rename,
//! xattrs): an fsync after a namespace change commits the log instead of waiting for a txg,
//! and after a crash or a power cut the replay rebuilds the names at the same object numbers.
//!
//! Txg syncs are paused while the tests change and fsync, so only the log carries the changes
//! across the crash; an fsync that waited for a txg would hang there. `check` must be clean
//! after every import.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tarn::fs::{FileKind, FileSystem};
use tarn::pool::{DeviceWrapper, ImportOptions, Pool};
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice};

use common::*;

const POOL: &str = "zilns";

fn crash(pool: Pool, fs: FileSystem) {
    drop(fs);
    pool.core.txgs.suspend("test crash".into());
    drop(pool);
}

fn wrapper(plan: &Arc<FaultPlan>) -> DeviceWrapper {
    let plan = plan.clone();
    Arc::new(move |_path: &Path, device: Arc<dyn BlockDevice>| {
        Arc::new(FaultyDevice::new(device, plan.clone())) as Arc<dyn BlockDevice>
    })
}

/// Every entry of the tree: (directory, name, object).
type Names = BTreeSet<(u64, Vec<u8>, u64)>;

fn names(fs: &FileSystem) -> Names {
    let mut found = Names::new();
    let mut dirs = vec![fs.root()];
    while let Some(dir) = dirs.pop() {
        let mut cookie = 0;
        loop {
            let entries = fs.readdir(dir, cookie, 64).unwrap();
            let Some(last) = entries.last() else { break };
            cookie = last.next_cookie;
            for entry in entries {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                if entry.kind == FileKind::Directory {
                    dirs.push(entry.ino);
                }
                found.insert((dir, entry.name, entry.ino));
            }
        }
    }
    found
}

/// One of each namespace change, each followed by an fsync, with txg syncs paused: none waits
/// for a txg, and a crash then import gives every one of them back at the same object numbers.
#[test]
fn namespace_changes_survive_a_crash_without_a_txg() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let old = fs.create(root, b"old", 0o644, 0, 0).unwrap().ino;
    fs.write(old, 0, b"synced before").unwrap();
    pool.sync().unwrap();
    let synced = pool.core.txgs.last_synced();
    let zil = fs.intent_log().unwrap().clone();
    let waits_before = zil.stats.txg_waits.load(Ordering::Relaxed);

    let pause = pool.core.txgs.pause_syncs();
    let sub = fs.mkdir(root, b"sub", 0o755, 1, 2).unwrap().ino;
    fs.fsync(sub).unwrap();
    let file = fs.create(sub, b"file", 0o640, 3, 4).unwrap().ino;
    fs.write(file, 0, b"contents of file").unwrap();
    fs.fsync(file).unwrap();
    let link = fs.link(file, root, b"hard").unwrap();
    assert_eq!(link.nlink, 2);
    fs.fsync(file).unwrap();
    let short = fs.symlink(root, b"short", b"sub/file", 0, 0).unwrap().ino;
    let long_target = vec![b'x'; 1000];
    let long = fs.symlink(sub, b"long", &long_target, 0, 0).unwrap().ino;
    fs.fsync(long).unwrap();
    fs.setxattr(file, b"user.colour", b"blue", 0).unwrap();
    fs.setxattr(file, b"user.gone", b"soon", 0).unwrap();
    fs.removexattr(file, b"user.gone").unwrap();
    fs.fsync(file).unwrap();
    // A rename across directories, over an existing file, and of a directory.
    let moved = fs.create(root, b"moved", 0o600, 0, 0).unwrap().ino;
    fs.write(moved, 0, b"moved data").unwrap();
    fs.rename(root, b"moved", sub, b"there", 0).unwrap();
    fs.fsync(moved).unwrap();
    fs.rename(sub, b"there", root, b"old", 0).unwrap();
    fs.fsync(moved).unwrap();
    let inner = fs.mkdir(sub, b"inner", 0o700, 0, 0).unwrap().ino;
    fs.rename(sub, b"inner", root, b"inner2", 0).unwrap();
    let in_inner = fs.create(inner, b"deep", 0o644, 0, 0).unwrap().ino;
    fs.fsync(in_inner).unwrap();
    // Removals: a name of a linked file, a file, an empty directory.
    fs.unlink(root, b"hard").unwrap();
    fs.unlink(root, b"short").unwrap();
    let empty = fs.mkdir(root, b"empty", 0o755, 0, 0).unwrap().ino;
    fs.rmdir(root, b"empty").unwrap();
    fs.fsync(root).unwrap();
    // Not fsynced: may or may not be there after the crash, never half.
    let late = fs.create(root, b"late", 0o644, 0, 0).unwrap().ino;
    fs.write(late, 0, b"late bytes").unwrap();
    assert_eq!(
        pool.core.txgs.last_synced(),
        synced,
        "a namespace fsync waited for a txg"
    );
    assert_eq!(zil.stats.txg_waits.load(Ordering::Relaxed), waits_before);
    let expected = names(&fs);
    drop(pause);
    crash(pool, fs);

    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    let mut now = names(&fs);
    let late_entry = (root, b"late".to_vec(), late);
    let late_there = now.remove(&late_entry);
    let mut expected_without_late = expected.clone();
    expected_without_late.remove(&late_entry);
    assert_eq!(now, expected_without_late, "names after replay");
    if late_there {
        let bytes = read_all(&fs, late);
        assert!(bytes.is_empty() || bytes == b"late bytes");
    }
    assert_eq!(read_all(&fs, file), b"contents of file");
    assert_eq!(read_all(&fs, moved), b"moved data");
    assert!(fs.lookup(root, b"empty").is_err());
    assert!(fs.getattr(empty).is_err(), "the removed directory is gone");
    assert!(fs.getattr(old).is_err(), "the file renamed over is gone");
    let attr = fs.getattr(file).unwrap();
    assert_eq!(
        (attr.perm, attr.uid, attr.gid, attr.nlink),
        (0o640, 3, 4, 1)
    );
    let attr = fs.getattr(sub).unwrap();
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o755, 1, 2));
    assert_eq!(fs.readlink(long).unwrap(), long_target);
    assert_eq!(fs.getxattr(file, b"user.colour").unwrap(), b"blue");
    assert!(fs.getxattr(file, b"user.gone").is_err());
    assert_eq!(fs.getattr(inner).unwrap().kind, FileKind::Directory);
    assert!(fs.getattr(short).is_err());

    // A crash right after replay, before the sync that frees the replayed chain: the next
    // import finds the chain again, but its header says every record is in the tree (replay
    // waited for a txg, which recorded the last record replayed), so nothing is applied twice
    // and nothing changes.
    crash(pool, fs);
    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    let replayed_again = fs
        .intent_log()
        .unwrap()
        .stats
        .replayed
        .load(Ordering::Relaxed);
    assert_eq!(
        replayed_again, 0,
        "records the header says were replayed were applied again"
    );
    let mut again = names(&fs);
    again.remove(&late_entry);
    assert_eq!(again, expected_without_late, "names after replaying twice");
    assert_eq!(read_all(&fs, file), b"contents of file");
    assert_eq!(fs.getxattr(file, b"user.colour").unwrap(), b"blue");
    assert_eq!(fs.getattr(file).unwrap().nlink, 1);
    pool.sync().unwrap();
    check_clean(&pool, "after replaying twice");

    // A third import, the chain freed: nothing to replay.
    crash(pool, fs);
    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    let mut again = names(&fs);
    again.remove(&late_entry);
    assert_eq!(again, expected_without_late, "names after a third import");
    // New objects after replay do not reuse the replayed numbers.
    let fresh = fs.create(root, b"fresh", 0o644, 0, 0).unwrap().ino;
    assert!(fresh > in_inner && fresh > late);
    pool.sync().unwrap();
    check_clean(&pool, "after a second import");
    drop(fs);
    pool.export().unwrap();
}

/// A create, a rename and an fsync of each, in a loop with txg syncs running: the log's
/// counters show that no fsync waited for a txg (before namespace records, each did).
#[test]
fn create_and_rename_fsyncs_do_not_wait_for_a_txg() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let zil = fs.intent_log().unwrap().clone();
    pool.sync().unwrap();
    let waits = zil.stats.txg_waits.load(Ordering::Relaxed);
    let commits = zil.stats.commits.load(Ordering::Relaxed);
    let txg_before = pool.core.txgs.last_synced();
    let started = std::time::Instant::now();
    for index in 0..100u64 {
        let name = format!("f{index}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.write(ino, 0, &pattern(index, 512)).unwrap();
        fs.fsync(ino).unwrap();
        fs.rename(
            root,
            name.as_bytes(),
            root,
            format!("g{index}").as_bytes(),
            0,
        )
        .unwrap();
        fs.fsync(ino).unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(
        zil.stats.txg_waits.load(Ordering::Relaxed),
        waits,
        "an fsync waited for a txg"
    );
    assert_eq!(zil.stats.commits.load(Ordering::Relaxed) - commits, 200);
    let txgs = pool.core.txgs.last_synced().0 - txg_before.0;
    assert!(
        txgs < 100,
        "{txgs} txgs synced in {elapsed:?} for 200 fsyncs"
    );
    drop(fs);
    pool.export().unwrap();
}

/// A replay that a power cut ends after some of its changes synced must not apply those
/// records again. Replay used to rely on every record being harmless to apply twice, and a
/// link is not: a link to `n` and a rename of `n` to `m` replayed, synced, and replayed again
/// after the cut linked `n` afresh (the name was free again), and the rename of `n` over `m`,
/// now two names of one file, did nothing, so the file kept a name no state ever had. The
/// header now records the last record replayed in each synced txg (OpenZFS `zh_replay_seq`).
/// The power is cut at every write of the first import in turn, with a txg synced after each
/// replayed record; the names after the next import are always those fsync made durable.
#[test]
fn a_replay_cut_short_after_a_sync_does_not_apply_its_records_again() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    let fs = open_fs(&pool);
    let root = fs.root();
    let file = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    let pause = pool.core.txgs.pause_syncs();
    fs.link(file, root, b"n").unwrap();
    fs.rename(root, b"n", root, b"m", 0).unwrap();
    fs.fsync(file).unwrap();
    let expected = names(&fs);
    drop(pause);
    crash(pool, fs);
    let image = dir.path().join("vdev.img");
    let crashed = std::fs::read(&image).unwrap();

    let mut cuts_after_a_synced_record = 0;
    for cut in 0..200u64 {
        std::fs::write(&image, &crashed).unwrap();
        let plan = FaultPlan::new();
        plan.stop_at_write(cut);
        let mut options = ImportOptions::new(dirs(dir.path()), tiny());
        options.wrap_device = Some(wrapper(&plan));
        let Ok((pool, _)) = Pool::import(POOL, options) else {
            assert!(plan.is_stopped(), "cut {cut}: import failed with power");
            continue;
        };
        tarn::fs::test_hook_sync_each_replayed_record(true);
        let opened = FileSystem::open(pool.root_objset(), pool.core.txgs.clone());
        tarn::fs::test_hook_sync_each_replayed_record(false);
        let replayed_and_synced = pool.core.txgs.last_synced().0 >= 3;
        let Ok(fs) = opened else {
            assert!(plan.is_stopped(), "cut {cut}: open failed with power");
            pool.core.txgs.suspend("power cut".into());
            continue;
        };
        if !plan.is_stopped() {
            // Every write of the import and replay happened: the cuts are done.
            drop(fs);
            pool.export().unwrap();
            assert!(cut > 0);
            break;
        }
        plan.stop_now();
        if replayed_and_synced {
            cuts_after_a_synced_record += 1;
        }
        crash(pool, fs);

        let pool = import(dir.path(), POOL, tiny());
        let fs = open_fs(&pool);
        assert_eq!(
            names(&fs),
            expected,
            "cut at write {cut} of the first replay"
        );
        assert_eq!(fs.getattr(file).unwrap().nlink, 2, "cut {cut}");
        drop(fs);
        check_clean(&pool, &format!("cut {cut}"));
        pool.export().unwrap();
    }
    assert!(
        cuts_after_a_synced_record > 0,
        "no cut came after a replayed record synced"
    );
}

/// What one round of the power-cut test did, to compare with what came back.
struct Round {
    /// The names after each namespace change of the round (index 0: at its start).
    states: Vec<Names>,
    /// Per object, the index into `states` of the last change that named it.
    last_change: BTreeMap<u64, usize>,
    /// Contents of the files made this round, and whether an fsync after the write returned.
    written: BTreeMap<u64, (Vec<u8>, bool)>,
    /// The index into `states` that an fsync that returned made durable.
    durable_state: usize,
    /// Contents of every file at the round's start.
    contents_before: BTreeMap<u64, Vec<u8>>,
}

impl Round {
    fn changed(&mut self, state: Names, objects: &[u64]) {
        self.states.push(state);
        let index = self.states.len() - 1;
        for &object in objects {
            self.last_change.insert(object, index);
        }
    }

    fn fsynced(&mut self, object: u64) {
        if let Some(&index) = self.last_change.get(&object) {
            self.durable_state = self.durable_state.max(index);
        }
        if let Some((_, durable)) = self.written.get_mut(&object) {
            *durable = true;
        }
    }

    /// What came back after the power cut must be the names after some change at or after
    /// the last one an fsync made durable, and every file whole.
    fn verify(&self, fs: &FileSystem, what: &str) {
        let now = names(fs);
        let index = self
            .states
            .iter()
            .position(|state| *state == now)
            .unwrap_or_else(|| panic!("{what}: the names are no state the round went through"));
        // An identical state can recur (a create then its unlink): take the latest match.
        let latest = self.states.iter().rposition(|state| *state == now).unwrap();
        assert!(
            latest >= self.durable_state,
            "{what}: names of change {index}..={latest} came back, change {} was fsynced",
            self.durable_state
        );
        for (_, _, object) in &now {
            if fs.getattr(*object).unwrap().kind != FileKind::Regular {
                continue;
            }
            let bytes = read_all(fs, *object);
            if let Some((contents, durable)) = self.written.get(object) {
                assert!(
                    bytes == *contents || (!durable && bytes.is_empty()),
                    "{what}: file {object} has {} bytes, {} written (fsynced: {durable})",
                    bytes.len(),
                    contents.len()
                );
            } else if let Some(before) = self.contents_before.get(object) {
                assert_eq!(&bytes, before, "{what}: file {object} changed");
            }
        }
    }
}

fn contents(fs: &FileSystem, state: &Names) -> BTreeMap<u64, Vec<u8>> {
    state
        .iter()
        .filter(|(_, _, object)| fs.getattr(*object).unwrap().kind == FileKind::Regular)
        .map(|(_, _, object)| (*object, read_all(fs, *object)))
        .collect()
}

/// Random namespace changes, writes and fsyncs, then the power fails at a random write or
/// after the last fsync (unflushed writes lost), round after round on one pool: every fsync
/// that returned is there, the names are those after some change no older than the last
/// fsynced one (the log replays a prefix of the namespace changes, in order), no file is half
/// written, `check` is clean. In a third of the rounds the power fails first during the
/// import and replay (with a txg synced after each replayed record), so the next replay
/// starts over on a tree with part of the records applied and synced.
#[test]
fn power_cuts_during_namespace_changes_lose_no_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    pool.export().unwrap();
    let mut previous: Option<Round> = None;
    let mut replayed = 0u64;
    for seed in 0..30u64 {
        let what = format!("seed {seed}");
        let plan = FaultPlan::new();
        plan.set_power_cut(seed);
        let mut options = ImportOptions::new(dirs(dir.path()), tiny());
        options.wrap_device = Some(wrapper(&plan));
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cut_in_replay = previous.is_some() && rng.gen_bool(0.33);
        if cut_in_replay {
            plan.stop_at_write(rng.gen_range(0..60));
        }
        let (pool, _) = match Pool::import(POOL, options) {
            Ok(imported) => imported,
            Err(error) if plan.is_stopped() => {
                eprintln!("{what}: import failed after the power cut: {error}");
                continue;
            }
            Err(error) => panic!("{what}: import: {error}"),
        };
        // A replay the power cuts short syncs after each record, as a busy pool's txg timer
        // may: the next replay then starts on a tree with a prefix of the records synced.
        tarn::fs::test_hook_sync_each_replayed_record(cut_in_replay);
        let opened = FileSystem::open(pool.root_objset(), pool.core.txgs.clone());
        tarn::fs::test_hook_sync_each_replayed_record(false);
        let fs = match opened {
            Ok(fs) => fs,
            Err(error) if plan.is_stopped() => {
                eprintln!("{what}: open failed after the power cut: {error}");
                pool.core.txgs.suspend("power cut".into());
                continue;
            }
            Err(error) => panic!("{what}: open: {error}"),
        };
        if cut_in_replay {
            // The power failed during (or after) the import and replay, or will at the
            // next write: crash now; the next round replays again.
            eprintln!(
                "{what}: power cut at write {} of the import and replay",
                plan.write_count()
            );
            plan.stop_now();
            crash(pool, fs);
            continue;
        }
        replayed += fs
            .intent_log()
            .unwrap()
            .stats
            .replayed
            .load(Ordering::Relaxed);
        if let Some(round) = &previous {
            round.verify(&fs, &what);
        }
        pool.sync().unwrap();
        check_clean(&pool, &what);
        let root = fs.root();
        let start = names(&fs);
        let mut round = Round {
            contents_before: contents(&fs, &start),
            states: vec![start],
            last_change: BTreeMap::new(),
            written: BTreeMap::new(),
            durable_state: 0,
        };
        let pause = pool.core.txgs.pause_syncs();
        if rng.gen_bool(0.6) {
            plan.stop_at_write(plan.write_count() + rng.gen_range(0..40));
        }
        for step in 0..rng.gen_range(10..40) {
            if plan.is_stopped() {
                break;
            }
            let state = round.states.last().unwrap().clone();
            let dirs: Vec<u64> = std::iter::once(root)
                .chain(
                    state
                        .iter()
                        .filter(|(_, name, _)| name.starts_with(b"d"))
                        .map(|(_, _, object)| *object),
                )
                .collect();
            let files: Vec<(u64, Vec<u8>, u64)> = state
                .iter()
                .filter(|(_, name, _)| name.starts_with(b"f"))
                .cloned()
                .collect();
            let dir = dirs[rng.gen_range(0..dirs.len())];
            let name = format!("{}{seed}-{step}", if rng.gen_bool(0.8) { "f" } else { "d" });
            let choice = rng.gen_range(0..100);
            let ok = match choice {
                0..=34 if name.starts_with('f') => {
                    let Ok(attr) = fs.create(dir, name.as_bytes(), 0o644, 0, 0) else {
                        break;
                    };
                    round.changed(names(&fs), &[dir, attr.ino]);
                    let data = pattern(seed * 100 + step, rng.gen_range(1..6000));
                    if fs.write(attr.ino, 0, &data).is_err() {
                        break;
                    }
                    round.written.insert(attr.ino, (data, false));
                    rng.gen_bool(0.7).then_some(attr.ino)
                }
                0..=34 => {
                    let Ok(attr) = fs.mkdir(dir, name.as_bytes(), 0o755, 0, 0) else {
                        break;
                    };
                    round.changed(names(&fs), &[dir, attr.ino]);
                    rng.gen_bool(0.3).then_some(attr.ino)
                }
                35..=59 if !files.is_empty() => {
                    let (from, old, object) = files[rng.gen_range(0..files.len())].clone();
                    let (to, new) = if rng.gen_bool(0.25) {
                        let (to, new, _) = files[rng.gen_range(0..files.len())].clone();
                        (to, new)
                    } else {
                        (dir, format!("f{seed}-{step}").into_bytes())
                    };
                    let replaced = state
                        .iter()
                        .find(|(d, n, _)| *d == to && *n == new)
                        .map(|(_, _, o)| *o);
                    if fs.rename(from, &old, to, &new, 0).is_err() {
                        break;
                    }
                    let mut touched = vec![from, to, object];
                    touched.extend(replaced);
                    round.changed(names(&fs), &touched);
                    rng.gen_bool(0.5).then_some(object)
                }
                60..=69 if !files.is_empty() => {
                    let (_, _, object) = files[rng.gen_range(0..files.len())].clone();
                    let new = format!("f{seed}-{step}");
                    if fs.link(object, dir, new.as_bytes()).is_err() {
                        break;
                    }
                    round.changed(names(&fs), &[dir, object]);
                    rng.gen_bool(0.5).then_some(object)
                }
                70..=84 if !files.is_empty() => {
                    let (from, old, object) = files[rng.gen_range(0..files.len())].clone();
                    if fs.unlink(from, &old).is_err() {
                        break;
                    }
                    round.changed(names(&fs), &[from, object]);
                    rng.gen_bool(0.5).then_some(from)
                }
                85..=89 => {
                    // An empty directory goes (not the root).
                    let empty = state.iter().find(|(_, name, object)| {
                        name.starts_with(b"d") && !state.iter().any(|(d, _, _)| d == object)
                    });
                    let Some((parent, name, object)) = empty.cloned() else {
                        continue;
                    };
                    if fs.rmdir(parent, &name).is_err() {
                        break;
                    }
                    round.changed(names(&fs), &[parent, object]);
                    Some(parent)
                }
                _ => {
                    let objects: Vec<u64> = state.iter().map(|(_, _, object)| *object).collect();
                    (!objects.is_empty()).then(|| objects[rng.gen_range(0..objects.len())])
                }
            };
            if let Some(object) = ok {
                if fs.fsync(object).is_err() || plan.is_stopped() {
                    break;
                }
                round.fsynced(object);
            }
        }
        plan.stop_now();
        drop(pause);
        previous = Some(round);
        crash(pool, fs);
    }
    let pool = import(dir.path(), POOL, tiny());
    let fs = open_fs(&pool);
    previous.unwrap().verify(&fs, "final");
    replayed += fs
        .intent_log()
        .unwrap()
        .stats
        .replayed
        .load(Ordering::Relaxed);
    assert!(replayed > 50, "only {replayed} records replayed in all");
    pool.sync().unwrap();
    check_clean(&pool, "final");
}
