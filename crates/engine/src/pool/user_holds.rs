//! User holds and deferred destroy (OpenZFS dsl_userhold.c and `zfs destroy -d`): named,
//! durable claims on snapshots, as replication tools (zrepl, syncoid, sanoid) take on the
//! bases of their incremental sends.
//!
//! # What they do
//! `hold TAG FS@SNAP` puts tag `TAG` on a snapshot; while it has any tag, no destroy frees it
//! (the same refusal as a long hold's, [`PoolCore::destroy_refusal`]: destroying the snapshot,
//! its file system with `-r`, or rolling back past it). `release TAG FS@SNAP` takes the tag off.
//! `destroy -d FS@SNAP` destroys a snapshot that has neither holds nor clones at once, and
//! otherwise marks it *defer destroy*: it goes in the txg that releases its last hold, or that
//! destroys its last clone, whichever is later. With `-r` each verb applies to the snapshot of
//! the same name in every descendant that has one. Every verb is one namespace task per
//! snapshot, all in one txg: all or nothing, durable on return.
//!
//! # On disk
//! A snapshot's record (`dataset/phys.rs`) names its holds object at offset 256: a MOS
//! key/value object, key the tag (UTF-8, 1 to 255 bytes, no control characters), value the time
//! it was taken (u64 LE seconds). It is created with the first hold and removed with the last,
//! so a record names one only while the snapshot is held. The defer-destroy mark is record flag
//! bit 2. Both need feature `user_holds`, which counts the records that have either
//! ([`DatasetPhys::uses_user_holds`]): a count changes in the same sync task as the record.
//!
//! In memory there is nothing more: the record's copy in its [`Snapshot`] says whether a
//! snapshot is held, and the tags are read from the object when they are asked for (`holds`,
//! the refusal's message, `userrefs`).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::block::blkptr::{Compression, ObjectType};
use crate::dataset::phys::{DatasetPhys, DS_FLAG_DEFER_DESTROY};
use crate::dataset::snapshot::Snapshot;
use crate::dataset::Dataset;
use crate::object::adapters::{create_kv_object, kv_entries, kv_object_error, KvObject};
use crate::object::{kv, Tx};
use crate::types::ObjectId;

use super::admission::SpaceCheck;
use super::snapshots::NamespaceTask;
use super::{mos_props, Pool, PoolCore, PoolError, USER_HOLDS_FEATURE};

/// The longest tag, in bytes (OpenZFS's MAXNAMELEN less its terminator).
pub const MAX_TAG_LENGTH: usize = 255;

/// One user hold, as `tarn holds` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserHold {
    /// `POOL/FS@SNAP`.
    pub snapshot: String,
    pub tag: String,
    /// When it was taken, seconds since the Unix epoch.
    pub time: u64,
}

/// What `release` did: the snapshots it released, and those it destroyed because they were
/// marked for deferred destroy and this was their last hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseOutcome {
    pub released: Vec<String>,
    pub destroyed: Vec<String>,
}

/// What `destroy -d` did: the snapshots destroyed now, and those marked to go later.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeferredDestroyOutcome {
    pub destroyed: Vec<String>,
    pub deferred: Vec<String>,
}

/// A snapshot a verb acts on: its full name, its file system and itself.
type Target = (String, Arc<Dataset>, Arc<Snapshot>);

fn validate_tag(tag: &str) -> Result<(), PoolError> {
    let why = if tag.is_empty() {
        "a tag may not be empty"
    } else if tag.len() > MAX_TAG_LENGTH {
        "a tag is at most 255 bytes long"
    } else if tag.chars().any(char::is_control) {
        "a tag may not hold control characters"
    } else {
        return Ok(());
    };
    Err(PoolError::Refused(format!("invalid tag {tag:?}: {why}")))
}

impl PoolCore {
    /// The tags on a snapshot whose record is `phys`, with their times, by tag.
    fn hold_tags(&self, phys: &DatasetPhys) -> Result<Vec<(String, u64)>, PoolError> {
        let object = phys.user_holds_object;
        if object.0 == 0 {
            return Ok(Vec::new());
        }
        let mut tags = Vec::new();
        for entry in kv_entries(&self.mos, object)? {
            let time: [u8; 8] = entry.value.as_slice().try_into().map_err(|_| {
                PoolError::Corrupt(format!(
                    "user holds object {object}: a value of {} bytes",
                    entry.value.len()
                ))
            })?;
            tags.push((
                String::from_utf8_lossy(&entry.key).into_owned(),
                u64::from_le_bytes(time),
            ));
        }
        tags.sort();
        Ok(tags)
    }

    /// The number of user holds on `snapshot` (`userrefs`). An unreadable holds object is
    /// logged and counts as one: the object exists only while a hold does.
    pub(super) fn user_refs(&self, snapshot: &Snapshot) -> u64 {
        let phys = snapshot.phys();
        match self.hold_tags(&phys) {
            Ok(tags) => tags.len() as u64,
            Err(error) => {
                log::error!(
                    "pool {}: the user holds of snapshot {} cannot be read: {error}",
                    self.name,
                    snapshot.short_name()
                );
                1
            }
        }
    }

    /// Why snapshot `full` must not be destroyed because of its user holds, if it has any.
    pub(super) fn user_hold_refusal(&self, full: &str, snapshot: &Snapshot) -> Option<String> {
        let phys = snapshot.phys();
        if phys.user_holds_object.0 == 0 {
            return None;
        }
        let tags = match self.hold_tags(&phys) {
            Ok(tags) => tags
                .into_iter()
                .map(|(tag, _)| tag)
                .collect::<Vec<_>>()
                .join(", "),
            Err(error) => format!("(unreadable: {error})"),
        };
        Some(format!(
            "snapshot {full} is held ({tags}); release its holds (tarn release TAG {full}) or \
             destroy it with -d to have it go with its last hold"
        ))
    }

    /// The snapshots `names` (`FS@SNAP` each) name, and with `recursive` the snapshot of the
    /// same name in every descendant that has one, each once, in the order named. A name
    /// given must exist.
    fn hold_targets(&self, names: &[String], recursive: bool) -> Result<Vec<Target>, PoolError> {
        let mut seen = BTreeSet::new();
        let mut targets = Vec::new();
        for full in names {
            let (head, snapshot) = self.snapshot_by_name(full)?;
            let mut found = vec![(full.clone(), head, snapshot)];
            if recursive {
                let (file_system, short) = full.split_once('@').expect("a snapshot name");
                for relative in self.descendants_of(self.relative_name(file_system)?) {
                    let head = self.dataset_by_relative(&relative)?;
                    if let Some(snapshot) = head.snapshot(short) {
                        found.push((format!("{}@{short}", head.name()), head, snapshot));
                    }
                }
            }
            for target in found {
                if seen.insert(target.2.object) {
                    targets.push(target);
                }
            }
        }
        Ok(targets)
    }

    /// Whether a snapshot marked for deferred destroy can go now, given the tags it will have
    /// left: none, no clones, and no long hold (a send reading it).
    fn deferred_destroy_due(&self, snapshot: &Snapshot, tags_left: usize) -> bool {
        let phys = snapshot.phys();
        phys.is_defer_destroy()
            && tags_left == 0
            && phys.clone_count == 0
            && self.long_hold_refusal("", snapshot).is_none()
    }

    /// Open context, namespace lock held: the destroys due for the origins of clones just
    /// destroyed (`origins`, each with its file system) that were marked for deferred destroy
    /// and have no holds left. Returns the tasks and the names they destroy.
    pub(super) fn deferred_origin_destroys(
        &self,
        origins: Vec<(Arc<Dataset>, Arc<Snapshot>)>,
    ) -> (Vec<NamespaceTask>, Vec<String>) {
        let mut tasks = Vec::new();
        let mut names = Vec::new();
        let mut seen = BTreeSet::new();
        for (head, snapshot) in origins {
            if snapshot.is_destroyed()
                || !seen.insert(snapshot.object)
                || snapshot.phys().user_holds_object.0 != 0
                || !self.deferred_destroy_due(&snapshot, 0)
            {
                continue;
            }
            names.push(format!("{}@{}", head.name(), snapshot.short_name()));
            tasks.push(NamespaceTask::Destroy { head, snapshot });
        }
        (tasks, names)
    }

    /// Refuse a verb that would start using feature `user_holds` on a pool without it.
    fn require_user_holds(&self, what: &str) -> Result<(), PoolError> {
        self.require_feature(
            USER_HOLDS_FEATURE,
            &format!("cannot {what}"),
            PoolError::Refused,
        )
    }

    /// Syncing context: a record change of `snapshot` that may start or stop its use of
    /// feature `user_holds`; writes the record and moves the count.
    fn write_hold_record(
        &self,
        snapshot: &Snapshot,
        change: impl FnOnce(&mut DatasetPhys),
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let used_before = snapshot.phys().uses_user_holds();
        let phys = snapshot.update_phys(change);
        self.write_dataset_record(tx, snapshot.object, &phys)?;
        match (used_before, phys.uses_user_holds()) {
            (false, true) => self.feature_increment(USER_HOLDS_FEATURE),
            (true, false) => self.feature_decrement(USER_HOLDS_FEATURE),
            _ => Ok(()),
        }
    }

    /// Syncing context: put `tag`, taken at `time`, on `snapshot`.
    pub(super) fn sync_hold(
        &self,
        snapshot: &Snapshot,
        tag: &str,
        time: u64,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let mut object = snapshot.phys().user_holds_object;
        if object.0 == 0 {
            object = create_kv_object(
                &self.mos,
                tx,
                mos_props(ObjectType::KeyValue, 4096, &self.tunables, Compression::Lz4),
            )?;
            self.write_hold_record(snapshot, |phys| phys.user_holds_object = object, tx)?;
        }
        let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
        kv::insert(&mut handle, tag.as_bytes(), &time.to_le_bytes())
            .map_err(kv_object_error(object))?;
        Ok(())
    }

    /// Syncing context: take `tag` off `snapshot`; the holds object goes with its last tag.
    pub(super) fn sync_release(
        &self,
        snapshot: &Snapshot,
        tag: &str,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let object = snapshot.phys().user_holds_object;
        if object.0 == 0 {
            return Err(PoolError::Corrupt(format!(
                "snapshot {}: a release with no holds object",
                snapshot.short_name()
            )));
        }
        let empty = {
            let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
            if !kv::remove(&mut handle, tag.as_bytes()).map_err(kv_object_error(object))? {
                return Err(PoolError::Corrupt(format!(
                    "snapshot {}: tag {tag:?} is missing from its holds object",
                    snapshot.short_name()
                )));
            }
            kv::list(&handle, 0, 1)
                .map_err(kv_object_error(object))?
                .is_empty()
        };
        if empty {
            self.mos.remove_object(tx, object)?;
            self.write_hold_record(snapshot, |phys| phys.user_holds_object = ObjectId(0), tx)?;
        }
        Ok(())
    }

    /// Syncing context: mark `snapshot` for deferred destroy.
    pub(super) fn sync_defer_destroy(&self, snapshot: &Snapshot, tx: &Tx) -> Result<(), PoolError> {
        self.write_hold_record(snapshot, |phys| phys.flags |= DS_FLAG_DEFER_DESTROY, tx)
    }

    /// Syncing context, in a snapshot's destroy before its record goes: its holds object (none
    /// unless the whole file system goes, which refuses held snapshots first) and its share of
    /// the feature count.
    pub(super) fn sync_forget_holds(&self, snapshot: &Snapshot, tx: &Tx) -> Result<(), PoolError> {
        let phys = snapshot.phys();
        if phys.user_holds_object.0 != 0 {
            self.mos.remove_object(tx, phys.user_holds_object)?;
        }
        if phys.uses_user_holds() {
            self.feature_decrement(USER_HOLDS_FEATURE)?;
        }
        Ok(())
    }
}

impl Pool {
    /// Put hold `tag` on each snapshot of `names` (and with `recursive`, on the snapshot of
    /// the same name in every descendant). All or nothing: a snapshot that already has the tag
    /// refuses the whole request. Returns the snapshots held. Durable on return.
    pub fn hold(
        &self,
        tag: &str,
        names: &[String],
        recursive: bool,
    ) -> Result<Vec<String>, PoolError> {
        self.writable()?;
        validate_tag(tag)?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        core.require_user_holds(&format!("hold {}", names.join(" ")))?;
        let targets = core.hold_targets(names, recursive)?;
        for (full, _, snapshot) in &targets {
            if core
                .hold_tags(&snapshot.phys())?
                .iter()
                .any(|(existing, _)| existing == tag)
            {
                return Err(PoolError::Refused(format!(
                    "cannot hold snapshot {full}: tag {tag} already exists on it"
                )));
            }
        }
        core.check_space(
            SpaceCheck::Reserved,
            targets.len(),
            &format!("hold {}", names.join(" ")),
        )?;
        let time = super::now_seconds();
        let held = targets.iter().map(|(full, ..)| full.clone()).collect();
        core.run_tasks(
            targets
                .into_iter()
                .map(|(_, _, snapshot)| NamespaceTask::Hold {
                    snapshot,
                    tag: tag.to_string(),
                    time,
                })
                .collect(),
        )?;
        Ok(held)
    }

    /// Take hold `tag` off each snapshot of `names` (and with `recursive`, off the snapshot of
    /// the same name in every descendant), and destroy, in the same txg, each one marked for
    /// deferred destroy that this leaves without holds or clones. All or nothing: a snapshot
    /// without the tag refuses the whole request. Durable on return.
    pub fn release(
        &self,
        tag: &str,
        names: &[String],
        recursive: bool,
    ) -> Result<ReleaseOutcome, PoolError> {
        self.writable()?;
        validate_tag(tag)?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let targets = core.hold_targets(names, recursive)?;
        let mut tasks = Vec::new();
        let mut destroys = Vec::new();
        let mut outcome = ReleaseOutcome::default();
        for (full, head, snapshot) in targets {
            let tags = core.hold_tags(&snapshot.phys())?;
            if !tags.iter().any(|(existing, _)| existing == tag) {
                return Err(PoolError::Refused(format!(
                    "cannot release hold {tag} from snapshot {full}: no such tag on it"
                )));
            }
            if core.deferred_destroy_due(&snapshot, tags.len() - 1) {
                outcome.destroyed.push(full.clone());
                destroys.push(NamespaceTask::Destroy {
                    head,
                    snapshot: snapshot.clone(),
                });
            }
            outcome.released.push(full);
            tasks.push(NamespaceTask::Release {
                snapshot,
                tag: tag.to_string(),
            });
        }
        // Every release first, then the destroys: a destroy finds its record without holds.
        tasks.extend(destroys);
        core.run_tasks(tasks)?;
        Ok(outcome)
    }

    /// The user holds of each snapshot of `names` (and with `recursive`, of the snapshot of the
    /// same name in every descendant), by snapshot as named, then by tag.
    pub fn holds(&self, names: &[String], recursive: bool) -> Result<Vec<UserHold>, PoolError> {
        let core = &self.core;
        let targets = {
            let _namespace = core.namespace.lock();
            core.hold_targets(names, recursive)?
        };
        let mut holds = Vec::new();
        for (full, _, snapshot) in targets {
            for (tag, time) in core.hold_tags(&snapshot.phys())? {
                holds.push(UserHold {
                    snapshot: full.clone(),
                    tag,
                    time,
                });
            }
        }
        Ok(holds)
    }

    /// `destroy -d SPEC` (the forms of [`Pool::snapshots_to_destroy`]): destroy each snapshot
    /// named that has neither user holds nor clones, and mark the others to go with their last
    /// hold and clone, all in one txg. A snapshot being read (a send) is refused, as by a plain
    /// destroy. With `dry_run`, says what it would do and changes nothing. Durable on return.
    pub fn destroy_snapshots_deferred(
        &self,
        spec: &str,
        recursive: bool,
        dry_run: bool,
    ) -> Result<DeferredDestroyOutcome, PoolError> {
        self.writable()?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let names = self.snapshots_to_destroy(spec, recursive)?;
        let mut tasks = Vec::new();
        let mut outcome = DeferredDestroyOutcome::default();
        for name in names {
            let (head, snapshot) = core.snapshot_by_name(&name)?;
            if head.unavailable().is_some() {
                return Err(PoolError::DatasetUnavailable(
                    head.name().clone(),
                    "its object set cannot be read".into(),
                ));
            }
            if let Some(why) = core.long_hold_refusal(&name, &snapshot) {
                return Err(PoolError::DatasetBusy(name, why));
            }
            let phys = snapshot.phys();
            if phys.user_holds_object.0 == 0 && phys.clone_count == 0 {
                outcome.destroyed.push(name);
                tasks.push(NamespaceTask::Destroy { head, snapshot });
            } else {
                core.require_user_holds(&format!("defer the destroy of {name}"))?;
                outcome.deferred.push(name);
                if !phys.is_defer_destroy() {
                    tasks.push(NamespaceTask::DeferDestroy { snapshot });
                }
            }
        }
        if !tasks.is_empty() && !dry_run {
            core.run_tasks(tasks)?;
        }
        Ok(outcome)
    }
}
