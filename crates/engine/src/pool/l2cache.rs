//! The pool's cache devices (OpenZFS `spa_l2cache`): adding them (`pool create ... cache DEV`,
//! `pool add POOL cache DEV`), removing them (`pool remove`), finding them at import, and their
//! place in the config. The cache itself is `cache/l2arc/`.
//!
//! # Identity
//!
//! A cache device is not a top-level vdev: it is never in the [`crate::vdev::VdevTree`] nor in
//! the uberblock's guid sum, and scrub, resilver and `check` never see it. The pool's config
//! lists it (the labels' `l2cache.devices`: guid and path) and the device carries its own four
//! labels in the pool's label format with `l2cache.is_cache_device` set, its guid as
//! `leaf_guid`, an empty vdev tree and the pool's name and guid: import scans skip it (it is no
//! data leaf), and `pool create`/`add` elsewhere refuse it without -f.
//!
//! # Changes
//!
//! An added device is checked and prepared in open context (old labels cleared, its labels and
//! an empty device header written and flushed), then queued as a [`VdevChange`]: the sync thread
//! puts it in the L2ARC's device list at the start of the next txg and marks the config dirty,
//! so that txg's commit writes the new list into every data leaf's labels; the requester waits
//! for it. `pool remove` queues the removal the same way; once the txg has committed, the
//! device's labels are cleared and its lock released. A crash before the commit leaves the old
//! list: an added device is not used (its labels name the pool but no config names it), a
//! removed one is used again.
//!
//! # Import
//!
//! Each listed device is opened at its path, or found by guid in the directories scanned; its
//! label must name the pool and the device. One that is missing or does not match never stops
//! the import: it is kept in the list as UNAVAIL (so the config keeps it), never read or
//! written. The others are handed to the L2ARC, whose feed thread rebuilds their headers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::l2arc::L2Device;
use crate::types::{Guid, Txg, VdevId};
use crate::vdev::label::{CacheDeviceConfig, L2cacheConfig, LabelConfig, LabelSet, PoolState};
use crate::vdev::{label, BlockDevice, FileDevice, MissingDevice};

use super::attach::AddedVdev;
use super::new_device::{check_new_device, clear_labels, device_identity};
use super::vdev_change::VdevChange;
use super::{hostname, DeviceWrapper, Pool, PoolCore, PoolError, POOL_VERSION};

impl PoolCore {
    /// The config's list of cache devices.
    pub(super) fn cache_device_configs(&self) -> Vec<CacheDeviceConfig> {
        self.io
            .l2arc()
            .devices()
            .iter()
            .map(|device| CacheDeviceConfig {
                guid: device.guid.0,
                path: device.path.display().to_string(),
            })
            .collect()
    }

    /// Syncing context: put an added cache device in the L2ARC's list.
    pub(super) fn apply_cache_add(&self, device: Arc<L2Device>, txg: Txg) {
        log::info!(
            "pool {}: cache device {} added in txg {txg}",
            self.name,
            device.path.display()
        );
        self.io.l2arc().add_device(device);
    }

    /// Syncing context: take a cache device out of the L2ARC; its labels are cleared after the
    /// commit.
    pub(super) fn apply_cache_remove(&self, guid: Guid, txg: Txg) -> Option<Arc<L2Device>> {
        let removed = self.io.l2arc().remove_device(guid)?;
        log::info!(
            "pool {}: cache device {} removed in txg {txg}",
            self.name,
            removed.path.display()
        );
        Some(removed)
    }
}

/// The label of a cache device of pool `name` (`pool_guid`).
fn cache_label(name: &str, pool_guid: Guid, device: Guid, txg: Txg) -> LabelConfig {
    LabelConfig {
        version: POOL_VERSION,
        name: name.to_string(),
        pool_guid: pool_guid.0,
        state: PoolState::Active,
        txg: txg.0,
        hostname: hostname(),
        top_guid: 0,
        leaf_guid: device.0,
        vdev_tree: Vec::new(),
        features_for_read: Vec::new(),
        features_for_write: Some(Vec::new()),
        features: BTreeMap::new(),
        l2cache: L2cacheConfig {
            devices: Vec::new(),
            is_cache_device: true,
        },
    }
}

/// Make `device` a fresh cache device of the pool: clear it, write its labels and an empty
/// device header, flush. Returns the [`L2Device`] to hand to the L2ARC.
pub(super) fn prepare_cache_device(
    name: &str,
    pool_guid: Guid,
    txg: Txg,
    path: PathBuf,
    device: Arc<dyn BlockDevice>,
) -> Result<Arc<L2Device>, PoolError> {
    let guid = Guid::random();
    let shown = path.display().to_string();
    let failed = |error: &dyn std::fmt::Display| {
        PoolError::Refused(format!("cannot prepare cache device {shown}: {error}"))
    };
    clear_labels(device.as_ref()).map_err(|error| failed(&error))?;
    label::write_labels(
        device.as_ref(),
        &cache_label(name, pool_guid, guid, txg),
        LabelSet::All,
    )
    .map_err(|error| failed(&error))?;
    let l2 = Arc::new(L2Device::new(guid, path, device, false));
    let header = l2.ring.lock().header(pool_guid.0, guid, 0);
    l2.write_header(&header)
        .and_then(|()| l2.leaf.device.flush())
        .map_err(|error| failed(&error))?;
    Ok(l2)
}

/// Open (creating it as a sparse file with `create_size` if missing) a device for a new cache
/// device, wrapped as the pool's devices are.
pub(super) fn open_cache_path(
    path: &Path,
    create_size: Option<u64>,
    wrapper: Option<&DeviceWrapper>,
    dry_run: bool,
) -> Result<(PathBuf, Arc<dyn BlockDevice>), PoolError> {
    let mut device: Arc<dyn BlockDevice> = match (path.exists(), create_size) {
        (false, Some(size)) if !dry_run => Arc::new(FileDevice::create_sparse(path, size)?),
        _ if dry_run => Arc::new(FileDevice::open_unlocked_readonly(path)?),
        _ => Arc::new(FileDevice::open(path)?),
    };
    let identity = device_identity(path);
    if let Some(wrap) = wrapper {
        device = wrap(&identity, device);
    }
    Ok((identity, device))
}

/// The cache devices named by `config` for an import: each opened at its path, or found by
/// guid in `dirs`, with a label naming this pool and device; a missing one as UNAVAIL.
pub(super) fn open_cache_devices(
    config: &LabelConfig,
    dirs: &[PathBuf],
    wrapper: Option<&DeviceWrapper>,
    readonly: bool,
) -> Vec<Arc<L2Device>> {
    let matches = |path: &Path, guid: u64| -> bool {
        let Ok(device) = FileDevice::open_unlocked_readonly(path) else {
            return false;
        };
        matches!(label::read_newest_label(&device), Ok(Some((_, label)))
            if label.l2cache.is_cache_device
                && label.pool_guid == config.pool_guid
                && label.leaf_guid == guid)
    };
    let mut devices = Vec::new();
    for entry in &config.l2cache.devices {
        let listed = PathBuf::from(&entry.path);
        let found = if matches(&listed, entry.guid) {
            Some(listed.clone())
        } else {
            dirs.iter()
                .filter_map(|dir| std::fs::read_dir(dir).ok())
                .flat_map(|entries| entries.flatten().map(|entry| entry.path()))
                .find(|path| path.is_file() && matches(path, entry.guid))
        };
        let opened = found.as_ref().map(|path| {
            if readonly {
                FileDevice::open_unlocked_readonly(path)
                    .map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
            } else {
                FileDevice::open(path).map(|d| Arc::new(d) as Arc<dyn BlockDevice>)
            }
        });
        let device: Arc<dyn BlockDevice> = match (found, opened) {
            (Some(path), Some(Ok(device))) => match wrapper {
                Some(wrap) => wrap(&path, device),
                None => device,
            },
            (_, opened) => {
                let why = match opened {
                    Some(Err(error)) => error.to_string(),
                    _ => "not found".to_string(),
                };
                log::warn!(
                    "pool {}: cache device {} (guid {}) is unavailable: {why}",
                    config.name,
                    entry.path,
                    entry.guid
                );
                Arc::new(MissingDevice::new(listed.clone(), 0))
            }
        };
        let path = if device.is_missing() {
            listed
        } else {
            device_identity(&listed)
        };
        devices.push(Arc::new(L2Device::new(
            Guid(entry.guid),
            path,
            device.clone(),
            !device.is_missing(),
        )));
    }
    devices
}

impl Pool {
    /// The pool's cache devices, usable or not.
    pub fn cache_devices(&self) -> Vec<Arc<L2Device>> {
        self.core.io.l2arc().devices()
    }

    /// Check, prepare and queue new cache devices (`pool add POOL cache DEV...`); the caller
    /// holds the device-request lock and waits for the next txg.
    pub(super) fn add_cache_devices(
        &self,
        paths: &[PathBuf],
        force: bool,
        dry_run: bool,
    ) -> Result<Vec<AddedVdev>, PoolError> {
        let mut prepared = Vec::new();
        let mut added = Vec::new();
        for path in paths {
            let identity = device_identity(path);
            if self
                .cache_devices()
                .iter()
                .any(|device| device.path == identity)
            {
                return Err(PoolError::Refused(format!(
                    "{} is already a cache device of pool {}",
                    identity.display(),
                    self.core.name
                )));
            }
            check_new_device(path, force, None)?;
            let wrapper = self.core.vdev_changes.wrapper.lock().clone();
            let (identity, device) = open_cache_path(path, None, wrapper.as_ref(), dry_run)?;
            added.push(AddedVdev {
                id: VdevId(0),
                kind: "cache",
                // Not an allocation class at all: `kind` says what it is.
                class: crate::space::AllocClass::Normal,
                paths: vec![identity.clone()],
                asize: crate::cache::l2arc::device::ring_bounds(device.size_bytes())
                    .1
                    .saturating_sub(crate::cache::l2arc::device::ring_bounds(0).0),
            });
            if !dry_run {
                prepared.push(prepare_cache_device(
                    &self.core.name,
                    self.core.guid,
                    self.core.txgs.last_synced(),
                    identity,
                    device,
                )?);
            }
        }
        for device in prepared {
            self.core.queue_vdev_change(VdevChange::AddCache { device });
        }
        Ok(added)
    }

    /// `pool remove POOL DEVICE`: remove a cache device (by path, file name or guid). Only
    /// cache devices can be removed for now. Returns the txg that made the change.
    pub fn remove(&self, name: &str) -> Result<Txg, PoolError> {
        self.refuse_readonly("remove")?;
        let _request = self.core.vdev_changes.request.lock();
        let guid = name.parse::<u64>().ok();
        let matching: Vec<Arc<L2Device>> = self
            .cache_devices()
            .into_iter()
            .filter(|device| {
                Some(device.guid.0) == guid
                    || device.path.as_os_str() == name
                    || device.path.file_name().is_some_and(|file| file == name)
                    || device_identity(Path::new(name)) == device.path
            })
            .collect();
        let device = match matching.len() {
            1 => matching[0].clone(),
            0 if self.find_leaf(name).is_ok_and(|(top, _)| top.is_log()) => {
                return Err(PoolError::Refused(format!(
                    "cannot remove {name}: log devices cannot be removed yet (only cache devices can)"
                )))
            }
            0 if self.find_leaf(name).is_ok() => {
                return Err(PoolError::Refused(format!(
                    "cannot remove {name}: only cache devices can be removed (it is a data vdev of pool {})",
                    self.core.name
                )))
            }
            0 => {
                return Err(PoolError::BadVdevSpec(format!(
                    "pool {} has no device named {name:?} (give its path, file name or guid, as `tarn pool status` shows)",
                    self.core.name
                )))
            }
            _ => {
                return Err(PoolError::BadVdevSpec(format!(
                    "{name:?} names more than one cache device of pool {}: give the full path or the guid",
                    self.core.name
                )))
            }
        };
        self.core
            .queue_vdev_change(VdevChange::RemoveCache { guid: device.guid });
        let txg = self.sync()?;
        if self
            .cache_devices()
            .iter()
            .any(|other| other.guid == device.guid)
        {
            return Err(PoolError::Refused(format!(
                "cannot remove {name}: the pool changed meanwhile; try again"
            )));
        }
        Ok(txg)
    }
}
