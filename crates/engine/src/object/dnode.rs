//! Dnodes as open context sees them, and the allocation and free of objects (OpenZFS dnode.c
//! `dnode_allocate` and `dnode_free`, dmu_object.c): the current dnode of an object (the
//! tree's, with the changes of txgs not yet synced laid over it), what a caller can learn of
//! an object, and the creation, change of settings and removal of objects.
//!
//! Object numbers are handed out in increasing order, starting past every dnode slot the
//! meta-dnode's tree had when the set was opened, and an object's number must lie within what
//! the meta-dnode's tree can address. Creating an object, changing its settings or removing it
//! is a dirty record of its txg (`dirty.rs`): the dnode in the tree changes only when that txg
//! syncs, and until then [`ObjectSet::info`] and every read see the change through the record.

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::txg::Tx;
use crate::types::ObjectId;

use super::dirty::ObjectDirty;
use super::phys::{self, DnodePhys, DNODE_BONUS_SIZE_MAX, DNODE_SIZE};
use super::{ObjectError, ObjectInfo, ObjectProps, ObjectSet, ObjectSettings};

impl ObjectSet {
    pub(super) fn dnodes_per_block(&self) -> u64 {
        self.state.lock().synced_meta_dnode.data_block_size as u64 / DNODE_SIZE as u64
    }

    /// The dnode of `object` including changes not yet synced (tree fields reflect the tree).
    pub(super) fn current_dnode(&self, object: ObjectId) -> Result<DnodePhys, ObjectError> {
        // The tree is read without the lock; if a sync dropped dirty records meanwhile, the tree
        // read may predate the changes those records held: read again.
        let (mut dnode, state) = loop {
            let generation = self.state.lock().view_generation;
            let dnode = self.tree_dnode(object)?;
            let state = self.state.lock();
            if state.view_generation == generation {
                break (dnode, state);
            }
        };
        for dirty in state.dirty.values() {
            if let Some(record) = dirty.objects.get(&object) {
                if record.removed {
                    dnode = DnodePhys::free();
                }
                if let Some(created) = &record.create {
                    dnode = created.clone();
                }
                if let Some((bonus_type, bonus)) = &record.bonus {
                    dnode.bonus_type = *bonus_type;
                    dnode.bonus = bonus.clone();
                }
                if let Some(settings) = &record.settings {
                    settings.apply(&mut dnode);
                }
                if let Some(truncated) = record.truncated_to {
                    dnode.max_blkid = dnode.max_blkid.min(truncated);
                }
                if let Some(size) = record.block_size {
                    dnode.data_block_size = size;
                }
                if let Some((&last, _)) = record.blocks.last_key_value() {
                    dnode.max_blkid = dnode.max_blkid.max(last);
                }
            }
        }
        Ok(dnode)
    }

    pub(super) fn existing_dnode(&self, object: ObjectId) -> Result<DnodePhys, ObjectError> {
        let dnode = self.current_dnode(object)?;
        if dnode.is_free() || object.0 == 0 {
            return Err(ObjectError::NoSuchObject(object));
        }
        Ok(dnode)
    }

    pub fn info(&self, object: ObjectId) -> Result<ObjectInfo, ObjectError> {
        let dnode = self.existing_dnode(object)?;
        Ok(ObjectInfo {
            object,
            object_type: dnode.object_type,
            data_block_size: dnode.data_block_size,
            levels: dnode.levels,
            max_blkid: dnode.max_blkid,
            size_allocated: dnode.size_allocated,
            generation: dnode.generation,
            bonus_type: dnode.bonus_type,
        })
    }

    pub fn exists(&self, object: ObjectId) -> bool {
        self.existing_dnode(object).is_ok()
    }

    /// One more than the largest object number this object set can hold: its dnodes are the
    /// meta-dnode's data, so an object's dnode must lie within what the meta-dnode's tree can
    /// address ([`phys::addressable_bytes`]).
    pub fn object_number_limit(&self) -> u64 {
        let meta = self.synced_meta_dnode();
        phys::addressable_bytes(meta.data_block_size, meta.indirect_block_shift) / DNODE_SIZE as u64
    }

    /// Allocate a new object number and create the object in `tx`.
    pub fn create_object(
        &self,
        tx: &Tx,
        props: ObjectProps,
        bonus_type: ObjectType,
        bonus: &[u8],
    ) -> Result<ObjectId, ObjectError> {
        let object = {
            let mut state = self.state.lock();
            let object = ObjectId(state.next_object);
            state.next_object += 1;
            object
        };
        self.create_object_at(tx, object, props, bonus_type, bonus)?;
        Ok(object)
    }

    /// Create an object with a chosen number (the MOS's fixed objects).
    pub fn create_object_at(
        &self,
        tx: &Tx,
        object: ObjectId,
        props: ObjectProps,
        bonus_type: ObjectType,
        bonus: &[u8],
    ) -> Result<(), ObjectError> {
        if bonus.len() > DNODE_BONUS_SIZE_MAX {
            return Err(ObjectError::BonusTooLarge(bonus.len()));
        }
        let block_size = props.data_block_size;
        phys::check_block_settings(block_size, props.indirect_block_shift)
            .map_err(ObjectError::Invalid)?;
        if object.0 >= self.object_number_limit() {
            return Err(ObjectError::TooLarge(format!(
                "object number {object} is past the {} this object set can hold",
                self.object_number_limit()
            )));
        }
        if object.0 == 0 || !self.current_dnode(object)?.is_free() {
            return Err(ObjectError::Invalid(format!("object {object} is in use")));
        }
        let dnode = DnodePhys {
            object_type: props.object_type,
            indirect_block_shift: props.indirect_block_shift,
            levels: 1,
            bonus_type,
            checksum: props.checksum,
            compression: props.compression,
            data_block_size: block_size,
            copies: props.copies.clamp(1, 3),
            max_blkid: 0,
            size_allocated: 0,
            generation: tx.txg,
            blkptr: BlockPtr::hole(tx.txg, props.object_type, 0),
            bonus: bonus.to_vec(),
            spill: None,
        };
        let mut state = self.state.lock();
        state.next_object = state.next_object.max(object.0 + 1);
        let record = state.record(tx.txg, object);
        *record = ObjectDirty {
            create: Some(dnode),
            ..ObjectDirty::default()
        };
        drop(state);
        self.note_metadata_change(tx);
        Ok(())
    }

    /// Change `object`'s settings in `tx` (a receive applies those of every OBJECT record):
    /// checksum, compression and copies apply to the blocks written from then on, as a
    /// dataset property change does. The indirect block shift may change only while the
    /// object has a single level and at most block 0, dirty blocks included (so that no
    /// indirect block exists or will be written with the old size, and every block stays
    /// addressable).
    pub fn set_settings(
        &self,
        tx: &Tx,
        object: ObjectId,
        settings: ObjectSettings,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        phys::check_block_settings(dnode.data_block_size, settings.indirect_block_shift)
            .map_err(ObjectError::Invalid)?;
        if settings.indirect_block_shift != dnode.indirect_block_shift
            && (dnode.levels > 1 || dnode.max_blkid > 0)
        {
            return Err(ObjectError::Invalid(format!(
                "object {object} has (or will have) indirect blocks of {} bytes; they cannot \
                 change size",
                1u64 << dnode.indirect_block_shift
            )));
        }
        let mut state = self.state.lock();
        state.record(tx.txg, object).settings = Some(settings);
        drop(state);
        self.note_metadata_change(tx);
        Ok(())
    }

    /// Remove an object and free all its blocks in `tx`.
    pub fn remove_object(&self, tx: &Tx, object: ObjectId) -> Result<(), ObjectError> {
        self.existing_dnode(object)?;
        let mut state = self.state.lock();
        let record = state.record(tx.txg, object);
        let old = std::mem::replace(
            record,
            ObjectDirty {
                removed: true,
                ..ObjectDirty::default()
            },
        );
        state.unoverride(tx.txg, old.overrides.into_values());
        drop(state);
        self.note_metadata_change(tx);
        Ok(())
    }
}
