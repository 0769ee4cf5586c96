//! What importing a found pool would find, vdev by vdev (OpenZFS's `spa_tryimport`, whose
//! result `zpool import` lists): the state of every vdev the pool config names.
//!
//! Every label holds the whole vdev tree, so the config read from the devices that were found
//! names the devices that were not, with their guids and the paths they had. A leaf is ONLINE
//! when the scan found a device whose label names this pool and this leaf's guid, at any path
//! (devices may move). Otherwise it is UNAVAIL, and the device at the path the config names
//! says why: nothing there that opens ("cannot open"); a device without a valid label of this
//! leaf, because it was never labelled, was wiped, or carries another pool's or another vdev's
//! label ("invalid label"); or this leaf's own device, outside the directories searched ("not
//! in the searched directories"). Only the label makes a device a member: a device at the
//! right path with the wrong label is never taken for the leaf.
//!
//! Up the tree, as OpenZFS's `vdev_propagate_state`: a top-level vdev of one leaf has its
//! leaf's state; a mirror is ONLINE when every child is, DEGRADED when some are, and UNAVAIL
//! ("insufficient replicas") when none is. The pool is UNAVAIL when any top-level vdev is: a data
//! vdev holds blocks that no other vdev has, and a log vdev holds intent-log records that only
//! `import -m` may discard. Else it is DEGRADED when any vdev is, else ONLINE.
//!
//! The import (import.rs) computes the same states from the same scan: it opens the ONLINE
//! leaves, stands a missing device in for each UNAVAIL one (a degraded mirror imports), and
//! refuses a pool with an UNAVAIL top-level vdev, naming its devices and why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::space::AllocClass;
use crate::vdev::label::{LabelConfig, LeafConfig, TopVdevKind};
use crate::vdev::scan::{read_path_label, PathProblem};
use crate::vdev::VdevHealth;

use super::FoundPool;

/// Why a vdev cannot be used, in the words `zpool import` uses (OpenZFS's `vdev_aux_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VdevProblem {
    /// No scanned device carries the leaf, and nothing at its config path opens.
    CannotOpen,
    /// The device at the leaf's config path has no valid label of this pool and leaf.
    InvalidLabel,
    /// The device at the leaf's config path is the leaf, but lies outside the searched
    /// directories, so an import from them would not open it.
    NotSearched,
    /// No child of a mirror can be used, or (for the pool) some top-level vdev cannot.
    InsufficientReplicas,
}

impl VdevProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            VdevProblem::CannotOpen => "cannot open",
            VdevProblem::InvalidLabel => "invalid label",
            VdevProblem::NotSearched => "not in the searched directories",
            VdevProblem::InsufficientReplicas => "insufficient replicas",
        }
    }

    /// Whether the device is absent (as opposed to present with a bad label).
    pub fn is_missing(self) -> bool {
        matches!(self, VdevProblem::CannotOpen | VdevProblem::NotSearched)
    }
}

/// One leaf of a found pool, as an import would find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafImportState {
    pub guid: u64,
    /// Where its device was found; for an UNAVAIL leaf, the path the config names.
    pub path: PathBuf,
    /// While a `pool replace` runs: the guid of the leaf this one replaces.
    pub replaces: Option<u64>,
    /// ONLINE or UNAVAIL.
    pub health: VdevHealth,
    /// Why it is UNAVAIL.
    pub problem: Option<VdevProblem>,
}

/// One top-level vdev of a found pool, as an import would find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopImportState {
    pub id: u32,
    pub kind: TopVdevKind,
    pub class: AllocClass,
    pub health: VdevHealth,
    pub problem: Option<VdevProblem>,
    pub children: Vec<LeafImportState>,
}

/// A found pool's vdev tree with each vdev's state (what `zpool import` prints as `config:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportState {
    /// ONLINE, DEGRADED or UNAVAIL.
    pub health: VdevHealth,
    pub problem: Option<VdevProblem>,
    /// In config order; data and log vdevs alike (see [`TopImportState::class`]).
    pub tops: Vec<TopImportState>,
    /// The pool's cache devices, as the config names them; never needed for an import.
    pub cache: Vec<PathBuf>,
}

impl ImportState {
    pub fn leaves(&self) -> impl Iterator<Item = &LeafImportState> {
        self.tops.iter().flat_map(|top| top.children.iter())
    }

    /// Whether the only top-level vdevs that cannot be used are log vdevs: `import -m`
    /// imports the pool, discarding the intent-log records on them.
    pub fn only_logs_unavailable(&self) -> bool {
        let unavailable: Vec<&TopImportState> = self
            .tops
            .iter()
            .filter(|top| top.health == VdevHealth::Unavail)
            .collect();
        !unavailable.is_empty() && unavailable.iter().all(|top| top.class == AllocClass::Log)
    }
}

impl FoundPool {
    /// The state of every vdev of this pool, as importing it from the directories it was
    /// found in would find them (the config the import would take, see
    /// `vdev_change::choose_config`).
    pub fn import_state(&self) -> ImportState {
        let paths: Vec<PathBuf> = self.leaves.values().cloned().collect();
        let config = super::vdev_change::choose_config(&self.config, &paths);
        import_state(&config, &self.leaves)
    }
}

/// The state of every vdev of `config`, given the device found for each leaf guid.
pub(super) fn import_state(config: &LabelConfig, found: &BTreeMap<u64, PathBuf>) -> ImportState {
    let tops: Vec<TopImportState> = config
        .vdev_tree
        .iter()
        .map(|top| {
            let children: Vec<LeafImportState> = top
                .children
                .iter()
                .map(|leaf| leaf_state(config.pool_guid, leaf, found))
                .collect();
            let online = children
                .iter()
                .filter(|leaf| leaf.health == VdevHealth::Online)
                .count();
            let (health, problem) = match (children.as_slice(), online) {
                // A top-level vdev of one leaf is that leaf (zpool prints it in its place).
                ([only], _) => (only.health, only.problem),
                (_, 0) => (VdevHealth::Unavail, Some(VdevProblem::InsufficientReplicas)),
                (_, online) if online == children.len() => (VdevHealth::Online, None),
                _ => (VdevHealth::Degraded, None),
            };
            TopImportState {
                id: top.id,
                kind: top.kind,
                class: top.class,
                health,
                problem,
                children,
            }
        })
        .collect();
    let (health, problem) = if tops.iter().any(|top| top.health == VdevHealth::Unavail) {
        (VdevHealth::Unavail, Some(VdevProblem::InsufficientReplicas))
    } else if tops.iter().any(|top| top.health != VdevHealth::Online) {
        (VdevHealth::Degraded, None)
    } else {
        (VdevHealth::Online, None)
    };
    ImportState {
        health,
        problem,
        tops,
        cache: config
            .l2cache
            .devices
            .iter()
            .map(|device| PathBuf::from(&device.path))
            .collect(),
    }
}

fn leaf_state(
    pool_guid: u64,
    leaf: &LeafConfig,
    found: &BTreeMap<u64, PathBuf>,
) -> LeafImportState {
    let (path, problem) = match found.get(&leaf.guid) {
        Some(path) => (path.clone(), None),
        None => {
            let path = PathBuf::from(&leaf.path);
            let problem = VdevProblem::of_absent_leaf(&path, pool_guid, leaf.guid);
            (path, Some(problem))
        }
    };
    LeafImportState {
        guid: leaf.guid,
        path,
        replaces: Some(leaf.replaces).filter(|&guid| guid != 0),
        health: if problem.is_none() {
            VdevHealth::Online
        } else {
            VdevHealth::Unavail
        },
        problem,
    }
}

impl VdevProblem {
    /// Why the leaf `leaf_guid` of pool `pool_guid`, which no scanned device carries (or
    /// which an imported pool holds as missing), is not at `path` either. Read from the device
    /// at `path` now: `pool status` asks again, so that it tells a disk still absent from one
    /// that is back but blank (which only `pool replace` in place can take again).
    pub fn of_absent_leaf(path: &Path, pool_guid: u64, leaf_guid: u64) -> VdevProblem {
        match read_path_label(path) {
            Err(PathProblem::CannotOpen) => VdevProblem::CannotOpen,
            Err(PathProblem::NoValidLabel) => VdevProblem::InvalidLabel,
            Ok((_, label)) if label.pool_guid == pool_guid && label.leaf_guid == leaf_guid => {
                VdevProblem::NotSearched
            }
            // Another pool's device, or another vdev of this pool, now at this path.
            Ok(_) => VdevProblem::InvalidLabel,
        }
    }
}

#[cfg(test)]
mod tests {
    //! A pool config of a two-way mirror (a, b), a single-leaf data vdev (c) and a log vdev
    //! (d), against devices that are labelled right, missing, wiped, foreign or elsewhere.
    //! Guards against what the import listing once did: it called such pools "exported cleanly;
    //! imports as it is" and never said which device was missing or why.

    use super::*;
    use crate::vdev::label::{
        write_labels, L2cacheConfig, LabelSet, PoolState, TopVdevConfig, LABEL_CONFIG_VERSION,
    };
    use crate::vdev::FileDevice;

    const POOL_GUID: u64 = 0x5eed;
    const SIZE: u64 = 64 << 20;

    fn config(dir: &Path) -> LabelConfig {
        let top = |id: u32, kind, class, leaves: &[(u64, &str)]| TopVdevConfig {
            id,
            guid: 100 + id as u64,
            kind,
            ashift: 12,
            asize: 32 << 20,
            ms_shift: 20,
            ms_array: 0,
            children: leaves
                .iter()
                .map(|&(guid, name)| LeafConfig {
                    guid,
                    path: dir.join(name).display().to_string(),
                    replaces: 0,
                })
                .collect(),
            class,
            raidz_expansions: Vec::new(),
            raidz_expanding: false,
        };
        LabelConfig {
            version: LABEL_CONFIG_VERSION,
            name: "tank".into(),
            pool_guid: POOL_GUID,
            state: PoolState::Exported,
            txg: 7,
            hostname: "host".into(),
            top_guid: 100,
            leaf_guid: 1,
            vdev_tree: vec![
                top(
                    0,
                    TopVdevKind::Mirror,
                    AllocClass::Normal,
                    &[(1, "a"), (2, "b")],
                ),
                top(1, TopVdevKind::Leaf, AllocClass::Normal, &[(3, "c")]),
                top(2, TopVdevKind::Leaf, AllocClass::Log, &[(4, "d")]),
            ],
            features_for_read: Vec::new(),
            features_for_write: Some(Vec::new()),
            features: BTreeMap::new(),
            l2cache: L2cacheConfig::default(),
        }
    }

    /// A device at `dir/name` labelled as leaf `leaf_guid` of pool `pool_guid`.
    fn labelled(dir: &Path, name: &str, pool_guid: u64, leaf_guid: u64) {
        let device = FileDevice::create_sparse(&dir.join(name), SIZE).unwrap();
        let mut label = config(dir);
        label.pool_guid = pool_guid;
        label.leaf_guid = leaf_guid;
        write_labels(&device, &label, LabelSet::All).unwrap();
    }

    fn found(dir: &Path, leaves: &[(u64, &str)]) -> BTreeMap<u64, PathBuf> {
        leaves
            .iter()
            .map(|&(guid, name)| (guid, dir.join(name)))
            .collect()
    }

    fn leaf(state: &ImportState, guid: u64) -> &LeafImportState {
        state.leaves().find(|leaf| leaf.guid == guid).unwrap()
    }

    #[test]
    fn every_device_found_is_online() {
        let dir = tempfile::tempdir().unwrap();
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(1, "a"), (2, "b"), (3, "c"), (4, "d")]),
        );
        assert_eq!((state.health, state.problem), (VdevHealth::Online, None));
        assert!(state.leaves().all(|leaf| leaf.health == VdevHealth::Online));
        assert!(state
            .tops
            .iter()
            .all(|top| top.health == VdevHealth::Online));
    }

    #[test]
    fn a_missing_mirror_side_degrades_and_says_cannot_open() {
        let dir = tempfile::tempdir().unwrap();
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(1, "a"), (3, "c"), (4, "d")]),
        );
        assert_eq!(state.health, VdevHealth::Degraded);
        assert_eq!(state.tops[0].health, VdevHealth::Degraded);
        let b = leaf(&state, 2);
        assert_eq!(b.path, dir.path().join("b"));
        assert_eq!(
            (b.health, b.problem),
            (VdevHealth::Unavail, Some(VdevProblem::CannotOpen))
        );
        assert_eq!(leaf(&state, 1).health, VdevHealth::Online);
        assert!(!state.only_logs_unavailable());
    }

    #[test]
    fn a_wiped_or_foreign_device_at_the_path_has_an_invalid_label() {
        let dir = tempfile::tempdir().unwrap();
        // b: a device of the right size whose labels were zeroed.
        FileDevice::create_sparse(&dir.path().join("b"), SIZE).unwrap();
        // c: another pool's device, now at c's path.
        labelled(dir.path(), "c", POOL_GUID + 1, 3);
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(1, "a"), (4, "d")]),
        );
        assert_eq!(leaf(&state, 2).problem, Some(VdevProblem::InvalidLabel));
        assert_eq!(leaf(&state, 3).problem, Some(VdevProblem::InvalidLabel));
        assert_eq!(state.tops[0].health, VdevHealth::Degraded);
        // The single-leaf top-level vdev is its leaf, and without it the pool is UNAVAIL.
        assert_eq!(
            (state.tops[1].health, state.tops[1].problem),
            (VdevHealth::Unavail, Some(VdevProblem::InvalidLabel))
        );
        assert_eq!(
            (state.health, state.problem),
            (VdevHealth::Unavail, Some(VdevProblem::InsufficientReplicas))
        );
    }

    #[test]
    fn a_mirror_with_no_side_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(3, "c"), (4, "d")]),
        );
        assert_eq!(
            (state.tops[0].health, state.tops[0].problem),
            (VdevHealth::Unavail, Some(VdevProblem::InsufficientReplicas))
        );
        assert_eq!(state.health, VdevHealth::Unavail);
        assert!(!state.only_logs_unavailable());
    }

    #[test]
    fn the_leaf_outside_the_searched_directories_is_named_so() {
        let dir = tempfile::tempdir().unwrap();
        labelled(dir.path(), "b", POOL_GUID, 2);
        // Another vdev of the same pool at b's path is not b.
        labelled(dir.path(), "c", POOL_GUID, 1);
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(1, "a"), (4, "d")]),
        );
        assert_eq!(leaf(&state, 2).problem, Some(VdevProblem::NotSearched));
        assert_eq!(leaf(&state, 3).problem, Some(VdevProblem::InvalidLabel));
    }

    #[test]
    fn a_missing_log_vdev_alone_is_for_import_m() {
        let dir = tempfile::tempdir().unwrap();
        let state = import_state(
            &config(dir.path()),
            &found(dir.path(), &[(1, "a"), (2, "b"), (3, "c")]),
        );
        assert_eq!(state.health, VdevHealth::Unavail);
        assert_eq!(state.tops[2].problem, Some(VdevProblem::CannotOpen));
        assert!(state.only_logs_unavailable());
    }
}
