//! The scan's persistent state (MOS directory key [`SCAN_KEY`]): the fixed [`ScanPhys`] record
//! and the [`ScanExtension`] after it (the catch-ups and the leaves whose DTLs the scan's end
//! must not clear, pool feature `com.tarn:scan_catch_up`), their encodings, and the decoders
//! that refuse a damaged record with an error naming the field. What the fields mean, and when
//! the scan writes them, is in [`super::scan`]; the layout is also in docs/design/10-pool.md
//! §2.14b.

use crate::object::traverse::Bookmark;
use crate::types::{Guid, Txg};

use super::PoolError;
/// The MOS directory key of the scan state object.
pub const SCAN_KEY: &str = "scan";
/// Bytes of an encoded [`ScanPhys`].
pub const SCAN_PHYS_SIZE: usize = 128;
const SCAN_MAGIC: u32 = 0x5343_414e; // "SCAN"
const SCAN_VERSION: u16 = 1;
/// Cursor object set of a scan whose walks are all done.
pub(super) const CURSOR_DONE: u64 = u64::MAX;
/// Cursor object set of a scan whose regular walks are done and that walks its catch-ups
/// (the first of the list, at the bookmark).
pub(super) const CURSOR_CATCH_UP: u64 = u64::MAX - 1;
/// Catch-ups kept at most; one more sends the scan back to the start (every dataset walked
/// again, which covers whatever the catch-ups would have).
pub(super) const CATCH_UPS_MAX: usize = 256;
/// Version of the scan object's extension after [`ScanPhys`]: catch-ups and unusable leaves.
const SCAN_EXTENSION_VERSION: u32 = 1;

/// What a scan is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanFunction {
    Scrub,
    Resilver,
}

impl ScanFunction {
    fn code(self) -> u8 {
        match self {
            ScanFunction::Scrub => 1,
            ScanFunction::Resilver => 2,
        }
    }

    fn from_code(code: u8) -> Option<ScanFunction> {
        match code {
            1 => Some(ScanFunction::Scrub),
            2 => Some(ScanFunction::Resilver),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ScanFunction::Scrub => "scrub",
            ScanFunction::Resilver => "resilver",
        }
    }
}

/// Where a scan stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanState {
    Scanning,
    Finished,
    Canceled,
}

impl ScanState {
    fn code(self) -> u8 {
        match self {
            ScanState::Scanning => 1,
            ScanState::Finished => 2,
            ScanState::Canceled => 3,
        }
    }

    fn from_code(code: u8) -> Option<ScanState> {
        match code {
            1 => Some(ScanState::Scanning),
            2 => Some(ScanState::Finished),
            3 => Some(ScanState::Canceled),
            _ => None,
        }
    }
}

/// The persisted scan state.
///
/// ```text
///  offset  size  field
///       0     4  magic            u32  "SCAN" (0x5343414e)
///       4     2  version          u16  1
///       6     1  function         u8   1 scrub, 2 resilver
///       7     1  state            u8   1 scanning, 2 finished, 3 canceled
///       8     1  paused           u8   0 or 1
///       9     7  padding               zero
///      16     8  min_txg          u64  blocks born at or before it are skipped
///      24     8  max_txg          u64  blocks born after it are skipped
///      32     8  start_time       u64  seconds since the epoch
///      40     8  end_time         u64  seconds since the epoch, 0 while scanning
///      48     8  to_examine       u64  bytes allocated in the pool when the scan started
///      56     8  examined         u64  allocated bytes of the blocks scanned
///      64     8  issued           u64  allocated bytes of the blocks read and verified
///      72     8  repaired         u64  bytes rewritten (every repaired copy)
///      80     8  errors           u64  blocks with no good copy
///      88     8  cursor_objset    u64  0 the MOS, else a dataset's MOS object; u64::MAX done
///      96     8  cursor_object    u64  bookmark: next object
///     104     8  cursor_blkid     u64  bookmark: next block id
///     112     8  copies_bad       u64  copies that failed their checksum or could not be read
///     120     8  unrepaired       u64  bad copies that could not be rewritten
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPhys {
    pub function: ScanFunction,
    pub state: ScanState,
    pub paused: bool,
    pub min_txg: Txg,
    pub max_txg: Txg,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    pub issued: u64,
    pub repaired: u64,
    pub errors: u64,
    pub cursor_objset: u64,
    pub cursor: Bookmark,
    pub copies_bad: u64,
    pub unrepaired: u64,
}

const _: () = assert!(SCAN_PHYS_SIZE == 128);

impl ScanPhys {
    pub fn encode(&self) -> [u8; SCAN_PHYS_SIZE] {
        let mut bytes = [0u8; SCAN_PHYS_SIZE];
        bytes[0..4].copy_from_slice(&SCAN_MAGIC.to_le_bytes());
        bytes[4..6].copy_from_slice(&SCAN_VERSION.to_le_bytes());
        bytes[6] = self.function.code();
        bytes[7] = self.state.code();
        bytes[8] = self.paused as u8;
        let words = [
            self.min_txg.0,
            self.max_txg.0,
            self.start_time,
            self.end_time,
            self.to_examine,
            self.examined,
            self.issued,
            self.repaired,
            self.errors,
            self.cursor_objset,
            self.cursor.object,
            self.cursor.blkid,
            self.copies_bad,
            self.unrepaired,
        ];
        for (index, word) in words.iter().enumerate() {
            let at = 16 + 8 * index;
            bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<ScanPhys, PoolError> {
        let corrupt = |what: String| PoolError::Corrupt(format!("scan state: {what}"));
        if bytes.len() < SCAN_PHYS_SIZE {
            return Err(corrupt(format!("{} bytes", bytes.len())));
        }
        let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let version = u16::from_le_bytes(bytes[4..6].try_into().expect("2 bytes"));
        if magic != SCAN_MAGIC || version != SCAN_VERSION {
            return Err(corrupt(format!("magic {magic:#x} version {version}")));
        }
        let function = ScanFunction::from_code(bytes[6])
            .ok_or_else(|| corrupt(format!("function {}", bytes[6])))?;
        let state =
            ScanState::from_code(bytes[7]).ok_or_else(|| corrupt(format!("state {}", bytes[7])))?;
        if bytes[8] > 1 {
            return Err(corrupt(format!("paused flag {}", bytes[8])));
        }
        let word = |index: usize| {
            let at = 16 + 8 * index;
            u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        Ok(ScanPhys {
            function,
            state,
            paused: bytes[8] == 1,
            min_txg: Txg(word(0)),
            max_txg: Txg(word(1)),
            start_time: word(2),
            end_time: word(3),
            to_examine: word(4),
            examined: word(5),
            issued: word(6),
            repaired: word(7),
            errors: word(8),
            cursor_objset: word(9),
            cursor: Bookmark {
                object: word(10),
                blkid: word(11),
            },
            copies_bad: word(12),
            unrepaired: word(13),
        })
    }
}

/// A walk the scan owes because a snapshot was destroyed under it (see "The namespace
/// changing under a scan"): the blocks of dataset `objset` born in `(min_txg, max_txg]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CatchUp {
    pub objset: u64,
    pub min_txg: Txg,
    pub max_txg: Txg,
}

/// The scan object's extension after the [`ScanPhys`] bytes, little-endian:
///
/// ```text
///  offset  size  field
///     128     4  version          u32  1
///     132     4  catch-up count   u32  C <= CATCH_UPS_MAX
///     136     4  unusable count   u32  U
///     140     4  padding               zero
///     144  24·C  catch-ups        (objset u64, min_txg u64, max_txg u64)
///  +24·C   8·U   unusable leaves  guid u64
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanExtension {
    pub catch_ups: Vec<CatchUp>,
    pub unusable: Vec<Guid>,
}

impl ScanExtension {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes =
            Vec::with_capacity(16 + 24 * self.catch_ups.len() + 8 * self.unusable.len());
        bytes.extend_from_slice(&SCAN_EXTENSION_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(self.catch_ups.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&(self.unusable.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&[0u8; 4]);
        for catch_up in &self.catch_ups {
            for word in [catch_up.objset, catch_up.min_txg.0, catch_up.max_txg.0] {
                bytes.extend_from_slice(&word.to_le_bytes());
            }
        }
        for guid in &self.unusable {
            bytes.extend_from_slice(&guid.0.to_le_bytes());
        }
        bytes
    }

    /// Decode `bytes` (what follows the [`ScanPhys`]; all zero or empty: no extension).
    pub fn decode(bytes: &[u8]) -> Result<ScanExtension, PoolError> {
        let corrupt = |what: String| PoolError::Corrupt(format!("scan state extension: {what}"));
        if bytes.len() < 16 || bytes[..16].iter().all(|&byte| byte == 0) {
            return Ok(ScanExtension::default());
        }
        let word32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let word64 = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let version = word32(0);
        if version != SCAN_EXTENSION_VERSION {
            return Err(corrupt(format!("version {version}")));
        }
        let (catch_ups, unusable) = (word32(4) as usize, word32(8) as usize);
        if catch_ups > CATCH_UPS_MAX || word32(12) != 0 {
            return Err(corrupt(format!(
                "{catch_ups} catch-ups, padding {:#x}",
                word32(12)
            )));
        }
        unusable
            .checked_mul(8)
            .and_then(|unusable| unusable.checked_add(16 + 24 * catch_ups))
            .filter(|&needed| needed <= bytes.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "{unusable} unusable leaves in {} bytes",
                    bytes.len()
                ))
            })?;
        let mut extension = ScanExtension::default();
        for index in 0..catch_ups {
            let at = 16 + 24 * index;
            let catch_up = CatchUp {
                objset: word64(at),
                min_txg: Txg(word64(at + 8)),
                max_txg: Txg(word64(at + 16)),
            };
            if catch_up.objset == 0 || catch_up.min_txg >= catch_up.max_txg {
                return Err(corrupt(format!("catch-up {catch_up:?}")));
            }
            extension.catch_ups.push(catch_up);
        }
        let base = 16 + 24 * catch_ups;
        extension.unusable = (0..unusable)
            .map(|index| Guid(word64(base + 8 * index)))
            .collect();
        Ok(extension)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_phys_round_trips_and_rejects_garbage() {
        let phys = ScanPhys {
            function: ScanFunction::Resilver,
            state: ScanState::Scanning,
            paused: true,
            min_txg: Txg(4),
            max_txg: Txg(90),
            start_time: 1_700_000_000,
            end_time: 0,
            to_examine: 1 << 30,
            examined: 12345,
            issued: 24690,
            repaired: 4096,
            errors: 1,
            cursor_objset: 77,
            cursor: Bookmark {
                object: 9,
                blkid: 1000,
            },
            copies_bad: 3,
            unrepaired: 2,
        };
        let bytes = phys.encode();
        assert_eq!(ScanPhys::decode(&bytes).unwrap(), phys);
        let mut bad = bytes;
        bad[0] ^= 1;
        assert!(ScanPhys::decode(&bad).is_err());
        let mut bad = bytes;
        bad[6] = 9;
        assert!(ScanPhys::decode(&bad).is_err());
        let mut bad = bytes;
        bad[8] = 2;
        assert!(ScanPhys::decode(&bad).is_err());
        assert!(ScanPhys::decode(&bytes[..100]).is_err());
    }

    #[test]
    fn scan_extension_round_trips_and_rejects_garbage() {
        let extension = ScanExtension {
            catch_ups: vec![
                CatchUp {
                    objset: 70,
                    min_txg: Txg(5),
                    max_txg: Txg(9),
                },
                CatchUp {
                    objset: 81,
                    min_txg: Txg(0),
                    max_txg: Txg(12),
                },
            ],
            unusable: vec![Guid(3), Guid(u64::MAX)],
        };
        let bytes = extension.encode();
        assert_eq!(bytes.len(), 16 + 2 * 24 + 2 * 8);
        assert_eq!(ScanExtension::decode(&bytes).unwrap(), extension);
        // An object written before the extension existed reads as none.
        assert_eq!(
            ScanExtension::decode(&[0u8; 16]).unwrap(),
            ScanExtension::default()
        );
        assert_eq!(
            ScanExtension::decode(&[]).unwrap(),
            ScanExtension::default()
        );
        for (at, value) in [(0usize, 2u8), (4, 255), (8, 200), (12, 1), (16, 0), (24, 9)] {
            let mut bad = bytes.clone();
            bad[at] = value;
            assert!(ScanExtension::decode(&bad).is_err(), "byte {at} = {value}");
        }
        assert!(ScanExtension::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    // Fuzzers of the scan object's two decoders (docs/design/invariants.md §6, invariant 6;
    // `crate::fuzz` says how to run them long).
    proptest::proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn scan_phys_decoder_never_panics(
            function in 0u8..4,
            state in 0u8..4,
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 14),
            mutations in crate::fuzz::mutations(),
        ) {
            let mut valid = vec![0u8; SCAN_PHYS_SIZE];
            valid[0..4].copy_from_slice(&SCAN_MAGIC.to_le_bytes());
            valid[4..6].copy_from_slice(&SCAN_VERSION.to_le_bytes());
            valid[6] = function;
            valid[7] = state;
            for (index, word) in words.iter().enumerate() {
                valid[16 + 8 * index..24 + 8 * index].copy_from_slice(&word.to_le_bytes());
            }
            let bytes = crate::fuzz::mutate(valid, &mutations);
            if let Ok(phys) = ScanPhys::decode(&bytes) {
                let encoded = phys.encode();
                // Bytes 9..16 are padding the decoder does not read.
                proptest::prop_assert_eq!(&encoded[..9], &bytes[..9]);
                proptest::prop_assert_eq!(&encoded[16..], &bytes[16..SCAN_PHYS_SIZE]);
            }
        }

        #[test]
        fn scan_extension_decoder_never_panics(
            catch_ups in proptest::collection::vec((1u64.., 0u64..1000, 1u64..1000), 0..6),
            unusable in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..6),
            mutations in crate::fuzz::mutations(),
        ) {
            let extension = ScanExtension {
                catch_ups: catch_ups
                    .iter()
                    .map(|&(objset, min, span)| CatchUp {
                        objset,
                        min_txg: Txg(min),
                        max_txg: Txg(min + span),
                    })
                    .collect(),
                unusable: unusable.into_iter().map(Guid).collect(),
            };
            let bytes = crate::fuzz::mutate(extension.encode(), &mutations);
            if let Ok(decoded) = ScanExtension::decode(&bytes) {
                if decoded != ScanExtension::default() {
                    let encoded = decoded.encode();
                    proptest::prop_assert_eq!(&encoded[..], &bytes[..encoded.len()]);
                }
            }
        }
    }
}
