"""The checks of scripts/posix-conformance.sh: each returns an outcome (a value, or the errno
name of the failure) on one file system; the runner compares tarn's with the host's."""

import errno
import os
import stat
import sys

SEEK_DATA, SEEK_HOLE = 3, 4
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 0x10
RENAME_WHITEOUT = 4

# Differences explained in README.md ("What still differs from ext4"): name -> why.
KNOWN = {
    "statfs_bsize": "tarn reports 4 KiB like ext4; a host with another block size differs",
    "xattr_many_small": "ext4 keeps one block of xattrs per inode (ENOSPC), tarn 64 KiB of names",
    "xattr_total_large": "ext4 without ea_inode keeps one block of xattrs per inode",
    "seek_hole_granularity": "holes are whole records on tarn (the recordsize), 4 KiB on ext4",
    "fallocate_collapse": "FUSE passes only KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE (no collapse/insert)",
}


def outcome(call):
    try:
        result = call()
        return "ok" if result is None else repr(result)
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))


def fallocate(fd, mode, offset, length):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def renameat2(old, new, flags):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    if libc.renameat2(-100, old.encode(), -100, new.encode(), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def acl(entries):
    """A posix_acl_xattr value from (tag, perm, id) triples."""
    out = (2).to_bytes(4, "little")
    for tag, perm, ident in entries:
        out += tag.to_bytes(2, "little") + perm.to_bytes(2, "little")
        out += (ident & 0xFFFFFFFF).to_bytes(4, "little")
    return out


def checks(root):
    """(name, thunk) pairs; each thunk runs in a fresh subdirectory of root."""
    f = os.path.join(root, "f")

    def new_file(data=b"data"):
        with open(f, "wb") as handle:
            handle.write(data)

    def xattr_roundtrip():
        new_file()
        os.setxattr(f, "user.a", b"value")
        return os.getxattr(f, "user.a")

    def xattr_missing():
        new_file()
        return os.getxattr(f, "user.missing")

    def xattr_create_exists():
        new_file()
        os.setxattr(f, "user.a", b"1")
        os.setxattr(f, "user.a", b"2", os.XATTR_CREATE)

    def xattr_replace_missing():
        new_file()
        os.setxattr(f, "user.a", b"2", os.XATTR_REPLACE)

    def xattr_name_255():
        new_file()
        os.setxattr(f, "user." + "n" * 250, b"v")
        return len(os.getxattr(f, "user." + "n" * 250))

    def xattr_name_256():
        new_file()
        os.setxattr(f, "user." + "n" * 251, b"v")

    def xattr_value_too_big():
        new_file()
        os.setxattr(f, "user.big", b"v" * 65537)

    def xattr_value_4000():
        new_file()
        os.setxattr(f, "user.mid", b"v" * 4000)
        return len(os.getxattr(f, "user.mid"))

    def xattr_total_large():
        new_file()
        os.setxattr(f, "user.large", b"v" * 65536)
        return len(os.getxattr(f, "user.large"))

    def xattr_bad_namespace():
        new_file()
        os.setxattr(f, "bogus.name", b"v")

    def xattr_list():
        new_file()
        for name in ("user.b", "user.a", "trusted.t"):
            os.setxattr(f, name, b"1")
        return sorted(os.listxattr(f))

    def xattr_remove():
        new_file()
        os.setxattr(f, "user.a", b"1")
        os.removexattr(f, "user.a")
        return os.listxattr(f)

    def xattr_remove_missing():
        new_file()
        os.removexattr(f, "user.a")

    def xattr_many_small():
        new_file()
        for index in range(200):
            os.setxattr(f, f"user.k{index:03}", b"v" * 32)
        return len(os.listxattr(f))

    def xattr_on_symlink_user():
        new_file()
        link = os.path.join(root, "l")
        os.symlink("f", link)
        os.setxattr(link, "user.a", b"1", follow_symlinks=False)

    def xattr_on_directory():
        d = os.path.join(root, "d")
        os.mkdir(d)
        os.setxattr(d, "user.a", b"dir")
        return os.getxattr(d, "user.a")

    def acl_access_sets_mode():
        new_file()
        os.chmod(f, 0o600)
        os.setxattr(
            f,
            "system.posix_acl_access",
            acl([(1, 6, -1), (2, 4, 4321), (4, 0, -1), (0x10, 4, -1), (0x20, 0, -1)]),
        )
        return oct(stat.S_IMODE(os.stat(f).st_mode))

    def acl_minimal_is_mode():
        new_file()
        os.setxattr(f, "system.posix_acl_access", acl([(1, 7, -1), (4, 5, -1), (0x20, 1, -1)]))
        return (oct(stat.S_IMODE(os.stat(f).st_mode)), "system.posix_acl_access" in os.listxattr(f))

    def acl_chmod_updates_mask():
        new_file()
        os.setxattr(
            f,
            "system.posix_acl_access",
            acl([(1, 6, -1), (2, 6, 4321), (4, 4, -1), (0x10, 6, -1), (0x20, 0, -1)]),
        )
        os.chmod(f, 0o640)
        value = os.getxattr(f, "system.posix_acl_access")
        return value[4 + 3 * 8 + 2]  # the mask entry's permissions

    def acl_default_inherited():
        d = os.path.join(root, "d")
        os.mkdir(d)
        os.setxattr(
            d,
            "system.posix_acl_default",
            acl([(1, 7, -1), (2, 7, 4321), (4, 5, -1), (0x10, 7, -1), (0x20, 0, -1)]),
        )
        old = os.umask(0o077)
        try:
            fd = os.open(os.path.join(d, "new"), os.O_CREAT | os.O_WRONLY, 0o666)
            os.close(fd)
        finally:
            os.umask(old)
        child = os.path.join(d, "new")
        return (oct(stat.S_IMODE(os.stat(child).st_mode)), len(os.getxattr(child, "system.posix_acl_access")))

    def acl_default_on_file():
        new_file()
        os.setxattr(f, "system.posix_acl_default", acl([(1, 7, -1), (4, 5, -1), (0x20, 1, -1)]))

    def acl_invalid():
        new_file()
        os.setxattr(f, "system.posix_acl_access", b"\x02\x00\x00\x00\x01\x00")

    def punch_hole():
        new_file(os.urandom(1 << 20))
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 262144, 524288)
            data = os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
        return (os.stat(f).st_size, data[262144:786432] == bytes(524288))

    def punch_without_keep_size():
        new_file()
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)
        finally:
            os.close(fd)

    def zero_range_extends():
        new_file(b"x" * 100)
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, FALLOC_FL_ZERO_RANGE, 50, 200)
            data = os.pread(fd, 300, 0)
        finally:
            os.close(fd)
        return (os.stat(f).st_size, data[50:250] == bytes(200), data[:50] == b"x" * 50)

    def fallocate_mode0_extends():
        new_file()
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, 0, 0, 1 << 20)
        finally:
            os.close(fd)
        return os.stat(f).st_size

    def fallocate_keep_size():
        new_file()
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
        finally:
            os.close(fd)
        return os.stat(f).st_size

    def fallocate_collapse():
        new_file(b"x" * 65536)
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, 0x08, 0, 4096)
        finally:
            os.close(fd)

    def fallocate_zero_length():
        new_file()
        fd = os.open(f, os.O_RDWR)
        try:
            fallocate(fd, 0, 0, 0)
        finally:
            os.close(fd)

    def sparse(data_at):
        """A 4 MiB file with 4 KiB of data at each offset in data_at."""
        fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        for offset in data_at:
            os.pwrite(fd, b"d" * 4096, offset)
        os.ftruncate(fd, 4 << 20)
        return fd

    def seek_data_finds_data():
        fd = sparse([1 << 20])
        try:
            return os.lseek(fd, 0, SEEK_DATA) // (128 << 10) * (128 << 10)
        finally:
            os.close(fd)

    def seek_hole_at_start():
        fd = sparse([1 << 20])
        try:
            return os.lseek(fd, 0, SEEK_HOLE)
        finally:
            os.close(fd)

    def seek_hole_granularity():
        fd = sparse([1 << 20])
        try:
            return os.lseek(fd, 1 << 20, SEEK_HOLE)
        finally:
            os.close(fd)

    def seek_data_past_end():
        fd = sparse([0])
        try:
            return os.lseek(fd, 4 << 20, SEEK_DATA)
        finally:
            os.close(fd)

    def seek_data_none_left():
        fd = sparse([0])
        try:
            return os.lseek(fd, 2 << 20, SEEK_DATA)
        finally:
            os.close(fd)

    def seek_hole_end_of_file():
        fd = sparse([0])
        try:
            os.pwrite(fd, b"d" * (4 << 20), 0)
            return os.lseek(fd, 0, SEEK_HOLE)
        finally:
            os.close(fd)

    def copy_file_range_copies():
        new_file(os.urandom(300000))
        source = os.open(f, os.O_RDONLY)
        target = os.open(f + ".copy", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            done = 0
            while done < 300000:
                copied = os.copy_file_range(source, target, 300000 - done, done, done)
                if copied == 0:
                    break
                done += copied
        finally:
            os.close(source)
            os.close(target)
        with open(f, "rb") as a, open(f + ".copy", "rb") as b:
            return (done, a.read() == b.read())

    def rename_whiteout():
        new_file()
        renameat2(f, f + ".moved", RENAME_WHITEOUT)
        info = os.lstat(f)
        return (stat.S_ISCHR(info.st_mode), info.st_rdev)

    def rename_noreplace_exists():
        new_file()
        open(f + ".other", "w").close()
        renameat2(f, f + ".other", 1)

    def statfs_bsize():
        figures = os.statvfs(root)
        return (figures.f_bsize, figures.f_frsize)

    def statfs_namemax():
        return os.statvfs(root).f_namemax

    return [(name, thunk) for name, thunk in locals().items() if callable(thunk) and name not in ("new_file", "sparse")]


def run(root, name):
    work = os.path.join(root, "conformance", name)
    os.makedirs(work, exist_ok=True)
    table = dict(checks(work))
    return outcome(table[name])


def main():
    tarn, host = sys.argv[1], sys.argv[2]
    names = [name for name, _ in checks(tarn)]
    width = max(len(name) for name in names)
    agree = unexpected = 0
    print(f"{'check':<{width}}  {'tarn':<28}  {'host':<28}  verdict")
    for name in names:
        ours, theirs = run(tarn, name), run(host, name)
        if ours == theirs:
            verdict = "same"
            agree += 1
        elif name in KNOWN:
            verdict = "known: " + KNOWN[name]
        else:
            verdict = "DIFFERS"
            unexpected += 1
        print(f"{name:<{width}}  {ours[:28]:<28}  {theirs[:28]:<28}  {verdict}")
    print(f"{len(names)} checks, {agree} agree, {len(names) - agree - unexpected} known differences, {unexpected} unexpected")
    sys.exit(1 if unexpected else 0)


if __name__ == "__main__":
    main()
