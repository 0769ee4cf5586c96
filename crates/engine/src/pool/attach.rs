//! `pool attach`, `detach`, `replace` and `add` (zpool's): the checks made before a device
//! change is queued, and the waits after it. The change itself (installed at a txg boundary,
//! written into every label, crash behaviour) is `vdev_change.rs`.
//!
//! - attach: DEVICE's top-level vdev gains NEW_DEVICE (a single leaf becomes a 2-way mirror);
//!   the new leaf must hold the vdev's whole data area and carry no other pool's label unless
//!   forced; it is resilvered from the others (only it is written).
//! - detach: a mirror side leaves; refused when no remaining side holds every txg (its dirty
//!   time log is empty and it is usable): detaching must never remove the last whole copy.
//! - replace: attach with `replaces`, resilver, then the old leaf is detached by itself.
//!   `replace POOL DEVICE` alone replaces a device in place: a new device at the same path.
//! - add: new top-level vdevs, each a single leaf or a mirror; refused without force when its
//!   replication differs from the pool's (a single leaf beside mirrors, or mirrors of another
//!   width), as zpool refuses.
//!
//! Each request holds the pool's device-request lock from its checks until the txg applying
//! it has synced, so two requests never check against the same tree.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::space::AllocClass;
use crate::tunables::Tunables;
use crate::types::{Guid, ObjectId, Txg, VdevId};
use crate::vdev::label::TopVdevKind;
use crate::vdev::{label, BlockDevice, FileDevice, Leaf, TopVdev};

use super::new_device::{check_new_device, clear_labels, device_identity};
use super::vdev_change::VdevChange;
use super::vdev_spec::{Replication, VdevLayout, VdevSpec};
use super::{scan, Pool, PoolError};

/// What `pool add -n` would do, or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedVdev {
    pub id: VdevId,
    /// "mirror" or "disk".
    pub kind: &'static str,
    pub paths: Vec<PathBuf>,
    pub asize: u64,
    /// `Log` for a log vdev.
    pub class: AllocClass,
}

impl Pool {
    /// `pool attach POOL DEVICE NEW_DEVICE`: make `new_path` a mirror side of `device`'s
    /// top-level vdev; a resilver of the new side starts. Returns the txg that made the change.
    pub fn attach(&self, device: &str, new_path: &Path, force: bool) -> Result<Txg, PoolError> {
        // `attach POOL raidz1-0 NEW_DEVICE` names the vdev itself: an expansion (zpool tells
        // the two apart by the name's form too).
        if is_raidz_vdev_name(device) {
            return self.expand_raidz(device, new_path, force);
        }
        self.attach_leaf(device, new_path, force, false)
            .map(|(txg, _)| txg)
    }

    /// `pool replace POOL DEVICE [NEW_DEVICE]`: attach `new_path` (or a new device at
    /// `device`'s own path) as the replacement of `device`, which is detached once the
    /// replacement is resilvered. Returns the guid of the new leaf.
    pub fn replace(
        &self,
        device: &str,
        new_path: Option<&Path>,
        force: bool,
    ) -> Result<Guid, PoolError> {
        let (top, child) = self.find_leaf(device)?;
        let old = top.children[child].guid;
        let in_place = top.children[child].path.clone();
        let new_path = new_path.unwrap_or(&in_place);
        // The new leaf's guid, not a search for the leaf that replaces `old`: on a small pool
        // the resilver may already have finished and detached `old` when this returns.
        self.attach_leaf(&old.0.to_string(), new_path, force, true)
            .map(|(_, guid)| guid)
    }

    /// Wait until the leaf with guid `new` has replaced the one it replaces (its resilver has
    /// finished and the old leaf is detached).
    pub fn wait_replaced(&self, new: Guid) -> Result<(), PoolError> {
        // Syncs after a finished resilver that left the new leaf's log non-empty: then no
        // resilver will run by itself (it found errors), and the replace cannot finish.
        let mut syncs_without_progress = 0;
        loop {
            let Some((top, child)) = self.core.io.vdevs.leaf_by_guid(new) else {
                return Err(PoolError::Refused(format!(
                    "the replacing device {new} was detached before the replace finished"
                )));
            };
            let leaf = &top.children[child];
            if leaf.replaces().is_none() {
                // The sync that detaches the old leaf marks the new one done before it commits
                // and clears the old one's labels (`vdev_changes_committed`): one more sync
                // waits for that one, so that the old device is free when this returns (under
                // load a caller saw its label still there).
                self.sync()?;
                return Ok(());
            }
            self.core.wait_scan(scan::ScanFunction::Resilver)?;
            if leaf.dtl.is_empty() {
                syncs_without_progress = 0;
            } else {
                syncs_without_progress += 1;
            }
            if syncs_without_progress > 3 {
                return Err(PoolError::Refused(format!(
                    "the resilver of {} finished without copying every block (see `tarn pool status`); the replace is not complete",
                    leaf.path.display()
                )));
            }
            // The detach of the old leaf is applied by the next txg.
            self.sync()?;
        }
    }

    fn attach_leaf(
        &self,
        device: &str,
        new_path: &Path,
        force: bool,
        replacing: bool,
    ) -> Result<(Txg, Guid), PoolError> {
        let verb = if replacing { "replace" } else { "attach" };
        self.refuse_readonly(verb)?;
        let _request = self.core.vdev_changes.request.lock();
        let (top, child) = self.find_leaf(device)?;
        let old = &top.children[child];
        if top.raidz_geometry().is_some() && !replacing {
            // zpool attaches to mirrors and single devices only (`attach` on the raidz vdev
            // itself is expansion); a raidz child is replaced, not attached to.
            return Err(PoolError::Refused(format!(
                "cannot attach {} to {}: can only attach to mirrors and top-level disks",
                new_path.display(),
                old.path.display()
            )));
        }
        let same_path = device_identity(new_path) == old.path;
        if let Some(replacement) = top
            .children
            .iter()
            .find(|leaf| replacing && leaf.replaces() == Some(old.guid))
        {
            return Err(PoolError::Refused(format!(
                "cannot replace {}: {} is already replacing it",
                old.path.display(),
                replacement.path.display()
            )));
        }
        if same_path && !replacing {
            return Err(PoolError::Refused(format!(
                "cannot attach {} to itself",
                new_path.display()
            )));
        }
        if same_path && !old.device.is_missing() {
            // Replacing in place: the device at the path must be a new one, not the leaf.
            let device = FileDevice::open_unlocked_readonly(new_path)?;
            let still_there = (0..label::VDEV_LABELS).any(|index| {
                label::read_label(&device, index)
                    .ok()
                    .flatten()
                    .is_some_and(|label| label.leaf_guid == old.guid.0)
            });
            if still_there {
                return Err(PoolError::Refused(format!(
                    "cannot replace {} in place: the device there is still this vdev (its label names it); put the new device at that path first, or name a new device",
                    new_path.display()
                )));
            }
            // A disk that came back wiped at the path of an offline leaf (which `pool online`
            // refuses) is the very file the leaf still holds open and locked. An offline leaf
            // takes no I/O, and it is detached once the replacement is resilvered: give up its
            // handle so that the new leaf can open the device.
            if old.is_offline() {
                old.device.release();
            }
        }
        let leaf = self.open_new_leaf(new_path, force, top.child_asize(), same_path)?;
        leaf.set_replaces(replacing.then_some(old.guid));
        let guid = leaf.guid;
        log::info!(
            "pool {}: {verb} {} to {} (vdev {})",
            self.core.name,
            leaf.path.display(),
            old.path.display(),
            top.id
        );
        self.core
            .queue_vdev_change(VdevChange::Attach { top: top.id, leaf });
        let txg = self.sync()?;
        if self.core.io.vdevs.leaf_by_guid(guid).is_none() {
            return Err(PoolError::Refused(format!(
                "cannot {verb} {}: the pool changed meanwhile; try again",
                new_path.display()
            )));
        }
        drop(_request);
        // The new leaf's log runs two txgs past the one that installed it (vdev_change.rs):
        // let those sync first, so that one resilver covers the whole log.
        let open_at_install = Txg(txg.0 + crate::types::TXG_CONCURRENT_STATES as u64 - 1);
        self.core.txgs.wait_synced(Some(open_at_install))?;
        // The next txg starts the resilver of the new side: wait for it, so that `pool status`
        // and `pool wait -t resilver` right after see it.
        self.core.queue_resilver_if_logs();
        self.sync()?;
        Ok((txg, guid))
    }

    /// `pool detach POOL DEVICE`: remove a side of a mirror. Its labels are cleared once the
    /// change has committed.
    pub fn detach(&self, device: &str) -> Result<Txg, PoolError> {
        self.refuse_readonly("detach")?;
        let _request = self.core.vdev_changes.request.lock();
        let (top, child) = self.find_leaf(device)?;
        let leaf = &top.children[child];
        // Of a raidz vdev only a replacement can be detached, which cancels the replace.
        if top.raidz_geometry().is_some() && leaf.replaces().is_none() {
            return Err(PoolError::Refused(format!(
                "cannot detach {}: only applicable to mirror and replacing vdevs",
                leaf.path.display()
            )));
        }
        if top.children.len() < 2 {
            return Err(PoolError::Refused(format!(
                "cannot detach {}: only a side of a mirror can be detached (top-level vdev {} has no other device)",
                leaf.path.display(),
                top.id
            )));
        }
        let whole_copy_remains = top
            .children
            .iter()
            .enumerate()
            .any(|(index, other)| index != child && other.is_usable() && other.dtl.is_empty());
        if !whole_copy_remains {
            return Err(PoolError::Refused(format!(
                "cannot detach {}: no valid replicas (no other device of vdev {} holds every block yet: let the resilver finish, `tarn pool wait -t resilver`)",
                leaf.path.display(),
                top.id
            )));
        }
        let guid = leaf.guid;
        self.core
            .queue_vdev_change(VdevChange::Detach { leaf: guid });
        let txg = self.sync()?;
        if self.core.io.vdevs.leaf_by_guid(guid).is_some() {
            return Err(PoolError::Refused(format!(
                "cannot detach {device}: the pool changed meanwhile; try again"
            )));
        }
        Ok(txg)
    }

    /// `pool add [-n] [-f] POOL VDEV_SPEC...`: add top-level vdevs. With `dry_run`, only
    /// report what would be added.
    pub fn add(
        &self,
        layout: &VdevLayout,
        force: bool,
        dry_run: bool,
    ) -> Result<Vec<AddedVdev>, PoolError> {
        self.refuse_readonly("add")?;
        if layout.is_empty() {
            return Err(PoolError::BadVdevSpec("no devices given".into()));
        }
        let specs: Vec<(&VdevSpec, AllocClass)> = (layout.data.iter())
            .map(|spec| (spec, AllocClass::Normal))
            .chain(layout.log.iter().map(|spec| (spec, AllocClass::Log)))
            .collect();
        let _request = self.core.vdev_changes.request.lock();
        let tops = self.core.io.vdevs.tops();
        let mut seen = std::collections::BTreeSet::new();
        for path in &layout.cache {
            let identity = device_identity(path);
            if !seen.insert(identity.clone()) {
                return Err(PoolError::BadVdevSpec(format!(
                    "{} is named twice",
                    identity.display()
                )));
            }
            self.refuse_member(&identity)?;
        }
        for path in specs.iter().flat_map(|(spec, _)| spec.paths()) {
            let identity = device_identity(&path);
            if !seen.insert(identity.clone()) {
                return Err(PoolError::BadVdevSpec(format!(
                    "{} is named twice",
                    identity.display()
                )));
            }
            self.refuse_member(&identity)?;
            check_new_device(&path, force, None)?;
        }
        if !force {
            for class in [AllocClass::Normal, AllocClass::Log] {
                let class_tops: Vec<Arc<TopVdev>> = (tops.iter())
                    .filter(|top| top.class == class)
                    .cloned()
                    .collect();
                let class_specs: Vec<&VdevSpec> = (specs.iter())
                    .filter(|(_, spec_class)| *spec_class == class)
                    .map(|(spec, _)| *spec)
                    .collect();
                refuse_mismatched_replication(&class_tops, &class_specs, class)?;
            }
        }
        if specs
            .iter()
            .any(|(spec, _)| matches!(spec, VdevSpec::Raidz { .. }))
        {
            self.core.require_feature(
                super::RAIDZ_FEATURE,
                &format!("cannot add a raidz vdev to {}", self.core.name),
                PoolError::Refused,
            )?;
        }
        let ashift = tops
            .iter()
            .map(|top| top.ashift)
            .max()
            .unwrap_or(self.core.tunables.vdev_ashift);
        let first_id = tops.iter().map(|top| top.id.0 + 1).max().unwrap_or(0);
        let mut added = Vec::new();
        let mut new_tops = Vec::new();
        for (id, (spec, class)) in (first_id..).zip(specs) {
            let mut leaves = Vec::new();
            for path in spec.paths() {
                leaves.push(self.open_leaf_device(&path, dry_run)?);
            }
            let kind = spec.kind();
            let top = new_top_vdev(VdevId(id), kind, ashift, leaves, &self.core.tunables)?
                .in_class(class);
            added.push(AddedVdev {
                id: top.id,
                kind: match kind {
                    TopVdevKind::Mirror => "mirror",
                    TopVdevKind::Raidz { parity: 1 } => "raidz1",
                    TopVdevKind::Raidz { parity: 2 } => "raidz2",
                    TopVdevKind::Raidz { .. } => "raidz3",
                    TopVdevKind::Leaf => "disk",
                },
                class,
                paths: top.children.iter().map(|leaf| leaf.path.clone()).collect(),
                asize: top.asize,
            });
            new_tops.push(Arc::new(top));
        }
        if dry_run {
            added.extend(self.add_cache_devices(&layout.cache, force, true)?);
            return Ok(added);
        }
        let ids: Vec<VdevId> = new_tops.iter().map(|top| top.id).collect();
        if !new_tops.is_empty() {
            self.core
                .queue_vdev_change(VdevChange::Add { tops: new_tops });
        }
        added.extend(self.add_cache_devices(&layout.cache, force, false)?);
        self.sync()?;
        if ids.iter().any(|id| self.core.io.vdevs.top(*id).is_none()) {
            return Err(PoolError::Refused(
                "cannot add: the pool changed meanwhile; try again".into(),
            ));
        }
        Ok(added)
    }

    /// Refuse a device that already is a leaf of this pool.
    fn refuse_member(&self, identity: &Path) -> Result<(), PoolError> {
        if let Some(device) = self
            .cache_devices()
            .into_iter()
            .find(|device| device.path == identity)
        {
            return Err(PoolError::Refused(format!(
                "{} is already a cache device of pool {} (guid {})",
                identity.display(),
                self.core.name,
                device.guid
            )));
        }
        if let Some(leaf) = self
            .core
            .io
            .vdevs
            .leaves()
            .find(|leaf| leaf.path == identity)
        {
            return Err(PoolError::Refused(format!(
                "{} is already a device of pool {} (guid {})",
                identity.display(),
                self.core.name,
                leaf.guid
            )));
        }
        Ok(())
    }

    /// Check and open the device for a new leaf of a vdev whose data area is `asize` bytes.
    pub(super) fn open_new_leaf(
        &self,
        path: &Path,
        force: bool,
        asize: u64,
        replacing_in_place: bool,
    ) -> Result<Arc<Leaf>, PoolError> {
        let identity = device_identity(path);
        if !replacing_in_place {
            self.refuse_member(&identity)?;
        }
        check_new_device(path, force, None)?;
        let leaf = self.open_leaf_device(path, false)?;
        if leaf.allocatable_bytes() < asize {
            return Err(PoolError::Refused(format!(
                "{} is too small: {} bytes, the vdev needs a device of at least {} bytes",
                path.display(),
                leaf.device.size_bytes(),
                asize + label::VDEV_LABEL_START_SIZE + label::VDEV_LABEL_END_SIZE
            )));
        }
        Ok(Arc::new(leaf))
    }

    /// Open `path` as a new leaf (locked, wrapped as the pool's devices are) with a new guid;
    /// unless `dry_run`, its old labels are cleared first.
    fn open_leaf_device(&self, path: &Path, dry_run: bool) -> Result<Leaf, PoolError> {
        let identity = device_identity(path);
        let mut device: Arc<dyn BlockDevice> = if dry_run {
            Arc::new(FileDevice::open_unlocked_readonly(path)?)
        } else {
            Arc::new(FileDevice::open(path)?)
        };
        if let Some(wrap) = self.core.vdev_changes.wrapper.lock().as_ref() {
            device = wrap(&identity, device);
        }
        if !dry_run {
            clear_labels(device.as_ref()).map_err(|error| {
                PoolError::Refused(format!(
                    "cannot write the labels of {}: {error}",
                    path.display()
                ))
            })?;
        }
        Ok(Leaf::new(Guid::random(), identity, device))
    }
}

/// Whether `name` has the form of a RAID-Z vdev's name (`raidz1-0`): parity, a dash, an id.
/// `pool attach` to such a name is an expansion (zpool goes by the name's form too).
pub fn is_raidz_vdev_name(name: &str) -> bool {
    let Some((kind, id)) = name.split_once('-') else {
        return false;
    };
    matches!(kind, "raidz1" | "raidz2" | "raidz3")
        && !id.is_empty()
        && id.bytes().all(|byte| byte.is_ascii_digit())
}

/// zpool's replication check: every top-level vdev of a pool should have the same
/// redundancy, so one single disk beside mirrors (or mirrors of another width) is refused
/// unless forced.
fn refuse_mismatched_replication(
    tops: &[Arc<TopVdev>],
    specs: &[&VdevSpec],
    class: AllocClass,
) -> Result<(), PoolError> {
    let Some(pool) = tops
        .iter()
        .max_by_key(|top| top.child_count())
        .map(|top| Replication::of(top.kind, top.child_count()))
    else {
        return Ok(());
    };
    match specs
        .iter()
        .map(|spec| spec.replication())
        .find(|replication| *replication != pool)
    {
        Some(new) => Err(PoolError::Refused(format!(
            "mismatched replication level: the pool's {} vdevs use {pool} and the new vdev is {new}; use -f to add it anyway",
            class_word(class),
        ))),
        None => Ok(()),
    }
}

/// [`refuse_mismatched_replication`] for the vdevs of a new pool (`pool create`, as zpool
/// create refuses "mismatched replication level" unless forced): the vdevs of each class
/// must have one width.
pub(super) fn refuse_mismatched_new_vdevs(
    specs: &[(&VdevSpec, AllocClass)],
) -> Result<(), PoolError> {
    for class in [AllocClass::Normal, AllocClass::Log] {
        let mut replications = specs
            .iter()
            .filter(|(_, of_class)| *of_class == class)
            .map(|(spec, _)| spec.replication());
        let Some(first) = replications.next() else {
            continue;
        };
        if let Some(other) = replications.find(|replication| *replication != first) {
            return Err(PoolError::Refused(format!(
                "mismatched replication level: the {} vdevs would be {first} and {other}; use -f to create the pool anyway",
                class_word(class),
            )));
        }
    }
    Ok(())
}

fn class_word(class: AllocClass) -> &'static str {
    if class == AllocClass::Log {
        "log"
    } else {
        "data"
    }
}

/// A new top-level vdev of `kind` over `leaves`, its address space and metaslabs sized from
/// the smallest leaf: a mirror's is one leaf's data area, a RAID-Z vdev's one per child.
pub(super) fn new_top_vdev(
    id: VdevId,
    kind: TopVdevKind,
    ashift: u32,
    leaves: Vec<Leaf>,
    tunables: &Tunables,
) -> Result<TopVdev, PoolError> {
    let smallest = leaves
        .iter()
        .map(|leaf| leaf.device.size_bytes())
        .min()
        .unwrap_or(0);
    let sector = 1u64 << ashift;
    let per_leaf = label::leaf_allocatable_bytes(smallest) / sector * sector;
    let space = match kind {
        TopVdevKind::Raidz { .. } => per_leaf * leaves.len() as u64,
        _ => per_leaf,
    };
    let (ms_shift, ms_count) = crate::space::metaslab_geometry(space, tunables);
    if ms_count == 0 {
        return Err(PoolError::BadVdevSpec(format!(
            "device of {smallest} bytes is too small for one metaslab"
        )));
    }
    Ok(TopVdev::new(
        id,
        Guid::random(),
        kind,
        ashift,
        ms_count << ms_shift,
        ms_shift,
        ObjectId(0),
        leaves,
    )?)
}

#[cfg(test)]
mod tests {
    use super::is_raidz_vdev_name;

    #[test]
    fn raidz_vdev_names_are_told_from_device_names() {
        for name in ["raidz1-0", "raidz2-13", "raidz3-7"] {
            assert!(is_raidz_vdev_name(name), "{name}");
        }
        for name in [
            "raidz-0", "raidz4-0", "raidz1-", "raidz1-x", "mirror-0", "d0.img", "raidz1",
        ] {
            assert!(!is_raidz_vdev_name(name), "{name}");
        }
    }
}
