//! Regression: concurrent partial writes into the same block must not lose each other's bytes.
//! Each write is a read-modify-write of the whole block; without the per-object writer lock two
//! threads could read the same old block and the later dirty record would drop the earlier
//! thread's bytes.

use crate::common;

use std::sync::Arc;

use tarn::block::blkptr::Compression;

use common::*;

#[test]
fn partial_writes_from_many_threads_into_one_block_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let pool = Arc::new(create_pool(
        dir.path(),
        "threads",
        single(dir.path(), "a.img"),
        tiny(),
    ));
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Lz4);
    let threads: Vec<_> = (0..8u8)
        .map(|thread| {
            let pool = pool.clone();
            let objset = objset.clone();
            std::thread::spawn(move || {
                for round in 0..200u64 {
                    // Thread t owns bytes [t*512, t*512+512) of blocks 0..4.
                    let offset = (round % 4) * 4096 + thread as u64 * 512;
                    let hold = pool.assign().unwrap();
                    objset
                        .write(&hold.tx(), object, offset, &[thread + 1; 512])
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut data = vec![0u8; 4 * 4096];
    objset.read(object, 0, &mut data).unwrap();
    for block in 0..4 {
        for thread in 0..8u8 {
            let start = block * 4096 + thread as usize * 512;
            assert!(
                data[start..start + 512].iter().all(|&b| b == thread + 1),
                "block {block}: bytes of thread {thread} lost"
            );
        }
    }
    pool.sync().unwrap();
    assert_clean(&pool);
}
