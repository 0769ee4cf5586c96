//! Extended attributes and the rest of POSIX through a real mount, with the system calls
//! programs use: setxattr/getxattr/listxattr/removexattr with the size probe (ERANGE for a
//! small buffer), XATTR_CREATE/XATTR_REPLACE, ENODATA, the name and value limits;
//! fallocate punch hole and zero range; lseek SEEK_DATA/SEEK_HOLE; copy_file_range;
//! renameat2 RENAME_WHITEOUT; statfs in 4 KiB blocks; cp -a keeping xattrs; project IDs and
//! the project inherit flag through the file attribute ioctls, with EXDEV for links and
//! renames across projects. Each test ends with `check` clean. Skipped (with a message) when
//! /dev/fuse is missing.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use tarn_fuse::fileattr::{
    FsXattr, FSXATTR_SIZE, FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS, FS_IOC_SETFLAGS,
    FS_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT,
};
use tarn_test_support::mounted::*;
use tarn_test_support::pattern;

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn c_name(name: &str) -> CString {
    CString::new(name).unwrap()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn set(path: &Path, name: &str, value: &[u8], flags: i32) -> Result<(), i32> {
    let result = unsafe {
        libc::setxattr(
            c_path(path).as_ptr(),
            c_name(name).as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// getxattr with the size probe first, as getfattr does.
fn get(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let (path, name) = (c_path(path), c_name(name));
    let size = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if size < 0 {
        return Err(last_errno());
    }
    let mut buffer = vec![0u8; size as usize];
    let got = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
        )
    };
    if got < 0 {
        return Err(last_errno());
    }
    buffer.truncate(got as usize);
    Ok(buffer)
}

fn get_into(path: &Path, name: &str, size: usize) -> Result<usize, i32> {
    let mut buffer = vec![0u8; size];
    let got = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            c_name(name).as_ptr(),
            buffer.as_mut_ptr().cast(),
            size,
        )
    };
    if got < 0 {
        Err(last_errno())
    } else {
        Ok(got as usize)
    }
}

fn list(path: &Path) -> Vec<String> {
    let path = c_path(path);
    let size = unsafe { libc::listxattr(path.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(size >= 0, "listxattr probe: {}", last_errno());
    let mut buffer = vec![0u8; size as usize];
    let got = unsafe { libc::listxattr(path.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    assert!(got >= 0, "listxattr: {}", last_errno());
    if size > 0 {
        let mut small = vec![0u8; 1];
        let refused = unsafe { libc::listxattr(path.as_ptr(), small.as_mut_ptr().cast(), 1) };
        assert_eq!((refused, last_errno()), (-1, libc::ERANGE));
    }
    let mut names: Vec<String> = buffer[..got as usize]
        .split(|&byte| byte == 0)
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8(name.to_vec()).unwrap())
        .collect();
    names.sort();
    names
}

fn remove(path: &Path, name: &str) -> Result<(), i32> {
    let result = unsafe { libc::removexattr(c_path(path).as_ptr(), c_name(name).as_ptr()) };
    if result == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

#[test]
fn xattrs_through_the_mount() {
    let Some(fixture) = MountedPool::new("xattrs") else {
        return;
    };
    let file = fixture.path("f");
    fs::write(&file, b"data").unwrap();
    assert_eq!(list(&file), Vec::<String>::new());
    assert_eq!(get(&file, "user.missing"), Err(libc::ENODATA));
    set(&file, "user.small", b"v1", 0).unwrap();
    set(&file, "trusted.t", b"root only", 0).unwrap();
    set(&file, "security.s", b"label", 0).unwrap();
    let large = pattern(1, 65536);
    set(&file, "user.large", &large, 0).unwrap();
    assert_eq!(get(&file, "user.small").unwrap(), b"v1");
    assert_eq!(get(&file, "user.large").unwrap(), large);
    assert_eq!(
        list(&file),
        vec!["security.s", "trusted.t", "user.large", "user.small"]
    );
    // The FUSE size probe: a buffer too small is ERANGE.
    assert_eq!(get_into(&file, "user.small", 1), Err(libc::ERANGE));
    assert_eq!(get_into(&file, "user.small", 2), Ok(2));
    // Flags.
    assert_eq!(
        set(&file, "user.small", b"x", libc::XATTR_CREATE),
        Err(libc::EEXIST)
    );
    assert_eq!(
        set(&file, "user.nope", b"x", libc::XATTR_REPLACE),
        Err(libc::ENODATA)
    );
    set(&file, "user.small", b"v2", libc::XATTR_REPLACE).unwrap();
    assert_eq!(get(&file, "user.small").unwrap(), b"v2");
    // Limits: as ext4 (the kernel refuses a value over 64 KiB and a name over 255 bytes).
    assert_eq!(
        set(&file, "user.toolarge", &vec![0; 65537], 0),
        Err(libc::E2BIG)
    );
    let long_name = format!("user.{}", "n".repeat(251));
    assert_eq!(set(&file, &long_name, b"v", 0), Err(libc::ERANGE));
    let longest = format!("user.{}", "n".repeat(250));
    set(&file, &longest, b"v", 0).unwrap();
    assert_eq!(get(&file, &longest).unwrap(), b"v");
    assert_eq!(set(&file, "bogus.name", b"v", 0), Err(libc::EOPNOTSUPP));
    // Remove.
    remove(&file, "user.large").unwrap();
    assert_eq!(remove(&file, "user.large"), Err(libc::ENODATA));
    assert_eq!(get(&file, "user.large"), Err(libc::ENODATA));
    // Directories have xattrs too; cp -a keeps them.
    let dir = fixture.path("d");
    fs::create_dir(&dir).unwrap();
    set(&dir, "user.on_dir", b"yes", 0).unwrap();
    fs::write(dir.join("inner"), b"x").unwrap();
    set(&dir.join("inner"), "user.inner", &pattern(2, 3000), 0).unwrap();
    sh(&format!(
        "cp -a {} {}",
        dir.display(),
        fixture.path("copy").display()
    ));
    assert_eq!(get(&fixture.path("copy"), "user.on_dir").unwrap(), b"yes");
    assert_eq!(
        get(&fixture.path("copy/inner"), "user.inner").unwrap(),
        pattern(2, 3000)
    );
    // Removing files with xattrs frees them (check at the end proves no leak).
    fs::remove_file(&file).unwrap();
    fs::remove_dir_all(fixture.path("copy")).unwrap();
    fixture.finish();
}

#[test]
fn fallocate_seek_copy_whiteout_and_statfs_through_the_mount() {
    let Some(fixture) = MountedPool::new("ranges") else {
        return;
    };
    let path = fixture.path("sparse");
    fs::write(&path, b"").unwrap();
    // The recordsize (st_blksize of a regular file) is the unit of holes.
    let block = fs::metadata(&path).unwrap().blksize() as i64;
    assert!(block >= 4096);
    {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        file.write_all(&pattern(3, (4 * block) as usize)).unwrap();
        let fd = file.as_raw_fd();
        // Punch block 1 whole and half of block 2.
        let punched = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                block,
                block + block / 2,
            )
        };
        assert_eq!(punched, 0, "punch: {}", last_errno());
        let seek = |offset: i64, whence: i32| unsafe { libc::lseek(fd, offset, whence) };
        assert_eq!(seek(0, libc::SEEK_HOLE), block);
        assert_eq!(seek(block, libc::SEEK_DATA), 2 * block);
        assert_eq!(seek(4 * block - 1, libc::SEEK_HOLE), 4 * block);
        assert_eq!(seek(4 * block, libc::SEEK_DATA), -1);
        assert_eq!(last_errno(), libc::ENXIO);
        // Not supported modes, and mode 0 growing the file.
        let collapse = unsafe { libc::fallocate(fd, libc::FALLOC_FL_COLLAPSE_RANGE, 0, block) };
        assert_eq!((collapse, last_errno()), (-1, libc::EOPNOTSUPP));
        assert_eq!(unsafe { libc::fallocate(fd, 0, 0, 6 * block) }, 0);
        assert_eq!(file.metadata().unwrap().len(), 6 * block as u64);
        let zeroed = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                10,
                20,
            )
        };
        assert_eq!(zeroed, 0, "zero range: {}", last_errno());
    }
    let mut expected = pattern(3, (4 * block) as usize);
    expected[block as usize..(2 * block + block / 2) as usize].fill(0);
    expected[10..30].fill(0);
    expected.resize((6 * block) as usize, 0);
    assert_eq!(fs::read(&path).unwrap(), expected);

    // copy_file_range: the copy has the same bytes.
    {
        let source = fs::File::open(&path).unwrap();
        let target = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(fixture.path("copy"))
            .unwrap();
        let mut left = expected.len();
        while left > 0 {
            let copied = unsafe {
                libc::copy_file_range(
                    source.as_raw_fd(),
                    std::ptr::null_mut(),
                    target.as_raw_fd(),
                    std::ptr::null_mut(),
                    left,
                    0,
                )
            };
            assert!(copied > 0, "copy_file_range: {}", last_errno());
            left -= copied as usize;
        }
    }
    assert_eq!(fs::read(fixture.path("copy")).unwrap(), expected);

    // renameat2 RENAME_WHITEOUT (needs CAP_MKNOD, which the test runs with as root).
    if unsafe { libc::geteuid() } == 0 {
        let renamed = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c_path(&fixture.path("copy")).as_ptr(),
                libc::AT_FDCWD,
                c_path(&fixture.path("moved")).as_ptr(),
                libc::RENAME_WHITEOUT,
            )
        };
        assert_eq!(renamed, 0, "renameat2: {}", last_errno());
        let whiteout = fs::symlink_metadata(fixture.path("copy")).unwrap();
        assert!(whiteout.file_type().is_char_device());
        assert_eq!(whiteout.rdev(), 0);
        assert_eq!(fs::read(fixture.path("moved")).unwrap(), expected);
        fs::remove_file(fixture.path("copy")).unwrap();
    }

    // statfs: 4 KiB blocks, whatever the recordsize.
    let mut figures: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::statvfs(c_path(&fixture.mountpoint).as_ptr(), &mut figures) },
        0
    );
    assert_eq!((figures.f_bsize, figures.f_frsize), (4096, 4096));
    assert!(figures.f_blocks > 0 && figures.f_bavail <= figures.f_blocks);
    fixture.finish();
}

/// `ioctl(path, command, buffer)`: the errno on failure.
fn ioctl(path: &Path, command: u32, buffer: &mut [u8]) -> Result<(), i32> {
    let file = fs::File::open(path).unwrap();
    let result = unsafe { libc::ioctl(file.as_raw_fd(), command as _, buffer.as_mut_ptr()) };
    if result == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// The project ID and xflags of `path` (FS_IOC_FSGETXATTR).
fn project_of(path: &Path) -> (u32, u32) {
    let mut raw = [0u8; FSXATTR_SIZE];
    ioctl(path, FS_IOC_FSGETXATTR, &mut raw).expect("FS_IOC_FSGETXATTR");
    let attr = FsXattr::decode(&raw).unwrap();
    (attr.project, attr.xflags)
}

fn set_project(path: &Path, project: u32, xflags: u32) -> Result<(), i32> {
    let mut raw = FsXattr { xflags, project }.encode();
    ioctl(path, FS_IOC_FSSETXATTR, &mut raw)
}

/// Guards the path chattr and lsattr take: the kernel turns FS_IOC_FSGETXATTR,
/// FS_IOC_FSSETXATTR, FS_IOC_GETFLAGS and FS_IOC_SETFLAGS into FUSE_IOCTL on a file it opens
/// itself; the project and the inherit flag set there must reach the engine, be inherited by
/// new nodes, make links and renames into another project EXDEV, and survive an import.
#[test]
fn project_ids_through_the_file_attribute_ioctls() {
    let Some(mut fixture) = MountedPool::new("fsxattr") else {
        return;
    };
    let tree = fixture.path("tree");
    let other = fixture.path("other");
    fs::create_dir(&tree).unwrap();
    fs::create_dir(&other).unwrap();
    assert_eq!(project_of(&tree), (0, 0));
    set_project(&tree, 42, FS_XFLAG_PROJINHERIT).unwrap();
    assert_eq!(project_of(&tree), (42, FS_XFLAG_PROJINHERIT));
    let mut flags = [0u8; 4];
    ioctl(&tree, FS_IOC_GETFLAGS, &mut flags).unwrap();
    assert_eq!(u32::from_ne_bytes(flags), FS_PROJINHERIT_FL);

    fs::write(tree.join("file"), b"in the tree").unwrap();
    fs::create_dir(tree.join("sub")).unwrap();
    assert_eq!(project_of(&tree.join("file")), (42, 0));
    assert_eq!(project_of(&tree.join("sub")), (42, FS_XFLAG_PROJINHERIT));
    fs::write(other.join("outside"), b"outside").unwrap();
    assert_eq!(project_of(&other.join("outside")), (0, 0));
    // A file's own project; the inherit flag asked for a file is dropped, as ext4 does.
    set_project(&other.join("outside"), 7, FS_XFLAG_PROJINHERIT).unwrap();
    assert_eq!(project_of(&other.join("outside")), (7, 0));
    // Flags this file system does not keep (FS_XFLAG_NOATIME), and other ioctls
    // (FS_IOC_GETVERSION).
    assert_eq!(
        set_project(&other.join("outside"), 7, 0x40),
        Err(libc::EOPNOTSUPP)
    );
    let mut version = [0u8; 8];
    assert_eq!(
        ioctl(&other.join("outside"), 0x8008_7601, &mut version),
        Err(libc::ENOTTY)
    );

    // Into a directory that passes on another project: EXDEV, and nothing moves.
    set_project(&other, 43, FS_XFLAG_PROJINHERIT).unwrap();
    assert_eq!(
        errno(fs::hard_link(tree.join("file"), other.join("file"))),
        libc::EXDEV
    );
    assert_eq!(
        errno(fs::rename(tree.join("file"), other.join("file"))),
        libc::EXDEV
    );
    assert_eq!(fs::read(tree.join("file")).unwrap(), b"in the tree");
    assert!(!other.join("file").exists());
    set_project(&tree.join("file"), 43, 0).unwrap();
    fs::rename(tree.join("file"), other.join("file")).unwrap();

    // FS_IOC_SETFLAGS clears the flag and keeps the project.
    let mut cleared = 0u32.to_ne_bytes();
    ioctl(&tree, FS_IOC_SETFLAGS, &mut cleared).unwrap();
    assert_eq!(project_of(&tree), (42, 0));
    fs::write(tree.join("late"), b"late").unwrap();
    assert_eq!(project_of(&tree.join("late")), (0, 0));

    fixture.reimport();
    assert_eq!(project_of(&tree), (42, 0));
    assert_eq!(project_of(&tree.join("sub")), (42, FS_XFLAG_PROJINHERIT));
    assert_eq!(project_of(&other.join("file")), (43, 0));
    assert_eq!(project_of(&other.join("outside")), (7, 0));
    fixture.finish();
}
