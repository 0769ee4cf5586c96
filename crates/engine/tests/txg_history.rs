//! The txg history behind `tarn stat txgs`: bounded by `txg_history`, one row per txg in txg
//! order with the open txg last, and the figures of a sync that wrote blocks are plausible
//! (state C, at least one pass, device writes counted, the commit's uberblock writes among the
//! write I/Os).

use crate::common;

use tarn::block::blkptr::Compression;
use tarn::txg::TxgState;

use common::*;

#[test]
fn history_is_bounded_and_rows_are_plausible() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.txg_history = 5;
    tunables.txg_timeout = 600;
    let pool = create_pool(dir.path(), "hist", single(dir.path(), "a.img"), tunables);
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Off);
    for round in 0..12u64 {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, round * 8192, &pattern(round, 8192))
            .unwrap();
        drop(hold);
        pool.sync().unwrap();
    }
    let history = pool.txg_history();
    assert_eq!(history.len(), 5, "{history:#?}");
    for pair in history.windows(2) {
        assert_eq!(pair[1].txg, pair[0].txg + 1, "rows in txg order");
        assert!(pair[1].birth_ns >= pair[0].birth_ns);
    }
    let open = history.last().unwrap();
    assert_eq!(open.state, TxgState::Open);
    assert_eq!(open.txg, pool.core.txgs.open_txg().0);
    let synced: Vec<_> = history
        .iter()
        .filter(|row| row.state == TxgState::Committed && row.blocks_written > 0)
        .collect();
    assert!(synced.len() >= 3, "{history:#?}");
    for row in synced {
        assert!(row.passes >= 1, "{row:?}");
        assert!(
            row.writes > 0 && row.written_bytes >= 512 * row.writes,
            "{row:?}"
        );
        // The uberblock goes to four label copies outside the data area.
        assert!(row.write_ios >= row.writes + 4, "{row:?}");
        assert!(row.blocks_written >= row.passes as u64, "{row:?}");
        assert!(row.dirty_bytes >= 8192, "{row:?}");
        assert!(row.sync_ns > 0 && row.open_ns > 0, "{row:?}");
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn zero_history_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.txg_history = 0;
    let pool = create_pool(dir.path(), "nohist", single(dir.path(), "a.img"), tunables);
    pool.sync().unwrap();
    assert!(pool.txg_history().is_empty());
    pool.export().unwrap();
}
