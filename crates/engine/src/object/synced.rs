//! The synced tree of an object set as `check`, `debug` and destroy read it: every object,
//! one dnode, every block pointer.

use crate::block::blkptr::BlockPtr;
use crate::types::ObjectId;

use super::accounting::{usage_object, usage_slot};
use super::owners::OwnerKind;
use super::phys::{DnodePhys, DNODE_SIZE};
use super::tree;
use super::{ObjectError, ObjectSet};

impl ObjectSet {
    /// Every allocated object number in the synced tree (for `check` and `debug`), the usage
    /// objects last.
    pub fn synced_objects(&self) -> Result<Vec<(ObjectId, DnodePhys)>, ObjectError> {
        let meta = self.synced_meta_dnode();
        let per_block = meta.data_block_size as u64 / DNODE_SIZE as u64;
        let mut objects = Vec::new();
        for blkid in 0..=meta.max_blkid {
            let bp = tree::lookup_block(&self.io, &meta, blkid)?;
            if bp.is_hole() {
                continue;
            }
            let data = self.io.read(&bp)?;
            for slot in 0..per_block {
                let object = ObjectId(blkid * per_block + slot);
                if object.0 == 0 {
                    continue;
                }
                let start = slot as usize * DNODE_SIZE;
                let dnode = DnodePhys::decode(
                    data.get(start..start + DNODE_SIZE)
                        .ok_or_else(|| ObjectError::Corrupt("short dnode block".into()))?,
                )?;
                if !dnode.is_free() {
                    objects.push((object, dnode));
                }
            }
        }
        // The usage objects, whose dnodes sit in the header (`accounting.rs`), last.
        if let Some(dnodes) = self.state.lock().synced_accounting.as_ref() {
            for kind in [OwnerKind::Project, OwnerKind::Group, OwnerKind::User] {
                let object = usage_object(kind);
                let slot = usage_slot(object).expect("a usage object");
                objects.push((object, dnodes[slot].clone()));
            }
        }
        Ok(objects)
    }

    /// The dnode of `object` in the synced tree (for `debug object`); a free dnode if the
    /// synced tree has no such object.
    pub fn synced_dnode(&self, object: ObjectId) -> Result<DnodePhys, ObjectError> {
        self.dnode_from_meta(&self.synced_meta_dnode(), object)
    }

    /// One more than the highest object number ever allocated (changes not yet synced
    /// included): no object exists at or above it.
    pub fn object_number_bound(&self) -> u64 {
        self.state.lock().next_object
    }

    /// Number of dnode slots per meta-dnode block.
    pub fn dnode_slots_per_block(&self) -> u64 {
        self.dnodes_per_block()
    }

    /// Visit every block pointer of the synced tree: the root (object-set header), the
    /// meta-dnode's tree and every object's tree (destroy frees them all through this).
    pub fn visit_synced_blocks(
        &self,
        visit: &mut dyn FnMut(&BlockPtr) -> Result<(), ObjectError>,
    ) -> Result<(), ObjectError> {
        let root = self.synced_root();
        if root.is_hole() {
            return Ok(());
        }
        visit(&root)?;
        tree::visit_tree(&self.io, &self.synced_meta_dnode(), visit)?;
        for (_, dnode) in self.synced_objects()? {
            tree::visit_tree(&self.io, &dnode, visit)?;
        }
        Ok(())
    }
}
