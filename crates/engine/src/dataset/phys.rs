//! On-disk records of the dataset layer, stored in the bonus buffers of MOS objects.
//!
//! ```text
//! Dataset record (320 bytes, bonus of a MOS object of type Dataset):
//!   0    8  dataset directory object
//!   8    8  previous snapshot object (0 = none)
//!   16   8  previous snapshot txg (blocks born after it belong to this dataset alone)
//!   24   8  next snapshot object (0 = none; set on snapshots)
//!   32   8  snapshot names object (key/value; 0 = none yet)
//!   40   8  creation time (seconds since the Unix epoch)
//!   48   8  creation txg
//!   56   8  deadlist object (0 = none yet)
//!   64   8  referenced bytes (allocated, all copies)
//!   72   8  compressed bytes (physical)
//!   80   8  uncompressed bytes (logical)
//!   88   8  unique bytes (referenced by no snapshot)
//!   96   8  guid
//!   104  8  flags (reserved, 0)
//!   112 16  reserved (0)
//!   128 128 root block pointer of the dataset's object set
//!   256 64  reserved (0)
//!
//! Dataset directory record (128 bytes, bonus of a MOS object of type DatasetDir):
//!   0    8  head dataset object
//!   8    8  parent directory object (0 for the pool's root)
//!   16   8  origin snapshot object (clones; 0 = none)
//!   24   8  children object (key/value: name -> directory object)
//!   32   8  properties object (key/value: name -> value)
//!   40   8  creation time
//!   48   8  used bytes (this directory and its descendants)
//!   56   8  compressed bytes
//!   64   8  uncompressed bytes
//!   72   8  quota (reserved, 0)
//!   80   8  reservation (reserved, 0)
//!   88   8  livelist object (reserved, 0)
//!   96  32  reserved (0)
//! ```

use crate::block::blkptr::{BlockError, BlockPtr, BLKPTR_SIZE};
use crate::types::{Guid, ObjectId, Txg};

pub const DATASET_PHYS_SIZE: usize = 320;
pub const DATASET_DIR_PHYS_SIZE: usize = 128;
const _: () = assert!(128 + BLKPTR_SIZE + 64 == DATASET_PHYS_SIZE);
const _: () = assert!(DATASET_PHYS_SIZE <= crate::object::phys::DNODE_BONUS_SIZE_MAX);

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetPhys {
    pub dir_object: ObjectId,
    pub prev_snapshot_object: ObjectId,
    pub prev_snapshot_txg: Txg,
    pub next_snapshot_object: ObjectId,
    pub snapshot_names_object: ObjectId,
    pub creation_time: u64,
    pub creation_txg: Txg,
    pub deadlist_object: ObjectId,
    pub referenced_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub unique_bytes: u64,
    pub guid: Guid,
    pub root: BlockPtr,
}

impl DatasetPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; DATASET_PHYS_SIZE];
        put_u64(&mut out, 0, self.dir_object.0);
        put_u64(&mut out, 8, self.prev_snapshot_object.0);
        put_u64(&mut out, 16, self.prev_snapshot_txg.0);
        put_u64(&mut out, 24, self.next_snapshot_object.0);
        put_u64(&mut out, 32, self.snapshot_names_object.0);
        put_u64(&mut out, 40, self.creation_time);
        put_u64(&mut out, 48, self.creation_txg.0);
        put_u64(&mut out, 56, self.deadlist_object.0);
        put_u64(&mut out, 64, self.referenced_bytes);
        put_u64(&mut out, 72, self.compressed_bytes);
        put_u64(&mut out, 80, self.uncompressed_bytes);
        put_u64(&mut out, 88, self.unique_bytes);
        put_u64(&mut out, 96, self.guid.0);
        self.root.encode_into(&mut out[128..128 + BLKPTR_SIZE]);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<DatasetPhys, BlockError> {
        if bytes.len() != DATASET_PHYS_SIZE {
            return Err(BlockError::corrupt(
                "dataset record",
                format!("dataset record of {} bytes", bytes.len()),
            ));
        }
        if bytes[104..128]
            .iter()
            .chain(&bytes[256..])
            .any(|&byte| byte != 0)
        {
            return Err(BlockError::corrupt(
                "dataset record",
                "reserved bytes are not zero",
            ));
        }
        Ok(DatasetPhys {
            dir_object: ObjectId(u64_at(bytes, 0)),
            prev_snapshot_object: ObjectId(u64_at(bytes, 8)),
            prev_snapshot_txg: Txg(u64_at(bytes, 16)),
            next_snapshot_object: ObjectId(u64_at(bytes, 24)),
            snapshot_names_object: ObjectId(u64_at(bytes, 32)),
            creation_time: u64_at(bytes, 40),
            creation_txg: Txg(u64_at(bytes, 48)),
            deadlist_object: ObjectId(u64_at(bytes, 56)),
            referenced_bytes: u64_at(bytes, 64),
            compressed_bytes: u64_at(bytes, 72),
            uncompressed_bytes: u64_at(bytes, 80),
            unique_bytes: u64_at(bytes, 88),
            guid: Guid(u64_at(bytes, 96)),
            root: BlockPtr::decode(&bytes[128..128 + BLKPTR_SIZE])?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DatasetDirPhys {
    pub head_dataset_object: ObjectId,
    pub parent_dir_object: ObjectId,
    pub origin_snapshot_object: ObjectId,
    pub children_object: ObjectId,
    pub properties_object: ObjectId,
    pub creation_time: u64,
    pub used_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
}

impl DatasetDirPhys {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; DATASET_DIR_PHYS_SIZE];
        put_u64(&mut out, 0, self.head_dataset_object.0);
        put_u64(&mut out, 8, self.parent_dir_object.0);
        put_u64(&mut out, 16, self.origin_snapshot_object.0);
        put_u64(&mut out, 24, self.children_object.0);
        put_u64(&mut out, 32, self.properties_object.0);
        put_u64(&mut out, 40, self.creation_time);
        put_u64(&mut out, 48, self.used_bytes);
        put_u64(&mut out, 56, self.compressed_bytes);
        put_u64(&mut out, 64, self.uncompressed_bytes);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<DatasetDirPhys, BlockError> {
        if bytes.len() != DATASET_DIR_PHYS_SIZE {
            return Err(BlockError::corrupt(
                "dataset record",
                format!("dataset directory record of {} bytes", bytes.len()),
            ));
        }
        if bytes[72..].iter().any(|&byte| byte != 0) {
            return Err(BlockError::corrupt(
                "dataset directory record",
                "reserved bytes are not zero",
            ));
        }
        Ok(DatasetDirPhys {
            head_dataset_object: ObjectId(u64_at(bytes, 0)),
            parent_dir_object: ObjectId(u64_at(bytes, 8)),
            origin_snapshot_object: ObjectId(u64_at(bytes, 16)),
            children_object: ObjectId(u64_at(bytes, 24)),
            properties_object: ObjectId(u64_at(bytes, 32)),
            creation_time: u64_at(bytes, 40),
            used_bytes: u64_at(bytes, 48),
            compressed_bytes: u64_at(bytes, 56),
            uncompressed_bytes: u64_at(bytes, 64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::blkptr::ObjectType;

    #[test]
    fn records_round_trip() {
        let dataset = DatasetPhys {
            dir_object: ObjectId(3),
            prev_snapshot_object: ObjectId(0),
            prev_snapshot_txg: Txg(0),
            next_snapshot_object: ObjectId(0),
            snapshot_names_object: ObjectId(9),
            creation_time: 1_700_000_000,
            creation_txg: Txg(4),
            deadlist_object: ObjectId(0),
            referenced_bytes: 12345,
            compressed_bytes: 999,
            uncompressed_bytes: 4096,
            unique_bytes: 12345,
            guid: Guid(77),
            root: BlockPtr::hole(Txg(5), ObjectType::Objset, 0),
        };
        assert_eq!(DatasetPhys::decode(&dataset.encode()).unwrap(), dataset);
        let dir = DatasetDirPhys {
            head_dataset_object: ObjectId(4),
            used_bytes: 7,
            ..Default::default()
        };
        assert_eq!(DatasetDirPhys::decode(&dir.encode()).unwrap(), dir);
        assert!(DatasetPhys::decode(&[0u8; 10]).is_err());
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn dataset_records_decode_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = DatasetPhys::decode(&bytes);
            let _ = DatasetDirPhys::decode(&bytes);
        }

        #[test]
        fn dataset_dir_round_trips(values in proptest::collection::vec(any::<u64>(), 9)) {
            let dir = DatasetDirPhys {
                head_dataset_object: ObjectId(values[0]),
                parent_dir_object: ObjectId(values[1]),
                origin_snapshot_object: ObjectId(values[2]),
                children_object: ObjectId(values[3]),
                properties_object: ObjectId(values[4]),
                creation_time: values[5],
                used_bytes: values[6],
                compressed_bytes: values[7],
                uncompressed_bytes: values[8],
            };
            prop_assert_eq!(DatasetDirPhys::decode(&dir.encode()).unwrap(), dir);
        }
    }
}
