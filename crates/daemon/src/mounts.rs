//! The daemon's mounted file systems: where each dataset mounts, mounting and unmounting in
//! the right order, and keeping mounted file systems in line with their properties.
//!
//! # Where a dataset mounts
//! By its properties (see `tarn::dataset::props`): `mountpoint` (a path, inherited with the
//! child's names appended; `none` and `legacy` mean "not by tarn"), `canmount` (`on`: mounted
//! at import, create and `mount -a`; `noauto`: only by an explicit `tarn mount FS`; `off`:
//! never), under the pool's altroot (`-R`, remembered here for as long as the pool is
//! imported, never stored). `readonly=on` mounts read-only.
//!
//! # Order
//! Parents mount before children (a child's mountpoint is usually inside its parent's mount,
//! and the directory is created through the parent's mount). Unmounting goes the other way:
//! deepest mountpoint first, so no parent is busy because a child is mounted inside it.
//!
//! # Changes behind a mount's back
//! `snapdir` applies at once (`.zfs` appears in or leaves the root's listing). A rollback
//! resets a mounted file system in place, and destroying or renaming snapshots changes what
//! `.zfs/snapshot` holds: the daemon's handlers call [`Mounts::write_back`] before (the kernel's
//! writeback cache holds writes that have returned) and [`Mounts::after_rollback`] and
//! [`Mounts::snapshots_changed`] afterwards, which drop what the adapter and the kernel cached
//! (`tarn_fuse::MountControl`). Both only log what fails: the change itself is done and
//! durable by then.
//!
//! # Locking
//! The table's mutex is held only around map changes, never across a mount, an unmount or an
//! engine call: a FUSE request served by this daemon may be needed to finish any of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tarn::{FileSystem, Pool, Property, SyncMode};
use tarn_fuse::{mountpoint, MountControl, MountHandle, MountOptions};
use tarn_protocol::error::Failure;

use super::snapdir::PoolSnapshots;

/// One mounted file system.
struct Mounted {
    handle: MountHandle,
    fs: Arc<FileSystem>,
    control: Option<MountControl>,
}

/// Every file system this daemon has mounted, by dataset name, and the pools' altroots.
#[derive(Default)]
pub struct Mounts {
    table: Mutex<BTreeMap<String, Mounted>>,
    altroots: Mutex<BTreeMap<String, PathBuf>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `name` is `ancestor` or below it.
fn is_within(name: &str, ancestor: &str) -> bool {
    name == ancestor
        || name
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `path` under `altroot` (both absolute).
fn under_altroot(path: &Path, altroot: Option<&Path>) -> PathBuf {
    match altroot {
        None => path.to_path_buf(),
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
    }
}

/// Whether `dataset` lists `.zfs` in its root (snapdir=visible).
fn snapdir_visible(pool: &Pool, dataset: &str) -> Result<bool, Failure> {
    Ok(pool.property(dataset, Property::Snapdir)?.0 == "visible")
}

/// How a dataset asks to be mounted.
pub enum Placement {
    /// Mount at this path (altroot applied); `automatic` is false for canmount=noauto.
    At { path: PathBuf, automatic: bool },
    /// Not mounted by tarn, and why.
    Never(String),
}

impl Mounts {
    pub fn set_altroot(&self, pool: &str, altroot: Option<PathBuf>) {
        let mut altroots = lock(&self.altroots);
        match altroot {
            Some(path) => altroots.insert(pool.to_string(), path),
            None => altroots.remove(pool),
        };
    }

    pub fn altroot(&self, pool: &str) -> Option<PathBuf> {
        lock(&self.altroots).get(pool).cloned()
    }

    /// Where `dataset` mounts, by its properties.
    pub fn placement(&self, pool: &Pool, dataset: &str) -> Result<Placement, Failure> {
        let (canmount, _) = pool.property(dataset, Property::Canmount)?;
        let (mountpoint, _) = pool.property(dataset, Property::Mountpoint)?;
        if canmount == "off" {
            return Ok(Placement::Never(format!("{dataset} has canmount=off")));
        }
        if !mountpoint.starts_with('/') {
            return Ok(Placement::Never(format!(
                "{dataset} has mountpoint={mountpoint}"
            )));
        }
        Ok(Placement::At {
            path: under_altroot(Path::new(&mountpoint), self.altroot(pool.name()).as_deref()),
            automatic: canmount == "on",
        })
    }

    /// Mount one dataset at `target`: detach a dead mount left there by a crashed daemon,
    /// create the directory if missing, refuse a taken one.
    pub fn mount(&self, pool: &Pool, dataset: &str, target: &Path) -> Result<(), Failure> {
        if let Some(existing) = self.mountpoint_of(dataset) {
            return Err(Failure(format!(
                "{dataset} is already mounted at {}",
                existing.display()
            )));
        }
        mountpoint::prepare(target)
            .map_err(|why| Failure(format!("cannot mount {dataset}: {why}")))?;
        // A pool imported read-only (readonly=on, e.g. to copy data off a damaged pool) mounts
        // every file system read-only: no log replay, no unlinked-set drain, no atime.
        let fs = Arc::new(if pool.is_readonly() {
            pool.read_only_file_system(pool.dataset_objset(dataset)?)?
        } else {
            pool.open_file_system(dataset)?
        });
        let mut options = MountOptions::new(format!("tarn:{dataset}"));
        options.read_only =
            pool.is_readonly() || pool.property(dataset, Property::Readonly)?.0 == "on";
        options.snapdir_visible = snapdir_visible(pool, dataset)?;
        let handle = tarn_fuse::mount_with_snapshots(
            fs.clone(),
            Arc::new(PoolSnapshots::new(pool, dataset)),
            target,
            &options,
        )
        .map_err(|error| {
            Failure(format!(
                "cannot mount {dataset} at {}: {error}",
                target.display()
            ))
        })?;
        out!("mounted {dataset} at {}", target.display());
        let control = handle.control();
        lock(&self.table).insert(
            dataset.to_string(),
            Mounted {
                handle,
                fs,
                control,
            },
        );
        Ok(())
    }

    /// The controls of the mounted datasets `wanted` selects (taken out of the table, so that
    /// no lock is held while they run).
    fn controls(&self, wanted: impl Fn(&str) -> bool) -> Vec<(String, MountControl)> {
        lock(&self.table)
            .iter()
            .filter(|(name, _)| wanted(name))
            .filter_map(|(name, mounted)| Some((name.clone(), mounted.control.clone()?)))
            .collect()
    }

    /// Call after snapshots of `dataset` or below were destroyed, renamed or created (give
    /// the top file system of a recursive request): each mount there forgets the snapshots
    /// that are gone (their inodes give ESTALE from now on, and no read reaches their freed
    /// blocks through a cached handle) and has the kernel drop `.zfs/snapshot`'s cached
    /// names. Failures are logged, never returned: the snapshots have changed regardless.
    pub fn snapshots_changed(&self, dataset: &str) {
        for (name, control) in self.controls(|name| is_within(name, dataset)) {
            match control.snapshots_changed() {
                Ok(done) => log::debug!("{name}: snapshots changed: {done:?}"),
                Err(error) => log::warn!("{name}: cannot refresh .zfs/snapshot: {error}"),
            }
        }
    }

    /// Call before a snapshot, rollback, receive or pool sync of `dataset` or below: each
    /// mount there has the kernel write its dirty pages back (the writeback cache holds
    /// write(2)s that have returned), so the engine has them first. Failures are logged: the
    /// operation goes on with what the engine has.
    pub fn write_back(&self, dataset: &str) {
        let controls = self.controls(|name| is_within(name, dataset));
        let each: Vec<&MountControl> = controls.iter().map(|(_, control)| control).collect();
        let results = MountControl::write_back_together(&each);
        for ((name, _), result) in controls.iter().zip(results) {
            if let Err(error) = result {
                log::warn!("{name}: cannot write back the kernel's cached writes: {error}");
            }
        }
    }

    /// Call after `dataset` was rolled back (with or without -r): if it is mounted, the
    /// kernel drops every attribute, page and name it cached of it, so the mount and its open
    /// files show the snapshot's state at once; snapshots destroyed by -r leave
    /// `.zfs/snapshot` as [`Mounts::snapshots_changed`] does. Failures are logged.
    pub fn after_rollback(&self, dataset: &str) {
        for (name, control) in self.controls(|name| name == dataset) {
            match control.rolled_back() {
                Ok(done) => log::info!("{name}: rolled back; kernel cache invalidated: {done:?}"),
                Err(error) => log::warn!("{name}: after the rollback: {error}"),
            }
        }
    }

    /// Mount every dataset of `pool` (or below `within`) that mounts automatically and is not
    /// mounted yet, parents first. Returns the failures (each also printed); the others are
    /// mounted regardless.
    pub fn mount_all(&self, pool: &Pool, within: Option<&str>) -> Vec<(String, Failure)> {
        self.mount_tree(pool, within, &[])
    }

    /// [`Mounts::mount_all`], and also the datasets named in `also` that mount only when asked
    /// (canmount=noauto): after their tree was unmounted for a change, what was mounted comes
    /// back. Mounts go in mountpoint order, so a parent's mount is in place before a child's
    /// mountpoint directory is made inside it (a child mounted first would leave the parent's
    /// mountpoint not empty).
    fn mount_tree(
        &self,
        pool: &Pool,
        within: Option<&str>,
        also: &[String],
    ) -> Vec<(String, Failure)> {
        let mut failures = Vec::new();
        let mut wanted = Vec::new();
        for info in pool.datasets() {
            // A partial receive kept for resuming is no file system yet.
            if within.is_some_and(|ancestor| !is_within(&info.name, ancestor))
                || self.mountpoint_of(&info.name).is_some()
                || pool.is_inconsistent(&info.name).unwrap_or(false)
            {
                continue;
            }
            match self.placement(pool, &info.name) {
                Ok(Placement::At { path, automatic }) if automatic || also.contains(&info.name) => {
                    wanted.push((path, info.name))
                }
                Ok(_) => {}
                Err(failure) => {
                    err!("{}", failure.0);
                    failures.push((info.name, failure));
                }
            }
        }
        // Paths compare component by component: a directory sorts before everything below it.
        wanted.sort();
        for (path, name) in wanted {
            if let Err(failure) = self.mount(pool, &name, &path) {
                err!("{}", failure.0);
                failures.push((name, failure));
            }
        }
        failures
    }

    /// Where `dataset` is mounted, if it is.
    pub fn mountpoint_of(&self, dataset: &str) -> Option<PathBuf> {
        lock(&self.table)
            .get(dataset)
            .map(|mounted| mounted.handle.mountpoint().to_path_buf())
    }

    /// The dataset mounted at `path`, or `target` itself when it names a mounted dataset.
    pub fn resolve(&self, target: &str) -> Option<String> {
        let table = lock(&self.table);
        if table.contains_key(target) {
            return Some(target.to_string());
        }
        let wanted: PathBuf = Path::new(target).components().collect();
        table
            .iter()
            .find(|(_, mounted)| mounted.handle.mountpoint() == wanted)
            .map(|(name, _)| name.clone())
    }

    /// The mounted file systems of `ancestor` and below it (a pool's: its name).
    pub fn file_systems_within(&self, ancestor: &str) -> Vec<Arc<FileSystem>> {
        lock(&self.table)
            .iter()
            .filter(|(name, _)| is_within(name, ancestor))
            .map(|(_, mounted)| mounted.fs.clone())
            .collect()
    }

    /// Every mount: (dataset, mountpoint), by dataset name.
    pub fn list(&self) -> Vec<(String, PathBuf)> {
        lock(&self.table)
            .iter()
            .map(|(name, mounted)| (name.clone(), mounted.handle.mountpoint().to_path_buf()))
            .collect()
    }

    /// Each mount's transport (`uring` or `dev`, and why not the ring), by dataset.
    pub fn transports(&self) -> BTreeMap<String, tarn_fuse::TransportState> {
        lock(&self.table)
            .iter()
            .map(|(name, mounted)| (name.clone(), mounted.handle.transport()))
            .collect()
    }

    /// Unmount `dataset` and every mounted dataset below it, deepest mountpoint first, and
    /// return their names. Plain unmounts fail with EBUSY while in use; `force` unmounts
    /// lazily. All or nothing: when one fails, those unmounted before it are mounted again
    /// where they were, so a refused destroy, rename or export leaves the tree as it found it.
    pub fn unmount_within(
        &self,
        pool: &Pool,
        ancestor: &str,
        force: bool,
    ) -> Result<Vec<String>, Failure> {
        let mut doomed: Vec<(String, PathBuf)> = self
            .list()
            .into_iter()
            .filter(|(name, _)| is_within(name, ancestor))
            .collect();
        doomed.sort_by_key(|(_, path)| std::cmp::Reverse(path.components().count()));
        let mut done: Vec<(String, PathBuf)> = Vec::new();
        for (name, path) in doomed {
            if let Err(failure) = self.unmount(&name, force) {
                for (name, path) in done.iter().rev() {
                    if let Err(again) = self.mount(pool, name, path) {
                        err!("{}", again.0);
                    }
                }
                return Err(failure);
            }
            done.push((name, path));
        }
        Ok(done.into_iter().map(|(name, _)| name).collect())
    }

    /// Unmount the tree at `ancestor` for a change that moves it (a rename, a new mountpoint)
    /// or remounts it (readonly), make the change, and mount again below `after` (`ancestor`'s
    /// name once the change is made: the new name of a rename) what was mounted (renamed by
    /// `rename`) and what now mounts automatically, parents first. When the change fails, the
    /// tree comes back as it was. Returns the change's result and the mounts that failed.
    pub fn remount_tree<T>(
        &self,
        pool: &Pool,
        ancestor: &str,
        change: impl FnOnce() -> Result<T, Failure>,
        after: &str,
    ) -> Result<(T, Vec<(String, Failure)>), Failure> {
        let was_mounted = self.unmount_within(pool, ancestor, false)?;
        let result = change();
        let (within, names): (&str, Vec<String>) = match &result {
            Ok(_) => (
                after,
                was_mounted
                    .iter()
                    .map(|name| format!("{after}{}", &name[ancestor.len()..]))
                    .collect(),
            ),
            Err(_) => (ancestor, was_mounted),
        };
        let failures = self.mount_tree(pool, Some(within), &names);
        Ok((result?, failures))
    }

    /// Unmount one dataset.
    pub fn unmount(&self, dataset: &str, force: bool) -> Result<(), Failure> {
        let Some(mut mounted) = lock(&self.table).remove(dataset) else {
            return Err(Failure(format!("{dataset} is not mounted")));
        };
        let path = mounted.handle.mountpoint().display().to_string();
        match mounted.handle.unmount(force) {
            Ok(()) => {
                out!("unmounted {path}");
                Ok(())
            }
            Err(error) => {
                lock(&self.table).insert(dataset.to_string(), mounted);
                if error.raw_os_error() == Some(libc::EBUSY) {
                    Err(Failure(format!(
                        "cannot unmount {path}: it is busy (a file is open or a process works \
                         inside); close it, or use -f to unmount lazily"
                    )))
                } else {
                    Err(Failure(format!("cannot unmount {path}: {error}")))
                }
            }
        }
    }

    /// After a property change: bring mounted file systems at or below `dataset` in line
    /// (object properties, atime), and when the change decides where or how they mount,
    /// unmount and mount them again.
    pub fn apply_change(
        &self,
        pool: &Pool,
        dataset: &str,
        property: Property,
    ) -> Result<(), Failure> {
        let remount = matches!(
            property,
            Property::Mountpoint | Property::Canmount | Property::Readonly | Property::Acltype
        );
        if !remount {
            let mounted: Vec<(String, Arc<FileSystem>, Option<MountControl>)> = lock(&self.table)
                .iter()
                .filter(|(name, _)| is_within(name, dataset))
                .map(|(name, mounted)| (name.clone(), mounted.fs.clone(), mounted.control.clone()))
                .collect();
            for (name, fs, control) in mounted {
                pool.apply_properties(&name, &fs)?;
                if let Some(control) = control {
                    control.set_snapdir_visible(snapdir_visible(pool, &name)?);
                    // sync=always: files opened from now on bypass the kernel's page cache
                    // (the adapter's `open_flags`); what the kernel holds already is written
                    // back and synced now.
                    if property == Property::Sync && fs.sync_mode() == SyncMode::Always {
                        if let Err(error) = control.write_back() {
                            log::warn!(
                                "{name}: cannot write the mount's cached pages back: {error}"
                            );
                        }
                        pool.sync()?;
                    }
                }
            }
            return Ok(());
        }
        // canmount=on or noauto leaves a mounted file system mounted and mounts nothing (as
        // zfs: `mount -a` mounts what canmount=on asks for); only off unmounts.
        if property == Property::Canmount && pool.property(dataset, Property::Canmount)?.0 != "off"
        {
            return Ok(());
        }
        // What was mounted comes back where its properties now say (explicitly mounted
        // noauto file systems included); what was not mounted and now should be, mounts too.
        let ((), failures) = self.remount_tree(pool, dataset, || Ok(()), dataset)?;
        match failures.into_iter().next() {
            Some((_, failure)) => Err(failure),
            None => Ok(()),
        }
    }

    /// Forget a pool that is no longer imported.
    pub fn forget_pool(&self, pool: &str) {
        lock(&self.altroots).remove(pool);
    }
}

/// A mountpoint as shown: the property's path under the pool's altroot, or none/legacy.
pub fn shown_mountpoint(pool: &Pool, mounts: &Mounts, name: &str) -> Result<String, Failure> {
    Ok(match mounts.placement(pool, name)? {
        Placement::At { path, .. } => path.display().to_string(),
        Placement::Never(_) => {
            let (value, _) = pool.property(name, Property::Mountpoint)?;
            if value.starts_with('/') {
                // canmount=off: still shown where it would mount.
                match mounts.altroot(pool.name()) {
                    Some(root) => root
                        .join(value.trim_start_matches('/'))
                        .display()
                        .to_string(),
                    None => value,
                }
            } else {
                value
            }
        }
    })
}

#[cfg(test)]
mod tests {
    //! The daemon's snapshot hooks on a real mount (the CLI verbs that call them land
    //! separately): `.zfs/snapshot` fed by `PoolSnapshots`, `after_rollback`,
    //! `snapshots_changed`, and snapdir applied to a mounted file system.

    use std::fs;
    use std::os::unix::fs::MetadataExt;

    use tarn::tunables::Tunables;
    use tarn::{CreateOptions, VdevSpec};

    use super::*;

    fn listed(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn snapshot_hooks_keep_a_mount_in_line() {
        if !tarn_test_support::requires(&[tarn_test_support::Requirement::Fuse]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::create(CreateOptions {
            name: "hooks".into(),
            log: Vec::new(),
            cache: Vec::new(),
            vdevs: vec![VdevSpec::Leaf(dir.path().join("disk0"))],
            create_size: Some(256 << 20),
            force: false,
            tunables: Tunables::default(),
            wrap_device: None,
            disabled_features: Vec::new(),
        })
        .unwrap();
        pool.create_dataset("hooks/fs", &[], false).unwrap();
        let mounts = Mounts::default();
        let target = dir.path().join("mnt");
        if let Err(failure) = mounts.mount(&pool, "hooks/fs", &target) {
            panic!("mount: {}", failure.0);
        }
        let path = |relative: &str| target.join(relative);
        fs::write(path("a"), b"one").unwrap();
        pool.create_snapshots(&["hooks/fs@s1".to_string()], false)
            .unwrap();
        fs::write(path("a"), b"two").unwrap();
        fs::write(path("b"), b"new").unwrap();
        assert_eq!(listed(&path(".zfs/snapshot")), vec!["s1"]);
        assert_eq!(fs::read(path(".zfs/snapshot/s1/a")).unwrap(), b"one");
        let snapshot_ino = fs::metadata(path(".zfs/snapshot/s1/a")).unwrap().ino();
        assert_ne!(snapshot_ino, fs::metadata(path("a")).unwrap().ino());

        // snapdir, set on the parent, reaches the mounted child at once.
        assert!(!listed(&target).contains(&".zfs".to_string()));
        pool.set_property("hooks", "snapdir", Some("visible"))
            .unwrap();
        if let Err(failure) = mounts.apply_change(&pool, "hooks", Property::Snapdir) {
            panic!("apply_change: {}", failure.0);
        }
        assert_eq!(listed(&target), vec![".zfs", "a", "b"]);

        // Rollback: seen at once.
        assert_eq!(fs::read(path("a")).unwrap(), b"two");
        pool.rollback("hooks/fs@s1", false).unwrap();
        mounts.after_rollback("hooks/fs");
        assert_eq!(fs::read(path("a")).unwrap(), b"one");
        assert!(fs::metadata(path("b")).is_err());

        // Rename and destroy leave `.zfs/snapshot` at once.
        pool.rename_snapshot("hooks/fs@s1", "renamed").unwrap();
        mounts.snapshots_changed("hooks");
        assert_eq!(listed(&path(".zfs/snapshot")), vec!["renamed"]);
        assert!(fs::metadata(path(".zfs/snapshot/s1")).is_err());
        assert_eq!(
            fs::metadata(path(".zfs/snapshot/renamed/a")).unwrap().ino(),
            snapshot_ino
        );
        pool.destroy_snapshots("hooks/fs@renamed", false).unwrap();
        mounts.snapshots_changed("hooks/fs");
        assert!(listed(&path(".zfs/snapshot")).is_empty());
        assert!(fs::metadata(path(".zfs/snapshot/renamed")).is_err());

        let mut attempts = 0;
        while let Err(failure) = mounts.unmount("hooks/fs", false) {
            attempts += 1;
            assert!(attempts < 50, "{}", failure.0);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        pool.export().unwrap();
    }
}
