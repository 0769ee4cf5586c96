//! Damaged sectors on one side of the mirror or on RAID-Z children, and the scrub that must
//! repair every one.
//!
//! # Theory
//! A disk can return bad data without an error: the mirror's other side holds a good copy,
//! the other RAID-Z children hold the columns (and parity) to rebuild a bad one, and a scrub
//! is what finds and rewrites every bad copy, whether or not anything reads it. Its promise
//! is coverage: every block born before it started and still in the pool when it ends has
//! been read on every side, every column and every parity column checked. A scan that
//! skipped blocks (a snapshot destroyed under it that took the only walk of blocks its next
//! dataset still holds, say) looks exactly like one that did not, unless some skipped block
//! was bad. So [`crate::ops::Op::DamageMirrorSide`] and
//! [`crate::ops::Op::DamageRaidzChildren`] make bad copies where a scan has to look for them,
//! and the scrub that follows is judged.
//!
//! The targets: `DamageMirrorSide` damages the copies on ONE side of the mirror, chosen by the
//! seed; `DamageRaidzChildren` the columns on one to `parity` RAID-Z children, chosen by the
//! seed, data and parity columns alike (a bad parity column is found only by the scrub's
//! parity check, never by a read), and one time in two a mirror side's copies as well. A
//! RAID-Z map puts at most one column of a block on a child, so no block has more bad columns
//! than its parity rebuilds. A bad column is a bad copy in the scrub's count (`copies_bad`:
//! the engine counts each column it rewrote), so a block with two damaged columns counts
//! twice, as [`PendingDamage::copies`] does.
//!
//! The operation, holding the devices lock (so the mirror is whole and no device operation,
//! fault injection or scan request runs meanwhile: [`super::devices`]),
//! 1. takes a long hold on every snapshot of the pool, and damages the copies (or columns) on
//!    the targets of a few blocks of each snapshot's own interval (data and indirect
//!    blocks of its files born after the snapshot before it, [`BLOCKS_PER_SNAPSHOT`]: the
//!    blocks a scan visits with that snapshot, so that every snapshot's walk has bad copies
//!    to find): bytes of the targets' files are changed behind the engine's back, as a disk
//!    returning bad data would. Snapshots never change and, held, cannot be destroyed, so
//!    none of their blocks is freed and reused while it is being damaged;
//! 2. releases the holds, starts a whole scrub (born after every damaged block) and notes the
//!    damage as pending ([`PendingDamage`]);
//! 3. releases the devices lock and drives the scrub, paced as the seed chose, while the
//!    other workers destroy, clone, promote, roll back and export as they would, then takes
//!    the lock again to settle the damage.
//!
//! The damage is settled ([`Child::settle_damage`]) by whoever first takes the devices lock
//! (every device operation, fault injection, scan request and damage starts so, and the
//! operation itself at its end), and before a mirror side is wiped for an import: it drives
//! the pending scrub to its end (or, if that
//! scrub did not finish, as when a rewind import went back before it, runs a whole one),
//! which must leave no copy unrepaired and no error; then a second whole scrub must find no
//! bad copy at all. Every damaged block was born before the first scrub started, so a bad
//! copy the second one finds is a block still in the pool that the first one did not visit.
//! Until then nothing can take a side or a child away or damage copies (both need the devices
//! lock or settle first), and a block freed between the damage and the first scrub's visit is in
//! neither scrub's trees, so the second scrub's count is the first's misses exactly; a copy a
//! reader repaired meanwhile is simply no longer bad.
//!
//! A child killed with damage pending leaves bad copies that no dirty time log names: the
//! operation leaves the marker of injected corruption ([`CORRUPTION_MARKER`]) until the
//! damage is settled, so the next child repairs them first ([`super::faults`]); and the
//! settling syncs a few txgs after its last scrub, so that no rewind import reaches a txg in
//! which a damaged block freed before the first scrub's visit is referenced again.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tarn::block::blkptr::Dva;
use tarn::object::tree::visit_tree;
use tarn::pool::holds::Holder;
use tarn::pool::scan::{ScanFunction, ScanState};
use tarn::pool::Pool;
use tarn::types::{Guid, Txg, VdevId};
use tarn::vdev::label::VDEV_LABEL_START_SIZE;
use tarn::vdev::raidz::block_map;
use tarn::vdev::tree::raidz_layout::RaidzLayout;
use tarn::vdev::TopVdev;

use super::devices::{
    cancel_paused_scrub, check_scrub_coverage, drive_scan, run_scrub, scan_phys, two_sides,
    whole_raidz, Side,
};
use super::faults::CORRUPTION_MARKER;
use super::{outcomes, refused, Child, OpError, OpResult};

/// Blocks of each snapshot's interval whose copies on the targets are damaged, at most.
const BLOCKS_PER_SNAPSHOT: usize = 8;
/// Bytes damaged at the start of each block or column, at most (within its checksummed
/// bytes: a column's first byte is always one of the block's, or parity over them).
const DAMAGE_BYTES_MAX: usize = 512;
/// Syncs after the last scrub: more txgs than an explicit rewind goes back (see the module
/// documentation).
const SYNCS_AFTER: usize = 6;

/// One copy (or RAID-Z column) to damage: the file (an index into [`Targets::files`]), the
/// byte offset in it, and how many bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Extent {
    file: usize,
    offset: u64,
    bytes: u64,
    /// A RAID-Z parity column (found bad only by a scrub's parity check).
    parity: bool,
}

/// Where one operation damages copies: a mirror side, RAID-Z children, or both; each block
/// keeps a good copy, or columns enough to rebuild one.
#[derive(Default)]
struct Targets {
    /// The files damaged, by [`Extent::file`].
    files: Vec<String>,
    /// The mirror and the file of its damaged side.
    mirror: Option<(VdevId, usize)>,
    /// The RAID-Z vdev's damaged children, if any.
    raidz: Option<RaidzTargets>,
}

/// The RAID-Z children one operation damages.
struct RaidzTargets {
    vdev: VdevId,
    /// The vdev: where a block's columns lie depends on the width it was written with.
    top: Arc<TopVdev>,
    /// Each damaged child (its index in the geometry) with its file ([`Extent::file`]).
    children: Vec<(usize, usize)>,
}

impl Targets {
    /// Add the mirror side `side`; refused if it is gone.
    fn add_mirror_side(&mut self, pool: &Pool, side: &Side) -> OpResult {
        let guid = Guid(side.name.parse().expect("a side's name is its guid"));
        let Some((mirror, _)) = pool.core.io.vdevs.leaf_by_guid(guid) else {
            return refused("the side is gone");
        };
        self.mirror = Some((mirror.id, self.files.len()));
        self.files.push(side.path.clone());
        Ok(())
    }

    /// The bytes to damage in one copy (`dva`) of a block of `size_physical` bytes born
    /// (physically) in `birth`: on the mirror side, the copy's first bytes; on the RAID-Z
    /// vdev, the first bytes of each column the block's map ([`block_map`]) puts on a damaged
    /// child, data or parity, or, for a block narrower than the vdev after an expansion, each
    /// of its sectors there. Up to `parity` children are damaged, and a map puts at most one
    /// column of a block (one sector of each row of a narrower one) on a child, so the block
    /// keeps enough to be rebuilt; each damaged column is a bad copy in a scrub's count.
    fn copy_extents(&self, dva: &Dva, size_physical: u64, birth: u64) -> Vec<Extent> {
        let mut extents = Vec::new();
        if let Some((vdev, file)) = self.mirror {
            if dva.vdev == vdev {
                extents.push(Extent {
                    file,
                    offset: VDEV_LABEL_START_SIZE + dva.offset,
                    bytes: size_physical
                        .min(dva.size_allocated)
                        .min(DAMAGE_BYTES_MAX as u64),
                    parity: false,
                });
            }
        }
        if let Some(raidz) = &self.raidz {
            if dva.vdev == raidz.vdev {
                let geometry = match raidz.top.raidz_layout(dva.offset, size_physical, birth) {
                    Some(RaidzLayout::Columns(geometry)) => geometry,
                    Some(RaidzLayout::Cells(block, _held)) => {
                        let sector = raidz.top.sector_size();
                        for cell in &block.cells {
                            let damaged = raidz
                                .children
                                .iter()
                                .find(|(child, _)| *child == cell.place.child);
                            if let Some(&(_, file)) = damaged {
                                extents.push(Extent {
                                    file,
                                    offset: cell.place.device_offset(sector),
                                    bytes: sector.min(DAMAGE_BYTES_MAX as u64),
                                    parity: cell.column < block.map.parity,
                                });
                            }
                        }
                        return extents;
                    }
                    None => return extents,
                };
                let map = block_map(&geometry, dva.offset, size_physical);
                let accessed = &map.columns[..map.accessed_columns()];
                for (index, column) in accessed.iter().enumerate() {
                    let damaged = raidz
                        .children
                        .iter()
                        .find(|(child, _)| *child == column.child);
                    if let Some(&(_, file)) = damaged {
                        extents.push(Extent {
                            file,
                            offset: VDEV_LABEL_START_SIZE + column.child_offset,
                            bytes: column.size.min(DAMAGE_BYTES_MAX as u64),
                            parity: index < map.parity,
                        });
                    }
                }
            }
        }
        extents
    }
}

/// Damage made by [`Child::damage_copies`] and not yet settled.
pub(super) struct PendingDamage {
    /// The damaged files, named for the messages.
    targets: String,
    /// Copies and columns damaged: what a scrub counts as bad copies, before reads repair
    /// some and destroys free others.
    copies: u64,
    /// The pool's last synced txg once the damage was made: every damaged block was born in
    /// it or before, and a scrub that started after it has `max_txg` at least this.
    txg: Txg,
}

impl Child {
    /// `DamageMirrorSide`: see the module documentation. The caller holds the devices lock,
    /// and any damage made before has been settled.
    pub(super) fn damage_mirror_side(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let Some(sides) = two_sides(pool) else {
            return refused("the mirror is not two whole sides");
        };
        let mut targets = Targets::default();
        targets.add_mirror_side(pool, &sides[rng.gen_range(0..2)])?;
        self.damage_copies(pool, &targets, rng)
    }

    /// `DamageRaidzChildren`: the columns on one to `parity` RAID-Z children, and one time in
    /// two the copies on a mirror side as well. As [`Child::damage_mirror_side`].
    pub(super) fn damage_raidz_children(&self, pool: &Pool, rng: &mut StdRng) -> OpResult {
        let Some((top, children)) = whole_raidz(pool) else {
            return refused("the raidz vdev is not whole");
        };
        let parity = top.kind.parity();
        let mut targets = Targets::default();
        if rng.gen_ratio(1, 2) {
            if let Some(sides) = two_sides(pool) {
                targets.add_mirror_side(pool, &sides[rng.gen_range(0..2)])?;
            }
        }
        let count = rng.gen_range(1..=parity);
        let mut chosen: Vec<usize> = (0..children.len()).collect();
        chosen.shuffle(rng);
        chosen.truncate(count);
        chosen.sort_unstable();
        let damaged = (chosen.into_iter())
            .map(|child| {
                targets.files.push(children[child].path.clone());
                (child, targets.files.len() - 1)
            })
            .collect();
        targets.raidz = Some(RaidzTargets {
            vdev: top.id,
            top: top.clone(),
            children: damaged,
        });
        outcomes::note(match count {
            1 => "raidz damage on one child",
            _ => "raidz damage on two children",
        });
        self.damage_copies(pool, &targets, rng)
    }

    /// Damage copies of a few blocks of every snapshot on `targets` (see the module
    /// documentation) and start the scrub that must repair them.
    fn damage_copies(&self, pool: &Pool, targets: &Targets, rng: &mut StdRng) -> OpResult {
        let mut snapshots: Vec<String> = (pool.snapshots().into_iter())
            .map(|info| info.name)
            .collect();
        snapshots.sort();
        let mut extents = Vec::new();
        let mut holds = Vec::new();
        for snapshot in &snapshots {
            // Destroyed since it was listed: nothing of it to damage.
            let Ok(hold) = pool.long_hold(snapshot, Holder::Send) else {
                continue;
            };
            holds.push(hold);
            let previous = pool.dataset_records(snapshot)?.phys.prev_snapshot_txg;
            let objset = pool.snapshot_objset(snapshot)?;
            // One candidate per copy on a target: its extents are damaged together.
            let mut candidates: Vec<Vec<Extent>> = Vec::new();
            let objects = objset.synced_objects().map_err(engine_error)?;
            for (_, dnode) in objects {
                visit_tree(&pool.core.io, &dnode, &mut |bp| {
                    if bp.embedded || bp.is_hole() || bp.is_gang() || bp.birth_logical <= previous {
                        return Ok(());
                    }
                    candidates.extend(
                        (bp.copies())
                            .map(|dva| {
                                targets.copy_extents(
                                    dva,
                                    u64::from(bp.size_physical),
                                    bp.birth_physical.0,
                                )
                            })
                            .filter(|extents| !extents.is_empty()),
                    );
                    Ok(())
                })
                .map_err(engine_error)?;
            }
            extents.extend(
                candidates
                    .choose_multiple(rng, BLOCKS_PER_SNAPSHOT)
                    .flatten()
                    .copied(),
            );
        }
        // A block shared by two snapshots is damaged once.
        extents.sort();
        extents.dedup();
        let marker = self.plan.dir.join(CORRUPTION_MARKER);
        std::fs::write(&marker, b"")
            .map_err(|error| OpError::Inconsistent(format!("{}: {error}", marker.display())))?;
        let copies = damage(&targets.files, &extents, rng)?;
        drop(holds);
        self.faults.damaged.fetch_add(copies, Ordering::Relaxed);
        for extent in extents
            .iter()
            .filter(|extent| Some(extent.file) != targets.mirror.map(|(_, file)| file))
        {
            outcomes::note(if extent.parity {
                "raidz parity columns damaged"
            } else {
                "raidz data columns damaged"
            });
        }
        let described = targets.files.join(", ");
        log::info!(
            "damaged {copies} copies on {described} in {} snapshots",
            snapshots.len()
        );
        *self.damage.lock() = Some(PendingDamage {
            targets: described,
            copies,
            txg: pool.last_synced_txg(),
        });
        // The whole scrub that must repair them: one running now started before the damage.
        drive_scan(pool, ScanFunction::Scrub)?;
        cancel_paused_scrub(pool)?;
        if let Err(error) = pool.core.request_scrub() {
            // Settled with a scrub of its own, then.
            log::info!("the scrub after the damage: {error}");
        }
        Ok(())
    }

    /// Judge the scrub after the pending damage, if any (see the module documentation). The
    /// caller holds the devices lock, or the pool exclusively.
    pub(super) fn settle_damage(&self, pool: &Pool) -> OpResult {
        let Some(pending) = self.damage.lock().take() else {
            return Ok(());
        };
        let settled = self.settle(pool, &pending);
        if let Err(OpError::Refused(_)) = &settled {
            // Still pending: a later holder of the devices lock settles it.
            *self.damage.lock() = Some(pending);
        }
        settled
    }

    fn settle(&self, pool: &Pool, pending: &PendingDamage) -> OpResult {
        drive_scan(pool, ScanFunction::Resilver)?;
        drive_scan(pool, ScanFunction::Scrub)?;
        let first = match scan_phys(pool) {
            Some(phys)
                if phys.function == ScanFunction::Scrub
                    && phys.state == ScanState::Finished
                    && phys.max_txg >= pending.txg =>
            {
                phys
            }
            _ => run_scrub(pool)?,
        };
        check_scrub_coverage(pool)?;
        if first.unrepaired > 0 || first.errors > 0 {
            return Err(OpError::Inconsistent(format!(
                "settling earlier damage: {} copies damaged on {}, every block with a good copy or columns enough: the scrub after found {} bad copies, {} unrepaired, {} errors",
                pending.copies, pending.targets, first.copies_bad, first.unrepaired, first.errors
            )));
        }
        let second = run_scrub(pool)?;
        if second.copies_bad > 0 || second.unrepaired > 0 || second.errors > 0 {
            return Err(OpError::Inconsistent(format!(
                "settling earlier damage: {} copies damaged on {} in txg {} or before; the scrub after (txgs {}..={} scanned) found {} bad copies and repaired them, and a second scrub found {} more ({} unrepaired, {} errors): the first scrub did not visit every block",
                pending.copies,
                pending.targets,
                pending.txg,
                first.min_txg,
                first.max_txg,
                first.copies_bad,
                second.copies_bad,
                second.unrepaired,
                second.errors
            )));
        }
        for _ in 0..SYNCS_AFTER {
            pool.sync()?;
        }
        let marker = self.plan.dir.join(CORRUPTION_MARKER);
        std::fs::remove_file(&marker)
            .map_err(|error| OpError::Inconsistent(format!("{}: {error}", marker.display())))?;
        self.faults
            .repaired
            .fetch_add(first.copies_bad, Ordering::Relaxed);
        log::info!(
            "{} copies damaged on {}: the scrub after found {} bad, the second none",
            pending.copies,
            pending.targets,
            first.copies_bad
        );
        Ok(())
    }
}

/// An engine error met while listing a held snapshot's blocks: damage, as any read error.
fn engine_error(error: tarn::object::ObjectError) -> OpError {
    tarn::pool::PoolError::Object(error).into()
}

/// Change the first bytes of each extent of `files` (every byte flipped, so each copy or
/// column is surely bad) and make them durable; the copies damaged.
fn damage(files: &[String], extents: &[Extent], rng: &mut StdRng) -> Result<u64, OpError> {
    let io = |path: &str, error: std::io::Error| {
        OpError::Inconsistent(format!("damaging {path}: {error}"))
    };
    let opened: Vec<File> = (files.iter())
        .map(|path| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|error| io(path, error))
        })
        .collect::<Result<_, _>>()?;
    for extent in extents {
        let (path, file) = (&files[extent.file], &opened[extent.file]);
        let length = rng.gen_range(1..=extent.bytes as usize);
        let mut bytes = vec![0u8; length];
        file.read_exact_at(&mut bytes, extent.offset)
            .map_err(|error| io(path, error))?;
        for byte in &mut bytes {
            *byte = !*byte;
        }
        file.write_all_at(&bytes, extent.offset)
            .map_err(|error| io(path, error))?;
    }
    for (path, file) in files.iter().zip(&opened) {
        file.sync_data().map_err(|error| io(path, error))?;
    }
    Ok(extents.len() as u64)
}
