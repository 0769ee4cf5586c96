//! Scanning directories for leaves with tarn labels, for `pool import`.
//!
//! Only regular files and block devices directly inside the named directories are looked at
//! (symbolic links are followed, as in `/dev/disk/by-id`; directories are not descended into).
//! The type is checked before opening, and again on the opened descriptor, which is opened
//! non-blocking: a FIFO, socket or character device is never read, so a scan cannot hang.
//! Devices are opened read-only without the lock: scanning must work while a pool is imported
//! elsewhere, and the importer takes the locks when it opens the leaves for real.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::label::{read_newest_label, read_uberblock_slots, LabelConfig, VDEV_MIN_DEVICE_SIZE};
use super::{BlockDevice, FileDevice};

/// A leaf found by [`scan_dirs`].
#[derive(Clone, Debug, PartialEq)]
pub struct FoundLeaf {
    pub path: PathBuf,
    /// The valid label with the highest txg.
    pub config: LabelConfig,
    /// Every uberblock slot of every label, as [`read_uberblock_slots`] returns them, for the
    /// ashift of the top-level vdev this leaf belongs to.
    pub uberblock_slots: Vec<Vec<u8>>,
}

/// Find every leaf with a valid label in `dirs`, sorted by path. Unreadable entries and files
/// without a valid label are skipped. A relative directory is taken from the working directory
/// and the leaves found in it get absolute paths (symbolic links in them are kept, as
/// `/dev/disk/by-id` names are): the pool records them, and a later operation naming the same
/// device (a replace in place, say) compares its absolute identity with them.
pub fn scan_dirs(dirs: &[PathBuf]) -> Vec<FoundLeaf> {
    let mut found = Vec::new();
    for dir in dirs {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if let Some(leaf) = inspect(entry.path()) {
                found.push(leaf);
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Why [`read_path_label`] found no label at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathProblem {
    /// Nothing at the path can be opened as a device: it does not exist, is not a regular file
    /// or block device, or cannot be read.
    CannotOpen,
    /// A device without a valid tarn label: never labelled, wiped, damaged in all four labels,
    /// or too small to hold them.
    NoValidLabel,
}

/// Open the device at `path` read-only, without the lock, and read its newest valid label.
/// Only regular files and block devices are opened (fs::metadata follows symbolic links; the
/// opened descriptor is checked again), so that a FIFO or character device is never read.
pub fn read_path_label(path: &Path) -> Result<(FileDevice, LabelConfig), PathProblem> {
    let metadata = fs::metadata(path).map_err(|_| PathProblem::CannotOpen)?;
    let file_type = metadata.file_type();
    if !(file_type.is_file() || file_type.is_block_device()) {
        return Err(PathProblem::CannotOpen);
    }
    let device = FileDevice::open_unlocked_readonly(path).map_err(|_| PathProblem::CannotOpen)?;
    if device.size_bytes() < VDEV_MIN_DEVICE_SIZE {
        return Err(PathProblem::NoValidLabel);
    }
    match read_newest_label(&device) {
        Ok(Some((_, config))) => Ok((device, config)),
        Ok(None) | Err(_) => Err(PathProblem::NoValidLabel),
    }
}

fn inspect(path: PathBuf) -> Option<FoundLeaf> {
    let (device, config) = read_path_label(&path).ok()?;
    // A cache device is no data leaf (its pool finds it through its config's l2cache list).
    if config.l2cache.is_cache_device {
        return None;
    }
    // The ring's slot size depends on the ashift of this leaf's top-level vdev.
    let ashift = config
        .vdev_tree
        .iter()
        .find(|top| top.guid == config.top_guid)
        .map(|top| top.ashift)?;
    let uberblock_slots = read_uberblock_slots(&device, ashift);
    Some(FoundLeaf {
        path,
        config,
        uberblock_slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::label::tests::sample_config;
    use crate::vdev::label::{uberblock_slot_count, write_labels, write_uberblock, LabelSet};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    /// Leaves found through a relative directory used to keep relative paths, which the pool
    /// recorded; a replace in place of a wiped side then compared the side's absolute identity
    /// with the relative path, did not see it was the same device, kept its handle locked and
    /// failed with "in use by another process" (tarn-stress with a relative `--dir`).
    #[test]
    fn leaves_found_through_a_relative_directory_get_absolute_paths() {
        let dir = tempfile::tempdir().unwrap();
        let config = sample_config(10);
        let device = FileDevice::create_sparse(&dir.path().join("a.img"), 64 << 20).unwrap();
        write_labels(&device, &config, LabelSet::All).unwrap();
        // The same directory named relative to the working directory (not changed: tests run
        // in parallel), through as many `..` as the working directory is deep.
        let cwd = std::env::current_dir().unwrap();
        let mut relative = PathBuf::new();
        for _ in cwd.components().skip(1) {
            relative.push("..");
        }
        relative.push(dir.path().strip_prefix("/").unwrap());
        assert!(relative.is_relative());
        let found = scan_dirs(&[relative]);
        assert_eq!(found.len(), 1);
        assert!(found[0].path.is_absolute(), "{}", found[0].path.display());
        assert_eq!(
            fs::canonicalize(&found[0].path).unwrap(),
            fs::canonicalize(dir.path().join("a.img")).unwrap()
        );
    }

    #[test]
    fn scan_finds_pool_files_and_ignores_fifo_directory_and_random_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = sample_config(10);
        let ashift = config.vdev_tree[0].ashift;
        for name in ["a.img", "b.img"] {
            let device = FileDevice::create_sparse(&dir.path().join(name), 64 << 20).unwrap();
            let mut leaf_config = config.clone();
            leaf_config.leaf_guid = if name == "a.img" { 12 } else { 13 };
            write_labels(&device, &leaf_config, LabelSet::All).unwrap();
            write_uberblock(&device, ashift, 5, b"ub5").unwrap();
        }
        // A large file with pseudo-random bytes where labels would be: no valid label.
        let random: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let random_file = fs::File::create(dir.path().join("random.bin")).unwrap();
        random_file.set_len(64 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        random_file.write_all_at(&random, 0).unwrap();
        random_file
            .write_all_at(&random, (64 << 20) - (1 << 20))
            .unwrap();
        // A small file, a directory (with a labelled file inside: not recursive), a FIFO.
        fs::write(dir.path().join("small"), b"hello").unwrap();
        let subdir = dir.path().join("subdir");
        fs::create_dir(&subdir).unwrap();
        let nested = FileDevice::create_sparse(&subdir.join("nested.img"), 64 << 20).unwrap();
        write_labels(&nested, &config, LabelSet::All).unwrap();
        let fifo = CString::new(dir.path().join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        // Scanning needs no lock: a leaf held by a live open is still found.
        let _held = FileDevice::open(&dir.path().join("a.img")).unwrap();

        let found = scan_dirs(&[dir.path().to_path_buf(), dir.path().join("missing")]);
        let names: Vec<String> = found
            .iter()
            .map(|leaf| {
                leaf.path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, vec!["a.img", "b.img"]);
        assert_eq!(found[0].config.leaf_guid, 12);
        assert_eq!(found[1].config.leaf_guid, 13);
        assert_eq!(found[1].config.txg, 10);
        let count = uberblock_slot_count(ashift) as usize;
        assert_eq!(found[0].uberblock_slots.len(), 4 * count);
        for label in 0..4 {
            assert_eq!(&found[0].uberblock_slots[label * count + 5][..3], b"ub5");
        }
    }
}
