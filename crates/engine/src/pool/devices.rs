//! Device management of an imported pool: taking a leaf offline and bringing it back
//! (`zpool offline`, `zpool online`).
//!
//! An offline leaf takes no I/O (vdev/dtl.rs): every write of a mirror it belongs to is logged
//! in its dirty time log instead, and the fact that it is offline is persisted with that log
//! (pool/dtl.rs), so it stays offline across export and import. A leaf may be taken offline
//! only while another child of its top-level vdev is usable: a pool never takes a leaf offline
//! if that would leave data without a copy (zpool's "no valid replicas"). Bringing it online
//! starts a resilver of the txgs it missed (pool/scan.rs), and only after the device at the
//! leaf's path has been read again and its label names this pool and this leaf: a disk that
//! came back blank (or holding another pool or vdev) lacks every block, not just the missed
//! txgs, and is refused ("invalid label") with `pool replace` given as the way to resilver it
//! whole, as zpool leaves such a device UNAVAIL.
//!
//! Both wait for the txg that records the change, so a crash after the command returns keeps it.

use std::sync::Arc;

use crate::types::{Guid, Txg};
use crate::vdev::{label, FileDevice, Leaf, TopVdev};

use super::{Pool, PoolError};

impl Pool {
    /// The leaf named `name`: its guid (decimal), its path, or its file name, with the
    /// snapshot of its top-level vdev that the child index refers to.
    pub fn find_leaf(&self, name: &str) -> Result<(Arc<TopVdev>, usize), PoolError> {
        let guid = name.parse::<u64>().ok().map(Guid);
        let mut found = Vec::new();
        for top in self.core.io.vdevs.tops().iter() {
            for (child, leaf) in top.children.iter().enumerate() {
                let path_matches = leaf.path.as_os_str() == name
                    || leaf
                        .path
                        .file_name()
                        .is_some_and(|file_name| file_name == name);
                if Some(leaf.guid) == guid || path_matches {
                    found.push((top.clone(), child));
                }
            }
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(PoolError::BadVdevSpec(format!(
                "pool {} has no device named {name:?} (give its path, file name or guid, as `tarn pool status` shows)",
                self.core.name
            ))),
            _ => Err(PoolError::BadVdevSpec(format!(
                "{name:?} names more than one device of pool {}: give the full path or the guid (`tarn pool status -j` lists guids)",
                self.core.name
            ))),
        }
    }

    /// Take the leaf `name` offline (`pool offline`).
    pub fn offline(&self, name: &str) -> Result<Txg, PoolError> {
        self.refuse_readonly("offline")?;
        let (top, child) = self.find_leaf(name)?;
        let leaf = &top.children[child];
        if leaf.is_offline() {
            return self.sync();
        }
        // A mirror keeps a copy while one other child is usable; a RAID-Z vdev reads with up
        // to `parity` children gone.
        // Counted per column slot for RAID-Z: a child being replaced and its replacement
        // serve one column.
        let usable_without = |index: usize| index != child && top.children[index].is_usable();
        let (gone_after, tolerated) = match top.kind.parity() {
            0 => (
                (0..top.children.len())
                    .filter(|&index| !usable_without(index))
                    .count(),
                top.children.len() - 1,
            ),
            parity => (
                (0..top.child_count())
                    .map_while(|slot| {
                        let children = top.slot_children(slot);
                        (!children.is_empty()).then_some(children)
                    })
                    .filter(|children| !children.iter().any(|&index| usable_without(index)))
                    .count(),
                parity,
            ),
        };
        if gone_after > tolerated {
            let why = match top.kind.parity() {
                0 => format!("it holds the only usable copy of top-level vdev {}", top.id),
                parity => format!(
                    "raidz{parity}-{} would have more children gone than its {parity} parity",
                    top.id
                ),
            };
            return Err(PoolError::BadVdevSpec(format!(
                "cannot offline {}: no valid replicas ({why})",
                leaf.path.display(),
            )));
        }
        self.core.note_leaf_unusable(leaf.guid);
        leaf.dtl.set_offline(true);
        leaf.dtl.mark_dirty();
        log::info!(
            "pool {}: {} taken offline",
            self.core.name,
            leaf.path.display()
        );
        self.core.txgs.kick();
        self.sync()
    }

    /// Bring the leaf `name` back online (`pool online`); a resilver of what it missed starts.
    pub fn online(&self, name: &str) -> Result<Txg, PoolError> {
        self.refuse_readonly("online")?;
        let (top, child) = self.find_leaf(name)?;
        let leaf = &top.children[child];
        if leaf.device.is_missing() {
            return Err(PoolError::BadVdevSpec(format!(
                "cannot online {}: no device with this vdev's label was found at import; export the pool and import it with the device present, or if the device at the path is new or was wiped, use `tarn pool replace {} {name}` to resilver it whole",
                leaf.path.display(),
                self.core.name
            )));
        }
        self.check_leaf_label(leaf, name)?;
        if leaf.is_offline() {
            leaf.dtl.set_offline(false);
            leaf.dtl.mark_dirty();
            log::info!(
                "pool {}: {} back online, missed txgs {:?}",
                self.core.name,
                leaf.path.display(),
                leaf.dtl.ranges()
            );
        }
        self.sync()?;
        self.core.queue_resilver_if_logs();
        // The next txg starts the resilver: wait for it, so that `pool status` and
        // `pool wait -t resilver` right after see it.
        self.sync()
    }

    /// Refuse to bring `leaf` online unless the device now at its path carries a label of this
    /// pool naming this leaf. The device is opened again by path, not read through the leaf's
    /// open handle, so a disk swapped or recreated at the path while the leaf was away is the
    /// one judged. Resilvering only the leaf's dirty time log onto a blank disk would report a
    /// healthy mirror side that holds none of the older blocks (and whose missing labels make
    /// it UNAVAIL at the next import).
    fn check_leaf_label(&self, leaf: &Leaf, name: &str) -> Result<(), PoolError> {
        let found = FileDevice::open_unlocked_readonly(&leaf.path)
            .map_err(|error| error.to_string())
            .and_then(|device| {
                label::read_newest_label(&device).map_err(|error| error.to_string())
            });
        let problem = match found {
            Ok(Some((_, config)))
                if config.pool_guid == self.core.guid.0 && config.leaf_guid == leaf.guid.0 =>
            {
                return Ok(());
            }
            Ok(Some((_, config))) if config.pool_guid != self.core.guid.0 => format!(
                "its label belongs to another pool ({:?}, guid {})",
                config.name, config.pool_guid
            ),
            Ok(Some((_, config))) => format!(
                "its label names another device of this pool (guid {}, not {})",
                config.leaf_guid, leaf.guid.0
            ),
            Ok(None) => "it holds no label of this pool".to_string(),
            Err(error) => format!("its label cannot be read ({error})"),
        };
        Err(PoolError::Refused(format!(
            "cannot online {}: {problem} (invalid label): it lacks the pool's data; use `tarn pool replace {} {name}` to resilver it whole",
            leaf.path.display(),
            self.core.name
        )))
    }

    pub(super) fn refuse_readonly(&self, what: &str) -> Result<(), PoolError> {
        if self.core.readonly {
            return Err(PoolError::BadVdevSpec(format!(
                "pool {} is imported read-only: cannot {what} a device",
                self.core.name
            )));
        }
        Ok(())
    }
}
