//! Changing the vdev tree of an imported pool (OpenZFS `spa_vdev_attach`, `spa_vdev_detach`,
//! `spa_vdev_add` and the config sync of `spa_sync`): the mechanism under `pool attach`,
//! `detach`, `replace` and `add` (their checks are in `attach.rs`).
//!
//! # Overview
//! A request is checked in open context, then queued here as a [`VdevChange`]. The sync thread
//! applies the queue at the start of the next txg, before anything of that txg is written
//! ([`PoolCore::apply_vdev_changes`]): it builds the next generation of each changed top-level
//! vdev (or the new ones) and installs it in the [`crate::vdev::VdevTree`], which swaps its list
//! of top-level vdevs under a lock. Readers and I/O in flight hold the generation they started
//! with (an `Arc`), so no block ever sees half a change; everything in syncing context (passes,
//! scan, labels, uberblock) sees the new tree for the whole txg. The change marks the config
//! dirty, so this txg's commit writes it into the labels of every leaf of the new tree (new
//! leaves get all four labels and the uberblock ring), and the uberblock carries the new guid
//! sum. The requester waits for that txg to sync: the change is durable when it returns.
//!
//! - Attach: the new leaf joins the top-level vdev (a single leaf becomes a mirror). Its DTL
//!   covers txgs `[1, T + TXG_CONCURRENT_STATES)` for the applying txg `T` (persisted in the
//!   same txg, `pool/dtl.rs`), so reads try it last and the resilver (`pool/scan.rs`) copies
//!   every block born before `T + 3` to it alone; the sync thread writes everything of `T` on
//!   to it. The two txgs after `T` are in the log because they may be open while `T` syncs:
//!   blocks of theirs written outside syncing context before the change was installed (blocks
//!   written ahead for the intent log) went through the vdev without the new leaf. OpenZFS's
//!   `spa_vdev_attach` logs `[TXG_INITIAL, txg + TXG_CONCURRENT_STATES)` the same way.
//!   A replacement carries `replaces = old guid` in its leaf config; once a resilver leaves it
//!   with an empty DTL, the old leaf is detached by itself ([`PoolCore::finish_replacements`]).
//! - Detach: the leaf leaves the top-level vdev (a mirror of two becomes a single leaf). Once
//!   the txg has committed, the four config areas of its labels are zeroed, so no scan takes it
//!   for a member of the pool ([`PoolCore::vdev_changes_committed`]).
//! - Add: new top-level vdevs are installed and their metaslab groups added to the space
//!   manager in the same txg, which creates their metaslab arrays (`ms_array/<vdev>`).
//!
//! # Crash behaviour
//! The commit writes the even labels (new config, label txg `T`), then the uberblock of `T`
//! (new guid sum), then the odd labels. A crash before the uberblock leaves even labels ahead
//! of every uberblock: import ([`choose_config`]) reads all four labels of every device of the
//! pool and takes the newest config whose guid sum is the newest uberblock's, which is the old
//! config from the odd labels; a new leaf named only by the abandoned config is not opened.
//! After the uberblock, the new config matches the newest uberblock. So an import sees the old
//! tree or the new one, never a mix; blocks written to a new vdev in an uncommitted txg are
//! unreachable and their space free. A detached leaf whose labels were not yet zeroed names an
//! older config than its pool's and is not part of the newest one.
//!
//! # Cost
//! Nothing per txg while no change is queued (one lock and an empty check). A change costs one
//! txg with label writes on every leaf; import reads the four config areas of each leaf.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::types::{Guid, Txg, VdevId};
use crate::vdev::label::{LabelConfig, TopVdevConfig, TopVdevKind};
use crate::vdev::{label, FileDevice, Leaf, TopVdev};

use super::new_device::clear_labels;
use super::uberblock::Uberblock;
use super::{DeviceWrapper, PoolCore, PoolError};

/// One queued change of the vdev tree, applied by the sync thread at the start of a txg.
pub(super) enum VdevChange {
    /// Add `leaf` as a child of top-level vdev `top` (as the replacement of the leaf it
    /// `replaces()`, if any).
    Attach { top: VdevId, leaf: Arc<Leaf> },
    /// Remove the leaf with this guid from its mirror.
    Detach { leaf: Guid },
    /// Add these top-level vdevs.
    Add { tops: Vec<Arc<TopVdev>> },
    /// Add a cache device (prepared, `l2cache.rs`) to the L2ARC's list.
    AddCache {
        device: Arc<crate::cache::l2arc::L2Device>,
    },
    /// Remove the cache device with this guid.
    RemoveCache { guid: Guid },
    /// Add `leaf` as a new column slot of RAID-Z vdev `top` and start its expansion
    /// (`raidz_expand.rs`).
    RaidzExpand { top: VdevId, leaf: Arc<Leaf> },
    /// The expansion of `top` has copied everything: give it its new width and space.
    RaidzExpandDone { top: VdevId },
}

/// The pool's queue of vdev changes and what a committed change still has to do.
#[derive(Default)]
pub(super) struct VdevChanges {
    pending: Mutex<Vec<VdevChange>>,
    /// Leaves detached by the txg being synced: their labels are cleared once it commits.
    detached: Mutex<Vec<Arc<Leaf>>>,
    /// Cache devices removed by the txg being synced: their labels are cleared once it commits.
    removed_cache: Mutex<Vec<Arc<crate::cache::l2arc::L2Device>>>,
    /// Serializes device requests from their checks until their txg has synced.
    pub(super) request: Mutex<()>,
    /// Wraps devices opened for new leaves as the pool's own were (the fault layer in tests).
    pub(super) wrapper: Mutex<Option<DeviceWrapper>>,
}

impl VdevChanges {
    pub(super) fn with_wrapper(wrapper: Option<DeviceWrapper>) -> VdevChanges {
        VdevChanges {
            wrapper: Mutex::new(wrapper),
            ..VdevChanges::default()
        }
    }
}

/// The guid sum a config's tree gives the uberblock (as [`crate::vdev::VdevTree::guid_sum`]).
pub(super) fn config_guid_sum(tree: &[TopVdevConfig]) -> u64 {
    tree.iter().fold(0u64, |sum, top| {
        top.children
            .iter()
            .fold(sum.wrapping_add(top.guid), |sum, leaf| {
                sum.wrapping_add(leaf.guid)
            })
    })
}

/// The config to import: the newest label config (of any of the four labels of any device of
/// the pool) whose guid sum is that of the newest uberblock on those devices. Normally the
/// newest config; after a crash between the even labels and the uberblock of a txg that
/// changed the tree, the config before the change. See the module documentation.
pub(super) fn choose_config(newest: &LabelConfig, paths: &[PathBuf]) -> LabelConfig {
    let mut configs: Vec<LabelConfig> = vec![newest.clone()];
    let mut devices = Vec::new();
    for path in paths {
        let Ok(device) = FileDevice::open_unlocked_readonly(path) else {
            continue;
        };
        for index in 0..label::VDEV_LABELS {
            if let Ok(Some(config)) = label::read_label(&device, index) {
                let known = configs
                    .iter()
                    .any(|known| known.txg == config.txg && known.vdev_tree == config.vdev_tree);
                if config.pool_guid == newest.pool_guid && !known {
                    configs.push(config);
                }
            }
        }
        devices.push(device);
    }
    configs.sort_by_key(|config| std::cmp::Reverse(config.txg));
    let sums: BTreeSet<u64> = configs
        .iter()
        .map(|config| config_guid_sum(&config.vdev_tree))
        .collect();
    let ashifts: BTreeSet<u32> = configs
        .iter()
        .flat_map(|config| config.vdev_tree.iter().map(|top| top.ashift))
        .collect();
    let newest_uberblock = devices
        .iter()
        .flat_map(|device| {
            ashifts
                .iter()
                .flat_map(|&ashift| label::read_uberblock_slots(device, ashift))
        })
        .filter_map(|slot| Uberblock::decode(&slot).ok().flatten())
        .filter(|uberblock| sums.contains(&uberblock.guid_sum))
        .max_by_key(|uberblock| (uberblock.txg, uberblock.timestamp));
    let Some(uberblock) = newest_uberblock else {
        return newest.clone();
    };
    // Of those, one the uberblock's txg had written: a change that keeps the guid sum (the
    // end of a RAID-Z expansion, which widens and grows a vdev) can also be cut short between
    // the labels and the uberblock.
    let matching = |config: &&LabelConfig| config_guid_sum(&config.vdev_tree) == uberblock.guid_sum;
    let chosen = (configs.iter())
        .filter(matching)
        .find(|config| config.txg <= uberblock.txg.0)
        .or_else(|| configs.iter().find(matching))
        .cloned()
        .unwrap_or_else(|| newest.clone());
    if chosen.txg != newest.txg {
        log::warn!(
            "pool {}: the config of txg {} was never committed (a device change was cut short); importing with the config of txg {}",
            newest.name,
            newest.txg,
            chosen.txg
        );
    }
    chosen
}

impl PoolCore {
    /// Queue a change for the next txg and wake the sync thread.
    pub(super) fn queue_vdev_change(&self, change: VdevChange) {
        self.vdev_changes.pending.lock().push(change);
        self.txgs.kick();
    }

    /// Syncing context, before anything of `txg` is written: install every queued change in
    /// the tree. A change that no longer fits the tree (a race with another change) is dropped
    /// with a warning; the requester sees the tree unchanged.
    pub(super) fn apply_vdev_changes(&self, txg: Txg) -> Result<(), PoolError> {
        let changes: Vec<VdevChange> = std::mem::take(&mut *self.vdev_changes.pending.lock());
        if changes.is_empty() || self.readonly {
            return Ok(());
        }
        let mut expansion_finished = false;
        for change in changes {
            let mut tops: Vec<Arc<TopVdev>> = self.io.vdevs.tops().iter().cloned().collect();
            let mut replacements_done: Vec<Arc<Leaf>> = Vec::new();
            match change {
                VdevChange::AddCache { device } => {
                    self.apply_cache_add(device, txg);
                    continue;
                }
                VdevChange::RemoveCache { guid } => {
                    if let Some(removed) = self.apply_cache_remove(guid, txg) {
                        self.vdev_changes.removed_cache.lock().push(removed);
                    }
                    continue;
                }
                VdevChange::RaidzExpand { top, leaf } => {
                    let Some(index) = tops.iter().position(|candidate| candidate.id == top) else {
                        log::warn!("pool {}: expand vdev {top}: no such vdev", self.name);
                        continue;
                    };
                    match self.apply_raidz_expand(&tops[index], leaf, txg)? {
                        Some(next) => tops[index] = Arc::new(next),
                        None => continue,
                    }
                }
                VdevChange::RaidzExpandDone { top } => {
                    let Some(index) = tops.iter().position(|candidate| candidate.id == top) else {
                        continue;
                    };
                    match self.apply_raidz_expand_done(&tops[index], txg)? {
                        Some(next) => tops[index] = Arc::new(next),
                        None => continue,
                    }
                    expansion_finished = true;
                }
                VdevChange::Attach { top, leaf } => {
                    let Some(index) = tops.iter().position(|candidate| candidate.id == top) else {
                        log::warn!("pool {}: attach to vdev {top}: no such vdev", self.name);
                        continue;
                    };
                    let mut children = tops[index].children.clone();
                    children.push(leaf.clone());
                    // A raidz child's replacement joins its column slot (vdev/tree); anything
                    // else attached makes a mirror.
                    let kind = match tops[index].kind {
                        raidz @ TopVdevKind::Raidz { .. } => raidz,
                        _ => TopVdevKind::Mirror,
                    };
                    let next = tops[index].with_children(kind, children)?;
                    // Every txg before this one is missing on the new leaf. From this one on
                    // the sync thread writes to it, but the txgs open now (at most two after
                    // this one) may hold blocks written ahead of their sync through the tree
                    // before this change, without the new leaf: they are missing too.
                    leaf.dtl
                        .add_range(1, txg.0 + crate::types::TXG_CONCURRENT_STATES as u64);
                    leaf.dtl.mark_dirty();
                    // A scan running now walked part of the pool before the leaf existed:
                    // its end must not clear the leaf's log, as for a leaf that was offline
                    // during it. (The attach restarts a resilver, but a crash before the
                    // restart resumes this scan at import, and the scan may end first.)
                    self.note_leaf_unusable(leaf.guid);
                    tops[index] = Arc::new(next);
                    log::info!(
                        "pool {}: {} attached to vdev {top} in txg {txg}{}",
                        self.name,
                        leaf.path.display(),
                        leaf.replaces()
                            .map(|old| format!(" (replacing {old})"))
                            .unwrap_or_default()
                    );
                }
                VdevChange::Detach { leaf: guid } => {
                    let found = tops.iter().enumerate().find_map(|(index, top)| {
                        top.children
                            .iter()
                            .position(|leaf| leaf.guid == guid)
                            .map(|child| (index, child))
                    });
                    let Some((index, child)) = found else {
                        log::warn!("pool {}: detach {guid}: no such device", self.name);
                        continue;
                    };
                    let mut children = tops[index].children.clone();
                    if children.len() < 2 {
                        log::warn!("pool {}: detach {guid}: not a mirror side", self.name);
                        continue;
                    }
                    let raidz = matches!(tops[index].kind, TopVdevKind::Raidz { .. });
                    let cancels_replace = children[child].replaces().is_some();
                    let removed = if raidz && !cancels_replace {
                        // A replaced raidz child goes, and its replacement takes its place in
                        // the list: the children's order is the columns' order. (A replacement
                        // detached, the replace cancelled, simply leaves.)
                        let Some(replacement) = children
                            .iter()
                            .position(|other| other.replaces() == Some(guid))
                        else {
                            log::warn!(
                                "pool {}: detach {guid}: a raidz child with no replacement",
                                self.name
                            );
                            continue;
                        };
                        let new = children.remove(replacement);
                        std::mem::replace(&mut children[child], new)
                    } else {
                        children.remove(child)
                    };
                    // The replacement stops naming the old leaf only once the tree without
                    // it is installed: `wait_replaced` returns when `replaces` is gone, and
                    // its caller must not find the old leaf still there.
                    replacements_done.extend(
                        children
                            .iter()
                            .filter(|other| other.replaces() == Some(guid))
                            .cloned(),
                    );
                    let kind = match (tops[index].kind, children.len()) {
                        (raidz @ TopVdevKind::Raidz { .. }, _) => raidz,
                        (_, 1) => TopVdevKind::Leaf,
                        _ => TopVdevKind::Mirror,
                    };
                    tops[index] = Arc::new(tops[index].with_children(kind, children)?);
                    log::info!(
                        "pool {}: {} detached from vdev {} in txg {txg}",
                        self.name,
                        removed.path.display(),
                        tops[index].id
                    );
                    self.vdev_changes.detached.lock().push(removed);
                }
                VdevChange::Add { tops: added } => {
                    let storage = self.storage();
                    for top in added {
                        if tops.iter().any(|existing| existing.id == top.id) {
                            log::warn!("pool {}: add vdev {}: id in use", self.name, top.id);
                            continue;
                        }
                        self.io.space.add_vdev(
                            top.id,
                            top.class,
                            top.asize,
                            top.ms_shift,
                            top.alloc_unit(),
                            None,
                            &storage,
                        )?;
                        if top.raidz_geometry().is_some() {
                            self.feature_increment(super::RAIDZ_FEATURE)?;
                        }
                        log::info!(
                            "pool {}: vdev {} added in txg {txg} ({} bytes)",
                            self.name,
                            top.id,
                            top.asize
                        );
                        tops.push(top);
                    }
                }
            }
            self.io.vdevs.install(tops);
            for leaf in replacements_done {
                leaf.set_replaces(None);
            }
        }
        self.config.lock().dirty = true;
        if expansion_finished {
            self.scrub_after_expansion();
        }
        Ok(())
    }

    /// After the commit of a txg: clear the labels of the leaves it detached, so that scans
    /// no longer take them for members of the pool, and release them (their lock goes, and
    /// later writes are refused). Releasing does not wait for the last reference: a reader
    /// still holding the old vdev tree keeps the device open, and without the release its lock
    /// made an attach of the same device right after the detach fail with "in use" (seen under
    /// load in `vdev_change::readers_during_attach_and_detach_always_read_right`).
    pub(super) fn vdev_changes_committed(&self) {
        for device in std::mem::take(&mut *self.vdev_changes.removed_cache.lock()) {
            cache_device_removed(&self.name, &device);
        }
        let detached = std::mem::take(&mut *self.vdev_changes.detached.lock());
        for leaf in detached {
            if leaf.device.is_missing() {
                continue;
            }
            if let Err(error) = clear_labels(leaf.device.as_ref()) {
                log::warn!(
                    "pool {}: could not clear the labels of detached {}: {error}",
                    self.name,
                    leaf.path.display()
                );
            }
            leaf.device.release();
        }
    }

    /// After a scan: every replacement whose log is now empty has its old leaf detached in the
    /// next txg (`pool replace` finishes by itself).
    pub(super) fn finish_replacements(&self) {
        for leaf in self.io.vdevs.leaves() {
            if let Some(old) = leaf.replaces() {
                if leaf.is_usable() && leaf.dtl.is_empty() {
                    log::info!(
                        "pool {}: {} is resilvered: detaching the device it replaces ({old})",
                        self.name,
                        leaf.path.display()
                    );
                    self.queue_vdev_change(VdevChange::Detach { leaf: old });
                }
            }
        }
    }
}

/// After the commit that removed `device`: clear its labels (it is no cache device of the pool
/// any more) and release it.
fn cache_device_removed(pool: &str, device: &crate::cache::l2arc::L2Device) {
    if device.is_usable() {
        if let Err(error) = clear_labels(device.leaf.device.as_ref()) {
            log::warn!(
                "pool {pool}: could not clear the labels of removed cache device {}: {error}",
                device.path.display()
            );
        }
    }
    device.leaf.device.release();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::label::LeafConfig;

    fn top(guid: u64, leaves: &[u64]) -> TopVdevConfig {
        TopVdevConfig {
            id: 0,
            guid,
            kind: TopVdevKind::Mirror,
            ashift: 12,
            asize: 1 << 20,
            ms_shift: 20,
            ms_array: 0,
            children: leaves
                .iter()
                .map(|&guid| LeafConfig {
                    guid,
                    path: String::new(),
                    replaces: 0,
                })
                .collect(),
            class: crate::space::AllocClass::Normal,
            raidz_expansions: Vec::new(),
            raidz_expanding: false,
        }
    }

    #[test]
    fn guid_sum_of_a_config_counts_every_vdev_and_wraps() {
        assert_eq!(config_guid_sum(&[top(7, &[100, 101])]), 208);
        assert_eq!(config_guid_sum(&[top(u64::MAX, &[2])]), 1);
        // Attaching a leaf changes the sum; detaching it again restores it.
        let before = config_guid_sum(&[top(7, &[100])]);
        assert_ne!(before, config_guid_sum(&[top(7, &[100, 55])]));
        assert_eq!(before, 107);
    }
}
