//! The pool history: commands logged on a pool are kept in the pool, in
//! order, with their time, user, host and txg, survive export and import, and the ring drops
//! its oldest records, never the newest, when it is full. Before it existed, nothing recorded
//! what had been done to a pool.

use crate::common;

use tarn::pool::history::{HISTORY_CAPACITY_MIN, HISTORY_COMMAND_MAX};

use common::*;

const POOL: &str = "hist";

#[test]
fn history_is_kept_in_order_and_survives_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    assert!(pool.core.history().unwrap().is_empty());
    pool.core
        .log_history("tarn pool create hist /tmp/vdev.img", 0);
    pool.core.log_history("tarn create hist/fs", 1000);
    // Records are written by the next sync, which they trigger alone.
    pool.sync().unwrap();
    let records = pool.core.history().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].command, "tarn pool create hist /tmp/vdev.img");
    assert_eq!(records[1].command, "tarn create hist/fs");
    assert_eq!(records[1].uid, 1000);
    assert_eq!(records[0].user, "root");
    assert!(records[0].txg > 0);
    assert!(records[0].time_seconds > 1_600_000_000);
    pool.core.log_history("tarn pool export hist", 0);
    pool.export().unwrap();

    let pool = import(dir.path(), POOL, tiny());
    let records = pool.core.history().unwrap();
    let commands: Vec<&str> = records.iter().map(|r| r.command.as_str()).collect();
    assert_eq!(
        commands,
        [
            "tarn pool create hist /tmp/vdev.img",
            "tarn create hist/fs",
            "tarn pool export hist"
        ]
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_full_ring_drops_its_oldest_records() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), POOL, single(dir.path(), "vdev.img"), tiny());
    // Each record is about 4 KiB: the ring (its minimum size) holds about 32.
    let record_count = 3 * HISTORY_CAPACITY_MIN as usize / HISTORY_COMMAND_MAX;
    for round in 0..record_count {
        pool.core.log_history(
            &format!("{round:06} {}", "x".repeat(HISTORY_COMMAND_MAX)),
            0,
        );
        if round % 7 == 0 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
    let records = pool.core.history().unwrap();
    assert!(records.len() < record_count / 2, "{} kept", records.len());
    assert!(records.len() >= 20, "{} kept", records.len());
    let rounds: Vec<usize> = records
        .iter()
        .map(|record| record.command[..6].parse().unwrap())
        .collect();
    assert_eq!(*rounds.last().unwrap(), record_count - 1);
    assert!(rounds.windows(2).all(|pair| pair[1] == pair[0] + 1));
    pool.export().unwrap();
    let pool = import(dir.path(), POOL, tiny());
    assert_eq!(pool.core.history().unwrap().len(), records.len());
    assert_clean(&pool);
    pool.export().unwrap();
}
