//! Pool history: every command that changed the pool, kept in the pool in a bounded ring
//! (OpenZFS `spa_history.c`, `zpool history`).
//!
//! # Overview
//! The daemon (or an embedding program) calls [`PoolCore::log_history`] with the command line
//! of each successful command that changed the pool; the record waits in memory and is
//! appended to the ring in pass 1 of the next sync, so it is as durable as the change it
//! describes (the daemon syncs after the command, and export syncs everything). `pool history`
//! reads the ring oldest first.
//!
//! # On-disk format (docs/design/10-pool.md §2.21)
//! MOS directory entry `history` names a MOS object of type `PoolConfig` (pool-level
//! administrative data) with 16 KiB blocks. Its bonus (32 bytes, little-endian) is the ring's
//! header:
//!
//! ```text
//!   0  8  version (1)
//!   8  8  capacity: bytes of the ring (the object's data, offsets 0..capacity)
//!  16  8  head: bytes ever appended (the next record goes at head % capacity)
//!  24  8  tail: logical offset of the oldest whole record (tail ≤ head ≤ tail + capacity)
//! ```
//!
//! A record at logical offset `o` occupies bytes `o % capacity ..` wrapping at `capacity`:
//!
//! ```text
//!   0  4  payload length n (u32)
//!   4  8  time, seconds since the epoch (u64)
//!  12  4  uid of the user who ran the command (u32)
//!  16  8  txg the record was written in (u64)
//!  24 n-20  UTF-8 text: user name, NUL, host name, NUL, command line
//! ```
//!
//! Appending a record that does not fit in the space left advances `tail` over the oldest
//! records (reading their lengths) until it does, as OpenZFS's ring drops its oldest entries;
//! OpenZFS keeps the pool's creation record apart, this ring does not. Capacity is 0.1% of the
//! pool's size, at least [`HISTORY_CAPACITY_MIN`] and at most [`HISTORY_CAPACITY_MAX`], fixed
//! when the object is created. Header and data change in the same txg: a crash leaves the ring
//! as of the last synced txg.
//!
//! # Cost
//! Per record: one append (bytes written to at most two blocks of the object) and the bonus.
//! Reading the history reads the whole ring.

use parking_lot::Mutex;

use crate::block::blkptr::{Compression, ObjectType};
use crate::object::Tx;
use crate::types::{ObjectId, Txg};

use super::{kv_set_u64, lookup_mos_directory, mos_props, now_seconds, PoolCore, PoolError};
use crate::pool::MOS_OBJECT_DIRECTORY;

/// The MOS directory key of the history object.
pub const HISTORY_KEY: &str = "history";
/// The smallest ring (OpenZFS: 128 KiB).
pub const HISTORY_CAPACITY_MIN: u64 = 128 << 10;
/// The largest ring (OpenZFS: 1 GiB).
pub const HISTORY_CAPACITY_MAX: u64 = 1 << 30;
/// The longest command line kept (longer ones are cut).
pub const HISTORY_COMMAND_MAX: usize = 4096;
const HISTORY_VERSION: u64 = 1;
const HISTORY_HEADER_SIZE: usize = 32;
const RECORD_FIXED_SIZE: usize = 4 + 8 + 4 + 8;

/// One history record (also what the daemon sends for `pool history`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistoryRecord {
    pub time_seconds: u64,
    pub uid: u32,
    pub txg: u64,
    pub user: String,
    pub host: String,
    pub command: String,
}

impl HistoryRecord {
    fn encode(&self) -> Vec<u8> {
        let mut command = self.command.as_bytes();
        if command.len() > HISTORY_COMMAND_MAX {
            command = &command[..HISTORY_COMMAND_MAX];
        }
        let text_len = self.user.len() + 1 + self.host.len() + 1 + command.len();
        let mut bytes = Vec::with_capacity(RECORD_FIXED_SIZE + text_len);
        bytes.extend_from_slice(&((RECORD_FIXED_SIZE - 4 + text_len) as u32).to_le_bytes());
        bytes.extend_from_slice(&self.time_seconds.to_le_bytes());
        bytes.extend_from_slice(&self.uid.to_le_bytes());
        bytes.extend_from_slice(&self.txg.to_le_bytes());
        bytes.extend_from_slice(self.user.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(self.host.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(command);
        bytes
    }

    /// Decode a payload (the bytes after the length); None if it is malformed.
    fn decode(payload: &[u8]) -> Option<HistoryRecord> {
        if payload.len() < RECORD_FIXED_SIZE - 4 {
            return None;
        }
        let time_seconds = u64::from_le_bytes(payload[0..8].try_into().ok()?);
        let uid = u32::from_le_bytes(payload[8..12].try_into().ok()?);
        let txg = u64::from_le_bytes(payload[12..20].try_into().ok()?);
        let text = String::from_utf8_lossy(&payload[20..]);
        let mut parts = text.splitn(3, '\0');
        Some(HistoryRecord {
            time_seconds,
            uid,
            txg,
            user: parts.next()?.to_string(),
            host: parts.next()?.to_string(),
            command: parts.next()?.to_string(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RingHeader {
    capacity: u64,
    head: u64,
    tail: u64,
}

impl RingHeader {
    fn encode(&self) -> [u8; HISTORY_HEADER_SIZE] {
        let mut bytes = [0u8; HISTORY_HEADER_SIZE];
        for (at, word) in [HISTORY_VERSION, self.capacity, self.head, self.tail]
            .into_iter()
            .enumerate()
        {
            bytes[at * 8..at * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<RingHeader, PoolError> {
        let corrupt = |why: String| PoolError::Corrupt(format!("history header: {why}"));
        if bytes.len() < HISTORY_HEADER_SIZE {
            return Err(corrupt(format!("{} bytes", bytes.len())));
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at * 8..at * 8 + 8].try_into().unwrap());
        if word(0) != HISTORY_VERSION {
            return Err(corrupt(format!("version {}", word(0))));
        }
        let header = RingHeader {
            capacity: word(1),
            head: word(2),
            tail: word(3),
        };
        if header.capacity < HISTORY_CAPACITY_MIN
            || header.capacity > HISTORY_CAPACITY_MAX
            || header.tail > header.head
            || header.head - header.tail > header.capacity
        {
            return Err(corrupt(format!("{header:?}")));
        }
        Ok(header)
    }
}

/// Records waiting for the next sync.
#[derive(Default)]
pub struct History {
    pending: Mutex<Vec<HistoryRecord>>,
}

/// The user name of a uid, from /etc/passwd (empty if not found).
pub fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let id = fields.nth(1)?;
                (id.parse::<u32>().ok()? == uid).then(|| name.to_string())
            })
        })
        .unwrap_or_default()
}

impl PoolCore {
    /// Log a command that changed the pool, run by `uid`; written in the next sync.
    pub fn log_history(&self, command: &str, uid: u32) {
        if self.readonly {
            return;
        }
        self.history.pending.lock().push(HistoryRecord {
            time_seconds: now_seconds(),
            uid,
            txg: 0,
            user: user_name(uid),
            host: super::hostname(),
            command: command.to_string(),
        });
    }

    pub(crate) fn history_pending(&self) -> bool {
        !self.history.pending.lock().is_empty()
    }

    fn history_object(&self) -> Result<Option<ObjectId>, PoolError> {
        Ok(lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, HISTORY_KEY)?.map(ObjectId))
    }

    /// Ring bytes `[logical, logical + length)`, wrapping at the capacity.
    fn read_ring(
        &self,
        object: ObjectId,
        header: &RingHeader,
        logical: u64,
        length: usize,
    ) -> Result<Vec<u8>, PoolError> {
        let mut bytes = vec![0u8; length];
        let start = logical % header.capacity;
        let first = (length as u64).min(header.capacity - start) as usize;
        self.mos.read(object, start, &mut bytes[..first])?;
        if first < length {
            self.mos.read(object, 0, &mut bytes[first..])?;
        }
        Ok(bytes)
    }

    /// Syncing context, pass 1: append the waiting records.
    pub(super) fn sync_history(&self, txg: Txg) -> Result<(), PoolError> {
        let records = std::mem::take(&mut *self.history.pending.lock());
        if records.is_empty() {
            return Ok(());
        }
        let tx = Tx::syncing(txg);
        let (object, mut header) = match self.history_object()? {
            Some(object) => (object, RingHeader::decode(&self.mos.bonus(object)?)?),
            None => {
                let size: u64 = self.io.vdevs.tops().iter().map(|top| top.asize).sum();
                let capacity = (size / 1000).clamp(HISTORY_CAPACITY_MIN, HISTORY_CAPACITY_MAX);
                let header = RingHeader {
                    capacity,
                    head: 0,
                    tail: 0,
                };
                let props = mos_props(
                    ObjectType::PoolConfig,
                    16 << 10,
                    &self.tunables,
                    Compression::Lz4,
                );
                let object =
                    self.mos
                        .create_object(&tx, props, ObjectType::PoolConfig, &header.encode())?;
                kv_set_u64(&self.mos, &tx, MOS_OBJECT_DIRECTORY, HISTORY_KEY, object.0)?;
                (object, header)
            }
        };
        for mut record in records {
            record.txg = txg.0;
            let bytes = record.encode();
            let length = bytes.len() as u64;
            // Drop the oldest records until this one fits.
            while header.head + length - header.tail > header.capacity {
                let prefix = self.read_ring(object, &header, header.tail, 4)?;
                let payload = u32::from_le_bytes(prefix.try_into().expect("4 bytes")) as u64;
                header.tail += 4 + payload;
                if header.tail > header.head {
                    return Err(PoolError::Corrupt(format!(
                        "history record at {} runs past the ring's head {}",
                        header.tail - 4 - payload,
                        header.head
                    )));
                }
            }
            let start = header.head % header.capacity;
            let first = (length.min(header.capacity - start)) as usize;
            self.mos.write(&tx, object, start, &bytes[..first])?;
            if first < bytes.len() {
                self.mos.write(&tx, object, 0, &bytes[first..])?;
            }
            header.head += length;
        }
        self.mos
            .set_bonus(&tx, object, ObjectType::PoolConfig, &header.encode())?;
        Ok(())
    }

    /// Every record in the ring, oldest first, then the records waiting for the next sync
    /// (with txg 0).
    pub fn history(&self) -> Result<Vec<HistoryRecord>, PoolError> {
        let mut records = self.synced_history()?;
        records.extend(self.history.pending.lock().iter().cloned());
        Ok(records)
    }

    fn synced_history(&self) -> Result<Vec<HistoryRecord>, PoolError> {
        let Some(object) = self.history_object()? else {
            return Ok(Vec::new());
        };
        let header = RingHeader::decode(&self.mos.bonus(object)?)?;
        let ring = self.read_ring(
            object,
            &header,
            header.tail,
            (header.head - header.tail) as usize,
        )?;
        let mut records = Vec::new();
        let mut at = 0usize;
        while at + 4 <= ring.len() {
            let payload = u32::from_le_bytes(ring[at..at + 4].try_into().expect("4")) as usize;
            let end = at + 4 + payload;
            let Some(record) = ring.get(at + 4..end).and_then(HistoryRecord::decode) else {
                return Err(PoolError::Corrupt(format!(
                    "history record at ring offset {} is malformed",
                    header.tail + at as u64
                )));
            };
            records.push(record);
            at = end;
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_long_commands_are_cut() {
        let record = HistoryRecord {
            time_seconds: 1_700_000_000,
            uid: 1000,
            txg: 42,
            user: "alice".into(),
            host: "box".into(),
            command: "tarn create tank/fs".into(),
        };
        let bytes = record.encode();
        let length = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
        assert_eq!(length + 4, bytes.len());
        assert_eq!(HistoryRecord::decode(&bytes[4..]), Some(record.clone()));
        let long = HistoryRecord {
            command: "x".repeat(HISTORY_COMMAND_MAX * 2),
            ..record
        };
        let decoded = HistoryRecord::decode(&long.encode()[4..]).unwrap();
        assert_eq!(decoded.command.len(), HISTORY_COMMAND_MAX);
        assert_eq!(HistoryRecord::decode(&[0u8; 5]), None);
    }

    #[test]
    fn ring_headers_are_validated() {
        let header = RingHeader {
            capacity: HISTORY_CAPACITY_MIN,
            head: 500,
            tail: 100,
        };
        assert_eq!(RingHeader::decode(&header.encode()).unwrap(), header);
        let backwards = RingHeader {
            head: 10,
            tail: 100,
            ..header
        };
        assert!(RingHeader::decode(&backwards.encode()).is_err());
        let overfull = RingHeader {
            head: HISTORY_CAPACITY_MIN + 200,
            tail: 100,
            ..header
        };
        assert!(RingHeader::decode(&overfull.encode()).is_err());
        assert!(RingHeader::decode(&[1u8; 8]).is_err());
    }

    // Fuzzers of the history object's decoders (docs/design/invariants.md §6, invariant 6;
    // `crate::fuzz` says how to run them long).
    proptest::proptest! {
        #![proptest_config(crate::fuzz_config!(256))]
        #[test]
        fn ring_header_decoder_never_panics(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 4),
            mutations in crate::fuzz::mutations(),
        ) {
            let mut valid: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
            valid[..8].copy_from_slice(&HISTORY_VERSION.to_le_bytes());
            let bytes = crate::fuzz::mutate(valid, &mutations);
            if let Ok(header) = RingHeader::decode(&bytes) {
                proptest::prop_assert_eq!(&header.encode()[..], &bytes[..HISTORY_HEADER_SIZE]);
            }
        }

        #[test]
        fn record_decoder_never_panics(
            user in "[a-z]{0,8}",
            host in "[a-z]{0,8}",
            command in ".{0,40}",
            mutations in crate::fuzz::mutations(),
        ) {
            let record = HistoryRecord {
                time_seconds: 1,
                uid: 2,
                txg: 3,
                user,
                host,
                command,
            };
            let bytes = crate::fuzz::mutate(record.encode()[4..].to_vec(), &mutations);
            let _ = HistoryRecord::decode(&bytes);
        }
    }
}
