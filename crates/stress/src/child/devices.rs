//! The pool's redundant devices: what the device operations of [`super`] do to them, and how
//! the child brings them back whole.
//!
//! # Theory
//! The pool is a two-way mirror (files `mirror-a.img` and `mirror-b.img`, or the names a
//! replace moved them to) and a RAID-Z vdev (files `raidz-0.img`, `raidz-1.img`, ..., one or
//! two columns of parity as the seed chose: see `runner`) beside a second top-level vdev that
//! is never touched (it has no redundancy). Device operations take a mirror side away in
//! every way the engine offers (offline, detach, replace, a wipe of the file, labels and all,
//! while the pool runs or while it is exported) and bring it back; and they take up to
//! `parity` RAID-Z children offline, or wipe one and replace it in place ([`super::raidz`]).
//! What makes this a test of the engine
//! and not of luck is that the tool never takes away the last redundancy on its own: each
//! operation starts from whole vdevs, and [`heal_devices`] ends it with them, every mirror
//! side and RAID-Z child online, labelled and resilvered (no leaf's dirty time log left). So
//! whatever the oracle then finds missing, the engine lost.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use tarn::pool::scan::{ScanFunction, ScanPhys, ScanState};
use tarn::pool::Pool;
use tarn::vdev::{Leaf, TopVdev};

use super::{pool_dir, scan_request, OpError};

/// The file names of the mirror's sides start with this (the runner creates them).
pub const MIRROR_PREFIX: &str = "mirror-";
/// Resilvers [`heal_devices`] starts before it gives up on making the vdevs whole.
const HEAL_RESILVERS_MAX: usize = 5;
/// The pause between the syncs that drive a scan ([`drive_scan`]): room for the other
/// workers' operations, a snapshot destroy among them, between two rounds of the scan.
const DRIVE_INTERVAL: Duration = Duration::from_millis(5);
/// The file name of the pool's second top-level vdev (the runner creates it).
pub const SECOND_VDEV: &str = "second.img";
/// The file names of the RAID-Z vdev's children start with this (the runner creates them:
/// [`raidz_child_file`]).
pub const RAIDZ_PREFIX: &str = "raidz-";

/// Bytes in each RAID-Z child's file (sparse): the engine's smallest vdev, less than the other
/// vdevs', so that the three to five of them add room without making a near-full phase fill
/// twice as much.
pub const RAIDZ_CHILD_SIZE: u64 = 64 << 20;
/// Appended to a mirror side's file name when it is replaced by a new file (and taken off
/// again at the next replace).
const REPLACED_SUFFIX: &str = ".new";

/// Make `path` a sparse file as large as `like` (a vdev of the pool), unless it exists.
pub(super) fn create_device_file(path: &Path, like: PathBuf) -> Result<(), OpError> {
    let make = || -> std::io::Result<()> {
        let size = std::fs::metadata(&like)?.len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if file.metadata()?.len() < size {
            file.set_len(size)?;
        }
        Ok(())
    };
    make().map_err(|error| OpError::Inconsistent(format!("{}: {error}", path.display())))
}

/// The txgs of the valid uberblocks in the rings of an exported pool's devices, newest
/// first, from the labels' txg down: what an explicit rewind may choose from (read as `zdb -u` would, since the pool
/// layer offers no list of them).
pub(super) fn uberblock_txgs(found: &tarn::pool::FoundPool) -> Vec<u64> {
    let mut txgs = Vec::new();
    for top in &found.config.vdev_tree {
        for leaf in &top.children {
            let Some(path) = found.leaves.get(&leaf.guid) else {
                continue;
            };
            let Ok(device) = tarn::vdev::FileDevice::open_unlocked_readonly(path) else {
                continue;
            };
            for slot in tarn::vdev::label::read_uberblock_slots(&device, top.ashift) {
                // Newer ones than the labels' txg are a timeline an earlier rewind abandoned.
                match tarn::pool::uberblock::Uberblock::decode(&slot) {
                    Ok(Some(uberblock)) if uberblock.txg.0 <= found.txg => {
                        txgs.push(uberblock.txg.0)
                    }
                    _ => {}
                }
            }
        }
    }
    txgs.sort_unstable_by(|a, b| b.cmp(a));
    txgs.dedup();
    txgs
}

/// One side of the mirror: the name the pool's device calls take (its guid, which stays
/// unique while a replace in place gives two leaves one path) and its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Side {
    pub name: String,
    pub path: String,
    /// The guid of the leaf this one is replacing, while the replace is in progress.
    pub replaces: Option<u64>,
}

/// The file name of the RAID-Z vdev's child `index`.
pub fn raidz_child_file(index: usize) -> String {
    format!("{RAIDZ_PREFIX}{index}.img")
}

/// A leaf as the device operations name it.
fn side_of(leaf: &Leaf) -> Side {
    Side {
        name: leaf.guid.0.to_string(),
        path: leaf.path.display().to_string(),
        replaces: leaf.replaces().map(|guid| guid.0),
    }
}

/// The mirror's sides as the pool has them now (during a replace, three).
pub(super) fn mirror_sides(pool: &Pool) -> Vec<Side> {
    (pool.core.io.vdevs.leaves())
        .filter(|leaf| {
            (leaf.path.file_name())
                .is_some_and(|name| name.to_string_lossy().starts_with(MIRROR_PREFIX))
        })
        .map(|leaf| side_of(&leaf))
        .collect()
}

/// The pool's RAID-Z vdev (the runner makes one).
pub(super) fn raidz_top(pool: &Pool) -> Option<Arc<TopVdev>> {
    (pool.core.io.vdevs.tops().iter())
        .find(|top| top.raidz_geometry().is_some())
        .cloned()
}

/// The RAID-Z vdev with every child usable (online and present), and its children's names
/// in column order (child `i` of the geometry is `children[i]`); None otherwise.
pub(super) fn whole_raidz(pool: &Pool) -> Option<(Arc<TopVdev>, Vec<Side>)> {
    let top = raidz_top(pool)?;
    let slots = top.raidz_geometry()?.children;
    // While an expansion's copy runs (resumed by an import after a kill), no device operation
    // or damage: the copy reads one child per slot, raw, and moves what is damaged.
    if top.children.len() != slots
        || !top.children.iter().all(|leaf| leaf.is_usable())
        || top.raidz_expanding()
    {
        return None;
    }
    let children = top.children.iter().map(|leaf| side_of(leaf)).collect();
    Some((top, children))
}

/// The two sides of a whole mirror, with nothing being replaced; None otherwise.
pub(super) fn two_sides(pool: &Pool) -> Option<[Side; 2]> {
    let sides = mirror_sides(pool);
    match sides.as_slice() {
        [a, b] if a.path != b.path && a.replaces.is_none() && b.replaces.is_none() => {
            Some([a.clone(), b.clone()])
        }
        _ => None,
    }
}

/// The file names a mirror side may have: the two the runner creates, and the names a
/// replace moves them to (see [`replacement_path`]).
fn mirror_side_paths(dir: &Path) -> Vec<PathBuf> {
    ["a.img", "b.img"]
        .iter()
        .flat_map(|name| {
            let path = pool_dir(dir).join(format!("{MIRROR_PREFIX}{name}"));
            let replaced = replacement_path(&path.display().to_string());
            [path, replaced]
        })
        .collect()
}

/// Bring the mirror back to two whole sides and the RAID-Z vdev to every child online,
/// whatever came before (a side offline, wiped, half replaced, or detached with its attach
/// refused, children offline, or a child killed in the middle of any of these), and wait for
/// the resilver: each device operation starts from, and leaves, whole vdevs, so none takes
/// away the last redundancy. A mirror side that `online` refuses (its label is gone) is
/// replaced in place; a missing second side is attached anew.
pub(super) fn heal_devices(pool: &Pool, dir: &Path) -> Result<(), OpError> {
    heal_mirror(pool, dir)?;
    heal_raidz(pool, dir)?;
    resilver_until_whole(pool)
}

/// The mirror's part of [`heal_devices`]: two sides, online, nothing being replaced.
fn heal_mirror(pool: &Pool, dir: &Path) -> Result<(), OpError> {
    // A replace a dead child left in progress is seen through first.
    for side in mirror_sides(pool) {
        if side.replaces.is_some() {
            log::info!("{}: a replace in progress; waiting for it", side.path);
            drive_scan(pool, ScanFunction::Resilver)?;
            pool.wait_replaced(tarn::types::Guid(side.name.parse().expect("a guid")))?;
        }
    }
    let sides = mirror_sides(pool);
    for side in &sides {
        if let Err(error) = pool.online(&side.name) {
            log::info!(
                "{}: online refused ({error}); replacing it in place",
                side.path
            );
            create_device_file(Path::new(&side.path), pool_dir(dir).join(SECOND_VDEV))?;
            let guid = pool.replace(&side.name, None, true)?;
            drive_scan(pool, ScanFunction::Resilver)?;
            pool.wait_replaced(guid)?;
        }
    }
    if let [only] = sides.as_slice() {
        let free = mirror_side_paths(dir)
            .into_iter()
            .find(|path| path.display().to_string() != only.path)
            .expect("four names for one side");
        log::info!(
            "{}: the mirror lost its other side; attaching {}",
            only.path,
            free.display()
        );
        create_device_file(&free, pool_dir(dir).join(SECOND_VDEV))?;
        pool.attach(&only.name, &free, true)?;
    }
    Ok(())
}

/// The RAID-Z part of [`heal_devices`]: every child online, nothing being replaced. A replace
/// a dead child left in progress is seen through; a child `online` refuses must be one the
/// tool wiped (`RaidzWipeReplace`, killed before its replace) and is replaced in place;
/// any other refusal is the engine's failure.
fn heal_raidz(pool: &Pool, dir: &Path) -> Result<(), OpError> {
    let Some(top) = raidz_top(pool) else {
        return Err(OpError::Inconsistent(
            "the pool has no RAID-Z vdev any more".into(),
        ));
    };
    for leaf in top.children.iter().filter(|leaf| leaf.replaces().is_some()) {
        log::info!(
            "{}: a RAID-Z replace in progress; waiting for it",
            leaf.path.display()
        );
        drive_scan(pool, ScanFunction::Resilver)?;
        pool.wait_replaced(leaf.guid)?;
    }
    let Some(top) = raidz_top(pool) else {
        return Err(OpError::Inconsistent(
            "the pool has no RAID-Z vdev any more".into(),
        ));
    };
    for leaf in top.children.iter().filter(|leaf| !leaf.is_usable()) {
        let name = leaf.guid.0.to_string();
        log::info!(
            "{}: a RAID-Z child away; bringing it online",
            leaf.path.display()
        );
        if let Err(error) = pool.online(&name) {
            if !blank_label(&leaf.path) {
                return Err(OpError::Inconsistent(format!(
                    "{}: a RAID-Z child with its label: online refused: {error}",
                    leaf.path.display()
                )));
            }
            log::info!(
                "{}: online refused a wiped child ({error}); replacing it in place",
                leaf.path.display()
            );
            create_device_file(&leaf.path, pool_dir(dir).join(SECOND_VDEV))?;
            let guid = pool.replace(&name, None, true)?;
            drive_scan(pool, ScanFunction::Resilver)?;
            pool.wait_replaced(guid)?;
        }
    }
    Ok(())
}

/// Whether the device file at `path` has no label at its start (the tool wiped it).
fn blank_label(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let mut head = vec![0u8; 64 << 10];
    match std::fs::File::open(path) {
        Ok(file) => file
            .read_exact_at(&mut head, 0)
            .map_or(true, |_| head.iter().all(|&byte| byte == 0)),
        Err(_) => true,
    }
}

/// The end of [`heal_devices`]: resilver until no leaf misses a txg, then a scrub must find
/// no bad copy.
fn resilver_until_whole(pool: &Pool) -> Result<(), OpError> {
    // Whole means no side still misses txgs. A resilver that ended early (a scan cancel
    // reaches resilvers too) leaves a side's dirty time log behind: start it again.
    for _ in 0..HEAL_RESILVERS_MAX {
        drive_scan(pool, ScanFunction::Resilver)?;
        let missing = leaves_missing_txgs(pool);
        if missing.is_empty() {
            return scrub_finds_devices_whole(pool);
        }
        log::info!("{missing:?} still miss txgs after the resilver; resilvering again");
        pool.core.resilver_if_needed();
        pool.sync()?;
    }
    Err(OpError::Inconsistent(format!(
        "the vdevs are not whole after {HEAL_RESILVERS_MAX} resilvers"
    )))
}

/// The files of the leaves whose dirty time logs still hold txgs: writes they missed, which a
/// resilver has yet to copy.
pub(super) fn leaves_missing_txgs(pool: &Pool) -> Vec<String> {
    (pool.core.io.vdevs.leaves())
        .filter(|leaf| !leaf.dtl.is_empty())
        .map(|leaf| leaf.path.display().to_string())
        .collect()
}

/// Zero a vdev file whole, labels and all, as a disk swapped for a blank one, keeping its
/// size (a kill part-way leaves a partly blank disk, not a short one). The engine's own
/// handle stays open: it reads the zeros from now on.
pub(super) fn wipe_device(path: &str) -> Result<(), OpError> {
    use std::os::fd::AsRawFd;
    let wipe = || -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        let size = file.metadata()?.len() as libc::off_t;
        // SAFETY: fallocate(2) on a descriptor we own, with no pointers.
        let result = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                size,
            )
        };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
        file.sync_all()
    };
    wipe().map_err(|error| OpError::Inconsistent(format!("wiping {path}: {error}")))
}

/// Flush the side's device before its file is wiped: the wipe is a disk swapped for a blank
/// one, and the old disk's volatile cache goes with it. Under the power-cut model (see
/// `super::power`) a cut would otherwise put back, over the blank disk, what the old disk's
/// unflushed writes replaced. A side that is offline gets no writes between this and the wipe.
pub(super) fn flush_before_wipe(pool: &Pool, side: &Side) -> Result<(), OpError> {
    let leaf = (pool.core.io.vdevs.leaves()).find(|leaf| leaf.guid.0.to_string() == side.name);
    if let Some(leaf) = leaf {
        leaf.device
            .flush()
            .map_err(|error| OpError::Inconsistent(format!("flushing {}: {error}", side.path)))?;
    }
    Ok(())
}

/// The other name of a mirror side's file: a replace moves a side between the two.
pub(super) fn replacement_path(side: &str) -> PathBuf {
    match side.strip_suffix(REPLACED_SUFFIX) {
        Some(original) => PathBuf::from(original),
        None => PathBuf::from(format!("{side}{REPLACED_SUFFIX}")),
    }
}

/// Scrub the pool and require that no copy was bad: the resilver that [`heal_devices`] saw
/// through claimed to have made every mirror side and RAID-Z child whole, and a leaf still
/// missing a block (or a column) then is the engine's failure, caught here at the operation
/// that caused it rather than later, when another leaf is taken away and the block reads
/// from nowhere.
fn scrub_finds_devices_whole(pool: &Pool) -> Result<(), OpError> {
    let phys = run_scrub(pool)?;
    if phys.copies_bad > 0 || phys.errors > 0 || phys.unrepaired > 0 {
        return Err(OpError::Inconsistent(format!(
            "after the resilver made the vdevs whole, a scrub found {} bad copies ({} bytes repaired, {} unrepaired, {} errors)",
            phys.copies_bad, phys.repaired, phys.unrepaired, phys.errors
        )));
    }
    Ok(())
}

/// Run one whole scrub (after any scan in progress) and return what it found: a scrub that
/// started after this call and finished, so that it visited every block born before.
pub(super) fn run_scrub(pool: &Pool) -> Result<ScanPhys, OpError> {
    drive_scan(pool, ScanFunction::Scrub)?;
    cancel_paused_scrub(pool)?;
    if let Err(error) = pool.core.request_scrub() {
        return Err(OpError::Refused(format!("the scrub: {error}")));
    }
    drive_scan(pool, ScanFunction::Scrub)?;
    let Some(phys) = scan_phys(pool) else {
        return Err(OpError::Refused("the scrub left no status".into()));
    };
    if phys.function != ScanFunction::Scrub || phys.state != ScanState::Finished {
        return Err(OpError::Refused(format!(
            "the scrub did not finish: the last scan is a {} {:?}",
            phys.function.as_str(),
            phys.state
        )));
    }
    check_scrub_coverage(pool)?;
    Ok(phys)
}

/// Cancel a scrub paused by `ScrubPause`, so that a scrub requested next is a whole one: a
/// paused scrub does not run (and is not waited for), a request would resume it, and a
/// resumed scrub visits only what lies after its bookmark and was born before it started.
pub(super) fn cancel_paused_scrub(pool: &Pool) -> Result<(), OpError> {
    if scan_phys(pool).is_some_and(|phys| {
        phys.function == ScanFunction::Scrub && phys.state == ScanState::Scanning && phys.paused
    }) {
        scan_request(pool.core.request_scan_cancel())?;
        pool.sync()?;
    }
    Ok(())
}

/// The pool's last scan state, if it was ever scanned.
pub(super) fn scan_phys(pool: &Pool) -> Option<ScanPhys> {
    pool.core.scan_status().map(|status| status.phys)
}

/// Sync until no scan of `function` runs, a scan queued by a request included (the first
/// sync starts it). A scan paced by `scan_blocks_per_txg_max` (the seed's choice: see
/// `runner::SCAN_PACING`) would otherwise ride the txg timer, a second a txg, and the device
/// operation waiting for it would hold the devices lock for tens of seconds; driven, it still
/// spans tens of txgs, which is what pacing is for, and the other workers' operations land
/// between them. A paused scrub does not run and is not waited for.
pub(super) fn drive_scan(pool: &Pool, function: ScanFunction) -> Result<(), OpError> {
    loop {
        pool.sync()?;
        let running = scan_phys(pool).is_some_and(|phys| {
            phys.function == function && phys.state == ScanState::Scanning && !phys.paused
        });
        if !running {
            return Ok(());
        }
        std::thread::sleep(DRIVE_INTERVAL);
    }
}

/// The scrub's promise, checked directly: every block in the pool's trees now that was born
/// at or before the last scrub's last txg was verified by it. The engine records what a
/// scrub started in this process verifies (tunable `scan_record_visits`, which the tool's
/// pools turn on) and hands the record out once the scrub has finished, once; the trees are
/// walked whole (the MOS and every dataset record, snapshots and clones included) with syncs
/// paused, so that none of them is freed under the walk. A block alive now and born before
/// the scrub started was alive all through it (nothing freed comes back without a rewind,
/// which is another pool instance and another record), so a block missing from the record
/// is one the scrub skipped: what a snapshot destroyed under the scan caused before its
/// catch-up walk existed, found this way at once rather than only when a
/// damaged copy happened to be among the skipped blocks ([`super::damage`]). Every whole scrub
/// the tool drives to its end ([`run_scrub`]: the second scrub of a damage's settling, the
/// scrubs after a fault is cleared or a resilver made the mirror whole) and the scrub a
/// damage's settling finds already run beside the other workers are checked; the walk reads
/// what the scrub has just read, mostly from the cache, so it costs less than the scrub. A
/// scrub that met errors (a tree it could not walk) is judged by its error count elsewhere,
/// not here.
pub(super) fn check_scrub_coverage(pool: &Pool) -> Result<(), OpError> {
    let Some(phys) = scan_phys(pool) else {
        return Ok(());
    };
    if phys.errors > 0 {
        return Ok(());
    }
    let Some(visits) = pool.core.take_scrub_visits() else {
        return Ok(());
    };
    let _paused = pool.core.txgs.pause_syncs();
    let (checked, missed) = pool.core.scrub_unvisited(&visits)?;
    if !missed.is_empty() {
        log::error!(
            "scrub coverage: {} blocks missed: {}; the scrub's walks: {}",
            missed.len(),
            missed.join("; "),
            visits.events.join("; ")
        );
        return Err(OpError::Inconsistent(format!(
            "the scrub of txgs ..={} finished without visiting {} of the {checked} blocks born in them that the pool still holds (it verified {}), e.g. {}",
            visits.max_txg.0,
            missed.len(),
            visits.blocks.len(),
            missed.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        )));
    }
    log::info!(
        "scrub coverage: {checked} blocks of txgs ..={} all visited",
        visits.max_txg.0
    );
    Ok(())
}
