//! RAID-Z pools on sparse files: every layout writes and reads back, reads go on with up to
//! `parity` children failing, silent damage is reconstructed, charged to its child and
//! repaired by reads and scrub, a child taken offline is resilvered when it returns, and
//! `check` is clean at the end of each.

use crate::common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use tarn::check::check_pool;
use tarn::pool::scan::{ScanFunction, ScanState};
use tarn::pool::{CreateOptions, ImportOptions, Pool, VdevSpec};
use tarn::tunables::Tunables;
use tarn::vdev::{FaultPlan, ReadFaultKind, VDEV_LABEL_START_SIZE};

const POOL: &str = "striped";
const FILE_BYTES: usize = 200 << 10;

struct Raidz {
    dir: tempfile::TempDir,
    plans: Arc<parking_lot::Mutex<Plans>>,
    parity: u8,
    width: usize,
}

impl Raidz {
    fn new(parity: u8, width: usize) -> Raidz {
        Raidz {
            dir: tempfile::tempdir().unwrap(),
            plans: Arc::new(parking_lot::Mutex::new(Plans::new())),
            parity,
            width,
        }
    }

    fn path(&self, child: usize) -> PathBuf {
        self.dir.path().join(format!("d{child}.img"))
    }

    fn plan(&self, child: usize) -> Arc<FaultPlan> {
        self.plans.lock()[&self.path(child)].clone()
    }

    fn create(&self, tunables: Tunables) -> Pool {
        Pool::create(CreateOptions {
            name: POOL.into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Raidz {
                parity: self.parity,
                paths: (0..self.width).map(|child| self.path(child)).collect(),
            }],
            create_size: Some(VDEV_SIZE),
            force: false,
            tunables,
            wrap_device: Some(per_path_fault_wrapper(self.plans.clone())),
            disabled_features: Vec::new(),
        })
        .unwrap()
    }

    fn import(&self, tunables: Tunables) -> Pool {
        let mut options = ImportOptions::new(vec![self.dir.path().to_path_buf()], tunables);
        options.wrap_device = Some(per_path_fault_wrapper(self.plans.clone()));
        Pool::import(POOL, options).unwrap().0
    }

    /// Make every data-area read of `child` fail.
    fn fail_reads(&self, child: usize) {
        self.plan(child)
            .add_read_fault(VDEV_LABEL_START_SIZE..u64::MAX, ReadFaultKind::Fail);
    }

    fn clear_faults(&self) {
        for child in 0..self.width {
            self.plan(child).clear_read_faults();
        }
    }
}

fn checksum_errors(pool: &Pool, child: usize) -> u64 {
    pool.core.io.vdevs.tops()[0].children[child]
        .stats
        .snapshot()
        .checksum_errors
}

fn scrub(pool: &Pool) -> tarn::pool::scan::ScanPhys {
    pool.core.request_scrub().unwrap();
    pool.core.wait_scan(ScanFunction::Scrub).unwrap();
    pool.sync().unwrap();
    let phys = pool.core.scan_status().expect("a scrub ran").phys;
    assert_eq!(phys.state, ScanState::Finished);
    phys
}

fn assert_clean(pool: &Pool) {
    let report = check_pool(pool, false).unwrap();
    assert!(report.is_clean(), "{report:#?}");
}

/// Overwrite the data area of `path` (its first `bytes`) with garbage.
fn wipe(path: &Path, bytes: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let garbage: Vec<u8> = (0..bytes).map(|index| (index * 131 + 7) as u8).collect();
    file.write_all_at(&garbage, VDEV_LABEL_START_SIZE).unwrap();
}

#[test]
fn every_parity_and_width_writes_reads_back_and_checks_clean() {
    for parity in 1u8..=3 {
        for width in [parity as usize + 1, parity as usize + 2, 7] {
            let raidz = Raidz::new(parity, width);
            let pool = raidz.create(tiny());
            let top = &pool.core.io.vdevs.tops()[0];
            assert_eq!(top.kind.group_name(0).unwrap(), format!("raidz{parity}-0"));
            assert_eq!(
                pool.feature_state("raidz"),
                Some(tarn::pool::FeatureState::Active)
            );
            let files = write_files(&pool, 7, 12, FILE_BYTES);
            pool.export().unwrap();
            let pool = raidz.import(tiny());
            assert_files_read_right(&pool, &files, FILE_BYTES, "after import");
            assert_clean(&pool);
            pool.export().unwrap();
        }
    }
}

#[test]
fn reads_go_on_with_up_to_parity_children_failing() {
    let raidz = Raidz::new(2, 6);
    let pool = raidz.create(tiny());
    let files = write_files(&pool, 11, 16, FILE_BYTES);
    pool.export().unwrap();
    for failing in [vec![0], vec![5], vec![1, 4], vec![2, 3]] {
        let pool = raidz.import(tiny());
        for &child in &failing {
            raidz.fail_reads(child);
        }
        assert_files_read_right(&pool, &files, FILE_BYTES, &format!("{failing:?} failing"));
        raidz.clear_faults();
        pool.export().unwrap();
    }
}

#[test]
fn silent_damage_is_reconstructed_charged_and_repaired_by_scrub() {
    let raidz = Raidz::new(1, 4);
    let pool = raidz.create(tiny());
    let files = write_files(&pool, 3, 24, FILE_BYTES);
    pool.export().unwrap();
    // Child 2's whole data area holds garbage now: every column there is wrong, silently.
    wipe(&raidz.path(2), 16 << 20);
    let pool = raidz.import(tiny());
    assert_files_read_right(&pool, &files, FILE_BYTES, "child 2 damaged");
    assert!(checksum_errors(&pool, 2) > 0);
    for child in [0, 1, 3] {
        assert_eq!(checksum_errors(&pool, child), 0, "child {child}");
    }
    let first = scrub(&pool);
    assert_eq!((first.errors, first.unrepaired), (0, 0), "{first:?}");
    let second = scrub(&pool);
    assert_eq!(
        second.copies_bad, 0,
        "a second scrub finds nothing: {second:?}"
    );
    assert_clean(&pool);
    pool.export().unwrap();
    // Child 2 was rewritten: with child 0 failing, its columns give the data back.
    let pool = raidz.import(tiny());
    raidz.fail_reads(0);
    assert_files_read_right(&pool, &files, FILE_BYTES, "child 0 failing after repair");
    raidz.clear_faults();
    pool.export().unwrap();
}

#[test]
fn scrub_finds_and_rewrites_damaged_parity() {
    let raidz = Raidz::new(2, 5);
    let pool = raidz.create(tiny());
    let files = write_files(&pool, 21, 16, FILE_BYTES);
    pool.export().unwrap();
    // Normal reads never read parity: damage on one child is found by the data checksum only
    // where it holds data; the scrub compares parity with the data as well.
    wipe(&raidz.path(4), 16 << 20);
    let pool = raidz.import(tiny());
    let first = scrub(&pool);
    assert!(first.copies_bad > 0, "{first:?}");
    assert_eq!((first.errors, first.unrepaired), (0, 0), "{first:?}");
    assert!(checksum_errors(&pool, 4) > 0);
    let second = scrub(&pool);
    assert_eq!(second.copies_bad, 0, "{second:?}");
    assert_clean(&pool);
    pool.export().unwrap();
    // With two other children failing, the repaired child's parity and data still serve.
    let pool = raidz.import(tiny());
    raidz.fail_reads(0);
    raidz.fail_reads(1);
    assert_files_read_right(&pool, &files, FILE_BYTES, "children 0 and 1 failing");
    raidz.clear_faults();
    pool.export().unwrap();
}

#[test]
fn offline_child_misses_writes_and_is_resilvered_when_back() {
    let raidz = Raidz::new(1, 4);
    let pool = raidz.create(tiny());
    let before = write_files(&pool, 40, 8, FILE_BYTES);
    let name = raidz.path(1).display().to_string();
    pool.offline(&name).unwrap();
    // A second child cannot go: raidz1 reads with one gone at most.
    assert!(pool.offline(&raidz.path(2).display().to_string()).is_err());
    let during = write_files(&pool, 60, 8, FILE_BYTES);
    assert!(!pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    assert_files_read_right(&pool, &during, FILE_BYTES, "degraded");
    pool.online(&name).unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    pool.sync().unwrap();
    assert!(pool.core.io.vdevs.tops()[0].children[1].dtl.is_empty());
    assert_clean(&pool);
    pool.export().unwrap();
    // The resilvered child now holds its columns: another child failing is survived.
    let pool = raidz.import(tiny());
    raidz.fail_reads(3);
    assert_files_read_right(&pool, &before, FILE_BYTES, "old files, child 3 failing");
    assert_files_read_right(&pool, &during, FILE_BYTES, "new files, child 3 failing");
    raidz.clear_faults();
    pool.export().unwrap();
}

/// Replace `child` by a new file, wait for the replace to end, and check the new leaf took the
/// old one's place among the children (the column order).
fn replace_child(raidz: &Raidz, pool: &Pool, child: usize, new_name: &str) {
    let new_path = raidz.dir.path().join(new_name);
    std::fs::File::create(&new_path)
        .unwrap()
        .set_len(VDEV_SIZE)
        .unwrap();
    let guid = pool
        .replace(
            &raidz.path(child).display().to_string(),
            Some(&new_path),
            false,
        )
        .unwrap();
    pool.wait_replaced(guid).unwrap();
    let top = pool.core.io.vdevs.tops()[0].clone();
    assert_eq!(top.children.len(), raidz.width);
    assert_eq!(
        top.children[child].guid, guid,
        "the new child takes the old one's place"
    );
    assert!(top.children[child].dtl.is_empty());
    assert!(top.children[child].replaces().is_none());
}

#[test]
fn a_child_is_replaced_online_and_the_new_one_holds_its_columns() {
    let raidz = Raidz::new(1, 4);
    let pool = raidz.create(tiny());
    let files = write_files(&pool, 300, 16, FILE_BYTES);
    replace_child(&raidz, &pool, 2, "new2.img");
    let more = write_files(&pool, 330, 4, FILE_BYTES);
    assert_clean(&pool);
    pool.export().unwrap();
    // The old file is out of the pool; the new one serves child 2's columns: with child 1
    // failing, every block needs them.
    std::fs::remove_file(raidz.path(2)).unwrap();
    let pool = raidz.import(tiny());
    raidz.fail_reads(1);
    assert_files_read_right(&pool, &files, FILE_BYTES, "replaced, child 1 failing");
    assert_files_read_right(&pool, &more, FILE_BYTES, "written after, child 1 failing");
    raidz.clear_faults();
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_lost_child_is_rebuilt_whole_by_replace() {
    let raidz = Raidz::new(2, 5);
    let pool = raidz.create(tiny());
    let files = write_files(&pool, 400, 16, FILE_BYTES);
    pool.export().unwrap();
    std::fs::remove_file(raidz.path(0)).unwrap();
    let pool = raidz.import(tiny());
    assert_files_read_right(&pool, &files, FILE_BYTES, "child 0 missing");
    let during = write_files(&pool, 440, 4, FILE_BYTES);
    replace_child(&raidz, &pool, 0, "new0.img");
    assert_eq!(
        pool.core.io.vdevs.tops()[0].health(),
        tarn::vdev::VdevHealth::Online
    );
    assert_clean(&pool);
    pool.export().unwrap();
    // Two other children failing: the rebuilt child's columns are needed for every block.
    let pool = raidz.import(tiny());
    raidz.fail_reads(3);
    raidz.fail_reads(4);
    assert_files_read_right(&pool, &files, FILE_BYTES, "rebuilt child, 3 and 4 failing");
    assert_files_read_right(
        &pool,
        &during,
        FILE_BYTES,
        "degraded writes, 3 and 4 failing",
    );
    raidz.clear_faults();
    pool.export().unwrap();
}

#[test]
fn attach_detach_and_log_raidz_are_refused() {
    let raidz = Raidz::new(1, 3);
    let pool = raidz.create(tiny());
    let child = raidz.path(0).display().to_string();
    let error = pool
        .attach(&child, &raidz.dir.path().join("new.img"), false)
        .unwrap_err()
        .to_string();
    assert!(error.contains("can only attach to mirrors"), "{error}");
    let error = pool.detach(&child).unwrap_err().to_string();
    assert!(error.contains("only applicable to mirror"), "{error}");
    pool.export().unwrap();
}

#[test]
fn two_children_offline_across_import_are_resilvered_without_checksum_errors() {
    let raidz = Raidz::new(2, 5);
    let pool = raidz.create(tiny());
    let before = write_files(&pool, 80, 8, FILE_BYTES);
    let one = raidz.path(1).display().to_string();
    let three = raidz.path(3).display().to_string();
    pool.offline(&one).unwrap();
    let middle = write_files(&pool, 90, 4, FILE_BYTES);
    pool.offline(&three).unwrap();
    let during = write_files(&pool, 100, 8, FILE_BYTES);
    pool.export().unwrap();
    let pool = raidz.import(tiny());
    let after_import = write_files(&pool, 120, 4, FILE_BYTES);
    for files in [&before, &middle, &during, &after_import] {
        assert_files_read_right(&pool, files, FILE_BYTES, "two offline");
    }
    for name in [&one, &three] {
        pool.online(name).unwrap();
        pool.core.wait_scan(ScanFunction::Resilver).unwrap();
        pool.sync().unwrap();
    }
    let scrubbed = scrub(&pool);
    assert_eq!(scrubbed.copies_bad, 0, "{scrubbed:?}");
    for child in 0..5 {
        assert_eq!(checksum_errors(&pool, child), 0, "child {child}");
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn forced_gangs_on_raidz_read_back_heal_and_free_every_piece() {
    let raidz = Raidz::new(1, 4);
    let mut tunables = tiny();
    tunables.metaslab_force_ganging = 8 << 10;
    tunables.metaslab_force_ganging_pct = 100;
    let pool = raidz.create(tunables.clone());
    let files = write_files(&pool, 200, 6, FILE_BYTES);
    assert!(
        pool.core.io.gang_blocks() > 0,
        "no gang blocks were written"
    );
    assert_clean(&pool);
    pool.export().unwrap();
    wipe(&raidz.path(3), 8 << 20);
    let pool = raidz.import(tunables.clone());
    assert_files_read_right(&pool, &files, FILE_BYTES, "gangs, child 3 damaged");
    let scrubbed = scrub(&pool);
    assert_eq!(
        (scrubbed.errors, scrubbed.unrepaired),
        (0, 0),
        "{scrubbed:?}"
    );
    assert_eq!(scrub(&pool).copies_bad, 0);
    assert_clean(&pool);
    let before = pool.core.io.space.totals().allocated;
    let objset = pool.root_objset();
    for (object, _) in &files {
        let hold = pool.assign().unwrap();
        objset.remove_object(&hold.tx(), *object).unwrap();
    }
    wait_freed(&pool);
    assert!(pool.core.io.space.totals().allocated < before);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The child of [`a_resilver_killed_while_writing_resumes_and_converges`]: imports the pool,
/// brings child 1 back online (a slow resilver starts), writes a marker once the resilver has
/// examined something, and goes on writing and syncing until it is killed.
#[test]
fn raidz_resilver_kill_child() {
    let Ok(dir) = std::env::var("TARN_RAIDZ_DIR") else {
        return;
    };
    let mut slow = tiny();
    slow.scan_blocks_per_txg_max = 4;
    slow.txg_timeout = 1;
    let (pool, _) =
        Pool::import(POOL, ImportOptions::new(vec![PathBuf::from(&dir)], slow)).unwrap();
    pool.online(&Path::new(&dir).join("d1.img").display().to_string())
        .unwrap();
    let mut seed = 10_000;
    loop {
        write_files(&pool, seed, 2, FILE_BYTES);
        seed += 2;
        let examined = pool
            .core
            .scan_status()
            .map_or(0, |status| status.phys.examined);
        if examined > 0 {
            let marker = Path::new(&dir).join("marker");
            if !marker.exists() {
                std::fs::write(marker, examined.to_string()).unwrap();
            }
        }
    }
}

#[test]
fn a_resilver_killed_while_writing_resumes_and_converges() {
    let raidz = Raidz::new(2, 5);
    let pool = raidz.create(tiny());
    let before = write_files(&pool, 500, 12, FILE_BYTES);
    pool.offline(&raidz.path(1).display().to_string()).unwrap();
    let missed = write_files(&pool, 600, 12, FILE_BYTES);
    pool.export().unwrap();
    let child = spawn_child(
        module_path!(),
        "raidz_resilver_kill_child",
        &[("TARN_RAIDZ_DIR", raidz.dir.path().display().to_string())],
    );
    wait_for_file(
        &raidz.dir.path().join("marker"),
        std::time::Duration::from_secs(120),
    );
    std::thread::sleep(std::time::Duration::from_millis(150));
    kill_child(child);
    // The resilver resumes at import and converges: no child misses a txg, the pool checks
    // clean, and child 1's columns serve reads with two other children failing.
    let pool = raidz.import(tiny());
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    pool.sync().unwrap();
    for leaf in &pool.core.io.vdevs.tops()[0].children {
        assert!(
            leaf.dtl.is_empty(),
            "{} still misses txgs",
            leaf.path.display()
        );
    }
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = raidz.import(tiny());
    raidz.fail_reads(0);
    raidz.fail_reads(4);
    assert_files_read_right(&pool, &before, FILE_BYTES, "before, 0 and 4 failing");
    assert_files_read_right(&pool, &missed, FILE_BYTES, "missed by 1, 0 and 4 failing");
    raidz.clear_faults();
    for child in 0..5 {
        assert_eq!(checksum_errors(&pool, child), 0, "child {child}");
    }
    pool.export().unwrap();
}

#[test]
fn power_cuts_during_raidz_writes_lose_nothing_synced() {
    for (round, cut_after) in [0u64, 5, 17, 40].into_iter().enumerate() {
        let raidz = Raidz::new(1, 4);
        let pool = raidz.create(tiny());
        let synced = write_files(&pool, 700, 8, FILE_BYTES);
        // Every child keeps a volatile write cache from here. One child loses power first, at
        // write `cut_after` (its later writes vanish while reported done: within the parity);
        // the power of all goes together while the pool writes and syncs, so what each child
        // had not flushed is kept, lost or torn.
        for child in 0..4 {
            raidz
                .plan(child)
                .set_power_cut(round as u64 * 11 + child as u64 + 1);
        }
        let early = raidz.plan(round % 4);
        early.stop_at_write(early.write_count() + cut_after);
        let plans: Vec<_> = (0..4).map(|child| raidz.plan(child)).collect();
        let cutter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5 + cut_after));
            for plan in plans {
                plan.stop_now();
            }
        });
        let objset = pool.root_objset();
        for index in 0..6 {
            let object = create_file(
                &pool,
                &objset,
                16 << 10,
                tarn::block::blkptr::Compression::Off,
            );
            let hold = pool.assign().unwrap();
            objset
                .write(&hold.tx(), object, 0, &pattern(800 + index, FILE_BYTES))
                .unwrap();
            drop(hold);
            let _ = pool.sync();
        }
        cutter.join().unwrap();
        drop(objset);
        drop(pool);
        for child in 0..4 {
            raidz.plan(child).clear();
        }
        let pool = raidz.import(tiny());
        assert_files_read_right(
            &pool,
            &synced,
            FILE_BYTES,
            &format!("cut after {cut_after}"),
        );
        let scrubbed = scrub(&pool);
        assert_eq!(
            (scrubbed.errors, scrubbed.unrepaired),
            (0, 0),
            "cut after {cut_after}: {scrubbed:?}"
        );
        assert_clean(&pool);
        pool.export().unwrap();
        // Whatever the cut tore, the synced files survive one child failing afterwards.
        let pool = raidz.import(tiny());
        raidz.fail_reads(2);
        assert_files_read_right(&pool, &synced, FILE_BYTES, "after the cut, child 2 failing");
        raidz.clear_faults();
        pool.export().unwrap();
    }
}

fn dataset_info(pool: &Pool, name: &str) -> tarn::pool::datasets::DatasetInfo {
    pool.datasets()
        .into_iter()
        .find(|info| info.name == name)
        .unwrap()
}

/// Space is counted in data bytes (OpenZFS's deflate ratio): a dataset's `referenced`, a
/// file's `st_blocks`, a snapshot's deadlist and `avail` speak of what the user stored, while
/// the metaslabs (and `pool list`) hold the parity and padding too; `check` agrees with every
/// figure after writes, a snapshot, overwrites and the snapshot's destroy.
#[test]
fn space_is_counted_in_data_bytes_through_the_deflate_ratio() {
    const FILE: u64 = 1 << 20;
    const FILES: u64 = 8;
    let raidz = Raidz::new(2, 6);
    let pool = raidz.create(tiny());
    let ratio = pool.core.io.vdevs.tops()[0].deflate_ratio();
    assert!(ratio < 512 * 3 / 4 + 1, "raidz2 of 6 deflates: {ratio}");
    let props = [
        ("recordsize".to_string(), "128K".to_string()),
        ("compression".to_string(), "off".to_string()),
    ];
    pool.create_dataset(&format!("{POOL}/data"), &props, false)
        .unwrap();
    let fs = pool.open_file_system(&format!("{POOL}/data")).unwrap();
    pool.sync().unwrap();
    let empty = dataset_info(&pool, &format!("{POOL}/data"));
    let raw_before = pool.core.io.space.totals().allocated;
    let mut inodes = Vec::new();
    for file in 0..FILES {
        let attr = fs
            .create(fs.root(), format!("f{file}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.write(attr.ino, 0, &pattern(file, FILE as usize))
            .unwrap();
        inodes.push(attr.ino);
    }
    pool.sync().unwrap();
    let data = dataset_info(&pool, &format!("{POOL}/data"));
    let grown = data.referenced - empty.referenced;
    let raw = pool.core.io.space.totals().allocated - raw_before;
    let stored = FILE * FILES;
    // 4 data columns of 6: the records take half as much again on disk, and count as data.
    assert!(raw >= stored * 3 / 2, "allocated {raw} for {stored}");
    assert!(
        (stored - stored / 100..=stored + stored / 16).contains(&grown),
        "referenced grew {grown} for {stored} bytes stored ({raw} allocated)"
    );
    for ino in &inodes {
        let bytes = fs.getattr(*ino).unwrap().blocks * 512;
        assert!(
            (FILE - FILE / 100..=FILE + (16 << 10)).contains(&bytes),
            "st_blocks say {bytes} for {FILE}"
        );
    }
    // avail is the free space outside the slop as data bytes.
    let counters = pool.core.io.space.counters();
    let raw_avail = counters.free - counters.slop(pool.core.io.tunables.spa_min_slop);
    let expected = (raw_avail >> 9) * ratio;
    assert!(
        data.available.abs_diff(expected) <= (1 << 20),
        "avail {} for {raw_avail} raw free outside the slop (expected {expected})",
        data.available
    );
    // A snapshot holds the files; overwriting half moves them to its deadlist, counted deflated.
    pool.create_snapshots(&[format!("{POOL}/data@one")], false)
        .unwrap();
    for (file, ino) in inodes.iter().enumerate().take(FILES as usize / 2) {
        fs.write(*ino, 0, &pattern(file as u64 + 100, FILE as usize))
            .unwrap();
    }
    pool.sync().unwrap();
    let snapshot = pool.snapshot_info(&format!("{POOL}/data@one")).unwrap();
    assert!(
        (stored / 2 - stored / 50..=stored / 2 + stored / 16).contains(&snapshot.used),
        "the snapshot alone holds {} for {} overwritten",
        snapshot.used,
        stored / 2
    );
    assert_clean(&pool);
    pool.destroy_snapshots(&format!("{POOL}/data@one"), false)
        .unwrap();
    pool.sync().unwrap();
    let after = dataset_info(&pool, &format!("{POOL}/data"));
    assert!(
        after.referenced.abs_diff(data.referenced) <= stored / 16,
        "referenced {} after the overwrite and destroy, {} before",
        after.referenced,
        data.referenced
    );
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
    let pool = raidz.import(tiny());
    assert_eq!(
        dataset_info(&pool, &format!("{POOL}/data")).referenced,
        after.referenced
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
