//! Fragmentation as `pool list` (FRAG) and `pool get fragmentation` report it. Guards
//! the old figure, which read 12-23% on a freshly created pool because an
//! untouched or nearly untouched metaslab smaller than the table's largest bucket (512 MiB)
//! scored its one big free segment as fragmented.

use crate::common;

use common::*;
use tarn::pool::props::PoolValue;
use tarn::pool::Pool;
use tarn::tunables::Tunables;

fn fragmentation(pool: &Pool) -> Option<u64> {
    match pool
        .pool_properties_named(&["fragmentation".to_string()])
        .unwrap()[0]
        .value
        .clone()
    {
        PoolValue::Percent(percent) => percent,
        other => panic!("fragmentation is {other:?}"),
    }
}

fn fresh_pool_reads_zero(tunables: Tunables) {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "fresh", single(dir.path(), "a.img"), tunables);
    pool.create_dataset("fresh/d", &[], false).unwrap();
    pool.sync().unwrap();
    let space = pool.space().unwrap();
    let rows = pool.core.io.space.stats();
    let per_metaslab: Vec<(u64, u64, Option<u64>)> = rows[0]
        .metaslabs
        .iter()
        .map(|ms| (ms.id, ms.free_bytes, ms.fragmentation_percent))
        .collect();
    assert_eq!(
        fragmentation(&pool),
        Some(0),
        "fresh pool: {space:?}, metaslabs {per_metaslab:?}"
    );
    assert_eq!(space.fragmentation, Some(0));
    assert_clean(&pool);
    pool.export().unwrap();
}

#[test]
fn fresh_pool_with_16_mib_metaslabs_reads_zero() {
    fresh_pool_reads_zero(Tunables::default());
}

#[test]
fn fresh_pool_with_1_mib_metaslabs_reads_zero() {
    fresh_pool_reads_zero(tiny());
}
