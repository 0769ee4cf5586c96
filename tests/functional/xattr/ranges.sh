#!/usr/bin/env bash
# The rest of POSIX through the CLI's mounts: fallocate punch hole and zero range free and
# zero, mode 0 grows the size without space; SEEK_DATA/SEEK_HOLE find a sparse file's holes;
# copy_file_range copies; statfs reports 4 KiB blocks whatever the recordsize; misuse errors.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_python
log_assert "fallocate, seek data/hole, copy_file_range and statfs"
trap destroy_all_pools EXIT

default_setup
fs=$TESTPOOL/fs dir=$ALTROOT/$TESTPOOL/fs
log_must tarn create -o recordsize=128K -o compression=off "$fs"
assert_eq "$(stat -f -c '%S %s' "$dir")" "4096 4096" "statfs block and fragment size"
head -c $((1024 * 1024)) /dev/urandom >"$dir/f"
log_must tarn pool sync "$TESTPOOL"
before=$(stat -c %b "$dir/f")
log_must fallocate -p -o 131072 -l 393216 "$dir/f"
assert_eq "$(stat -c %s "$dir/f")" 1048576 "punch keeps the size"
log_must tarn pool sync "$TESTPOOL"
after=$(stat -c %b "$dir/f")
[ "$after" -lt "$before" ] || log_fail "punching 3 records freed nothing ($before -> $after blocks)"
log_must fallocate -z -o 10 -l 20 "$dir/f"
log_must fallocate -l 2M "$dir/f"
assert_eq "$(stat -c %s "$dir/f")" 2097152 "mode 0 grows the size"
log_must python3 - "$dir/f" <<'PY'
import errno, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
assert os.lseek(fd, 0, os.SEEK_HOLE) == 131072, os.lseek(fd, 0, os.SEEK_HOLE)
assert os.lseek(fd, 131072, os.SEEK_DATA) == 524288
assert os.lseek(fd, 524288, os.SEEK_HOLE) == 1048576
try:
    os.lseek(fd, 1048576, os.SEEK_DATA)
    raise AssertionError("SEEK_DATA past the last data")
except OSError as error:
    assert error.errno == errno.ENXIO, error
data = os.pread(fd, 1048576, 0)
assert data[10:30] == bytes(20) and data[131072:524288] == bytes(393216)
out = os.open(path + ".copy", os.O_WRONLY | os.O_CREAT, 0o644)
done = 0
while done < 2097152:
    copied = os.copy_file_range(fd, out, 2097152 - done, done, done)
    assert copied > 0, f"copy_file_range stopped at {done}"
    done += copied
os.close(out)
with open(path, "rb") as a, open(path + ".copy", "rb") as b:
    assert a.read() == b.read(), "copy differs"
try:
    os.posix_fallocate(fd, 0, 0)
except OSError as error:
    assert error.errno == errno.EINVAL, error
PY
log_mustnot_msg "Operation not supported" fallocate -c -o 0 -l 131072 "$dir/f"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
