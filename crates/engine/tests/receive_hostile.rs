//! Well-formed hostile streams: records with valid checksums whose contents
//! the receiver's object layer cannot store. Each must be refused when its record arrives, with
//! an error naming the record, and leave the pool writable and `check` clean; none may reach
//! the txg sync, where a failure suspends the whole pool.

use crate::common;

use tarn::block::blkptr::Compression;
use tarn::pool::Pool;
use tarn::send::stream::{ObjectRecord, Record, StreamReader, StreamWriter};
use tarn::send::{receive, send, ReceiveOptions, SendError, SendOptions, KEPT_BEFORE_THE_ERROR};

use common::*;

fn receive_from(pool: &Pool, target: &str, stream: &[u8]) -> Result<Vec<String>, SendError> {
    let mut input: &[u8] = stream;
    receive(pool, target, &mut input, &ReceiveOptions::default()).map(|report| report.snapshots)
}

/// The records of a full stream of `pool@a`: a root file system holding one small file.
fn base_records(pool: &Pool) -> Vec<Record> {
    let fs = open_fs(pool);
    let file = fs.create(fs.root(), b"file", 0o644, 0, 0).unwrap().ino;
    fs.write(file, 0, &pattern(1, 20_000)).unwrap();
    drop(fs);
    pool.create_snapshots(&["hostile@a".to_string()], false)
        .unwrap();
    let mut stream = Vec::new();
    send(
        pool,
        "hostile@a",
        &SendOptions::default(),
        &mut stream,
        &mut |_| {},
    )
    .unwrap();
    let mut reader = StreamReader::new(&stream[..]);
    let mut records = Vec::new();
    loop {
        let record = reader.next_record().unwrap();
        let end = matches!(record, Record::End { .. });
        records.push(record);
        if end {
            return records;
        }
    }
}

/// The base stream with `extra` inserted before its END record, checksums computed afresh.
fn with_records(base: &[Record], extra: &[Record]) -> Vec<u8> {
    let (end, body) = base.split_last().unwrap();
    let mut writer = StreamWriter::new(Vec::new());
    for record in body.iter().chain(extra).chain([end]) {
        writer.write(record).unwrap();
    }
    writer.into_inner()
}

/// An OBJECT record like the base stream's first plain file's, renumbered, with these block
/// settings.
fn object(template: &ObjectRecord, object: u64, block_size: u32, shift: u8) -> Record {
    Record::Object(Box::new(ObjectRecord {
        object,
        data_block_size: block_size,
        indirect_block_shift: shift,
        max_blkid: 0,
        has_spill: false,
        ..template.clone()
    }))
}

fn write(object: u64, offset: u64, data: Vec<u8>) -> Record {
    Record::Write {
        object,
        offset,
        logical_size: data.len() as u64,
        compression: Compression::Off,
        data,
    }
}

fn free(object: u64, offset: u64, length: u64) -> Record {
    Record::Free {
        object,
        offset,
        length,
    }
}

/// Every hostile stream is refused with an error naming its record; after each the pool still
/// takes writes and syncs, no partial file system is left, and `check` is clean at the end. On
/// 28b9636 the first (512-byte blocks, 1 KiB indirect blocks, a WRITE at 1 TiB: past the 64 GiB
/// such a tree of 10 levels addresses) was accepted and failed in the sync, suspending the pool;
/// an unaligned FREE near the end of u64 overflowed in open context; an OBJECT numbered
/// u64::MAX overflowed the receiver's next-object counter.
#[test]
fn hostile_streams_are_refused_and_the_pool_stays_writable() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
    let base = base_records(&pool);
    let template = base
        .iter()
        .zip(&base[1..])
        .find_map(|pair| match pair {
            (Record::Object(object), Record::Write { .. }) => Some((**object).clone()),
            _ => None,
        })
        .expect("the file's OBJECT record");
    let last_object = base
        .iter()
        .filter_map(|record| match record {
            Record::Object(object) => Some(object.object),
            _ => None,
        })
        .max()
        .unwrap();
    let n = last_object + 10;
    let tib = 1u64 << 40;
    let cases: Vec<(&str, Vec<Record>, String)> = vec![
        (
            "512-byte blocks, 1 KiB indirect blocks, a WRITE at 1 TiB",
            vec![object(&template, n, 512, 10), write(n, tib, vec![7; 512])],
            format!("WRITE of object {n} at offset {tib}"),
        ),
        (
            "a WRITE past the addressable range, not block-aligned",
            vec![
                object(&template, n, 512, 10),
                write(n, tib + 100, vec![7; 100]),
            ],
            format!("WRITE of object {n} at offset {}", tib + 100),
        ),
        (
            "a WRITE whose offset and length overflow u64",
            vec![
                object(&template, n, 4096, 17),
                write(n, u64::MAX - 100, vec![7; 4096]),
            ],
            format!("WRITE of object {n} at {}", u64::MAX - 100),
        ),
        (
            "a WRITE whose payload is shorter than its length",
            vec![
                object(&template, n, 4096, 17),
                Record::Write {
                    object: n,
                    offset: 0,
                    logical_size: 4096,
                    compression: Compression::Off,
                    data: vec![7; 100],
                },
            ],
            format!("WRITE of object {n} at 0"),
        ),
        (
            "an unaligned FREE",
            vec![object(&template, n, 4096, 17), free(n, 100, 4096)],
            format!("FREE of object {n} at offset 100"),
        ),
        (
            "an unaligned FREE at the end of u64",
            vec![object(&template, n, 4096, 17), free(n, u64::MAX - 10, 5)],
            format!("FREE of object {n} at offset {}", u64::MAX - 10),
        ),
        (
            "a FREE whose length runs past u64",
            vec![object(&template, n, 4096, 17), free(n, 4096, u64::MAX - 1)],
            format!("FREE of object {n} at offset 4096"),
        ),
        (
            "a FREE past the addressable range",
            vec![object(&template, n, 512, 10), free(n, tib, 512)],
            format!("FREE of object {n} at offset {tib}"),
        ),
        (
            "an OBJECT numbered u64::MAX",
            vec![object(&template, u64::MAX, 4096, 17)],
            format!("OBJECT {}", u64::MAX),
        ),
        (
            "an OBJECT past the object set's dnodes",
            vec![object(&template, 1 << 60, 4096, 17)],
            format!("OBJECT {}", 1u64 << 60),
        ),
        (
            "an OBJECT with a block size not a multiple of 512",
            vec![object(&template, n, 1000, 17)],
            format!("OBJECT {n}"),
        ),
        (
            "an OBJECT with blocks larger than the largest",
            vec![object(&template, n, 2 << 20, 17)],
            format!("OBJECT {n}"),
        ),
        (
            "an OBJECT with an indirect shift too small",
            vec![object(&template, n, 4096, 9)],
            format!("OBJECT {n}"),
        ),
        (
            "an OBJECT with an indirect shift too large",
            vec![object(&template, n, 4096, 18)],
            format!("OBJECT {n}"),
        ),
        (
            "an OBJECT whose last block its tree cannot address",
            vec![Record::Object(Box::new(ObjectRecord {
                max_blkid: tib,
                ..match object(&template, n, 512, 10) {
                    Record::Object(object) => *object,
                    _ => unreachable!(),
                }
            }))],
            format!("OBJECT {n}"),
        ),
        (
            "a FREEOBJECTS whose count runs past u64",
            vec![Record::FreeObjects {
                first: n,
                count: u64::MAX,
            }],
            format!("FREEOBJECTS from {n}"),
        ),
    ];
    let fs = open_fs(&pool);
    for (index, (what, extra, names)) in cases.iter().enumerate() {
        let target = format!("hostile/copy{index}");
        let error = receive_from(&pool, &target, &with_records(&base, extra))
            .expect_err(what)
            .to_string();
        assert!(
            error.contains(names.as_str()),
            "{what}: the error names the record ({names}): {error}"
        );
        assert!(!pool.has_dataset(&target), "{what}: no partial file system");
        // The pool still takes writes: nothing reached a sync that failed.
        let file = fs
            .create(fs.root(), format!("after{index}").as_bytes(), 0o644, 0, 0)
            .unwrap_or_else(|error| panic!("{what}: the pool refuses writes: {error}"))
            .ino;
        fs.write(file, 0, &pattern(index as u64, 10_000))
            .unwrap_or_else(|error| panic!("{what}: the pool refuses writes: {error}"));
        pool.sync()
            .unwrap_or_else(|error| panic!("{what}: the pool does not sync: {error}"));
    }
    // The intact stream still applies.
    receive_from(&pool, "hostile/copy", &with_records(&base, &[])).unwrap();
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

/// Offsets and lengths near every edge that matters: block boundaries, the 64 GiB a tree of
/// 512-byte blocks and 1 KiB indirect blocks addresses, and the end of u64.
fn edge_value() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        Just(0u64),
        Just(100),
        Just(512),
        Just(4096),
        Just(64 << 30),
        Just((64 << 30) - 512),
        Just(1 << 40),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::MAX - 4096),
        any::<u64>(),
        0u64..1 << 20,
    ]
}

/// Block settings near the limits, some of them refused.
fn block_settings() -> impl proptest::strategy::Strategy<Value = (u32, u8)> {
    use proptest::prelude::*;
    (
        prop_oneof![
            Just(512u32),
            Just(1000),
            Just(4096),
            Just(128 << 10),
            Just(1 << 20),
            Just(2 << 20)
        ],
        prop_oneof![Just(9u8), Just(10), Just(12), Just(17), Just(18)],
    )
}

proptest::proptest! {
    #![proptest_config(tarn::fuzz_config!(24))]
    /// An OBJECT record with random block settings and random WRITE and FREE records of it,
    /// appended to a good stream: whether the receive takes them or refuses them, it never
    /// panics and never makes a sync fail (the pool still takes a write and syncs after it,
    /// and `check` is clean).
    #[test]
    fn random_records_never_suspend_the_pool(
        (block_size, shift) in block_settings(),
        records in proptest::collection::vec((proptest::bool::ANY, edge_value(), edge_value()), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
        let base = base_records(&pool);
        let template = base
            .iter()
            .find_map(|record| match record {
                Record::Object(object) => Some((**object).clone()),
                _ => None,
            })
            .unwrap();
        let last_object = base
            .iter()
            .filter_map(|record| match record {
                Record::Object(object) => Some(object.object),
                _ => None,
            })
            .max()
            .unwrap();
        let n = last_object + 1;
        let mut extra = vec![object(&template, n, block_size, shift)];
        for (is_write, offset, length) in records {
            extra.push(if is_write {
                write(n, offset, vec![9; (length % 8192).max(1) as usize])
            } else {
                free(n, offset, length.max(1))
            });
        }
        let _ = receive_from(&pool, "hostile/copy", &with_records(&base, &extra));
        let fs = open_fs(&pool);
        let file = fs.create(fs.root(), b"after", 0o644, 0, 0).unwrap().ino;
        fs.write(file, 0, &pattern(5, 10_000)).unwrap();
        drop(fs);
        pool.sync().unwrap();
        assert_clean(&pool);
        pool.export().unwrap();
    }
}

/// The records of `stream` (one substream), decoded.
fn records_of(stream: &[u8]) -> Vec<Record> {
    let mut reader = StreamReader::new(stream);
    let mut records = Vec::new();
    loop {
        let record = reader.next_record().unwrap();
        let end = matches!(record, Record::End { .. });
        records.push(record);
        if end {
            return records;
        }
    }
}

/// The incremental stream `records` with none of `file`'s records and `ours` in their place.
fn splice(records: &[Record], file: u64, ours: &[Record]) -> Vec<u8> {
    let is_ours = |record: &Record| match record {
        Record::Object(object) => object.object == file,
        Record::Write { object, .. }
        | Record::Spill { object, .. }
        | Record::Free { object, .. } => *object == file,
        _ => false,
    };
    let after = |record: &Record| match record {
        Record::Object(object) => object.object > file,
        Record::FreeObjects { first, .. } => *first > file,
        Record::End { .. } => true,
        _ => false,
    };
    let mut writer = StreamWriter::new(Vec::new());
    let mut inserted = false;
    for record in records.iter().filter(|record| !is_ours(record)) {
        if !inserted && after(record) {
            for record in ours {
                writer.write(record).unwrap();
            }
            inserted = true;
        }
        writer.write(record).unwrap();
    }
    writer.into_inner()
}

/// The receiver once ignored an OBJECT record's generation. An incremental
/// stream whose OBJECT record names an object number the target has, with the same type and
/// block size but a generation past the stream's source snapshot (the sender allocated the
/// number again), left the old dnode in place: its indirect block size, checksum,
/// compression, and its old blocks past those the stream wrote. The receiver must free the
/// object and make it again with the record's settings. Fails on 28b9636 (the old shift and
/// blocks stay).
#[test]
fn an_object_of_a_new_generation_is_made_again_with_its_settings() {
    use tarn::block::blkptr::ChecksumType;
    use tarn::types::ObjectId;

    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
    let fs = open_fs(&pool);
    let file = fs.create(fs.root(), b"file", 0o644, 0, 0).unwrap().ino;
    fs.write(file, 0, &pattern(1, 3 * 4096)).unwrap();
    drop(fs);
    pool.create_snapshots(&["hostile@a".to_string()], false)
        .unwrap();
    pool.create_snapshots(&["hostile@b".to_string()], false)
        .unwrap();
    let full = send_to_vec(&pool, "hostile@a", None);
    let incremental = send_to_vec(&pool, "hostile@b", Some("@a"));
    receive_from(&pool, "hostile/copy", &full).unwrap();
    pool.sync().unwrap();
    let before = pool
        .dataset_objset("hostile/copy")
        .unwrap()
        .synced_dnode(ObjectId(file))
        .unwrap();
    assert_eq!(before.max_blkid, 2, "the old object has three blocks");

    // The file's OBJECT record from the full stream, as the sender would send the object
    // had it freed the number and allocated it again after @a: a generation past @a, the
    // same type and block size, other settings.
    let template = records_of(&full)
        .into_iter()
        .find_map(|record| match record {
            Record::Object(object) if object.object == file => Some(*object),
            _ => None,
        })
        .unwrap();
    let records = records_of(&incremental);
    let Record::Begin(begin) = &records[0] else {
        panic!("a BEGIN first")
    };
    let checksum = if template.checksum == ChecksumType::Sha256 {
        ChecksumType::Blake3
    } else {
        ChecksumType::Sha256
    };
    let compression = if template.compression == Compression::Off {
        Compression::Lz4
    } else {
        Compression::Off
    };
    assert_ne!(template.indirect_block_shift, 12);
    let renewed = ObjectRecord {
        generation: begin.to_txg,
        indirect_block_shift: 12,
        checksum,
        compression,
        copies: 2,
        max_blkid: 0,
        ..template.clone()
    };
    let block_size = u64::from(template.data_block_size);
    let new_block = pattern(2, block_size as usize);
    let ours = [
        Record::Object(Box::new(renewed)),
        write(file, 0, new_block.clone()),
        free(file, block_size, u64::MAX),
    ];
    receive_from(&pool, "hostile/copy", &splice(&records, file, &ours)).unwrap();
    pool.sync().unwrap();

    let objset = pool.dataset_objset("hostile/copy").unwrap();
    let dnode = objset.synced_dnode(ObjectId(file)).unwrap();
    assert_eq!(
        dnode.indirect_block_shift, 12,
        "the record's indirect shift"
    );
    assert_eq!(dnode.checksum, checksum, "the record's checksum");
    assert_eq!(dnode.compression, compression, "the record's compression");
    assert_eq!(dnode.copies, 2, "the record's copies");
    assert_eq!(dnode.max_blkid, 0, "the old object's blocks are gone");
    assert!(dnode.generation.0 > before.generation.0, "a new object");
    let copy = tarn::fs::FileSystem::open(objset, pool.core.txgs.clone()).unwrap();
    let contents = read_all(&copy, file);
    assert_eq!(&contents[..block_size as usize], &new_block[..]);
    assert!(
        contents[block_size as usize..]
            .iter()
            .all(|&byte| byte == 0),
        "nothing of the old contents is left"
    );
    drop(copy);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// The other half of the generation check: an OBJECT record for the same object (a
/// generation at or before the source snapshot) still carries settings, and the receiver
/// applies them all (OpenZFS applies checksum and compression from every record); the
/// contents stay. An indirect
/// block size that cannot change (the object has indirect blocks) is refused, naming the
/// record, and the pool stays writable.
#[test]
fn an_object_record_of_the_same_generation_applies_its_settings() {
    use tarn::block::blkptr::ChecksumType;
    use tarn::types::ObjectId;

    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
    let fs = open_fs(&pool);
    let file = fs.create(fs.root(), b"file", 0o644, 0, 0).unwrap().ino;
    let contents = pattern(1, 40 * 4096);
    fs.write(file, 0, &contents).unwrap();
    drop(fs);
    pool.create_snapshots(&["hostile@a".to_string()], false)
        .unwrap();
    pool.create_snapshots(&["hostile@b".to_string()], false)
        .unwrap();
    let full = send_to_vec(&pool, "hostile@a", None);
    let incremental = send_to_vec(&pool, "hostile@b", Some("@a"));
    receive_from(&pool, "hostile/copy", &full).unwrap();
    let template = records_of(&full)
        .into_iter()
        .find_map(|record| match record {
            Record::Object(object) if object.object == file => Some(*object),
            _ => None,
        })
        .unwrap();
    let records = records_of(&incremental);
    let checksum = if template.checksum == ChecksumType::Sha256 {
        ChecksumType::Blake3
    } else {
        ChecksumType::Sha256
    };
    let compression = if template.compression == Compression::Off {
        Compression::Lz4
    } else {
        Compression::Off
    };

    // Another indirect block size for an object with indirect blocks: refused.
    let reshaped = ObjectRecord {
        indirect_block_shift: template.indirect_block_shift + 2,
        ..template.clone()
    };
    let error = receive_from(
        &pool,
        "hostile/copy",
        &splice(&records, file, &[Record::Object(Box::new(reshaped))]),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains(&format!("OBJECT {file}")), "{error}");
    assert!(!pool.has_dataset("hostile/copy/%recv"));

    // Checksum, compression and copies: applied, the contents kept.
    let changed = ObjectRecord {
        checksum,
        compression,
        copies: 2,
        ..template.clone()
    };
    receive_from(
        &pool,
        "hostile/copy",
        &splice(&records, file, &[Record::Object(Box::new(changed))]),
    )
    .unwrap();
    pool.sync().unwrap();
    let objset = pool.dataset_objset("hostile/copy").unwrap();
    let dnode = objset.synced_dnode(ObjectId(file)).unwrap();
    assert_eq!(dnode.checksum, checksum);
    assert_eq!(dnode.compression, compression);
    assert_eq!(dnode.copies, 2);
    assert_eq!(dnode.indirect_block_shift, template.indirect_block_shift);
    let copy = tarn::fs::FileSystem::open(objset, pool.core.txgs.clone()).unwrap();
    assert_eq!(read_all(&copy, file), contents);
    drop(copy);
    // The pool still takes writes.
    let fs = open_fs(&pool);
    let other = fs.create(fs.root(), b"other", 0o644, 0, 0).unwrap().ino;
    fs.write(other, 0, &pattern(3, 10_000)).unwrap();
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn bytes_after_a_whole_stream_are_refused_and_the_snapshot_received_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
    let mut records = base_records(&pool);
    let end = records.last().unwrap().clone();
    records.push(end);
    let mut writer = StreamWriter::new(Vec::new());
    for record in &records {
        writer.write(record).unwrap();
    }
    let error = receive_from(&pool, "hostile/copy", &writer.into_inner()).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, SendError::BadStream { .. })
            && message.contains("expected BEGIN")
            && message.contains(&format!("{KEPT_BEFORE_THE_ERROR}: hostile/copy@a")),
        "{message}"
    );
    let copy = pool.snapshot_file_system("hostile/copy@a").unwrap();
    let file = copy.lookup(copy.root(), b"file").unwrap().ino;
    assert_eq!(copy.read(file, 0, 20_000).unwrap(), pattern(1, 20_000));
    drop(copy);
    assert_clean(&pool);
    pool.export().unwrap();
}

/// One structural change to a good stream (records valid one by one, the stream not).
#[derive(Clone, Debug)]
enum Mutation {
    /// A record left out (a missing OBJECT, WRITE, FREE, or the END).
    Drop(usize),
    /// A record sent twice in a row.
    Duplicate(usize),
    /// Two records swapped (out of order: a WRITE before its OBJECT, the END early).
    Swap(usize, usize),
    /// A WRITE whose logical size lies about its data.
    LieSize(usize, u64),
    /// A record's object number moved to a limit.
    ObjectAt(usize, u64),
    /// The END names another snapshot.
    EndGuid(u64),
    /// The BEGIN names another snapshot or source.
    BeginGuids(u64, u64),
}

fn mutation() -> impl proptest::strategy::Strategy<Value = Mutation> {
    use proptest::prelude::*;
    let index = 0usize..64;
    prop_oneof![
        index.clone().prop_map(Mutation::Drop),
        index.clone().prop_map(Mutation::Duplicate),
        (index.clone(), index.clone()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (index.clone(), edge_value()).prop_map(|(at, size)| Mutation::LieSize(at, size)),
        (
            index,
            prop_oneof![
                Just(0u64),
                Just(1),
                Just(u64::MAX),
                Just(u64::MAX - 1),
                Just(1 << 48),
                any::<u64>()
            ]
        )
            .prop_map(|(at, object)| Mutation::ObjectAt(at, object)),
        any::<u64>().prop_map(Mutation::EndGuid),
        (any::<u64>(), prop_oneof![Just(0u64), any::<u64>()])
            .prop_map(|(to, from)| Mutation::BeginGuids(to, from)),
    ]
}

fn apply(records: &mut Vec<Record>, mutation: &Mutation) {
    let length = records.len();
    match *mutation {
        Mutation::Drop(at) => {
            records.remove(at % length);
        }
        Mutation::Duplicate(at) => {
            let record = records[at % length].clone();
            records.insert(at % length, record);
        }
        Mutation::Swap(a, b) => records.swap(a % length, b % length),
        Mutation::LieSize(at, size) => {
            if let Some(Record::Write { logical_size, .. }) = records.get_mut(at % length) {
                *logical_size = size;
            }
        }
        Mutation::ObjectAt(at, number) => match records.get_mut(at % length) {
            Some(Record::Object(object)) => object.object = number,
            Some(Record::Write { object, .. })
            | Some(Record::Free { object, .. })
            | Some(Record::Spill { object, .. }) => *object = number,
            Some(Record::FreeObjects { first, .. }) => *first = number,
            _ => {}
        },
        Mutation::EndGuid(guid) => {
            if let Some(Record::End { to_guid }) = records.last_mut() {
                *to_guid = guid;
            }
        }
        Mutation::BeginGuids(to, from) => {
            if let Some(Record::Begin(begin)) = records.first_mut() {
                begin.to_guid = to;
                begin.from_guid = from;
            }
        }
    }
}

/// The records of a full stream of a file system with directories, files of several sizes, a
/// hole and xattrs: more records for the mutations to reorder.
fn rich_records(pool: &Pool) -> Vec<Record> {
    let fs = open_fs(pool);
    let dir = fs.mkdir(fs.root(), b"dir", 0o755, 0, 0).unwrap().ino;
    for (index, size) in [0usize, 1, 4095, 70_000, 300_000].into_iter().enumerate() {
        let file = fs
            .create(dir, format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(file, 0, &pattern(index as u64, size)).unwrap();
    }
    let sparse = fs.create(fs.root(), b"sparse", 0o644, 0, 0).unwrap().ino;
    fs.write(sparse, 1 << 20, b"tail").unwrap();
    drop(fs);
    base_records(pool)
}

proptest::proptest! {
    #![proptest_config(tarn::fuzz_config!(32))]
    /// A good stream changed by up to three structural mutations is received or refused,
    /// never a panic or a failed sync; a refused one leaves no file system behind; the pool
    /// takes a write and syncs after it, and `check` is clean. What was received reads back
    /// without an error.
    #[test]
    fn structurally_hostile_streams_are_received_or_refused_cleanly(
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let pool = create_pool(dir.path(), "hostile", single(dir.path(), "d0"), tiny());
        let mut records = rich_records(&pool);
        for mutation in &mutations {
            apply(&mut records, mutation);
        }
        let mut writer = StreamWriter::new(Vec::new());
        for record in &records {
            writer.write(record).unwrap();
        }
        let stream = writer.into_inner();
        match receive_from(&pool, "hostile/copy", &stream) {
            // A stream can lie in ways no receiver can see (a WRITE left out is a hole; an
            // OBJECT left out leaves a name without its file): what was received is walked,
            // and may answer errors, but never panics.
            Ok(_) => {
                if let Ok(copy) = pool.open_file_system("hostile/copy") {
                    let mut stack = vec![copy.root()];
                    let mut visited = 0;
                    while let Some(directory) = stack.pop() {
                        visited += 1;
                        proptest::prop_assert!(visited < 1000, "a directory cycle");
                        for entry in copy.readdir(directory, 0, 1 << 16).unwrap_or_default() {
                            if entry.name == b"." || entry.name == b".." {
                                continue;
                            }
                            let Ok(attr) = copy.getattr(entry.ino) else {
                                continue;
                            };
                            if attr.kind == tarn::fs::FileKind::Directory {
                                stack.push(entry.ino);
                            } else if attr.kind == tarn::fs::FileKind::Regular {
                                let _ = copy.read(entry.ino, 0, attr.size.min(1 << 22) as usize);
                            }
                        }
                    }
                }
            }
            // Bytes after a whole substream (an END sent twice) are refused after its
            // snapshot was received, which the error names.
            Err(error) if error.to_string().contains(KEPT_BEFORE_THE_ERROR) => {
                proptest::prop_assert!(pool.has_dataset("hostile/copy@a"), "{error}");
            }
            Err(error) => proptest::prop_assert!(
                !pool.has_dataset("hostile/copy"),
                "a refused receive left its file system behind: {error}"
            ),
        }
        let fs = open_fs(&pool);
        let file = fs.create(fs.root(), b"after", 0o644, 0, 0).unwrap().ino;
        fs.write(file, 0, &pattern(5, 10_000)).unwrap();
        drop(fs);
        pool.sync().unwrap();
        assert_clean(&pool);
        pool.export().unwrap();
    }
}
