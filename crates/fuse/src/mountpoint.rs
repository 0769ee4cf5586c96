//! Mountpoints: the checks before a mount, unmounting, and the cleanup of a dead mount.
//!
//! A mountpoint must be an empty directory that is not already a mountpoint; a missing one is
//! created. A *dead* mount is a FUSE mount whose server died (a daemon killed with -9): the
//! kernel keeps it in the mount table, and every access to it fails with ENOTCONN. Such a
//! mount is detached lazily (`umount -l`, or `fusermount3 -uz` when not root) before the path
//! is used again. Mounts are found in `/proc/self/mountinfo`, never by touching the path, so
//! that no check can hang on a mount whose server is stuck.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    pub device_major: u32,
    pub device_minor: u32,
}

/// Undo mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|digit| (b'0'..=b'7').contains(digit)) {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + (digit - b'0') as u32);
                if let Ok(value) = u8::try_from(value) {
                    out.push(value);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Parse one mountinfo line: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE
/// SOURCE SUPEROPTS`.
pub fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let mount_point = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(fields.get(4)?)));
    let separator = fields.iter().position(|field| *field == "-")?;
    Some(MountEntry {
        mount_point,
        fstype: fields.get(separator + 1)?.to_string(),
        source: String::from_utf8_lossy(&unescape(fields.get(separator + 2)?)).into_owned(),
        device_major: major.parse().ok()?,
        device_minor: minor.parse().ok()?,
    })
}

/// The mounts this process sees.
pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| text.lines().filter_map(parse_mountinfo_line).collect())
        .unwrap_or_default()
}

/// The topmost mount at `path`, if any (paths are compared as given, made absolute).
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    let path = normalize(path);
    mounts()
        .into_iter()
        .rev()
        .find(|entry| entry.mount_point == path)
}

/// `path` without `.` components and trailing slashes (symlinks are not resolved: resolving
/// would touch a possibly dead mount).
fn normalize(path: &Path) -> PathBuf {
    path.components().collect()
}

/// The FUSE connection number of the mount at `path` (its device minor), if it is FUSE.
pub fn fuse_connection(path: &Path) -> Option<u32> {
    mount_at(path)
        .filter(|entry| entry.fstype == "fuse" || entry.fstype.starts_with("fuse."))
        .map(|entry| entry.device_minor)
}

/// Where the kernel's FUSE control file system (fusectl) lives.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Abort a FUSE connection: its requests fail and its server's reads end. Mounts fusectl
/// first if it is missing and this process may (root). Returns whether the abort was sent.
pub fn abort_connection(connection: u32) -> bool {
    let path = format!("{FUSECTL}/{connection}/abort");
    if !Path::new(&path).exists() && Path::new(FUSECTL).is_dir() {
        // SAFETY: static NUL-terminated strings; mount reads them only.
        unsafe {
            libc::mount(
                c"fusectl".as_ptr(),
                c"/sys/fs/fuse/connections".as_ptr(),
                c"fusectl".as_ptr(),
                0,
                std::ptr::null(),
            );
        }
    }
    std::fs::write(path, b"1").is_ok()
}

/// Unmount `path`: umount2 as root, else `fusermount3 -u` (`-z` when lazy).
pub fn unmount_path(path: &Path, lazy: bool) -> io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: a valid NUL-terminated path; umount2 reads it only.
    if unsafe { libc::umount2(c_path.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EPERM) {
        return Err(error);
    }
    let mut command = Command::new("fusermount3");
    command.arg(if lazy { "-uz" } else { "-u" }).arg(path);
    let output = command.output()?;
    if output.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if message.contains("busy") {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(io::Error::other(format!("fusermount3: {message}")))
}

/// Whether the mount at `path` is a FUSE mount whose server is gone.
pub fn is_dead_fuse_mount(path: &Path) -> bool {
    if fuse_connection(path).is_none() {
        return false;
    }
    // statfs always reaches the server (stat could be answered from cached attributes of a
    // dead mount's root); a connection without a server fails it with ENOTCONN, or with
    // ECONNABORTED when the request was already queued as the connection went: over FUSE over
    // io_uring, a statfs made just after the server died waits for the ring's teardown (the
    // kernel tears the dead server's rings down after its exit) and is ended so.
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a valid C string and `stat` a writable statfs buffer.
    let result = unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        libc::statfs(path.as_ptr(), &mut stat)
    };
    result != 0
        && matches!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        )
}

/// Check that `path` can be mounted on, without changing anything: not a live mountpoint, and
/// an empty directory if it exists. A dead FUSE mount passes (see [`prepare`]).
pub fn check(path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!("mountpoint {} is not absolute", path.display()));
    }
    if mount_at(path).is_some() {
        if is_dead_fuse_mount(path) {
            return Ok(());
        }
        return Err(format!(
            "mountpoint {} is already a mountpoint; unmount it or choose another (-m, -R)",
            path.display()
        ));
    }
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(format!("mountpoint {}: {error}", path.display())),
        Ok(metadata) if !metadata.is_dir() => Err(format!(
            "mountpoint {} exists and is not a directory",
            path.display()
        )),
        Ok(_) => {
            let mut entries = std::fs::read_dir(path)
                .map_err(|error| format!("mountpoint {}: {error}", path.display()))?;
            if entries.next().is_some() {
                return Err(format!(
                    "mountpoint {} is not empty; empty it or choose another (-m, -R)",
                    path.display()
                ));
            }
            Ok(())
        }
    }
}

/// Make `path` ready for a mount: detach a dead FUSE mount there (left by a crashed daemon),
/// create the directory if missing, then [`check`] it.
pub fn prepare(path: &Path) -> Result<(), String> {
    if is_dead_fuse_mount(path) {
        let connection = fuse_connection(path);
        unmount_path(path, true).map_err(|error| {
            format!(
                "cannot detach the dead mount at {}: {error}",
                path.display()
            )
        })?;
        if let Some(connection) = connection {
            abort_connection(connection);
        }
    }
    if !path.exists() {
        std::fs::create_dir_all(path)
            .map_err(|error| format!("cannot create mountpoint {}: {error}", path.display()))?;
    }
    check(path)
}

/// The file system type of every tarn mount (`Subtype("tarn")`).
const TARN_FSTYPE: &str = "fuse.tarn";

/// A tarn mount cleared by [`clear_stale_tarn_mounts`].
#[derive(Debug)]
pub struct Cleared {
    pub mount: MountEntry,
    /// Whether its connection's `abort` was written.
    pub aborted: bool,
    /// The lazy unmount.
    pub unmounted: io::Result<()>,
}

/// Abort the FUSE connection of every tarn mount whose server is gone or dying, and detach the
/// mount lazily; for a daemon's start. A server killed while one of its threads waited in the
/// kernel for its own mount (an old daemon's syncfs) keeps `/dev/fuse` open while it dies, and
/// its mounts hang whoever touches them until the connection is aborted; the abort also lets
/// that process finish dying and free its lock.
///
/// Which process serves which connection cannot be read anywhere, so this clears only when it
/// can prove no tarn mount has a live server: when no process but this one holds `/dev/fuse`
/// open, except processes that are dying (SIGKILL pending, or exited). With any other FUSE
/// server alive (another tarn daemon, a test serving a mount, sshfs), it does nothing. Needs
/// root (to read other processes' descriptors and write `abort`); does nothing otherwise.
pub fn clear_stale_tarn_mounts() -> Vec<Cleared> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Vec::new();
    }
    let stale: Vec<MountEntry> = mounts()
        .into_iter()
        .filter(|entry| entry.fstype == TARN_FSTYPE)
        .collect();
    if stale.is_empty() || live_fuse_server_elsewhere() {
        return Vec::new();
    }
    // Topmost first, so that a nested mount goes before the one under it.
    stale
        .into_iter()
        .rev()
        .map(|mount| {
            let aborted = abort_connection(mount.device_minor);
            let unmounted = unmount_path(&mount.mount_point, true);
            Cleared {
                mount,
                aborted,
                unmounted,
            }
        })
        .collect()
}

/// Whether a process other than this one that is not dying holds `/dev/fuse` open (or may: a
/// process whose descriptors cannot be read counts as one).
fn live_fuse_server_elsewhere() -> bool {
    let me = std::process::id();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return true;
    };
    for process in processes.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Every thread's own view: a process whose main thread has exited lists no
        // descriptors under /proc/PID/fd, while a thread still in the kernel holds them all.
        let Ok(tasks) = std::fs::read_dir(process.path().join("task")) else {
            continue; // Gone meanwhile.
        };
        let (mut holds, mut dying) = (false, false);
        for task in tasks.flatten() {
            match holds_dev_fuse(&task.path().join("fd")) {
                Some(true) => holds = true,
                Some(false) => {}
                None => return true,
            }
            dying |= task_dying(&task.path().join("status"));
        }
        if holds && !dying {
            return true;
        }
    }
    false
}

/// Whether a descriptor in the `/proc/.../fd` directory `fds` is `/dev/fuse`; None if the
/// directory cannot be read for another reason than the task being gone.
fn holds_dev_fuse(fds: &Path) -> Option<bool> {
    let entries = match std::fs::read_dir(fds) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Some(false),
        // A task that exited has no descriptor table (ENOENT on some kernels, EACCES on
        // none for root); anything else is not known.
        Err(_) => return None,
    };
    Some(entries.flatten().any(|entry| {
        std::fs::read_link(entry.path()).is_ok_and(|target| target == Path::new("/dev/fuse"))
    }))
}

/// Whether the task whose `/proc/.../status` is `status` is exiting: a zombie or dead, or with
/// SIGKILL pending (a killed process's threads keep it pending while stuck in the kernel).
fn task_dying(status: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(status) else {
        return true; // Gone meanwhile.
    };
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    text.lines().any(|line| {
        let Some((key, value)) = line.split_once(':') else {
            return false;
        };
        let value = value.trim();
        match key {
            "State" => value.starts_with('Z') || value.starts_with('X'),
            "SigPnd" | "ShdPnd" => {
                u64::from_str_radix(value, 16).is_ok_and(|mask| mask & SIGKILL_BIT != 0)
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse() {
        let line = "42 23 0:51 / /tmp/a\\040b rw,nosuid - fuse.tarn tarn:tank rw,user_id=0";
        let entry = parse_mountinfo_line(line).unwrap();
        assert_eq!(entry.mount_point, PathBuf::from("/tmp/a b"));
        assert_eq!(entry.fstype, "fuse.tarn");
        assert_eq!(entry.source, "tarn:tank");
        assert_eq!((entry.device_major, entry.device_minor), (0, 51));
        let with_optional = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw";
        let entry = parse_mountinfo_line(with_optional).unwrap();
        assert_eq!(entry.fstype, "ext3");
        assert_eq!(entry.mount_point, PathBuf::from("/mnt2"));
        assert!(parse_mountinfo_line("garbage").is_none());
    }

    #[test]
    fn this_process_is_not_dying_and_holds_no_fuse_device() {
        let me = Path::new("/proc/self");
        assert!(!task_dying(&me.join("status")));
        assert_eq!(holds_dev_fuse(&me.join("fd")), Some(false));
    }

    #[test]
    fn check_refuses_files_and_full_directories() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check(&dir.path().join("missing")).is_ok());
        assert!(check(dir.path()).is_ok());
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        assert!(check(dir.path()).unwrap_err().contains("not empty"));
        assert!(check(&dir.path().join("f"))
            .unwrap_err()
            .contains("not a directory"));
        assert!(check(Path::new("relative")).is_err());
        assert!(check(Path::new("/proc"))
            .unwrap_err()
            .contains("mountpoint"));
    }
}
