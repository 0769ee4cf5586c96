//! An object's bonus buffer and spill block (OpenZFS dnode bonus, DNODE_FLAG_SPILL_BLKPTR):
//! reads that see changes not yet synced, and changes that keep the bonus within 192 bytes while
//! a spill block exists (phys.rs has the layout).

use std::sync::Arc;

use crate::block::blkptr::{BlockPtr, ObjectType};
use crate::txg::Tx;
use crate::types::ObjectId;

use super::phys::{bonus_size_max, SPILL_SIZE_MAX, SPILL_SIZE_MIN};
use super::read;
use super::{ObjectError, ObjectSet};

/// Where the current spill block of an object is: a change not yet synced, or the tree's.
enum SpillSource {
    Dirty(Option<Arc<Vec<u8>>>),
    Tree(Option<BlockPtr>),
}

impl ObjectSet {
    pub fn bonus(&self, object: ObjectId) -> Result<Vec<u8>, ObjectError> {
        Ok(self.existing_dnode(object)?.bonus)
    }

    pub fn set_bonus(
        &self,
        tx: &Tx,
        object: ObjectId,
        bonus_type: ObjectType,
        bonus: &[u8],
    ) -> Result<(), ObjectError> {
        self.existing_dnode(object)?;
        if bonus.len() > bonus_size_max(self.has_spill(object)?) {
            return Err(ObjectError::BonusTooLarge(bonus.len()));
        }
        let mut state = self.state.lock();
        let record = state.record(tx.txg, object);
        record.bonus = Some((bonus_type, bonus.to_vec()));
        drop(state);
        self.note_metadata_change(tx);
        Ok(())
    }

    /// Where the current spill block of `object` is, without reading the disk;
    /// [`ObjectError::NoSuchObject`] if the object does not exist. The same look decides both
    /// (see "Reading" in the documentation of [`super`]): removing an object takes no lock a
    /// reader of its spill block holds, so an existence check made before the look could be
    /// stale by then, and a removed object's spill block would read as none. The dirty records
    /// are looked at first, under the object set's lock; the tree read after it is at least as
    /// new (a sync drops a record only once the tree being synced holds it), so a free dnode
    /// there means the object was removed by then.
    fn spill_source(&self, object: ObjectId) -> Result<SpillSource, ObjectError> {
        read::run_block_lookup_hook(object, read::SPILL_BLKID);
        // Object 0 is the meta-dnode: not an object of the set.
        if object.0 == 0 {
            return Err(ObjectError::NoSuchObject(object));
        }
        {
            let state = self.state.lock();
            for dirty in state.dirty.values().rev() {
                if let Some(record) = dirty.objects.get(&object) {
                    if record.removed {
                        return Err(ObjectError::NoSuchObject(object));
                    }
                    if let Some(spill) = &record.spill {
                        return Ok(SpillSource::Dirty(spill.clone()));
                    }
                    if record.create.is_some() {
                        return Ok(SpillSource::Dirty(None));
                    }
                }
            }
        }
        let dnode = self.tree_dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        Ok(SpillSource::Tree(dnode.spill))
    }

    /// Whether `object` has a spill block (changes not yet synced included).
    pub fn has_spill(&self, object: ObjectId) -> Result<bool, ObjectError> {
        Ok(match self.spill_source(object)? {
            SpillSource::Dirty(spill) => spill.is_some(),
            SpillSource::Tree(spill) => spill.is_some(),
        })
    }

    /// The contents of `object`'s spill block, None if it has none;
    /// [`ObjectError::NoSuchObject`] if the object does not exist.
    pub fn spill(&self, object: ObjectId) -> Result<Option<Arc<Vec<u8>>>, ObjectError> {
        let _l2 = self.l2_scope();
        match self.spill_source(object)? {
            SpillSource::Dirty(spill) => Ok(spill),
            SpillSource::Tree(None) => Ok(None),
            SpillSource::Tree(Some(bp)) => {
                let data = self.io.read(&bp)?;
                if data.len() != bp.size_logical as usize {
                    return Err(ObjectError::Corrupt(format!(
                        "object {object}: spill block of {} bytes, its pointer says {}",
                        data.len(),
                        bp.size_logical
                    )));
                }
                Ok(Some(data))
            }
        }
    }

    /// Give `object` a spill block holding `spill` (None: remove it) in `tx`. The contents
    /// are the layer above's: 512 bytes to 128 KiB, a multiple of 512, not all zeros. While
    /// an object has a spill block its bonus buffer holds at most
    /// [`phys::DNODE_BONUS_SIZE_MAX_WITH_SPILL`] bytes: shrink the bonus before adding a spill
    /// block, remove the spill block before growing the bonus.
    pub fn set_spill(
        &self,
        tx: &Tx,
        object: ObjectId,
        spill: Option<Vec<u8>>,
    ) -> Result<(), ObjectError> {
        let dnode = self.existing_dnode(object)?;
        if let Some(spill) = &spill {
            if !(SPILL_SIZE_MIN..=SPILL_SIZE_MAX).contains(&spill.len())
                || !spill.len().is_multiple_of(SPILL_SIZE_MIN)
                || spill.iter().all(|&byte| byte == 0)
            {
                return Err(ObjectError::Invalid(format!(
                    "spill block of {} bytes",
                    spill.len()
                )));
            }
            if dnode.bonus.len() > bonus_size_max(true) {
                return Err(ObjectError::BonusTooLarge(dnode.bonus.len()));
            }
        }
        let bytes = spill.as_ref().map_or(0, |spill| spill.len() as u64);
        let mut state = self.state.lock();
        let record = state.record(tx.txg, object);
        record.spill = Some(spill.map(Arc::new));
        drop(state);
        self.note_metadata_change(tx);
        if let Some(manager) = self.dirty_accounting.lock().as_ref() {
            manager.add_dirty(tx.txg, bytes);
        }
        Ok(())
    }
}
