//! What the kernel may have cached of a mount, and invalidating it when the file system changes
//! behind the kernel's back (a rollback, a snapshot destroyed or renamed).
//!
//! # What is tracked
//! - *Known inodes*: every inode number the kernel holds, with its lookup count: incremented
//!   for every entry reply (lookup, create, mkdir, mknod, symlink, link), decremented by
//!   `forget`. Only an inode the kernel holds can have cached attributes or pages, so these are
//!   exactly the inodes to invalidate. The root (1) is always held.
//! - *Content versions*: for each held inode opened since the kernel took it, the engine's
//!   [`ContentVersion`] of the file at its last open. An open that finds the same version
//!   again tells the kernel to keep the file's cached pages (FOPEN_KEEP_CACHE); any other open
//!   has the kernel drop them first. A version is the file's generation, size, mtime and ctime:
//!   every change of the data through the engine changes the ctime (and a rollback restores
//!   an older one), so an unchanged version means unchanged data. Changes through this mount
//!   keep the kernel's pages right by themselves (they are the kernel's own pages); they change
//!   the version too, which costs one extra read of the file after it was written, never a
//!   stale one. The version is dropped with the inode when the kernel forgets it.
//! - *Writers*: for each held inode, its open files that may write. Only while it has some can
//!   the kernel hold dirty pages of it (every close writes them back), which is when `lseek`
//!   (SEEK_DATA, SEEK_HOLE) has the kernel write them back before asking the engine.
//! - *Recent entries*: every (directory, name) a lookup or creation was asked for in the last
//!   [`RECENT`] (twice the entry TTL). Older entries have expired in the kernel, which asks
//!   again (a revalidating lookup, recorded anew) before using them, so only recent ones need
//!   invalidating. An entry is recorded *before* the engine is asked: a lookup racing a rollback
//!   is then either recorded in time to be invalidated, or runs after it. The kernel's
//!   invalidation of an entry waits for lookups in progress in that directory (it takes the
//!   directory's lock), so no stale entry is installed after it.
//!
//! Attribute replies racing an invalidation are dropped by the kernel itself (an invalidation
//! bumps the inode's attribute version; older replies are ignored).
//!
//! # Invalidating
//! Through fuser's `Notifier` (FUSE_NOTIFY_INVAL_INODE for attributes and every cached page,
//! which also unmaps them from mmaps; FUSE_NOTIFY_INVAL_ENTRY for names). Never called from a
//! FUSE request handler: the kernel may wait for requests in progress, which would deadlock a
//! handler that waits for it. Cost: one write to /dev/fuse per inode and per entry, a few
//! microseconds each.
//!
//! # Contention
//! Both tables are split in [`SHARDS`] shards by a hash of the inode or directory, so parallel
//! lookups rarely meet on a mutex.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;

/// Shards of each table.
const SHARDS: usize = 16;
/// How long an entry handed out may still be cached without a revalidating lookup.
pub const RECENT: Duration = Duration::from_secs(2 * crate::TTL.as_secs());
/// A recent-entry shard is pruned of old entries when it grows past this (or past twice what
/// the last pruning left).
const PRUNE_AT_LEAST: usize = 1024;

/// What identifies a file's contents at an open (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentVersion {
    generation: u64,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl ContentVersion {
    pub fn of(attr: &tarn::Attr) -> ContentVersion {
        ContentVersion {
            generation: attr.generation,
            size: attr.size,
            mtime: (attr.mtime.seconds, attr.mtime.nanoseconds),
            ctime: (attr.ctime.seconds, attr.ctime.nanoseconds),
        }
    }
}

/// An inode the kernel holds: its lookup count, its version at its last open, and how many of
/// its open files may write.
#[derive(Default)]
struct Held {
    lookups: u64,
    opened: Option<ContentVersion>,
    writers: u64,
}

#[derive(Default)]
struct RecentShard {
    entries: HashMap<(u64, Box<[u8]>), Instant>,
    prune_at: usize,
}

/// The kernel's view of one mount (see the module documentation).
pub struct KernelCache {
    known: Vec<Mutex<HashMap<u64, Held>>>,
    recent: Vec<Mutex<RecentShard>>,
    notifier: OnceLock<Notifier>,
    name: String,
}

fn shard(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % SHARDS
}

impl KernelCache {
    pub fn new(name: String) -> KernelCache {
        KernelCache {
            known: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            recent: (0..SHARDS)
                .map(|_| Mutex::new(RecentShard::default()))
                .collect(),
            notifier: OnceLock::new(),
            name,
        }
    }

    /// The session's notifier, once mounted.
    pub fn set_notifier(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// A lookup or creation of `name` in `parent` is about to be answered.
    pub fn entry_asked(&self, parent: u64, name: &[u8]) {
        let now = Instant::now();
        let mut shard = self.recent[shard(parent)].lock();
        shard.entries.insert((parent, name.into()), now);
        if shard.entries.len() > shard.prune_at.max(PRUNE_AT_LEAST) {
            shard
                .entries
                .retain(|_, when| now.duration_since(*when) < RECENT);
            shard.prune_at = 2 * shard.entries.len();
        }
    }

    /// An entry reply for `ino` is being sent: the kernel's lookup count grows by one.
    pub fn inode_handed_out(&self, ino: u64) {
        self.known[shard(ino)]
            .lock()
            .entry(ino)
            .or_default()
            .lookups += 1;
    }

    /// `ino` is being opened (for writing if `writable`) and the engine's file is at
    /// `version`: record both, and say whether the kernel may keep the pages it cached (the
    /// inode is held and was last opened at the same version).
    pub fn opened(&self, ino: u64, version: ContentVersion, writable: bool) -> bool {
        let mut known = self.known[shard(ino)].lock();
        match known.get_mut(&ino) {
            Some(held) => {
                held.writers += writable as u64;
                held.opened.replace(version) == Some(version)
            }
            None => false,
        }
    }

    /// An open file of `ino` that could write was released.
    pub fn released_writer(&self, ino: u64) {
        if let Some(held) = self.known[shard(ino)].lock().get_mut(&ino) {
            held.writers = held.writers.saturating_sub(1);
        }
    }

    /// Whether `ino` is open for writing, so that the kernel may hold dirty pages of it (a
    /// close writes them back; a shared writable mapping keeps its file open).
    pub fn has_writers(&self, ino: u64) -> bool {
        self.known[shard(ino)]
            .lock()
            .get(&ino)
            .is_some_and(|held| held.writers > 0)
    }

    /// The inodes the kernel holds that are open for writing.
    pub fn known_inodes_with_writers(&self) -> Vec<u64> {
        self.known
            .iter()
            .flat_map(|shard| {
                shard
                    .lock()
                    .iter()
                    .filter(|(_, held)| held.writers > 0)
                    .map(|(ino, _)| *ino)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The kernel forgot `count` lookups of `ino`; true when it holds the inode no more.
    pub fn forget(&self, ino: u64, count: u64) -> bool {
        let mut known = self.known[shard(ino)].lock();
        if let Some(held) = known.get_mut(&ino) {
            held.lookups = held.lookups.saturating_sub(count);
            if held.lookups == 0 {
                known.remove(&ino);
                return true;
            }
        }
        false
    }

    /// The inodes the kernel holds that `wanted` selects.
    pub fn known_inodes(&self, wanted: impl Fn(u64) -> bool) -> Vec<u64> {
        self.known
            .iter()
            .flat_map(|shard| {
                shard
                    .lock()
                    .keys()
                    .copied()
                    .filter(|ino| wanted(*ino))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The entries handed out recently whose directory `wanted` selects.
    pub fn recent_entries(&self, wanted: impl Fn(u64) -> bool) -> Vec<(u64, Vec<u8>)> {
        let now = Instant::now();
        self.recent
            .iter()
            .flat_map(|shard| {
                shard
                    .lock()
                    .entries
                    .iter()
                    .filter(|((parent, _), when)| {
                        now.duration_since(**when) < RECENT && wanted(*parent)
                    })
                    .map(|((parent, name), _)| (*parent, name.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Invalidate the attributes and every cached page of `inodes`, then the `entries`.
    /// Returns how many notifications the kernel took. Stops (with a log line) if the
    /// connection is gone.
    pub fn invalidate(&self, inodes: &[u64], entries: &[(u64, Vec<u8>)]) -> usize {
        let Some(notifier) = self.notifier.get() else {
            return 0;
        };
        let mut sent = 0;
        for &ino in inodes {
            match notifier.inval_inode(INodeNo(ino), 0, 0) {
                Ok(()) => sent += 1,
                Err(error) => return self.gave_up(sent, "an inode", error),
            }
        }
        for (parent, name) in entries {
            match notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name)) {
                Ok(()) => sent += 1,
                Err(error) => return self.gave_up(sent, "an entry", error),
            }
        }
        sent
    }

    /// Invalidate the cached attributes of `ino` only (no pages: safe while the kernel holds
    /// the inode's lock or pages for the request being served).
    pub fn invalidate_attributes(&self, ino: u64) {
        if let Some(notifier) = self.notifier.get() {
            if let Err(error) = notifier.inval_inode(INodeNo(ino), -1, 0) {
                self.gave_up(0, "an inode's attributes", error);
            }
        }
    }

    fn gave_up(&self, sent: usize, what: &str, error: std::io::Error) -> usize {
        log::warn!(
            "tarn fuse {}: cannot invalidate {what} in the kernel's cache ({error}); the mount \
             is gone or going",
            self.name
        );
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_counts_follow_forgets() {
        let cache = KernelCache::new("test".into());
        cache.inode_handed_out(7);
        cache.inode_handed_out(7);
        cache.inode_handed_out(9);
        cache.forget(7, 1);
        assert_eq!(sorted(cache.known_inodes(|_| true)), vec![7, 9]);
        cache.forget(7, 1);
        cache.forget(9, 5);
        cache.forget(11, 1);
        assert!(cache.known_inodes(|_| true).is_empty());
    }

    #[test]
    fn recent_entries_are_kept_and_filtered() {
        let cache = KernelCache::new("test".into());
        for index in 0..3 * PRUNE_AT_LEAST as u64 {
            cache.entry_asked(index % 5, format!("name{index}").as_bytes());
        }
        let all = cache.recent_entries(|_| true);
        assert_eq!(all.len(), 3 * PRUNE_AT_LEAST);
        let some = cache.recent_entries(|parent| parent == 2);
        assert!(some.iter().all(|(parent, _)| *parent == 2));
        assert_eq!(some.len(), 3 * PRUNE_AT_LEAST / 5);
        // Without a notifier (not mounted) nothing is sent.
        assert_eq!(cache.invalidate(&[1, 2], &all), 0);
    }

    #[test]
    fn pages_are_kept_only_for_an_unchanged_version() {
        let cache = KernelCache::new("test".into());
        let mut attr = tarn::Attr {
            ino: 7,
            generation: 3,
            size: 10,
            blocks: 1,
            atime: tarn::Timestamp::default(),
            mtime: tarn::Timestamp::default(),
            ctime: tarn::Timestamp::default(),
            crtime: tarn::Timestamp::default(),
            kind: tarn::FileKind::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        };
        // Not held by the kernel: nothing to keep.
        assert!(!cache.opened(7, ContentVersion::of(&attr), false));
        cache.inode_handed_out(7);
        assert!(
            !cache.opened(7, ContentVersion::of(&attr), false),
            "first open"
        );
        assert!(
            cache.opened(7, ContentVersion::of(&attr), true),
            "unchanged"
        );
        assert!(cache.has_writers(7));
        attr.ctime.nanoseconds += 1;
        assert!(
            !cache.opened(7, ContentVersion::of(&attr), false),
            "changed ctime"
        );
        assert!(cache.opened(7, ContentVersion::of(&attr), false));
        attr.size += 1;
        assert!(
            !cache.opened(7, ContentVersion::of(&attr), false),
            "changed size"
        );
        cache.released_writer(7);
        assert!(!cache.has_writers(7));
        // Forgotten: the version goes with the inode.
        cache.forget(7, 1);
        cache.inode_handed_out(7);
        assert!(
            !cache.opened(7, ContentVersion::of(&attr), false),
            "after forget"
        );
    }

    fn sorted(mut values: Vec<u64>) -> Vec<u64> {
        values.sort_unstable();
        values
    }
}
