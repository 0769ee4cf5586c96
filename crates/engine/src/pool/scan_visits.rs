//! What a scrub verified, recorded for tests (tunable `scan_record_visits`), and the scrub's
//! promise checked against it: every block of the pool born before the scrub started and
//! still held when it ended was visited. The scan (`pool/scan.rs`) fills the record as it
//! verifies each batch; this module hands it out and compares it with the pool's trees.

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::dataset::phys::DatasetPhys;
use crate::object::traverse::Bookmark;
use crate::types::Txg;

use super::scan::{ScanFunction, ScanState, ScrubVisits};
use super::{PoolCore, PoolError};

impl PoolCore {
    /// The blocks the last scrub verified, once, if it finished, started in this process and
    /// `scan_record_visits` was on ([`ScrubVisits`]); a later call gets None until the next
    /// such scrub.
    pub fn take_scrub_visits(&self) -> Option<ScrubVisits> {
        let phys = self.scan.phys.lock().clone()?;
        if phys.function != ScanFunction::Scrub || phys.state != ScanState::Finished {
            return None;
        }
        let mut visits = self.scan.visits.lock();
        if visits.as_ref()?.max_txg != phys.max_txg {
            return None;
        }
        visits.take()
    }

    /// The scrub's promise checked against `visits` (tunable `scan_record_visits`, for tests):
    /// the blocks of the synced trees now (the MOS and every dataset record, snapshots and
    /// clones included, each walked whole) born at or before the scrub's last txg that it did
    /// not verify, described, and how many blocks were compared. A block alive now and born
    /// before the scrub started was alive all through it (nothing freed comes back without a
    /// rewind, which is another pool instance), so each one listed is a block the scrub
    /// skipped. The caller keeps syncs from freeing the trees under the walk (e.g.
    /// [`crate::txg::TxgManager::pause_syncs`]); a tree that cannot be walked is left out.
    pub fn scrub_unvisited(&self, visits: &ScrubVisits) -> Result<(u64, Vec<String>), PoolError> {
        let mut roots = vec![("the MOS".to_string(), self.mos.synced_root())];
        // Each dataset record is named with what decides which walk covers its blocks (its
        // creation and previous snapshot txgs), so that a miss says where to look.
        let mut names = std::collections::HashMap::new();
        for (name, head) in self.dataset_list() {
            for snapshot in head.snapshots() {
                names.insert(
                    snapshot.object.0,
                    format!("{name}@{}", snapshot.short_name()),
                );
            }
            names.insert(head.object.0, name);
        }
        for (object, dnode) in self.mos.synced_objects()? {
            if dnode.object_type != ObjectType::Dataset {
                continue;
            }
            if let Ok(record) = DatasetPhys::decode(&dnode.bonus) {
                let name = names.get(&object.0).map_or("unnamed", String::as_str);
                roots.push((
                    format!(
                        "dataset record {} ({name}, created in txg {}, previous snapshot {} of txg {})",
                        object.0,
                        record.creation_txg,
                        record.prev_snapshot_object,
                        record.prev_snapshot_txg
                    ),
                    record.root,
                ));
            }
        }
        let mut missed = Vec::new();
        let mut compared = 0u64;
        for (name, root) in &roots {
            let mut budget = u64::MAX;
            let walked = crate::object::traverse::walk_post_order(
                &self.io,
                root,
                Txg(0),
                Bookmark::default(),
                &mut budget,
                &mut |bp: &BlockPtr| {
                    if bp.is_hole() || bp.embedded || bp.birth_physical > visits.max_txg {
                        return Ok(());
                    }
                    let Some(dva) = bp.copies().next() else {
                        return Ok(());
                    };
                    compared += 1;
                    if !visits.blocks.contains(&(u64::from(dva.vdev.0), dva.offset)) {
                        missed.push(format!("{name}: {bp}"));
                    }
                    Ok(())
                },
            );
            if let Err(error) = walked {
                log::info!("scrub coverage: {name} not walked: {error}");
            }
        }
        Ok((compared, missed))
    }
}
