//! Pool format versions. Version 2 made compressed payloads self-delimiting, so that their
//! blocks can be padded to whole allocation units and a sync converges: a pool
//! written by version 1 stores bare compressed streams that this build would misread, so
//! import must refuse it with a message that says why, not fail on a decompression error deep
//! in the MOS.

use crate::common;

use tarn::pool::{ImportOptions, Pool, PoolError, POOL_VERSION, POOL_VERSION_MIN};
use tarn::vdev::label::{self, LabelSet};
use tarn::vdev::{BlockDevice, FileDevice};

use common::*;

#[test]
fn a_pool_of_an_older_format_version_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "old", single(dir.path(), "a.img"), tiny());
    let path = pool.vdev_paths()[0].clone();
    pool.export().unwrap();

    // Rewrite every label as a version-1 pool would have written it.
    let device = FileDevice::open(&path).unwrap();
    let (_, mut config) = label::read_newest_label(&device).unwrap().unwrap();
    assert_eq!(config.version, POOL_VERSION);
    config.version = POOL_VERSION_MIN - 1;
    label::write_labels(&device, &config, LabelSet::Even).unwrap();
    label::write_labels(&device, &config, LabelSet::Odd).unwrap();
    device.flush().unwrap();
    device.release();
    drop(device);

    let result = Pool::import("old", ImportOptions::new(dirs(dir.path()), tiny()));
    let error = match result {
        Ok(_) => panic!("a version-1 pool was imported"),
        Err(error) => error,
    };
    assert!(
        matches!(error, PoolError::FormatTooOld { version: 1, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("format version 1") && message.contains("recreate"),
        "{message}"
    );

    // The same pool at the current version imports (the refusal was the version alone).
    let device = FileDevice::open(&path).unwrap();
    config.version = POOL_VERSION;
    label::write_labels(&device, &config, LabelSet::Even).unwrap();
    label::write_labels(&device, &config, LabelSet::Odd).unwrap();
    device.flush().unwrap();
    device.release();
    drop(device);
    let pool = import(dir.path(), "old", tiny());
    assert_clean(&pool);
    pool.export().unwrap();
}
