//! A pool on a real block device (a loop device over a sparse file): created, written, exported,
//! found again by scanning a directory that holds a link to the device, and checked. Skipped,
//! saying so, where loop devices cannot be set up (not root, no losetup).

use crate::common;

use std::process::Command;

use tarn::block::blkptr::Compression;
use tarn::pool::{CreateOptions, Pool, VdevSpec};

use common::*;

struct LoopDevice(String);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn pool_on_a_loop_device() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    let output = match Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&backing)
        .output()
    {
        Ok(output) if output.status.success() => output,
        _ => {
            tarn_test_support::skip(
                tarn_test_support::Requirement::LoopDevice,
                "cannot set up a loop device here",
            );
            return;
        }
    };
    let device = LoopDevice(String::from_utf8(output.stdout).unwrap().trim().to_string());
    let devices = dir.path().join("dev");
    std::fs::create_dir(&devices).unwrap();
    std::os::unix::fs::symlink(&device.0, devices.join("disk0")).unwrap();

    let pool = Pool::create(CreateOptions {
        name: "loop".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(device.0.clone().into())],
        create_size: None,
        force: true,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .expect("create a pool on a block device");
    let objset = pool.root_objset();
    let object = create_file(&pool, &objset, 4096, Compression::Lz4);
    {
        let hold = pool.assign().unwrap();
        objset
            .write(&hold.tx(), object, 0, &pattern(5, 300_000))
            .unwrap();
    }
    drop(objset);
    pool.export().unwrap();

    let pool = import(&devices, "loop", tiny());
    let mut data = vec![0u8; 300_000];
    pool.root_objset().read(object, 0, &mut data).unwrap();
    assert_eq!(data, pattern(5, 300_000));
    assert_clean(&pool);
    pool.destroy().unwrap();
}
