//! One batch of a RAID-Z expansion's copy on a vdev: sectors read from their old places (one
//! read per old child) and written to their new ones (one write per new child), holding the
//! batch's range exclusively (`vdev/raidz/expand.rs`) so that no block I/O sees them mid-copy.
//! The order of batches and why it is safe is `vdev/raidz/reflow.rs`; the caller makes the
//! writes durable (a flush) before an uberblock counts them.
//!
//! # Cost
//! Per batch: `W − 1` reads and `W` writes (more for a slot being replaced), each of about the
//! batch's size divided by the width, and one copy of the batch between the buffers.

use std::ops::Range;

use super::super::queue::{read_each_at, write_each_at, IoClass, VdevQueue};
use super::super::raidz::reflow::scratch_logical_sectors;
use super::super::raidz::RAIDZ_SCRATCH_START;
use super::super::{buffers, VdevError};
use super::{offline_error, TopVdev};

/// The sectors of `sectors` that a vdev laid `width` wide keeps on child `child`, as the first
/// one and how many (consecutive on the child's device).
fn on_child(sectors: &Range<u64>, width: u64, child: u64) -> Option<(u64, u64)> {
    let first = sectors.start + (child + width - sectors.start % width) % width;
    (first < sectors.end).then(|| (first, (sectors.end - first).div_ceil(width)))
}

/// Where a copy reads or writes sector `x`: its old place, its new place, or its new place in
/// the scratch area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Laid {
    Old,
    New,
    Scratch,
}

impl Laid {
    /// The layout's width on a vdev going to `width` children, and where its sectors start on
    /// a child's device.
    fn width_and_base(self, width: u64) -> (u64, u64) {
        match self {
            Laid::Old => (width - 1, super::VDEV_LABEL_START_SIZE),
            Laid::New => (width, super::VDEV_LABEL_START_SIZE),
            Laid::Scratch => (width, RAIDZ_SCRATCH_START),
        }
    }
}

/// Copy `sectors` of the address space of `top` (an expansion under way) from their old
/// places to their new ones; bytes copied. Errors when an old place cannot be read or a new
/// slot took no write: the caller pauses the expansion (nothing was counted as copied).
/// A batch below the overwrite limit (`raidz/reflow.rs`) may be counted after its guard is
/// gone; the first rows, whose new places overwrite old places still read, go through the
/// scratch area instead ([`scratch_phase`]).
pub fn copy_batch(top: &TopVdev, sectors: Range<u64>) -> Result<u64, VdevError> {
    let reflow = top
        .raidz_reflow()
        .expect("a reflow batch on a vdev being expanded");
    let _held = reflow.begin_batch(sectors.clone(), top.slots.len() as u64);
    copy_sectors(top, sectors, Laid::Old, Laid::New)
}

/// The scratch phase (`raidz/reflow.rs`): the first `sectors` read from their old places and
/// written in their new layout to every child's scratch area; `scratch_valid` (flush, and an
/// uberblock saying the scratch is valid); the scratch copied to the real new places;
/// `copied` (flush, and an uberblock saying they are there). The range is held throughout.
pub fn scratch_phase(
    top: &TopVdev,
    sectors: u64,
    scratch_valid: impl FnOnce() -> Result<(), VdevError>,
    copied: impl FnOnce() -> Result<(), VdevError>,
) -> Result<u64, VdevError> {
    let width = top.slots.len() as u64;
    assert!(
        sectors <= scratch_logical_sectors(width, top.sector_size()),
        "{sectors} sectors do not fit the scratch area"
    );
    let reflow = top
        .raidz_reflow()
        .expect("a reflow batch on a vdev being expanded");
    let _held = reflow.begin_batch(0..sectors, width);
    copy_sectors(top, 0..sectors, Laid::Old, Laid::Scratch)?;
    scratch_valid()?;
    let bytes = copy_sectors(top, 0..sectors, Laid::Scratch, Laid::New)?;
    copied()?;
    Ok(bytes)
}

/// Copy `sectors` from their places laid `from` to those laid `to` (import's recovery of a
/// valid scratch area is `Scratch` to `New`); bytes copied. Reads go to the first child of
/// each slot that can take I/O, writes to every child of the slot.
pub fn copy_sectors(
    top: &TopVdev,
    sectors: Range<u64>,
    from: Laid,
    to: Laid,
) -> Result<u64, VdevError> {
    let width = top.slots.len() as u64;
    let sector = top.sector_size();
    let (from_width, from_base) = from.width_and_base(width);
    let (to_width, to_base) = to.width_and_base(width);
    let device_offset = |first: u64, laid: u64, base: u64| base + first / laid * sector;
    // Read: one extent per source child (indexed by it).
    let mut extents: Vec<Option<(u64, usize, Vec<u8>)>> = Vec::with_capacity(from_width as usize);
    for slot in 0..from_width {
        let Some((first, count)) = on_child(&sectors, from_width, slot) else {
            extents.push(None);
            continue;
        };
        let children = top.slot_children(slot as usize);
        let Some(reader) = children
            .iter()
            .copied()
            .find(|&c| top.children[c].is_usable())
        else {
            let leaf = &top.children[children[0]];
            let (at, length) = (device_offset(first, from_width, from_base), count * sector);
            give_back(extents);
            return Err(VdevError::io(
                &*leaf.device,
                "read",
                at,
                length,
                offline_error(leaf),
            ));
        };
        extents.push(Some((
            first,
            reader,
            buffers::take((count * sector) as usize),
        )));
    }
    let mut requests: Vec<(&VdevQueue, u64, &mut [u8])> = (extents.iter_mut().flatten())
        .map(|(first, reader, buffer)| {
            let queue = &top.children[*reader].queue;
            let at = device_offset(*first, from_width, from_base);
            (queue, at, buffer.as_mut_slice())
        })
        .collect();
    let results = read_each_at(IoClass::Rebuild, &mut requests);
    drop(requests);
    for ((first, reader, buffer), result) in extents.iter().flatten().zip(results) {
        if let Err(source) = result {
            let leaf = &top.children[*reader];
            let at = device_offset(*first, from_width, from_base);
            let error = VdevError::io(&*leaf.device, "read", at, buffer.len() as u64, source);
            give_back(extents);
            return Err(error);
        }
    }
    // Write: one extent per target child, to every child of its slot.
    let mut writes: Vec<(usize, u64, Vec<u8>)> = Vec::new();
    for slot in 0..to_width {
        let Some((first, count)) = on_child(&sectors, to_width, slot) else {
            continue;
        };
        let mut buffer = buffers::take((count * sector) as usize);
        for index in 0..count {
            let x = first + index * to_width;
            let (source_first, _, source) = extents[(x % from_width) as usize]
                .as_ref()
                .expect("read above");
            let from = ((x - source_first) / from_width * sector) as usize;
            let to = (index * sector) as usize;
            buffer[to..to + sector as usize].copy_from_slice(&source[from..from + sector as usize]);
        }
        // Every child of the slot (two while a replace runs) gets the buffer; only the extra
        // ones a copy of it.
        let (last, others) = top
            .slot_children(slot as usize)
            .split_last()
            .expect("a slot has a child");
        let at = device_offset(first, to_width, to_base);
        for &leaf in others {
            writes.push((leaf, at, buffer.clone()));
        }
        writes.push((*last, at, buffer));
    }
    give_back(extents);
    let requests: Vec<(&VdevQueue, u64, &[u8])> = (writes.iter())
        .filter(|(leaf, _, _)| !top.children[*leaf].is_offline())
        .map(|(leaf, at, buffer)| (&top.children[*leaf].queue, *at, buffer.as_slice()))
        .collect();
    let issued = requests.len();
    let results = write_each_at(IoClass::Rebuild, &requests);
    drop(requests);
    let first_error = results.into_iter().find_map(Result::err);
    let copied = (sectors.end - sectors.start) * sector;
    let outcome = if issued == writes.len() && first_error.is_none() {
        Ok(copied)
    } else {
        // A place that missed its copy would be read once an uberblock counts it.
        Err(VdevError::NoChildWritten {
            top: top.id,
            offset: sectors.start * sector,
            length: copied,
            first_error: first_error.map_or_else(
                || "a child to copy to is offline".to_string(),
                |error| error.to_string(),
            ),
        })
    };
    writes.into_iter().for_each(|write| buffers::give(write.2));
    outcome
}

impl super::VdevTree {
    /// Import's recovery of a scratch phase cut short (a writable import, before anything else
    /// is written): an expansion whose uberblock says its first rows are valid in the scratch
    /// area gets them copied to their real places, flushed, and counted as there (the next
    /// uberblock says so; a crash before it does the copy again, from the same scratch).
    pub fn recover_reflow_scratch(&self) -> Result<(), VdevError> {
        for top in self.tops().iter() {
            let Some(reflow) = top.raidz_reflow() else {
                continue;
            };
            let view = reflow.view();
            if !view.scratch {
                continue;
            }
            log::info!(
                "vdev {}: copying the first {} sectors of a raidz expansion from the scratch area",
                top.id,
                view.synced
            );
            copy_sectors(top, 0..view.synced, Laid::Scratch, Laid::New)?;
            top.flush()?;
            reflow.commit(view.synced);
        }
        Ok(())
    }
}

fn give_back(extents: Vec<Option<(u64, usize, Vec<u8>)>>) {
    for (_, _, buffer) in extents.into_iter().flatten() {
        buffers::give(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::raidz_with_history;
    use super::*;
    use crate::vdev::raidz::progress::{ReflowProgress, ScratchState};
    use crate::vdev::raidz::reflow::next_batch;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const CHILD_SHARE: u64 = 4 << 20;
    const BLOCK: u64 = 16 << 10;
    const SPACING: u64 = 256 << 10;

    /// A raidz`parity` going from `old` to `old + 1` children, nothing copied yet.
    fn expanding(dir: &std::path::Path, old: u64, parity: u8, ashift: u32) -> TopVdev {
        raidz_with_history(
            dir,
            old + 1,
            parity,
            ashift,
            old * CHILD_SHARE,
            Vec::new(),
            true,
        )
    }

    fn contents(block: u64, generation: u64) -> Vec<u8> {
        (0..BLOCK)
            .map(|byte| (byte ^ (block * 31) ^ (generation * 131)) as u8)
            .collect()
    }

    fn reads_back(top: &TopVdev, block: u64, generation: u64) -> bool {
        let expected = contents(block, generation);
        let mut verify = |candidate: &[u8]| candidate == expected.as_slice();
        let read = top.read_raidz(
            IoClass::SyncRead,
            block * SPACING,
            BLOCK,
            5,
            false,
            &mut verify,
        );
        matches!(read, Some(Ok(read)) if read.data == expected)
    }

    /// The whole copy, as the reflow will run it: the first rows at once (the scratch phase's
    /// copy), then batches below the overwrite limit, each flushed and then counted.
    fn copy_everything(top: &TopVdev, batch: u64) {
        let reflow = top.raidz_reflow().unwrap().clone();
        let width = top.slots.len() as u64;
        let total = top.asize / top.sector_size();
        let first_rows = (width * width * 4).min(total);
        scratch_phase(
            top,
            first_rows,
            || {
                top.flush()?;
                reflow.set_committed(&ReflowProgress {
                    vdev: top.id,
                    scratch: ScratchState::Valid,
                    offset: first_rows * top.sector_size(),
                });
                Ok(())
            },
            || {
                top.flush()?;
                reflow.commit(first_rows);
                Ok(())
            },
        )
        .unwrap();
        // Batches run ahead of what is counted, as they do between two txgs: up to the limit,
        // or three batches, whichever comes first; then a flush and a count.
        let (mut synced, mut next) = (first_rows, first_rows);
        while synced < total {
            let mut ahead = 0;
            while let Some(range) = next_batch(&(0..total), next, synced, width, batch) {
                copy_batch(top, range.clone()).unwrap();
                next = range.end;
                ahead += 1;
                if ahead == 3 {
                    break;
                }
            }
            assert!(next > synced, "no progress at {synced}");
            top.flush().unwrap();
            reflow.commit(next);
            synced = next;
        }
    }

    #[test]
    fn blocks_written_and_read_beside_the_copy_stay_whole() {
        for (old, parity, ashift, batch) in [(4, 1, 12, 37), (3, 2, 9, 200), (5, 3, 9, 64)] {
            let dir = tempfile::tempdir().unwrap();
            let top = Arc::new(expanding(dir.path(), old, parity, ashift));
            let blocks = top.asize / SPACING;
            for block in 0..blocks {
                let data = contents(block, 0);
                top.write_in_txg(IoClass::AsyncWrite, block * SPACING, &data, 5)
                    .unwrap();
            }
            // A writer rewrites blocks and reads others back while the copy runs.
            let done = Arc::new(AtomicBool::new(false));
            let writer = {
                let (top, done) = (top.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut generations = vec![0u64; blocks as usize];
                    let mut step = 0u64;
                    while !done.load(Ordering::Acquire) || step < 2 * blocks {
                        let block = step * 7 % blocks;
                        generations[block as usize] += 1;
                        let data = contents(block, generations[block as usize]);
                        top.write_in_txg(IoClass::AsyncWrite, block * SPACING, &data, 5)
                            .unwrap();
                        let other = step * 13 % blocks;
                        assert!(
                            reads_back(&top, other, generations[other as usize]),
                            "block {other} (generation {}) during the copy",
                            generations[other as usize]
                        );
                        step += 1;
                    }
                    generations
                })
            };
            copy_everything(&top, batch);
            done.store(true, Ordering::Release);
            let generations = writer.join().unwrap();
            for block in 0..blocks {
                assert!(
                    reads_back(&top, block, generations[block as usize]),
                    "raidz{parity} {old} to {}: block {block} after the copy",
                    old + 1
                );
            }
        }
    }

    #[test]
    fn a_crash_after_the_scratch_is_valid_reads_it_and_import_copies_it() {
        let dir = tempfile::tempdir().unwrap();
        let top = expanding(dir.path(), 4, 1, 9);
        let blocks = 8;
        for block in 0..blocks {
            let data = contents(block, 1);
            top.write_in_txg(IoClass::AsyncWrite, block * SPACING, &data, 5)
                .unwrap();
        }
        let reflow = top.raidz_reflow().unwrap().clone();
        // The first 8 blocks' worth of sectors (at 256 KiB spacing, 512-byte sectors).
        let first_rows = blocks * SPACING / 512;
        let valid = ReflowProgress {
            vdev: top.id,
            scratch: ScratchState::Valid,
            offset: first_rows * 512,
        };
        // The power goes while the real places are written: here, before any of them.
        let crashed = scratch_phase(
            &top,
            first_rows,
            || {
                top.flush()?;
                reflow.set_committed(&valid);
                Ok(())
            },
            || {
                Err(VdevError::io(
                    &*top.children[0].device,
                    "write",
                    0,
                    0,
                    std::io::Error::other("power cut"),
                ))
            },
        );
        assert!(crashed.is_err());
        // The power went while the real places were written: they are torn (garbage here, in
        // the rows that hold only the first rows' sectors, old or new), and the blocks read from
        // the scratch area.
        let torn = vec![0x6bu8; (first_rows.div_ceil(5) * 512) as usize];
        for leaf in &top.children {
            leaf.device
                .write_at(super::super::VDEV_LABEL_START_SIZE, &torn)
                .unwrap();
        }
        for block in 0..blocks {
            assert!(reads_back(&top, block, 1), "block {block} from the scratch");
        }
        // Import's recovery: the scratch copied to the real places, then counted.
        let top = Arc::new(top);
        let tree = super::super::VdevTree::new(vec![top.clone()]);
        tree.recover_reflow_scratch().unwrap();
        assert!(!reflow.view().scratch);
        assert_eq!(reflow.view().synced, first_rows);
        for block in 0..blocks {
            assert!(
                reads_back(&top, block, 1),
                "block {block} after the recovery"
            );
        }
    }

    #[test]
    fn a_batch_that_cannot_read_its_sources_fails_and_copies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let top = expanding(dir.path(), 4, 1, 12);
        top.children[1].dtl.set_offline(true);
        top.children[2].dtl.set_offline(true);
        assert!(copy_batch(&top, 0..64).is_err());
    }
}
