//! The null FUSE file system (the floor of `tarn bench mount` and `tarn bench workloads`)
//! through real mounts: a directory tree with files, directories, symlinks and hard links;
//! rename with its checks and flags; removal errors; listings that are exact and stay stable
//! while `rm -rf` removes their entries; small files keep their bytes (read back past the
//! kernel's page cache) and a file grown past 4 MiB reads zeros; and the workloads themselves
//! (`git init/add/commit/status`, `tar -xf`) inside the mount. Skipped (with a message) when
//! /dev/fuse, git or tar is missing.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use tarn_fuse::{MountHandle, MountOptions};
use tarn_test_support::Requirement;

/// A null file system mounted in a temporary directory.
struct Null {
    mnt: PathBuf,
    handle: MountHandle,
    dir: tempfile::TempDir,
}

impl Null {
    /// Mount one, or None (a recorded skip) when this machine lacks one of `tools` or FUSE.
    fn mount(tools: &[&'static str]) -> Option<Null> {
        let mut requirements = vec![Requirement::Fuse];
        requirements.extend(tools.iter().map(|tool| Requirement::Tool(tool)));
        if !tarn_test_support::requires(&requirements) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        tarn_fuse::mountpoint::prepare(&mnt).unwrap();
        let handle = tarn_fuse::null::mount(&mnt, &MountOptions::new("tarn-null-test")).unwrap();
        Some(Null { mnt, handle, dir })
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.mnt.join(relative)
    }

    fn unmount(mut self) {
        self.handle.unmount(false).unwrap();
    }
}

fn errno<T: std::fmt::Debug>(result: io::Result<T>) -> i32 {
    result.unwrap_err().raw_os_error().unwrap()
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Drop the kernel's clean cached pages of an open file (all are clean once every writer has
/// closed it), so that the next read goes through FUSE to the file system.
fn drop_pages(file: &File) {
    // SAFETY: an open descriptor; offset 0 and length 0 mean the whole file.
    let advised = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(advised, 0);
}

/// A file's bytes as the file system serves them, not as the kernel's page cache holds them.
fn read_uncached(path: &Path) -> Vec<u8> {
    let mut file = File::open(path).unwrap();
    drop_pages(&file);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).unwrap();
    bytes
}

/// Drop the cached pages of every regular file below `dir`.
fn drop_pages_below(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            drop_pages_below(&entry.path());
        } else if kind.is_file() {
            drop_pages(&File::open(entry.path()).unwrap());
        }
    }
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let (from, to) = (c_path(from), c_path(to));
    // SAFETY: two NUL-terminated paths relative to the working directory.
    let result = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Every name of a listing with its inode number, `.` and `..` included (libc's readdir).
fn listing_with_dots(dir: &Path) -> BTreeMap<String, u64> {
    let path = c_path(dir);
    let mut names = BTreeMap::new();
    // SAFETY: opendir of a NUL-terminated path; readdir's entries are read before the next
    // call; closedir once.
    unsafe {
        let stream = libc::opendir(path.as_ptr());
        assert!(!stream.is_null(), "opendir {}", dir.display());
        loop {
            let entry = libc::readdir(stream);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr());
            names.insert(name.to_string_lossy().into_owned(), (*entry).d_ino);
        }
        libc::closedir(stream);
    }
    names
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn statvfs(path: &Path) -> libc::statvfs {
    let path = c_path(path);
    // SAFETY: a NUL-terminated path and a zeroed buffer the call fills.
    let mut figures: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut figures) }, 0);
    figures
}

/// Run `program` with `args` in `dir`; its stdout, or a panic with its stderr.
fn run(dir: &Path, program: &str, args: &[&str], envs: &[(&str, &Path)]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

const FILES: usize = 4000;

#[test]
fn files_are_created_found_listed_and_removed_by_name() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    let name = |index: usize| null.path(&format!("file{index:05}"));

    for index in 0..FILES {
        let mut file = fs::File::create(name(index)).unwrap();
        file.write_all(&[1u8; 100][..index % 100]).unwrap();
    }
    for index in [0, 1, FILES / 2, FILES - 1] {
        assert_eq!(
            fs::metadata(name(index)).unwrap().len(),
            (index % 100) as u64
        );
    }
    let exclusive = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(name(7));
    assert_eq!(exclusive.unwrap_err().kind(), ErrorKind::AlreadyExists);
    assert_eq!(fs::read_dir(&null.mnt).unwrap().count(), FILES);

    for index in (0..FILES).step_by(2) {
        fs::remove_file(name(index)).unwrap();
    }
    assert_eq!(
        fs::metadata(name(10)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(fs::metadata(name(11)).unwrap().len(), 11);
    assert_eq!(fs::read_dir(&null.mnt).unwrap().count(), FILES / 2);
    // A removed name can be created again.
    fs::File::create(name(10)).unwrap();
    assert_eq!(fs::metadata(name(10)).unwrap().len(), 0);
    null.unmount();
}

#[test]
fn nested_directories_hold_files_whose_bytes_read_back() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    fs::create_dir_all(null.path("a/b/c")).unwrap();
    fs::write(null.path("a/b/c/deep.txt"), b"hello from below").unwrap();
    fs::write(null.path("a/top.txt"), b"top").unwrap();
    assert_eq!(
        read_uncached(&null.path("a/b/c/deep.txt")),
        b"hello from below"
    );
    assert_eq!(read_uncached(&null.path("a/top.txt")), b"top");
    assert!(fs::metadata(null.path("a/b")).unwrap().is_dir());
    // Link counts: a directory has 2 plus one per subdirectory.
    assert_eq!(fs::metadata(&null.mnt).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(null.path("a")).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(null.path("a/b/c")).unwrap().nlink(), 2);
    // `..` of a listing is the parent.
    let listing = listing_with_dots(&null.path("a/b/c"));
    let b = fs::metadata(null.path("a/b")).unwrap().ino();
    let c = fs::metadata(null.path("a/b/c")).unwrap().ino();
    assert_eq!(listing.get(".."), Some(&b));
    assert_eq!(listing.get("."), Some(&c));

    // A write past the end leaves zeros before it; truncation down then up keeps the head.
    let path = null.path("a/top.txt");
    let mut file = OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(100)).unwrap();
    file.write_all(b"tail").unwrap();
    drop(file);
    let bytes = read_uncached(&path);
    assert_eq!(bytes.len(), 104);
    assert_eq!(&bytes[..3], b"top");
    assert!(bytes[3..100].iter().all(|&b| b == 0));
    assert_eq!(&bytes[100..], b"tail");
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(2).unwrap();
    file.set_len(6).unwrap();
    drop(file);
    assert_eq!(read_uncached(&path), b"to\0\0\0\0");

    // Special files: a fifo.
    let fifo = c_path(&null.path("a/fifo"));
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    assert!(fs::symlink_metadata(null.path("a/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    null.unmount();
}

#[test]
fn attributes_change_with_setattr() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    let dir = null.path("d");
    fs::create_dir(&dir).unwrap();
    let path = null.path("d/f");
    fs::write(&path, b"x").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o4750)).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o4750);
    // A chown clears setuid (FUSE_HANDLE_KILLPRIV_V2 leaves it to the file system).
    std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
    let metadata = fs::metadata(&path).unwrap();
    assert_eq!((metadata.uid(), metadata.gid()), (1234, 5678));
    assert_eq!(metadata.mode() & 0o7777, 0o750);

    // Times of a directory (whose attributes the kernel takes from the file system): a given
    // time, then "now".
    let given = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::open(&dir)
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(given).set_accessed(given))
        .unwrap();
    let metadata = fs::metadata(&dir).unwrap();
    assert_eq!(
        (metadata.mtime(), metadata.atime()),
        (1_000_000_000, 1_000_000_000)
    );
    let c_dir = c_path(&dir);
    // SAFETY: a NUL-terminated path; null times mean "now" for both.
    let touched = unsafe { libc::utimensat(libc::AT_FDCWD, c_dir.as_ptr(), std::ptr::null(), 0) };
    assert_eq!(touched, 0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - fs::metadata(&dir).unwrap().mtime()).abs() < 60);
    null.unmount();
}

#[test]
fn a_listing_holds_exactly_the_entries() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    let dir = null.path("list");
    fs::create_dir(&dir).unwrap();
    let mut expected = Vec::new();
    for index in 0..200 {
        let name = format!("entry{index:03}");
        if index % 10 == 0 {
            fs::create_dir(dir.join(&name)).unwrap();
        } else {
            fs::write(dir.join(&name), b"").unwrap();
        }
        expected.push(name);
    }
    symlink("entry001", dir.join("zlink")).unwrap();
    expected.push("zlink".to_string());
    assert_eq!(names(&dir), expected);
    for entry in fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        match name.strip_prefix("entry") {
            Some(number) if number.parse::<usize>().unwrap() % 10 == 0 => assert!(kind.is_dir()),
            Some(_) => assert!(kind.is_file()),
            None => assert!(kind.is_symlink()),
        }
    }
    // The listing follows removals and creations (the kernel's cached listing is dropped).
    fs::remove_file(dir.join("entry005")).unwrap();
    fs::remove_dir(dir.join("entry010")).unwrap();
    fs::write(dir.join("late"), b"").unwrap();
    expected.retain(|name| name != "entry005" && name != "entry010");
    expected.push("late".to_string());
    expected.sort();
    assert_eq!(names(&dir), expected);
    null.unmount();
}

#[test]
fn renames_move_files_and_directories_across_directories() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    for dir in ["src", "dst", "src/sub", "empty"] {
        fs::create_dir(null.path(dir)).unwrap();
    }
    fs::write(null.path("src/f"), b"F").unwrap();
    fs::write(null.path("src/sub/inner"), b"inner").unwrap();
    let f = fs::metadata(null.path("src/f")).unwrap().ino();

    // A file across directories keeps its inode and bytes.
    fs::rename(null.path("src/f"), null.path("dst/g")).unwrap();
    assert!(!null.path("src/f").exists());
    assert_eq!(fs::metadata(null.path("dst/g")).unwrap().ino(), f);
    assert_eq!(read_uncached(&null.path("dst/g")), b"F");

    // A directory across directories takes its contents and a link of its parents.
    fs::rename(null.path("src/sub"), null.path("dst/moved")).unwrap();
    assert_eq!(read_uncached(&null.path("dst/moved/inner")), b"inner");
    assert_eq!(fs::metadata(null.path("src")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(null.path("dst")).unwrap().nlink(), 3);
    let dst = fs::metadata(null.path("dst")).unwrap().ino();
    assert_eq!(
        listing_with_dots(&null.path("dst/moved")).get(".."),
        Some(&dst)
    );

    // Over an existing file: the target's name now holds the source.
    fs::write(null.path("dst/old"), b"old").unwrap();
    let g = fs::metadata(null.path("dst/g")).unwrap().ino();
    fs::rename(null.path("dst/g"), null.path("dst/old")).unwrap();
    assert_eq!(fs::metadata(null.path("dst/old")).unwrap().ino(), g);
    assert_eq!(read_uncached(&null.path("dst/old")), b"F");
    assert_eq!(names(&null.path("dst")), ["moved", "old"]);

    // Over directories: an empty one is replaced, a non-empty one is refused.
    fs::create_dir(null.path("src/full")).unwrap();
    fs::write(null.path("src/full/x"), b"").unwrap();
    let refused = fs::rename(null.path("empty"), null.path("src/full"));
    assert_eq!(errno(refused), libc::ENOTEMPTY);
    fs::rename(null.path("dst/moved"), null.path("empty")).unwrap();
    assert_eq!(names(&null.path("empty")), ["inner"]);
    assert_eq!(fs::metadata(null.path("dst")).unwrap().nlink(), 2);
    // The wrong kinds, and a directory into itself.
    let file_over_dir = fs::rename(null.path("dst/old"), null.path("src/full"));
    assert_eq!(errno(file_over_dir), libc::EISDIR);
    let dir_over_file = fs::rename(null.path("src/full"), null.path("dst/old"));
    assert_eq!(errno(dir_over_file), libc::ENOTDIR);
    let into_itself = fs::rename(null.path("src"), null.path("src/full/src"));
    assert_eq!(errno(into_itself), libc::EINVAL);
    null.unmount();
}

#[test]
fn rename_noreplace_refuses_an_existing_target_and_exchange_swaps() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    fs::write(null.path("a"), b"A").unwrap();
    fs::write(null.path("b"), b"B").unwrap();
    let noreplace = renameat2(&null.path("a"), &null.path("b"), libc::RENAME_NOREPLACE);
    assert_eq!(errno(noreplace), libc::EEXIST);
    assert_eq!(read_uncached(&null.path("a")), b"A");
    assert_eq!(read_uncached(&null.path("b")), b"B");
    renameat2(&null.path("a"), &null.path("c"), libc::RENAME_NOREPLACE).unwrap();
    assert_eq!(names(&null.mnt), ["b", "c"]);

    // Exchange a file with a directory in another directory: the link counts follow.
    fs::create_dir_all(null.path("p1/d")).unwrap();
    fs::write(null.path("p1/d/inside"), b"").unwrap();
    fs::create_dir(null.path("p2")).unwrap();
    renameat2(&null.path("b"), &null.path("p1/d"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(read_uncached(&null.path("p1/d")), b"B");
    assert_eq!(names(&null.path("b")), ["inside"]);
    assert_eq!(fs::metadata(null.path("p1")).unwrap().nlink(), 2);
    // The root: p1, p2 and now b.
    assert_eq!(fs::metadata(&null.mnt).unwrap().nlink(), 5);
    let exchange = renameat2(
        &null.path("c"),
        &null.path("p2/none"),
        libc::RENAME_EXCHANGE,
    );
    assert_eq!(errno(exchange), libc::ENOENT);
    null.unmount();
}

#[test]
fn hard_links_share_bytes_and_count_links() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    fs::create_dir(null.path("other")).unwrap();
    fs::write(null.path("one"), b"first").unwrap();
    fs::hard_link(null.path("one"), null.path("other/two")).unwrap();
    let (one, two) = (
        fs::metadata(null.path("one")).unwrap(),
        fs::metadata(null.path("other/two")).unwrap(),
    );
    assert_eq!(one.ino(), two.ino());
    assert_eq!((one.nlink(), two.nlink()), (2, 2));
    fs::write(null.path("other/two"), b"second").unwrap();
    assert_eq!(read_uncached(&null.path("one")), b"second");
    // A rename of one name onto another of the same file does nothing.
    fs::hard_link(null.path("one"), null.path("three")).unwrap();
    fs::rename(null.path("one"), null.path("three")).unwrap();
    assert_eq!(fs::metadata(null.path("three")).unwrap().nlink(), 3);
    fs::remove_file(null.path("one")).unwrap();
    fs::remove_file(null.path("three")).unwrap();
    let two = fs::metadata(null.path("other/two")).unwrap();
    assert_eq!(two.nlink(), 1);
    assert_eq!(read_uncached(&null.path("other/two")), b"second");
    let dir_link = fs::hard_link(null.path("other"), null.path("other2"));
    assert_eq!(errno(dir_link), libc::EPERM);
    null.unmount();
}

#[test]
fn symlinks_read_back_their_targets() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    fs::create_dir_all(null.path("t")).unwrap();
    fs::create_dir_all(null.path("l")).unwrap();
    fs::write(null.path("t/file"), b"through the link").unwrap();
    symlink("../t/file", null.path("l/link")).unwrap();
    symlink("nowhere", null.path("l/dangling")).unwrap();
    assert_eq!(
        fs::read_link(null.path("l/link")).unwrap(),
        Path::new("../t/file")
    );
    let metadata = fs::symlink_metadata(null.path("l/link")).unwrap();
    assert!(metadata.file_type().is_symlink());
    assert_eq!(metadata.len(), "../t/file".len() as u64);
    assert_eq!(read_uncached(&null.path("l/link")), b"through the link");
    assert_eq!(
        fs::metadata(null.path("l/dangling")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(fs::symlink_metadata(null.path("l/dangling")).is_ok());
    null.unmount();
}

#[test]
fn removal_refuses_the_wrong_kind_and_full_directories() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    fs::create_dir_all(null.path("d/e")).unwrap();
    fs::write(null.path("d/f"), b"bytes").unwrap();
    assert_eq!(errno(fs::remove_dir(null.path("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_dir(null.path("d/f"))), libc::ENOTDIR);
    assert_eq!(errno(fs::remove_file(null.path("d/e"))), libc::EISDIR);
    // A file unlinked while open stays readable through its descriptor.
    let mut open = File::open(null.path("d/f")).unwrap();
    fs::remove_file(null.path("d/f")).unwrap();
    drop_pages(&open);
    let mut bytes = Vec::new();
    open.read_to_end(&mut bytes).unwrap();
    assert_eq!(bytes, b"bytes");
    assert_eq!(open.metadata().unwrap().nlink(), 0);
    drop(open);
    fs::remove_dir(null.path("d/e")).unwrap();
    assert_eq!(fs::metadata(null.path("d")).unwrap().nlink(), 2);
    fs::remove_dir(null.path("d")).unwrap();
    assert!(names(&null.mnt).is_empty());
    null.unmount();
}

/// Entries of the directory listed while its entries are removed: several getdents calls.
const WIDE: usize = 2000;

#[test]
fn rm_rf_removes_a_tree_of_thousands_of_files() {
    let Some(null) = Null::mount(&["rm"]) else {
        return;
    };
    let figures = statvfs(&null.mnt);
    assert_eq!(figures.f_blocks * figures.f_frsize, 1 << 50);
    for top in 0..4 {
        for sub in 0..5 {
            let dir = null.path(&format!("tree/d{top:03}/s{sub:02}"));
            fs::create_dir_all(&dir).unwrap();
            for index in 0..150 {
                fs::write(dir.join(format!("file{index:06}.rs")), b"fn main() {}\n").unwrap();
            }
        }
    }
    // Removing each entry as the listing returns it skips nothing: offsets do not shift. The
    // directory is listed in several getdents calls (32 KiB each), so later calls continue
    // from an offset after removals.
    let wide = null.path("tree/wide");
    fs::create_dir(&wide).unwrap();
    for index in 0..WIDE {
        fs::write(wide.join(format!("file{index:06}.rs")), b"").unwrap();
    }
    let mut removed = 0;
    for entry in fs::read_dir(&wide).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
        removed += 1;
    }
    assert_eq!(removed, WIDE);
    assert!(names(&wide).is_empty());

    run(&null.mnt, "rm", &["-rf", "tree"], &[]);
    assert!(!null.path("tree").exists());
    assert!(names(&null.mnt).is_empty());
    // Every inode but the root goes once the kernel forgets it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while statvfs(&null.mnt).f_files != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(statvfs(&null.mnt).f_files, 1);
    null.unmount();
}

#[test]
fn a_file_grown_past_4_mib_reads_zeros() {
    let Some(null) = Null::mount(&[]) else {
        return;
    };
    let limit = tarn_fuse::null::KEEP_BYTES_MAX as usize;
    // At the limit the bytes are kept.
    let kept: Vec<u8> = (0..limit).map(|index| (index % 251) as u8).collect();
    fs::write(null.path("kept"), &kept).unwrap();
    assert!(read_uncached(&null.path("kept")) == kept);
    // One byte more and they are dropped: the file reads as zeros of its size.
    let mut file = OpenOptions::new()
        .append(true)
        .open(null.path("kept"))
        .unwrap();
    file.write_all(b"!").unwrap();
    drop(file);
    let grown = fs::read(null.path("kept")).unwrap();
    assert_eq!(grown.len(), limit + 1);
    assert!(grown.iter().all(|&b| b == 0));
    // Written past the limit in one go.
    fs::write(null.path("big"), vec![0xab; 5 << 20]).unwrap();
    let big = fs::read(null.path("big")).unwrap();
    assert_eq!(big.len(), 5 << 20);
    assert!(big.iter().all(|&b| b == 0));
    // Truncated to nothing, a file keeps its bytes again.
    fs::write(null.path("big"), b"small again").unwrap();
    assert_eq!(read_uncached(&null.path("big")), b"small again");
    null.unmount();
}

#[test]
fn git_init_add_commit_and_status_inside_the_mount() {
    let Some(null) = Null::mount(&["git"]) else {
        return;
    };
    let repo = null.path("repo");
    fs::create_dir_all(repo.join("src/lib")).unwrap();
    fs::write(repo.join("README"), b"a tree in memory\n").unwrap();
    fs::write(repo.join("src/main.rs"), b"fn main() {}\n").unwrap();
    fs::write(repo.join("src/lib/mod.rs"), b"pub fn f() -> u32 { 7 }\n").unwrap();
    let home = null.dir.path();
    let envs = [
        ("HOME", home),
        ("GIT_CONFIG_GLOBAL", Path::new("/dev/null")),
        ("GIT_CONFIG_NOSYSTEM", Path::new("1")),
    ];
    let git = |args: &[&str]| {
        let mut all = vec![
            "-c",
            "user.name=tarn",
            "-c",
            "user.email=tarn@example.com",
            "-c",
            "init.defaultBranch=main",
        ];
        all.extend_from_slice(args);
        run(&repo, "git", &all, &envs)
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "x"]);
    assert_eq!(git(&["status", "--porcelain"]), "");
    assert_eq!(git(&["ls-files"]), "README\nsrc/lib/mod.rs\nsrc/main.rs\n");
    // The objects read back from the file system, not the page cache (fsck reads every
    // one), and so does a blob.
    drop_pages_below(&repo);
    git(&["fsck", "--strict"]);
    assert_eq!(
        git(&["cat-file", "-p", "HEAD:src/lib/mod.rs"]),
        "pub fn f() -> u32 { 7 }\n"
    );
    fs::write(repo.join("README"), b"changed\n").unwrap();
    assert_eq!(git(&["status", "--porcelain"]), " M README\n");
    drop_pages_below(&repo);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "y"]);
    assert_eq!(git(&["status", "--porcelain"]), "");
    assert_eq!(git(&["rev-list", "--count", "HEAD"]), "2\n");
    null.unmount();
}

/// What a tree holds: each path (relative) with its kind, mode, size, bytes or target, and
/// mtime (files and directories).
fn walk(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let metadata = fs::symlink_metadata(&path).unwrap();
            let mode = metadata.mode() & 0o7777;
            let description = if metadata.is_symlink() {
                format!("symlink -> {:?}", fs::read_link(&path).unwrap())
            } else if metadata.is_dir() {
                pending.push(path.clone());
                format!("dir {mode:o} mtime {}", metadata.mtime())
            } else {
                let bytes = read_uncached(&path);
                format!(
                    "file {mode:o} {} links {} mtime {} {:?}",
                    metadata.len(),
                    metadata.nlink(),
                    metadata.mtime(),
                    bytes
                )
            };
            found.insert(path.strip_prefix(root).unwrap().to_path_buf(), description);
        }
    }
    found
}

#[test]
fn tar_extracts_a_tree_with_the_same_files() {
    let Some(null) = Null::mount(&["tar"]) else {
        return;
    };
    let host = tempfile::tempdir().unwrap();
    let source = host.path().join("source");
    for top in 0..3 {
        for sub in 0..3 {
            let dir = source.join(format!("d{top:03}/s{sub:02}"));
            fs::create_dir_all(&dir).unwrap();
            for index in 0..40 {
                let number = (top * 3 + sub) * 40 + index;
                let text = format!("// file {number}\n").repeat(number % 97);
                fs::write(dir.join(format!("file{number:06}.rs")), text).unwrap();
            }
        }
    }
    fs::create_dir(source.join("empty")).unwrap();
    symlink("d000/s00/file000000.rs", source.join("link")).unwrap();
    fs::hard_link(
        source.join("d001/s01/file000160.rs"),
        source.join("d002/hard.rs"),
    )
    .unwrap();
    let script = source.join("d000/run.sh");
    fs::write(&script, b"#!/bin/sh\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let archive = host.path().join("tree.tar");
    let archive_arg = archive.to_str().unwrap();
    run(
        host.path(),
        "tar",
        &["-cf", archive_arg, "-C", "source", "."],
        &[],
    );

    let target = null.path("x");
    fs::create_dir(&target).unwrap();
    run(&target, "tar", &["-xf", archive_arg], &[]);
    let (expected, extracted) = (walk(&source), walk(&target));
    assert_eq!(expected.len(), 9 * 40 + 3 + 9 + 4);
    assert_eq!(extracted, expected);
    null.unmount();
}
