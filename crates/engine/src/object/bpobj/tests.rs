//! Tests of block-pointer lists against an in-memory [`BpObjStore`] that counts I/O.

use super::*;
use crate::block::blkptr::{ChecksumType, Compression, Dva};
use crate::types::{Txg, VdevId};
use proptest::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

struct MemObject {
    object_type: ObjectType,
    header: Vec<u8>,
    data: Vec<u8>,
}

/// Objects in a map; reads and writes counted, the largest single read remembered.
struct MemStore {
    objects: RefCell<BTreeMap<u64, MemObject>>,
    next: Cell<u64>,
    chunk: usize,
    writes: Cell<u64>,
    largest_read: Cell<usize>,
}

impl MemStore {
    fn new(chunk: usize) -> MemStore {
        MemStore {
            objects: RefCell::new(BTreeMap::new()),
            next: Cell::new(1),
            chunk,
            writes: Cell::new(0),
            largest_read: Cell::new(0),
        }
    }

    fn object_count(&self) -> usize {
        self.objects.borrow().len()
    }

    fn with<T>(
        &self,
        object: ObjectId,
        f: impl FnOnce(&mut MemObject) -> T,
    ) -> Result<T, ObjectError> {
        let mut objects = self.objects.borrow_mut();
        let found = objects
            .get_mut(&object.0)
            .ok_or(ObjectError::NoSuchObject(object))?;
        Ok(f(found))
    }
}

impl BpObjStore for MemStore {
    fn create(
        &self,
        _tx: &Tx,
        object_type: ObjectType,
        header: &[u8],
    ) -> Result<ObjectId, ObjectError> {
        let id = self.next.get();
        self.next.set(id + 1);
        self.objects.borrow_mut().insert(
            id,
            MemObject {
                object_type,
                header: header.to_vec(),
                data: Vec::new(),
            },
        );
        Ok(ObjectId(id))
    }
    fn remove(&self, _tx: &Tx, object: ObjectId) -> Result<(), ObjectError> {
        self.objects
            .borrow_mut()
            .remove(&object.0)
            .map(|_| ())
            .ok_or(ObjectError::NoSuchObject(object))
    }
    fn object_type(&self, object: ObjectId) -> Result<ObjectType, ObjectError> {
        self.with(object, |found| found.object_type)
    }
    fn header(&self, object: ObjectId) -> Result<Vec<u8>, ObjectError> {
        self.with(object, |found| found.header.clone())
    }
    fn set_header(&self, _tx: &Tx, object: ObjectId, header: &[u8]) -> Result<(), ObjectError> {
        self.writes.set(self.writes.get() + 1);
        self.with(object, |found| found.header = header.to_vec())
    }
    fn capacity(&self, object: ObjectId) -> Result<u64, ObjectError> {
        let chunk = self.chunk as u64;
        self.with(object, |found| {
            (found.data.len() as u64).div_ceil(chunk).max(1) * chunk
        })
    }
    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), ObjectError> {
        self.largest_read
            .set(self.largest_read.get().max(buf.len()));
        self.with(object, |found| {
            for (index, byte) in buf.iter_mut().enumerate() {
                *byte = found
                    .data
                    .get(offset as usize + index)
                    .copied()
                    .unwrap_or(0);
            }
        })
    }
    fn write(
        &self,
        _tx: &Tx,
        object: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ObjectError> {
        self.writes.set(self.writes.get() + 1);
        self.with(object, |found| {
            let end = offset as usize + data.len();
            if found.data.len() < end {
                found.data.resize(end, 0);
            }
            found.data[offset as usize..end].copy_from_slice(data);
        })
    }
    fn truncate(&self, _tx: &Tx, object: ObjectId, length: u64) -> Result<(), ObjectError> {
        self.with(object, |found| found.data.truncate(length as usize))
    }
    fn chunk_size(&self, _object: ObjectId) -> Result<usize, ObjectError> {
        Ok(self.chunk)
    }
    fn dsize(&self, bp: &BlockPtr) -> u64 {
        deflated(bp)
    }
}

/// The store deflates as a RAID-Z vdev would (three quarters of what is allocated), so that the
/// totals are seen to count the store's [`BpObjStore::dsize`], not the allocated bytes.
fn deflated(bp: &BlockPtr) -> u64 {
    bp.size_allocated() / 4 * 3
}

const TX: Tx = Tx { txg: Txg(5) };

fn block(seed: u64, copies: usize) -> BlockPtr {
    let mut dvas = [Dva::default(); 3];
    for (index, dva) in dvas.iter_mut().enumerate().take(copies) {
        *dva = Dva {
            vdev: VdevId(index as u32),
            offset: 0x10000 + seed * 0x2000,
            size_allocated: 0x1000 * (1 + seed % 4),
            gang: false,
        };
    }
    BlockPtr {
        dvas,
        size_logical: 0x4000,
        size_physical: (0x1000 * (1 + seed % 4)) as u32,
        compression: Compression::Lz4,
        checksum_type: ChecksumType::Fletcher4,
        object_type: ObjectType::PlainFile,
        level: 0,
        embedded: false,
        birth_logical: Txg(1 + seed % 9),
        birth_physical: Txg(1 + seed % 9),
        fill_count: 1,
        checksum: [seed as u8; 32],
        embedded_payload: Vec::new(),
    }
}

fn entries(range: std::ops::Range<u64>) -> Vec<BpObjEntry> {
    range
        .map(|seed| BpObjEntry::alloc(block(seed, 1 + (seed % 3) as usize)))
        .collect()
}

fn total(entries: &[BpObjEntry]) -> BpSpace {
    let mut space = BpSpace::default();
    for entry in entries {
        let own = BpSpace::of(&entry.bp, deflated(&entry.bp));
        if entry.free {
            space.sub(own);
        } else {
            space.add(own);
        }
    }
    space
}

fn collect(list: &BpObj) -> Vec<BpObjEntry> {
    let mut seen = Vec::new();
    list.iterate(&mut |entry| {
        seen.push(entry.clone());
        Ok(())
    })
    .unwrap();
    seen
}

#[test]
fn header_round_trips_and_rejects_impossible_values() {
    let header = BpObjHeader {
        entry_count: 9,
        space: BpSpace {
            used_bytes: 1,
            compressed_bytes: 2,
            uncompressed_bytes: 3,
        },
        sublist_array: 44,
        sublist_count: 2,
        freed_count: 4,
    };
    assert_eq!(BpObjHeader::decode(&header.encode()).unwrap(), header);
    assert_eq!(BpObjHeader::decode(&[]).unwrap(), BpObjHeader::default());
    assert!(BpObjHeader::decode(&[0u8; 20]).is_err());
    let mut reserved = header.encode();
    reserved[60] = 1;
    assert!(BpObjHeader::decode(&reserved).is_err());
    let too_many_freed = BpObjHeader {
        freed_count: 10,
        ..header
    };
    assert!(BpObjHeader::decode(&too_many_freed.encode()).is_err());
    let no_array = BpObjHeader {
        sublist_array: 0,
        ..header
    };
    assert!(BpObjHeader::decode(&no_array.encode()).is_err());
}

#[test]
fn entries_keep_their_free_flag_and_refuse_holes() {
    let freed = BpObjEntry {
        bp: block(3, 2),
        free: true,
    };
    assert_eq!(BpObjEntry::decode(&freed.encode()).unwrap(), freed);
    let plain = BpObjEntry::alloc(block(3, 2));
    assert_eq!(BpObjEntry::decode(&plain.encode()).unwrap(), plain);
    assert_ne!(freed.encode(), plain.encode());
    let hole = BlockPtr::hole(Txg(3), ObjectType::PlainFile, 0).encode();
    assert!(BpObjEntry::decode(&hole).is_err());
    let store = MemStore::new(1024);
    let object = BpObj::create(&store, &TX).unwrap();
    let mut list = BpObj::open(&store, object).unwrap();
    let hole_entry = BpObjEntry::alloc(BlockPtr::hole(Txg(3), ObjectType::PlainFile, 0));
    assert!(matches!(
        list.append(&TX, &[hole_entry]),
        Err(ObjectError::Invalid(_))
    ));
    assert!(list.is_empty());
}

#[test]
fn append_then_iterate_gives_every_entry_and_the_totals() {
    let store = MemStore::new(1024);
    let object = BpObj::create(&store, &TX).unwrap();
    let mut list = BpObj::open(&store, object).unwrap();
    let all = entries(0..50);
    list.append(&TX, &all[..17]).unwrap();
    list.append(&TX, &all[17..]).unwrap();
    let reopened = BpObj::open(&store, object).unwrap();
    assert_eq!(reopened.header().entry_count, 50);
    assert_eq!(reopened.space(), total(&all));
    assert_eq!(collect(&reopened), all);
    assert!(store.largest_read.get() <= 1024, "one chunk at a time");
}

#[test]
fn free_entries_count_against_the_totals() {
    let store = MemStore::new(1024);
    let object = BpObj::create(&store, &TX).unwrap();
    let mut list = BpObj::open(&store, object).unwrap();
    let born = BpObjEntry::alloc(block(7, 2));
    let freed = BpObjEntry {
        bp: block(7, 2),
        free: true,
    };
    list.append(&TX, &[born.clone(), BpObjEntry::alloc(block(8, 1))])
        .unwrap();
    list.append(&TX, std::slice::from_ref(&freed)).unwrap();
    assert_eq!(
        list.space(),
        BpSpace::of(&block(8, 1), deflated(&block(8, 1)))
    );
    assert_eq!(list.header().freed_count, 1);
}

#[test]
fn merging_a_list_costs_a_constant_number_of_writes() {
    let store = MemStore::new(1024);
    let parent = BpObj::create(&store, &TX).unwrap();
    let child = BpObj::create(&store, &TX).unwrap();
    let big = entries(0..500);
    BpObj::open(&store, child)
        .unwrap()
        .append(&TX, &big)
        .unwrap();
    let mut list = BpObj::open(&store, parent).unwrap();
    list.append(&TX, &entries(1000..1003)).unwrap();
    let before = store.writes.get();
    list.enqueue_sublist(&TX, child).unwrap();
    assert!(
        store.writes.get() - before <= 2,
        "merge wrote {} times",
        store.writes.get() - before
    );
    let expected: Vec<BpObjEntry> = entries(1000..1003).into_iter().chain(big).collect();
    assert_eq!(list.space(), total(&expected));
    assert_eq!(collect(&BpObj::open(&store, parent).unwrap()), expected);
}

#[test]
fn an_empty_sublist_is_destroyed_not_linked() {
    let store = MemStore::new(1024);
    let parent = BpObj::create(&store, &TX).unwrap();
    let child = BpObj::create(&store, &TX).unwrap();
    let mut list = BpObj::open(&store, parent).unwrap();
    list.enqueue_sublist(&TX, child).unwrap();
    assert_eq!(list.header().sublist_count, 0);
    assert_eq!(store.object_count(), 1);
    assert!(matches!(
        list.enqueue_sublist(&TX, parent),
        Err(ObjectError::Invalid(_))
    ));
}

/// Drain in steps of `budget`, re-opening the list each time as a later txg would.
fn drain_all(store: &MemStore, object: ObjectId, budget: u64) -> Vec<BpObjEntry> {
    let mut seen = Vec::new();
    for _ in 0..100_000 {
        let mut list = BpObj::open(store, object).unwrap();
        let mut left = budget;
        let drained = list
            .drain(&TX, &mut left, &mut |entry| {
                seen.push(entry.clone());
                Ok(())
            })
            .unwrap();
        assert!(budget - left <= budget);
        // The header after every step still equals what is left.
        let rest = collect(&BpObj::open(store, object).unwrap());
        assert_eq!(BpObj::open(store, object).unwrap().space(), total(&rest));
        if drained == Drained::Empty {
            return seen;
        }
        assert_eq!(left, 0, "a paused drain spent its whole budget");
    }
    panic!("drain did not finish");
}

#[test]
fn drain_in_small_steps_visits_everything_once_and_destroys_sublists() {
    let store = MemStore::new(512);
    let parent = BpObj::create(&store, &TX).unwrap();
    let mut expected = entries(0..37);
    BpObj::open(&store, parent)
        .unwrap()
        .append(&TX, &expected)
        .unwrap();
    for batch in 0..3u64 {
        let child = BpObj::create(&store, &TX).unwrap();
        let more = entries(100 * (batch + 1)..100 * (batch + 1) + 11 + batch * 5);
        let grandchild = BpObj::create(&store, &TX).unwrap();
        let deeper = entries(10_000 + batch * 10..10_000 + batch * 10 + 4);
        BpObj::open(&store, grandchild)
            .unwrap()
            .append(&TX, &deeper)
            .unwrap();
        let mut child_list = BpObj::open(&store, child).unwrap();
        child_list.append(&TX, &more).unwrap();
        child_list.enqueue_sublist(&TX, grandchild).unwrap();
        BpObj::open(&store, parent)
            .unwrap()
            .enqueue_sublist(&TX, child)
            .unwrap();
        expected.extend(more);
        expected.extend(deeper);
    }
    assert!(store.object_count() > 4);
    let mut seen = drain_all(&store, parent, 3);
    let key = |entry: &BpObjEntry| entry.bp.dvas[0].offset;
    seen.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(seen, expected);
    let list = BpObj::open(&store, parent).unwrap();
    assert!(list.is_empty());
    assert_eq!(list.space(), BpSpace::default());
    assert_eq!(
        store.object_count(),
        1,
        "every sub-list and array destroyed"
    );
    assert!(store.largest_read.get() <= 512);
}

#[test]
fn destroy_removes_every_object_without_reading_entries() {
    let store = MemStore::new(512);
    let parent = BpObj::create(&store, &TX).unwrap();
    let child = BpObj::create(&store, &TX).unwrap();
    BpObj::open(&store, child)
        .unwrap()
        .append(&TX, &entries(0..40))
        .unwrap();
    let mut list = BpObj::open(&store, parent).unwrap();
    list.append(&TX, &entries(50..60)).unwrap();
    list.enqueue_sublist(&TX, child).unwrap();
    store.largest_read.set(0);
    BpObj::open(&store, parent).unwrap().destroy(&TX).unwrap();
    assert_eq!(store.object_count(), 0);
    assert!(store.largest_read.get() <= 8, "only sub-list ids were read");
}

/// Lists whose sub-list arrays each name the next list many times: the depth
/// limit alone let a walk enter `WIDTH^depth` lists, so sixteen small crafted objects made
/// `iterate` run for ever. Sub-lists form a tree, so the walk now refuses a list it has already
/// entered, naming the parent and the sub-list, after at most one entry per distinct list.
#[test]
fn a_list_named_twice_among_sub_lists_is_corruption_not_an_endless_walk() {
    const WIDTH: u64 = 8;
    let store = MemStore::new(512);
    let mut next = BpObj::create(&store, &TX).unwrap();
    BpObj::open(&store, next)
        .unwrap()
        .append(&TX, &entries(0..1))
        .unwrap();
    for _ in 0..SUBLIST_DEPTH_MAX {
        let list = BpObj::create(&store, &TX).unwrap();
        let array = store.create(&TX, ObjectType::ObjectArray, &[]).unwrap();
        for index in 0..WIDTH {
            store
                .write(&TX, array, index * 8, &next.0.to_le_bytes())
                .unwrap();
        }
        let header = BpObjHeader {
            sublist_array: array.0,
            sublist_count: WIDTH,
            ..BpObjHeader::default()
        };
        store.set_header(&TX, list, &header.encode()).unwrap();
        next = list;
    }
    let mut visited = 0u64;
    let error = BpObj::open(&store, next)
        .unwrap()
        .iterate(&mut |_| {
            visited += 1;
            Ok(())
        })
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ObjectError::Corrupt(_)) && message.contains("already entered"),
        "{message}"
    );
    assert_eq!(visited, 1, "the one entry, once");
}

#[test]
fn damaged_lists_are_corruption_errors_not_panics() {
    let store = MemStore::new(512);
    let object = BpObj::create(&store, &TX).unwrap();
    BpObj::open(&store, object)
        .unwrap()
        .append(&TX, &entries(0..3))
        .unwrap();
    // A count past the object's size.
    let mut header = BpObj::open(&store, object).unwrap().header();
    header.entry_count = 1_000;
    store.set_header(&TX, object, &header.encode()).unwrap();
    assert!(matches!(
        BpObj::open(&store, object),
        Err(ObjectError::Corrupt(_))
    ));
    // A garbage entry.
    header.entry_count = 3;
    store.set_header(&TX, object, &header.encode()).unwrap();
    store.write(&TX, object, 130, &[0xff; 40]).unwrap();
    let list = BpObj::open(&store, object).unwrap();
    let error = list.iterate(&mut |_| Ok(())).unwrap_err();
    assert!(error.to_string().contains("entry 1"), "{error}");
    // A list that is its own grandchild: a cycle stops at the depth limit.
    let a = BpObj::create(&store, &TX).unwrap();
    let b = BpObj::create(&store, &TX).unwrap();
    BpObj::open(&store, b)
        .unwrap()
        .append(&TX, &entries(0..1))
        .unwrap();
    BpObj::open(&store, a)
        .unwrap()
        .enqueue_sublist(&TX, b)
        .unwrap();
    let array = store.create(&TX, ObjectType::ObjectArray, &[]).unwrap();
    store.write(&TX, array, 0, &a.0.to_le_bytes()).unwrap();
    let mut b_header = BpObj::open(&store, b).unwrap().header();
    b_header.sublist_array = array.0;
    b_header.sublist_count = 1;
    store.set_header(&TX, b, &b_header.encode()).unwrap();
    let looped = BpObj::open(&store, a).unwrap();
    assert!(matches!(
        looped.iterate(&mut |_| Ok(())),
        Err(ObjectError::Corrupt(_))
    ));
    // Not a list at all.
    assert!(matches!(
        BpObj::open(&store, array),
        Err(ObjectError::Corrupt(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of appends, merges and bounded drains keeps the header's totals equal to
    /// the entries left, and every entry ever added is visited exactly once by the drains.
    #[test]
    fn totals_follow_the_entries(ops in proptest::collection::vec((0u8..3, 1u64..40), 1..30)) {
        let store = MemStore::new(512);
        let object = BpObj::create(&store, &TX).unwrap();
        let mut seed = 0u64;
        let mut added = 0u64;
        let mut drained = 0u64;
        for (op, size) in ops {
            match op {
                0 => {
                    BpObj::open(&store, object).unwrap().append(&TX, &entries(seed..seed + size)).unwrap();
                }
                1 => {
                    let child = BpObj::create(&store, &TX).unwrap();
                    BpObj::open(&store, child).unwrap().append(&TX, &entries(seed..seed + size)).unwrap();
                    BpObj::open(&store, object).unwrap().enqueue_sublist(&TX, child).unwrap();
                }
                _ => {
                    let mut left = size;
                    BpObj::open(&store, object).unwrap().drain(&TX, &mut left, &mut |_| {
                        drained += 1;
                        Ok(())
                    }).unwrap();
                }
            }
            if op < 2 {
                added += size;
                seed += size;
            }
            let list = BpObj::open(&store, object).unwrap();
            let rest = collect(&list);
            prop_assert_eq!(list.space(), total(&rest));
            prop_assert_eq!(rest.len() as u64, added - drained);
        }
    }
}

// Fuzzers of the two on-disk decoders (docs/design/invariants.md §6, invariant 6; `crate::fuzz`
// says how to run them long). Livelists store the same entries, with the FREE flag.
proptest! {
    #![proptest_config(crate::fuzz_config!(256))]
    #[test]
    fn entry_decoder_on_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(entry) = BpObjEntry::decode(&bytes) {
            prop_assert_eq!(&entry.encode()[..], &bytes[..]);
        }
    }

    #[test]
    fn entry_decoder_on_mutated_entries_never_panics(
        bp in crate::block::blkptr::tests::normal_strategy(),
        free: bool,
        mutations in crate::fuzz::mutations(),
    ) {
        let valid = BpObjEntry { bp, free }.encode().to_vec();
        let bytes = crate::fuzz::mutate(valid, &mutations);
        if let Ok(entry) = BpObjEntry::decode(&bytes) {
            prop_assert_eq!(&entry.encode()[..], &bytes[..]);
        }
    }

    #[test]
    fn header_decoder_never_panics(
        words in proptest::collection::vec(any::<u64>(), 8),
        mutations in crate::fuzz::mutations(),
    ) {
        let valid: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
        let bytes = crate::fuzz::mutate(valid, &mutations);
        if let Ok(header) = BpObjHeader::decode(&bytes) {
            if !bytes.is_empty() {
                prop_assert_eq!(&header.encode()[..], &bytes[..BPOBJ_HEADER_SIZE]);
            }
        }
    }
}
