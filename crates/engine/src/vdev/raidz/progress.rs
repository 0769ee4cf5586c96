//! How far a RAID-Z expansion's reflow has durably gone: the word every uberblock carries while
//! one runs (OpenZFS `ub_raidz_reflow_info`).
//!
//! The reflow copies the vdev's sectors, lowest first, from their places in the old stripe
//! (`width - 1` children) to their places in the new one. A sector below the committed offset
//! is read from its new place, one at or above it from its old place; the offset moves only in
//! an uberblock, after the copies it counts were written and flushed, so that the uberblock a
//! crash leaves behind always names places that hold the data. It must match the MOS of its
//! own txg exactly, which is why it lives in the uberblock and not in the MOS or the labels.
//!
//! The first rows are the exception: their new places overlap their old ones (and other rows'
//! old places not yet copied), so they are reflowed through a scratch area first; while the word
//! says [`ScratchState::Valid`], the first [`ReflowProgress::offset`] bytes of the vdev are read
//! from the scratch area, and import finishes the copy before anything else is written.

use crate::types::VdevId;

/// Bytes of the uberblock the word takes (its bytes 184..200, reserved before expansion).
pub const REFLOW_WORD_SIZE: usize = 16;

/// Where the first rows of a reflow are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScratchState {
    /// At their real places: either the scratch phase has not run (offset 0) or it finished.
    NotInUse,
    /// The first `offset` bytes of the vdev are in the scratch area in their new layout; their
    /// real places may be half-written. Import copies the scratch to them before writing.
    Valid,
}

/// The reflow word: which vdev is being reflowed, and how far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReflowProgress {
    pub vdev: VdevId,
    pub scratch: ScratchState,
    /// Bytes of the vdev's address space (from its start) at their new places.
    pub offset: u64,
}

impl ReflowProgress {
    /// The word as it is stored: vdev id + 1 (0: no reflow), the scratch state, the offset.
    pub fn encode(progress: Option<&ReflowProgress>) -> [u8; REFLOW_WORD_SIZE] {
        let mut out = [0u8; REFLOW_WORD_SIZE];
        if let Some(progress) = progress {
            out[0..4].copy_from_slice(&(progress.vdev.0 + 1).to_le_bytes());
            let state: u32 = match progress.scratch {
                ScratchState::NotInUse => 0,
                ScratchState::Valid => 1,
            };
            out[4..8].copy_from_slice(&state.to_le_bytes());
            out[8..16].copy_from_slice(&progress.offset.to_le_bytes());
        }
        out
    }

    /// Decode a stored word; an all-zero one (every uberblock written without a reflow
    /// running) is `None`. Whether the vdev it names exists and is expanding, and whether the
    /// offset fits it, is import's check: it needs the vdev tree. The error says what is wrong.
    pub fn decode(bytes: &[u8; REFLOW_WORD_SIZE]) -> Result<Option<ReflowProgress>, String> {
        let vdev = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let state = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let offset = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        if vdev == 0 {
            if state != 0 || offset != 0 {
                return Err(format!(
                    "a reflow word without a vdev (state {state}, offset {offset})"
                ));
            }
            return Ok(None);
        }
        let scratch = match state {
            0 => ScratchState::NotInUse,
            1 => ScratchState::Valid,
            other => return Err(format!("reflow scratch state {other}")),
        };
        Ok(Some(ReflowProgress {
            vdev: VdevId(vdev - 1),
            scratch,
            offset,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_none_is_all_zero() {
        assert_eq!(ReflowProgress::encode(None), [0; REFLOW_WORD_SIZE]);
        assert_eq!(
            ReflowProgress::decode(&[0; REFLOW_WORD_SIZE]).unwrap(),
            None
        );
        for scratch in [ScratchState::NotInUse, ScratchState::Valid] {
            for (vdev, offset) in [(0, 0), (3, 4096), (u32::MAX - 1, u64::MAX)] {
                let progress = ReflowProgress {
                    vdev: VdevId(vdev),
                    scratch,
                    offset,
                };
                let word = ReflowProgress::encode(Some(&progress));
                assert_eq!(ReflowProgress::decode(&word).unwrap(), Some(progress));
            }
        }
    }

    #[test]
    fn words_that_mean_nothing_are_refused() {
        let mut unknown_state = ReflowProgress::encode(Some(&ReflowProgress {
            vdev: VdevId(0),
            scratch: ScratchState::Valid,
            offset: 512,
        }));
        unknown_state[4] = 7;
        assert!(ReflowProgress::decode(&unknown_state).is_err());
        let mut no_vdev = [0u8; REFLOW_WORD_SIZE];
        no_vdev[8] = 1;
        assert!(ReflowProgress::decode(&no_vdev).is_err());
    }
}
