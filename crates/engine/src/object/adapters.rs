//! Adapters that let lower-level code see objects of an object set through narrow traits:
//! the space layer's [`SpaceStorage`] on the MOS, and the key/value code's [`KvBlocks`].

use std::sync::Arc;

use super::kv::{KvBlocks, KvError};
use super::{ObjectProps, ObjectSet, Tx};
use crate::block::blkptr::{ChecksumType, Compression, ObjectType};
use crate::space::storage::{SpaceStorage, StorageError};
use crate::types::{ObjectId, Txg};

/// The MOS as storage for space maps and metaslab arrays.
pub struct MosSpaceStorage<'a> {
    pub mos: &'a ObjectSet,
}

fn storage_error(error: super::ObjectError) -> StorageError {
    StorageError(error.to_string())
}

impl SpaceStorage for MosSpaceStorage<'_> {
    fn create_object(&self, block_size: u32, txg: Txg) -> Result<ObjectId, StorageError> {
        let props = ObjectProps {
            object_type: ObjectType::SpaceMap,
            data_block_size: block_size,
            indirect_block_shift: self.mos.io().tunables.indirect_block_shift as u8,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Lz4,
            copies: 3,
        };
        self.mos
            .create_object(&Tx::syncing(txg), props, ObjectType::SpaceMap, &[])
            .map_err(storage_error)
    }

    fn free_object(&self, object: ObjectId, txg: Txg) -> Result<(), StorageError> {
        self.mos
            .remove_object(&Tx::syncing(txg), object)
            .map_err(storage_error)
    }

    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.mos.read(object, offset, buf).map_err(storage_error)
    }

    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        txg: Txg,
    ) -> Result<(), StorageError> {
        self.mos
            .write(&Tx::syncing(txg), object, offset, data)
            .map_err(storage_error)
    }

    fn truncate(&self, object: ObjectId, length: u64, txg: Txg) -> Result<(), StorageError> {
        self.mos
            .free_range(&Tx::syncing(txg), object, length, u64::MAX)
            .map_err(storage_error)
    }

    fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError> {
        self.mos.bonus(object).map_err(storage_error)
    }

    fn write_bonus(&self, object: ObjectId, bonus: &[u8], txg: Txg) -> Result<(), StorageError> {
        self.mos
            .set_bonus(&Tx::syncing(txg), object, ObjectType::SpaceMap, bonus)
            .map_err(storage_error)
    }
}

/// An object removed under a key/value handle reads as "not found" (a directory removed while
/// being listed is gone, ENOENT); other failures are storage errors.
fn kv_error(error: super::ObjectError) -> KvError {
    match error {
        super::ObjectError::NoSuchObject(_) => KvError::NotFound,
        other => KvError::Storage(other.to_string()),
    }
}

/// One key/value object of an object set, for reading (`tx` None) or changing in `tx`.
/// The handle holds the object's writer lock for its whole life: a key/value operation reads
/// and writes several blocks and must not interleave with another on the same object.
pub struct KvObject<'a> {
    pub objset: &'a ObjectSet,
    pub object: ObjectId,
    pub tx: Option<Tx>,
    block_size: usize,
    _writer: super::ObjectLockGuard,
}

impl<'a> KvObject<'a> {
    pub fn new(
        objset: &'a ObjectSet,
        object: ObjectId,
        tx: Option<Tx>,
    ) -> Result<KvObject<'a>, super::ObjectError> {
        let block_size = objset.info(object)?.data_block_size as usize;
        let writer = objset.lock_object(object);
        Ok(KvObject {
            objset,
            object,
            tx,
            block_size,
            _writer: writer,
        })
    }

    fn tx(&self) -> Result<Tx, KvError> {
        self.tx
            .ok_or_else(|| KvError::Storage("key/value object opened read-only".into()))
    }
}

impl KvBlocks for KvObject<'_> {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn read_block(&self, blkid: u64) -> Result<Option<Arc<Vec<u8>>>, KvError> {
        self.objset
            .read_block_if_present(self.object, blkid)
            .map_err(kv_error)
    }

    fn write_block(&mut self, blkid: u64, data: Arc<Vec<u8>>) -> Result<(), KvError> {
        let tx = self.tx()?;
        self.objset
            .write_block(&tx, self.object, blkid, data)
            .map_err(kv_error)
    }

    fn free_block(&mut self, blkid: u64) -> Result<(), KvError> {
        let tx = self.tx()?;
        let block_size = self.block_size as u64;
        self.objset
            .free_range_locked(&tx, self.object, blkid * block_size, block_size)
            .map_err(kv_error)
    }
}

/// A key/value error as an object error naming the object.
pub fn kv_object_error(object: ObjectId) -> impl Fn(KvError) -> super::ObjectError {
    move |error| super::ObjectError::Corrupt(format!("key/value object {object}: {error}"))
}

/// Create an empty key/value object in `tx` (`props` with the key/value object type).
pub fn create_kv_object(
    objset: &ObjectSet,
    tx: &Tx,
    props: ObjectProps,
) -> Result<ObjectId, super::ObjectError> {
    let props = ObjectProps {
        object_type: ObjectType::KeyValue,
        ..props
    };
    let object = objset.create_object(tx, props, ObjectType::None, &[])?;
    let mut handle = KvObject::new(objset, object, Some(*tx))?;
    super::kv::create(&mut handle).map_err(kv_object_error(object))?;
    Ok(object)
}

/// Every entry of a key/value object, in cookie order.
pub fn kv_entries(
    objset: &ObjectSet,
    object: ObjectId,
) -> Result<Vec<super::kv::KvEntry>, super::ObjectError> {
    let handle = KvObject::new(objset, object, None)?;
    let mut cookie = 0;
    let mut entries = Vec::new();
    loop {
        let batch = super::kv::list(&handle, cookie, 256).map_err(kv_object_error(object))?;
        let Some(last) = batch.last() else { break };
        cookie = last.cookie + 1;
        entries.extend(batch);
    }
    Ok(entries)
}
