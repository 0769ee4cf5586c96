//! The resumable post-order walk under background destroy, on a real pool on sparse files.
//!
//! Guards the property background destroy depends on: a walk paused at any budget and resumed
//! from its bookmark visits every block of the object set exactly once, children before
//! parents, and never reads a block it already visited (such a block may have been freed and
//! reallocated by then). The test makes the last point observable by overwriting every visited
//! block on disk and dropping it from the cache after each step: a resumed walk that read one
//! would fail its checksum.

use crate::common;

use std::collections::{HashMap, HashSet};

use common::*;
use tarn::block::blkptr::{BlockPtr, Compression, ObjectType, BLKPTR_SIZE};
use tarn::cache::BlockKey;
use tarn::object::traverse::{walk_post_order, Bookmark, WalkEnd};
use tarn::pool::Pool;
use tarn::types::Txg;

fn identity(bp: &BlockPtr) -> (u32, u64) {
    (bp.dvas[0].vdev.0, bp.dvas[0].offset)
}

/// Several files deep enough for two levels of indirection under the tiny configuration.
fn populate(pool: &Pool, files: u64, blocks_each: u64) -> Vec<tarn::types::ObjectId> {
    let objset = pool.root_objset();
    let mut objects = Vec::new();
    for file in 0..files {
        let object = create_file(pool, &objset, 4096, Compression::Off);
        let hold = pool.assign().unwrap();
        for block in 0..blocks_each {
            objset
                .write(
                    &hold.tx(),
                    object,
                    block * 4096,
                    &pattern(file * 1000 + block, 4096),
                )
                .unwrap();
        }
        drop(hold);
        objects.push(object);
    }
    pool.sync().unwrap();
    objects
}

fn all_blocks(pool: &Pool, min_birth: Txg) -> HashSet<(u32, u64)> {
    let mut blocks = HashSet::new();
    pool.root_objset()
        .visit_synced_blocks(&mut |bp| {
            if bp.birth_logical > min_birth {
                blocks.insert(identity(bp));
            }
            Ok(())
        })
        .unwrap();
    blocks
}

/// Walk in steps of `budget`, destroying each step's blocks on disk before the next step.
fn walk_in_steps(pool: &Pool, min_birth: Txg, budget: u64) -> Vec<BlockPtr> {
    let io = pool.core.io.clone();
    let root = pool.root_objset().synced_root();
    let mut visited: Vec<BlockPtr> = Vec::new();
    let mut from = Bookmark::default();
    for _ in 0..100_000 {
        let mut left = budget;
        let mut step = Vec::new();
        let end = walk_post_order(&io, &root, min_birth, from, &mut left, &mut |bp| {
            step.push(bp.clone());
            Ok(())
        })
        .expect("walk reads only blocks it has not visited");
        for bp in &step {
            let dva = bp.dvas[0];
            let top = io.vdevs.top(dva.vdev).unwrap();
            for child in 0..top.child_count() {
                top.write_child(child, dva.offset, &vec![0xa5; dva.size_allocated as usize])
                    .unwrap();
            }
            if let Some(key) = BlockKey::of(bp) {
                io.cache().remove(&key);
            }
        }
        visited.extend(step);
        match end {
            WalkEnd::Done => return visited,
            WalkEnd::Paused(bookmark) => {
                assert!(bookmark >= from, "bookmarks only move forward");
                from = bookmark;
            }
        }
    }
    panic!("walk did not finish");
}

/// Every indirect block comes after all of its children; the header block comes last.
fn assert_post_order(pool: &Pool, visited: &[BlockPtr]) {
    let position: HashMap<(u32, u64), usize> = visited
        .iter()
        .enumerate()
        .map(|(index, bp)| (identity(bp), index))
        .collect();
    let io = &pool.core.io;
    let mut indirects = 0;
    for (index, bp) in visited.iter().enumerate() {
        if bp.level == 0 {
            continue;
        }
        indirects += 1;
        let data = io.read(bp).unwrap();
        for chunk in data.chunks_exact(BLKPTR_SIZE) {
            let child = BlockPtr::decode(chunk).unwrap();
            if child.is_hole() {
                continue;
            }
            let child_at = position[&identity(&child)];
            assert!(child_at < index, "child visited after its parent");
        }
    }
    assert!(indirects > 0, "the test tree has indirect blocks");
    assert_eq!(visited.last().unwrap().object_type, ObjectType::Objset);
}

#[test]
fn paused_walks_visit_every_block_once_children_first() {
    for budget in [1, 7, 1_000_000] {
        let dir = tempfile::tempdir().unwrap();
        let pool = create_pool(dir.path(), "walk", single(dir.path(), "v0"), tiny());
        populate(&pool, 6, 40);
        let expected = all_blocks(&pool, Txg(0));
        // Post-order is checked on an intact pool first (the stepped walk destroys blocks).
        let mut whole = u64::MAX;
        let mut in_order = Vec::new();
        let root = pool.root_objset().synced_root();
        let end = walk_post_order(
            &pool.core.io,
            &root,
            Txg(0),
            Bookmark::default(),
            &mut whole,
            &mut |bp| {
                in_order.push(bp.clone());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(end, WalkEnd::Done);
        assert_post_order(&pool, &in_order);

        let visited = walk_in_steps(&pool, Txg(0), budget);
        let unique: HashSet<(u32, u64)> = visited.iter().map(identity).collect();
        assert_eq!(
            unique.len(),
            visited.len(),
            "a block visited twice (budget {budget})"
        );
        assert_eq!(unique, expected, "budget {budget}");
        pool.abandon();
    }
}

#[test]
fn blocks_born_before_the_minimum_are_skipped_with_their_subtrees() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "walk", single(dir.path(), "v0"), tiny());
    let objects = populate(&pool, 4, 30);
    let before = pool.last_synced_txg();
    let objset = pool.root_objset();
    let hold = pool.assign().unwrap();
    objset
        .write(&hold.tx(), objects[1], 7 * 4096, &pattern(77, 4096))
        .unwrap();
    drop(hold);
    pool.sync().unwrap();
    let expected = all_blocks(&pool, before);
    assert!(!expected.is_empty() && expected.len() < all_blocks(&pool, Txg(0)).len());
    let visited = walk_in_steps(&pool, before, 2);
    let unique: HashSet<(u32, u64)> = visited.iter().map(identity).collect();
    assert_eq!(unique, expected);
    assert!(visited.iter().all(|bp| bp.birth_logical > before));
    pool.abandon();
}

#[test]
fn bookmarks_round_trip() {
    let bookmark = Bookmark {
        object: 0x1234_5678,
        blkid: 99,
    };
    assert_eq!(Bookmark::decode(&bookmark.encode()).unwrap(), bookmark);
    assert!(Bookmark::decode(&[0u8; 3]).is_err());
}
