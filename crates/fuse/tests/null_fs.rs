//! The null FUSE file system (the baseline of `tarn bench mount` and of per-file work) through
//! a real mount: files are created, found by name (through its name index), listed and
//! removed, and a removed name can be used again. Skipped (with a message) when /dev/fuse is
//! missing.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};

use tarn_fuse::MountOptions;

const FILES: usize = 4000;

#[test]
fn files_are_created_found_listed_and_removed_by_name() {
    if !tarn_test_support::requires(&[tarn_test_support::Requirement::Fuse]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    tarn_fuse::mountpoint::prepare(&mnt).unwrap();
    let mut handle = tarn_fuse::null::mount(&mnt, &MountOptions::new("tarn-null-test")).unwrap();
    let name = |index: usize| mnt.join(format!("file{index:05}"));

    for index in 0..FILES {
        let mut file = fs::File::create(name(index)).unwrap();
        file.write_all(&[1u8; 100][..index % 100]).unwrap();
    }
    for index in [0, 1, FILES / 2, FILES - 1] {
        assert_eq!(
            fs::metadata(name(index)).unwrap().len(),
            (index % 100) as u64
        );
    }
    let exclusive = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(name(7));
    assert_eq!(exclusive.unwrap_err().kind(), ErrorKind::AlreadyExists);
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), FILES);

    for index in (0..FILES).step_by(2) {
        fs::remove_file(name(index)).unwrap();
    }
    assert_eq!(
        fs::metadata(name(10)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(fs::metadata(name(11)).unwrap().len(), 11);
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), FILES / 2);
    // A removed name can be created again.
    fs::File::create(name(10)).unwrap();
    assert_eq!(fs::metadata(name(10)).unwrap().len(), 0);
    handle.unmount(false).unwrap();
}
