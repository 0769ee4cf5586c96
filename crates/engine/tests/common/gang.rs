//! Gang blocks on demand, for the tests of gang blocks and of their damage: tunables that
//! force ganging, the gangs of an object set, a file whose one record is a two-copy gang, and
//! a raw write into an exported pool's vdev image.

use std::os::unix::fs::FileExt;

use tarn::block::blkptr::BlockPtr;
use tarn::object::ObjectSet;
use tarn::pool::Pool;
use tarn::tunables::Tunables;
use tarn::vdev::label::VDEV_LABEL_START_SIZE;

use super::{create_pool, pattern, single, tiny};

/// The record size of the ganged files.
pub const RECORD: u32 = 128 << 10;

pub fn forcing(pct: u64) -> Tunables {
    let mut tunables = tiny();
    tunables.metaslab_force_ganging = 8 << 10;
    tunables.metaslab_force_ganging_pct = pct;
    tunables
}

pub fn gangs_in(objset: &ObjectSet) -> Vec<BlockPtr> {
    let mut found = Vec::new();
    objset
        .visit_synced_blocks(&mut |bp| {
            if bp.is_gang() {
                found.push(bp.clone());
            }
            Ok(())
        })
        .unwrap();
    found
}

/// Write `bytes` at `offset` of the vdev's data area in the image `path` (the pool exported).
pub fn overwrite(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let image = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    image
        .write_all_at(bytes, VDEV_LABEL_START_SIZE + offset)
        .unwrap();
    image.sync_all().unwrap();
}

/// A pool with file system `NAME/fs` (two copies, 128 KiB records, ganging forced) holding one
/// file of one record, written as a two-copy gang; returns the pool, the file and the gang.
pub fn pool_with_a_gang_file(dir: &std::path::Path, name: &str) -> (Pool, u64, BlockPtr) {
    let pool = create_pool(dir, name, single(dir, "a.img"), forcing(100));
    pool.create_dataset(
        &format!("{name}/fs"),
        &[
            ("compression".into(), "off".into()),
            ("copies".into(), "2".into()),
            ("recordsize".into(), "128K".into()),
        ],
        false,
    )
    .unwrap();
    let ino = {
        let fs = pool.open_file_system(&format!("{name}/fs")).unwrap();
        let attr = fs.create(fs.root(), b"ganged", 0o644, 0, 0).unwrap();
        fs.write(attr.ino, 0, &pattern(13, RECORD as usize))
            .unwrap();
        attr.ino
    };
    pool.sync().unwrap();
    let objset = pool.dataset_objset(&format!("{name}/fs")).unwrap();
    let gang = gangs_in(&objset)
        .into_iter()
        .find(|bp| bp.level == 0 && bp.size_physical == RECORD && bp.copies().count() == 2)
        .expect("the file's record is a two-copy gang");
    (pool, ino, gang)
}
