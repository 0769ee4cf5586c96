//! Guards the dirty time log of a block written ahead of its txg (an fsync's write in place,
//! block/prewrite.rs) on a mirror. A mirror child that missed such a write logged the txg the
//! sync thread was writing, not the txg the block is born in (the open one, later): the
//! resilver, which copies the blocks born in the logged txgs, then passed over the block, the
//! child kept no copy of it, and a scrub after the resilver, which had reported the mirror
//! whole, found the copies bad. `tarn-stress` found it with write errors injected on one side
//! of its mirror while fsyncs ran.

use crate::common;

use std::path::PathBuf;

use tarn::pool::scan::ScanFunction;
use tarn::pool::VdevSpec;
use tarn::vdev::inject::{InjectedFault, InjectedIo, Injection};

use common::*;

const POOL: &str = "wipdtl";

#[test]
fn a_write_in_place_missed_by_one_side_is_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let sides = [dir.path().join("a.img"), dir.path().join("b.img")];
    let pool = create_pool(
        dir.path(),
        POOL,
        vec![VdevSpec::Mirror(sides.to_vec())],
        tiny(),
    );
    let fs = open_fs(&pool);
    let ino = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    pool.sync().unwrap();
    // Side a fails every write while the fsync writes its blocks in place; syncs are paused,
    // so the blocks are born in the open txg while the syncing txg is an older one.
    let pause = pool.core.txgs.pause_syncs();
    let mut expect = Vec::new();
    for index in 0..8u64 {
        let data = pattern(index, 131_000);
        fs.write(ino, expect.len() as u64, &data).unwrap();
        expect.extend_from_slice(&data);
    }
    let id = pool.core.injector.add(Injection {
        device: Some(PathBuf::from(&sides[0])),
        ranges: Vec::new(),
        fault: InjectedFault::Io,
        io: InjectedIo::Write,
        percent: 100,
        count: None,
        target: "side a".into(),
    });
    fs.fsync(ino).unwrap();
    pool.core.injector.clear(Some(id));
    drop(pause);
    let zil = fs.intent_log().unwrap().clone();
    assert!(
        zil.stats
            .indirect_records
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 8,
        "the fsync wrote no block in place"
    );
    pool.sync().unwrap();
    pool.core.resilver_if_needed();
    pool.sync().unwrap();
    pool.core.wait_scan(ScanFunction::Resilver).unwrap();
    pool.core.request_scrub().unwrap();
    pool.sync().unwrap();
    pool.core.wait_scan(ScanFunction::Scrub).unwrap();
    let scrub = pool.core.scan_status().unwrap().phys;
    assert_eq!(scrub.function, ScanFunction::Scrub);
    assert_eq!(
        (scrub.copies_bad, scrub.unrepaired, scrub.errors),
        (0, 0, 0),
        "after the resilver, the scrub found bad copies"
    );
    assert!(read_all(&fs, ino) == expect);
    drop(fs);
    pool.export().unwrap();
}
