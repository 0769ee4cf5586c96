//! The `failmode` pool property: what happens when the pool suspends because a txg could not
//! be written (OpenZFS `failmode`, zpool(8)): `wait`, `continue` or `panic`.
//!
//! # Behaviour
//! A sync that reaches no copy of a block suspends the pool (DESIGN.md: fail-stop); from then
//! on the txg layer refuses new transactions with an error the file systems turn into EIO,
//! and reads go on. `panic` makes the holder of the pool stop at once: the daemon logs why and
//! exits without exporting (`cli/src/daemon/failmode.rs`), as OpenZFS panics the host, so that
//! a cluster manager or an init system can fail over. `continue` is the behaviour above. `wait`
//! is OpenZFS's default, where I/O blocks until `zpool clear` resumes the pool; tarn does not
//! block: `wait` behaves as `continue` (writes fail with EIO). The daemon's `pool clear`
//! resumes a suspended pool by retrying from scratch: it closes the pool as a crash would and
//! imports it again from its last committed txg, replaying the intent log, so what an fsync
//! returned for is kept (cli/src/daemon/pool.rs). The property is kept so that scripts and the
//! default match OpenZFS.
//!
//! # On disk
//! MOS directory key `"failmode"` → u64: 0 wait, 1 continue, 2 panic; absent: wait. Written in
//! pass 1 of the sync after a change (docs/design/10-pool.md §2.20).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::object::Tx;
use crate::types::Txg;

use super::{kv_set_u64, lookup_mos_directory, PoolCore, PoolError, MOS_OBJECT_DIRECTORY};

/// The MOS directory key of the property.
pub const FAILMODE_KEY: &str = "failmode";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    Wait,
    Continue,
    Panic,
}

impl FailMode {
    pub const ALL: [FailMode; 3] = [FailMode::Wait, FailMode::Continue, FailMode::Panic];

    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Wait => "wait",
            FailMode::Continue => "continue",
            FailMode::Panic => "panic",
        }
    }

    pub fn parse(text: &str) -> Option<FailMode> {
        FailMode::ALL.into_iter().find(|mode| mode.as_str() == text)
    }

    fn code(self) -> u8 {
        match self {
            FailMode::Wait => 0,
            FailMode::Continue => 1,
            FailMode::Panic => 2,
        }
    }

    fn from_code(code: u64) -> Option<FailMode> {
        FailMode::ALL
            .into_iter()
            .find(|mode| mode.code() as u64 == code)
    }
}

/// The property in memory and whether it awaits the next sync.
#[derive(Default)]
pub struct FailModeState {
    code: AtomicU8,
    dirty: AtomicBool,
    /// Set on this pool (`pool set`, or found in the MOS), as opposed to the default.
    set: AtomicBool,
}

/// A suspension's reason for one line of status or log: the first error of a failed sync
/// (which joins one message per write that reached no device) and how many followed.
pub fn short_reason(why: &str) -> String {
    let mut parts = why.split("; ");
    let first = parts.next().unwrap_or_default();
    let more = parts.count();
    let first: String = first.chars().take(300).collect();
    if more == 0 {
        first
    } else {
        format!("{first}; and {more} more")
    }
}

impl PoolCore {
    pub fn failmode(&self) -> FailMode {
        FailMode::from_code(self.failmode.code.load(Ordering::Acquire) as u64)
            .unwrap_or(FailMode::Wait)
    }

    /// Whether the property was set on this pool (else it is the default).
    pub fn failmode_is_set(&self) -> bool {
        self.failmode.set.load(Ordering::Acquire)
    }

    /// `pool set failmode=VALUE` (persisted by the next sync).
    pub fn set_failmode(&self, value: &str) -> Result<(), PoolError> {
        let mode = FailMode::parse(value).ok_or_else(|| {
            PoolError::BadProperty(format!(
                "invalid failmode {value:?}: wait, continue or panic"
            ))
        })?;
        if self.readonly {
            return Err(PoolError::ReadOnly);
        }
        self.failmode.code.store(mode.code(), Ordering::Release);
        self.failmode.set.store(true, Ordering::Release);
        self.failmode.dirty.store(true, Ordering::Release);
        Ok(())
    }

    pub(super) fn failmode_dirty(&self) -> bool {
        self.failmode.dirty.load(Ordering::Acquire)
    }

    /// At open: read the property (an unknown value is corruption of the MOS directory).
    pub(super) fn load_failmode(&self) -> Result<(), PoolError> {
        if let Some(code) = lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, FAILMODE_KEY)? {
            let mode = FailMode::from_code(code).ok_or_else(|| {
                PoolError::Corrupt(format!("failmode {code} in the MOS directory"))
            })?;
            self.failmode.code.store(mode.code(), Ordering::Release);
            self.failmode.set.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Syncing context, pass 1.
    pub(super) fn sync_failmode(&self, txg: Txg) -> Result<(), PoolError> {
        if !self.failmode.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let code = self.failmode.code.load(Ordering::Acquire) as u64;
        kv_set_u64(
            &self.mos,
            &Tx::syncing(txg),
            MOS_OBJECT_DIRECTORY,
            FAILMODE_KEY,
            code,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_round_trip() {
        for mode in FailMode::ALL {
            assert_eq!(FailMode::parse(mode.as_str()), Some(mode));
            assert_eq!(FailMode::from_code(mode.code() as u64), Some(mode));
        }
        assert_eq!(FailMode::parse("halt"), None);
        assert_eq!(FailMode::from_code(3), None);
    }

    #[test]
    fn long_reasons_are_cut_to_their_first_error() {
        assert_eq!(short_reason("a"), "a");
        assert_eq!(short_reason("x: a; b; c"), "x: a; and 2 more");
        assert_eq!(short_reason(&"y".repeat(1000)).len(), 300);
    }
}
