//! Persisting dirty time logs and leaf states (OpenZFS `vdev_dtl_sync`, `vdev_dtl_load`).
//!
//! Each leaf's dirty time log ([`crate::vdev::dtl`]) lives in the MOS as a space map over txg
//! units: txg `t` is the map's unit `t` (the map's shift is [`DTL_SHIFT`], the smallest the
//! space-map header accepts, so unit `t` is "byte" `t << 9`), region `[0, DTL_REGION_TXGS)`
//! txgs, one ALLOC run per missed range, under the MOS
//! directory key `dtl/<leaf guid>`. A changed log is rewritten whole (truncate, append one
//! batch, header) in syncing context, in every sync pass in which it changed, so that the txg
//! whose writes a leaf missed commits with that fact: a crash can never leave a stale leaf
//! whose log does not say so. An empty log keeps its (empty) object. A leaf taken offline is
//! recorded as `offline/<leaf guid>` = 1 (0 once it is back), so an offline leaf stays offline
//! through export and import as zpool's does. Layout: docs/design/01-vdev.md §2.14a.
//!
//! # Cost
//! Nothing in a txg in which no leaf missed a write. Otherwise one small space-map rewrite per
//! leaf whose log changed: a log holds one run per distinct gap, not one per block missed.

use crate::space::range_tree::RangeTree;
use crate::space::space_map::{SpaceMap, SpaceMapAction};
use crate::space::storage::SpaceStorage;
use crate::types::{Guid, ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, PoolCore, PoolError, MOS_OBJECT_DIRECTORY};

/// Txgs a DTL space map covers (its region, in units of one txg).
pub const DTL_REGION_TXGS: u64 = 1 << 50;
/// The space-map shift of a DTL: one unit is one txg.
pub const DTL_SHIFT: u32 = 9;
const DTL_REGION_BYTES: u64 = DTL_REGION_TXGS << DTL_SHIFT;
/// Data block size of a DTL space map.
const DTL_BLOCK_SIZE: u32 = 4096;

/// The MOS directory key of a leaf's DTL space map.
pub fn dtl_key(leaf: Guid) -> String {
    format!("dtl/{}", leaf.0)
}

/// The MOS directory key of a leaf's offline flag.
pub fn offline_key(leaf: Guid) -> String {
    format!("offline/{}", leaf.0)
}

/// Read a DTL space map into its txg ranges.
pub fn read_dtl(
    storage: &dyn SpaceStorage,
    object: ObjectId,
) -> Result<Vec<(u64, u64)>, PoolError> {
    let map = SpaceMap::open(
        storage,
        object,
        0,
        DTL_REGION_BYTES,
        DTL_SHIFT,
        DTL_BLOCK_SIZE,
    )?;
    let mut tree = RangeTree::for_region(0, DTL_REGION_BYTES, DTL_SHIFT);
    map.replay(storage, map.length_bytes(), |entry| {
        match entry.action {
            SpaceMapAction::Alloc => tree.add_missing(entry.start, entry.size),
            SpaceMapAction::Free => tree.remove_overlap(entry.start, entry.size),
        }
        Ok(())
    })?;
    Ok(tree
        .iter()
        .map(|segment| (segment.start >> DTL_SHIFT, segment.end >> DTL_SHIFT))
        .collect())
}

impl PoolCore {
    /// At import: every leaf's persisted DTL and offline flag.
    pub(super) fn load_dtls(&self) -> Result<(), PoolError> {
        let storage = self.storage();
        for leaf in self.io.vdevs.leaves() {
            if let Some(object) =
                lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, &dtl_key(leaf.guid))?
            {
                let ranges = read_dtl(&storage, ObjectId(object))?;
                if !ranges.is_empty() {
                    log::info!(
                        "pool {}: {} missed txgs {:?}: it will be resilvered",
                        self.name,
                        leaf.path.display(),
                        ranges
                    );
                }
                leaf.dtl.load(&ranges);
            }
            let offline =
                lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, &offline_key(leaf.guid))?;
            leaf.dtl.set_offline(offline.unwrap_or(0) != 0);
            leaf.dtl.mark_loaded();
        }
        Ok(())
    }

    /// Whether some leaf's DTL changed since it was last persisted.
    pub(super) fn dtls_dirty(&self) -> bool {
        !self.readonly && self.io.vdevs.leaves().any(|leaf| leaf.dtl.is_dirty())
    }

    /// Syncing context, any pass: rewrite the DTL space map and offline flag of every leaf
    /// whose log changed.
    pub(super) fn sync_dtls(&self, txg: Txg, pass: u32) -> Result<(), PoolError> {
        if self.readonly {
            return Ok(());
        }
        let storage = self.storage();
        let tx = crate::object::Tx::syncing(txg);
        for leaf in self.io.vdevs.leaves() {
            if !leaf.dtl.take_dirty() {
                continue;
            }
            let key = dtl_key(leaf.guid);
            let mut map = match lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, &key)? {
                Some(object) => SpaceMap::open(
                    &storage,
                    ObjectId(object),
                    0,
                    DTL_REGION_BYTES,
                    DTL_SHIFT,
                    DTL_BLOCK_SIZE,
                )?,
                None => {
                    let map = SpaceMap::create(
                        &storage,
                        0,
                        DTL_REGION_BYTES,
                        DTL_SHIFT,
                        DTL_BLOCK_SIZE,
                        txg,
                    )?;
                    kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, &key, map.object.0)?;
                    map
                }
            };
            map.truncate(&storage, txg)?;
            let mut tree = RangeTree::for_region(0, DTL_REGION_BYTES, DTL_SHIFT);
            for (first, end) in leaf.dtl.ranges() {
                let (first, end) = (first.min(DTL_REGION_TXGS), end.min(DTL_REGION_TXGS));
                if first < end {
                    tree.add(first << DTL_SHIFT, (end - first) << DTL_SHIFT);
                }
            }
            map.append(&storage, &tree, SpaceMapAction::Alloc, txg, pass)?;
            map.write_header(&storage, txg)?;
            kv_set_u64(
                &self.mos,
                &tx,
                MOS_OBJECT_DIRECTORY,
                &offline_key(leaf.guid),
                leaf.is_offline() as u64,
            )?;
        }
        Ok(())
    }
}
