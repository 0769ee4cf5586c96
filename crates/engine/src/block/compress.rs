//! Block compression: lz4 and zstd, with ZFS's "must save an eighth" rule.
//!
//! A block is stored compressed only if compression saves at least one eighth of its logical
//! size (as ZFS does); otherwise [`compress`] returns `None` and the block is written with
//! compression off, `size_physical == size_logical`. zstd writes into a buffer of exactly the
//! largest acceptable size, so a block that does not compress well fails fast; lz4 needs room
//! for its worst case and is checked afterwards.
//!
//! [`decompress`] reads untrusted bytes: it never panics, never allocates more than the
//! expected logical size (itself bounded by `SPA_MAXBLOCKSIZE`), and fails unless the output
//! is exactly `size_logical` bytes. The zstd level is a write-time choice only; decompression
//! does not need it.

use super::blkptr::{BlockError, Compression};
use crate::types::SPA_MAXBLOCKSIZE;

/// Highest zstd level accepted (levels above 19 are zstd's slow "ultra" levels).
pub const ZSTD_LEVEL_MAX: u8 = 19;
/// Level used for `Compression::Zstd { level: 0 }` (a level read back from disk, where levels
/// are not stored): zstd's own default.
pub const ZSTD_LEVEL_DEFAULT: u8 = 3;

/// The largest compressed size worth keeping for a block of `size_logical` bytes: it must save
/// at least an eighth, and at least one byte.
pub fn compressed_size_max(size_logical: usize) -> usize {
    (size_logical - size_logical / 8).min(size_logical.saturating_sub(1))
}

/// Compresses `data` with `kind`. Returns `None` when `kind` is off, when `data` is empty, or
/// when compression would not save at least an eighth of the size; the caller then stores the
/// block uncompressed.
///
/// Panics on a zstd level above [`ZSTD_LEVEL_MAX`]: levels are validated where they are set
/// (dataset properties), so a bad one here is a bug. Level 0 means [`ZSTD_LEVEL_DEFAULT`].
pub fn compress(kind: Compression, data: &[u8]) -> Option<Vec<u8>> {
    let limit = compressed_size_max(data.len());
    if limit == 0 {
        return None;
    }
    let mut output;
    let written = match kind {
        Compression::Off => return None,
        Compression::Lz4 => {
            // lz4_flex insists on room for the worst case before it starts, so compress fully
            // and compare afterwards. `compress` allocates that room without zeroing it.
            output = lz4_flex::block::compress(data);
            output.len()
        }
        Compression::Zstd { level } => {
            assert!(
                level <= ZSTD_LEVEL_MAX,
                "zstd level {level} above {ZSTD_LEVEL_MAX}"
            );
            let level = if level == 0 {
                ZSTD_LEVEL_DEFAULT
            } else {
                level
            };
            // zstd stops with an error as soon as the output would exceed the limit: that
            // is "not worth it".
            output = vec![0u8; limit];
            zstd::bulk::compress_to_buffer(data, &mut output, i32::from(level)).ok()?
        }
    };
    if written > limit {
        return None;
    }
    output.truncate(written);
    Some(output)
}

fn decompress_error(compression: Compression, what: String) -> BlockError {
    BlockError::Decompress { compression, what }
}

/// Decompresses the physical bytes `data` of a block compressed with `kind` into exactly
/// `size_logical` bytes. With compression off, `data` must already be `size_logical` bytes.
pub fn decompress(
    kind: Compression,
    data: &[u8],
    size_logical: usize,
) -> Result<Vec<u8>, BlockError> {
    if size_logical as u64 > SPA_MAXBLOCKSIZE {
        return Err(decompress_error(
            kind,
            format!("logical size {size_logical:#x} exceeds the largest block size"),
        ));
    }
    // The output is allocated only for the kinds that need it: an uncompressed block is copied.
    let mut output;
    let written = match kind {
        Compression::Off => {
            if data.len() != size_logical {
                return Err(decompress_error(
                    kind,
                    format!(
                        "uncompressed block has {} bytes, expected {size_logical}",
                        data.len()
                    ),
                ));
            }
            return Ok(data.to_vec());
        }
        Compression::Lz4 => {
            output = vec![0u8; size_logical];
            lz4_flex::block::decompress_into(data, &mut output)
                .map_err(|error| decompress_error(kind, error.to_string()))?
        }
        Compression::Zstd { .. } => {
            output = vec![0u8; size_logical];
            zstd::bulk::decompress_to_buffer(data, &mut output)
                .map_err(|error| decompress_error(kind, error.to_string()))?
        }
    };
    if written != size_logical {
        return Err(decompress_error(
            kind,
            format!("decompressed to {written} bytes, expected {size_logical}"),
        ));
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COMPRESSORS: [Compression; 4] = [
        Compression::Lz4,
        Compression::Zstd { level: 0 },
        Compression::Zstd { level: 1 },
        Compression::Zstd { level: 19 },
    ];

    fn compressible(size: usize) -> Vec<u8> {
        (0..size).map(|index| (index / 64 % 7) as u8).collect()
    }

    #[test]
    fn off_never_compresses_and_passes_through() {
        let data = compressible(4096);
        assert_eq!(compress(Compression::Off, &data), None);
        assert_eq!(decompress(Compression::Off, &data, 4096).unwrap(), data);
        assert!(decompress(Compression::Off, &data, 4095).is_err());
    }

    #[test]
    fn compressible_data_saves_at_least_an_eighth_and_round_trips() {
        let data = compressible(128 << 10);
        for kind in COMPRESSORS {
            let compressed = compress(kind, &data).expect("repetitive data compresses");
            assert!(compressed.len() <= data.len() - data.len() / 8);
            assert_eq!(decompress(kind, &compressed, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn zeros_compress_to_a_tiny_block() {
        let data = vec![0u8; 128 << 10];
        let compressed = compress(Compression::Lz4, &data).unwrap();
        assert!(compressed.len() < 1024, "{}", compressed.len());
    }

    #[test]
    fn wrong_logical_size_is_an_error() {
        let data = compressible(8192);
        for kind in COMPRESSORS {
            let compressed = compress(kind, &data).unwrap();
            for size in [8191, 8193, 0] {
                match decompress(kind, &compressed, size) {
                    Err(BlockError::Decompress { compression, .. }) => {
                        assert_eq!(compression, kind)
                    }
                    other => panic!("{kind} size {size}: expected an error, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn oversized_logical_size_is_refused_before_allocating() {
        let error = decompress(Compression::Lz4, &[0], usize::MAX).unwrap_err();
        assert!(matches!(error, BlockError::Decompress { .. }));
    }

    #[test]
    fn tiny_and_empty_inputs_are_not_compressed() {
        for kind in COMPRESSORS {
            assert_eq!(compress(kind, &[]), None);
            assert_eq!(compress(kind, &[7]), None);
        }
    }

    #[test]
    #[should_panic(expected = "zstd level")]
    fn zstd_level_above_19_is_a_bug() {
        compress(Compression::Zstd { level: 20 }, &compressible(4096));
    }

    fn random_bytes(seed: u64, size: usize) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = vec![0u8; size];
        rng.fill_bytes(&mut bytes);
        bytes
    }

    proptest! {
        #[test]
        fn round_trip(
            chunks in proptest::collection::vec((any::<u8>(), 1usize..200), 1..200),
            kind_index in 0..COMPRESSORS.len(),
        ) {
            // Runs of repeated bytes: usually compressible, sometimes not.
            let data: Vec<u8> = chunks
                .iter()
                .flat_map(|&(byte, count)| std::iter::repeat_n(byte, count))
                .collect();
            let kind = COMPRESSORS[kind_index];
            match compress(kind, &data) {
                Some(compressed) => {
                    prop_assert!(compressed.len() <= compressed_size_max(data.len()));
                    prop_assert_eq!(decompress(kind, &compressed, data.len()).unwrap(), data);
                }
                None => {
                    // Runs averaging 32 bytes or more over 256 bytes always compress by an eighth.
                    let run_length_mean = data.len() / chunks.len();
                    prop_assert!(
                        data.len() < 256 || run_length_mean < 32,
                        "{} bytes in runs of {} on average did not compress",
                        data.len(),
                        run_length_mean
                    );
                }
            }
        }

        #[test]
        fn garbage_input_is_an_error_not_a_panic(
            garbage in proptest::collection::vec(any::<u8>(), 0..2048),
            size_logical in 0usize..(256 << 10),
            kind_index in 0..COMPRESSORS.len(),
        ) {
            let kind = COMPRESSORS[kind_index];
            if let Ok(output) = decompress(kind, &garbage, size_logical) {
                prop_assert_eq!(output.len(), size_logical);
            }
        }

        #[test]
        fn corrupted_compressed_blocks_never_panic(
            seed in any::<u64>(),
            index in any::<proptest::sample::Index>(),
            value in any::<u8>(),
            kind_index in 0..COMPRESSORS.len(),
        ) {
            let kind = COMPRESSORS[kind_index];
            let mut data = compressible(16 << 10);
            data.extend(random_bytes(seed, 512));
            let mut compressed = compress(kind, &data).unwrap();
            let position = index.index(compressed.len());
            compressed[position] = value;
            if let Ok(output) = decompress(kind, &compressed, data.len()) {
                prop_assert_eq!(output.len(), data.len());
            }
        }

        #[test]
        fn incompressible_data_is_not_compressed(
            seed in any::<u64>(),
            size in 1usize..(64 << 10),
            kind_index in 0..COMPRESSORS.len(),
        ) {
            let data = random_bytes(seed, size);
            prop_assert_eq!(compress(COMPRESSORS[kind_index], &data), None);
        }
    }
}
