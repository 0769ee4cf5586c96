//! The cache file: which pools are imported and where their vdevs are, so that after a reboot
//! (or a daemon restart) they come back without naming their directories (OpenZFS's
//! `/etc/zfs/zpool.cache` and the `cachefile` pool property).
//!
//! # Where
//! Each imported pool has a `cachefile` property: a path, or `none` (not recorded). Its default
//! is [`default_path`]: `$TARN_CACHEFILE` if set, else `/etc/tarn/tarn.cache` for the default
//! socket, else `SOCKET.cache` beside a socket named with `--socket`/`TARN_SOCKET` (so that a
//! test's or a user's private daemon never touches the system's file). `pool create` and
//! `pool import` take `-o cachefile=PATH|none`; `pool set cachefile=...` moves a pool.
//!
//! # When
//! The daemon adds a pool's entry when it creates or imports it and removes it when the pool
//! is exported or destroyed by request. Stopping the daemon (SIGTERM, `daemon --stop`, a
//! shutdown) exports its pools but leaves the file alone: they are to come back. A daemon
//! imports what its default cache file lists when it starts, and `tarn pool import -a` does
//! the same for pools not imported yet. Entries that cannot be imported (a missing disk) stay
//! in the file and are logged.
//!
//! # Format (docs/design/13-commands.md §2.22)
//! JSON, one document: `{"version": 1, "pools": [{"name", "guid", "vdevs": [absolute paths],
//! "altroot": path or null, "readonly": bool, "hostname", "txg"}]}`. Written whole to
//! `PATH.tmp`, fsynced, renamed over PATH and the directory fsynced: a crash leaves the old
//! file or the new one. An unreadable file is reported and treated as empty (it only speeds
//! up finding pools; the labels on the vdevs are the truth).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable naming the default cache file.
pub const CACHEFILE_ENV: &str = "TARN_CACHEFILE";
/// The system's cache file (for the default socket).
pub const CACHEFILE_SYSTEM: &str = "/etc/tarn/tarn.cache";
const CACHEFILE_VERSION: u64 = 1;
/// The system's directory of stable device names, always in the default search path.
pub const DEVICE_DIRECTORY: &str = "/dev/disk/by-id";

/// One remembered pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedPool {
    pub name: String,
    pub guid: u64,
    pub vdevs: Vec<PathBuf>,
    #[serde(default)]
    pub altroot: Option<PathBuf>,
    #[serde(default)]
    pub readonly: bool,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub txg: u64,
}

impl CachedPool {
    /// The directories holding its vdevs (what import scans for it).
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .vdevs
            .iter()
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheFile {
    pub version: u64,
    pub pools: Vec<CachedPool>,
}

/// The default cache file of the daemon on `socket` (see the module documentation).
pub fn default_path(socket: &Path) -> PathBuf {
    if let Some(path) = std::env::var_os(CACHEFILE_ENV).filter(|value| !value.is_empty()) {
        return tarn_protocol::absolute(Path::new(&path));
    }
    if socket == Path::new(tarn_protocol::client::DEFAULT_SOCKET) {
        PathBuf::from(CACHEFILE_SYSTEM)
    } else {
        let mut text = socket.as_os_str().to_owned();
        text.push(".cache");
        PathBuf::from(text)
    }
}

/// The pools `path` lists; a missing file lists none.
pub fn read(path: &Path) -> Result<CacheFile, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(CacheFile::default())
        }
        Err(error) => {
            return Err(format!(
                "cannot read cache file {}: {error}",
                path.display()
            ))
        }
    };
    let file: CacheFile = serde_json::from_slice(&bytes)
        .map_err(|error| format!("cache file {} is unreadable: {error}", path.display()))?;
    if file.version != CACHEFILE_VERSION {
        return Err(format!(
            "cache file {} has version {}, this build reads {CACHEFILE_VERSION}",
            path.display(),
            file.version
        ));
    }
    Ok(file)
}

/// Write `file` to `path` atomically (see the module documentation).
pub fn write(path: &Path, file: &CacheFile) -> Result<(), String> {
    let fail = |what: &str, error: std::io::Error| {
        format!("cannot {what} cache file {}: {error}", path.display())
    };
    let directory = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(directory).map_err(|error| fail("create the directory of", error))?;
    let mut staged = path.as_os_str().to_owned();
    staged.push(".tmp");
    let staged = PathBuf::from(staged);
    let document = CacheFile {
        version: CACHEFILE_VERSION,
        pools: file.pools.clone(),
    };
    let mut bytes = serde_json::to_vec_pretty(&document).expect("a cache file serializes");
    bytes.push(b'\n');
    let mut out = std::fs::File::create(&staged).map_err(|error| fail("write", error))?;
    out.write_all(&bytes)
        .and_then(|()| out.sync_all())
        .map_err(|error| fail("write", error))?;
    std::fs::rename(&staged, path).map_err(|error| fail("replace", error))?;
    if let Ok(directory) = std::fs::File::open(directory) {
        let _ = directory.sync_all();
    }
    Ok(())
}

/// Change the file at `path` under `change` (read, change, write).
pub fn update(path: &Path, change: impl FnOnce(&mut Vec<CachedPool>)) -> Result<(), String> {
    // An unreadable file is replaced: it held nothing usable.
    let mut file = read(path).unwrap_or_default();
    change(&mut file.pools);
    write(path, &file)
}

/// Record `pool` in `path`, replacing any entry with its name or guid.
pub fn remember(path: &Path, pool: CachedPool) -> Result<(), String> {
    update(path, |pools| {
        pools.retain(|other| other.guid != pool.guid && other.name != pool.name);
        pools.push(pool);
        pools.sort_by(|a, b| a.name.cmp(&b.name));
    })
}

/// Remove the pool with `guid` from `path` (nothing if the file does not exist).
pub fn forget(path: &Path, guid: u64) -> Result<(), String> {
    if !path.exists() {
        return Ok(());
    }
    update(path, |pools| pools.retain(|pool| pool.guid != guid))
}

/// The default search path: where every verb looks for a pool's devices when no `-d` names
/// a directory (`pool import` and its listing, `pool export` and `pool destroy` of a pool no
/// daemon holds, `check`, the `debug` verbs and `pool history` on an exported pool), as
/// OpenZFS's import searches its default device directories. It is `/dev/disk/by-id` and every
/// directory holding a vdev that the cache file at `cache` names, and never the current
/// directory: a pool's devices are not where the user happens to stand. An unreadable cache
/// file adds nothing (the labels on the devices are the truth).
pub fn default_search_path(cache: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(DEVICE_DIRECTORY)];
    if let Ok(file) = read(cache) {
        for pool in &file.pools {
            dirs.extend(pool.dirs());
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The directories a verb searches for a pool's devices: those `-d` named, made absolute (the
/// daemon does not share our working directory, and found devices are then named as a pool's
/// config names missing ones), or without `-d` the [`default_search_path`] of the daemon on
/// `socket`'s default cache file.
pub fn search_dirs(socket: &Path, dirs: &[PathBuf]) -> Vec<PathBuf> {
    if dirs.is_empty() {
        default_search_path(&default_path(socket))
    } else {
        dirs.iter()
            .map(|dir| tarn_protocol::absolute(dir))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, guid: u64, vdev: &str) -> CachedPool {
        CachedPool {
            name: name.into(),
            guid,
            vdevs: vec![PathBuf::from(vdev)],
            altroot: None,
            readonly: false,
            hostname: "h".into(),
            txg: 5,
        }
    }

    #[test]
    fn entries_are_remembered_replaced_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/tarn.cache");
        assert_eq!(read(&path).unwrap(), CacheFile::default());
        remember(&path, entry("b", 2, "/v/b.img")).unwrap();
        remember(&path, entry("a", 1, "/v/a.img")).unwrap();
        // Same guid under a new name replaces the old entry.
        remember(&path, entry("c", 2, "/w/c.img")).unwrap();
        let file = read(&path).unwrap();
        let names: Vec<&str> = file.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(file.version, CACHEFILE_VERSION);
        forget(&path, 1).unwrap();
        assert_eq!(read(&path).unwrap().pools.len(), 1);
    }

    #[test]
    fn the_default_search_path_is_by_id_and_the_cache_files_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tarn.cache");
        let by_id = PathBuf::from(DEVICE_DIRECTORY);
        // No cache file: the device directory alone, never the current directory.
        assert_eq!(default_search_path(&path), std::slice::from_ref(&by_id));
        // Each directory holding a vdev the file names, once, beside the device directory.
        let mut two_vdevs = entry("b", 2, "/v/b0.img");
        two_vdevs.vdevs.push(PathBuf::from("/w/b1.img"));
        remember(&path, entry("a", 1, "/v/a.img")).unwrap();
        remember(&path, two_vdevs).unwrap();
        assert_eq!(
            default_search_path(&path),
            [by_id.clone(), PathBuf::from("/v"), PathBuf::from("/w")]
        );
        // An unreadable file adds nothing, and is not an error.
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(default_search_path(&path), [by_id]);
    }

    #[test]
    fn search_dirs_are_the_ones_named_made_absolute() {
        let named = [PathBuf::from("/x/y"), PathBuf::from("rel")];
        let socket = Path::new("/nonexistent/tarn.sock");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            search_dirs(socket, &named),
            [PathBuf::from("/x/y"), cwd.join("rel")]
        );
        // Without -d: the default search path, which holds no relative directory.
        let default = search_dirs(socket, &[]);
        assert!(
            default.contains(&PathBuf::from(DEVICE_DIRECTORY)),
            "{default:?}"
        );
        assert!(default.iter().all(|dir| dir.is_absolute()), "{default:?}");
    }

    #[test]
    fn a_damaged_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tarn.cache");
        std::fs::write(&path, b"{not json").unwrap();
        assert!(read(&path).unwrap_err().contains("unreadable"));
        std::fs::write(&path, br#"{"version": 9, "pools": []}"#).unwrap();
        assert!(read(&path).unwrap_err().contains("version 9"));
        // remember replaces what cannot be read.
        remember(&path, entry("a", 1, "/v/a.img")).unwrap();
        assert_eq!(read(&path).unwrap().pools.len(), 1);
    }

    #[test]
    fn the_default_follows_the_socket() {
        if std::env::var_os(CACHEFILE_ENV).is_some() {
            return;
        }
        assert_eq!(
            default_path(Path::new("/tmp/x/tarn.sock")),
            PathBuf::from("/tmp/x/tarn.sock.cache")
        );
        assert_eq!(
            default_path(Path::new(tarn_protocol::client::DEFAULT_SOCKET)),
            PathBuf::from(CACHEFILE_SYSTEM)
        );
    }
}
