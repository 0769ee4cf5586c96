//! Write admission reads pool-level space counters, never a scan under the metaslab group
//! locks. Guards a stall: admission used to sum every metaslab under the locks
//! the sync thread holds during a group's sync and during metaslab loads, so writers waited
//! for the sync. Also holds the counters to the scan after a workload of writes, overwrites,
//! deletes and syncs.

use crate::common;

use std::sync::mpsc;
use std::time::Duration;

use tarn::block::blkptr::Compression;
use tarn::types::VdevId;

use common::*;

#[test]
fn admission_does_not_wait_for_a_held_group_lock() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "admit", single(dir.path(), "a.img"), tiny());
    let core = pool.core.clone();
    let space = core.io.space.clone();
    let answered = space.while_group_locked(VdevId(0), || {
        let (sender, receiver) = mpsc::channel();
        let core = core.clone();
        std::thread::spawn(move || {
            let _ = sender.send(core.write_fits(4096));
        });
        receiver.recv_timeout(Duration::from_secs(5))
    });
    assert_eq!(
        answered,
        Ok(true),
        "admission waited for the metaslab group lock (or refused a 4 KiB write)"
    );
    pool.export().unwrap();
}

#[test]
fn counters_equal_the_scan_after_writes_frees_and_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "count", single(dir.path(), "a.img"), tiny());
    let objset = pool.root_objset();
    let space = pool.core.io.space.clone();
    let mut objects = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..40u64 {
        match next() % 4 {
            0 | 1 => objects.push(create_file(&pool, &objset, 4096, Compression::Off)),
            2 if !objects.is_empty() => {
                let object = objects[(next() % objects.len() as u64) as usize];
                let hold = pool.assign().unwrap();
                let offset = (next() % 64) * 4096;
                objset
                    .write(&hold.tx(), object, offset, &pattern(round, 16384))
                    .unwrap();
            }
            _ if !objects.is_empty() => {
                let object = objects.swap_remove((next() % objects.len() as u64) as usize);
                let hold = pool.assign().unwrap();
                objset.remove_object(&hold.tx(), object).unwrap();
            }
            _ => {}
        }
        if next() % 3 == 0 {
            pool.sync().unwrap();
        }
        let _pause = pool.core.txgs.pause_syncs();
        assert_eq!(space.counters(), space.totals(), "round {round}");
    }
    pool.sync().unwrap();
    assert_eq!(space.counters(), space.totals());
    assert_clean(&pool);
    pool.export().unwrap();
    // After import, metaslab loads put recent frees back into the defer trees: still equal.
    let pool = import(dir.path(), "count", tiny());
    let objset = pool.root_objset();
    let space = pool.core.io.space.clone();
    for round in 0..4 {
        create_file(&pool, &objset, 4096, Compression::Off);
        pool.sync().unwrap();
        let _pause = pool.core.txgs.pause_syncs();
        assert_eq!(
            space.counters(),
            space.totals(),
            "after import, round {round}"
        );
    }
    pool.export().unwrap();
}
