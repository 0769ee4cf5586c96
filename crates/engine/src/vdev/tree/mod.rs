//! The in-memory vdev tree: top-level vdevs (single leaf or mirror) and their leaves.
//!
//! # Overview
//! A [`TopVdev`] maps a block I/O of its data area onto its children: a mirror writes every
//! child and reads one (`block/pipeline.rs` picks which, by dirty time log). A child that
//! misses a write logs the syncing txg in its DTL, and a child whose flush fails logs the txgs
//! of the writes that flush should have made durable ([`super::dtl`]).
//!
//! # Changing the tree while the pool is open
//! A `TopVdev`'s children never change: `pool attach|detach|replace|add`
//! (`pool/vdev_change.rs`) build the next *generation* of a vdev ([`TopVdev::with_children`]:
//! the same id, guid and geometry, sharing the leaves, the metaslab array id and the syncing
//! txg through `Arc`s) or new vdevs, and [`VdevTree::install`] swaps the list of top-level
//! vdevs under a write lock. Readers take a snapshot ([`VdevTree::tops`], [`VdevTree::top`],
//! [`VdevTree::leaves`]: `Arc` clones under a read lock held for nanoseconds) and use child
//! indices of that snapshot only, so one block I/O sees one tree from its first child to its
//! last, and an old generation (with its devices) lives until the last I/O holding it ends.
//! Only the sync thread installs, at the start of a txg, so syncing context (passes, scans,
//! labels, uberblock) sees one tree per txg; the config that changed is written into every
//! leaf's labels by that txg's commit (docs/design/01-vdev.md §2.14c).
//!
//! # Cost
//! One read-lock acquisition and an `Arc` clone per lookup of a top-level vdev; nothing per
//! txg while the tree does not change.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::dtl::DirtyTimeLog;
use super::label::{leaf_allocatable_bytes, LeafConfig, TopVdevConfig, TopVdevKind};
use super::queue::{write_each, Completion, DirtyProbe, IoClass, QueueLimits, VdevQueue};
use super::raidz::expand::RaidzReflow;
use super::raidz::widths::{RaidzExpansion, RaidzWidths};
use super::raidz::RaidzGeometry;

pub mod raidz_io;
pub mod raidz_layout;
pub mod raidz_reflow;
pub mod raidz_rows;
use super::{BlockDevice, LeafStats, VdevError, VDEV_LABEL_START_SIZE};
use crate::space::AllocClass;
use crate::types::{Guid, ObjectId, VdevId, SPA_MINBLOCKSHIFT};

/// Largest sector shift a top-level vdev may have (64 KiB sectors).
pub const VDEV_MAX_ASHIFT: u32 = 16;

/// Most children a RAID-Z vdev may have (OpenZFS's `VDEV_RAIDZ_MAXCHILDREN`).
pub const RAIDZ_CHILDREN_MAX: usize = 255;

/// One leaf device of a top-level vdev.
pub struct Leaf {
    pub guid: Guid,
    pub path: PathBuf,
    pub device: Arc<dyn BlockDevice>,
    pub stats: Arc<LeafStats>,
    /// The leaf's I/O scheduler: every data-area read and write goes through it.
    pub queue: VdevQueue,
    /// The txgs this leaf missed, and whether it is offline (see [`super::dtl`]).
    pub dtl: Arc<DirtyTimeLog>,
    /// The guid of the leaf this one replaces (`pool replace`), 0 if none: the old leaf is
    /// detached once this one's resilver has finished.
    replaces: AtomicU64,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Leaf")
            .field("guid", &self.guid)
            .field("path", &self.path)
            .field("device", &self.device.describe())
            .finish()
    }
}

impl Leaf {
    pub fn new(guid: Guid, path: PathBuf, device: Arc<dyn BlockDevice>) -> Leaf {
        let stats = Arc::new(LeafStats::new());
        Leaf {
            guid,
            path,
            queue: VdevQueue::new(device.clone(), stats.clone()),
            device,
            stats,
            dtl: Arc::new(DirtyTimeLog::new()),
            replaces: AtomicU64::new(0),
        }
    }

    /// The leaf this one replaces while a `pool replace` is in progress.
    pub fn replaces(&self) -> Option<Guid> {
        match self.replaces.load(Ordering::Acquire) {
            0 => None,
            guid => Some(Guid(guid)),
        }
    }

    /// Mark this leaf as the replacement of `old` (or not, with `None`).
    pub fn set_replaces(&self, old: Option<Guid>) {
        self.replaces
            .store(old.map_or(0, |guid| guid.0), Ordering::Release);
    }

    /// Bytes of this leaf's data area.
    pub fn allocatable_bytes(&self) -> u64 {
        leaf_allocatable_bytes(self.device.size_bytes())
    }

    /// Whether the leaf was taken offline (`pool offline`): it takes no I/O.
    pub fn is_offline(&self) -> bool {
        self.dtl.is_offline()
    }

    /// Whether I/O may be sent to this leaf: present and not offline.
    pub fn is_usable(&self) -> bool {
        !self.dtl.is_offline() && !self.device.is_missing()
    }
}

/// The error of an I/O not issued to `leaf` because it is offline.
fn offline_error(leaf: &Leaf) -> std::io::Error {
    std::io::Error::other(format!("{} is offline", leaf.path.display()))
}

/// A top-level vdev: one leaf, or a mirror of leaves. Block pointers address its data area.
#[derive(Debug)]
pub struct TopVdev {
    pub id: VdevId,
    pub guid: Guid,
    pub kind: TopVdevKind,
    /// Sector shift: every I/O is a multiple of `1 << ashift` at a multiple of it.
    pub ashift: u32,
    /// Bytes of the data area used (at most the smallest child's data area).
    pub asize: u64,
    pub ms_shift: u32,
    /// Object id of the metaslab array in the MOS; 0 until created. Use
    /// [`TopVdev::metaslab_array`] and [`TopVdev::set_metaslab_array`]. Shared by every
    /// generation of this vdev (see [`VdevTree::install`]).
    pub ms_array: Arc<AtomicU64>,
    /// The children of this generation of the vdev: fixed for its life. A changed set of
    /// children is a new generation ([`TopVdev::with_children`]) installed in the tree.
    pub children: Vec<Arc<Leaf>>,
    /// The txg the sync thread is writing: a child that misses a write logs it in its DTL.
    /// Shared by every generation of this vdev.
    write_txg: Arc<AtomicU64>,
    /// What the allocator may put here: `Log` for a separate intent-log vdev.
    pub class: AllocClass,
    /// RAID-Z only: the children of each column slot (see [`raidz_slots`]).
    slots: Vec<Vec<usize>>,
    /// RAID-Z only: the widths its blocks were written with, by birth (`raidz/widths.rs`).
    raidz_widths: Option<RaidzWidths>,
    /// RAID-Z only: an expansion is under way: the last slot was added and the reflow has not
    /// finished, so the vdev's space is still that of one child fewer.
    raidz_expanding: bool,
    /// While an expansion is under way: its copy's progress and lock, shared by every
    /// generation of the vdev.
    raidz_reflow: Option<Arc<RaidzReflow>>,
}

/// What a RAID-Z vdev's config says of its expansions (empty for every other vdev).
#[derive(Clone, Debug, Default)]
struct RaidzHistory {
    expansions: Vec<RaidzExpansion>,
    expanding: bool,
    /// The running copy, passed from one generation to the next (a new one for a vdev whose
    /// config says it is expanding and that has none yet).
    reflow: Option<Arc<RaidzReflow>>,
}

/// The column slots of a RAID-Z vdev's children, in column order: every child is a slot of its
/// own but one that replaces a child still present (`pool replace`), which joins that child's
/// slot and takes the same column, as a mirror side would. When the replace ends the new child
/// takes the old one's place in the list ([`TopVdev::with_children`] callers keep the order).
fn raidz_slots(children: &[Arc<Leaf>]) -> Vec<Vec<usize>> {
    let replaced_index = |leaf: &Leaf| {
        leaf.replaces()
            .and_then(|old| children.iter().position(|other| other.guid == old))
    };
    let mut slots: Vec<Vec<usize>> = Vec::with_capacity(children.len());
    let mut slot_of_child = vec![usize::MAX; children.len()];
    for (index, leaf) in children.iter().enumerate() {
        if replaced_index(leaf).is_none() {
            slot_of_child[index] = slots.len();
            slots.push(vec![index]);
        }
    }
    for (index, leaf) in children.iter().enumerate() {
        if let Some(old) = replaced_index(leaf) {
            if let Some(slot) = slots.get_mut(slot_of_child[old]) {
                slot.push(index);
            }
        }
    }
    slots
}

impl TopVdev {
    /// Build a top-level vdev, checking that its shape is sound and every child is large
    /// enough; the values may come from an on-disk config, so violations are errors.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: VdevId,
        guid: Guid,
        kind: TopVdevKind,
        ashift: u32,
        asize: u64,
        ms_shift: u32,
        ms_array: ObjectId,
        children: Vec<Leaf>,
    ) -> Result<TopVdev, VdevError> {
        TopVdev::build(
            id,
            guid,
            kind,
            ashift,
            asize,
            ms_shift,
            Arc::new(AtomicU64::new(ms_array.0)),
            Arc::new(AtomicU64::new(0)),
            children.into_iter().map(Arc::new).collect(),
            RaidzHistory::default(),
        )
    }

    /// The next generation of this vdev: the same vdev (id, guid, geometry, metaslab array,
    /// syncing txg) with `children` of `kind`, checked as [`TopVdev::new`] checks a config.
    pub fn with_children(
        &self,
        kind: TopVdevKind,
        children: Vec<Arc<Leaf>>,
    ) -> Result<TopVdev, VdevError> {
        TopVdev::build(
            self.id,
            self.guid,
            kind,
            self.ashift,
            self.asize,
            self.ms_shift,
            self.ms_array.clone(),
            self.write_txg.clone(),
            children,
            self.raidz_history(),
        )
        .map(|top| top.in_class(self.class))
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        id: VdevId,
        guid: Guid,
        kind: TopVdevKind,
        ashift: u32,
        asize: u64,
        ms_shift: u32,
        ms_array: Arc<AtomicU64>,
        write_txg: Arc<AtomicU64>,
        children: Vec<Arc<Leaf>>,
        raidz_history: RaidzHistory,
    ) -> Result<TopVdev, VdevError> {
        let invalid = |what: String| Err(VdevError::InvalidConfig { top: id, what });
        let slots = match kind {
            TopVdevKind::Raidz { .. } => raidz_slots(&children),
            _ => Vec::new(),
        };
        let width = match kind {
            TopVdevKind::Raidz { .. } => slots.len(),
            _ => children.len(),
        };
        let in_slots: usize = slots.iter().map(Vec::len).sum();
        if matches!(kind, TopVdevKind::Raidz { .. }) && in_slots != children.len() {
            return invalid(format!(
                "{} raidz children replace a child that is itself being replaced",
                children.len() - in_slots
            ));
        }
        match (kind, width) {
            (_, 0) => return invalid("no children".to_string()),
            (TopVdevKind::Leaf, count) if count != 1 => {
                return invalid(format!("a leaf top-level vdev with {count} children"))
            }
            (TopVdevKind::Raidz { parity }, count) => {
                if !(1..=3).contains(&parity) {
                    return invalid(format!("raidz parity {parity} outside 1..=3"));
                }
                if count < parity as usize + 1 || count > RAIDZ_CHILDREN_MAX {
                    return invalid(format!(
                        "raidz{parity} with {count} children (it takes {} to {RAIDZ_CHILDREN_MAX})",
                        parity + 1
                    ));
                }
            }
            _ => {}
        }
        let raidz_widths = match kind {
            TopVdevKind::Raidz { parity } => Some(
                RaidzWidths::new(
                    width,
                    parity as usize,
                    &raidz_history.expansions,
                    raidz_history.expanding,
                )
                .map_err(|what| VdevError::InvalidConfig { top: id, what })?,
            ),
            _ if raidz_history.expanding || !raidz_history.expansions.is_empty() => {
                return invalid("raidz expansions recorded for a vdev that is not raidz".into())
            }
            _ => None,
        };
        if !(SPA_MINBLOCKSHIFT..=VDEV_MAX_ASHIFT).contains(&ashift) {
            return invalid(format!(
                "ashift {ashift} outside {SPA_MINBLOCKSHIFT}..={VDEV_MAX_ASHIFT}"
            ));
        }
        if asize == 0 || asize & ((1 << ashift) - 1) != 0 {
            return invalid(format!(
                "asize {asize} is not a positive multiple of the sector size"
            ));
        }
        // A config's metaslab geometry is refused here, before devices are read or any metaslab
        // is built: a crafted label could otherwise ask import for millions of metaslabs.
        if let Err(what) = crate::space::check_metaslab_geometry(asize, ms_shift, ashift) {
            return invalid(what);
        }
        // A RAID-Z vdev's address space is striped over its children: each holds its share
        // (of the old stripe while an expansion runs: a sector is copied to the wider one only
        // by the reflow).
        let per_child = match kind {
            TopVdevKind::Raidz { .. } => {
                asize.div_ceil((width - usize::from(raidz_history.expanding)) as u64)
            }
            _ => asize,
        };
        for child in &children {
            if child.allocatable_bytes() < per_child {
                return Err(VdevError::DeviceTooSmall {
                    device: child.device.describe(),
                    size_bytes: child.device.size_bytes(),
                    minimum_bytes: per_child
                        + super::VDEV_LABEL_START_SIZE
                        + super::VDEV_LABEL_END_SIZE,
                });
            }
        }
        Ok(TopVdev {
            id,
            guid,
            kind,
            ashift,
            asize,
            ms_shift,
            ms_array,
            children,
            slots,
            write_txg,
            class: AllocClass::Normal,
            raidz_widths,
            raidz_expanding: raidz_history.expanding,
            raidz_reflow: raidz_history.expanding.then(|| {
                raidz_history
                    .reflow
                    .unwrap_or_else(|| Arc::new(RaidzReflow::new(1 << ashift)))
            }),
        })
    }

    /// What this vdev's config says of RAID-Z expansions.
    fn raidz_history(&self) -> RaidzHistory {
        RaidzHistory {
            expansions: self
                .raidz_widths
                .as_ref()
                .map_or_else(Vec::new, |widths| widths.expansions().to_vec()),
            expanding: self.raidz_expanding,
            reflow: self.raidz_reflow.clone(),
        }
    }

    /// Bytes of data area every child needs: the vdev's for a mirror child, its share of the
    /// striped address space for a RAID-Z child (of one child fewer while an expansion runs).
    pub fn child_asize(&self) -> u64 {
        match self.kind {
            TopVdevKind::Raidz { .. } => self
                .asize
                .div_ceil((self.slots.len() - usize::from(self.raidz_expanding)) as u64),
            _ => self.asize,
        }
    }

    /// The widths this RAID-Z vdev's blocks were written with, by birth; `None` for a leaf or
    /// a mirror.
    pub fn raidz_widths(&self) -> Option<&RaidzWidths> {
        self.raidz_widths.as_ref()
    }

    /// Whether a RAID-Z expansion of this vdev is under way.
    pub fn raidz_expanding(&self) -> bool {
        self.raidz_expanding
    }

    /// The copy of the expansion under way, if any.
    pub fn raidz_reflow(&self) -> Option<&Arc<RaidzReflow>> {
        self.raidz_reflow.as_ref()
    }

    /// The children (indices) of RAID-Z column slot `slot`: the slot's leaf, then the leaf
    /// replacing it while a `pool replace` runs. Empty for a leaf or a mirror.
    pub fn slot_children(&self, slot: usize) -> &[usize] {
        self.slots.get(slot).map_or(&[], Vec::as_slice)
    }

    /// The RAID-Z column slot child `child` serves.
    pub fn slot_of(&self, child: usize) -> Option<usize> {
        self.slots.iter().position(|slot| slot.contains(&child))
    }

    /// The RAID-Z column slots none of whose children can take I/O (a mirror's children, for a
    /// mirror): how many columns a read must do without.
    pub fn slots_gone(&self) -> usize {
        if self.slots.is_empty() {
            return self
                .children
                .iter()
                .filter(|leaf| leaf.health() != VdevHealth::Online)
                .count();
        }
        self.slots
            .iter()
            .filter(|slot| {
                slot.iter()
                    .all(|&child| self.children[child].health() != VdevHealth::Online)
            })
            .count()
    }

    /// This vdev in allocation class `class` (new vdevs are `Normal`).
    pub fn in_class(mut self, class: AllocClass) -> TopVdev {
        self.class = class;
        self
    }

    /// Whether this is a separate intent-log vdev.
    pub fn is_log(&self) -> bool {
        self.class == AllocClass::Log
    }

    /// Build a top-level vdev from its config, opening each child with `open`.
    pub fn from_config(
        config: &TopVdevConfig,
        mut open: impl FnMut(&LeafConfig) -> Result<Arc<dyn BlockDevice>, VdevError>,
    ) -> Result<TopVdev, VdevError> {
        let mut children = Vec::with_capacity(config.children.len());
        for child in &config.children {
            let device = open(child)?;
            let leaf = Leaf::new(Guid(child.guid), PathBuf::from(&child.path), device);
            leaf.set_replaces(Some(Guid(child.replaces)).filter(|guid| guid.0 != 0));
            children.push(Arc::new(leaf));
        }
        TopVdev::with_config_children(config, children)
    }

    /// Build a top-level vdev from its config over `children` already opened (in the
    /// config's order), checked as [`TopVdev::new`] checks; a RAID-Z vdev keeps the widths and
    /// the expansion under way its config records.
    pub fn with_config_children(
        config: &TopVdevConfig,
        children: Vec<Arc<Leaf>>,
    ) -> Result<TopVdev, VdevError> {
        TopVdev::build(
            VdevId(config.id),
            Guid(config.guid),
            config.kind,
            config.ashift,
            config.asize,
            config.ms_shift,
            Arc::new(AtomicU64::new(config.ms_array)),
            Arc::new(AtomicU64::new(0)),
            children,
            RaidzHistory {
                expansions: config.raidz_expansions.clone(),
                expanding: config.raidz_expanding,
                reflow: None,
            },
        )
        .map(|top| top.in_class(config.class))
    }

    /// The largest sector-aligned `asize` that fits every one of `devices`.
    pub fn allocatable_bytes_for(devices: &[Arc<dyn BlockDevice>], ashift: u32) -> u64 {
        let smallest = devices
            .iter()
            .map(|device| leaf_allocatable_bytes(device.size_bytes()))
            .min()
            .unwrap_or(0);
        smallest & !((1u64 << ashift) - 1)
    }

    /// This vdev's config entry.
    pub fn to_config(&self) -> TopVdevConfig {
        TopVdevConfig {
            id: self.id.0,
            guid: self.guid.0,
            kind: self.kind,
            ashift: self.ashift,
            asize: self.asize,
            ms_shift: self.ms_shift,
            ms_array: self.metaslab_array().0,
            children: self
                .children
                .iter()
                .map(|leaf| LeafConfig {
                    guid: leaf.guid.0,
                    path: leaf.path.display().to_string(),
                    replaces: leaf.replaces().map_or(0, |guid| guid.0),
                })
                .collect(),
            class: self.class,
            raidz_expansions: self
                .raidz_widths
                .as_ref()
                .map_or_else(Vec::new, |widths| widths.expansions().to_vec()),
            raidz_expanding: self.raidz_expanding,
        }
    }

    /// The txg missed writes are logged against (see [`super::dtl`]); at least 1.
    /// The RAID-Z geometry of this vdev, `None` for a leaf or a mirror.
    pub fn raidz_geometry(&self) -> Option<RaidzGeometry> {
        match self.kind {
            TopVdevKind::Raidz { parity } => Some(RaidzGeometry::new(
                self.slots.len(),
                parity as usize,
                self.ashift,
            )),
            _ => None,
        }
    }

    /// The factor turning bytes allocated here into the data bytes they stand for
    /// ([`VdevTree::deflated`]): [`DEFLATE_IDENTITY`] but for RAID-Z
    /// ([`RaidzGeometry::deflate_ratio`]).
    /// A RAID-Z vdev keeps the ratio of its original width through its expansions (OpenZFS
    /// `vdev_set_deflate_ratio`): the space its old blocks were charged does not change.
    pub fn deflate_ratio(&self) -> u64 {
        match (self.kind, &self.raidz_widths) {
            (TopVdevKind::Raidz { parity }, Some(widths)) => {
                RaidzGeometry::new(widths.original(), parity as usize, self.ashift).deflate_ratio()
            }
            _ => DEFLATE_IDENTITY,
        }
    }

    /// Bytes a block of `size` padded physical bytes written now takes here: its sectors, and
    /// for RAID-Z its parity and padding ([`RaidzGeometry::asize`]) at the width new blocks
    /// are written with (an expansion under way writes them at the width it started from). A
    /// block written earlier: [`TopVdev::asize_at`].
    pub fn asize_of(&self, size: u64) -> u64 {
        match self.raidz_write_geometry() {
            Some(geometry) => geometry.asize(size),
            None => size.div_ceil(self.sector_size()) * self.sector_size(),
        }
    }

    /// How the space layer sizes allocations here: for RAID-Z at the width of the allocation's
    /// txg ([`TopVdev::asize_at`]), so that a finished expansion's width applies from the txg
    /// its config names, not from when the space layer learns of it.
    pub fn alloc_unit(&self) -> crate::space::AllocUnit {
        match (self.raidz_geometry(), &self.raidz_widths) {
            (Some(geometry), Some(widths)) => {
                let widths = widths.clone();
                crate::space::AllocUnit::computed(
                    self.ashift,
                    Arc::new(move |size, txg| {
                        RaidzGeometry::new(widths.width_at(txg.0), geometry.parity, geometry.ashift)
                            .asize(size)
                    }),
                )
            }
            _ => crate::space::AllocUnit::sectors(self.ashift),
        }
    }

    /// The bytes of a block to hand to this vdev's writes, from its physical bytes `padded` to
    /// the pool's allocation size: unchanged for a mirror (every child holds the allocation);
    /// for RAID-Z the `size_physical` bytes rounded up to this vdev's sector, since the block's
    /// map is built from that length and a reader knows only the block pointer's size.
    pub fn block_bytes(&self, padded: &Arc<Vec<u8>>, size_physical: u64) -> Arc<Vec<u8>> {
        if self.raidz_geometry().is_none() {
            return padded.clone();
        }
        let length = (size_physical.div_ceil(self.sector_size()) * self.sector_size()) as usize;
        if length == padded.len() {
            padded.clone()
        } else {
            let mut bytes = padded[..length.min(padded.len())].to_vec();
            bytes.resize(length, 0);
            Arc::new(bytes)
        }
    }

    /// Rewrite what child `child` holds of the block at `offset` (allocated `allocated` bytes,
    /// born physically in `birth`) whose verified physical bytes are `physical`: a mirror child
    /// gets the whole block padded to its allocation, a RAID-Z child its column or cells (data,
    /// or parity regenerated). Bytes written.
    pub fn rewrite_child(
        &self,
        child: usize,
        offset: u64,
        allocated: u64,
        birth: u64,
        physical: &[u8],
    ) -> Result<u64, VdevError> {
        match self.raidz_layout(offset, physical.len() as u64, birth) {
            Some(layout) => self.rewrite_raidz_child(layout, child, offset, physical),
            None => {
                let mut padded = physical.to_vec();
                padded.resize(allocated as usize, 0);
                self.write_child(child, offset, &padded)?;
                Ok(allocated)
            }
        }
    }

    /// [`TopVdev::rewrite_child`] without waiting: `done` gets its outcome (on a queue worker,
    /// or at once on this thread when there is nothing to write or the child is offline). The
    /// bytes are written from `physical` itself where they can be (a mirror copy of a block
    /// that fills its allocation, a RAID-Z data column).
    pub fn rewrite_child_async(
        &self,
        child: usize,
        offset: u64,
        allocated: u64,
        birth: u64,
        physical: Arc<Vec<u8>>,
        done: impl FnOnce(Result<u64, VdevError>) + Send + 'static,
    ) {
        if let Some(layout) = self.raidz_layout(offset, physical.len() as u64, birth) {
            return self.rewrite_raidz_child_async(layout, child, offset, physical, done);
        }
        let data = if physical.len() as u64 == allocated {
            physical
        } else {
            let mut padded = physical.to_vec();
            padded.resize(allocated as usize, 0);
            Arc::new(padded)
        };
        self.assert_range(offset, data.len());
        let range = 0..data.len();
        write_leaf_async(
            &self.children[child],
            VDEV_LABEL_START_SIZE + offset,
            data,
            range,
            done,
        );
    }

    pub fn write_txg(&self) -> u64 {
        self.write_txg.load(Ordering::Acquire).max(1)
    }

    pub fn metaslab_array(&self) -> ObjectId {
        ObjectId(self.ms_array.load(Ordering::Acquire))
    }

    pub fn set_metaslab_array(&self, object: ObjectId) {
        self.ms_array.store(object.0, Ordering::Release);
    }

    pub fn sector_size(&self) -> u64 {
        1 << self.ashift
    }

    pub fn child_count(&self) -> usize {
        self.children.len()
    }

    /// Whether `[offset, offset + length)` is a valid I/O range of the data area: non-empty,
    /// sector aligned and inside `asize`. Callers check offsets read from disk with this.
    pub fn contains(&self, offset: u64, length: u64) -> bool {
        let sector_mask = self.sector_size() - 1;
        length > 0
            && offset & sector_mask == 0
            && length & sector_mask == 0
            && offset
                .checked_add(length)
                .is_some_and(|end| end <= self.asize)
    }

    fn assert_range(&self, offset: u64, length: usize) {
        assert!(
            self.contains(offset, length as u64),
            "vdev {}: I/O of {length} bytes at {offset} is unaligned (ashift {}) or outside asize {}",
            self.id,
            self.ashift,
            self.asize
        );
    }

    /// Write `data` at `offset` of the data area on every child at once, in class `class`, and
    /// wait for them. Succeeds if at least one child took it; each child that failed counts a
    /// write error and logs the syncing txg as missed. Fails with [`VdevError::NoChildWritten`]
    /// if no child took it. Syncing context; a write made outside it uses
    /// [`TopVdev::write_in_txg`].
    pub fn write(&self, class: IoClass, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        self.write_in_txg(class, offset, data, self.write_txg())
    }

    /// [`TopVdev::write`] of a block born in `txg`, which a child that misses the write logs
    /// as missed. Writes made outside syncing context (blocks written ahead for the intent log,
    /// log blocks) belong to an open txg, later than the one syncing: logged against the
    /// syncing txg, a side that came back before their txg synced would have no record of
    /// them, and a resilver, which copies blocks by birth txg, would leave them stale.
    pub fn write_in_txg(
        &self,
        class: IoClass,
        offset: u64,
        data: &[u8],
        txg: u64,
    ) -> Result<(), VdevError> {
        self.assert_range(offset, data.len());
        if let Some(layout) = self.raidz_layout(offset, data.len() as u64, txg) {
            return self.write_raidz(layout, class, offset, data, txg);
        }
        let device_offset = VDEV_LABEL_START_SIZE + offset;
        let usable: Vec<&Arc<Leaf>> = self.children.iter().filter(|c| !c.is_offline()).collect();
        let queues: Vec<&VdevQueue> = usable.iter().map(|child| &child.queue).collect();
        let results = write_each(&queues, class, device_offset, data);
        let outcome =
            MirrorWrite::new(self.id, offset, data.len() as u64, self.children.len(), txg);
        for (child, result) in usable.into_iter().zip(results) {
            outcome.child_done(child, result);
        }
        for child in self.children.iter().filter(|c| c.is_offline()) {
            outcome.child_done(child, Err(offline_error(child)));
        }
        outcome.finish()
    }

    /// Queue a write of `data` at `offset` of the data area to every child in class `class`;
    /// `done` runs (on an I/O thread) when every child has finished, with the result
    /// [`TopVdev::write`] would return.
    pub fn write_async(
        &self,
        class: IoClass,
        offset: u64,
        data: Arc<Vec<u8>>,
        done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
    ) {
        self.write_async_in_txg(class, offset, data, self.write_txg(), done)
    }

    /// [`TopVdev::write_async`] of a block born in `txg` (see [`TopVdev::write_in_txg`]).
    pub fn write_async_in_txg(
        &self,
        class: IoClass,
        offset: u64,
        data: Arc<Vec<u8>>,
        txg: u64,
        done: impl FnOnce(Result<(), VdevError>) + Send + 'static,
    ) {
        self.assert_range(offset, data.len());
        if let Some(layout) = self.raidz_layout(offset, data.len() as u64, txg) {
            return self.write_raidz_async(layout, class, offset, data, txg, done);
        }
        let device_offset = VDEV_LABEL_START_SIZE + offset;
        let outcome = Arc::new(MirrorWrite::new(
            self.id,
            offset,
            data.len() as u64,
            self.children.len(),
            txg,
        ));
        let done: Arc<Mutex<Option<WriteDone>>> = Arc::new(Mutex::new(Some(Box::new(done))));
        for child in &self.children {
            let outcome = outcome.clone();
            let done = done.clone();
            let dtl = child.dtl.clone();
            let device = child.device.clone();
            if child.is_offline() {
                if outcome.child_result(&dtl, &*device, Err(offline_error(child))) {
                    if let Some(done) = done.lock().take() {
                        done(outcome.finish());
                    }
                }
                continue;
            }
            child.queue.write_shared(
                class,
                device_offset,
                data.clone(),
                Completion::new(move |result| {
                    let last = outcome.child_result(&dtl, &*device, result);
                    if last {
                        if let Some(done) = done.lock().take() {
                            done(outcome.finish());
                        }
                    }
                }),
            );
        }
    }

    /// Write `data` at `offset` of the data area on child `child` only: the byte-identical repair
    /// of one damaged copy from a good one.
    pub fn write_child(&self, child: usize, offset: u64, data: &[u8]) -> Result<(), VdevError> {
        assert!(
            self.raidz_geometry().is_none(),
            "vdev {}: a RAID-Z child holds columns, not copies (rewrite_child)",
            self.id
        );
        assert!(
            child < self.children.len(),
            "vdev {}: child {child} of {}",
            self.id,
            self.children.len()
        );
        self.assert_range(offset, data.len());
        let leaf = &self.children[child];
        let device_offset = VDEV_LABEL_START_SIZE + offset;
        let result = if leaf.is_offline() {
            Err(offline_error(leaf))
        } else {
            leaf.queue.write(IoClass::AsyncWrite, device_offset, data)
        };
        result.map_err(|source| {
            VdevError::io(
                &*leaf.device,
                "write",
                device_offset,
                data.len() as u64,
                source,
            )
        })
    }

    /// Read `buf.len()` bytes at `offset` of the data area from child `child`, in class `class`.
    pub fn read_child(
        &self,
        class: IoClass,
        child: usize,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), VdevError> {
        assert!(
            self.raidz_geometry().is_none(),
            "vdev {}: a RAID-Z child holds columns, not copies (raidz::read_block)",
            self.id
        );
        assert!(
            child < self.children.len(),
            "vdev {}: child {child} of {}",
            self.id,
            self.children.len()
        );
        self.assert_range(offset, buf.len());
        let leaf = &self.children[child];
        let device_offset = VDEV_LABEL_START_SIZE + offset;
        let result = if leaf.is_offline() {
            Err(offline_error(leaf))
        } else {
            leaf.queue.read(class, device_offset, buf)
        };
        result.map_err(|source| {
            VdevError::io(
                &*leaf.device,
                "read",
                device_offset,
                buf.len() as u64,
                source,
            )
        })
    }

    /// Flush every child. A child whose flush fails counts a write error and logs in its DTL
    /// the txgs of the writes it took since its last flush began: they may not be durable, so
    /// a resilver must copy them again (see [`super::dtl`], "Failed flushes"). Fails with
    /// [`VdevError::NoChildFlushed`] if no child flushed.
    pub fn flush(&self) -> Result<(), VdevError> {
        let mut flushed = 0usize;
        let mut first_error = None;
        for child in self.children.iter().filter(|child| !child.is_offline()) {
            let unflushed_first_txg = child.dtl.begin_flush();
            match child.device.flush() {
                Ok(()) => flushed += 1,
                Err(source) => {
                    child.stats.record_write_error();
                    child
                        .dtl
                        .flush_failed(unflushed_first_txg, self.write_txg());
                    first_error.get_or_insert(VdevError::io(&*child.device, "flush", 0, 0, source));
                }
            }
        }
        if flushed == 0 {
            return Err(VdevError::NoChildFlushed {
                top: self.id,
                first_error: first_error
                    .map(|error| error.to_string())
                    .unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// Count a checksum error against child `child` (the block pipeline found a bad copy).
    pub fn record_checksum_error(&self, child: usize) {
        assert!(child < self.children.len());
        let leaf = &self.children[child];
        // Before an import has loaded the leaf's log, a copy that fails may only be stale.
        if leaf.dtl.is_loaded() {
            leaf.stats.record_checksum_error();
        }
    }
}

/// Write bytes `range` of `data` at `device_offset` of `leaf` without waiting (a repair or a
/// resilver's rewrite): `done` gets the bytes written or the error, on a queue worker, or at
/// once on this thread when the leaf is offline.
fn write_leaf_async(
    leaf: &Arc<Leaf>,
    device_offset: u64,
    data: Arc<Vec<u8>>,
    range: std::ops::Range<usize>,
    done: impl FnOnce(Result<u64, VdevError>) + Send + 'static,
) {
    let size = range.len() as u64;
    if leaf.is_offline() {
        let error = VdevError::io(
            &*leaf.device,
            "write",
            device_offset,
            size,
            offline_error(leaf),
        );
        return done(Err(error));
    }
    let queue_leaf = leaf.clone();
    leaf.queue.write_shared_range(
        IoClass::AsyncWrite,
        device_offset,
        data,
        range,
        Completion::new(move |result: std::io::Result<()>| {
            done(result.map(|()| size).map_err(|source| {
                VdevError::io(&*queue_leaf.device, "write", device_offset, size, source)
            }))
        }),
    );
}

/// What runs when a top-level vdev's asynchronous write has finished on every child.
type WriteDone = Box<dyn FnOnce(Result<(), VdevError>) + Send>;

/// The outcome of one write to every child of a top-level vdev, gathered as the children
/// finish: a child that failed counts nothing here (its queue counted the error), records
/// the missed range, and keeps the first error for the message.
struct MirrorWrite {
    top: VdevId,
    offset: u64,
    length: u64,
    txg: u64,
    remaining: AtomicU64,
    written: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl MirrorWrite {
    fn new(top: VdevId, offset: u64, length: u64, children: usize, txg: u64) -> MirrorWrite {
        MirrorWrite {
            top,
            offset,
            length,
            txg,
            remaining: AtomicU64::new(children as u64),
            written: AtomicU64::new(0),
            first_error: Mutex::new(None),
        }
    }

    fn child_done(&self, child: &Leaf, result: std::io::Result<()>) {
        self.child_result(&child.dtl, &*child.device, result);
    }

    /// Record one child's result; true when it was the last child.
    fn child_result(
        &self,
        dtl: &DirtyTimeLog,
        device: &dyn BlockDevice,
        result: std::io::Result<()>,
    ) -> bool {
        match result {
            Ok(()) => {
                dtl.note_written(self.txg);
                self.written.fetch_add(1, Ordering::AcqRel);
            }
            Err(source) => {
                dtl.record(self.txg);
                let error = VdevError::io(
                    device,
                    "write",
                    VDEV_LABEL_START_SIZE + self.offset,
                    self.length,
                    source,
                );
                self.first_error.lock().get_or_insert(error.to_string());
            }
        }
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    fn finish(&self) -> Result<(), VdevError> {
        if self.written.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        Err(VdevError::NoChildWritten {
            top: self.top,
            offset: self.offset,
            length: self.length,
            first_error: self.first_error.lock().clone().unwrap_or_default(),
        })
    }
}

/// All top-level vdevs of a pool.
///
/// The set of top-level vdevs, and each one's children, can change while the pool is open
/// (`pool attach|detach|replace|add`, pool/vdev_change.rs). A [`TopVdev`] never changes its
/// children: a change builds the next generation of the vdev ([`TopVdev::with_children`], which
/// shares the leaves, the metaslab array and the syncing txg with the old one) or a new vdev,
/// and [`VdevTree::install`] swaps the whole list under a write lock. Readers take a snapshot
/// ([`VdevTree::tops`], [`VdevTree::top`]: an `Arc` clone under a read lock held for
/// nanoseconds) and use child indices of that snapshot only, so a block in flight sees one
/// consistent tree from its first child to its last; an old generation lives on, its devices
/// open, until the last I/O holding it finishes. Only the sync thread installs, at the start
/// of a txg, so everything in syncing context (the sync passes, the scan, labels and the
/// uberblock) sees one tree for the whole txg.
pub struct VdevTree {
    tops: RwLock<Arc<Vec<Arc<TopVdev>>>>,
    /// The queue limits and dirty probe last applied ([`VdevTree::configure_queues`]): leaves
    /// installed later get them too.
    queue_setup: Mutex<Option<(QueueLimits, Option<DirtyProbe>)>>,
    /// The txg the sync thread is writing (given to vdevs installed later).
    syncing_txg: AtomicU64,
    /// When the tree was opened (pool created or imported): the leaves' counters start here,
    /// and `iostat`'s first report covers the time since.
    pub opened_at: std::time::Instant,
    /// Each top-level vdev's deflate ratio, indexed by id ([`VdevTree::deflated`]), and
    /// whether any differs from the identity (no RAID-Z: every lookup is skipped).
    deflate_ratios: RwLock<Arc<[u64]>>,
    deflates: std::sync::atomic::AtomicBool,
    /// The smallest deflate ratio of the normal class ([`VdevTree::deflated_space`]).
    space_deflate_ratio: AtomicU64,
}

impl std::fmt::Debug for VdevTree {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("VdevTree")
            .field("tops", &self.tops())
            .finish()
    }
}

impl Default for VdevTree {
    fn default() -> Self {
        VdevTree::new(Vec::new())
    }
}

/// The deflate ratio of a vdev without parity: `(1 << 17) / ((1 << 17) >> 9)`, so that
/// [`deflate`] gives back the allocated bytes (a multiple of 512).
pub const DEFLATE_IDENTITY: u64 = 1 << SPA_MINBLOCKSHIFT;

/// `asize` bytes deflated by `ratio` (OpenZFS: `(asize >> SPA_MINBLOCKSHIFT) * ratio`).
pub fn deflate(asize: u64, ratio: u64) -> u64 {
    (asize >> SPA_MINBLOCKSHIFT) * ratio
}

fn assert_unique_ids(tops: &[Arc<TopVdev>]) {
    let mut ids: Vec<VdevId> = tops.iter().map(|top| top.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), tops.len(), "duplicate top-level vdev ids");
}

impl VdevTree {
    pub fn new(tops: Vec<Arc<TopVdev>>) -> VdevTree {
        assert_unique_ids(&tops);
        let tree = VdevTree {
            tops: RwLock::new(Arc::new(Vec::new())),
            queue_setup: Mutex::new(None),
            syncing_txg: AtomicU64::new(0),
            opened_at: std::time::Instant::now(),
            deflate_ratios: RwLock::new(Arc::from(Vec::new())),
            deflates: std::sync::atomic::AtomicBool::new(false),
            space_deflate_ratio: AtomicU64::new(DEFLATE_IDENTITY),
        };
        tree.set_tops(tops);
        tree
    }

    /// Install `tops` and the deflate ratios they imply.
    fn set_tops(&self, tops: Vec<Arc<TopVdev>>) {
        let width = tops
            .iter()
            .map(|top| top.id.0 as usize + 1)
            .max()
            .unwrap_or(0);
        let mut ratios = vec![DEFLATE_IDENTITY; width];
        for top in &tops {
            ratios[top.id.0 as usize] = top.deflate_ratio();
        }
        let deflates = ratios.iter().any(|&ratio| ratio != DEFLATE_IDENTITY);
        let space_ratio = tops
            .iter()
            .filter(|top| top.class == AllocClass::Normal)
            .map(|top| top.deflate_ratio())
            .min()
            .unwrap_or(DEFLATE_IDENTITY);
        // Ratios before the tree: a block allocated on a new vdev is looked up after both.
        *self.deflate_ratios.write() = Arc::from(ratios);
        self.deflates.store(deflates, Ordering::Release);
        self.space_deflate_ratio
            .store(space_ratio, Ordering::Release);
        *self.tops.write() = Arc::new(tops);
    }

    /// The space accounting counts for `asize` bytes allocated on top-level vdev `vdev`
    /// (OpenZFS's `bp_get_dsize_sync` per DVA: `(asize >> 9) * vdev_deflate_ratio`): the
    /// allocated bytes themselves on a single disk or a mirror, the data bytes RAID-Z's
    /// parity and padding stand for on a RAID-Z vdev, so that a dataset's `used` and the
    /// pool's `avail` speak of data, as `zfs list` does (`zpool list` keeps raw sizes). A
    /// vdev the tree does not know counts as undeflated.
    pub fn deflated(&self, vdev: VdevId, asize: u64) -> u64 {
        if !self.deflates.load(Ordering::Acquire) {
            return asize;
        }
        let ratio = self
            .deflate_ratios
            .read()
            .get(vdev.0 as usize)
            .copied()
            .unwrap_or(DEFLATE_IDENTITY);
        deflate(asize, ratio)
    }

    /// `raw` bytes of free space of the normal class as the data bytes they can hold (the
    /// pool's `avail`, OpenZFS's `spa_get_dspace`): deflated by the class's smallest ratio,
    /// exact when its vdevs are alike (as zpool requires without `-f`), and never more than
    /// a mix of RAID-Z and mirrors could hold.
    pub fn deflated_space(&self, raw: u64) -> u64 {
        deflate(raw, self.space_deflate_ratio.load(Ordering::Acquire))
    }

    /// Whether some top-level vdev deflates (a RAID-Z vdev): without one, [`Self::deflated`]
    /// is the identity.
    pub fn deflates(&self) -> bool {
        self.deflates.load(Ordering::Acquire)
    }

    /// A snapshot of the top-level vdevs, in id order of creation. It stays valid (and its
    /// devices open) however the tree changes meanwhile.
    pub fn tops(&self) -> Arc<Vec<Arc<TopVdev>>> {
        self.tops.read().clone()
    }

    /// Replace the top-level vdevs by `tops` (the next generation of the tree). Leaves new to
    /// the tree get the queue setup, and new vdevs the syncing txg. Called by the sync thread
    /// only, at the start of a txg (pool/vdev_change.rs).
    pub fn install(&self, tops: Vec<Arc<TopVdev>>) {
        assert_unique_ids(&tops);
        let txg = self.syncing_txg.load(Ordering::Acquire);
        let setup = self.queue_setup.lock().clone();
        for top in &tops {
            top.write_txg.store(txg, Ordering::Release);
            if let Some((limits, dirty)) = &setup {
                for leaf in &top.children {
                    leaf.queue.configure(*limits, dirty.clone());
                }
            }
        }
        self.set_tops(tops);
    }

    /// The top-level vdev with this id (ids are never reused, so not an index).
    pub fn top(&self, id: VdevId) -> Option<Arc<TopVdev>> {
        self.tops.read().iter().find(|top| top.id == id).cloned()
    }

    /// Wrapping sum of the guids of every vdev, top-level and leaf; the uberblock carries it
    /// so that import notices a missing or foreign device.
    pub fn guid_sum(&self) -> u64 {
        self.tops().iter().fold(0u64, |sum, top| {
            top.children
                .iter()
                .fold(sum.wrapping_add(top.guid.0), |sum, leaf| {
                    sum.wrapping_add(leaf.guid.0)
                })
        })
    }

    /// Apply the scheduling limits (from the pool's tunables) and the pool's dirty-data probe
    /// to every leaf's queue, and to leaves installed later.
    pub fn configure_queues(&self, limits: QueueLimits, dirty: Option<DirtyProbe>) {
        for leaf in self.leaves() {
            leaf.queue.configure(limits, dirty.clone());
        }
        *self.queue_setup.lock() = Some((limits, dirty));
    }

    /// Set the txg the sync thread is writing, against which every child that misses a write
    /// logs it (see [`super::dtl`]).
    pub fn set_syncing_txg(&self, txg: u64) {
        self.syncing_txg.store(txg, Ordering::Release);
        for top in self.tops().iter() {
            top.write_txg.store(txg, Ordering::Release);
        }
    }

    /// The leaf with this guid, with (a snapshot of) its top-level vdev.
    pub fn leaf_by_guid(&self, guid: Guid) -> Option<(Arc<TopVdev>, usize)> {
        self.tops().iter().find_map(|top| {
            top.children
                .iter()
                .position(|leaf| leaf.guid == guid)
                .map(|index| (top.clone(), index))
        })
    }

    /// Every leaf of every top-level vdev (of one snapshot of the tree).
    pub fn leaves(&self) -> impl Iterator<Item = Arc<Leaf>> {
        let leaves: Vec<Arc<Leaf>> = self
            .tops()
            .iter()
            .flat_map(|top| top.children.iter().cloned())
            .collect();
        leaves.into_iter()
    }

    /// Flush every top-level vdev; all are attempted and the first failure is returned.
    pub fn flush_all(&self) -> Result<(), VdevError> {
        let mut first_error = None;
        for top in self.tops().iter() {
            match top.flush() {
                Ok(()) => {}
                // A log vdev holds no block of any txg (its log blocks are durable when their
                // write completes), only its labels: a failed flush there, as with its devices
                // missing after `import -m`, costs no txg.
                Err(error) if top.is_log() => {
                    log::debug!("flush of log vdev {}: {error}", top.id)
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The `vdev_tree` of a label config.
    pub fn to_config(&self) -> Vec<TopVdevConfig> {
        self.tops().iter().map(|top| top.to_config()).collect()
    }
}

/// The state `pool status` shows for a vdev (zpool's ONLINE / DEGRADED / OFFLINE / UNAVAIL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VdevHealth {
    Online,
    /// Some children are missing or offline, but every block still has a reachable copy.
    Degraded,
    /// Taken offline by the administrator (`pool offline`).
    Offline,
    /// Present, but its writes failed: it missed txgs that no resilver has copied yet.
    Faulted,
    /// The device went away while the pool was open (its file was removed, or the fault
    /// layer says so); what it misses is logged in its DTL like any failed write.
    Removed,
    /// Not usable: missing, or every child missing.
    Unavail,
}

impl VdevHealth {
    pub fn as_str(self) -> &'static str {
        match self {
            VdevHealth::Online => "ONLINE",
            VdevHealth::Degraded => "DEGRADED",
            VdevHealth::Offline => "OFFLINE",
            VdevHealth::Faulted => "FAULTED",
            VdevHealth::Removed => "REMOVED",
            VdevHealth::Unavail => "UNAVAIL",
        }
    }
}

impl Leaf {
    pub fn health(&self) -> VdevHealth {
        if self.device.is_missing() {
            VdevHealth::Unavail
        } else if self.is_offline() {
            VdevHealth::Offline
        } else if self.device.is_removed() {
            VdevHealth::Removed
        } else if !self.dtl.is_empty() && self.stats.snapshot().write_errors > 0 {
            VdevHealth::Faulted
        } else {
            VdevHealth::Online
        }
    }
}

impl TopVdev {
    pub fn health(&self) -> VdevHealth {
        // A RAID-Z vdev reads with up to `parity` column slots gone, a mirror with all but
        // one child.
        let tolerated = match self.kind {
            TopVdevKind::Raidz { parity } => parity as usize,
            _ => self.children.len() - 1,
        };
        let not_online = self
            .children
            .iter()
            .filter(|leaf| leaf.health() != VdevHealth::Online)
            .count();
        match (not_online, self.slots_gone()) {
            (0, _) => VdevHealth::Online,
            (_, gone) if gone > tolerated => VdevHealth::Unavail,
            _ => VdevHealth::Degraded,
        }
    }
}

impl VdevTree {
    /// The pool's health: the worst of its top-level vdevs (an offline leaf makes its
    /// top-level vdev, and so the pool, DEGRADED). A log vdev makes it DEGRADED at worst:
    /// without it, intent-log blocks go to the data vdevs.
    pub fn health(&self) -> VdevHealth {
        self.tops()
            .iter()
            .map(|top| match top.health() {
                VdevHealth::Online => VdevHealth::Online,
                _ if top.is_log() => VdevHealth::Degraded,
                health => health,
            })
            .max()
            .unwrap_or(VdevHealth::Online)
    }
}

#[cfg(test)]
mod tests;
