//! Bookmarks (OpenZFS dsl_bookmark.c): `FS#NAME` remembers a snapshot's guid, creation txg and
//! time, so that an incremental stream can be sent from it after the snapshot is destroyed (the
//! receiver still has the snapshot; the sender only needs to know which blocks are newer).
//!
//! # On disk
//! One MOS key/value object, named by the MOS directory entry `bookmarks` (created with the
//! first bookmark). Key: the head dataset's record object number in decimal, `#`, the bookmark's
//! name (so a rename of the file system changes nothing); value, 24 bytes: guid u64, creation
//! txg u64, creation time u64 (little-endian). Destroying a file system removes its bookmarks.
//!
//! # Tasks
//! Creating and destroying a bookmark are namespace tasks, run in syncing context like a
//! snapshot's ([`super::snapshots`]): durable when the call returns.

use std::sync::Arc;

use crate::dataset::props::validate_name_component;
use crate::dataset::Dataset;
use crate::object::adapters::{kv_entries, kv_object_error, KvObject};
use crate::object::{kv, Tx};
use crate::types::ObjectId;

use super::snapshots::NamespaceTask;
use super::{
    kv_create, kv_set_u64, lookup_mos_directory, Pool, PoolCore, PoolError, MOS_OBJECT_DIRECTORY,
};

/// The MOS directory entry naming the bookmarks object.
pub const BOOKMARKS_KEY: &str = "bookmarks";
const VALUE_SIZE: usize = 24;

/// A bookmark as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookmarkInfo {
    /// `POOL/FS#NAME`.
    pub name: String,
    pub guid: u64,
    pub creation_txg: u64,
    pub creation_time: u64,
}

fn key(head: ObjectId, name: &str) -> String {
    format!("{}#{name}", head.0)
}

fn split_bookmark_name(full: &str) -> Result<(&str, &str), PoolError> {
    let Some((file_system, name)) = full.split_once('#') else {
        return Err(PoolError::BadDatasetName(
            full.into(),
            "a bookmark name has the form FILESYSTEM#BOOKMARK".into(),
        ));
    };
    validate_name_component(name).map_err(|why| PoolError::BadDatasetName(full.into(), why))?;
    Ok((file_system, name))
}

impl PoolCore {
    fn bookmarks_object(&self) -> Result<Option<ObjectId>, PoolError> {
        Ok(lookup_mos_directory(&self.mos, MOS_OBJECT_DIRECTORY, BOOKMARKS_KEY)?.map(ObjectId))
    }

    /// The bookmarks of the head `head` (its record object), as (name, guid, txg, time).
    fn bookmarks_of_head(&self, head: ObjectId) -> Result<Vec<(String, u64, u64, u64)>, PoolError> {
        let Some(object) = self.bookmarks_object()? else {
            return Ok(Vec::new());
        };
        let prefix = format!("{}#", head.0);
        let mut out = Vec::new();
        for entry in kv_entries(&self.mos, object)? {
            let Some(name) = entry.key.strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            let value: [u8; VALUE_SIZE] = entry.value.as_slice().try_into().map_err(|_| {
                PoolError::Corrupt(format!(
                    "bookmarks object {object}: a value of {} bytes",
                    entry.value.len()
                ))
            })?;
            let word = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().expect("8"));
            out.push((
                String::from_utf8_lossy(name).into_owned(),
                word(0),
                word(8),
                word(16),
            ));
        }
        Ok(out)
    }

    /// Syncing context: record bookmark `name` of `head`.
    pub(super) fn sync_create_bookmark(
        &self,
        head: &Arc<Dataset>,
        name: &str,
        values: [u64; 3],
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let object = match self.bookmarks_object()? {
            Some(object) => object,
            None => {
                let object = kv_create(&self.mos, tx, &self.tunables)?;
                kv_set_u64(&self.mos, tx, MOS_OBJECT_DIRECTORY, BOOKMARKS_KEY, object.0)?;
                object
            }
        };
        let mut value = Vec::with_capacity(VALUE_SIZE);
        for word in values {
            value.extend_from_slice(&word.to_le_bytes());
        }
        let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
        kv::insert(&mut handle, key(head.object, name).as_bytes(), &value)
            .map_err(kv_object_error(object))?;
        Ok(())
    }

    /// Syncing context: remove bookmark `name` of the head `head` (its record object); every
    /// bookmark of it with `None` (the file system is destroyed).
    pub(super) fn sync_destroy_bookmarks(
        &self,
        head: ObjectId,
        name: Option<&str>,
        tx: &Tx,
    ) -> Result<(), PoolError> {
        let Some(object) = self.bookmarks_object()? else {
            return Ok(());
        };
        let names: Vec<String> = match name {
            Some(name) => vec![name.to_string()],
            None => self
                .bookmarks_of_head(head)?
                .into_iter()
                .map(|(name, ..)| name)
                .collect(),
        };
        let mut handle = KvObject::new(&self.mos, object, Some(*tx))?;
        for name in names {
            kv::remove(&mut handle, key(head, &name).as_bytes())
                .map_err(kv_object_error(object))?;
        }
        Ok(())
    }
}

impl Pool {
    /// Bookmark `FS@SNAP` as `FS#NAME`. Durable on return.
    pub fn create_bookmark(&self, snapshot: &str, bookmark: &str) -> Result<(), PoolError> {
        self.writable()?;
        let (file_system, name) = split_bookmark_name(bookmark)?;
        if snapshot.split_once('@').map(|(fs, _)| fs) != Some(file_system) {
            return Err(PoolError::Refused(format!(
                "cannot bookmark {snapshot} as {bookmark}: a bookmark belongs to the snapshot's \
                 own file system"
            )));
        }
        let info = self.snapshot_info(snapshot)?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let head = core.available_dataset(core.relative_name(file_system)?)?;
        core.check_space(
            super::admission::SpaceCheck::Normal,
            1,
            &format!("create bookmark {bookmark}"),
        )?;
        if core
            .bookmarks_of_head(head.object)?
            .iter()
            .any(|(existing, ..)| existing == name)
        {
            return Err(PoolError::DatasetExists(bookmark.to_string()));
        }
        core.run_tasks(vec![NamespaceTask::Bookmark {
            head,
            name: name.to_string(),
            values: [info.guid, info.creation_txg, info.creation_time],
        }])
    }

    /// The bookmarks of file system `file_system`, by name.
    pub fn bookmarks_of(&self, file_system: &str) -> Result<Vec<BookmarkInfo>, PoolError> {
        let core = &self.core;
        let head = core.available_dataset(core.relative_name(file_system)?)?;
        let mut out: Vec<BookmarkInfo> = core
            .bookmarks_of_head(head.object)?
            .into_iter()
            .map(|(name, guid, creation_txg, creation_time)| BookmarkInfo {
                name: format!("{file_system}#{name}"),
                guid,
                creation_txg,
                creation_time,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One bookmark, `FS#NAME`.
    pub fn bookmark_info(&self, bookmark: &str) -> Result<BookmarkInfo, PoolError> {
        let (file_system, _) = split_bookmark_name(bookmark)?;
        self.bookmarks_of(file_system)?
            .into_iter()
            .find(|info| info.name == bookmark)
            .ok_or_else(|| PoolError::DatasetNotFound(bookmark.to_string()))
    }

    /// Destroy bookmark `FS#NAME`. Durable on return.
    pub fn destroy_bookmark(&self, bookmark: &str) -> Result<(), PoolError> {
        self.writable()?;
        let (file_system, name) = split_bookmark_name(bookmark)?;
        self.bookmark_info(bookmark)?;
        let core = &self.core;
        let _namespace = core.namespace.lock();
        let head = core.available_dataset(core.relative_name(file_system)?)?;
        core.run_tasks(vec![NamespaceTask::DestroyBookmark {
            head: head.object,
            name: name.to_string(),
        }])
    }
}
