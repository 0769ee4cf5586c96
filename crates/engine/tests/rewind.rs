//! Rewind that is safe.
//!
//! - The automatic fallback tried the three newest *written* uberblocks, while freed space is
//!   deferred by txg number: with an empty txg in between, the third could name blocks already
//!   reused. It now tries only uberblocks within `TXG_DEFER_SIZE` txg numbers of the newest.
//! - A rewind left the abandoned newer uberblocks in the ring; once the rewound pool committed a
//!   txg older by number than an abandoned one, the next import took the abandoned uberblock
//!   (whose blocks the new txgs may reuse) for the newest. They are now erased before the first
//!   new txg commits.
//! - `pool import -F` goes further back than the automatic fallback, to the newest txg whose
//!   whole tree reads and checks, and says how many seconds of changes it discards; `-n` only
//!   says so.

use crate::common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use tarn::block::blkptr::{BlockPtr, Compression, ObjectType};
use tarn::pool::uberblock::Uberblock;
use tarn::pool::{fallback_uberblocks, ImportOptions, Pool, PoolError};
use tarn::types::{ObjectId, Txg};
use tarn::vdev::label::{read_uberblock_slots, VDEV_LABEL_START_SIZE};
use tarn::vdev::{BlockDevice, FaultPlan, FaultyDevice, FileDevice, ReadFaultKind};

use common::*;

const POOL: &str = "rewind";

fn uberblock(txg: u64) -> Uberblock {
    Uberblock {
        txg: Txg(txg),
        guid_sum: 1,
        timestamp: txg,
        software_version: 1,
        mos_root: BlockPtr::hole(Txg(txg), ObjectType::Objset, 0),
        reflow: None,
    }
}

#[test]
fn the_automatic_fallback_counts_txg_numbers_not_written_uberblocks() {
    // Written txgs 13, 11 and 10 (12 was empty): frees of 11 are reusable from txg 14, so tree
    // 10 may be damaged; trees 13 and 11 (and 12, which is 11's) are intact.
    let (safe, older) = fallback_uberblocks(&[uberblock(13), uberblock(11), uberblock(10)]);
    assert_eq!(
        safe.iter().map(|ub| ub.txg.0).collect::<Vec<_>>(),
        vec![13, 11]
    );
    assert_eq!(
        older.iter().map(|ub| ub.txg.0).collect::<Vec<_>>(),
        vec![10]
    );
    let (safe, _) = fallback_uberblocks(&[uberblock(9), uberblock(8), uberblock(7), uberblock(6)]);
    assert_eq!(safe.len(), 3);
}

fn write_generation(pool: &Pool, object: ObjectId, generation: u64) -> Txg {
    let objset = pool.root_objset();
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, 0, &pattern(generation, 20_000))
            .unwrap();
        objset
            .set_bonus(
                &hold.tx(),
                object,
                ObjectType::None,
                &generation.to_le_bytes(),
            )
            .unwrap();
    }
    pool.sync().unwrap()
}

fn generation_of(pool: &Pool, object: ObjectId) -> u64 {
    let bonus = pool.root_objset().bonus(object).unwrap();
    let generation = u64::from_le_bytes(bonus[..8].try_into().unwrap());
    let mut data = vec![0u8; 20_000];
    pool.root_objset().read(object, 0, &mut data).unwrap();
    assert_eq!(
        data,
        pattern(generation, 20_000),
        "generation {generation} damaged"
    );
    generation
}

/// The generation the object held as of `txg` (export may commit a txg of its own).
fn generation_at(history: &[(Txg, u64)], txg: Txg) -> u64 {
    history
        .iter()
        .filter(|(synced, _)| *synced <= txg)
        .map(|(_, generation)| *generation)
        .max()
        .expect("a generation at that txg")
}

/// The valid uberblocks on the vdev, newest first.
fn uberblocks_on(path: &Path) -> Vec<Uberblock> {
    let device = FileDevice::open_unlocked_readonly(path).unwrap();
    let mut found: Vec<Uberblock> = read_uberblock_slots(&device, tiny().vdev_ashift)
        .iter()
        .filter_map(|slot| Uberblock::decode(slot).ok().flatten())
        .collect();
    found.sort_by_key(|ub| std::cmp::Reverse(ub.txg));
    found.dedup_by_key(|ub| ub.txg);
    found
}

/// A pool whose object holds generation g as of txg t, for several consecutive txgs; returns
/// the object and (txg, generation) newest first.
fn pool_with_history(dir: &Path) -> (ObjectId, Vec<(Txg, u64)>) {
    let pool = create_pool(dir, POOL, single(dir, "vdev.img"), tiny());
    let object = create_file(&pool, &pool.root_objset(), 4096, Compression::Lz4);
    let mut history: Vec<(Txg, u64)> = (1..=6)
        .map(|generation| (write_generation(&pool, object, generation), generation))
        .collect();
    history.reverse();
    pool.export().unwrap();
    (object, history)
}

#[test]
fn a_rewound_pool_never_imports_an_abandoned_uberblock_later() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vdev.img");
    let (object, history) = pool_with_history(dir.path());
    let newest = uberblocks_on(&path);
    assert!(newest[0].txg >= history[0].0);
    // The two newest MOS roots cannot be read for a moment (a transient fault): import falls
    // back to the third, which is within TXG_DEFER_SIZE numbers.
    let plan = FaultPlan::new();
    for uberblock in &newest[..2] {
        for dva in uberblock.mos_root.copies() {
            let start = VDEV_LABEL_START_SIZE + dva.offset;
            plan.add_read_fault(start..start + dva.size_allocated, ReadFaultKind::Fail);
        }
    }
    let mut options = ImportOptions::new(dirs(dir.path()), tiny());
    let wrap_plan = plan.clone();
    options.wrap_device = Some(Arc::new(
        move |_path: &Path, device: Arc<dyn BlockDevice>| {
            Arc::new(FaultyDevice::new(device, wrap_plan.clone())) as Arc<dyn BlockDevice>
        },
    ));
    let (pool, report) = Pool::import(POOL, options).expect("fallback import");
    assert_eq!(report.txg, newest[2].txg);
    assert_eq!(report.skipped.len(), 2);
    assert_eq!(
        generation_of(&pool, object),
        generation_at(&history, newest[2].txg)
    );
    // Import committed one txg (its labels), older by number than the abandoned newest.
    plan.clear_read_faults();
    let committed = uberblocks_on(&path)[0].txg;
    assert!(
        committed < newest[0].txg,
        "{committed} vs {}",
        newest[0].txg
    );
    drop(pool); // a crash: nothing more is written

    let (pool, report) = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny()))
        .expect("import after the rewound pool crashed");
    assert_eq!(
        report.txg, committed,
        "import took an abandoned uberblock for the newest"
    );
    assert_eq!(
        generation_of(&pool, object),
        generation_at(&history, newest[2].txg)
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Destroy every copy of the MOS root of each uberblock in `victims`.
fn destroy_mos_roots(path: &Path, victims: &[Uberblock]) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for uberblock in victims {
        for dva in uberblock.mos_root.copies() {
            file.write_all_at(
                &vec![0x5Au8; dva.size_allocated as usize],
                VDEV_LABEL_START_SIZE + dva.offset,
            )
            .unwrap();
        }
    }
    file.sync_all().unwrap();
}

#[test]
fn import_f_goes_back_to_the_newest_tree_that_checks_and_n_only_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vdev.img");
    let (object, history) = pool_with_history(dir.path());
    let found = uberblocks_on(&path);
    // The automatic fallback covers the newest three txgs: damage all three.
    destroy_mos_roots(&path, &found[..3]);

    match Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny())) {
        Err(PoolError::NoUsableUberblock(_, why)) => {
            assert!(why.contains("-F"), "the error must suggest -F: {why}")
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok((_, report)) => panic!("imported txg {} past three damaged trees", report.txg),
    }

    let plan = Pool::rewind_plan(POOL, ImportOptions::new(dirs(dir.path()), tiny())).unwrap();
    assert_eq!(plan.txg, found[3].txg);
    assert_eq!(plan.newest_txg, found[0].txg);
    assert_eq!(
        plan.seconds_discarded,
        found[0].timestamp - found[3].timestamp
    );
    assert_eq!(plan.skipped.len(), 3);
    assert_eq!(uberblocks_on(&path), found, "-n wrote something");

    let mut options = ImportOptions::new(dirs(dir.path()), tiny());
    options.rewind = true;
    let (pool, report) = match Pool::import(POOL, options) {
        Ok(opened) => opened,
        Err(error) => panic!("import -F: {error:?}"),
    };
    assert_eq!(report.txg, found[3].txg);
    assert_eq!(report.seconds_discarded, plan.seconds_discarded);
    assert_eq!(
        generation_of(&pool, object),
        generation_at(&history, found[3].txg)
    );
    write_generation(&pool, object, 99);
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(generation_of(&pool, object), 99);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn an_uberblock_naming_a_raidz_reflow_that_the_config_lacks_is_passed_over() {
    // The newest uberblock, resealed with a reflow word for vdev 0 (a single file, never
    // expanding): damage that checksums. Import must not read the MOS with it: it falls back
    // to the uberblock before, and says why it skipped the newest.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vdev.img");
    let (object, history) = pool_with_history(dir.path());
    let newest = uberblocks_on(&path)[0].clone();
    let forged = Uberblock {
        reflow: Some(tarn::vdev::raidz::progress::ReflowProgress {
            vdev: tarn::types::VdevId(0),
            scratch: tarn::vdev::raidz::progress::ScratchState::NotInUse,
            offset: 1 << 20,
        }),
        ..newest.clone()
    };
    let device = FileDevice::open(&path).unwrap();
    let ashift = tiny().vdev_ashift;
    let slot = newest.txg.0 % tarn::vdev::label::uberblock_slot_count(ashift);
    tarn::vdev::label::write_uberblock(&device, ashift, slot, &forged.encode()).unwrap();
    device.flush().unwrap();
    drop(device);
    assert_eq!(uberblocks_on(&path)[0], forged);

    let (pool, report) = Pool::import(POOL, ImportOptions::new(dirs(dir.path()), tiny()))
        .expect("import falls back past the forged uberblock");
    assert!(report.txg < newest.txg);
    let (skipped_txg, why) = &report.skipped[0];
    assert_eq!(*skipped_txg, newest.txg);
    assert!(
        why.contains("raidz reflow of vdev 0 that is not expanding"),
        "{why}"
    );
    assert_eq!(
        generation_of(&pool, object),
        generation_at(&history, report.txg)
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
