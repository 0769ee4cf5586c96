//! Receive's write batches and the blocks it keeps as received (the work that made receive fast).
//!
//! The receive writer hands whole blocks of one object to `ObjectSet::write_blocks` in one
//! transaction, and keeps a `send -c` block only as its payload until its txg syncs (no
//! decompressed copy). These tests guard what that could break: batches that span several
//! objects, holes, frees and truncations between writes, short tails, incompressible blocks
//! among compressed ones, a batch cut at a limit that is not a multiple of the block size; and
//! blocks kept as payloads that are read, patched by a partial write or freed before their
//! txg syncs. Every received snapshot must equal its source file by file, and `check` must be
//! clean.

use crate::common;

use tarn::block::blkptr::{ChecksumType, Compression};
use tarn::block::compress;
use tarn::object::WholeBlock;
use tarn::pool::Pool;
use tarn::send::{receive, send, ReceiveOptions, ReceiveReport, SendOptions};
use tarn::types::ObjectId;

use common::tree::snapshot_tree;
use common::*;

fn roomy_pool(dir: &std::path::Path, name: &str) -> Pool {
    roomy_pool_with(dir, name, tiny())
}

fn roomy_pool_with(dir: &std::path::Path, name: &str, tunables: tarn::tunables::Tunables) -> Pool {
    Pool::create(tarn::pool::CreateOptions {
        name: name.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, &format!("{name}0")),
        create_size: Some(512 << 20),
        force: false,
        tunables,
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap()
}

/// Text-like bytes (lz4 keeps about half of them), different for every seed.
fn text(seed: u64, length: usize) -> Vec<u8> {
    const WORDS: [&str; 8] = [
        "pool ", "block ", "txg ", "stream ", "dnode ", "record ", "batch ", "write\n",
    ];
    let noise = pattern(seed * 3 + 1, length / 4 + 8);
    let mut out = Vec::with_capacity(length + 8);
    let mut index = 0;
    while out.len() < length {
        out.extend_from_slice(WORDS[(noise[index % noise.len()] % 8) as usize].as_bytes());
        index += 1;
    }
    out.truncate(length);
    out
}

fn send_stream(pool: &Pool, to: &str, from: Option<&str>, compressed: bool) -> Vec<u8> {
    let mut out = Vec::new();
    send(
        pool,
        to,
        &SendOptions {
            from: from.map(str::to_string),
            compressed,
            ..SendOptions::default()
        },
        &mut out,
        &mut |_| {},
    )
    .unwrap();
    out
}

fn receive_with(pool: &Pool, target: &str, stream: &[u8], batch: Option<u64>) -> ReceiveReport {
    let mut input: &[u8] = stream;
    receive(
        pool,
        target,
        &mut input,
        &ReceiveOptions {
            batch_bytes: batch,
            ..ReceiveOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn batches_across_objects_holes_frees_and_cut_limits_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "rb");
    pool.create_dataset(
        "rb/src",
        &[
            ("recordsize".into(), "8K".into()),
            ("compression".into(), "lz4".into()),
        ],
        false,
    )
    .unwrap();
    let fs = pool.open_file_system("rb/src").unwrap();
    let root = fs.root();
    // Compressible and incompressible blocks side by side, a hole, a short tail.
    let mixed = fs.create(root, b"mixed", 0o644, 0, 0).unwrap().ino;
    fs.write(mixed, 0, &text(1, 300_000)).unwrap();
    fs.write(mixed, 100_000, &pattern(2, 50_000)).unwrap();
    fs.write(mixed, 900_000, &text(3, 81_234)).unwrap();
    // Larger than several batches, with zeros (holes once compressed) inside.
    let long = fs.create(root, b"long", 0o644, 0, 0).unwrap().ino;
    fs.write(long, 0, &text(4, 3 << 20)).unwrap();
    fs.write(long, 1 << 20, &vec![0u8; 64 << 10]).unwrap();
    // Many objects of one or two blocks: a batch per object.
    for index in 0..24u64 {
        let file = fs
            .create(root, format!("f{index:02}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        let length = 1000 + (index as usize * 997) % 15_000;
        let data = if index % 3 == 0 {
            pattern(10 + index, length)
        } else {
            text(10 + index, length)
        };
        fs.write(file, 0, &data).unwrap();
    }
    pool.create_snapshots(&["rb/src@1".to_string()], false)
        .unwrap();
    // Changes: overwrites between holes punched in the same object, a truncation and
    // regrowth, removed and new files.
    fs.write(long, 200_000, &text(40, 100_000)).unwrap();
    fs.fallocate(
        long,
        400_000,
        300_000,
        tarn::fs::FALLOC_FL_PUNCH_HOLE | tarn::fs::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    fs.write(long, 800_000, &pattern(41, 30_000)).unwrap();
    fs.write(long, (2 << 20) + 5, &text(42, 200_000)).unwrap();
    fs.setattr(
        mixed,
        tarn::fs::SetAttr {
            size: Some(120_000),
            ..tarn::fs::SetAttr::default()
        },
    )
    .unwrap();
    fs.write(mixed, 500_000, &text(43, 20_000)).unwrap();
    for index in (0..24u64).step_by(5) {
        fs.unlink(root, format!("f{index:02}").as_bytes()).unwrap();
    }
    let fresh = fs.create(root, b"fresh", 0o644, 0, 0).unwrap().ino;
    fs.write(fresh, 0, &text(44, 70_000)).unwrap();
    drop(fs);
    pool.create_snapshots(&["rb/src@2".to_string()], false)
        .unwrap();

    let want_1 = snapshot_tree(&pool, "rb/src@1");
    let want_2 = snapshot_tree(&pool, "rb/src@2");
    let mut target = 0;
    for compressed in [false, true] {
        let full = send_stream(&pool, "rb/src@1", None, compressed);
        let incremental = send_stream(&pool, "rb/src@2", Some("rb/src@1"), compressed);
        // Default (1 MiB), one record per transaction, a limit that is no multiple of the
        // block size (a batch is cut after three 8 KiB blocks), and one of a block and a bit.
        for batch in [None, Some(0), Some(20_000), Some(9_000)] {
            target += 1;
            let name = format!("rb/dst{target}");
            let report = receive_with(&pool, &name, &full, batch);
            let what = format!("compressed {compressed}, batch {batch:?}: {report:?}");
            assert!(report.blocks > 400, "{what}");
            match batch {
                Some(0) => assert_eq!(report.write_transactions, report.blocks, "{what}"),
                Some(20_000) => {
                    // Cut every three blocks, and at every object.
                    assert!(report.write_transactions * 3 >= report.blocks, "{what}");
                    assert!(report.write_transactions * 2 < report.blocks, "{what}");
                }
                Some(9_000) => {
                    // Two blocks a batch (the second starts within the limit).
                    assert!(report.write_transactions * 2 >= report.blocks, "{what}");
                    assert!(report.write_transactions < report.blocks, "{what}");
                }
                _ => assert!(report.write_transactions * 4 < report.blocks, "{what}"),
            }
            assert_eq!(snapshot_tree(&pool, &format!("{name}@1")), want_1, "{what}");
            receive_with(&pool, &name, &incremental, batch);
            assert_eq!(snapshot_tree(&pool, &format!("{name}@2")), want_2, "{what}");
        }
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Blocks kept as their compressed payloads (as a `send -c` receive keeps them) read back
/// before their txg syncs, take a partial write (patched after decompression), survive a free
/// of a neighbour, and sync to what was written.
#[test]
fn blocks_kept_as_payloads_read_patch_and_sync() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "kp");
    pool.create_dataset(
        "kp/fs",
        &[
            ("recordsize".into(), "8K".into()),
            ("compression".into(), "lz4".into()),
        ],
        false,
    )
    .unwrap();
    let fs = pool.open_file_system("kp/fs").unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(file, 0, &pattern(7, 64 << 10)).unwrap();
    pool.sync().unwrap();
    let objset = pool.dataset_objset("kp/fs").unwrap();
    let blocks: Vec<Vec<u8>> = (0..5).map(|seed| text(seed, 8192)).collect();
    {
        let hold = pool.core.txgs.assign().unwrap();
        let tx = hold.tx();
        let mut whole = Vec::new();
        for (index, block) in blocks.iter().enumerate() {
            let payload = compress::compress(Compression::Lz4, block).unwrap();
            // All but the first with their fletcher4 checksum given (the block's is derived from
            // it, and must verify when read back from disk below).
            let fletcher4 = (index > 0)
                .then(|| tarn::block::checksum::compute(ChecksumType::Fletcher4, &payload));
            whole.push((
                1 + index as u64,
                WholeBlock::Stored {
                    compression: Compression::Lz4,
                    payload,
                    fletcher4,
                },
            ));
        }
        whole.push((6, WholeBlock::Data(pattern(8, 8192))));
        objset.write_blocks(&tx, ObjectId(file), whole).unwrap();
        let mut read = vec![0u8; 8192];
        objset.read(ObjectId(file), 8192 * 2, &mut read).unwrap();
        assert_eq!(read, blocks[1], "a stored block reads back before its sync");
        // A partial write into a stored block, and a free of another.
        objset
            .write(&tx, ObjectId(file), 8192 * 3 + 100, b"patched")
            .unwrap();
        objset
            .free_range(&tx, ObjectId(file), 8192 * 4, 8192)
            .unwrap();
        // A whole block that is not a block is refused.
        let error = objset
            .write_blocks(
                &tx,
                ObjectId(file),
                vec![(9, WholeBlock::Data(vec![1; 100]))],
            )
            .unwrap_err();
        assert!(error.to_string().contains("whole block"), "{error}");
    }
    let mut want = pattern(7, 64 << 10);
    want[8192..8192 * 6].copy_from_slice(&blocks.concat());
    want[8192 * 3 + 100..8192 * 3 + 107].copy_from_slice(b"patched");
    want[8192 * 4..8192 * 5].fill(0);
    want[8192 * 6..8192 * 7].copy_from_slice(&pattern(8, 8192));
    assert_eq!(
        fs.read(file, 0, want.len()).unwrap(),
        want,
        "before the sync"
    );
    pool.sync().unwrap();
    drop(fs);
    let fs = pool.open_file_system("kp/fs").unwrap();
    assert_eq!(
        fs.read(file, 0, want.len()).unwrap(),
        want,
        "after the sync"
    );
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A receive asks for a sync every `recv_sync_share`-th of the dirty-data trigger, so the
/// sync runs beside it: with the trigger out of reach (the whole of `dirty_data_max`) and no
/// timer, a 16 MiB receive syncs txgs on the way with a share of 64 (a sync asked for each
/// 1 MiB; those asked for while one runs make one sync after it, so how many depends on
/// the speeds), and only those that creating the target and the failure at the cut take
/// with a share of 0.
#[test]
fn a_receive_asks_for_syncs_on_the_way() {
    let dir = tempfile::tempdir().unwrap();
    let source = roomy_pool(dir.path(), "sy");
    let fs = source.file_system().unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(file, 0, &text(1, 16 << 20)).unwrap();
    drop(fs);
    source
        .create_snapshots(&["sy@s".to_string()], false)
        .unwrap();
    let stream = send_stream(&source, "sy@s", None, true);
    let syncs_during_receive = |share: u64| {
        let dir = tempfile::tempdir().unwrap();
        let pool = roomy_pool_with(
            dir.path(),
            "sz",
            tarn::tunables::Tunables {
                dirty_data_max: 64 << 20,
                dirty_data_sync_percent: 100,
                delay_min_dirty_percent: 99,
                txg_timeout: 3600,
                recv_sync_share: share,
                ..tiny()
            },
        );
        let before = pool.core.txgs.stats().syncs;
        // Stop at the first sync END asks for: count the syncs of the records alone.
        let mut input: &[u8] = &stream[..stream.len() - 128];
        let error = receive(&pool, "sz/copy", &mut input, &ReceiveOptions::default());
        assert!(error.is_err(), "the stream was cut before END");
        let syncs = pool.core.txgs.stats().syncs - before;
        pool.export().unwrap();
        syncs
    };
    let asked = syncs_during_receive(64);
    let not_asked = syncs_during_receive(0);
    assert!(asked > not_asked, "{asked} against {not_asked}");
    source.export().unwrap();
}
