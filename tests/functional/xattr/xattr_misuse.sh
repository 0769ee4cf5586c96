#!/usr/bin/env bash
# Misuse of xattrs gets the errno ext4 gives and changes nothing: a missing name (ENODATA),
# XATTR_CREATE on an existing name (EEXIST), XATTR_REPLACE on a missing one (ENODATA), a name
# over 255 bytes (ERANGE), a value over 64 KiB (E2BIG), an unknown namespace (EOPNOTSUPP),
# ACL names with acltype=off (EOPNOTSUPP), a small buffer (ERANGE); bad property values.
. "$STF_SUITE/include/libtest.sh"
require_dataset_verbs
require_python
log_assert "xattr misuse gives ext4's errors"
trap destroy_all_pools EXIT

default_setup
dir=$ALTROOT/$TESTPOOL
echo data >"$dir/f"
log_must setfattr -n user.a -v 1 "$dir/f"
log_mustnot_msg "No such attribute" getfattr -n user.missing "$dir/f"
log_mustnot_msg "No such attribute" setfattr -x user.missing "$dir/f"
log_mustnot_msg "Operation not supported" setfacl -m u:1234:rw "$dir/f"
log_must python3 - "$dir/f" <<'PY'
import errno, os, sys
path = sys.argv[1]
def expect(code, call, *args):
    try:
        call(*args)
    except OSError as error:
        assert error.errno == code, f"{call.__name__}{args[1:]}: {error}"
        return
    raise AssertionError(f"{call.__name__}{args[1:]} succeeded")
expect(errno.EEXIST, os.setxattr, path, "user.a", b"2", os.XATTR_CREATE)
expect(errno.ENODATA, os.setxattr, path, "user.b", b"2", os.XATTR_REPLACE)
expect(errno.ERANGE, os.setxattr, path, "user." + "n" * 251, b"v")
expect(errno.E2BIG, os.setxattr, path, "user.big", b"v" * 65537)
expect(errno.EOPNOTSUPP, os.setxattr, path, "bogus.name", b"v")
expect(errno.EOPNOTSUPP, os.setxattr, path, "system.posix_acl_access", b"\x02\0\0\0")
assert os.getxattr(path, "user.a") == b"1", "refused calls changed the value"
assert os.listxattr(path) == ["user.a"], os.listxattr(path)
# The largest name and value are fine.
os.setxattr(path, "user." + "n" * 250, b"v" * 65536)
assert len(os.getxattr(path, "user." + "n" * 250)) == 65536
PY
log_mustnot_msg "invalid value" tarn set xattr=bogus "$TESTPOOL"
log_mustnot_msg "invalid value" tarn set acltype=nfsv4 "$TESTPOOL"
assert_prop "$TESTPOOL" xattr sa
assert_prop "$TESTPOOL" acltype off
verify_pool "$TESTPOOL"
log_pass
