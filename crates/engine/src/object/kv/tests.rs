//! Tests of key/value objects against an in-memory [`KvBlocks`].

use super::*;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Blocks in a hash map, counting I/O.
struct MemBlocks {
    block_size: usize,
    map: HashMap<u64, Vec<u8>>,
    reads: Cell<u64>,
    writes: u64,
}

impl MemBlocks {
    fn new(block_size: usize) -> MemBlocks {
        MemBlocks {
            block_size,
            map: HashMap::new(),
            reads: Cell::new(0),
            writes: 0,
        }
    }

    fn created(block_size: usize) -> MemBlocks {
        let mut blocks = MemBlocks::new(block_size);
        create(&mut blocks).unwrap();
        blocks
    }

    fn io(&self) -> u64 {
        self.reads.get() + self.writes
    }
}

impl KvBlocks for MemBlocks {
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn read_block(&self, blkid: u64) -> Result<Option<std::sync::Arc<Vec<u8>>>> {
        self.reads.set(self.reads.get() + 1);
        Ok(self.map.get(&blkid).cloned().map(std::sync::Arc::new))
    }
    fn write_block(&mut self, blkid: u64, data: Arc<Vec<u8>>) -> Result<()> {
        assert_eq!(data.len(), self.block_size, "writes are whole blocks");
        self.writes += 1;
        self.map.insert(blkid, Arc::unwrap_or_clone(data));
        Ok(())
    }
    fn free_block(&mut self, blkid: u64) -> Result<()> {
        self.map.remove(&blkid);
        Ok(())
    }
}

/// Narrows the hash for the duration of a test to force collisions; restores it on drop.
struct HashMask;
impl HashMask {
    fn keep_top_bits(bits: u32) -> HashMask {
        let mask = ((1u64 << bits) - 1) << (HASH_BITS - bits);
        HASH_MASK_FOR_TESTS.with(|cell| cell.set(mask));
        HashMask
    }
}
impl Drop for HashMask {
    fn drop(&mut self) {
        HASH_MASK_FOR_TESTS.with(|cell| cell.set(u64::MAX));
    }
}

fn list_all(blocks: &dyn KvBlocks, page: usize) -> Vec<KvEntry> {
    let mut all = Vec::new();
    let mut cookie = 0;
    loop {
        let entries = list(blocks, cookie, page).unwrap();
        assert!(entries.len() <= page);
        let Some(last) = entries.last() else {
            return all;
        };
        cookie = last.cookie + 1;
        all.extend(entries);
    }
}

fn key_of(index: u64) -> Vec<u8> {
    format!("entry-{index:08}").into_bytes()
}

#[test]
fn empty_object() {
    let blocks = MemBlocks::created(4096);
    assert_eq!(count(&blocks).unwrap(), 0);
    assert_eq!(lookup(&blocks, b"a").unwrap(), None);
    assert!(list(&blocks, 0, 10).unwrap().is_empty());
}

#[test]
fn insert_lookup_upsert_update_remove() {
    let mut blocks = MemBlocks::created(4096);
    insert(&mut blocks, b"alpha", b"one").unwrap();
    assert!(matches!(
        insert(&mut blocks, b"alpha", b"two"),
        Err(KvError::Exists)
    ));
    assert_eq!(lookup(&blocks, b"alpha").unwrap().unwrap(), b"one");
    assert!(!upsert(&mut blocks, b"alpha", b"longer value").unwrap());
    assert_eq!(lookup(&blocks, b"alpha").unwrap().unwrap(), b"longer value");
    assert!(upsert(&mut blocks, b"beta", b"").unwrap());
    assert_eq!(lookup(&blocks, b"beta").unwrap().unwrap(), b"");
    assert!(matches!(
        update(&mut blocks, b"gamma", b"x"),
        Err(KvError::NotFound)
    ));
    update(&mut blocks, b"beta", b"b").unwrap();
    assert_eq!(lookup(&blocks, b"beta").unwrap().unwrap(), b"b");
    assert_eq!(count(&blocks).unwrap(), 2);
    assert!(remove(&mut blocks, b"alpha").unwrap());
    assert!(!remove(&mut blocks, b"alpha").unwrap());
    assert_eq!(lookup(&blocks, b"alpha").unwrap(), None);
    assert_eq!(count(&blocks).unwrap(), 1);
}

#[test]
fn limits() {
    let mut blocks = MemBlocks::created(4096);
    assert!(matches!(
        insert(&mut blocks, b"", b"v"),
        Err(KvError::KeyTooLong)
    ));
    let key_long = vec![b'k'; KEY_LEN_MAX + 1];
    assert!(matches!(
        insert(&mut blocks, &key_long, b"v"),
        Err(KvError::KeyTooLong)
    ));
    let value_long = vec![0u8; VALUE_LEN_MAX + 1];
    assert!(matches!(
        insert(&mut blocks, b"k", &value_long),
        Err(KvError::ValueTooLong)
    ));
    // The largest entries still work in the smallest blocks, many of them.
    for index in 0..200u64 {
        let mut key = vec![b'x'; KEY_LEN_MAX];
        key[..8].copy_from_slice(&index.to_le_bytes());
        insert(&mut blocks, &key, &vec![index as u8; VALUE_LEN_MAX]).unwrap();
    }
    assert_eq!(count(&blocks).unwrap(), 200);
    assert_eq!(list_all(&blocks, 7).len(), 200);
}

#[test]
fn u64_helpers() {
    let mut blocks = MemBlocks::created(4096);
    insert_u64(&mut blocks, "root_dataset", 17).unwrap();
    assert_eq!(lookup_u64(&blocks, "root_dataset").unwrap(), Some(17));
    assert!(matches!(
        insert_u64(&mut blocks, "root_dataset", 18),
        Err(KvError::Exists)
    ));
    assert!(!upsert_u64(&mut blocks, "root_dataset", 18).unwrap());
    assert_eq!(lookup_u64(&blocks, "root_dataset").unwrap(), Some(18));
    assert_eq!(lookup_u64(&blocks, "config").unwrap(), None);
    insert(&mut blocks, b"short", b"abc").unwrap();
    assert!(matches!(
        lookup_u64(&blocks, "short"),
        Err(KvError::Corrupt { .. })
    ));
}

#[test]
fn cookies_are_in_range_and_listing_is_sorted() {
    let mut blocks = MemBlocks::created(4096);
    for index in 0..3000 {
        insert(&mut blocks, &key_of(index), b"v").unwrap();
    }
    let all = list_all(&blocks, 100);
    assert_eq!(all.len(), 3000);
    for pair in all.windows(2) {
        assert!(pair[0].cookie < pair[1].cookie);
    }
    assert!(all
        .iter()
        .all(|entry| (COOKIE_FIRST..COOKIE_END).contains(&entry.cookie)));
    // Resuming at a cookie returns exactly the tail.
    let tail = list(&blocks, all[1234].cookie, 10).unwrap();
    assert_eq!(tail, all[1234..1244].to_vec());
    // Small and huge start cookies.
    assert_eq!(list(&blocks, 0, 1).unwrap()[0], all[0]);
    assert!(list(&blocks, COOKIE_END, 10).unwrap().is_empty());
    assert!(list(&blocks, u64::MAX, 10).unwrap().is_empty());
}

#[test]
fn heavy_hash_collisions_use_differentiators() {
    // With only 6 hash bits, 300 keys share 64 hashes: every leaf holds long runs of colliding
    // entries told apart by their collision differentiators.
    let _mask = HashMask::keep_top_bits(6);
    let mut blocks = MemBlocks::created(4096);
    let mut model = BTreeMap::new();
    for index in 0..300u64 {
        let value = index.to_le_bytes().to_vec();
        insert(&mut blocks, &key_of(index), &value).unwrap();
        model.insert(key_of(index), value);
    }
    for index in (0..300u64).step_by(3) {
        assert!(remove(&mut blocks, &key_of(index)).unwrap());
        model.remove(&key_of(index));
    }
    for index in 300..400u64 {
        let value = index.to_le_bytes().to_vec();
        insert(&mut blocks, &key_of(index), &value).unwrap();
        model.insert(key_of(index), value);
    }
    for (key, value) in &model {
        assert_eq!(lookup(&blocks, key).unwrap().as_ref(), Some(value));
    }
    let all = list_all(&blocks, 13);
    let listed: BTreeMap<_, _> = all
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    assert_eq!(listed, model);
    assert_eq!(all.len(), model.len());
    let hashes: BTreeSet<u64> = all.iter().map(|entry| cookie_hash(entry.cookie)).collect();
    assert!(hashes.len() <= 64, "the mask limits distinct hashes");
    let differentiated = all
        .iter()
        .filter(|entry| entry.cookie & CD_MAX != 0)
        .count();
    assert!(
        differentiated > 200,
        "only {differentiated} entries needed a differentiator"
    );
}

/// Insert, look up, list and remove `total` entries, asserting O(1) blocks per lookup and that
/// the block I/O per insert does not grow with size; prints time per entry.
fn scale(block_size: usize, total: u64) {
    let mut blocks = MemBlocks::created(block_size);
    let window = total / 10;
    let mut insert_io = Vec::new();
    let mut insert_time = Vec::new();
    for chunk in 0..10 {
        let (io_start, time_start) = (blocks.io(), Instant::now());
        for index in chunk * window..(chunk + 1) * window {
            insert(&mut blocks, &key_of(index), &index.to_le_bytes()).unwrap();
        }
        insert_io.push(blocks.io() - io_start);
        insert_time.push(time_start.elapsed());
    }
    assert_eq!(count(&blocks).unwrap(), total);

    let time_start = Instant::now();
    for index in 0..total {
        let reads_start = blocks.reads.get();
        let value = lookup(&blocks, &key_of(index)).unwrap().unwrap();
        assert_eq!(value, index.to_le_bytes());
        assert!(
            blocks.reads.get() - reads_start <= 3,
            "lookup reads header, table, leaf"
        );
    }
    let lookup_time = time_start.elapsed();

    let time_start = Instant::now();
    let all = list_all(&blocks, 1000);
    let list_time = time_start.elapsed();
    assert_eq!(all.len() as u64, total);
    let keys: BTreeSet<_> = all.iter().map(|entry| entry.key.clone()).collect();
    assert_eq!(keys.len() as u64, total, "each entry listed exactly once");

    let time_start = Instant::now();
    let io_start = blocks.io();
    for index in 0..total {
        assert!(remove(&mut blocks, &key_of(index)).unwrap());
    }
    let remove_io = blocks.io() - io_start;
    let remove_time = time_start.elapsed();
    assert_eq!(count(&blocks).unwrap(), 0);
    assert!(list(&blocks, 0, 10).unwrap().is_empty());

    let per_entry = |time: Duration, entries: u64| time.as_nanos() as f64 / entries as f64 / 1e3;
    println!(
        "block size {block_size}: insert µs/entry first {:.1} last {:.1}; lookup {:.1}, list {:.2}, \
         remove {:.1} µs/entry; insert I/O per entry first {:.2} last {:.2}; remove I/O per entry {:.2}",
        per_entry(insert_time[0], window),
        per_entry(insert_time[9], window),
        per_entry(lookup_time, total),
        per_entry(list_time, total),
        per_entry(remove_time, total),
        insert_io[0] as f64 / window as f64,
        insert_io[9] as f64 / window as f64,
        remove_io as f64 / total as f64,
    );
    // Block I/O per insert is bounded: the last tenth costs at most twice the first tenth
    // (reading an external pointer-table block is the only addition as the map grows).
    assert!(insert_io[9] <= 2 * insert_io[0], "insert I/O {insert_io:?}");
    assert!(remove_io <= 6 * total);
    // A loose timing bound: the last tenth of inserts is not much slower than the first.
    assert!(
        insert_time[9] <= insert_time[0] * 4 + Duration::from_millis(500),
        "insert times {insert_time:?}"
    );
}

#[test]
fn scale_100k_entries_4k_blocks() {
    scale(4096, 100_000);
}

#[test]
fn scale_100k_entries_128k_blocks() {
    scale(128 * 1024, 100_000);
}

#[test]
fn external_pointer_table_grows_and_old_blocks_are_freed() {
    // The salt is random, so leaf counts vary: 80k entries need well over one 512-pointer table
    // block whatever the salt (40k sometimes fitted in one, making this test flaky).
    let mut blocks = MemBlocks::created(4096);
    for index in 0..80_000 {
        insert(&mut blocks, &key_of(index), b"0123456789").unwrap();
    }
    let header = read_header(&blocks).unwrap().header;
    assert!(!header.table_embedded);
    assert!(header.table_block_count >= 2, "{header:?}");
    // Live blocks: header + leaves + current table; earlier tables became holes.
    assert_eq!(
        blocks.map.len() as u64,
        1 + header.leaf_count + header.table_block_count
    );
}

/// A paged listing with modifications between pages returns every entry present throughout
/// exactly once and nothing twice.
fn check_listing_stability(
    blocks: &mut MemBlocks,
    stable: u64,
    volatile: u64,
    page: usize,
    seed: u64,
) {
    for index in 0..stable {
        insert(blocks, &key_of(index), b"stable").unwrap();
    }
    let volatile_key = |index: u64| format!("volatile-{index}").into_bytes();
    let mut volatile_present = BTreeSet::new();
    let mut state = seed | 1;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut seen = BTreeSet::new();
    let mut cookie = 0;
    let mut cookie_last = None;
    loop {
        let entries = list(blocks, cookie, page).unwrap();
        for entry in &entries {
            assert!(
                seen.insert(entry.key.clone()),
                "{:?} returned twice",
                entry.key
            );
            assert!(cookie_last.is_none_or(|last| entry.cookie > last));
            cookie_last = Some(entry.cookie);
        }
        let Some(last) = entries.last() else { break };
        cookie = last.cookie + 1;
        // Between pages: inserts, removes, and upserts that change a stable entry's size.
        for _ in 0..(random() % 20) {
            let index = random() % volatile;
            if volatile_present.remove(&index) {
                assert!(remove(blocks, &volatile_key(index)).unwrap());
            } else {
                let value = vec![7u8; (random() % 200) as usize];
                insert(blocks, &volatile_key(index), &value).unwrap();
                volatile_present.insert(index);
            }
        }
        let index = random() % stable;
        let value = vec![1u8; (random() % 300) as usize];
        assert!(!upsert(blocks, &key_of(index), &value).unwrap());
    }
    for index in 0..stable {
        assert!(seen.contains(&key_of(index)), "stable entry {index} missed");
    }
}

#[test]
fn listing_is_stable_under_inserts_and_removes() {
    let mut blocks = MemBlocks::created(4096);
    check_listing_stability(&mut blocks, 5000, 3000, 37, 0x1234_5678);
}

#[test]
fn listing_is_stable_under_collisions() {
    let _mask = HashMask::keep_top_bits(9);
    let mut blocks = MemBlocks::created(4096);
    check_listing_stability(&mut blocks, 800, 400, 5, 99);
}

#[derive(Clone, Debug)]
enum Operation {
    Insert(u16, Vec<u8>),
    Upsert(u16, Vec<u8>),
    Remove(u16),
    Lookup(u16),
}

fn model_key(index: u16) -> Vec<u8> {
    // Some keys are long, so that key sizes vary up to the limit.
    let repeat = if index.is_multiple_of(7) { 30 } else { 1 };
    format!("key-{index}-").repeat(repeat).into_bytes()
}

fn operation() -> impl Strategy<Value = Operation> {
    let value = prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 0..=VALUE_LEN_MAX),
    ];
    prop_oneof![
        4 => (0u16..600, value.clone()).prop_map(|(key, value)| Operation::Insert(key, value)),
        2 => (0u16..600, value).prop_map(|(key, value)| Operation::Upsert(key, value)),
        2 => (0u16..600).prop_map(Operation::Remove),
        1 => (0u16..600).prop_map(Operation::Lookup),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn model_based(operations in proptest::collection::vec(operation(), 1..1500)) {
        let mut blocks = MemBlocks::created(4096);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for operation in operations {
            match operation {
                Operation::Insert(key, value) => {
                    let key = model_key(key);
                    let result = insert(&mut blocks, &key, &value);
                    match model.entry(key) {
                        Entry::Occupied(_) => {
                            prop_assert!(matches!(result, Err(KvError::Exists)));
                        }
                        Entry::Vacant(slot) => {
                            result.unwrap();
                            slot.insert(value);
                        }
                    }
                }
                Operation::Upsert(key, value) => {
                    let key = model_key(key);
                    let new = upsert(&mut blocks, &key, &value).unwrap();
                    prop_assert_eq!(new, model.insert(key, value).is_none());
                }
                Operation::Remove(key) => {
                    let key = model_key(key);
                    prop_assert_eq!(remove(&mut blocks, &key).unwrap(), model.remove(&key).is_some());
                }
                Operation::Lookup(key) => {
                    let key = model_key(key);
                    prop_assert_eq!(lookup(&blocks, &key).unwrap(), model.get(&key).cloned());
                }
            }
            prop_assert_eq!(count(&blocks).unwrap(), model.len() as u64);
        }
        for (key, value) in &model {
            prop_assert_eq!(lookup(&blocks, key).unwrap(), Some(value.clone()));
        }
        let listed: BTreeMap<_, _> =
            list_all(&blocks, 17).into_iter().map(|entry| (entry.key, entry.value)).collect();
        prop_assert_eq!(listed, model);
    }

    #[test]
    fn listing_stability_random(seed in any::<u64>(), page in 1usize..50) {
        let mut blocks = MemBlocks::created(4096);
        check_listing_stability(&mut blocks, 400, 300, page, seed);
    }
}

proptest! {
    // Each case builds an object of 2000 entries before damaging it, hence fewer cases.
    #![proptest_config(crate::fuzz_config!(64))]

    /// Random contents in any block (header, table, leaf), or a truncated block: every
    /// operation returns a result (usually Corrupt), never panics.
    #[test]
    fn corrupted_blocks_never_panic(
        victim in any::<prop::sample::Index>(),
        mode in 0u8..3,
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        flips in proptest::collection::vec((0usize..4096, any::<u8>()), 1..10),
    ) {
        let mut blocks = MemBlocks::created(4096);
        for index in 0..2000 {
            insert(&mut blocks, &key_of(index), b"value").unwrap();
        }
        let ids: Vec<u64> = blocks.map.keys().copied().collect();
        let blkid = ids[victim.index(ids.len())];
        let block = blocks.map.get_mut(&blkid).unwrap();
        match mode {
            0 => {
                let mut replacement = bytes;
                replacement.resize(4096, 0);
                *block = replacement;
            }
            1 => block.truncate(bytes.len()),
            _ => {
                for (offset, byte) in flips {
                    block[offset] ^= byte;
                }
            }
        }
        if mode < 2 {
            // Replaced or truncated: a full listing reads every leaf and must report this
            // block as corrupt.
            let mut cookie = 0;
            let error = loop {
                match list(&blocks, cookie, 50) {
                    Ok(entries) => match entries.last() {
                        Some(last) => cookie = last.cookie + 1,
                        None => break None,
                    },
                    Err(error) => break Some(error),
                }
            };
            match error {
                Some(KvError::Corrupt { block, .. }) => prop_assert_eq!(block, blkid),
                other => prop_assert!(false, "expected Corrupt at {}, got {:?}", blkid, other),
            }
        }
        for index in (0..2400).step_by(7) {
            let _ = lookup(&blocks, &key_of(index));
            let _ = insert(&mut blocks, &key_of(index + 5000), b"new");
            let _ = remove(&mut blocks, &key_of(index));
            let _ = upsert(&mut blocks, &key_of(index + 1), &[9u8; 300]);
        }
        let mut cookie = 0;
        for _ in 0..1000 {
            match list(&blocks, cookie, 50) {
                Ok(entries) => match entries.last() {
                    Some(last) => cookie = last.cookie + 1,
                    None => break,
                },
                Err(_) => break,
            }
        }
        let _ = count(&blocks);
    }
}

#[test]
fn truncated_leaf_count_is_reported_as_corrupt_naming_the_block() {
    let mut blocks = MemBlocks::created(4096);
    insert(&mut blocks, b"key", b"value").unwrap();
    // Block 1 is the first leaf; claim far more entries than fit.
    let leaf = blocks.map.get_mut(&1).unwrap();
    leaf[16..20].copy_from_slice(&10_000u32.to_le_bytes());
    match lookup(&blocks, b"key") {
        Err(KvError::Corrupt { block, .. }) => assert_eq!(block, 1),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // A hole where the header should be.
    blocks.map.remove(&0);
    assert!(matches!(
        count(&blocks),
        Err(KvError::Corrupt { block: 0, .. })
    ));
}

#[test]
fn block_size_mismatch_is_corrupt() {
    let mut blocks = MemBlocks::created(4096);
    insert(&mut blocks, b"key", b"value").unwrap();
    blocks.block_size = 8192;
    assert!(matches!(
        lookup(&blocks, b"key"),
        Err(KvError::Corrupt { block: 0, .. })
    ));
}
