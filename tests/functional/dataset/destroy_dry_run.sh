#!/usr/bin/env bash
# `destroy -n -r -R` once listed the hierarchy alone and left out the clones the
# real run destroys (a clone of a snapshot outside the hierarchy, and a clone of a child's
# snapshot), and `-R` without `-r` was refused by the dry run although -R implies -r. A dry
# run must list exactly what the real run destroys, in the same order and format ("would
# destroy" / "will destroy"); `destroy -r` without -R of a file system with an outside clone
# is refused, names the clones, and destroys nothing.
. "$STF_SUITE/include/libtest.sh"
require_snapshot_verbs
log_assert "destroy -n lists exactly what destroy destroys; -R implies -r; outside clones need -R"
trap destroy_all_pools EXIT

default_setup

# build TOP: TOP/a, TOP/a/b, snapshots of each, a clone of TOP@s outside TOP (with a child
# and a snapshot of its own, itself cloned), and a clone of TOP/a@s outside TOP.
build() {
	local top=$1 outside=$2
	log_must tarn create -p "$top/a/b"
	log_must tarn create "$outside"
	echo data >"$ALTROOT/$top/a/file"
	log_must tarn snapshot -r "$top@s"
	log_must tarn clone "$top@s" "$outside/c1"
	log_must tarn create "$outside/c1/kid"
	log_must tarn snapshot -r "$outside/c1@t"
	log_must tarn clone "$outside/c1/kid@t" "$outside/c3"
	log_must tarn clone "$top/a@s" "$outside/c2"
}

# names VERB FILE: the names after "VERB destroy " in FILE, in order.
names() { sed -n "s/^$1 destroy //p" "$2"; }

# everything TOP holds and everything under OUTSIDE (file systems and snapshots), sorted.
present() {
	tarn list -H -o name -t all | grep -E "^($1([/@]|\$)|$2/)" | sort
}

check_run() {
	local top=$1 outside=$2
	shift 2
	build "$top" "$outside"
	local before
	before=$(present "$top" "$outside")
	log_must tarn destroy -n -v "$@" "$top"
	names would "$LAST_STDOUT" >"$TEST_WORKDIR/would"
	assert_eq "$(present "$top" "$outside")" "$before" "datasets after the dry run"
	for clone in "$outside/c1" "$outside/c1/kid" "$outside/c2" "$outside/c3" "$outside/c1@t"; do
		grep -qx -- "$clone" "$TEST_WORKDIR/would" || log_fail "the dry run leaves out $clone"
	done
	log_must tarn destroy -v "$@" "$top"
	names will "$LAST_STDOUT" >"$TEST_WORKDIR/will"
	assert_eq "$(cat "$TEST_WORKDIR/will")" "$(cat "$TEST_WORKDIR/would")" \
		"what destroy $* destroys against what its dry run listed"
	assert_eq "$(sort "$TEST_WORKDIR/would")" "$before" "the dry run against the datasets there"
	assert_eq "$(present "$top" "$outside")" "" "datasets left after destroy $*"
}

TEST_WORKDIR=$(mktemp -d)
check_run "$TESTPOOL/top" "$TESTPOOL/out" -r -R
# -R alone implies -r, in the dry run as in the real run.
check_run "$TESTPOOL/top2" "$TESTPOOL/out2" -R

# Without -R, an outside clone refuses the destroy (naming it), and nothing goes.
build "$TESTPOOL/top3" "$TESTPOOL/out3"
before=$(present "$TESTPOOL/top3" "$TESTPOOL/out3")
log_mustnot_msg "use -R to destroy the following datasets" tarn destroy -r "$TESTPOOL/top3"
stderr_has "$TESTPOOL/out3/c1"
stderr_has "$TESTPOOL/out3/c2"
log_mustnot_msg "use -R to destroy the following datasets" tarn destroy -n -r "$TESTPOOL/top3"
assert_eq "$(present "$TESTPOOL/top3" "$TESTPOOL/out3")" "$before" "datasets after the refused destroy -r"
assert_mounted "$TESTPOOL/top3/a" "$ALTROOT/$TESTPOOL/top3/a"

# A snapshot's destroy -n -R lists its clones' plans, and the real run removes exactly those.
build "$TESTPOOL/top4" "$TESTPOOL/out4"
before=$(present "$TESTPOOL/top4" "$TESTPOOL/out4")
log_must tarn destroy -n -R "$TESTPOOL/top4@s"
names would "$LAST_STDOUT" | sort >"$TEST_WORKDIR/would"
grep -qx -- "$TESTPOOL/out4/c3" "$TEST_WORKDIR/would" || log_fail "destroy -n -R FS@SNAP leaves out a clone's clone"
log_must tarn destroy -R "$TESTPOOL/top4@s"
after=$(present "$TESTPOOL/top4" "$TESTPOOL/out4")
assert_eq "$(comm -23 <(echo "$before") <(echo "$after"))" "$(cat "$TEST_WORKDIR/would")" \
	"what destroy -R FS@SNAP removed against what its dry run listed"
rm -rf "$TEST_WORKDIR"
log_must tarn pool sync "$TESTPOOL"
verify_pool "$TESTPOOL"
log_pass
