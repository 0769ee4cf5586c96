//! On-disk records of the dataset layer, stored in the bonus buffers of MOS objects.
//!
//! Version 2 of both records fixes every field that snapshots, clones, promote and
//! send need, so that the format does not change again when they land. A version-1 dataset
//! record is the same 320 bytes with the new fields zero, which is exactly their meaning for a
//! dataset without snapshots or clones; a version-1 directory record is 128 bytes and decodes
//! with the new fields zero (its used breakdown is recomputed and written at the next sync).
//!
//! ```text
//! Dataset record (320 bytes, bonus of a MOS object of type Dataset). A head (file system) and
//! each of its snapshots have one; a snapshot's is frozen except for the links, unique bytes
//! and deadlist that destroying a neighbour changes.
//!   0    8  dataset directory object
//!   8    8  previous snapshot object (0 = none)
//!   16   8  previous snapshot txg (blocks born after it belong to this dataset alone)
//!   24   8  next snapshot object (snapshots: the next snapshot or the head; 0 on a head)
//!   32   8  snapshot names object (heads: key/value, snapshot name -> dataset object; 0 = none)
//!   40   8  creation time (seconds since the Unix epoch)
//!   48   8  creation txg (a snapshot's txg: it holds every block born at or before it)
//!   56   8  deadlist object (key/value, birth-txg range -> block-pointer list; 0 = empty)
//!   64   8  referenced bytes (allocated, all copies)
//!   72   8  compressed bytes (physical)
//!   80   8  uncompressed bytes (logical, metadata at its physical size)
//!   88   8  unique bytes (freed if this dataset alone were destroyed)
//!   96   8  guid (send streams name snapshots by it)
//!   104  8  flags: bit 0 snapshot, bit 1 inconsistent (a receive in progress), bit 2 defer
//!           destroy (snapshots, feature user_holds), others 0
//!   112  8  clone count (snapshots: clones whose origin this is)
//!   120  8  next-clones object (snapshots: key/value of clone heads; 0 = none)
//!   128 128 root block pointer of the dataset's object set
//!   256  8  user holds object (snapshots: key/value, tag -> time held, u64 LE seconds; 0 =
//!           none; created with the first hold, removed with the last; pool/user_holds.rs)
//!   264  8  snapshot properties object (key/value; 0 = none)
//!   272  8  livelist object (clone heads: allocations and frees since the clone; 0 = none)
//!   280  8  log floor txg (heads: a log chain whose first block was born at or before it is
//!           stale, the one a rollback in that txg discarded; 0 = none; zil/claim.rs)
//!   288 32  reserved (0)
//!
//! Dataset directory record (256 bytes, bonus of a MOS object of type DatasetDir; version 1
//! was the first 128):
//!   0    8  head dataset object
//!   8    8  parent directory object (0 for the pool's root)
//!   16   8  origin snapshot object (clones; 0 = none)
//!   24   8  children object (key/value: name -> directory object)
//!   32   8  properties object (key/value: name -> value)
//!   40   8  creation time
//!   48   8  used bytes (this directory and its descendants, snapshots included)
//!   56   8  compressed bytes
//!   64   8  uncompressed bytes
//!   72   8  quota (reserved, 0)
//!   80   8  reservation (reserved, 0)
//!   88   8  livelist object (reserved for clones, 0)
//!   96  32  reserved (0)
//!   128  8  clones object (key/value of clone heads whose origin is a snapshot here; 0 = none)
//!   136  8  origin txg (clones: the origin snapshot's creation txg)
//!   144  8  used by the dataset (usedbydataset)
//!   152  8  used by snapshots (usedbysnapshots)
//!   160  8  used by children (usedbychildren)
//!   168  8  used by the refreservation (usedbyrefreservation)
//!   176  8  used by children's reservations
//!   184  8  flags: bit 0 = the used breakdown above is maintained (version 2)
//!   192 64  reserved (0)
//! ```
//!
//! The intent-log header lives in the object-set header (object/phys.rs), not here: a snapshot
//! or clone then carries its log with its tree, as in OpenZFS.

use crate::block::blkptr::{BlockError, BlockPtr, ObjectType, BLKPTR_SIZE};
use crate::types::{Guid, ObjectId, Txg};

pub const DATASET_PHYS_SIZE: usize = 320;
pub const DATASET_DIR_PHYS_SIZE: usize = 256;
/// Size of a version-1 directory record, still accepted.
pub const DATASET_DIR_PHYS_SIZE_V1: usize = 128;
/// Dataset record flags.
pub const DS_FLAG_SNAPSHOT: u64 = 1 << 0;
pub const DS_FLAG_INCONSISTENT: u64 = 1 << 1;
/// A snapshot marked for deferred destroy (`destroy -d`): it goes when its last user hold is
/// released and its last clone destroyed (OpenZFS `DS_FLAG_DEFER_DESTROY`; feature
/// `user_holds`).
pub const DS_FLAG_DEFER_DESTROY: u64 = 1 << 2;
const DS_FLAGS_KNOWN: u64 = DS_FLAG_SNAPSHOT | DS_FLAG_INCONSISTENT | DS_FLAG_DEFER_DESTROY;
/// Directory flag: the used breakdown is maintained.
pub const DD_FLAG_USED_BREAKDOWN: u64 = 1 << 0;
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
    pub flags: u64,
    pub clone_count: u64,
    pub next_clones_object: ObjectId,
    pub root: BlockPtr,
    pub user_holds_object: ObjectId,
    pub snapshot_props_object: ObjectId,
    pub livelist_object: ObjectId,
    /// A log chain whose first block was born at or before this txg is stale (a rollback).
    pub log_floor: Txg,
}

impl DatasetPhys {
    /// The record of a new head with an empty object set, no snapshots and no space, in
    /// directory `dir_object`, made in `creation_txg` at `creation_time`.
    pub fn new_head(
        dir_object: ObjectId,
        creation_time: u64,
        creation_txg: Txg,
        guid: Guid,
    ) -> DatasetPhys {
        DatasetPhys {
            dir_object,
            prev_snapshot_object: ObjectId(0),
            prev_snapshot_txg: Txg(0),
            next_snapshot_object: ObjectId(0),
            snapshot_names_object: ObjectId(0),
            creation_time,
            creation_txg,
            deadlist_object: ObjectId(0),
            referenced_bytes: 0,
            compressed_bytes: 0,
            uncompressed_bytes: 0,
            unique_bytes: 0,
            guid,
            flags: 0,
            clone_count: 0,
            next_clones_object: ObjectId(0),
            root: BlockPtr::hole(Txg(0), ObjectType::Objset, 0),
            user_holds_object: ObjectId(0),
            snapshot_props_object: ObjectId(0),
            livelist_object: ObjectId(0),
            log_floor: Txg(0),
        }
    }

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
        put_u64(&mut out, 104, self.flags);
        put_u64(&mut out, 112, self.clone_count);
        put_u64(&mut out, 120, self.next_clones_object.0);
        self.root.encode_into(&mut out[128..128 + BLKPTR_SIZE]);
        put_u64(&mut out, 256, self.user_holds_object.0);
        put_u64(&mut out, 264, self.snapshot_props_object.0);
        put_u64(&mut out, 272, self.livelist_object.0);
        put_u64(&mut out, 280, self.log_floor.0);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<DatasetPhys, BlockError> {
        if bytes.len() != DATASET_PHYS_SIZE {
            return Err(BlockError::corrupt(
                "dataset record",
                format!("dataset record of {} bytes", bytes.len()),
            ));
        }
        if bytes[288..].iter().any(|&byte| byte != 0) {
            return Err(BlockError::corrupt(
                "dataset record",
                "reserved bytes are not zero",
            ));
        }
        let flags = u64_at(bytes, 104);
        if flags & !DS_FLAGS_KNOWN != 0 {
            return Err(BlockError::corrupt(
                "dataset record",
                format!("unknown flags {flags:#x}"),
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
            flags,
            clone_count: u64_at(bytes, 112),
            next_clones_object: ObjectId(u64_at(bytes, 120)),
            root: BlockPtr::decode(&bytes[128..128 + BLKPTR_SIZE])?,
            user_holds_object: ObjectId(u64_at(bytes, 256)),
            snapshot_props_object: ObjectId(u64_at(bytes, 264)),
            livelist_object: ObjectId(u64_at(bytes, 272)),
            log_floor: Txg(u64_at(bytes, 280)),
        })
    }

    /// Whether this is a snapshot's record.
    pub fn is_snapshot(&self) -> bool {
        self.flags & DS_FLAG_SNAPSHOT != 0
    }

    /// Whether the snapshot waits for its last hold and clone to go (`destroy -d`).
    pub fn is_defer_destroy(&self) -> bool {
        self.flags & DS_FLAG_DEFER_DESTROY != 0
    }

    /// Whether the record needs feature `user_holds`: it has user holds or is marked for
    /// deferred destroy (the feature counts such records).
    pub fn uses_user_holds(&self) -> bool {
        self.user_holds_object.0 != 0 || self.is_defer_destroy()
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
    pub quota: u64,
    pub reservation: u64,
    pub livelist_object: ObjectId,
    pub clones_object: ObjectId,
    pub origin_txg: Txg,
    pub used_breakdown: UsedBreakdown,
    pub flags: u64,
}

/// Where a directory's used bytes are (zfs's `usedby*` properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UsedBreakdown {
    pub dataset: u64,
    pub snapshots: u64,
    pub children: u64,
    pub refreservation: u64,
    pub child_reservation: u64,
}

impl UsedBreakdown {
    pub fn total(&self) -> u64 {
        self.dataset + self.snapshots + self.children + self.refreservation + self.child_reservation
    }
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
        put_u64(&mut out, 72, self.quota);
        put_u64(&mut out, 80, self.reservation);
        put_u64(&mut out, 88, self.livelist_object.0);
        put_u64(&mut out, 128, self.clones_object.0);
        put_u64(&mut out, 136, self.origin_txg.0);
        let used = &self.used_breakdown;
        put_u64(&mut out, 144, used.dataset);
        put_u64(&mut out, 152, used.snapshots);
        put_u64(&mut out, 160, used.children);
        put_u64(&mut out, 168, used.refreservation);
        put_u64(&mut out, 176, used.child_reservation);
        put_u64(&mut out, 184, self.flags);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<DatasetDirPhys, BlockError> {
        if bytes.len() != DATASET_DIR_PHYS_SIZE && bytes.len() != DATASET_DIR_PHYS_SIZE_V1 {
            return Err(BlockError::corrupt(
                "dataset record",
                format!("dataset directory record of {} bytes", bytes.len()),
            ));
        }
        let reserved = bytes[96..128].iter().chain(bytes.get(192..).unwrap_or(&[]));
        if reserved.into_iter().any(|&byte| byte != 0) {
            return Err(BlockError::corrupt(
                "dataset directory record",
                "reserved bytes are not zero",
            ));
        }
        // Version 1: the new fields read as zero.
        let mut full = [0u8; DATASET_DIR_PHYS_SIZE];
        full[..bytes.len()].copy_from_slice(bytes);
        let bytes = &full[..];
        let flags = u64_at(bytes, 184);
        if flags & !DD_FLAG_USED_BREAKDOWN != 0 {
            return Err(BlockError::corrupt(
                "dataset directory record",
                format!("unknown flags {flags:#x}"),
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
            quota: u64_at(bytes, 72),
            reservation: u64_at(bytes, 80),
            livelist_object: ObjectId(u64_at(bytes, 88)),
            clones_object: ObjectId(u64_at(bytes, 128)),
            origin_txg: Txg(u64_at(bytes, 136)),
            used_breakdown: UsedBreakdown {
                dataset: u64_at(bytes, 144),
                snapshots: u64_at(bytes, 152),
                children: u64_at(bytes, 160),
                refreservation: u64_at(bytes, 168),
                child_reservation: u64_at(bytes, 176),
            },
            flags,
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
            flags: DS_FLAG_SNAPSHOT,
            clone_count: 2,
            next_clones_object: ObjectId(11),
            root: BlockPtr::hole(Txg(5), ObjectType::Objset, 0),
            user_holds_object: ObjectId(12),
            snapshot_props_object: ObjectId(13),
            livelist_object: ObjectId(14),
            log_floor: Txg(15),
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

    #[test]
    fn version_1_directory_records_decode_with_the_new_fields_zero() {
        let dir = DatasetDirPhys {
            head_dataset_object: ObjectId(4),
            children_object: ObjectId(5),
            used_bytes: 7,
            ..Default::default()
        };
        let v1 = &dir.encode()[..DATASET_DIR_PHYS_SIZE_V1];
        assert_eq!(DatasetDirPhys::decode(v1).unwrap(), dir);
        let mut unknown_flag = dir.encode();
        unknown_flag[184] = 2;
        assert!(DatasetDirPhys::decode(&unknown_flag).is_err());
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn dataset_records_decode_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = DatasetPhys::decode(&bytes);
            let _ = DatasetDirPhys::decode(&bytes);
        }

        #[test]
        fn mutated_dataset_records_never_panic(
            words in proptest::collection::vec(any::<u64>(), 8),
            snapshot: bool,
            mutations in crate::fuzz::mutations(),
        ) {
            let dataset = DatasetPhys {
                dir_object: ObjectId(words[0]),
                snapshot_names_object: ObjectId(words[1]),
                creation_time: words[2],
                creation_txg: Txg(words[3]),
                referenced_bytes: words[4],
                guid: Guid(words[5]),
                flags: if snapshot { DS_FLAG_SNAPSHOT } else { 0 },
                root: BlockPtr::hole(Txg(5), crate::block::blkptr::ObjectType::Objset, 0),
                livelist_object: ObjectId(words[6]),
                log_floor: Txg(words[7]),
                prev_snapshot_object: ObjectId(0),
                prev_snapshot_txg: Txg(0),
                next_snapshot_object: ObjectId(0),
                deadlist_object: ObjectId(0),
                compressed_bytes: 0,
                uncompressed_bytes: 0,
                unique_bytes: 0,
                clone_count: 0,
                next_clones_object: ObjectId(0),
                user_holds_object: ObjectId(0),
                snapshot_props_object: ObjectId(0),
            };
            let bytes = crate::fuzz::mutate(dataset.encode().to_vec(), &mutations);
            if let Ok(decoded) = DatasetPhys::decode(&bytes) {
                prop_assert_eq!(DatasetPhys::decode(&decoded.encode()).unwrap(), decoded);
            }
            let dir = DatasetDirPhys {
                head_dataset_object: ObjectId(words[0]),
                children_object: ObjectId(words[1]),
                used_bytes: words[4],
                ..Default::default()
            };
            let bytes = crate::fuzz::mutate(dir.encode().to_vec(), &mutations);
            if let Ok(decoded) = DatasetDirPhys::decode(&bytes) {
                prop_assert_eq!(DatasetDirPhys::decode(&decoded.encode()).unwrap(), decoded);
            }
        }

        #[test]
        fn dataset_dir_round_trips(values in proptest::collection::vec(any::<u64>(), 17)) {
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
                quota: values[9],
                reservation: values[10],
                livelist_object: ObjectId(values[11]),
                clones_object: ObjectId(values[12]),
                origin_txg: Txg(values[13]),
                used_breakdown: UsedBreakdown {
                    dataset: values[14],
                    snapshots: values[15],
                    children: values[16],
                    ..Default::default()
                },
                flags: DD_FLAG_USED_BREAKDOWN,
            };
            prop_assert_eq!(DatasetDirPhys::decode(&dir.encode()).unwrap(), dir);
        }
    }
}
