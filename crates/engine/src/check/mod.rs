//! Whole-pool verification (OpenZFS `zdb -b`, `zdb -c`): every block pointer reachable from the
//! last synced uberblock, every copy of every block, against the space maps.
//!
//! # What is checked
//! - Every block pointer of the MOS and of every dataset's object set is visited: object-set
//!   headers, meta-dnode trees, every object's tree. Recursion checks that levels decrease by one
//!   and that no child is born after its parent.
//! - Every copy of every block (every DVA, every mirror child) is read and verified against its
//!   checksum. A bad copy is repaired from a good one when the pool is writable (and reported as
//!   repaired); a block with no good copy is an error.
//! - Every DVA is added to a per-vdev range tree of referenced space: an overlap is a double
//!   allocation. Blocks on the deferred-free list are still allocated on disk and count too.
//! - The space maps' view of allocated space must equal the referenced space exactly:
//!   allocated-but-unreferenced space is a leak; referenced-but-free space is a missing
//!   allocation (DESIGN.md §3 invariant 4).
//! - Each dataset's referenced bytes must equal the bytes its tree references.
//!
//! # Context
//! Runs against the synced state of an open pool whose sync thread is idle (an exported pool
//! imported read-only, or a test's pool right after a sync).

mod chains;
mod logs;
mod rewind;

use crate::dataset::owner_quotas::{OwnerField, OwnerProperty};
use crate::object::accounting::charge_of;
use crate::object::owners::OwnerKind;
use std::collections::BTreeMap;

use crate::block::blkptr::BlockPtr;
use crate::block::blkptr::ObjectType;
use crate::block::gang::GANG_HEADER_SIZE;
use crate::block::pipeline::BlockIo;
use crate::dataset::phys::DatasetPhys;
use crate::object::adapters::MosSpaceStorage;
use crate::object::phys::ObjsetHeader;
use crate::object::tree::visit_tree;
use crate::object::{ObjectError, ObjectSet};
use crate::pool::{Pool, MOS_OBJECT_DIRECTORY};
use crate::space::range_tree::RangeTree;
use crate::types::{ObjectId, Txg, VdevId};

/// A referenced or allocated range: (top-level vdev, offset, size).
pub type Extent = (VdevId, u64, u64);

/// What a check found. `is_clean` is what the exit status of `tarn check` follows.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    pub txg: u64,
    pub blocks: u64,
    pub bytes_logical: u64,
    pub bytes_allocated: u64,
    pub copies_verified: u64,
    pub copies_bad: u64,
    pub copies_repaired: u64,
    /// Blocks none of whose copies verify.
    pub blocks_unreadable: Vec<String>,
    /// Of those, the ones in a file system's objects: (head dataset record object, object,
    /// first data block the unreadable block covers, physical birth txg of a data block's
    /// pointer or 0 for an indirect block), for the pool's error log.
    pub objects_unreadable: Vec<(ObjectId, ObjectId, u64, u64)>,
    /// Per leaf: copies that failed to read or verify, repaired, and unrecoverable.
    pub devices: Vec<DeviceReport>,
    /// (vdev, offset, size) allocated in the space maps but referenced by nothing.
    pub leaks: Vec<(VdevId, u64, u64)>,
    /// Bytes allocated in the space maps and referenced by nothing that the pool property
    /// `leaked` accounts for: gang blocks whose frees could not read their header, leaked on
    /// purpose (`free_leak_on_eio`). Their extents cannot be listed, so the match is by total:
    /// when the unreferenced space equals `leaked`, it is reported here and not as leaks.
    pub leaked_accounted: u64,
    /// (vdev, offset, size) referenced but free in the space maps.
    pub missing: Vec<(VdevId, u64, u64)>,
    /// Descriptions of blocks referenced twice.
    pub double_allocations: Vec<String>,
    /// Other inconsistencies (accounting, structure).
    pub errors: Vec<String>,
}

/// One leaf's share of a check: its bad copies (read or checksum errors counted against it
/// while the check ran, so an online check also counts what other reads found meanwhile), how
/// many of them were repaired, and how many belonged to blocks with no good copy at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceReport {
    pub path: String,
    pub bad: u64,
    /// None when repairs failed somewhere and cannot be told apart by device.
    pub repaired: Option<u64>,
    pub unrecoverable: u64,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.blocks_unreadable.is_empty()
            && self.leaks.is_empty()
            && self.missing.is_empty()
            && self.double_allocations.is_empty()
            && self.errors.is_empty()
    }
}

struct Walker<'a> {
    io: &'a BlockIo,
    repair: bool,
    referenced: BTreeMap<VdevId, RangeTree>,
    report: CheckReport,
    /// The head dataset whose chain is being walked (None for the MOS and queues).
    head_dataset: Option<ObjectId>,
    /// The head's open object set, to tell whether a block a snapshot holds is the head's too.
    head_objset: Option<std::sync::Arc<ObjectSet>>,
    /// The record (snapshot or head) whose tree is being walked.
    walked_record: Option<ObjectId>,
    /// Copies of unreadable blocks, by leaf path.
    unrecoverable_by_leaf: BTreeMap<String, u64>,
}

impl Walker<'_> {
    fn visit(&mut self, bp: &BlockPtr, what: &str) {
        if bp.is_hole() {
            return;
        }
        self.report.blocks += 1;
        self.report.bytes_logical += bp.size_logical as u64;
        if bp.embedded {
            return;
        }
        self.report.bytes_allocated += bp.size_allocated();
        self.claim(bp, what);
        match self.io.verify_all_copies(bp, self.repair) {
            Ok(copies) => {
                self.report.copies_verified += copies.copies;
                self.report.copies_bad += copies.bad;
                self.report.copies_repaired += copies.repaired;
            }
            Err(error) => {
                // Every copy of the block failed: count them as bad copies, so that the totals
                // agree with the unreadable blocks listed.
                let copies: u64 = bp
                    .copies()
                    .map(|dva| {
                        self.io
                            .vdevs
                            .top(dva.vdev)
                            .map_or(1, |top| top.child_count() as u64)
                    })
                    .sum();
                self.report.copies_verified += copies;
                self.report.copies_bad += copies;
                for dva in bp.copies() {
                    if let Some(top) = self.io.vdevs.top(dva.vdev) {
                        for leaf in &top.children {
                            *self
                                .unrecoverable_by_leaf
                                .entry(leaf.path.display().to_string())
                                .or_default() += 1;
                        }
                    }
                }
                self.report
                    .blocks_unreadable
                    .push(format!("{what}: {error}"))
            }
        }
    }

    /// For the error log: the data blocks of `object` that cannot be read, by block number,
    /// with the birth of their pointer (0 when an indirect block above them is what fails).
    /// Only for an object of a file system's chain (`head_dataset` set). A data block found
    /// while walking a snapshot goes under the snapshot unless the head still holds the same
    /// block, where it goes under the head (as a read of the live file would put it).
    fn note_unreadable_blocks(&mut self, object: ObjectId, dnode: &crate::object::phys::DnodePhys) {
        let Some(head) = self.head_dataset else {
            return;
        };
        let walked = self.walked_record.unwrap_or(head);
        let head_objset = self.head_objset.clone();
        let owner = |blkid: u64, birth: u64| {
            crate::pool::errlog::error_owner(
                walked,
                head,
                head_objset.as_deref(),
                object,
                blkid,
                birth,
            )
        };
        let io = self.io;
        let mut found = Vec::new();
        let _ = crate::object::tree::visit_tree_blocks(io, dnode, &mut |first_blkid, bp| {
            if bp.is_hole() || bp.embedded || io.read_physical(bp, false).is_ok() {
                return Ok(());
            }
            let birth = if bp.level == 0 {
                bp.birth_physical.0
            } else {
                0
            };
            found.push((owner(first_blkid, birth), object, first_blkid, birth));
            Ok(())
        });
        self.report.objects_unreadable.extend(found);
    }

    /// Count a block's copies as allocated, reporting any that is claimed twice.
    /// A gang claims its header copies and, read from the header, every piece.
    fn claim(&mut self, bp: &BlockPtr, what: &str) {
        let extents = self.io.allocated_extents(bp).unwrap_or_else(|error| {
            self.report.errors.push(format!(
                "{what}: the pieces of a gang block cannot be listed: {error}"
            ));
            bp.copies()
                .map(|dva| {
                    let size = if dva.gang {
                        GANG_HEADER_SIZE as u64
                    } else {
                        dva.size_allocated
                    };
                    (dva.vdev, dva.offset, size)
                })
                .collect()
        });
        for (vdev, offset, size) in extents {
            let tree = self.referenced.entry(vdev).or_default();
            if tree.intersects(offset, size) {
                self.report.double_allocations.push(format!(
                    "{what}: <{vdev}:{offset:#x}:{size:#x}> referenced twice"
                ));
            } else {
                tree.add(offset, size);
            }
        }
    }

    /// Visit an object set: its header block, its meta-dnode tree and every object's tree.
    /// Blocks born at or before `min_birth` were checked with an older snapshot of the same
    /// chain: they are only counted here, not claimed or read again. Blocks claimed are also
    /// recorded in `claimed` when given (a snapshot's, for its successors' deadlists). Returns
    /// the bytes allocated under the set (header included) and the part born after
    /// `min_birth`.
    fn walk_objset(
        &mut self,
        root: &BlockPtr,
        objset: &ObjectSet,
        name: &str,
        min_birth: Txg,
        mut claimed: Option<&mut ClaimedBlocks>,
        mut born_since: Option<(Txg, &mut ClaimedBlocks)>,
    ) -> Result<(u64, u64), ObjectError> {
        let (mut allocated, mut born_after) = (0u64, 0u64);
        let mut take = |walker: &mut Self, bp: &BlockPtr, what: &str| {
            if bp.is_hole() {
                return;
            }
            // Datasets count what blocks stand for (deflated on RAID-Z), not what they take.
            let size = if bp.embedded { 0 } else { walker.io.dsize(bp) };
            allocated += size;
            // Collected, not claimed: a clone's blocks born after its origin, for its livelist.
            if let Some((since, blocks)) = born_since.as_mut() {
                if !bp.embedded && bp.birth_physical > *since {
                    blocks.insert(block_key(bp), bp.birth_physical);
                }
            }
            if bp.birth_physical <= min_birth {
                return;
            }
            born_after += size;
            walker.visit(bp, what);
            if let (Some(claimed), false) = (claimed.as_deref_mut(), bp.embedded) {
                claimed.insert(block_key(bp), bp.birth_physical);
            }
        };
        take(self, root, &format!("{name} header"));
        let header = ObjsetHeader::decode(&self.io.read(root)?)?;
        let mut visit_error = None;
        let what = format!("{name} meta-dnode");
        visit_tree(self.io, &header.meta_dnode, &mut |bp| {
            take(self, bp, &what);
            Ok(())
        })
        .unwrap_or_else(|error| visit_error = Some(error));
        if let Some(error) = visit_error {
            self.report
                .errors
                .push(format!("{name}: meta-dnode tree: {error}"));
        }
        let mut counted = crate::object::accounting::UsageTotals::default();
        for (object, dnode) in objset.synced_objects()? {
            if let Some((owners, bytes)) = charge_of(crate::fs::phys::znode_owners, &dnode) {
                if objset.kind() == crate::object::phys::ObjsetKind::FileSystem {
                    for kind in OwnerKind::ALL {
                        let usage = counted.entry((kind, owners.id(kind))).or_default();
                        usage.bytes += bytes;
                        usage.objects += 1;
                    }
                }
            }
            let unreadable_before = self.report.blocks_unreadable.len();
            let mut object_allocated = 0u64;
            let what = format!("{name} object {object}");
            let io = self.io;
            let result = visit_tree(io, &dnode, &mut |bp| {
                object_allocated += if bp.embedded { 0 } else { io.dsize(bp) };
                take(self, bp, &what);
                Ok(())
            });
            // The error log wants the block numbers of unreadable data: walk the tree again
            // for them only if this object had any (rare).
            if self.report.blocks_unreadable.len() > unreadable_before {
                self.note_unreadable_blocks(object, &dnode);
            }
            if let Err(error) = result {
                self.report
                    .errors
                    .push(format!("{name} object {object}: {error}"));
            } else if object_allocated != dnode.size_allocated {
                self.report.errors.push(format!(
                    "{name} object {object}: dnode says {} bytes allocated, its tree holds {object_allocated}",
                    dnode.size_allocated
                ));
            }
        }
        self.check_owner_usage(objset, name, counted);
        Ok((allocated, born_after))
    }

    /// The usage by owner an object set stores must be what its objects add up to
    /// (`object/accounting.rs`).
    fn check_owner_usage(
        &mut self,
        objset: &ObjectSet,
        name: &str,
        counted: crate::object::accounting::UsageTotals,
    ) {
        let stored = match objset.synced_owner_usage() {
            Ok(Some(stored)) => stored,
            Ok(None) => return,
            Err(error) => {
                self.report
                    .errors
                    .push(format!("{name}: usage by owner: {error}"));
                return;
            }
        };
        let mut owners: Vec<_> = stored.keys().chain(counted.keys()).copied().collect();
        owners.sort_unstable();
        owners.dedup();
        for key in owners {
            let (stored, counted) = (
                stored.get(&key).copied().unwrap_or_default(),
                counted.get(&key).copied().unwrap_or_default(),
            );
            if stored != counted {
                self.report.errors.push(format!(
                    "{name}: {} {} is charged {} bytes and {} objects, its objects hold {} \
                     bytes and number {}",
                    key.0.word(),
                    key.1,
                    stored.bytes,
                    stored.objects,
                    counted.bytes,
                    counted.objects
                ));
            }
        }
    }
}

/// A block's identity for the chain checks: its first copy's vdev and offset.
type BlockKey = (VdevId, u64);
/// Blocks claimed by a chain's snapshots, with their birth txgs.
type ClaimedBlocks = std::collections::HashMap<BlockKey, Txg>;

fn block_key(bp: &BlockPtr) -> BlockKey {
    let first = bp.copies().next().expect("an allocated block has a copy");
    (first.vdev, first.offset)
}

/// The dataset hierarchy from `root_dataset` down: every directory and dataset record
/// names the other, each child names its parent, every dataset record in the MOS is reached
/// exactly once (snapshots through their heads' chains), every stored property is valid, and
/// each directory's used bytes are its dataset's referenced bytes, what its snapshots alone
/// hold, and its children's used bytes.
fn check_dataset_tree(
    core: &crate::pool::PoolCore,
    chains: &BTreeMap<ObjectId, chains::Chain>,
    report: &mut CheckReport,
) -> Result<(), crate::pool::PoolError> {
    use crate::dataset::phys::DatasetDirPhys;
    use crate::dataset::props::Property;
    use crate::object::adapters::KvObject;
    use crate::object::kv;

    let Some(root_dir) =
        crate::pool::lookup_mos_directory(&core.mos, MOS_OBJECT_DIRECTORY, "root_dataset")?
    else {
        report
            .errors
            .push("object directory has no root_dataset".into());
        return Ok(());
    };
    let mut reached = std::collections::BTreeSet::new();
    // (directory object, parent directory object, name), depth first; returns used bytes.
    fn walk(
        core: &crate::pool::PoolCore,
        chains: &BTreeMap<ObjectId, chains::Chain>,
        report: &mut CheckReport,
        reached: &mut std::collections::BTreeSet<ObjectId>,
        dir_object: ObjectId,
        parent: ObjectId,
        name: &str,
    ) -> Result<(u64, u64), crate::pool::PoolError> {
        let mut problem = |what: String| report.errors.push(format!("dataset {name}: {what}"));
        let dir = match core
            .mos
            .bonus(dir_object)
            .map(|bonus| DatasetDirPhys::decode(&bonus))
        {
            Ok(Ok(dir)) => dir,
            Ok(Err(error)) => {
                problem(format!("directory record {dir_object}: {error}"));
                return Ok((0, 0));
            }
            Err(error) => {
                problem(format!("directory object {dir_object}: {error}"));
                return Ok((0, 0));
            }
        };
        if dir.parent_dir_object != parent {
            problem(format!(
                "directory names parent {}, but it is the child of {parent}",
                dir.parent_dir_object
            ));
        }
        let referenced = match core
            .mos
            .bonus(dir.head_dataset_object)
            .map(|bonus| DatasetPhys::decode(&bonus))
        {
            Ok(Ok(phys)) => {
                if phys.dir_object != dir_object {
                    problem(format!(
                        "dataset record names directory {}, not {dir_object}",
                        phys.dir_object
                    ));
                }
                if !reached.insert(dir.head_dataset_object) {
                    problem(format!(
                        "dataset record {} is reached twice",
                        dir.head_dataset_object
                    ));
                }
                let chain = chains.get(&dir.head_dataset_object);
                for snapshot in chain.map_or(&[][..], |chain| &chain.snapshots[..]) {
                    if !reached.insert(*snapshot) {
                        problem(format!("snapshot record {snapshot} is reached twice"));
                    }
                }
                let (by_dataset, by_snapshots) = chain
                    .map_or((phys.referenced_bytes, 0), |chain| {
                        (chain.used_by_dataset, chain.used_by_snapshots)
                    });
                if dir.flags & crate::dataset::phys::DD_FLAG_USED_BREAKDOWN != 0
                    && (dir.used_breakdown.dataset, dir.used_breakdown.snapshots)
                        != (by_dataset, by_snapshots)
                {
                    problem(format!(
                        "directory says {} bytes used by the dataset and {} by snapshots; they hold {by_dataset} and {by_snapshots}",
                        dir.used_breakdown.dataset, dir.used_breakdown.snapshots
                    ));
                }
                (by_dataset, by_snapshots, phys.unique_bytes)
            }
            Ok(Err(error)) => {
                problem(format!("dataset record: {error}"));
                (0, 0, 0)
            }
            Err(error) => {
                problem(format!("dataset object: {error}"));
                (0, 0, 0)
            }
        };
        // Properties: every stored value must parse. The reservations count in `used`: each
        // the local setting, else the received value unless an explicit inherit masks it.
        let mut local_limits = crate::dataset::limits::LimitSettings::default();
        let mut received_limits = crate::dataset::limits::LimitSettings::default();
        let mut masked_limits: Vec<Property> = Vec::new();
        let mut local_set: Vec<Property> = Vec::new();
        match KvObject::new(&core.mos, dir.properties_object, None) {
            Ok(handle) => match kv::list(&handle, 0, usize::MAX) {
                Ok(entries) => {
                    for entry in entries {
                        let key = String::from_utf8_lossy(&entry.key).into_owned();
                        let value = std::str::from_utf8(&entry.value);
                        // A received value is checked as a setting of its property, and an
                        // explicit inherit must name one (dataset/props.rs, "Received values").
                        let stored = crate::dataset::props::StoredKey::of(&key);
                        let local = matches!(stored, crate::dataset::props::StoredKey::Local(_));
                        let received =
                            matches!(stored, crate::dataset::props::StoredKey::Received(_));
                        let inherit =
                            matches!(stored, crate::dataset::props::StoredKey::Inherit(_));
                        let key = match stored {
                            crate::dataset::props::StoredKey::Local(name)
                            | crate::dataset::props::StoredKey::Received(name)
                            | crate::dataset::props::StoredKey::Inherit(name) => name.to_string(),
                        };
                        let valid = if inherit {
                            entry.value.is_empty()
                                && (Property::from_name(&key).is_some()
                                    || crate::dataset::props::validate_user_property(&key, None)
                                        .is_ok())
                        } else {
                            match Property::from_name(&key) {
                                Some(property) => {
                                    value.is_ok_and(|value| property.parse(value).is_ok())
                                }
                                // A grant (dataset/delegation.rs): known permissions.
                                None if crate::dataset::delegation::is_grant_key(&key) => {
                                    crate::dataset::delegation::decode_grant(&key, &entry.value)
                                        .is_some_and(|grant| grant.is_ok())
                                }
                                // A user property: any text (dataset/props.rs).
                                None if crate::dataset::props::is_user_property_name(&key) => value
                                    .is_ok_and(|value| {
                                        crate::dataset::props::validate_user_property(
                                            &key,
                                            Some(value),
                                        )
                                        .is_ok()
                                    }),
                                // A user, group or project quota: a positive number.
                                None => OwnerProperty::parse(&key).is_some_and(|owner| {
                                    owner.field == OwnerField::Quota
                                        && value.is_ok_and(|value| {
                                            value.parse::<u64>().is_ok_and(|limit| limit > 0)
                                        })
                                }),
                            }
                        };
                        if !valid {
                            problem(format!("invalid stored property {key:?}"));
                            continue;
                        }
                        let bytes = crate::dataset::props::limit_bytes(
                            std::str::from_utf8(&entry.value).unwrap_or_default(),
                        );
                        let limits = match (local, received) {
                            (true, _) => {
                                local_set.extend(Property::from_name(&key));
                                &mut local_limits
                            }
                            (_, true) => &mut received_limits,
                            _ => {
                                masked_limits.extend(Property::from_name(&key));
                                continue;
                            }
                        };
                        match Property::from_name(&key) {
                            Some(Property::Reservation) => limits.reservation = bytes,
                            Some(Property::Refreservation) => limits.refreservation = bytes,
                            _ => {}
                        }
                    }
                }
                Err(error) => problem(format!("properties: {error}")),
            },
            Err(error) => problem(format!("properties object: {error}")),
        }
        let children = match KvObject::new(&core.mos, dir.children_object, None)
            .map_err(|error| error.to_string())
            .and_then(|handle| kv::list(&handle, 0, usize::MAX).map_err(|error| error.to_string()))
        {
            Ok(entries) => entries,
            Err(error) => {
                problem(format!("children: {error}"));
                Vec::new()
            }
        };
        let in_effect = |property: Property, local: u64, received: u64| {
            if local_set.contains(&property) {
                local
            } else if masked_limits.contains(&property) {
                0
            } else {
                received
            }
        };
        let limits = crate::dataset::limits::LimitSettings {
            reservation: in_effect(
                Property::Reservation,
                local_limits.reservation,
                received_limits.reservation,
            ),
            refreservation: in_effect(
                Property::Refreservation,
                local_limits.refreservation,
                received_limits.refreservation,
            ),
            ..Default::default()
        };
        // zfs's `used` (`pool/limits.rs`): the dataset's own space, the unfilled part of its
        // refreservation, and each child's used or reservation, whichever is larger.
        let (by_dataset, by_snapshots, unique) = referenced;
        let mut used = by_dataset + by_snapshots + limits.refreservation.saturating_sub(unique);
        for child in children {
            let child_name = format!("{name}/{}", String::from_utf8_lossy(&child.key));
            let Ok(bytes) = <[u8; 8]>::try_from(child.value.as_slice()) else {
                report.errors.push(format!(
                    "dataset {child_name}: child entry is not an object number"
                ));
                continue;
            };
            let (child_used, child_reserved) = walk(
                core,
                chains,
                report,
                reached,
                ObjectId(u64::from_le_bytes(bytes)),
                dir_object,
                &child_name,
            )?;
            used += child_used.max(child_reserved);
        }
        if dir.used_bytes != used {
            report.errors.push(format!(
                "dataset {name}: directory says {} bytes used, its dataset and children hold {used}",
                dir.used_bytes
            ));
        }
        Ok((used, limits.reservation))
    }
    walk(
        core,
        chains,
        report,
        &mut reached,
        ObjectId(root_dir),
        ObjectId(0),
        &core.name,
    )?;
    for (object, dnode) in core.mos.synced_objects()? {
        if dnode.object_type == ObjectType::Dataset && !reached.contains(&object) {
            report.errors.push(format!(
                "dataset record {object} is not reached from the root dataset (an orphan)"
            ));
        }
    }
    Ok(())
}

/// Check a pool. Run it with the pool idle (nothing being written).
/// The space figures each dataset keeps in memory between txgs (`dataset/mod.rs`, "What a
/// txg costs") against the same figures derived afresh from every deadlist, and the accounting
/// errors counted since import (a figure that would have gone below zero). The records on
/// disk are checked against the walk by [`check_dataset_tree`].
fn check_kept_space(core: &crate::pool::PoolCore, report: &mut CheckReport) {
    for (_, dataset) in core.dataset_list() {
        if dataset.kept_space_matches() == Some(false) {
            report.errors.push(format!(
                "dataset {}: kept space figures {:?} differ from the deadlists' {:?}",
                dataset.name(),
                dataset.own_space(),
                dataset.compute_own_space()
            ));
        }
        let errors = dataset.accounting_errors();
        if errors > 0 {
            report.errors.push(format!(
                "dataset {}: {errors} accounting errors since import (a space figure would have gone below zero; see the log)",
                dataset.name()
            ));
        }
    }
}

pub fn check_pool(pool: &Pool, repair: bool) -> Result<CheckReport, crate::pool::PoolError> {
    check_pool_keeping_references(pool, repair, false).map(|(report, _)| report)
}

/// [`check_pool`] without repairs, and every extent the synced txg's trees reference, as
/// (vdev, offset, size): what a rewind to this txg needs kept (`tarn-stress` checks that none
/// of it is allocatable after the next import).
pub fn check_pool_and_references(
    pool: &Pool,
) -> Result<(CheckReport, Vec<Extent>), crate::pool::PoolError> {
    check_pool_keeping_references(pool, false, true)
}

fn check_pool_keeping_references(
    pool: &Pool,
    repair: bool,
    keep_references: bool,
) -> Result<(CheckReport, Vec<Extent>), crate::pool::PoolError> {
    let core = &pool.core;
    // Check exactly one synced txg: no sync may commit while the walk runs.
    let _paused = core.txgs.pause_syncs();
    // Every read of the walk is scrub-class I/O: it yields to the pool's other work.
    let _class = crate::vdev::queue::ReadClassScope::new(crate::vdev::IoClass::Scrub);
    let io = core.io.as_ref();
    let mut walker = Walker {
        io,
        repair: repair && io.is_writable(),
        referenced: BTreeMap::new(),
        report: CheckReport::default(),
        head_dataset: None,
        head_objset: None,
        walked_record: None,
        unrecoverable_by_leaf: BTreeMap::new(),
    };
    walker.report.txg = core.txgs.last_synced().0;
    let errors_before = leaf_errors(core);
    core.errlog_verification_begins();

    let mos_root = core.mos.synced_root();
    walker.walk_objset(&mos_root, &core.mos, "MOS", Txg(0), None, None)?;

    // Datasets: every head (a MOS object of type Dataset that is not a snapshot), with its
    // chain of snapshots and their deadlists.
    let mut heads = Vec::new();
    let mut held_snapshots = 0u64;
    for (object, dnode) in core.mos.synced_objects()? {
        if dnode.object_type != ObjectType::Dataset {
            continue;
        }
        match DatasetPhys::decode(&dnode.bonus) {
            Ok(phys) if phys.is_snapshot() => held_snapshots += u64::from(phys.uses_user_holds()),
            Ok(phys) => heads.push((object, phys)),
            Err(error) => walker
                .report
                .errors
                .push(format!("dataset record {object}: {error}")),
        }
    }
    // Feature livelist counts the livelists on disk (pool/features.rs): the heads' and the
    // destroyed clones' still queued for freeing.
    let livelists = heads
        .iter()
        .filter(|(_, phys)| phys.livelist_object.0 != 0)
        .count() as u64
        + core.queued_livelist_count()?;
    // Feature user_holds counts the snapshot records with user holds or the defer-destroy
    // flag (pool/user_holds.rs).
    for (feature, short_name, what, count) in [
        (
            crate::pool::LIVELIST_FEATURE,
            "livelist",
            "livelists",
            livelists,
        ),
        (
            crate::pool::USER_HOLDS_FEATURE,
            "user_holds",
            "held or deferred snapshots",
            held_snapshots,
        ),
    ] {
        match core.feature_refcount(feature) {
            Some(refcount) if refcount != count => walker.report.errors.push(format!(
                "feature {short_name}: refcount {refcount}, but {count} {what} exist"
            )),
            None if count > 0 => walker.report.errors.push(format!(
                "feature {short_name} is not enabled, but {count} {what} exist"
            )),
            _ => {}
        }
    }
    // Intent logs of the heads: allocated, referenced by no tree (check/logs.rs).
    for (object, phys) in &heads {
        walker.walk_log(
            &format!("dataset {object}"),
            phys.guid.0,
            phys.log_floor,
            &phys.root,
            core.txgs.last_synced(),
        );
    }
    // Origins before their clones: a clone's deadlists hold blocks its origin's chain claims.
    let mut chains = BTreeMap::new();
    let mut walked_snapshots = std::collections::HashSet::new();
    let mut claimed = ClaimedBlocks::new();
    let mut listed = std::collections::HashSet::new();
    while !heads.is_empty() {
        let (ready, waiting): (Vec<_>, Vec<_>) = heads.into_iter().partition(|(_, phys)| {
            let (origin, _) = chains::origin_of(core, phys);
            origin.0 == 0 || walked_snapshots.contains(&origin)
        });
        if ready.is_empty() {
            for (object, _) in &waiting {
                walker.report.errors.push(format!(
                    "dataset {object}: its clone origin is not a snapshot of any file system"
                ));
            }
            break;
        }
        for (object, phys) in ready {
            let chain =
                chains::verify_chain(&mut walker, core, object, phys, &mut claimed, &mut listed)?;
            walked_snapshots.extend(chain.snapshots.iter().copied());
            chains.insert(object, chain);
        }
        heads = waiting;
    }

    check_dataset_tree(core, &chains, &mut walker.report)?;
    check_kept_space(core, &mut walker.report);

    // The deferred-free list: killed, but still allocated until the next txg frees them.
    if let Some(deferred) =
        crate::pool::lookup_mos_directory(&core.mos, MOS_OBJECT_DIRECTORY, "deferred_frees")?
    {
        let store = crate::pool::deferred_list_store(&core.mos, &core.io.tunables);
        let mut listed = Vec::new();
        let walked =
            crate::object::bpobj::BpObj::open(&store, ObjectId(deferred)).and_then(|list| {
                list.iterate(&mut |entry| {
                    listed.push(entry.bp.clone());
                    Ok(())
                })
            });
        if let Err(error) = walked {
            walker
                .report
                .errors
                .push(format!("deferred free list: {error}"));
        }
        for bp in &listed {
            walker.claim(bp, "deferred free");
        }
    }

    // Trees queued for background destroy: allocated until their frees reach them.
    let mut pending = Vec::new();
    if let Err(error) = core.visit_background_pending(&mut |bp| {
        pending.push(bp.clone());
        Ok(())
    }) {
        walker
            .report
            .errors
            .push(format!("background destroy queue: {error}"));
    }
    walker.head_dataset = None;
    walker.head_objset = None;
    walker.walked_record = None;
    for bp in &pending {
        walker.visit(bp, "background destroy");
    }
    // The free list (released deadlist entries): allocated until drained. Their blocks were
    // walked with no snapshot (destroyed), so they are claimed here for the first time.
    let mut listed = Vec::new();
    if let Err(error) = core.visit_free_list(&mut |bp| {
        listed.push(bp.clone());
        Ok(())
    }) {
        walker.report.errors.push(format!("free list: {error}"));
    }
    for bp in &listed {
        walker.visit(bp, "free list");
    }
    // Destroyed clones' livelists: their live entries are allocated until freed. The clone's
    // tree is gone from the hierarchy, so they are claimed here for the first time.
    let mut live = Vec::new();
    if let Err(error) = core.visit_queued_livelists(&mut |bp| {
        live.push(bp.clone());
        Ok(())
    }) {
        walker
            .report
            .errors
            .push(format!("destroyed clones' livelists: {error}"));
    }
    for bp in &live {
        walker.visit(bp, "destroyed clone's livelist");
    }
    // Gang blocks whose frees stalled on an unreadable header: allocated until freed.
    let mut stalled = Vec::new();
    if let Err(error) = core.visit_stalled_frees(&mut |bp| {
        stalled.push(bp.clone());
        Ok(())
    }) {
        walker.report.errors.push(format!("stalled frees: {error}"));
    }
    for bp in &stalled {
        walker.visit(bp, "stalled free");
    }

    // Compare with the space maps.
    let storage = MosSpaceStorage { mos: &core.mos };
    let on_disk = core.io.space.allocated_from_space_maps(&storage)?;
    let mut report = walker.report;
    report.devices = device_reports(
        &report,
        leaf_errors(core),
        errors_before,
        &walker.unrecoverable_by_leaf,
    );
    core.errlog_verification_ends(
        report
            .objects_unreadable
            .iter()
            .map(|(dataset, object, blkid, birth)| {
                (
                    crate::pool::errlog::ErrorBookmark {
                        dataset: *dataset,
                        object: *object,
                        blkid: *blkid,
                    },
                    *birth,
                )
            })
            .collect(),
    );
    let mut references = Vec::new();
    for top in core.io.vdevs.tops().iter() {
        let referenced = walker.referenced.remove(&top.id).unwrap_or_default();
        if keep_references {
            references.extend(
                referenced
                    .iter()
                    .map(|segment| (top.id, segment.start, segment.size())),
            );
        }
        let allocated = on_disk.get(&top.id).cloned().unwrap_or_default();
        let mut leaked = allocated.clone();
        for segment in referenced.iter() {
            leaked.remove_overlap(segment.start, segment.size());
        }
        let mut missing = referenced.clone();
        for segment in allocated.iter() {
            missing.remove_overlap(segment.start, segment.size());
        }
        report.leaks.extend(
            leaked
                .iter()
                .map(|segment| (top.id, segment.start, segment.size())),
        );
        report.missing.extend(
            missing
                .iter()
                .map(|segment| (top.id, segment.start, segment.size())),
        );
    }
    let leaked = core.leaked_bytes()?;
    let unreferenced: u64 = report.leaks.iter().map(|(_, _, size)| size).sum();
    if leaked > 0 && unreferenced == leaked {
        report.leaks.clear();
        report.leaked_accounted = leaked;
    } else if leaked > 0 {
        report.errors.push(format!(
            "the pool property leaked says {leaked} bytes, but {unreferenced} bytes are allocated and referenced by nothing"
        ));
    }
    Ok((report, references))
}

/// Per leaf: bad copies (its error counts' growth during the check), unrecoverable ones, and
/// repaired ones. Repairs are not counted by leaf; when every bad copy of a readable block was
/// repaired, each leaf's repaired count is its bad copies less its unrecoverable ones.
fn device_reports(
    report: &CheckReport,
    after: Vec<(String, u64)>,
    before: Vec<(String, u64)>,
    unrecoverable_by_leaf: &BTreeMap<String, u64>,
) -> Vec<DeviceReport> {
    let unrecoverable_total: u64 = unrecoverable_by_leaf.values().sum();
    let all_repaired =
        report.copies_repaired == report.copies_bad.saturating_sub(unrecoverable_total);
    after
        .into_iter()
        .zip(before)
        .map(|((path, after), (_, before))| {
            let bad = after.saturating_sub(before);
            let unrecoverable = unrecoverable_by_leaf.get(&path).copied().unwrap_or(0);
            let repaired = if report.copies_repaired == 0 {
                Some(0)
            } else {
                all_repaired.then(|| bad.saturating_sub(unrecoverable))
            };
            DeviceReport {
                repaired,
                path,
                bad,
                unrecoverable,
            }
        })
        .collect()
}

/// Every leaf's path with its read and checksum error counts so far (check reports the
/// difference its own reads made).
fn leaf_errors(core: &crate::pool::PoolCore) -> Vec<(String, u64)> {
    core.io
        .vdevs
        .tops()
        .iter()
        .flat_map(|top| &top.children)
        .map(|leaf| {
            let stats = leaf.stats.snapshot();
            (
                leaf.path.display().to_string(),
                stats.read_errors + stats.checksum_errors,
            )
        })
        .collect()
}

/// Check only reads: an object set opened for checking never syncs.
struct NoLifecycle;

impl crate::object::BlockLifecycle for NoLifecycle {
    fn block_born(&self, _bp: &BlockPtr, _at: crate::block::pipeline::SyncPoint) {}
    fn block_kill(
        &self,
        _bp: &BlockPtr,
        _at: crate::block::pipeline::SyncPoint,
    ) -> Result<(), ObjectError> {
        Err(ObjectError::Lifecycle("check never changes a pool".into()))
    }
}
