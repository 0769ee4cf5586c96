//! Devices that are to join the pool (`pool create`, `add`, `attach`, `replace`, and cache
//! devices): the identity a device path is known by, the checks a new device must pass, and
//! clearing the labels of a device that joins or leaves. Creation, the changes of an imported
//! pool's vdev tree and the cache devices all use these, so they sit below all three.

use std::path::{Path, PathBuf};

use crate::vdev::{label, BlockDevice, FileDevice, PoolState};

use super::PoolError;

/// The path a device will be known by: canonical for an existing file, the canonical parent
/// plus the file name for one still to be created. Two spellings of one file compare equal.
pub(super) fn device_identity(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (std::fs::canonicalize(parent), path.file_name()) {
        (Ok(parent), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    }
}

/// Check one device for a new vdev (pool create, attach, replace, add): it exists (or will be
/// created with `create_size`), is large enough, and belongs to no other pool unless `force`.
pub(super) fn check_new_device(
    path: &Path,
    force: bool,
    create_size: Option<u64>,
) -> Result<(), PoolError> {
    if !path.exists() {
        match create_size {
            Some(size) if size < label::VDEV_MIN_DEVICE_SIZE => {
                return Err(PoolError::BadVdevSpec(format!(
                    "-s {size} is too small: a vdev needs at least {} bytes",
                    label::VDEV_MIN_DEVICE_SIZE
                )))
            }
            Some(_) => return Ok(()),
            None => {
                return Err(PoolError::BadVdevSpec(format!(
                    "{} does not exist (use -s SIZE to create it as a sparse file)",
                    path.display()
                )))
            }
        }
    }
    let device = FileDevice::open_unlocked_readonly(path)?;
    if device.size_bytes() < label::VDEV_MIN_DEVICE_SIZE {
        return Err(PoolError::BadVdevSpec(format!(
            "{} is too small: {} bytes, a vdev needs at least {} bytes",
            path.display(),
            device.size_bytes(),
            label::VDEV_MIN_DEVICE_SIZE
        )));
    }
    if !force {
        for index in 0..4 {
            if let Ok(Some(existing)) = label::read_label(&device, index) {
                if existing.l2cache.is_cache_device && existing.state != PoolState::Destroyed {
                    return Err(PoolError::BadVdevSpec(format!(
                        "{} is a cache device of pool {:?}; use -f to overwrite it",
                        path.display(),
                        existing.name
                    )));
                }
                if existing.state != PoolState::Destroyed {
                    return Err(PoolError::BadVdevSpec(format!(
                        "{} is part of pool {:?} ({:?}); use -f to overwrite it",
                        path.display(),
                        existing.name,
                        existing.state
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Zero the four labels of `device` (config and uberblock ring) and flush: a detached leaf, or
/// a device about to become a leaf (stale uberblocks of an earlier life must not stay in its
/// ring).
pub(super) fn clear_labels(device: &dyn BlockDevice) -> std::io::Result<()> {
    let zeros = vec![0u8; label::VDEV_LABEL_SIZE as usize];
    let size = device.size_bytes();
    for index in 0..label::VDEV_LABELS {
        device.write_at(label::label_offset(index, size), &zeros)?;
    }
    device.flush()
}
