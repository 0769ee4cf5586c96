//! Send and receive on real pools: full and incremental streams (`-i` and `-I`)
//! round trip file by file (contents, holes, truncations, modes, owners, hard links,
//! symlinks, xattrs in the bonus buffer, the spill block and the xattr directory; empty,
//! 1-byte and 16 MiB files), received snapshots keep the sender's guid so that the next
//! incremental stream finds its source; damaged, truncated and future-version streams are
//! refused with the target as it was; WRITE records are batched. Every test ends with
//! `check` clean on both pools.

use crate::common;

use tarn::fs::{FileSystem, SetAttr};
use tarn::pool::Pool;
use tarn::send::stream::{Record, StreamReader, StreamWriter, FEATURE_PAYLOAD_DIGEST};
use tarn::send::{receive, send, ReceiveOptions, SendError, SendOptions};

use common::tree::{snapshot_tree, tree};
use common::*;

fn send_to_vec(pool: &Pool, to: &str, from: Option<&str>, intermediates: bool) -> Vec<u8> {
    send_with(
        pool,
        to,
        &SendOptions {
            from: from.map(str::to_string),
            intermediates,
            ..SendOptions::default()
        },
    )
}

fn send_with(pool: &Pool, to: &str, options: &SendOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let report = send(pool, to, options, &mut out, &mut |_| {}).unwrap();
    assert_eq!(report.bytes, out.len() as u64);
    out
}

fn receive_from(pool: &Pool, target: &str, stream: &[u8]) -> Result<Vec<String>, SendError> {
    let mut input: &[u8] = stream;
    receive(pool, target, &mut input, &ReceiveOptions::default()).map(|report| report.snapshots)
}

/// A pool of 512 MiB (two copies of the 16 MiB file and their snapshots fit).
fn roomy_pool(dir: &std::path::Path, name: &str) -> Pool {
    Pool::create(tarn::pool::CreateOptions {
        name: name.into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir, &format!("{name}0")),
        create_size: Some(512 << 20),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap()
}

/// The stream with every record passed through `edit`, checksums recomputed.
fn rewrite(stream: &[u8], mut edit: impl FnMut(&mut Record)) -> Vec<u8> {
    let mut reader = StreamReader::new(stream);
    let mut writer = StreamWriter::new(Vec::new());
    loop {
        let mut record = reader.next_record().unwrap();
        let end = matches!(record, Record::End { .. });
        edit(&mut record);
        writer.write(&record).unwrap();
        if end {
            return writer.into_inner();
        }
    }
}

fn lookup(fs: &FileSystem, path: &str) -> u64 {
    let mut ino = fs.root();
    for name in path.split('/').filter(|name| !name.is_empty()) {
        ino = fs.lookup(ino, name.as_bytes()).unwrap().ino;
    }
    ino
}

/// A file system with every kind of thing a stream carries.
fn populate(fs: &FileSystem) {
    let root = fs.root();
    let docs = fs.mkdir(root, b"docs", 0o750, 1000, 100).unwrap().ino;
    let empty = fs.create(docs, b"empty", 0o600, 1000, 100).unwrap().ino;
    let _ = empty;
    let one = fs.create(docs, b"one", 0o644, 0, 0).unwrap().ino;
    fs.write(one, 0, b"x").unwrap();
    let big = fs.create(root, b"big", 0o644, 0, 0).unwrap().ino;
    fs.write(big, 0, &pattern(1, 16 << 20)).unwrap();
    let text = fs.create(root, b"text", 0o644, 0, 0).unwrap().ino;
    let line = b"a line of text that compresses well, repeated many times over\n";
    fs.write(text, 0, &line.repeat(40_000)).unwrap();
    let sparse = fs.create(root, b"sparse", 0o644, 0, 0).unwrap().ino;
    fs.write(sparse, 0, &pattern(2, 5000)).unwrap();
    fs.write(sparse, 3 << 20, &pattern(3, 7000)).unwrap();
    fs.link(one, root, b"one-link").unwrap();
    fs.symlink(root, b"short", b"docs/one", 0, 0).unwrap();
    fs.symlink(root, b"long", &vec![b'l'; 900], 0, 0).unwrap();
    fs.setxattr(one, b"user.small", b"in the bonus", 0).unwrap();
    for index in 0..8u64 {
        fs.setxattr(
            docs,
            format!("user.s{index}").as_bytes(),
            &pattern(index, 600),
            0,
        )
        .unwrap();
    }
    fs.setxattr(big, b"user.large", &pattern(9, 65536), 0)
        .unwrap();
    let deep = fs.mkdir(docs, b"deep", 0o755, 0, 0).unwrap().ino;
    for index in 0..300 {
        let file = fs
            .create(deep, format!("f{index:03}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(file, 0, &pattern(index, (index as usize * 37) % 9000))
            .unwrap();
    }
}

/// Changes an incremental stream must carry.
fn change(fs: &FileSystem) {
    let root = fs.root();
    let big = lookup(fs, "big");
    fs.write(big, 5 << 20, &pattern(20, 100_000)).unwrap();
    fs.setattr(
        big,
        SetAttr {
            size: Some(12 << 20),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let sparse = lookup(fs, "sparse");
    fs.fallocate(
        sparse,
        0,
        4096,
        tarn::fs::FALLOC_FL_PUNCH_HOLE | tarn::fs::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    let docs = lookup(fs, "docs");
    fs.unlink(docs, b"one").unwrap();
    fs.rename(root, b"short", docs, b"moved", 0).unwrap();
    let deep = lookup(fs, "docs/deep");
    for index in (0..300).step_by(3) {
        fs.unlink(deep, format!("f{index:03}").as_bytes()).unwrap();
    }
    fs.removexattr(docs, b"user.s3").unwrap();
    fs.setxattr(docs, b"user.new", &pattern(30, 2000), 0)
        .unwrap();
    fs.setattr(
        docs,
        SetAttr {
            mode: Some(0o700),
            uid: Some(7),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let fresh = fs.create(root, b"fresh", 0o640, 3, 4).unwrap().ino;
    fs.write(fresh, 0, &pattern(31, 200_000)).unwrap();
}

#[test]
fn full_and_incremental_streams_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "src");
    let fs = pool.file_system().unwrap();
    populate(&fs);
    pool.create_snapshots(&["src@a".to_string()], false)
        .unwrap();
    change(&fs);
    pool.create_snapshots(&["src@b".to_string()], false)
        .unwrap();
    let fresh = lookup(&fs, "fresh");
    fs.write(fresh, 0, b"third").unwrap();
    pool.create_snapshots(&["src@c".to_string()], false)
        .unwrap();

    let other = tempfile::tempdir().unwrap();
    let target = roomy_pool(other.path(), "dst");
    let full = send_to_vec(&pool, "src@a", None, false);
    assert_eq!(
        receive_from(&target, "dst/copy", &full).unwrap(),
        ["dst/copy@a"]
    );
    assert_eq!(
        snapshot_tree(&target, "dst/copy@a"),
        snapshot_tree(&pool, "src@a")
    );
    let guid = |pool: &Pool, name: &str| pool.snapshot_info(name).unwrap().guid;
    assert_eq!(guid(&target, "dst/copy@a"), guid(&pool, "src@a"));

    let incremental = send_to_vec(&pool, "src@b", Some("@a"), false);
    assert!(
        incremental.len() < full.len() / 2,
        "an incremental stream carries what changed"
    );
    assert_eq!(
        receive_from(&target, "dst/copy", &incremental).unwrap(),
        ["dst/copy@b"]
    );
    assert_eq!(
        snapshot_tree(&target, "dst/copy@b"),
        snapshot_tree(&pool, "src@b")
    );
    // The head is the received snapshot, and mounts as a file system.
    let copy = target.open_file_system("dst/copy").unwrap();
    assert_eq!(tree(&copy), snapshot_tree(&pool, "src@b"));
    drop(copy);

    // -I: every snapshot from a to c, into a second copy that has a.
    let mut input: &[u8] = &full;
    receive(
        &target,
        "dst/second",
        &mut input,
        &ReceiveOptions::default(),
    )
    .unwrap();
    let chain = send_to_vec(&pool, "src@c", Some("src@a"), true);
    assert_eq!(
        receive_from(&target, "dst/second", &chain).unwrap(),
        ["dst/second@b", "dst/second@c"]
    );
    for name in ["b", "c"] {
        assert_eq!(
            snapshot_tree(&target, &format!("dst/second@{name}")),
            snapshot_tree(&pool, &format!("src@{name}"))
        );
    }
    // -c: compressed blocks travel as stored, and are stored as received.
    let compressed = send_with(
        &pool,
        "src@c",
        &SendOptions {
            compressed: true,
            ..SendOptions::default()
        },
    );
    let plain = send_to_vec(&pool, "src@c", None, false);
    assert!(
        compressed.len() + (256 << 10) < plain.len(),
        "compressed {} plain {}",
        compressed.len(),
        plain.len()
    );
    let estimate = send(
        &pool,
        "src@c",
        &SendOptions {
            compressed: true,
            dry_run: true,
            ..SendOptions::default()
        },
        &mut std::io::sink(),
        &mut |_| {},
    )
    .unwrap();
    let error = estimate.bytes.abs_diff(compressed.len() as u64);
    assert!(
        error * 20 < compressed.len() as u64,
        "estimate {} for {}",
        estimate.bytes,
        compressed.len()
    );
    receive_from(&target, "dst/third", &compressed).unwrap();
    assert_eq!(
        snapshot_tree(&target, "dst/third@c"),
        snapshot_tree(&pool, "src@c")
    );
    let text_blocks = |pool: &Pool, name: &str| {
        let fs = pool.snapshot_file_system(name).unwrap();
        let ino = lookup(&fs, "text");
        let dnode = fs
            .objset()
            .synced_dnode(tarn::types::ObjectId(ino))
            .unwrap();
        let mut stored = Vec::new();
        tarn::object::tree::visit_tree_blocks(&pool.core.io, &dnode, &mut |_, bp| {
            if bp.level == 0 {
                stored.push((bp.compression, bp.size_physical, bp.checksum));
            }
            Ok(())
        })
        .unwrap();
        stored
    };
    assert_eq!(
        text_blocks(&target, "dst/third@c"),
        text_blocks(&pool, "src@c"),
        "the same compressed bytes, stored as sent"
    );
    // Streams from before the payload digest (payloads hashed whole into the chain) still
    // receive, full and -I; the default stream carries the feature, and differs only in
    // its checksums.
    let features = |stream: &[u8]| match StreamReader::new(stream).next_record().unwrap() {
        Record::Begin(begin) => begin.features,
        other => panic!("{other:?}"),
    };
    let whole = |compressed: bool, from: Option<&str>| SendOptions {
        compressed,
        from: from.map(str::to_string),
        intermediates: from.is_some(),
        whole_payload_chain: true,
        ..SendOptions::default()
    };
    let old_compressed = send_with(&pool, "src@c", &whole(true, None));
    assert_eq!(
        features(&compressed) & FEATURE_PAYLOAD_DIGEST,
        FEATURE_PAYLOAD_DIGEST
    );
    assert_eq!(features(&old_compressed) & FEATURE_PAYLOAD_DIGEST, 0);
    assert_eq!(old_compressed.len(), compressed.len());
    assert_ne!(old_compressed, compressed);
    receive_from(&target, "dst/fourth", &old_compressed).unwrap();
    assert_eq!(
        snapshot_tree(&target, "dst/fourth@c"),
        snapshot_tree(&pool, "src@c")
    );
    receive_from(
        &target,
        "dst/fifth",
        &send_with(&pool, "src@a", &whole(false, None)),
    )
    .unwrap();
    assert_eq!(
        receive_from(
            &target,
            "dst/fifth",
            &send_with(&pool, "src@c", &whole(false, Some("@a")))
        )
        .unwrap(),
        ["dst/fifth@b", "dst/fifth@c"]
    );
    assert_eq!(
        snapshot_tree(&target, "dst/fifth@c"),
        snapshot_tree(&pool, "src@c")
    );
    assert_clean(&pool);
    assert_clean(&target);
    target.export().unwrap();
    pool.export().unwrap();
}

/// A `send -c` stream whose compressed block does not decompress (its checksums recomputed,
/// so only the payload is wrong) is refused at that record, naming it, and leaves nothing:
/// a block stored as received must read back.
#[test]
fn a_compressed_block_that_does_not_decompress_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "lz");
    let fs = pool.file_system().unwrap();
    populate(&fs);
    pool.create_snapshots(&["lz@a".to_string()], false).unwrap();
    let compressed = send_with(
        &pool,
        "lz@a",
        &SendOptions {
            compressed: true,
            ..SendOptions::default()
        },
    );
    let mut damaged_one = false;
    let damaged = rewrite(&compressed, |record| {
        if let Record::Write {
            compression, data, ..
        } = record
        {
            if *compression != tarn::block::blkptr::Compression::Off && !damaged_one {
                damaged_one = true;
                // Past the payload header: the compressed stream itself (a cut would only
                // remove zero padding).
                let end = data.len().min(40);
                data[8..end].fill(0xff);
            }
        }
    });
    assert!(damaged_one, "the stream has a compressed block");
    let error = receive_from(&pool, "lz/copy", &damaged)
        .unwrap_err()
        .to_string();
    assert!(error.contains("WRITE of object"), "{error}");
    assert!(!pool.has_dataset("lz/copy"));
    receive_from(&pool, "lz/copy", &compressed).unwrap();
    check_clean(&pool, "after the refused stream and a good one");
}

#[test]
fn bad_streams_are_refused_and_leave_the_target_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "bad");
    let fs = pool.file_system().unwrap();
    populate(&fs);
    pool.create_snapshots(&["bad@a".to_string()], false)
        .unwrap();
    change(&fs);
    pool.create_snapshots(&["bad@b".to_string()], false)
        .unwrap();
    let full = send_to_vec(&pool, "bad@a", None, false);
    let incremental = send_to_vec(&pool, "bad@b", Some("@a"), false);

    // A full stream damaged in the middle, truncated, or from the future: no file system is
    // left behind.
    let mut damaged = full.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    let future = rewrite(&full, |record| {
        if let Record::Begin(begin) = record {
            begin.version = 2;
        }
    });
    for (what, stream) in [
        ("damaged", &damaged[..]),
        ("truncated", &full[..full.len() - 200]),
        ("future", &future[..]),
        ("empty", &[][..]),
    ] {
        let error = receive_from(&pool, "bad/copy", stream).unwrap_err();
        assert!(!error.to_string().is_empty(), "{what}");
        assert!(
            !pool.has_dataset("bad/copy"),
            "{what}: the partial file system is gone"
        );
    }
    let error = receive_from(&pool, "bad/copy", &future)
        .unwrap_err()
        .to_string();
    assert!(error.contains("version 2"), "{error}");
    // Records out of order, with valid checksums: refused as well.
    let mut records = Vec::new();
    rewrite(&full, |record| records.push(record.clone()));
    let object_of = |record: &Record| match record {
        Record::Write { object, .. } => Some(*object),
        _ => None,
    };
    let first = (0..records.len() - 1)
        .find(|&at| {
            object_of(&records[at]).is_some()
                && object_of(&records[at]) == object_of(&records[at + 1])
        })
        .expect("two writes to one object");
    records.swap(first, first + 1);
    let mut writer = StreamWriter::new(Vec::new());
    for record in &records {
        writer.write(record).unwrap();
    }
    let error = receive_from(&pool, "bad/copy", &writer.into_inner())
        .unwrap_err()
        .to_string();
    assert!(error.contains("behind"), "{error}");
    assert!(!pool.has_dataset("bad/copy"));

    // An incremental stream damaged part-way: it was applied to the hidden clone, which goes;
    // the target never changed (its figures and its tree are as they were).
    receive_from(&pool, "bad/copy", &full).unwrap();
    // Reading the tree below would otherwise change access times, a modification.
    pool.set_property("bad/copy", "atime", Some("off")).unwrap();
    let before = tree(&pool.open_file_system("bad/copy").unwrap());
    let figures = |pool: &Pool| {
        let info = pool
            .datasets()
            .into_iter()
            .find(|info| info.name == "bad/copy")
            .unwrap();
        (info.referenced, info.snapshot_count)
    };
    let figures_before = figures(&pool);
    let mut damaged = incremental.clone();
    let late = damaged.len() * 3 / 4;
    damaged[late] ^= 1;
    assert!(receive_from(&pool, "bad/copy", &damaged).is_err());
    assert_eq!(tree(&pool.open_file_system("bad/copy").unwrap()), before);
    assert_eq!(figures(&pool), figures_before);
    pool.sync().unwrap();
    assert!(!pool.modified_since_newest_snapshot("bad/copy").unwrap());
    assert!(pool.snapshot_info("bad/copy@b").is_err());
    assert!(
        !pool.has_dataset("bad/copy/%recv"),
        "the hidden clone is gone"
    );
    // A full stream into an existing file system, an incremental one without its source.
    assert!(receive_from(&pool, "bad/copy", &full)
        .unwrap_err()
        .to_string()
        .contains("exists"));
    assert!(receive_from(&pool, "bad/none", &incremental).is_err());
    // The intact incremental stream still applies.
    receive_from(&pool, "bad/copy", &incremental).unwrap();
    assert_eq!(
        snapshot_tree(&pool, "bad/copy@b"),
        snapshot_tree(&pool, "bad@b")
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_modified_target_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "mf");
    let fs = pool.file_system().unwrap();
    populate(&fs);
    pool.create_snapshots(&["mf@a".to_string()], false).unwrap();
    change(&fs);
    pool.create_snapshots(&["mf@b".to_string()], false).unwrap();
    let full = send_to_vec(&pool, "mf@a", None, false);
    let incremental = send_to_vec(&pool, "mf@b", Some("@a"), false);
    receive_from(&pool, "mf/copy", &full).unwrap();
    let copy = pool.open_file_system("mf/copy").unwrap();
    copy.create(copy.root(), b"local-change", 0o644, 0, 0)
        .unwrap();
    drop(copy);
    pool.sync().unwrap();
    let error = receive_from(&pool, "mf/copy", &incremental)
        .unwrap_err()
        .to_string();
    assert!(error.contains("modified"), "{error}");
    let mut input: &[u8] = &incremental;
    receive(
        &pool,
        "mf/copy",
        &mut input,
        &ReceiveOptions {
            force: true,
            ..ReceiveOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        snapshot_tree(&pool, "mf/copy@b"),
        snapshot_tree(&pool, "mf@b")
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn writes_are_batched_into_few_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "wb");
    pool.create_dataset("wb/src", &[("recordsize".into(), "8K".into())], false)
        .unwrap();
    let fs = pool.open_file_system("wb/src").unwrap();
    let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    fs.write(file, 0, &pattern(5, 4 << 20)).unwrap();
    drop(fs);
    pool.create_snapshots(&["wb/src@s".to_string()], false)
        .unwrap();
    let stream = send_to_vec(&pool, "wb/src@s", None, false);
    let mut batched: &[u8] = &stream;
    let report = receive(
        &pool,
        "wb/batched",
        &mut batched,
        &ReceiveOptions::default(),
    )
    .unwrap();
    assert!(report.blocks >= 512, "{report:?}");
    assert!(
        report.write_transactions * 64 <= report.blocks,
        "1 MiB batches of 8 KiB records: {report:?}"
    );
    let mut single_records: &[u8] = &stream;
    let unbatched = receive(
        &pool,
        "wb/single",
        &mut single_records,
        &ReceiveOptions {
            batch_bytes: Some(0),
            ..ReceiveOptions::default()
        },
    )
    .unwrap();
    assert_eq!(unbatched.write_transactions, unbatched.blocks);
    for name in ["wb/batched@s", "wb/single@s"] {
        assert_eq!(snapshot_tree(&pool, name), snapshot_tree(&pool, "wb/src@s"));
    }
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_bookmark_stands_in_for_a_destroyed_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "bm");
    pool.create_dataset("bm/src", &[], false).unwrap();
    let fs = pool.open_file_system("bm/src").unwrap();
    populate(&fs);
    pool.create_snapshots(&["bm/src@a".to_string()], false)
        .unwrap();
    let full = send_to_vec(&pool, "bm/src@a", None, false);
    receive_from(&pool, "bm/copy", &full).unwrap();
    pool.create_bookmark("bm/src@a", "bm/src#a").unwrap();
    assert!(
        pool.create_bookmark("bm/src@a", "bm/src#a").is_err(),
        "exists"
    );
    assert!(
        pool.create_bookmark("bm/src@a", "bm/copy#a").is_err(),
        "another file system"
    );
    let bookmark = pool.bookmark_info("bm/src#a").unwrap();
    assert_eq!(bookmark.guid, pool.snapshot_info("bm/src@a").unwrap().guid);
    change(&fs);
    drop(fs);
    pool.create_snapshots(&["bm/src@b".to_string()], false)
        .unwrap();
    pool.destroy_snapshots("bm/src@a", false).unwrap();
    let incremental = send_to_vec(&pool, "bm/src@b", Some("#a"), false);
    receive_from(&pool, "bm/copy", &incremental).unwrap();
    assert_eq!(
        snapshot_tree(&pool, "bm/copy@b"),
        snapshot_tree(&pool, "bm/src@b")
    );
    // Bookmarks survive export and import, and go with their file system.
    pool.export().unwrap();
    let pool = Pool::import(
        "bm",
        tarn::pool::ImportOptions::new(dirs(dir.path()), tiny()),
    )
    .unwrap()
    .0;
    assert_eq!(
        pool.bookmarks_of("bm/src")
            .unwrap()
            .into_iter()
            .map(|info| info.name)
            .collect::<Vec<_>>(),
        ["bm/src#a"]
    );
    pool.create_bookmark("bm/src@b", "bm/src#b").unwrap();
    pool.destroy_bookmark("bm/src#a").unwrap();
    assert!(pool.bookmark_info("bm/src#a").is_err());
    assert_clean(&pool);
    pool.destroy_dataset("bm/src", true).unwrap();
    pool.create_dataset("bm/src", &[], false).unwrap();
    assert!(
        pool.bookmarks_of("bm/src").unwrap().is_empty(),
        "a new file system of the name has none"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn a_tree_of_file_systems_round_trips_with_its_snapshots_and_properties() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "tr");
    pool.create_dataset("tr/src", &[], false).unwrap();
    pool.create_dataset("tr/src/a", &[("compression".into(), "zstd".into())], false)
        .unwrap();
    pool.create_dataset("tr/src/a/b", &[("recordsize".into(), "16K".into())], false)
        .unwrap();
    for (index, name) in ["tr/src", "tr/src/a", "tr/src/a/b"].iter().enumerate() {
        let fs = pool.open_file_system(name).unwrap();
        let file = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
        fs.write(file, 0, &pattern(index as u64, 300_000)).unwrap();
    }
    pool.create_snapshots(&["tr/src@1".to_string()], true)
        .unwrap();
    let fs = pool.open_file_system("tr/src/a").unwrap();
    let file = lookup(&fs, "f");
    fs.write(file, 1000, b"changed").unwrap();
    drop(fs);
    pool.create_snapshots(&["tr/src@2".to_string()], true)
        .unwrap();
    let recursive = |from: Option<&str>| SendOptions {
        recursive: true,
        from: from.map(str::to_string),
        ..SendOptions::default()
    };
    let stream = send_with(&pool, "tr/src@2", &recursive(None));
    let received = receive_from(&pool, "tr/dst", &stream).unwrap();
    assert_eq!(
        received,
        [
            "tr/dst@1",
            "tr/dst@2",
            "tr/dst/a@1",
            "tr/dst/a@2",
            "tr/dst/a/b@1",
            "tr/dst/a/b@2"
        ]
    );
    for (source, copy) in [
        ("tr/src", "tr/dst"),
        ("tr/src/a", "tr/dst/a"),
        ("tr/src/a/b", "tr/dst/a/b"),
    ] {
        for snapshot in ["1", "2"] {
            assert_eq!(
                snapshot_tree(&pool, &format!("{copy}@{snapshot}")),
                snapshot_tree(&pool, &format!("{source}@{snapshot}")),
                "{copy}@{snapshot}"
            );
        }
    }
    let property = |name: &str, property: tarn::dataset::props::Property| {
        pool.property(name, property).unwrap().0
    };
    use tarn::dataset::props::Property;
    assert_eq!(property("tr/dst/a", Property::Compression), "zstd");
    assert_eq!(
        property("tr/dst/a/b", Property::Recordsize),
        (16 << 10).to_string()
    );
    // An incremental tree stream, with a file system new since the source (sent whole).
    pool.create_dataset("tr/src/new", &[], false).unwrap();
    pool.create_snapshots(&["tr/src@3".to_string()], true)
        .unwrap();
    let incremental = send_with(&pool, "tr/src@3", &recursive(Some("@2")));
    assert_eq!(
        receive_from(&pool, "tr/dst", &incremental).unwrap(),
        ["tr/dst@3", "tr/dst/a@3", "tr/dst/a/b@3", "tr/dst/new@3"]
    );
    assert_eq!(
        snapshot_tree(&pool, "tr/dst/new@3"),
        snapshot_tree(&pool, "tr/src/new@3")
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A full receive stopped by a crash (here: a file system made for a receive and never given
/// its snapshot, then the pool exported without one) is destroyed at the next import, with a
/// line in the import report; a finished receive is kept.
#[test]
fn a_partial_receive_left_by_a_crash_is_destroyed_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "pr");
    let fs = pool.file_system().unwrap();
    populate(&fs);
    drop(fs);
    pool.create_snapshots(&["pr@a".to_string()], false).unwrap();
    let full = send_to_vec(&pool, "pr@a", None, false);
    receive_from(&pool, "pr/done", &full).unwrap();
    pool.create_dataset_for_receive("pr/partial").unwrap();
    pool.export().unwrap();
    let (pool, report) = Pool::import(
        "pr",
        tarn::pool::ImportOptions::new(dirs(dir.path()), tiny()),
    )
    .unwrap();
    assert!(!pool.has_dataset("pr/partial"));
    assert!(
        report
            .damaged
            .iter()
            .any(|line| line.contains("pr/partial")),
        "{:?}",
        report.damaged
    );
    assert!(pool.has_dataset("pr/done"));
    assert_eq!(
        snapshot_tree(&pool, "pr/done@a"),
        snapshot_tree(&pool, "pr@a")
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A received space limit is a received value that admission enforces: `refquota` bounds the
/// copy's `avail`, `inherit` lifts it, `inherit -S` brings it back, a local setting wins, and
/// a later stream without it takes it away; `check` agrees on the received `refreservation`
/// counted in `used` at each step.
#[test]
fn received_space_limits_are_enforced_while_in_effect() {
    use tarn::dataset::props::{Property, PropertySource};
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "rl");
    pool.create_dataset(
        "rl/src",
        &[
            ("refquota".into(), "64M".into()),
            ("refreservation".into(), "16M".into()),
            // Kept throughout: a stream whose source has no property left carries none, and
            // its receive cannot tell that from a stream sent without `-p` (a gap).
            ("compression".into(), "zstd".into()),
        ],
        false,
    )
    .unwrap();
    pool.create_snapshots(&["rl/src@1".to_string()], false)
        .unwrap();
    let with_properties = SendOptions {
        properties: true,
        ..SendOptions::default()
    };
    let stream = send_with(&pool, "rl/src@1", &with_properties);
    receive_from(&pool, "rl/dst", &stream).unwrap();
    let refquota = || pool.property("rl/dst", Property::Refquota).unwrap();
    let available = || {
        pool.datasets()
            .into_iter()
            .find(|info| info.name == "rl/dst")
            .unwrap()
            .available
    };
    assert_eq!(
        refquota(),
        ((64 * MIB).to_string(), PropertySource::Received)
    );
    assert!(available() <= 64 * MIB, "{}", available());
    assert_clean(&pool);
    // Masked: no limit (the pool's free space is far above it).
    pool.set_property("rl/dst", "refquota", None).unwrap();
    assert_ne!(refquota().1, PropertySource::Received);
    assert!(available() > 100 * MIB, "{}", available());
    assert_clean(&pool);
    // Back.
    pool.revert_to_received("rl/dst", "refquota").unwrap();
    assert_eq!(
        refquota(),
        ((64 * MIB).to_string(), PropertySource::Received)
    );
    assert!(available() <= 64 * MIB);
    // A local setting wins over the received value.
    pool.set_property("rl/dst", "refquota", Some("32M"))
        .unwrap();
    assert_eq!(refquota(), ((32 * MIB).to_string(), PropertySource::Local));
    assert!(available() <= 32 * MIB);
    pool.revert_to_received("rl/dst", "refquota").unwrap();
    assert!(available() <= 64 * MIB && available() > 32 * MIB);
    assert_clean(&pool);
    // The next stream no longer carries the limits: the received values go, and with them
    // the limit and the reservation.
    pool.set_property("rl/src", "refquota", None).unwrap();
    pool.set_property("rl/src", "refreservation", None).unwrap();
    pool.create_snapshots(&["rl/src@2".to_string()], false)
        .unwrap();
    let incremental = send_with(
        &pool,
        "rl/src@2",
        &SendOptions {
            from: Some("rl/src@1".into()),
            ..with_properties.clone()
        },
    );
    receive_from(&pool, "rl/dst", &incremental).unwrap();
    assert_ne!(refquota().1, PropertySource::Received);
    assert!(available() > 100 * MIB);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A stream's properties are received values: in effect with the source `received` while no
/// local setting overrides them, masked by `inherit`, back with `inherit -S`, replaced by the
/// next receive with properties (a value the source no longer sets goes); `check` accepts the
/// keys, and reports an explicit inherit that carries a value (a damaged key).
#[test]
fn received_properties_are_kept_apart_from_local_settings() {
    use tarn::dataset::props::{Property, PropertySource};
    let dir = tempfile::tempdir().unwrap();
    let pool = roomy_pool(dir.path(), "rp");
    pool.create_dataset(
        "rp/src",
        &[
            ("compression".into(), "zstd".into()),
            ("com.example:tag".into(), "one".into()),
        ],
        false,
    )
    .unwrap();
    pool.create_snapshots(&["rp/src@1".to_string()], false)
        .unwrap();
    let with_properties = SendOptions {
        properties: true,
        ..SendOptions::default()
    };
    let stream = send_with(&pool, "rp/src@1", &with_properties);
    receive_from(&pool, "rp/dst", &stream).unwrap();
    let compression = || pool.property("rp/dst", Property::Compression).unwrap();
    let tag = || pool.user_property("rp/dst", "com.example:tag").unwrap();
    assert_eq!(compression(), ("zstd".into(), PropertySource::Received));
    assert_eq!(tag(), Some(("one".into(), PropertySource::Received)));
    pool.set_property("rp/dst", "compression", Some("lz4"))
        .unwrap();
    assert_eq!(compression(), ("lz4".into(), PropertySource::Local));
    pool.set_property("rp/dst", "compression", None).unwrap();
    pool.set_property("rp/dst", "com.example:tag", None)
        .unwrap();
    assert_eq!(compression().1, PropertySource::Default);
    assert_eq!(tag(), None);
    assert_clean(&pool);
    pool.revert_to_received("rp/dst", "compression").unwrap();
    pool.revert_to_received("rp/dst", "com.example:tag")
        .unwrap();
    assert_eq!(compression(), ("zstd".into(), PropertySource::Received));
    assert_eq!(tag(), Some(("one".into(), PropertySource::Received)));

    // The next receive with properties replaces the received set.
    pool.set_property("rp/src", "com.example:tag", None)
        .unwrap();
    pool.create_snapshots(&["rp/src@2".to_string()], false)
        .unwrap();
    let incremental = send_with(
        &pool,
        "rp/src@2",
        &SendOptions {
            from: Some("rp/src@1".into()),
            ..with_properties.clone()
        },
    );
    receive_from(&pool, "rp/dst", &incremental).unwrap();
    assert_eq!(tag(), None);
    assert_eq!(compression(), ("zstd".into(), PropertySource::Received));
    assert_clean(&pool);

    // An explicit inherit must be empty: one with a value is damage that check reports.
    pool.set_property("rp/dst", "compression", None).unwrap();
    let object = pool
        .dataset_records("rp/dst")
        .unwrap()
        .dir
        .unwrap()
        .properties_object;
    let hold = pool.core.txgs.assign().unwrap();
    let mut handle =
        tarn::object::adapters::KvObject::new(&pool.core.mos, object, Some(hold.tx())).unwrap();
    tarn::object::kv::upsert(&mut handle, b"compression$inherit", b"junk").unwrap();
    drop((handle, hold));
    pool.sync().unwrap();
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert!(
        report
            .errors
            .iter()
            .any(|error| error.contains("invalid stored property \"compression\"")),
        "{report:#?}"
    );
}
