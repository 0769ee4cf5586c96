//! Memory per free segment of a metaslab's free tree: at most 24 bytes,
//! offset tree and size index together, measured with a counting allocator. Guards the old
//! representation (a `BTreeMap` plus a `BTreeSet` twin, about 50 bytes per segment), which let
//! a fragmented pool's loaded metaslabs take twice the memory OpenZFS needs.
//!
//! The allocator counts per thread, so tests running in parallel do not disturb each other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::space::range_tree::{RangeTree, SIZE_INDEX_MIN_SHIFT};

struct Counting;

thread_local! {
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

fn add_live(bytes: isize) {
    // `try_with`: thread-local storage may be gone while a thread exits.
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + bytes));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add_live(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        add_live(-(layout.size() as isize));
        unsafe { System.dealloc(pointer, layout) }
    }
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add_live(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE_BYTES.with(Cell::get)
}

/// A 16 GiB metaslab at ashift 9 (2^25 sectors: narrow segments), as a loaded metaslab's free
/// tree is built.
const START: u64 = 7 << 34;
const SIZE: u64 = 1 << 34;

fn metaslab_tree() -> Box<RangeTree> {
    Box::new(RangeTree::for_region(START, SIZE, 9).with_size_index(1 << SIZE_INDEX_MIN_SHIFT))
}

/// Bytes per segment of the tree `build` returns, counted from before it was created.
fn bytes_per_segment(build: impl FnOnce() -> Box<RangeTree>) -> (f64, usize) {
    let before = live();
    let tree = build();
    let bytes = live() - before;
    tree.verify();
    let segments = tree.segment_count();
    assert!(segments > 50_000, "only {segments} segments");
    let estimate = tree.memory_bytes();
    // The tree's own figure (used for the memory cap) is within 10% of the real one.
    assert!(
        (estimate as f64 - bytes as f64).abs() <= bytes as f64 * 0.1 + 1024.0,
        "memory_bytes {estimate} vs counted {bytes}"
    );
    (bytes as f64 / segments as f64, segments)
}

#[test]
fn ascending_load_of_small_segments() {
    // A space map replayed after a condense: FREE runs in offset order, every one 8 KiB (below
    // the size index's floor, so the index is complete and holds them all).
    let (per_segment, segments) = bytes_per_segment(|| {
        let mut tree = metaslab_tree();
        for index in 0..200_000u64 {
            tree.add(START + index * (16 << 10), 8 << 10);
        }
        tree
    });
    println!("ascending 8K segments: {per_segment:.2} bytes per segment ({segments})");
    assert!(per_segment <= 24.0, "{per_segment} bytes per segment");
}

#[test]
fn random_churn_of_a_metaslab() {
    // Start all free, then allocate and free random blocks of 4 KiB to 128 KiB in random places,
    // as a fragmenting workload does: segments of every size, both trees populated, leaves
    // split and merged in random order. (With frees at 30% of steps the count levels off near
    // 128,000 segments.)
    let (per_segment, segments) = bytes_per_segment(|| {
        let mut rng = StdRng::seed_from_u64(14);
        let mut tree = metaslab_tree();
        tree.add(START, SIZE);
        let mut allocated: Vec<(u64, u64)> = Vec::new();
        while tree.segment_count() < 100_000 {
            let size = rng.gen_range(8u64..=256) << 9;
            let offset = START + (rng.gen_range(0..(SIZE - size) >> 9) << 9);
            if tree.contains(offset, size) {
                tree.remove(offset, size);
                allocated.push((offset, size));
            }
            if allocated.len() > 1000 && rng.gen_bool(0.25) {
                let (offset, size) = allocated.swap_remove(rng.gen_range(0..allocated.len()));
                tree.add(offset, size);
            }
        }
        drop(allocated);
        tree
    });
    println!("random churn: {per_segment:.2} bytes per segment ({segments})");
    assert!(per_segment <= 24.0, "{per_segment} bytes per segment");
}

#[test]
fn random_order_inserts_of_large_segments() {
    // The worst case for fill: every segment in the size index (64 KiB each) and both trees
    // filled in random order.
    let (per_segment, segments) = bytes_per_segment(|| {
        let mut rng = StdRng::seed_from_u64(7);
        let mut slots: Vec<u64> = (0..100_000u64).collect();
        for index in (1..slots.len()).rev() {
            slots.swap(index, rng.gen_range(0..=index));
        }
        let mut tree = metaslab_tree();
        for slot in slots {
            tree.add(START + slot * (128 << 10), 64 << 10);
        }
        tree
    });
    println!("random-order 64K segments: {per_segment:.2} bytes per segment ({segments})");
    assert!(per_segment <= 24.0, "{per_segment} bytes per segment");
}
