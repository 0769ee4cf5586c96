//! The narrow storage trait the space layer owns and the object layer implements on the MOS.
//!
//! OpenZFS has a cycle here: space maps are objects, objects are written through the I/O
//! pipeline, and the pipeline allocates from metaslabs. tarn breaks it with this trait: the space
//! layer says *what* bytes a space-map object holds; the object layer (above) decides how they
//! become blocks. All methods take `&self`; the implementation synchronises internally.

use crate::types::{ObjectId, Txg};

/// Errors the storage reports to the space layer. Kept opaque: the space layer only needs to
/// stop and pass them up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StorageError(pub String);

/// Storage for space-map objects and metaslab arrays, living in the pool's MOS.
pub trait SpaceStorage: Send + Sync {
    /// Create a new, empty object whose data blocks are `block_size` bytes, in syncing txg `txg`.
    fn create_object(&self, block_size: u32, txg: Txg) -> Result<ObjectId, StorageError>;
    /// Free an object and all its blocks in syncing txg `txg`.
    fn free_object(&self, object: ObjectId, txg: Txg) -> Result<(), StorageError>;
    /// Read `buf.len()` bytes at `offset` of the object, as of the last synced txg plus whatever
    /// this space layer already wrote in the syncing txg. Holes read as zeros.
    fn read(&self, object: ObjectId, offset: u64, buf: &mut [u8]) -> Result<(), StorageError>;
    /// Write bytes at `offset` of the object in syncing txg `txg`.
    fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        txg: Txg,
    ) -> Result<(), StorageError>;
    /// Discard the object's data beyond `length` bytes (used when condensing).
    fn truncate(&self, object: ObjectId, length: u64, txg: Txg) -> Result<(), StorageError>;
    /// Read the object's bonus buffer (where a space map keeps its header).
    fn read_bonus(&self, object: ObjectId) -> Result<Vec<u8>, StorageError>;
    /// Replace the object's bonus buffer in syncing txg `txg`. At most [`BONUS_SIZE_MAX`] bytes.
    fn write_bonus(&self, object: ObjectId, bonus: &[u8], txg: Txg) -> Result<(), StorageError>;
}

/// Largest bonus buffer a [`SpaceStorage`] object accepts.
pub const BONUS_SIZE_MAX: usize = 320;
