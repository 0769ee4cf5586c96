//! Block compression: lz4 and zstd, with ZFS's "must save an eighth" rule, in self-delimiting
//! payloads.
//!
//! A block is stored compressed only if compression saves at least one eighth of its logical
//! size (as ZFS does); otherwise [`compress`] returns `None` and the block is written with
//! compression off, `size_physical == size_logical`. zstd writes into a buffer of exactly the
//! largest acceptable size, so a block that does not compress well fails fast; lz4 needs room
//! for its worst case and is checked afterwards. Both write into a per-thread scratch buffer,
//! and the payload is copied out at its own size (see [`compress_for_unit`]).
//!
//! # Payload layout (docs/design/03-block.md §3)
//! A compressed block's physical bytes are a *payload*: a small header that gives the exact
//! length of the compressed stream (and, for zstd, the level it was written with), the stream,
//! then zero padding up to the block's physical size. The header is what lets the write
//! pipeline round a block's physical size up to the pool's allocation unit: decompression reads
//! the stream's length from the header and never looks at the padding, so a block whose
//! contents change a little keeps its physical size and can be rewritten in place in later sync
//! passes (as OpenZFS's lz4 and zstd payloads do).
//!
//! | kind | header | bytes |
//! | --- | --- | --- |
//! | lz4 | 4 | `u32` LE stream length |
//! | zstd | 8 | `u32` LE stream length, `u8` level (1..=19), 3 reserved bytes, zero |
//!
//! [`decompress`] reads untrusted bytes: it never panics, never allocates more than the
//! expected logical size (itself bounded by `SPA_MAXBLOCKSIZE`), rejects a header whose length
//! runs past the physical bytes, a bad level or non-zero reserved bytes, and fails unless the
//! output is exactly `size_logical` bytes.

use super::blkptr::{BlockError, Compression};
use crate::types::SPA_MAXBLOCKSIZE;

/// Highest zstd level accepted (levels above 19 are zstd's slow "ultra" levels).
pub const ZSTD_LEVEL_MAX: u8 = 19;
/// Level used for `Compression::Zstd { level: 0 }`: zstd's own default.
pub const ZSTD_LEVEL_DEFAULT: u8 = 3;
/// Bytes of the lz4 payload header: the stream length.
pub const LZ4_HEADER_SIZE: usize = 4;
/// Bytes of the zstd payload header: the stream length, the level, three reserved bytes.
pub const ZSTD_HEADER_SIZE: usize = 8;

/// The header size of a compressed payload of `kind` (0 when compression is off).
pub fn header_size(kind: Compression) -> usize {
    match kind {
        Compression::Off => 0,
        Compression::Lz4 => LZ4_HEADER_SIZE,
        Compression::Zstd { .. } => ZSTD_HEADER_SIZE,
    }
}

/// The largest compressed size worth keeping for a block of `size_logical` bytes: it must save
/// at least an eighth, and at least one byte.
pub fn compressed_size_max(size_logical: usize) -> usize {
    (size_logical - size_logical / 8).min(size_logical.saturating_sub(1))
}

/// Largest compression scratch buffer a thread keeps between calls: lz4's worst case for the
/// largest block; anything larger compresses into a buffer of its own.
const SCRATCH_KEEP_MAX: usize = lz4_flex::block::get_maximum_output_size(SPA_MAXBLOCKSIZE as usize);

thread_local! {
    /// The calling thread's room for a compressor's worst case, reused from block to block.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Compresses `data` with `kind` into a self-delimiting payload (header and stream, no
/// padding). Returns `None` when `kind` is off, when `data` is empty, or when the payload would
/// not save at least an eighth of the size; the caller then stores the block uncompressed.
///
/// The payload's capacity is its length rounded up to a multiple of `unit`, so that a caller
/// that pads it to whole allocation units does not reallocate it. Compressors need room for
/// their worst case, which for a block that compresses well is many times the payload; that
/// room is a per-thread scratch buffer and the payload is copied out of it. A cached block
/// (the compressed ARC) therefore holds no more memory than the ARC counts for it.
///
/// Panics on a zstd level above [`ZSTD_LEVEL_MAX`]: levels are validated where they are set
/// (dataset properties), so a bad one here is a bug. Level 0 means [`ZSTD_LEVEL_DEFAULT`].
pub fn compress_for_unit(kind: Compression, data: &[u8], unit: usize) -> Option<Vec<u8>> {
    let limit = compressed_size_max(data.len());
    let header = header_size(kind);
    if limit <= header || kind == Compression::Off {
        return None;
    }
    // lz4_flex insists on room for the worst case before it starts, so it compresses fully
    // and is compared afterwards; zstd stops with an error as soon as the output would exceed
    // the limit: that is "not worth it".
    let room = match kind {
        Compression::Lz4 => lz4_flex::block::get_maximum_output_size(data.len()),
        _ => limit - header,
    };
    // The level a zstd payload is written with (its header's fifth byte).
    let zstd_level = match kind {
        Compression::Zstd { level } => {
            assert!(
                level <= ZSTD_LEVEL_MAX,
                "zstd level {level} above {ZSTD_LEVEL_MAX}"
            );
            Some(if level == 0 {
                ZSTD_LEVEL_DEFAULT
            } else {
                level
            })
        }
        _ => None,
    };
    let stream_into = |scratch: &mut [u8]| -> Option<usize> {
        match zstd_level {
            None => lz4_flex::block::compress_into(data, scratch).ok(),
            Some(level) => zstd::bulk::compress_to_buffer(data, scratch, i32::from(level)).ok(),
        }
    };
    let payload_from = |scratch: &[u8], written: usize| -> Option<Vec<u8>> {
        let length = header + written;
        if length > limit {
            return None;
        }
        let mut payload = Vec::with_capacity(length.next_multiple_of(unit.max(1)));
        payload.extend_from_slice(&(written as u32).to_le_bytes());
        if let Some(level) = zstd_level {
            payload.extend_from_slice(&[level, 0, 0, 0]);
        }
        payload.extend_from_slice(&scratch[..written]);
        Some(payload)
    };
    if room > SCRATCH_KEEP_MAX {
        let mut scratch = vec![0u8; room];
        let written = stream_into(&mut scratch)?;
        return payload_from(&scratch, written);
    }
    SCRATCH.with_borrow_mut(|scratch| {
        if scratch.len() < room {
            scratch.resize(room, 0);
        }
        let written = stream_into(&mut scratch[..room])?;
        payload_from(scratch, written)
    })
}

/// [`compress_for_unit`] with the payload's capacity exactly its length.
pub fn compress(kind: Compression, data: &[u8]) -> Option<Vec<u8>> {
    compress_for_unit(kind, data, 1)
}

fn decompress_error(compression: Compression, what: String) -> BlockError {
    BlockError::Decompress { compression, what }
}

/// The compressed stream inside a payload: checks the header and returns the stream bytes (the
/// padding after them is ignored).
fn payload_stream(kind: Compression, data: &[u8]) -> Result<&[u8], BlockError> {
    let header = header_size(kind);
    if data.len() < header {
        return Err(decompress_error(
            kind,
            format!(
                "payload of {} bytes is shorter than its {header}-byte header",
                data.len()
            ),
        ));
    }
    let length = u32::from_le_bytes(data[..4].try_into().expect("4 bytes")) as usize;
    if length == 0 || length > data.len() - header {
        return Err(decompress_error(
            kind,
            format!(
                "payload header claims a {length}-byte stream but {} bytes follow it",
                data.len() - header
            ),
        ));
    }
    if let Compression::Zstd { .. } = kind {
        let level = data[4];
        if level == 0 || level > ZSTD_LEVEL_MAX {
            return Err(decompress_error(
                kind,
                format!("payload header names zstd level {level}"),
            ));
        }
        if data[5..8] != [0, 0, 0] {
            return Err(decompress_error(
                kind,
                "payload header has non-zero reserved bytes".into(),
            ));
        }
    }
    Ok(&data[header..header + length])
}

/// The zstd level a payload was written with (from its header).
pub fn payload_zstd_level(data: &[u8]) -> Result<u8, BlockError> {
    payload_stream(Compression::Zstd { level: 0 }, data)?;
    Ok(data[4])
}

/// Decompresses the physical bytes `data` of a block compressed with `kind` (a payload, possibly
/// followed by zero padding) into exactly `size_logical` bytes. With compression off, `data`
/// must already be `size_logical` bytes.
pub fn decompress(
    kind: Compression,
    data: &[u8],
    size_logical: usize,
) -> Result<Vec<u8>, BlockError> {
    check_logical_size(kind, size_logical)?;
    if kind == Compression::Off {
        check_uncompressed(data, size_logical)?;
        return Ok(data.to_vec());
    }
    // The decoder writes every byte (or fails): a buffer of any contents will do, and one
    // given back by the cache or a read costs no zeroing and no page faults.
    let mut output = crate::vdev::buffers::take(size_logical);
    decompress_into(kind, data, &mut output)?;
    Ok(output)
}

/// As [`decompress`], into `output`, which must be exactly the logical size: for a caller
/// that only checks that a payload decompresses (a compressed receive) and reuses one buffer
/// for every block, so that the check costs no allocation.
pub fn decompress_into(
    kind: Compression,
    data: &[u8],
    output: &mut [u8],
) -> Result<(), BlockError> {
    let size_logical = output.len();
    check_logical_size(kind, size_logical)?;
    let written = match kind {
        Compression::Off => {
            check_uncompressed(data, size_logical)?;
            output.copy_from_slice(data);
            size_logical
        }
        Compression::Lz4 => {
            let stream = payload_stream(kind, data)?;
            lz4_flex::block::decompress_into(stream, output)
                .map_err(|error| decompress_error(kind, error.to_string()))?
        }
        Compression::Zstd { .. } => {
            let stream = payload_stream(kind, data)?;
            zstd::bulk::decompress_to_buffer(stream, output)
                .map_err(|error| decompress_error(kind, error.to_string()))?
        }
    };
    if written != size_logical {
        return Err(decompress_error(
            kind,
            format!("decompressed to {written} bytes, expected {size_logical}"),
        ));
    }
    Ok(())
}

/// Whether the payload `data` of `kind` decompresses to exactly `size_logical` bytes, as
/// [`decompress`] would find, at less cost where the format allows: an lz4 stream is walked
/// sequence by sequence with every check its decoder makes (each literal run and match within
/// the input and the output, each match offset non-zero and within what is already produced,
/// the stream ending with a literal run exactly at the logical size) without copying a byte;
/// zstd is decompressed into `scratch` (kept by the caller for the next block). For a receiver
/// that stores a compressed block as it arrived and must know it reads back (a test holds the
/// walk to the decoder's verdict on random and damaged streams).
pub fn check_decompresses(
    kind: Compression,
    data: &[u8],
    size_logical: usize,
    scratch: &mut Vec<u8>,
) -> Result<(), BlockError> {
    check_logical_size(kind, size_logical)?;
    match kind {
        Compression::Off => check_uncompressed(data, size_logical),
        Compression::Lz4 => {
            let stream = payload_stream(kind, data)?;
            let produced =
                lz4_walk(stream, size_logical).map_err(|what| decompress_error(kind, what))?;
            if produced != size_logical {
                return Err(decompress_error(
                    kind,
                    format!("decompresses to {produced} bytes, expected {size_logical}"),
                ));
            }
            Ok(())
        }
        Compression::Zstd { .. } => {
            scratch.resize(size_logical, 0);
            decompress_into(kind, data, scratch)
        }
    }
}

/// The bytes an lz4 block stream decompresses to, into at most `capacity` bytes, found by
/// walking its sequences (token; literal length, extended by bytes while they are 255; the
/// literals; then, unless the stream ends there, a two-byte offset and the match length,
/// extended the same way) with the checks of lz4_flex's safe decoder, in which a stream is
/// good exactly when every sequence passes them.
fn lz4_walk(stream: &[u8], capacity: usize) -> Result<usize, String> {
    fn extension(stream: &[u8], at: &mut usize) -> Result<usize, String> {
        let mut length = 0usize;
        loop {
            let byte = *stream.get(*at).ok_or("the stream ends inside a length")?;
            *at += 1;
            length += usize::from(byte);
            if byte != 0xff {
                return Ok(length);
            }
        }
    }
    let mut at = 0usize;
    let mut produced = 0usize;
    loop {
        let token = *stream.get(at).ok_or("the stream ends before a token")?;
        at += 1;
        let mut literals = usize::from(token >> 4);
        if literals == 15 {
            literals += extension(stream, &mut at)?;
        }
        if literals > stream.len() - at {
            return Err(format!("{literals} literals run past the stream"));
        }
        if literals > capacity - produced {
            return Err(format!("{literals} literals run past {capacity} bytes"));
        }
        at += literals;
        produced += literals;
        if at >= stream.len() {
            return Ok(produced);
        }
        let offset = stream
            .get(at..at + 2)
            .map(|bytes| usize::from(u16::from_le_bytes([bytes[0], bytes[1]])))
            .ok_or("the stream ends inside a match offset")?;
        at += 2;
        if offset == 0 {
            return Err("a match at offset 0".into());
        }
        let mut length = 4 + usize::from(token & 0xf);
        if length == 19 {
            length += extension(stream, &mut at)?;
        }
        if length > capacity - produced {
            return Err(format!(
                "a match of {length} bytes runs past {capacity} bytes"
            ));
        }
        if offset > produced {
            return Err(format!("a match at offset {offset} after {produced} bytes"));
        }
        produced += length;
    }
}

fn check_logical_size(kind: Compression, size_logical: usize) -> Result<(), BlockError> {
    if size_logical as u64 > SPA_MAXBLOCKSIZE {
        return Err(decompress_error(
            kind,
            format!("logical size {size_logical:#x} exceeds the largest block size"),
        ));
    }
    Ok(())
}

fn check_uncompressed(data: &[u8], size_logical: usize) -> Result<(), BlockError> {
    if data.len() != size_logical {
        return Err(decompress_error(
            Compression::Off,
            format!(
                "uncompressed block has {} bytes, expected {size_logical}",
                data.len()
            ),
        ));
    }
    Ok(())
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
    fn a_payload_holds_no_more_memory_than_its_length_rounded_to_the_unit() {
        // lz4 needs room for its worst case (more than the block): a payload that kept that
        // room would hold 30 times what the ARC counts for a block that compresses well.
        let data = compressible(128 << 10);
        for kind in COMPRESSORS {
            let exact = compress(kind, &data).expect("repetitive data compresses");
            assert!(exact.len() < 8 << 10, "{kind:?}: {} bytes", exact.len());
            assert_eq!(exact.capacity(), exact.len(), "{kind:?}");
            let mut padded = compress_for_unit(kind, &data, 4096).unwrap();
            assert_eq!(
                padded, exact,
                "{kind:?}: the unit changes only the capacity"
            );
            assert_eq!(
                padded.capacity(),
                exact.len().next_multiple_of(4096),
                "{kind:?}"
            );
            let capacity = padded.capacity();
            padded.resize(capacity, 0);
            assert_eq!(
                padded.capacity(),
                capacity,
                "{kind:?}: padding does not reallocate"
            );
            assert_eq!(decompress(kind, &padded, data.len()).unwrap(), data);
        }
        // The largest block fits the per-thread scratch buffer.
        let large = compressible(SPA_MAXBLOCKSIZE as usize);
        for kind in COMPRESSORS {
            let payload = compress(kind, &large).expect("repetitive data compresses");
            assert_eq!(payload.capacity(), payload.len(), "{kind:?}");
            assert_eq!(decompress(kind, &payload, large.len()).unwrap(), large);
        }
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

    /// The payload format (docs/design/03-block.md §3): a header with the stream length (and the
    /// zstd level), so that a payload padded with zeros to any physical size still decompresses.
    #[test]
    fn payloads_carry_their_length_and_survive_padding() {
        let data = compressible(16 << 10);
        for kind in COMPRESSORS {
            let payload = compress(kind, &data).unwrap();
            let header = header_size(kind);
            let length = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
            assert_eq!(length + header, payload.len(), "{kind}");
            if let Compression::Zstd { level } = kind {
                let stored = if level == 0 {
                    ZSTD_LEVEL_DEFAULT
                } else {
                    level
                };
                assert_eq!(payload[4], stored);
                assert_eq!(payload_zstd_level(&payload).unwrap(), stored);
                assert_eq!(&payload[5..8], &[0, 0, 0]);
            }
            for unit in [512usize, 4096] {
                let mut padded = payload.clone();
                padded.resize(payload.len().div_ceil(unit) * unit, 0);
                assert_eq!(decompress(kind, &padded, data.len()).unwrap(), data);
            }
        }
    }

    #[test]
    fn truncated_or_lying_headers_are_clear_errors() {
        let data = compressible(8192);
        for kind in COMPRESSORS {
            let payload = compress(kind, &data).unwrap();
            let header = header_size(kind);
            for cut in 0..header {
                let error = decompress(kind, &payload[..cut], data.len()).unwrap_err();
                assert!(
                    error.to_string().contains("shorter than its"),
                    "{kind} cut at {cut}: {error}"
                );
            }
            // The stream cut short: the header claims more than follows.
            let error = decompress(kind, &payload[..payload.len() - 1], data.len()).unwrap_err();
            assert!(error.to_string().contains("claims"), "{kind}: {error}");
            for length in [0u32, u32::MAX, (payload.len() - header + 1) as u32] {
                let mut lying = payload.clone();
                lying[..4].copy_from_slice(&length.to_le_bytes());
                let error = decompress(kind, &lying, data.len()).unwrap_err();
                assert!(error.to_string().contains("claims"), "{kind}: {error}");
            }
        }
        let payload = compress(Compression::Zstd { level: 1 }, &data).unwrap();
        for (index, value) in [(4, 0u8), (4, 20), (5, 1), (7, 0xff)] {
            let mut bad = payload.clone();
            bad[index] = value;
            assert!(matches!(
                decompress(Compression::Zstd { level: 0 }, &bad, data.len()),
                Err(BlockError::Decompress { .. })
            ));
        }
    }

    fn random_bytes(seed: u64, size: usize) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = vec![0u8; size];
        rng.fill_bytes(&mut bytes);
        bytes
    }

    /// The lz4 walk of `check_decompresses` must agree with the decoder on every stream: a
    /// payload it passed but the decoder refused would be stored and never read back.
    fn walk_agrees(payload: &[u8], size_logical: usize) -> Result<(), TestCaseError> {
        let walked = check_decompresses(Compression::Lz4, payload, size_logical, &mut Vec::new());
        let decoded = decompress(Compression::Lz4, payload, size_logical);
        prop_assert_eq!(
            walked.is_ok(),
            decoded.is_ok(),
            "{:?} / {:?}",
            walked,
            decoded.err()
        );
        Ok(())
    }

    #[test]
    fn the_lz4_walk_passes_what_compresses() {
        for size in [1usize, 15, 16, 100, 4096, 8192, 128 << 10] {
            let data = compressible(size);
            if let Some(payload) = compress(Compression::Lz4, &data) {
                check_decompresses(Compression::Lz4, &payload, size, &mut Vec::new()).unwrap();
                assert!(
                    check_decompresses(Compression::Lz4, &payload, size + 1, &mut Vec::new())
                        .is_err()
                );
                assert!(
                    check_decompresses(Compression::Lz4, &payload, size - 1, &mut Vec::new())
                        .is_err()
                );
            }
        }
    }

    proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn the_lz4_walk_agrees_with_the_decoder_on_damaged_streams(
            seed in 0u64..1000,
            size in 1usize..20_000,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            lie in -3i64..3,
        ) {
            let data: Vec<u8> = (0..size)
                .map(|index| ((index as u64 * seed / 7 + index as u64 / 33) % 23) as u8)
                .collect();
            let Some(mut payload) = compress(Compression::Lz4, &data) else {
                return Ok(());
            };
            for (at, value) in flips {
                let at = LZ4_HEADER_SIZE + at % (payload.len() - LZ4_HEADER_SIZE);
                payload[at] ^= value;
            }
            if cut % 3 == 0 {
                let keep = LZ4_HEADER_SIZE + cut % (payload.len() - LZ4_HEADER_SIZE);
                payload.truncate(keep);
                let length = (payload.len() - LZ4_HEADER_SIZE) as u32;
                payload[..4].copy_from_slice(&length.to_le_bytes());
            }
            let claimed = (size as i64 + lie).max(0) as usize;
            walk_agrees(&payload, claimed)?;
        }

        #[test]
        fn the_lz4_walk_agrees_with_the_decoder_on_random_streams(
            stream in proptest::collection::vec(any::<u8>(), 0..300),
            size in 0usize..2000,
        ) {
            let mut payload = (stream.len() as u32).to_le_bytes().to_vec();
            payload.extend_from_slice(&stream);
            walk_agrees(&payload, size)?;
        }

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
        fn payload_decode_never_panics(
            length in any::<u32>(),
            level in any::<u8>(),
            tail in proptest::collection::vec(any::<u8>(), 0..600),
            size_logical in 0usize..(64 << 10),
            kind_index in 0..COMPRESSORS.len(),
        ) {
            // A header of any claimed length and level before arbitrary bytes.
            let kind = COMPRESSORS[kind_index];
            let mut bytes = length.to_le_bytes().to_vec();
            bytes.extend_from_slice(&[level, 0, 0, 0]);
            bytes.extend_from_slice(&tail);
            if let Ok(output) = decompress(kind, &bytes, size_logical) {
                prop_assert_eq!(output.len(), size_logical);
            }
        }

        #[test]
        fn padded_payloads_round_trip(
            chunks in proptest::collection::vec((any::<u8>(), 1usize..300), 1..100),
            padding in 0usize..4096,
            kind_index in 0..COMPRESSORS.len(),
        ) {
            let data: Vec<u8> = chunks
                .iter()
                .flat_map(|&(byte, count)| std::iter::repeat_n(byte, count))
                .collect();
            let kind = COMPRESSORS[kind_index];
            if let Some(mut payload) = compress(kind, &data) {
                payload.resize(payload.len() + padding, 0);
                prop_assert_eq!(decompress(kind, &payload, data.len()).unwrap(), data);
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
