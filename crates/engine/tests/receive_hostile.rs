//! Well-formed hostile streams (issue 34, hole 3): records with valid checksums whose contents
//! the receiver's object layer cannot store. Each must be refused when its record arrives, with
//! an error naming the record, and leave the pool writable and `check` clean; none may reach
//! the txg sync, where a failure suspends the whole pool.

mod common;

use tarn::block::blkptr::Compression;
use tarn::pool::Pool;
use tarn::send::stream::{ObjectRecord, Record, StreamReader, StreamWriter};
use tarn::send::{receive, send, ReceiveOptions, SendError, SendOptions};

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
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]
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
