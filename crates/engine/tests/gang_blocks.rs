//! Gang blocks: blocks written in pieces behind a gang header when no free
//! segment holds them whole. Ganging is forced with `metaslab_force_ganging`; the tests check
//! that ganged data reads back (cached and cold), survives export and import, that overwriting
//! and deleting it gives every piece and header back, that `check` claims and verifies every
//! piece, and that a damaged header or piece copy is repaired from another copy. Crafted gang
//! trees (a cycle through alternating header copies) are a clean error for every walk.

use crate::common;

use std::os::unix::fs::FileExt;

use tarn::block::blkptr::{BlockPtr, Compression, Dva, DVAS_MAX};
use tarn::block::gang::{GangHeader, GANG_HEADER_SIZE};
use tarn::pool::Pool;
use tarn::vdev::label::VDEV_LABEL_START_SIZE;

use common::gang::*;
use common::*;

fn gang_pointers(pool: &Pool) -> Vec<BlockPtr> {
    gangs_in(&pool.root_objset())
}

fn allocated(pool: &Pool) -> u64 {
    pool.core.io.space.totals().allocated
}

#[test]
fn forced_gangs_read_back_survive_import_and_free_every_piece() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        "gang",
        single(dir.path(), "a.img"),
        forcing(100),
    );
    let objset = pool.root_objset();
    pool.sync().unwrap();
    let baseline = allocated(&pool);
    let plain = create_file(&pool, &objset, RECORD, Compression::Off);
    let packed = create_file(&pool, &objset, RECORD, Compression::Lz4);
    let length = 2 << 20;
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), plain, 0, &pattern(1, length))
            .unwrap();
        objset
            .write(&hold.tx(), packed, 0, &pattern(3, length))
            .unwrap();
    }
    pool.sync().unwrap();
    let gangs = gang_pointers(&pool);
    assert!(gangs.len() >= 16, "only {} gang blocks", gangs.len());
    assert!(pool.core.io.gang_blocks() >= 16);
    let counted: u64 = pool
        .txg_history()
        .iter()
        .map(|row| row.space.gang_blocks)
        .sum();
    assert!(
        counted >= 16,
        "tarn stat txgs counted {counted} gang blocks"
    );
    for bp in &gangs {
        let extents = pool.core.io.allocated_extents(bp).unwrap();
        assert!(
            extents.len() >= 3,
            "a gang of {} extents: {bp}",
            extents.len()
        );
        let total: u64 = extents.iter().map(|(_, _, size)| size).sum();
        assert_eq!(total, bp.size_allocated(), "accounted size of {bp}");
    }
    let mut back = vec![0u8; length];
    objset.read(plain, 0, &mut back).unwrap();
    assert_eq!(back, pattern(1, length));
    assert_clean(&pool);
    pool.export().unwrap();

    // Cold: every read goes through the headers on disk.
    let pool = import(dir.path(), "gang", forcing(100));
    let objset = pool.root_objset();
    for (object, seed) in [(plain, 1), (packed, 3)] {
        objset.read(object, 0, &mut back).unwrap();
        assert_eq!(back, pattern(seed, length), "object {object} after import");
    }
    assert_clean(&pool);

    // Overwrite half (the old gangs are freed), then delete everything.
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), plain, 0, &pattern(5, length / 2))
            .unwrap();
    }
    pool.sync().unwrap();
    objset.read(plain, 0, &mut back).unwrap();
    assert_eq!(&back[..length / 2], &pattern(5, length / 2)[..]);
    assert_eq!(&back[length / 2..], &pattern(1, length)[length / 2..]);
    assert_clean(&pool);
    {
        let hold = pool.assign().unwrap();
        objset.remove_object(&hold.tx(), plain).unwrap();
        objset.remove_object(&hold.tx(), packed).unwrap();
    }
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    assert!(gang_pointers(&pool).is_empty());
    // Metadata grew a little (dnode blocks, space maps); the 4 MiB of ganged data is gone,
    // and check proves that nothing leaked.
    assert!(
        allocated(&pool) < baseline + (256 << 10),
        "{} bytes held after every ganged block was freed, {baseline} before",
        allocated(&pool)
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn some_blocks_gang_and_others_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        "mixed",
        single(dir.path(), "a.img"),
        forcing(30),
    );
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, RECORD, Compression::Off);
    let length = 4 << 20;
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, 0, &pattern(7, length))
            .unwrap();
    }
    pool.sync().unwrap();
    let gangs = gang_pointers(&pool).len();
    let blocks = length / RECORD as usize;
    assert!(
        gangs > 0 && gangs < blocks,
        "{gangs} of {blocks} blocks ganged at 30%"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A damaged copy of a gang header and a damaged copy of one piece are both found by `check`
/// and repaired; the data reads back whole.
#[test]
fn damaged_header_and_piece_copies_are_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(
        dir.path(),
        "heal",
        single(dir.path(), "a.img"),
        forcing(100),
    );
    let objset = pool.root_objset();
    let mut props = file_props(RECORD, Compression::Off);
    props.copies = 2;
    let object = {
        let hold = pool.assign().unwrap();
        objset
            .create_object(
                &hold.tx(),
                props,
                tarn::block::blkptr::ObjectType::None,
                &[],
            )
            .unwrap()
    };
    let length = 512 << 10;
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, 0, &pattern(11, length))
            .unwrap();
    }
    pool.sync().unwrap();
    let gang = gang_pointers(&pool)
        .into_iter()
        .find(|bp| bp.copies().count() == 2 && bp.level == 0)
        .expect("a two-copy gang");
    let header = pool.core.io.allocated_extents(&gang).unwrap()[0];
    // Piece extents follow the two header copies: take the first piece's first copy.
    let piece = pool.core.io.allocated_extents(&gang).unwrap()[2];
    pool.export().unwrap();

    let image = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("a.img"))
        .unwrap();
    for (_, offset, _) in [header, piece] {
        image
            .write_all_at(&[0x5a; 512], VDEV_LABEL_START_SIZE + offset)
            .unwrap();
    }
    drop(image);

    let pool = import(dir.path(), "heal", forcing(100));
    let report = tarn::check::check_pool(&pool, true).unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(
        report.copies_bad >= 2,
        "bad copies found: {}",
        report.copies_bad
    );
    assert_eq!(report.copies_repaired, report.copies_bad);
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert_eq!(report.copies_bad, 0, "after repair: {report:#?}");
    let mut back = vec![0u8; length];
    pool.root_objset().read(object, 0, &mut back).unwrap();
    assert_eq!(back, pattern(11, length));
    pool.export().unwrap();
}

/// Ganging as it happens on its own: a pool filled with 4 KiB blocks of which every other one
/// is then freed has plenty of free space, all in 4 KiB pieces, and 128 KiB blocks written
/// after that can only be placed as gangs. (`spa_min_slop` is lowered so that the fill reaches
/// nearly the whole pool; with the default slop a small pool keeps half of itself free.)
#[test]
fn free_space_in_small_pieces_turns_large_blocks_into_gangs() {
    let dir = tempfile::tempdir().unwrap();
    let mut tunables = tiny();
    tunables.spa_min_slop = 1 << 20;
    let pool = create_pool(
        dir.path(),
        "pieces",
        single(dir.path(), "a.img"),
        tunables.clone(),
    );
    let objset = pool.root_objset();
    let small = 4096;
    let mut objects = Vec::new();
    'fill: loop {
        let hold = pool.assign().unwrap();
        for _ in 0..512 {
            let object = objset
                .create_object(
                    &hold.tx(),
                    file_props(small as u32, Compression::Off),
                    tarn::block::blkptr::ObjectType::None,
                    &[],
                )
                .unwrap();
            match objset.write(&hold.tx(), object, 0, &pattern(objects.len() as u64, small)) {
                Ok(()) => objects.push(object),
                Err(tarn::object::ObjectError::NoSpace) => break 'fill,
                Err(error) => panic!("fill: {error}"),
            }
        }
        drop(hold);
        pool.sync().unwrap();
    }
    pool.sync().unwrap();
    assert!(objects.len() > 10_000, "only {} blocks fit", objects.len());
    {
        let hold = pool.assign().unwrap();
        for object in objects.iter().step_by(2) {
            objset.remove_object(&hold.tx(), *object).unwrap();
        }
    }
    for _ in 0..4 {
        pool.sync().unwrap();
    }
    let gangs_before = pool.core.io.gang_blocks();
    let big = create_file(&pool, &objset, 128 << 10, Compression::Off);
    let length = 8usize << 20;
    for (index, chunk) in pattern(99, length).chunks(1 << 20).enumerate() {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), big, (index << 20) as u64, chunk)
            .unwrap();
        drop(hold);
        pool.sync().unwrap();
    }
    let ganged = pool.core.io.gang_blocks() - gangs_before;
    println!(
        "{} 4 KiB blocks, every other freed; {ganged} of 64 large blocks ganged",
        objects.len()
    );
    assert!(ganged >= 16, "only {ganged} of 64 large blocks were ganged");
    let mut back = vec![0u8; length];
    objset.read(big, 0, &mut back).unwrap();
    assert_eq!(back, pattern(99, length));
    assert_clean(&pool);
    drop(objset);
    pool.export().unwrap();
    let pool = import(dir.path(), "pieces", tunables);
    pool.root_objset().read(big, 0, &mut back).unwrap();
    assert_eq!(back, pattern(99, length));
    assert_clean(&pool);
    pool.export().unwrap();
}

/// Guards against unbounded recursion over gang trees read from disk: reads, `check`, scrub and
/// frees walked a gang's pieces with no depth bound, so a crafted tree whose walk never ends
/// overflowed the stack and killed the process. The tree here is a cycle that the accounting
/// check alone does not catch: header H (the block's first header copy) has one piece, a gang
/// whose first copy is header K; K's one piece is a gang whose first copy is garbage and whose
/// second copy is H again, read through H's second copy index, whose accounting is consistent.
/// Decoding now refuses a gang piece in a header at the deepest level (`GANG_DEPTH_MAX`), so
/// the read fails with a corruption error (EIO through FUSE), `check` reports the block, and
/// listing its extents for a free fails instead of recursing, so a destroy of it ends.
#[test]
fn a_cyclic_gang_tree_is_a_clean_error_not_a_stack_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, ino, gang) = pool_with_a_gang_file(dir.path(), "cycle");
    let extents = pool.core.io.allocated_extents(&gang).unwrap();
    // Two header copies, then the copies of each piece in order.
    assert!(extents.len() >= 6, "{extents:?}");
    let (vdev, h_offset, _) = extents[0];
    let (_, k_offset, k_size) = extents[2];
    let (_, spare_offset, _) = extents[3];
    let (_, garbage_offset, _) = extents[4];
    assert!(k_size >= GANG_HEADER_SIZE as u64);
    let top = gang.dvas[0].size_allocated;
    let header = GANG_HEADER_SIZE as u64;
    let gang_dva = |offset: u64, size_allocated: u64| Dva {
        vdev,
        offset,
        size_allocated,
        gang: true,
    };
    // Every header's allocation plus its piece's equals the DVA that leads to it, for the
    // copy index it is read through: H via index 0 (the block), K via index 0, H via index 1.
    let mut to_k = gang.clone();
    to_k.dvas = [Dva::default(); DVAS_MAX];
    to_k.dvas[0] = gang_dva(k_offset, top - header);
    to_k.dvas[1] = gang_dva(spare_offset, header);
    let mut back_to_h = gang.clone();
    back_to_h.dvas = [Dva::default(); DVAS_MAX];
    back_to_h.dvas[0] = gang_dva(garbage_offset, top - 2 * header);
    back_to_h.dvas[1] = gang_dva(h_offset, 2 * header);
    let h = GangHeader {
        header_allocated: header,
        birth: gang.birth_physical,
        children: vec![to_k],
    };
    let k = GangHeader {
        header_allocated: header,
        birth: gang.birth_physical,
        children: vec![back_to_h],
    };
    pool.export().unwrap();
    let image = dir.path().join("a.img");
    overwrite(&image, h_offset, &h.encode(vdev, h_offset));
    overwrite(&image, k_offset, &k.encode(vdev, k_offset));

    let pool = import(dir.path(), "cycle", forcing(100));
    {
        let fs = pool.open_file_system("cycle/fs").unwrap();
        let error = fs.read(ino, 0, RECORD as usize).unwrap_err();
        assert!(
            matches!(
                error,
                tarn::fs::FsError::Engine(_) | tarn::fs::FsError::Corrupt(_)
            ),
            "a damaged block is EIO through FUSE: {error:?}"
        );
        assert!(
            error.to_string().contains("deepest level"),
            "the read names the bound: {error}"
        );
    }
    // The walk every free uses fails the same way instead of recursing.
    let error = pool.core.io.allocated_extents(&gang).unwrap_err();
    assert!(error.to_string().contains("deepest level"), "{error}");
    // Check (and scrub, which verifies every copy the same way) reports the block.
    let report = tarn::check::check_pool(&pool, false).unwrap();
    assert!(!report.is_clean(), "{report:#?}");
    assert!(
        report
            .errors
            .iter()
            .any(|error| error.contains("deepest level")),
        "{report:#?}"
    );
    // Destroying the file system frees the block through the same walk, which now ends (what
    // becomes of a block whose pieces cannot be listed is the free paths' business).
    let started = std::time::Instant::now();
    let _ = pool.destroy_dataset("cycle/fs", false);
    while pool.core.background_work_pending() && pool.sync().is_ok() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the destroy of a cyclic gang tree never ended"
        );
    }
}
