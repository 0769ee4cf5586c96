//! Near full: a phase that runs the pool out of space while the other workers go on.
//!
//! # Theory
//! A pool near full is where allocation, write admission and the intent log meet their
//! limits: a write is refused (ENOSPC) or cut short, an fsync may find no room for its log
//! blocks, the sync of a txg must still find room for its metadata (the slop space), and a
//! destroy must still free. The operation [`Op::NearFull`](crate::ops::Op::NearFull) makes
//! that happen at random moments of a run: one worker creates the file system
//! [`FILLER`] (compression off, stamped like every file system the tool makes, so its tagged
//! blocks verify as any other) and writes tagged blocks into it until the engine refuses,
//! fsyncs the last file (journaling what the fsync promised, as every fsync does), holds the
//! pool full for a moment while the other workers run into the refusals, then destroys the
//! file system to give the space back.
//!
//! What must hold, besides everything the oracle checks anyway:
//! - ENOSPC is an answer, not a failure: a refusal for space, by the filler or any other
//!   worker, is counted ([`note_refusal`]), and the engine's other errors near full (a
//!   suspended pool, a failed sync, corruption) are inconsistencies as always;
//! - a write refused for space changes nothing (the file read back after the fsync holds
//!   none of its blocks and is no longer than where it began), and an fsync promises only
//!   what is there: the promise is made from the file read back after the fsync returned, so
//!   a write cut short is promised as what it left, and a crash or a power cut during the
//!   phase (which the oracle then judges) shows whether the fsync made that durable;
//! - the space comes back: the destroy of the filler must succeed near full.
//!
//! The filler file system is not one of the child's slots: no other operation snapshots,
//! clones or rolls it back (a snapshot would keep the space after the phase). A child that
//! died during the phase leaves it behind; the next child, and an import inside a round (a
//! rewind can bring it back), destroy it before any work ([`Child::remove_leftover_filler`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use tarn::fs::{FileSystem, FsError};
use tarn::pool::Pool;

use super::{refused, Child, OpError, OpResult};
use crate::journal::Promise;
use crate::oracle::{verify_file, write_stamp};
use crate::tag::{birth_of, Tag, TAG_BLOCK_SIZE};

/// The name of the filler file system, below the pool's root.
pub const FILLER: &str = "fill";
/// Bytes of one filler file, and of one write into it.
const FILE_BYTES: u64 = 8 << 20;
const WRITE_BYTES: usize = 256 << 10;
/// The longest a fill may take before it is given up (a pool that never fills is not
/// waited for forever); the phase is then refused.
const FILL_TIME_MAX: Duration = Duration::from_secs(60);
/// How long the pool stays full, in milliseconds, while the other workers run into it.
const HOLD_MS: std::ops::Range<u64> = 50..1000;

/// Whether a phase runs (one at a time in a child).
static FILLING: AtomicBool = AtomicBool::new(false);

/// What this child's phases did, for the parent's summary.
static PHASES: AtomicU64 = AtomicU64::new(0);
static BYTES_FILLED: AtomicU64 = AtomicU64::new(0);
static REFUSED_FOR_SPACE: AtomicU64 = AtomicU64::new(0);

/// Where a child leaves its near-full counts (overwritten; see [`report`]).
pub fn space_counts_path(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("child-space")
}

/// Leave the counts for the parent: phases, bytes filled, refusals for space.
pub fn report(dir: &std::path::Path) {
    let text = format!(
        "{} {} {}\n",
        PHASES.load(Ordering::SeqCst),
        BYTES_FILLED.load(Ordering::SeqCst),
        REFUSED_FOR_SPACE.load(Ordering::SeqCst)
    );
    let _ = std::fs::write(space_counts_path(dir), text);
}

/// The counts a child left (phases, bytes filled, refusals for space); zeros if none.
pub fn read_space_counts(dir: &std::path::Path) -> [u64; 3] {
    let text = std::fs::read_to_string(space_counts_path(dir)).unwrap_or_default();
    let numbers: Vec<u64> = text
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    numbers.try_into().unwrap_or([0; 3])
}

/// Count a refused operation that was refused for lack of space.
pub(super) fn note_refusal(why: &str) {
    if why.contains(&FsError::NoSpace.to_string()) {
        REFUSED_FOR_SPACE.fetch_add(1, Ordering::Relaxed);
    }
    if why.contains(&FsError::QuotaExceeded.to_string()) {
        super::outcomes::note("operations refused by a quota");
    }
}

fn filler_name(pool: &Pool) -> String {
    format!("{}/{FILLER}", pool.name())
}

impl Child {
    /// Destroy a filler file system a dead child (or a rewind) left behind.
    pub(super) fn remove_leftover_filler(&self, pool: &Pool) -> Result<(), String> {
        let name = filler_name(pool);
        if !pool.datasets().iter().any(|info| info.name == name) {
            return Ok(());
        }
        self.journal.drop_dataset(&name);
        pool.destroy_datasets(&name, true, false)
            .map_err(|error| format!("destroying the filler {name} a dead child left: {error}"))?;
        log::info!("destroyed the filler {name} a dead child left");
        Ok(())
    }

    /// The operation: see the module documentation.
    pub(super) fn near_full(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        if FILLING.swap(true, Ordering::SeqCst) {
            return refused("a near-full phase is running");
        }
        let outcome = self.fill_hold_free(pool, rng);
        FILLING.store(false, Ordering::SeqCst);
        outcome
    }

    fn fill_hold_free(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let name = filler_name(pool);
        self.remove_leftover_filler(pool)
            .map_err(OpError::Inconsistent)?;
        pool.create_dataset(&name, &[("compression".into(), "off".into())], false)?;
        PHASES.fetch_add(1, Ordering::Relaxed);
        let filled = (|| -> OpResult {
            let fs = pool.open_file_system(&name)?;
            let family = rng.gen::<u64>() | 1;
            write_stamp(&fs, family)?;
            self.fill(pool, &name, &fs, family)?;
            std::thread::sleep(Duration::from_millis(rng.gen_range(HOLD_MS)));
            Ok(())
        })();
        // The space comes back whatever the fill did; a destroy refused near full is the
        // engine's failure to free, and leaves the pool full for every operation after.
        self.journal.drop_dataset(&name);
        if let Err(error) = pool.destroy_datasets(&name, true, false) {
            return Err(OpError::Inconsistent(format!(
                "destroying the filler {name} near full: {error}"
            )));
        }
        match filled {
            Err(OpError::Refused(why)) if why.contains(&FsError::NoSpace.to_string()) => {
                // The stamp itself found no room: the pool was full already.
                REFUSED_FOR_SPACE.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            other => other,
        }
    }

    /// Write tagged files into the filler until the engine refuses for space, then fsync the
    /// last one and journal its promise.
    fn fill(&self, pool: &Pool, dataset: &str, fs: &FileSystem, family: u64) -> OpResult {
        let started = Instant::now();
        let mut number = 0u64;
        loop {
            if started.elapsed() > FILL_TIME_MAX {
                return refused("the pool did not fill in time");
            }
            let attr = fs.create(fs.root(), format!("f{number}").as_bytes(), 0o644, 0, 0)?;
            number += 1;
            // The write the engine refused whole (its generation, and where it began).
            let mut refused_write = None;
            let mut full = false;
            let mut offset = 0u64;
            while offset < FILE_BYTES {
                let generation = self.next_generation();
                let mut data = Vec::with_capacity(WRITE_BYTES);
                for block in 0..(WRITE_BYTES / TAG_BLOCK_SIZE) as u64 {
                    let tag = Tag {
                        family,
                        ino: attr.ino,
                        birth: birth_of(&attr),
                        offset: offset + block * TAG_BLOCK_SIZE as u64,
                        generation,
                        round: self.plan.round,
                    };
                    data.extend_from_slice(&tag.encode(TAG_BLOCK_SIZE));
                }
                match fs.write(attr.ino, offset, &data) {
                    Ok(written) if written == data.len() => offset += written as u64,
                    // A short write: the rest found no room.
                    Ok(written) => {
                        BYTES_FILLED.fetch_add(written as u64, Ordering::Relaxed);
                        full = true;
                        break;
                    }
                    Err(FsError::NoSpace) => {
                        refused_write = Some((generation, offset));
                        full = true;
                        break;
                    }
                    Err(error) => return Err(error.into()),
                }
                BYTES_FILLED.fetch_add(WRITE_BYTES as u64, Ordering::Relaxed);
            }
            if !full {
                continue;
            }
            REFUSED_FOR_SPACE.fetch_add(1, Ordering::Relaxed);
            log::info!(
                "the filler refused for space after {} files, in {:?}; available {} bytes",
                number,
                started.elapsed(),
                pool.core.available_bytes()
            );
            // The fsync near full: what it returns for is promised, read back from the file
            // (a refused or short write is promised as what it left).
            match fs.fsync(attr.ino) {
                Ok(()) => {}
                Err(FsError::NoSpace) => {
                    REFUSED_FOR_SPACE.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
            }
            let contents = verify_file(fs, family, attr.ino, self.plan.round)
                .map_err(|why| OpError::Inconsistent(format!("{dataset}: {why}")))?;
            // A write refused for space changes nothing: none of its blocks, and no size.
            if let Some((generation, at)) = refused_write {
                if contents.size > at || contents.generations.contains(&generation) {
                    return Err(OpError::Inconsistent(format!(
                        "{dataset}: inode {}: a write of {WRITE_BYTES} bytes at {at} was refused for space, yet the file is {} bytes and holds {} of its blocks",
                        attr.ino,
                        contents.size,
                        contents.generations.iter().filter(|&&g| g == generation).count()
                    )));
                }
            }
            self.journal.fsynced(
                dataset,
                attr.ino,
                &Promise {
                    birth: contents.birth,
                    size: contents.size,
                    generations: contents.generations,
                },
            );
            return Ok(());
        }
    }
}
