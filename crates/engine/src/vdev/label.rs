//! Labels: the pool config and the uberblock ring, four times on every leaf.
//!
//! Placement (device size `A` aligned down to [`VDEV_LABEL_SIZE`]):
//!
//! ```text
//!  label   offset
//!  L0      0
//!  L1      256 KiB
//!  L2      A - 512 KiB
//!  L3      A - 256 KiB
//!  data    [4 MiB, A - 512 KiB)       (DVA offset 0 is byte 4 MiB)
//! ```
//!
//! One 256 KiB label:
//!
//! ```text
//!  offset   size      contents
//!  0        16 KiB    reserved, never written by tarn
//!  16 KiB   112 KiB   config area: ConfigHeader, then the CBOR payload, then zeros
//!  128 KiB  128 KiB   uberblock ring: slots of 2^clamp(ashift, 10, 13) bytes, opaque here
//! ```
//!
//! The config header (48 bytes, little-endian):
//!
//! ```text
//!  offset  size  field
//!  0       8     magic            CONFIG_MAGIC ("tarnlabl" as a little-endian u64)
//!  8       4     format_version   LABEL_FORMAT_VERSION; others are refused
//!  12      4     payload_length   bytes of CBOR payload that follow the header
//!  16      32    checksum         BLAKE3 of the payload bytes
//! ```
//!
//! An all-zero header means "no label here" (a fresh or wiped device). Anything else that does
//! not validate is corruption.

use std::collections::BTreeMap;

use crate::space::AllocClass;
use serde::{Deserialize, Serialize};

use super::{BlockDevice, VdevError};

/// Size of one label.
pub const VDEV_LABEL_SIZE: u64 = 256 << 10;
/// Labels per leaf.
pub const VDEV_LABELS: usize = 4;
/// Front reserve: two labels and the reserved boot area. DVA offset 0 is this byte of a leaf.
pub const VDEV_LABEL_START_SIZE: u64 = 4 << 20;
/// Back reserve: two labels.
pub const VDEV_LABEL_END_SIZE: u64 = 2 * VDEV_LABEL_SIZE;
/// Smallest device tarn accepts as a leaf.
pub const VDEV_MIN_DEVICE_SIZE: u64 = 64 << 20;

/// Reserved bytes at the start of every label.
pub const LABEL_RESERVED_SIZE: u64 = 16 << 10;
/// Offset of the config area within a label.
pub const LABEL_CONFIG_OFFSET: u64 = LABEL_RESERVED_SIZE;
/// Size of the config area (header and payload).
pub const LABEL_CONFIG_SIZE: u64 = 112 << 10;
/// Offset of the uberblock ring within a label.
pub const LABEL_UBERBLOCK_RING_OFFSET: u64 = LABEL_CONFIG_OFFSET + LABEL_CONFIG_SIZE;
/// Size of the uberblock ring.
pub const LABEL_UBERBLOCK_RING_SIZE: u64 = 128 << 10;

const _: () =
    assert!(LABEL_RESERVED_SIZE + LABEL_CONFIG_SIZE + LABEL_UBERBLOCK_RING_SIZE == VDEV_LABEL_SIZE);
const _: () = assert!(VDEV_LABEL_START_SIZE >= 2 * VDEV_LABEL_SIZE);
const _: () = assert!(VDEV_MIN_DEVICE_SIZE > VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE);

/// "tarnlabl" read as a little-endian u64.
pub const CONFIG_MAGIC: u64 = u64::from_le_bytes(*b"tarnlabl");
/// The label format this code writes and the only one it reads.
pub const LABEL_FORMAT_VERSION: u32 = 1;
/// The config version ([`LabelConfig::version`]) this code writes: the pool format version
/// (`pool::POOL_VERSION`, which asserts that the two agree).
pub const LABEL_CONFIG_VERSION: u64 = 2;

/// Size of the encoded [`ConfigHeader`].
pub const CONFIG_HEADER_SIZE: usize = 48;
/// Largest CBOR payload a label holds.
pub const CONFIG_PAYLOAD_MAX: usize = LABEL_CONFIG_SIZE as usize - CONFIG_HEADER_SIZE;

/// The header in front of the config payload; see the module diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigHeader {
    pub magic: u64,
    pub format_version: u32,
    pub payload_length: u32,
    pub checksum: [u8; 32],
}

const _: () = assert!(8 + 4 + 4 + 32 == CONFIG_HEADER_SIZE);

impl ConfigHeader {
    pub fn encode(&self) -> [u8; CONFIG_HEADER_SIZE] {
        let mut bytes = [0u8; CONFIG_HEADER_SIZE];
        bytes[0..8].copy_from_slice(&self.magic.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.payload_length.to_le_bytes());
        bytes[16..48].copy_from_slice(&self.checksum);
        bytes
    }

    pub fn decode(bytes: &[u8; CONFIG_HEADER_SIZE]) -> ConfigHeader {
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        ConfigHeader {
            magic: u64_at(0),
            format_version: u32_at(8),
            payload_length: u32_at(12),
            checksum: bytes[16..48].try_into().unwrap(),
        }
    }
}

/// The state of a pool as recorded in its labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolState {
    /// Imported (or in use when the machine died).
    Active,
    /// Cleanly exported.
    Exported,
    /// Destroyed; import offers it only when asked for destroyed pools.
    Destroyed,
}

/// The kind of a top-level vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopVdevKind {
    /// A single leaf device.
    Leaf,
    /// Two or more leaves holding the same data.
    Mirror,
    /// `parity + 1` or more leaves holding each block's data in columns beside `parity`
    /// columns of parity (1 to 3): OpenZFS's RAID-Z ([`super::raidz`]). Needs the feature
    /// `com.tarn:raidz` to read.
    Raidz { parity: u8 },
}

impl TopVdevKind {
    /// The name zpool shows for a top-level vdev of this kind with id `id` (`mirror-0`,
    /// `raidz2-1`), or `None` for a single leaf, which shows its path.
    pub fn group_name(&self, id: u32) -> Option<String> {
        match self {
            TopVdevKind::Leaf => None,
            TopVdevKind::Mirror => Some(format!("mirror-{id}")),
            TopVdevKind::Raidz { parity } => Some(format!("raidz{parity}-{id}")),
        }
    }

    /// Columns of parity per row: 0 for a leaf or a mirror.
    pub fn parity(&self) -> usize {
        match self {
            TopVdevKind::Raidz { parity } => *parity as usize,
            _ => 0,
        }
    }
}

/// One leaf of a top-level vdev in the config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafConfig {
    pub guid: u64,
    pub path: String,
    /// While a `pool replace` runs: the guid of the leaf this one replaces (0: none). Labels
    /// written before device changes existed lack it (read as 0).
    #[serde(default)]
    pub replaces: u64,
}

/// One top-level vdev in the config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopVdevConfig {
    pub id: u32,
    pub guid: u64,
    pub kind: TopVdevKind,
    pub ashift: u32,
    /// Allocatable bytes of the data area (the same on every child).
    pub asize: u64,
    pub ms_shift: u32,
    /// Object id of the metaslab array in the MOS (0 before the first sync creates it).
    pub ms_array: u64,
    pub children: Vec<LeafConfig>,
    /// What is allocated on this vdev: `Normal` (data and metadata) or `Log` (intent-log
    /// blocks only). Labels written before log vdevs existed lack it (read as `Normal`).
    #[serde(default)]
    pub class: AllocClass,
    /// RAID-Z only: the expansions that finished, oldest first: the width each block was
    /// written with follows from its birth (`raidz/widths.rs`). Absent before the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raidz_expansions: Vec<RaidzExpansion>,
    /// RAID-Z only: an expansion is under way (its new child is the last one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raidz_expanding: bool,
}

/// One finished RAID-Z expansion: blocks born in `txg` or later (until the next expansion's)
/// were written `width` columns wide (`vdev/raidz/widths.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaidzExpansion {
    pub txg: u64,
    pub width: u32,
}

/// The pool config stored in every label (OpenZFS's label nvlist).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelConfig {
    pub version: u64,
    pub name: String,
    pub pool_guid: u64,
    pub state: PoolState,
    /// The txg in which this config was written.
    pub txg: u64,
    pub hostname: String,
    /// The top-level vdev this label's leaf belongs to.
    pub top_guid: u64,
    /// This label's leaf.
    pub leaf_guid: u64,
    pub vdev_tree: Vec<TopVdevConfig>,
    /// The enabled features a build must know to read the pool while they are active.
    pub features_for_read: Vec<String>,
    /// The enabled features a build must know to write the pool while they are active (read-only
    /// compatible: `pool/features.rs`). None in configs written before the list existed, whose
    /// `features` counts are 1 for every enabled feature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_for_write: Option<Vec<String>>,
    /// Every enabled feature's refcount (0: enabled, more: active).
    pub features: BTreeMap<String, u64>,
    /// The pool's cache devices (L2ARC, `pool/l2cache.rs`), or that this label is a cache
    /// device's; absent in labels written before cache devices existed.
    #[serde(default)]
    pub l2cache: L2cacheConfig,
}

/// The cache-device part of a label (one field of [`LabelConfig`], so that labels without it
/// read as "no cache devices, not a cache device").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct L2cacheConfig {
    /// The pool's cache devices (in a data leaf's label).
    #[serde(default)]
    pub devices: Vec<CacheDeviceConfig>,
    /// This label is a cache device's (`leaf_guid` is the device's guid, `vdev_tree` empty):
    /// import scans never take it for a data leaf, and `pool create`/`add` refuse it without -f.
    #[serde(default)]
    pub is_cache_device: bool,
}

/// One cache device in the pool config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheDeviceConfig {
    pub guid: u64,
    pub path: String,
}

/// Which labels [`write_labels`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelSet {
    /// L0 and L2, written before the uberblock in a config sync.
    Even,
    /// L1 and L3, written after the uberblock.
    Odd,
    All,
}

impl LabelSet {
    pub fn labels(self) -> &'static [usize] {
        match self {
            LabelSet::Even => &[0, 2],
            LabelSet::Odd => &[1, 3],
            LabelSet::All => &[0, 1, 2, 3],
        }
    }
}

/// The device size rounded down to a whole number of labels.
fn aligned_size(device_size: u64) -> u64 {
    device_size & !(VDEV_LABEL_SIZE - 1)
}

/// Bytes of the data area of a leaf of `device_size` bytes: between the front and back
/// reserves. 0 for a device too small to hold both reserves.
pub fn leaf_allocatable_bytes(device_size: u64) -> u64 {
    aligned_size(device_size).saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

/// Absolute device offset of label `index` on a device of `device_size` bytes.
pub fn label_offset(index: usize, device_size: u64) -> u64 {
    assert!(index < VDEV_LABELS, "label index {index} out of range");
    let aligned = aligned_size(device_size);
    match index {
        0 => 0,
        1 => VDEV_LABEL_SIZE,
        2 => aligned - 2 * VDEV_LABEL_SIZE,
        _ => aligned - VDEV_LABEL_SIZE,
    }
}

fn check_device_size(dev: &dyn BlockDevice) -> Result<u64, VdevError> {
    let size_bytes = dev.size_bytes();
    if size_bytes < VDEV_MIN_DEVICE_SIZE {
        return Err(VdevError::DeviceTooSmall {
            device: dev.describe(),
            size_bytes,
            minimum_bytes: VDEV_MIN_DEVICE_SIZE,
        });
    }
    Ok(size_bytes)
}

/// Encode `config` into a full config area ([`LABEL_CONFIG_SIZE`] bytes).
pub fn encode_config_area(config: &LabelConfig) -> Result<Vec<u8>, VdevError> {
    let mut payload = Vec::new();
    ciborium::into_writer(config, &mut payload).map_err(|error| VdevError::ConfigEncode {
        what: error.to_string(),
    })?;
    if payload.len() > CONFIG_PAYLOAD_MAX {
        return Err(VdevError::ConfigTooLarge {
            size_bytes: payload.len() as u64,
            maximum_bytes: CONFIG_PAYLOAD_MAX as u64,
        });
    }
    let header = ConfigHeader {
        magic: CONFIG_MAGIC,
        format_version: LABEL_FORMAT_VERSION,
        payload_length: payload.len() as u32,
        checksum: *blake3::hash(&payload).as_bytes(),
    };
    let mut area = vec![0u8; LABEL_CONFIG_SIZE as usize];
    area[..CONFIG_HEADER_SIZE].copy_from_slice(&header.encode());
    area[CONFIG_HEADER_SIZE..CONFIG_HEADER_SIZE + payload.len()].copy_from_slice(&payload);
    Ok(area)
}

/// Decode a config area read from disk. `Ok(None)` if the header is all zero (no label);
/// `Err(what)` says what is wrong with a present but invalid one. Never panics.
pub fn decode_config_area(area: &[u8]) -> Result<Option<LabelConfig>, String> {
    let Some(header_bytes) = area.get(..CONFIG_HEADER_SIZE) else {
        return Err(format!(
            "config area is {} bytes, shorter than its {CONFIG_HEADER_SIZE}-byte header",
            area.len()
        ));
    };
    if header_bytes.iter().all(|&byte| byte == 0) {
        return Ok(None);
    }
    let header = ConfigHeader::decode(header_bytes.try_into().expect("length checked above"));
    if header.magic != CONFIG_MAGIC {
        return Err(format!(
            "bad magic {:#018x} (expected {CONFIG_MAGIC:#018x})",
            header.magic
        ));
    }
    if header.format_version != LABEL_FORMAT_VERSION {
        return Err(format!(
            "unsupported label format version {} (this build reads {LABEL_FORMAT_VERSION})",
            header.format_version
        ));
    }
    let payload_length = header.payload_length as usize;
    if payload_length > CONFIG_PAYLOAD_MAX {
        return Err(format!(
            "payload length {payload_length} exceeds the maximum {CONFIG_PAYLOAD_MAX}"
        ));
    }
    let Some(payload) = area.get(CONFIG_HEADER_SIZE..CONFIG_HEADER_SIZE + payload_length) else {
        return Err(format!(
            "payload length {payload_length} runs past the end of the {}-byte config area",
            area.len()
        ));
    };
    let checksum = *blake3::hash(payload).as_bytes();
    if checksum != header.checksum {
        return Err(format!(
            "config checksum mismatch over {payload_length} payload bytes"
        ));
    }
    let config: LabelConfig = ciborium::from_reader(payload)
        .map_err(|error| format!("config payload does not decode: {error}"))?;
    Ok(Some(config))
}

/// Write `config` into the config areas of the labels in `which`. The uberblock rings are not
/// touched. Not durable until the device is flushed.
pub fn write_labels(
    dev: &dyn BlockDevice,
    config: &LabelConfig,
    which: LabelSet,
) -> Result<(), VdevError> {
    let size_bytes = check_device_size(dev)?;
    let area = encode_config_area(config)?;
    for &index in which.labels() {
        let offset = label_offset(index, size_bytes) + LABEL_CONFIG_OFFSET;
        dev.write_at(offset, &area).map_err(|source| {
            VdevError::io(dev, "write label", offset, area.len() as u64, source)
        })?;
    }
    Ok(())
}

/// Read and validate the config of label `index` (0..4). `Ok(None)` for an empty (zeroed)
/// label, [`VdevError::LabelCorrupt`] for one that fails validation.
pub fn read_label(dev: &dyn BlockDevice, index: usize) -> Result<Option<LabelConfig>, VdevError> {
    assert!(index < VDEV_LABELS, "label index {index} out of range");
    let size_bytes = check_device_size(dev)?;
    let offset = label_offset(index, size_bytes) + LABEL_CONFIG_OFFSET;
    let mut area = vec![0u8; LABEL_CONFIG_SIZE as usize];
    dev.read_at(offset, &mut area)
        .map_err(|source| VdevError::io(dev, "read label", offset, area.len() as u64, source))?;
    decode_config_area(&area).map_err(|what| VdevError::LabelCorrupt {
        device: dev.describe(),
        label: index,
        what,
    })
}

/// The valid label with the highest txg, with its index. `Ok(None)` if every label is empty;
/// if none is valid but some failed, the first failure.
pub fn read_newest_label(dev: &dyn BlockDevice) -> Result<Option<(usize, LabelConfig)>, VdevError> {
    let mut newest: Option<(usize, LabelConfig)> = None;
    let mut first_error = None;
    for index in 0..VDEV_LABELS {
        match read_label(dev, index) {
            Ok(Some(config)) => {
                if newest
                    .as_ref()
                    .is_none_or(|(_, best)| config.txg > best.txg)
                {
                    newest = Some((index, config));
                }
            }
            Ok(None) => {}
            Err(error) => {
                if first_error.is_none() {
                    first_error = Some(error);
                }
            }
        }
    }
    match (newest, first_error) {
        (Some(found), _) => Ok(Some(found)),
        (None, Some(error)) => Err(error),
        (None, None) => Ok(None),
    }
}

/// Size of one uberblock slot for a top-level vdev of this ashift: 2^clamp(ashift, 10, 13).
pub fn uberblock_slot_size(ashift: u32) -> u64 {
    1 << ashift.clamp(10, 13)
}

/// Number of slots in the uberblock ring: 128 at ashift ≤ 10, 32 at 12, 16 at ≥ 13.
pub fn uberblock_slot_count(ashift: u32) -> u64 {
    LABEL_UBERBLOCK_RING_SIZE / uberblock_slot_size(ashift)
}

/// Write `bytes` (at most one slot; the rest of the slot is zeroed) into slot `slot_index` of
/// the uberblock ring of all four labels. Every label is attempted; the first failure is
/// returned. Not durable until the device is flushed.
pub fn write_uberblock(
    dev: &dyn BlockDevice,
    ashift: u32,
    slot_index: u64,
    bytes: &[u8],
) -> Result<(), VdevError> {
    let slot_size = uberblock_slot_size(ashift);
    assert!(
        slot_index < uberblock_slot_count(ashift),
        "uberblock slot {slot_index} out of range for ashift {ashift}"
    );
    assert!(
        bytes.len() as u64 <= slot_size,
        "uberblock of {} bytes does not fit a {slot_size}-byte slot",
        bytes.len()
    );
    let size_bytes = check_device_size(dev)?;
    let mut slot = vec![0u8; slot_size as usize];
    slot[..bytes.len()].copy_from_slice(bytes);
    let mut first_error = None;
    for index in 0..VDEV_LABELS {
        let offset =
            label_offset(index, size_bytes) + LABEL_UBERBLOCK_RING_OFFSET + slot_index * slot_size;
        if let Err(source) = dev.write_at(offset, &slot) {
            first_error.get_or_insert(VdevError::io(
                dev,
                "write uberblock",
                offset,
                slot_size,
                source,
            ));
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Every uberblock slot of every label, label-major: entry `label * count + slot` where
/// `count` is [`uberblock_slot_count`]. The bytes are opaque here; the pool layer decodes and
/// verifies them. Slots of a label whose ring cannot be read are returned empty, and a device
/// too small to be a leaf yields no slots at all.
pub fn read_uberblock_slots(dev: &dyn BlockDevice, ashift: u32) -> Vec<Vec<u8>> {
    let Ok(size_bytes) = check_device_size(dev) else {
        return Vec::new();
    };
    let slot_size = uberblock_slot_size(ashift) as usize;
    let count = uberblock_slot_count(ashift) as usize;
    let mut slots = Vec::with_capacity(VDEV_LABELS * count);
    let mut ring = vec![0u8; LABEL_UBERBLOCK_RING_SIZE as usize];
    for index in 0..VDEV_LABELS {
        let offset = label_offset(index, size_bytes) + LABEL_UBERBLOCK_RING_OFFSET;
        match dev.read_at(offset, &mut ring) {
            Ok(()) => slots.extend(ring.chunks_exact(slot_size).map(<[u8]>::to_vec)),
            Err(_) => slots.extend(std::iter::repeat_n(Vec::new(), count)),
        }
    }
    slots
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::vdev::FileDevice;
    use proptest::prelude::*;

    pub(crate) fn sample_config(txg: u64) -> LabelConfig {
        LabelConfig {
            version: LABEL_CONFIG_VERSION,
            name: "tank".to_string(),
            pool_guid: 0x1234_5678_9abc_def0,
            state: PoolState::Active,
            txg,
            hostname: "host".to_string(),
            top_guid: 11,
            leaf_guid: 12,
            vdev_tree: vec![TopVdevConfig {
                id: 0,
                guid: 11,
                kind: TopVdevKind::Mirror,
                ashift: 12,
                asize: 60 << 20,
                ms_shift: 20,
                ms_array: 42,
                children: vec![
                    LeafConfig {
                        guid: 12,
                        path: "/tmp/a".to_string(),
                        replaces: 0,
                    },
                    LeafConfig {
                        guid: 13,
                        path: "/tmp/b".to_string(),
                        replaces: 12,
                    },
                ],
                class: AllocClass::Normal,
                raidz_expansions: Vec::new(),
                raidz_expanding: false,
            }],
            features_for_read: vec!["org.tarn:spacemap_v2".to_string()],
            features_for_write: Some(vec!["org.tarn:livelist".to_string()]),
            features: BTreeMap::from([("org.tarn:spacemap_v2".to_string(), 1)]),
            l2cache: L2cacheConfig {
                devices: vec![CacheDeviceConfig {
                    guid: 99,
                    path: "/tmp/cache".to_string(),
                }],
                is_cache_device: false,
            },
        }
    }

    fn device(size_bytes: u64) -> (tempfile::TempDir, FileDevice) {
        let dir = tempfile::tempdir().unwrap();
        let device = FileDevice::create_sparse(&dir.path().join("leaf"), size_bytes).unwrap();
        (dir, device)
    }

    #[test]
    fn label_placement_matches_the_reference_layout() {
        let size = (100 << 20) + 12345;
        let aligned = 100 << 20;
        assert_eq!(label_offset(0, size), 0);
        assert_eq!(label_offset(1, size), 256 << 10);
        assert_eq!(label_offset(2, size), aligned - (512 << 10));
        assert_eq!(label_offset(3, size), aligned - (256 << 10));
        assert_eq!(
            leaf_allocatable_bytes(size),
            aligned - (4 << 20) - (512 << 10)
        );
        assert_eq!(leaf_allocatable_bytes(1 << 20), 0);
        assert_eq!(uberblock_slot_count(9), 128);
        assert_eq!(uberblock_slot_count(12), 32);
        assert_eq!(uberblock_slot_count(16), 16);
    }

    /// Labels written before cache devices existed have no `l2cache` field: they must read as
    /// "no cache devices, not a cache device", or every older pool would fail to import.
    #[test]
    fn a_label_without_l2cache_reads_as_no_cache_devices() {
        let config = sample_config(5);
        let mut value = ciborium::Value::serialized(&config).unwrap();
        let ciborium::Value::Map(entries) = &mut value else {
            panic!("a config is a map");
        };
        let before = entries.len();
        entries.retain(|(key, _)| key.as_text() != Some("l2cache"));
        assert_eq!(entries.len(), before - 1);
        let mut payload = Vec::new();
        ciborium::into_writer(&value, &mut payload).unwrap();
        let decoded = decode_config_area(&area_with_payload(&payload))
            .unwrap()
            .unwrap();
        assert_eq!(decoded.l2cache, L2cacheConfig::default());
        assert_eq!(decoded.vdev_tree, config.vdev_tree);
    }

    #[test]
    fn label_round_trip_on_a_sparse_file() {
        let (_dir, dev) = device(64 << 20);
        let config = sample_config(7);
        write_labels(&dev, &config, LabelSet::All).unwrap();
        for index in 0..VDEV_LABELS {
            assert_eq!(read_label(&dev, index).unwrap(), Some(config.clone()));
        }
        // Only the even labels get a newer config: the newest label is an even one.
        let newer = sample_config(8);
        write_labels(&dev, &newer, LabelSet::Even).unwrap();
        assert_eq!(read_label(&dev, 1).unwrap(), Some(config));
        assert_eq!(read_label(&dev, 2).unwrap(), Some(newer.clone()));
        let (index, newest) = read_newest_label(&dev).unwrap().unwrap();
        assert!(index == 0 || index == 2);
        assert_eq!(newest, newer);
    }

    #[test]
    fn zeroed_labels_have_no_config() {
        let (_dir, dev) = device(64 << 20);
        for index in 0..VDEV_LABELS {
            assert_eq!(read_label(&dev, index).unwrap(), None);
        }
        assert!(read_newest_label(&dev).unwrap().is_none());
    }

    #[test]
    fn corrupt_config_byte_fails_checksum_and_other_labels_are_used() {
        let (_dir, dev) = device(64 << 20);
        let config = sample_config(9);
        write_labels(&dev, &config, LabelSet::All).unwrap();
        // Flip one payload byte of L0.
        let offset = LABEL_CONFIG_OFFSET + CONFIG_HEADER_SIZE as u64 + 10;
        let mut byte = [0u8; 1];
        dev.read_at(offset, &mut byte).unwrap();
        byte[0] ^= 0x40;
        dev.write_at(offset, &byte).unwrap();
        let error = read_label(&dev, 0).unwrap_err();
        match &error {
            VdevError::LabelCorrupt { label, what, .. } => {
                assert_eq!(*label, 0);
                assert!(what.contains("checksum"), "{what}");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let (index, newest) = read_newest_label(&dev).unwrap().unwrap();
        assert_ne!(index, 0);
        assert_eq!(newest, config);
    }

    #[test]
    fn uberblocks_land_in_all_four_labels_and_survive_config_rewrites() {
        let (_dir, dev) = device(64 << 20);
        let ashift = 12;
        let count = uberblock_slot_count(ashift) as usize;
        write_labels(&dev, &sample_config(4), LabelSet::All).unwrap();
        write_uberblock(&dev, ashift, 3, b"uberblock for txg 4").unwrap();
        write_uberblock(&dev, ashift, 31, &[0xAB; 4096]).unwrap();
        write_labels(&dev, &sample_config(5), LabelSet::All).unwrap();
        let slots = read_uberblock_slots(&dev, ashift);
        assert_eq!(slots.len(), 4 * count);
        for label in 0..VDEV_LABELS {
            let slot = &slots[label * count + 3];
            assert_eq!(slot.len(), 4096);
            assert_eq!(&slot[..19], b"uberblock for txg 4");
            assert!(slot[19..].iter().all(|&byte| byte == 0));
            assert_eq!(slots[label * count + 31], vec![0xAB; 4096]);
            assert!(slots[label * count + 4].iter().all(|&byte| byte == 0));
        }
        assert_eq!(read_newest_label(&dev).unwrap().unwrap().1.txg, 5);
    }

    #[test]
    fn unreadable_uberblock_ring_yields_empty_slots_for_that_label_only() {
        use crate::vdev::{FaultPlan, FaultyDevice, ReadFaultKind};
        use std::sync::Arc;
        let (_dir, dev) = device(64 << 20);
        let size = dev.size_bytes();
        let plan = FaultPlan::new();
        let faulty = FaultyDevice::new(Arc::new(dev), plan.clone());
        write_uberblock(&faulty, 10, 0, b"ub").unwrap();
        let ring_start = label_offset(2, size) + LABEL_UBERBLOCK_RING_OFFSET;
        plan.add_read_fault(ring_start..ring_start + 1, ReadFaultKind::Fail);
        let slots = read_uberblock_slots(&faulty, 10);
        assert_eq!(slots.len(), 4 * 128);
        assert!(slots[2 * 128..3 * 128].iter().all(Vec::is_empty));
        assert_eq!(&slots[3 * 128][..2], b"ub");
        assert_eq!(&slots[0][..2], b"ub");
    }

    /// Power loss while the even labels of txg 6 are being written (L0 torn to nothing, L2
    /// never written) must leave the txg 5 config readable from the odd labels.
    #[test]
    fn power_loss_during_even_label_write_keeps_the_previous_config() {
        use crate::vdev::{FaultPlan, FaultyDevice};
        use std::sync::Arc;
        let (_dir, dev) = device(64 << 20);
        let plan = FaultPlan::new();
        let faulty = FaultyDevice::new(Arc::new(dev), plan.clone());
        write_labels(&faulty, &sample_config(5), LabelSet::All).unwrap();
        write_uberblock(&faulty, 12, 5, b"txg 5").unwrap();
        let next_write = plan.write_count();
        plan.tear_write(next_write, 0);
        write_labels(&faulty, &sample_config(6), LabelSet::Even).unwrap();
        write_uberblock(&faulty, 12, 6, b"txg 6").unwrap();
        assert!(plan.is_stopped());
        let (_, newest) = read_newest_label(&faulty).unwrap().unwrap();
        assert_eq!(newest.txg, 5);
        let slots = read_uberblock_slots(&faulty, 12);
        assert_eq!(&slots[5][..5], b"txg 5");
        assert!(slots[6].iter().all(|&byte| byte == 0));
    }

    #[test]
    fn small_devices_are_refused_clearly() {
        let (_dir, dev) = device(32 << 20);
        let error = write_labels(&dev, &sample_config(4), LabelSet::All).unwrap_err();
        assert!(
            matches!(error, VdevError::DeviceTooSmall { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("too small"));
        assert!(read_label(&dev, 0).is_err());
        assert!(read_uberblock_slots(&dev, 9).is_empty());
    }

    #[test]
    fn oversized_config_is_refused() {
        let mut config = sample_config(4);
        config.name = "x".repeat(CONFIG_PAYLOAD_MAX);
        let error = encode_config_area(&config).unwrap_err();
        assert!(
            matches!(error, VdevError::ConfigTooLarge { .. }),
            "{error:?}"
        );
    }

    #[test]
    fn bad_header_fields_are_named() {
        let area = encode_config_area(&sample_config(4)).unwrap();
        let mut bad_magic = area.clone();
        bad_magic[0] ^= 1;
        assert!(decode_config_area(&bad_magic)
            .unwrap_err()
            .contains("magic"));
        let mut bad_version = area.clone();
        bad_version[8] = 2;
        assert!(decode_config_area(&bad_version)
            .unwrap_err()
            .contains("version"));
        let mut bad_length = area.clone();
        bad_length[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_config_area(&bad_length)
            .unwrap_err()
            .contains("length"));
        assert!(decode_config_area(&area[..20]).is_err());
        assert!(decode_config_area(&area[..100]).is_err());
    }

    fn arbitrary_config() -> impl Strategy<Value = LabelConfig> {
        let leaf = (any::<u64>(), ".{0,20}").prop_map(|(guid, path)| LeafConfig {
            guid,
            path,
            replaces: 0,
        });
        let top = (
            any::<u32>(),
            any::<u64>(),
            (
                prop_oneof![
                    Just(TopVdevKind::Leaf),
                    Just(TopVdevKind::Mirror),
                    (1u8..=3).prop_map(|parity| TopVdevKind::Raidz { parity })
                ],
                prop_oneof![Just(AllocClass::Normal), Just(AllocClass::Log)],
            ),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            prop::collection::vec(leaf, 0..4),
        )
            .prop_map(
                |(id, guid, (kind, class), ashift, asize, ms_shift, ms_array, children)| {
                    TopVdevConfig {
                        id,
                        guid,
                        kind,
                        ashift,
                        asize,
                        ms_shift,
                        ms_array,
                        children,
                        class,
                        raidz_expansions: Vec::new(),
                        raidz_expanding: false,
                    }
                },
            );
        (
            any::<u64>(),
            ".{0,20}",
            any::<u64>(),
            prop_oneof![
                Just(PoolState::Active),
                Just(PoolState::Exported),
                Just(PoolState::Destroyed)
            ],
            any::<u64>(),
            ".{0,20}",
            (any::<u64>(), any::<u64>()),
            prop::collection::vec(top, 0..4),
            prop::collection::vec(".{0,12}", 0..3),
            prop::collection::btree_map(".{0,12}", any::<u64>(), 0..3),
        )
            .prop_map(
                |(
                    version,
                    name,
                    pool_guid,
                    state,
                    txg,
                    hostname,
                    (top_guid, leaf_guid),
                    vdev_tree,
                    features_for_read,
                    features,
                )| LabelConfig {
                    version,
                    name,
                    pool_guid,
                    state,
                    txg,
                    hostname,
                    top_guid,
                    leaf_guid,
                    vdev_tree,
                    features_for_read,
                    features_for_write: None,
                    features,
                    l2cache: L2cacheConfig::default(),
                },
            )
    }

    /// Wrap arbitrary payload bytes in a valid header, so the CBOR decoder itself is fuzzed.
    fn area_with_payload(payload: &[u8]) -> Vec<u8> {
        let header = ConfigHeader {
            magic: CONFIG_MAGIC,
            format_version: LABEL_FORMAT_VERSION,
            payload_length: payload.len() as u32,
            checksum: *blake3::hash(payload).as_bytes(),
        };
        let mut area = header.encode().to_vec();
        area.extend_from_slice(payload);
        area
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
            let _ = decode_config_area(&bytes);
        }

        #[test]
        fn decoding_arbitrary_checksummed_payload_never_panics(payload in prop::collection::vec(any::<u8>(), 0..2048)) {
            let result = decode_config_area(&area_with_payload(&payload));
            // A valid header never reads as "no label".
            prop_assert!(!matches!(result, Ok(None)));
        }

        #[test]
        fn valid_configs_round_trip(config in arbitrary_config()) {
            let area = encode_config_area(&config).unwrap();
            prop_assert_eq!(area.len() as u64, LABEL_CONFIG_SIZE);
            prop_assert_eq!(decode_config_area(&area).unwrap(), Some(config));
        }

        #[test]
        fn mutated_valid_payload_never_panics(config in arbitrary_config(), position in any::<prop::sample::Index>(), value in any::<u8>()) {
            let mut payload = Vec::new();
            ciborium::into_writer(&config, &mut payload).unwrap();
            let at = position.index(payload.len());
            payload[at] = value;
            let _ = decode_config_area(&area_with_payload(&payload));
        }
    }
}
