#!/usr/bin/env bash
# Every verb tarn --help lists (and every sub-verb of pool, debug, bench), found at run time so
# that new verbs are covered: an unknown option, and missing required arguments, give a non-zero
# exit, a usage text on stderr, and no panic; the pools are unchanged.
. "$STF_SUITE/include/libtest.sh"
log_assert "every verb rejects unknown options and missing arguments with its usage"
trap destroy_all_pools EXIT

# commands HELP-ARGS...: the sub-commands listed under "Commands:" in a help text.
commands() {
	tarn "$@" --help | awk '/^Commands:/ { on = 1; next } on && /^$/ { on = 0 } on { print $1 }' | grep -vx help
}

default_setup
pools_before=$(pool_names)
verbs=()
for verb in $(commands); do
	subverbs=$(commands "$verb" 2>/dev/null)
	if [ -n "$subverbs" ]; then
		for sub in $subverbs; do verbs+=("$verb $sub"); done
	else
		verbs+=("$verb")
	fi
done
[ "${#verbs[@]}" -ge 10 ] || log_fail "only ${#verbs[@]} verbs found in tarn --help"
log_note "verbs: ${verbs[*]}"

for verb in "${verbs[@]}"; do
	# shellcheck disable=SC2086 # a verb is one or two words
	log_mustnot_msg "Usage" tarn $verb --no-such-option
	# shellcheck disable=SC2086
	usage=$(tarn $verb --help | grep '^Usage:')
	[ -n "$usage" ] || log_fail "tarn $verb --help has no Usage line"
	if [[ $usage == *"<"* ]]; then
		# shellcheck disable=SC2086
		log_mustnot_msg "Usage" tarn $verb
		stderr_has "required"
	fi
done
assert_eq "$(pool_names)" "$pools_before" "pools after the misuse"
verify_pool "$TESTPOOL"
log_pass
