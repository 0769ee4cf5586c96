#!/usr/bin/env bash
# Delegation as a real user other than root (setpriv to users of this test's own): reads
# need nothing; a change needs its permission, and a refusal names it and changes nothing;
# a grant lets it through, on the file system (-l), below it (-d) or both, to the user, to a
# group they are in, or to everyone; unallow takes it back; grants survive export and
# import; pool changes stay root's.
. "$STF_SUITE/include/libtest.sh"
. "$STF_SUITE/allow/users.shlib"
log_assert "users other than root read freely and change only what they were granted"
trap 'destroy_all_pools; remove_users' EXIT

make_users
default_setup
log_must tarn create "$TESTPOOL/a"
log_must tarn create "$TESTPOOL/a/b"
log_must tarn snapshot "$TESTPOOL/a@root"

# 1. Reads: no grant needed.
log_must as_user "$ALICE" list -r "$TESTPOOL"
stdout_has "$TESTPOOL/a/b"
log_must as_user "$ALICE" list -t snapshot
stdout_has "$TESTPOOL/a@root"
log_must as_user "$ALICE" get compression "$TESTPOOL/a"
log_must as_user "$ALICE" pool status "$TESTPOOL"
log_must as_user "$ALICE" pool list
log_must as_user "$ALICE" pool get all "$TESTPOOL"
log_must as_user "$ALICE" pool history "$TESTPOOL"
log_must as_user "$ALICE" holds "$TESTPOOL/a@root"
log_must as_user "$ALICE" userspace "$TESTPOOL/a"
log_must as_user "$ALICE" allow "$TESTPOOL/a"
log_must as_user "$ALICE" version

# 2. Changes without a grant: refused, naming the permission, nothing changed.
log_mustnot_msg "user $ALICE lacks 'snapshot' on $TESTPOOL/a (tarn allow -u $ALICE snapshot $TESTPOOL/a)" \
	as_user "$ALICE" snapshot "$TESTPOOL/a@mine"
log_mustnot tarn list -t snapshot "$TESTPOOL/a@mine"
log_mustnot_msg "lacks 'create' on $TESTPOOL/a" as_user "$ALICE" create "$TESTPOOL/a/new"
log_mustnot_msg "lacks 'destroy' on $TESTPOOL/a/b" as_user "$ALICE" destroy "$TESTPOOL/a/b"
log_mustnot_msg "lacks 'compression' on $TESTPOOL/a" as_user "$ALICE" set compression=off "$TESTPOOL/a"
log_mustnot_msg "lacks 'userprop' on $TESTPOOL/a" as_user "$ALICE" set com.example:x=1 "$TESTPOOL/a"
log_mustnot_msg "lacks 'rollback'" as_user "$ALICE" rollback "$TESTPOOL/a@root"
log_mustnot_msg "lacks 'hold'" as_user "$ALICE" hold keep "$TESTPOOL/a@root"
log_mustnot_msg "lacks 'send'" as_user "$ALICE" send "$TESTPOOL/a@root"
log_mustnot_msg "lacks 'mount'" as_user "$ALICE" unmount "$TESTPOOL/a/b"
log_mustnot_msg "lacks 'diff'" as_user "$ALICE" diff "$TESTPOOL/a@root"
assert_eq "$(get_source compression "$TESTPOOL/a")" "default" "source of compression"
is_mounted "$ALTROOT/$TESTPOOL/a/b" || log_fail "$TESTPOOL/a/b was unmounted"

# Pool changes, devices, debug and stop are root's, whatever is granted.
log_must tarn allow -e create,destroy,mount,snapshot "$TESTPOOL"
log_mustnot_msg "only root may run pool export" as_user "$ALICE" pool export "$TESTPOOL"
log_mustnot_msg "only root may run pool scrub" as_user "$ALICE" pool scrub "$TESTPOOL"
log_mustnot_msg "only root may run pool set" as_user "$ALICE" pool set comment=x "$TESTPOOL"
log_mustnot_msg "only root may" as_user "$ALICE" debug dataset "$TESTPOOL/a"
log_mustnot_msg "only root may run stop" as_user "$ALICE" daemon --stop
log_must tarn unallow -e "$TESTPOOL"
log_must tarn pool list "$TESTPOOL"

# 3. A user grant on the file system and below it.
log_must tarn allow -u "$ALICE" snapshot,mount "$TESTPOOL/a"
log_must as_user "$ALICE" snapshot "$TESTPOOL/a@mine"
log_must as_user "$ALICE" snapshot "$TESTPOOL/a/b@mine"
log_must tarn list -t snapshot "$TESTPOOL/a@mine"
log_mustnot_msg "user $BOB lacks 'snapshot'" as_user "$BOB" snapshot "$TESTPOOL/a@bob"

# 4. -l: the file system only; -d: below it only.
log_must tarn allow -l -u "$ALICE" hold,release "$TESTPOOL/a"
log_must as_user "$ALICE" hold keep "$TESTPOOL/a@mine"
log_mustnot_msg "lacks 'hold' on $TESTPOOL/a/b" as_user "$ALICE" hold keep "$TESTPOOL/a/b@mine"
log_must as_user "$ALICE" release keep "$TESTPOOL/a@mine"
log_must tarn allow -d -u "$ALICE" destroy "$TESTPOOL/a"
log_mustnot_msg "lacks 'destroy' on $TESTPOOL/a" as_user "$ALICE" destroy "$TESTPOOL/a@mine"
log_must as_user "$ALICE" destroy "$TESTPOOL/a/b@mine"
log_mustnot tarn list -t snapshot "$TESTPOOL/a/b@mine"

# 5. A group grant reaches its members (bob), not others (alice); everyone reaches all.
log_must tarn allow -g "$STAFF" create,mount "$TESTPOOL/a"
log_must as_user "$BOB" create "$TESTPOOL/a/bobs"
is_mounted "$ALTROOT/$TESTPOOL/a/bobs" || log_fail "$TESTPOOL/a/bobs is not mounted"
log_mustnot_msg "user $ALICE lacks 'create'" as_user "$ALICE" create "$TESTPOOL/a/alices"
log_must tarn allow -e send "$TESTPOOL/a"
as_user "$ALICE" send "$TESTPOOL/a@mine" >"$SCRATCH/stream" || log_fail "send as $ALICE"
log_must as_user "$BOB" send -n -v "$TESTPOOL/a@root"
# A refused send or receive leaves its connection in step: the refusal is its answer.
log_mustnot_msg "lacks 'send' on $TESTPOOL" as_user "$ALICE" send "$TESTPOOL@x"
log_mustnot_msg "user $ALICE lacks 'receive' on $TESTPOOL/a" \
	sh -c "setpriv --reuid=$ALICE --regid=$(id -g "$ALICE") --init-groups '$TARN' receive '$TESTPOOL/a/copy' <'$SCRATCH/stream'"
log_mustnot tarn list "$TESTPOOL/a/copy"
log_must tarn allow -u "$ALICE" receive,create "$TESTPOOL/a"
log_must sh -c "setpriv --reuid=$ALICE --regid=$(id -g "$ALICE") --init-groups '$TARN' receive '$TESTPOOL/a/copy' <'$SCRATCH/stream'"
log_must tarn list -t snapshot "$TESTPOOL/a/copy@mine"

# 6. Properties: each by its own name; user properties by userprop.
log_must tarn allow -u "$ALICE" compression,userprop "$TESTPOOL/a"
log_must as_user "$ALICE" set compression=off com.example:x=1 "$TESTPOOL/a"
assert_prop "$TESTPOOL/a" compression off local
log_mustnot_msg "lacks 'atime'" as_user "$ALICE" set atime=off "$TESTPOOL/a"
log_must as_user "$ALICE" inherit compression "$TESTPOOL/a"

# 7. Grants survive export and import; unallow takes them back.
log_must tarn pool export "$TESTPOOL"
import_pool "$TESTPOOL"
log_must as_user "$ALICE" snapshot "$TESTPOOL/a@after-import"
log_must tarn unallow -u "$ALICE" snapshot "$TESTPOOL/a"
log_mustnot_msg "lacks 'snapshot'" as_user "$ALICE" snapshot "$TESTPOOL/a@revoked"
log_must tarn unallow -g "$STAFF" "$TESTPOOL/a"
log_mustnot_msg "user $BOB lacks 'create'" as_user "$BOB" create "$TESTPOOL/a/bobs2"

# The pool history records who changed what.
log_must tarn pool history -l "$TESTPOOL"
stdout_has "snapshot $TESTPOOL/a@mine"
log_pass
