//! Tests of block pointers: round trips, validation, and decoding of damaged bytes.

use super::*;
use proptest::prelude::*;

fn sample_normal() -> BlockPtr {
    BlockPtr {
        dvas: [
            Dva {
                vdev: VdevId(0),
                offset: 0x1a000,
                size_allocated: 0x2000,
                gang: false,
            },
            Dva {
                vdev: VdevId(1),
                offset: 0x4000,
                size_allocated: 0x2000,
                gang: false,
            },
            Dva::default(),
        ],
        size_logical: 0x20000,
        size_physical: 0x2000,
        compression: Compression::Lz4,
        checksum_type: ChecksumType::Fletcher4,
        object_type: ObjectType::PlainFile,
        level: 0,
        embedded: false,
        birth_logical: Txg(12),
        birth_physical: Txg(12),
        fill_count: 1,
        checksum: [0x11; 32],
        embedded_payload: Vec::new(),
    }
}

fn sample_embedded() -> BlockPtr {
    let payload: Vec<u8> = (1..=EMBEDDED_PAYLOAD_MAX as u8).collect();
    BlockPtr {
        dvas: [Dva::default(); DVAS_MAX],
        size_logical: 4096,
        size_physical: payload.len() as u32,
        compression: Compression::Zstd { level: 0 },
        checksum_type: ChecksumType::Blake3,
        object_type: ObjectType::KeyValue,
        level: 0,
        embedded: true,
        birth_logical: Txg(7),
        birth_physical: Txg(9),
        fill_count: 1,
        checksum: [0; 32],
        embedded_payload: payload,
    }
}

fn expect_corrupt_at(bytes: &[u8], expected_offset: usize) {
    match BlockPtr::decode(bytes) {
        Err(BlockError::Corrupt { byte_offset, .. }) => {
            assert_eq!(byte_offset, expected_offset)
        }
        other => panic!("expected corruption at byte {expected_offset}, got {other:?}"),
    }
}

#[test]
fn normal_pointer_layout_is_little_endian_at_documented_offsets() {
    let bytes = sample_normal().encode();
    assert_eq!(&bytes[0..4], &0u32.to_le_bytes());
    assert_eq!(&bytes[4..8], &(0x2000u32 / 512).to_le_bytes());
    assert_eq!(&bytes[8..16], &0x1a000u64.to_le_bytes());
    assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
    assert_eq!(&bytes[32..48], &[0u8; 16]);
    assert_eq!(&bytes[48..52], &0x20000u32.to_le_bytes());
    assert_eq!(&bytes[52..56], &0x2000u32.to_le_bytes());
    assert_eq!(bytes[56], 1, "lz4");
    assert_eq!(bytes[57], 1, "fletcher4");
    assert_eq!(bytes[58], ObjectType::PlainFile as u8);
    assert_eq!(bytes[59], 0);
    assert_eq!(bytes[60], 0);
    assert_eq!(bytes[61], 0);
    assert_eq!(&bytes[64..72], &12u64.to_le_bytes());
    assert_eq!(&bytes[72..80], &12u64.to_le_bytes());
    assert_eq!(&bytes[80..88], &1u64.to_le_bytes());
    assert_eq!(&bytes[88..96], &[0u8; 8]);
    assert_eq!(&bytes[96..128], &[0x11u8; 32]);
    assert_eq!(BlockPtr::decode(&bytes).unwrap(), sample_normal());
}

#[test]
fn embedded_payload_occupies_dva_area_then_tail() {
    let pointer = sample_embedded();
    let bytes = pointer.encode();
    assert_eq!(&bytes[0..48], &pointer.embedded_payload[0..48]);
    assert_eq!(&bytes[80..128], &pointer.embedded_payload[48..96]);
    assert_eq!(bytes[60], 1);
    assert_eq!(bytes[61], 96);
    assert_eq!(BlockPtr::decode(&bytes).unwrap(), pointer);
}

#[test]
fn zeroed_bytes_decode_as_never_written_hole() {
    let pointer = BlockPtr::decode(&[0u8; BLKPTR_SIZE]).unwrap();
    assert_eq!(pointer, BlockPtr::hole(Txg(0), ObjectType::None, 0));
    assert!(pointer.is_hole());
    assert_eq!(
        BlockPtr::hole(Txg(0), ObjectType::None, 0).encode(),
        [0u8; BLKPTR_SIZE]
    );
}

#[test]
fn hole_keeps_birth_type_and_level() {
    let hole = BlockPtr::hole(Txg(33), ObjectType::Dnode, 2);
    let decoded = BlockPtr::decode(&hole.encode()).unwrap();
    assert_eq!(decoded, hole);
    assert_eq!(decoded.birth_logical, Txg(33));
}

#[test]
fn zstd_level_is_not_stored() {
    let mut pointer = sample_normal();
    pointer.compression = Compression::Zstd { level: 19 };
    let decoded = BlockPtr::decode(&pointer.encode()).unwrap();
    assert_eq!(decoded.compression, Compression::Zstd { level: 0 });
}

#[test]
fn decode_rejects_bad_fields_with_their_offsets() {
    let good = sample_normal().encode();
    let cases: Vec<(usize, u8, usize)> = vec![
        (56, 9, 56),    // unknown compression
        (57, 0, 57),    // checksum type 0 on a normal block
        (57, 4, 57),    // unknown checksum type
        (58, 200, 58),  // unknown object type
        (59, 11, 59),   // level too deep
        (60, 0x02, 60), // reserved flag bit
        (61, 5, 61),    // payload length on a normal block
        (62, 1, 62),    // reserved bytes
        (90, 1, 88),    // reserved word
        (8, 0x10, 8),   // DVA offset not sector aligned
        (64, 0, 64),    // birth 0 (12 -> 0)
    ];
    for (index, value, expected_offset) in cases {
        let mut bytes = good;
        bytes[index] = value;
        expect_corrupt_at(&bytes, expected_offset);
    }
}

#[test]
fn decode_rejects_impossible_sizes() {
    let good = sample_normal().encode();
    // Physical larger than logical.
    let mut bytes = good;
    bytes[52..56].copy_from_slice(&0x40000u32.to_le_bytes());
    expect_corrupt_at(&bytes, 52);
    // Logical beyond SPA_MAXBLOCKSIZE.
    let mut bytes = good;
    bytes[48..52].copy_from_slice(&((SPA_MAXBLOCKSIZE as u32) + 512).to_le_bytes());
    expect_corrupt_at(&bytes, 48);
    // Zero logical size on a normal block.
    let mut bytes = good;
    bytes[48..52].copy_from_slice(&0u32.to_le_bytes());
    expect_corrupt_at(&bytes, 48);
    // Allocated smaller than physical.
    let mut bytes = good;
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    expect_corrupt_at(&bytes, 4);
    // Uncompressed with physical != logical.
    let mut bytes = good;
    bytes[56] = 0;
    expect_corrupt_at(&bytes, 52);
    // Physical birth before logical birth.
    let mut bytes = good;
    bytes[72..80].copy_from_slice(&3u64.to_le_bytes());
    expect_corrupt_at(&bytes, 72);
    // Copy after an empty DVA.
    let mut bytes = good;
    bytes[16..32].fill(0);
    bytes[32..48].copy_from_slice(&good[0..16]);
    expect_corrupt_at(&bytes, 32);
    // Truncated input.
    expect_corrupt_at(&good[..100], 0);
}

#[test]
fn decode_rejects_bad_embedded_pointers() {
    let good = sample_embedded().encode();
    let mut bytes = good;
    bytes[61] = 97;
    expect_corrupt_at(&bytes, 61);
    let mut bytes = good;
    bytes[61] = 95; // length disagrees with size_physical 96
    bytes[127] = 0;
    expect_corrupt_at(&bytes, 61);

    let mut short = sample_embedded();
    short.embedded_payload.truncate(10);
    short.size_physical = 10;
    let mut bytes = short.encode();
    bytes[100] = 0xff; // padding past the payload
    expect_corrupt_at(&bytes, 100);
}

#[test]
fn display_is_zdb_like() {
    let text = sample_normal().to_string();
    assert_eq!(
        text,
        "DVA[0]=<0:1a000:2000> DVA[1]=<1:4000:2000> [L0 PlainFile] fletcher4 lz4 \
         size=20000L/2000P birth=12L/12P fill=1 \
         cksum=1111111111111111:1111111111111111:1111111111111111:1111111111111111"
    );
    assert!(BlockPtr::hole(Txg(5), ObjectType::PlainFile, 1)
        .to_string()
        .starts_with("HOLE [L1 PlainFile]"));
    assert!(sample_embedded()
        .to_string()
        .starts_with("EMBEDDED [L0 KeyValue] blake3 zstd"));
}

#[test]
fn enum_bytes_round_trip() {
    for value in 0..=u8::MAX {
        if let Ok(kind) = ChecksumType::try_from(value) {
            assert_eq!(u8::from(kind), value);
        }
        if let Ok(kind) = Compression::try_from(value) {
            assert_eq!(u8::from(kind), value);
        }
        if let Ok(kind) = ObjectType::try_from(value) {
            assert_eq!(u8::from(kind), value);
        }
    }
    assert!(ChecksumType::try_from(0).is_err());
    assert!(Compression::try_from(3).is_err());
    assert!(ObjectType::try_from(ObjectType::ALL.len() as u8).is_err());
}

#[test]
#[should_panic(expected = "invalid block pointer")]
fn encoding_an_invalid_pointer_is_a_bug() {
    let mut pointer = sample_normal();
    pointer.size_physical = pointer.size_logical + 1;
    let _ = pointer.encode();
}

// -- property tests -------------------------------------------------------------------------

fn checksum_type_strategy() -> impl Strategy<Value = ChecksumType> {
    prop_oneof![
        Just(ChecksumType::Fletcher4),
        Just(ChecksumType::Blake3),
        Just(ChecksumType::Sha256)
    ]
}

fn compression_strategy() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::Off),
        Just(Compression::Lz4),
        Just(Compression::Zstd { level: 0 })
    ]
}

fn object_type_strategy() -> impl Strategy<Value = ObjectType> {
    (0..ObjectType::ALL.len()).prop_map(|index| ObjectType::ALL[index])
}

fn births() -> impl Strategy<Value = (Txg, Txg)> {
    (1..u64::MAX / 2, 0..u64::MAX / 2)
        .prop_map(|(logical, extra)| (Txg(logical), Txg(logical + extra)))
}

/// Sizes consistent with the compression: (logical, physical).
fn sizes(compression: Compression, physical_max: u32) -> BoxedStrategy<(u32, u32)> {
    match compression {
        Compression::Off => (1..=physical_max).prop_map(|size| (size, size)).boxed(),
        _ => (1..=physical_max, 0..=SPA_MAXBLOCKSIZE as u32)
            .prop_map(|(physical, extra)| {
                (
                    physical.saturating_add(extra).min(SPA_MAXBLOCKSIZE as u32),
                    physical,
                )
            })
            .prop_filter("physical <= logical", |(logical, physical)| {
                physical <= logical
            })
            .boxed(),
    }
}

pub(crate) fn normal_strategy() -> impl Strategy<Value = BlockPtr> {
    (
        compression_strategy(),
        checksum_type_strategy(),
        object_type_strategy(),
        0..=LEVEL_MAX,
        births(),
        any::<u64>(),
        any::<[u8; 32]>(),
        1..=DVAS_MAX,
    )
        .prop_flat_map(
            |(compression, checksum_type, object_type, level, births, fill, checksum, copies)| {
                sizes(compression, SPA_MAXBLOCKSIZE as u32).prop_flat_map(
                    move |(logical, physical)| {
                        let units_min = u64::from(physical).div_ceil(DVA_ALLOCATED_UNIT);
                        let dva = (
                            any::<u32>(),
                            0..(u64::MAX / DVA_ALLOCATED_UNIT / 2),
                            units_min..units_min + 64,
                            any::<bool>(),
                        )
                            .prop_map(
                                |(vdev, offset_units, units, gang)| Dva {
                                    vdev: VdevId(vdev),
                                    offset: offset_units * DVA_ALLOCATED_UNIT,
                                    size_allocated: units * DVA_ALLOCATED_UNIT,
                                    gang,
                                },
                            );
                        (proptest::collection::vec(dva, copies), any::<bool>()).prop_map(
                            move |(copy_list, gang)| {
                                // Every DVA of a pointer has the same gang bit.
                                let mut dvas = [Dva::default(); DVAS_MAX];
                                dvas[..copy_list.len()].copy_from_slice(&copy_list);
                                for dva in &mut dvas[..copy_list.len()] {
                                    dva.gang = gang;
                                }
                                BlockPtr {
                                    dvas,
                                    size_logical: logical,
                                    size_physical: physical,
                                    compression,
                                    checksum_type,
                                    object_type,
                                    level,
                                    embedded: false,
                                    birth_logical: births.0,
                                    birth_physical: births.1,
                                    fill_count: fill,
                                    checksum,
                                    embedded_payload: Vec::new(),
                                }
                            },
                        )
                    },
                )
            },
        )
}

fn hole_strategy() -> impl Strategy<Value = BlockPtr> {
    (
        any::<u64>(),
        any::<u64>(),
        object_type_strategy(),
        0..=LEVEL_MAX,
        0..=SPA_MAXBLOCKSIZE as u32,
    )
        .prop_map(
            |(birth_logical, birth_physical, object_type, level, size_logical)| {
                let mut hole = BlockPtr::hole(Txg(birth_logical), object_type, level);
                hole.birth_physical = Txg(birth_physical);
                hole.size_logical = size_logical;
                hole
            },
        )
}

fn embedded_strategy() -> impl Strategy<Value = BlockPtr> {
    (
        compression_strategy(),
        checksum_type_strategy(),
        object_type_strategy(),
        0..=LEVEL_MAX,
        births(),
    )
        .prop_flat_map(|(compression, checksum_type, object_type, level, births)| {
            sizes(compression, EMBEDDED_PAYLOAD_MAX as u32).prop_flat_map(
                move |(logical, physical)| {
                    proptest::collection::vec(any::<u8>(), physical as usize).prop_map(
                        move |payload| BlockPtr {
                            dvas: [Dva::default(); DVAS_MAX],
                            size_logical: logical,
                            size_physical: physical,
                            compression,
                            checksum_type,
                            object_type,
                            level,
                            embedded: true,
                            birth_logical: births.0,
                            birth_physical: births.1,
                            fill_count: 1,
                            checksum: [0; 32],
                            embedded_payload: payload,
                        },
                    )
                },
            )
        })
}

/// A hole's checksum type is not stored; it reads back as fletcher4.
fn normalized(mut pointer: BlockPtr) -> BlockPtr {
    if pointer.is_hole() {
        pointer.checksum_type = ChecksumType::Fletcher4;
    }
    pointer
}

proptest! {
    #![proptest_config(crate::fuzz_config!(256))]
    #[test]
    fn arbitrary_bytes_decode_without_panic(bytes in any::<[u8; BLKPTR_SIZE]>()) {
        if let Ok(pointer) = BlockPtr::decode(&bytes) {
            // Whatever decodes is valid and re-encodes to the same bytes (canonical form).
            prop_assert_eq!(pointer.encode(), bytes);
        }
    }

    #[test]
    fn arbitrary_length_input_decodes_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let result = BlockPtr::decode(&bytes);
        if bytes.len() != BLKPTR_SIZE {
            prop_assert!(result.is_err());
        }
    }

    #[test]
    fn valid_pointers_round_trip(
        pointer in prop_oneof![normal_strategy(), hole_strategy(), embedded_strategy()]
    ) {
        prop_assert!(pointer.validate().is_ok());
        let bytes = pointer.encode();
        let decoded = BlockPtr::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &normalized(pointer));
        prop_assert_eq!(decoded.encode(), bytes);
        // What a sync reads of the pointers it leaves alone, without decoding them.
        prop_assert_eq!(BlockPtr::encoded_is_hole(&bytes), decoded.is_hole());
        prop_assert_eq!(BlockPtr::encoded_fill_count(&bytes), decoded.fill_count);
    }

    #[test]
    fn single_byte_corruption_never_panics(
        pointer in prop_oneof![normal_strategy(), hole_strategy(), embedded_strategy()],
        index in 0..BLKPTR_SIZE,
        value in any::<u8>(),
    ) {
        let mut bytes = pointer.encode();
        bytes[index] = value;
        if let Ok(decoded) = BlockPtr::decode(&bytes) {
            prop_assert_eq!(decoded.encode(), bytes);
        }
    }
}
