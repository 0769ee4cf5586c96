#!/usr/bin/env bash
# Long runs of the decoders' fuzzers (docs/design/invariants.md §6, invariant 6).
#
# A decoder fuzzer is a property test in a `proptest!` block configured by the engine's
# `fuzz_config!(N)`, N being its number of cases in CI; the list below is read from the
# sources, so a new fuzzer is run as soon as its block uses the macro. Each fuzzer runs alone,
# in the `fuzz` profile (optimized, with debug assertions and overflow checks as in CI's debug
# build), in batches of `TARN_FUZZ_CASES` cases (a fresh random seed each), until it has run the
# requested cases or its time budget is spent. A failure stops that fuzzer; proptest prints the
# minimal input in its log and saves it in the `.proptest-regressions` file beside the test.
#
#   bash scripts/fuzz-long.sh -l                         # the fuzzers and their cases in CI
#   nice bash scripts/fuzz-long.sh -n 10000 -t 20        # 10,000 cases each, at most ~20 s each
#   nice bash scripts/fuzz-long.sh -n 1000000 -t 7200    # the long run: a million, or two hours
#   nice bash scripts/fuzz-long.sh -f 'label|uberblock'  # only the fuzzers matching a regex
#
# The table (decoder, test, cases in CI, cases run, seconds, result) is printed at the end and
# kept with every fuzzer's log in target/fuzz-long/<time>/. The exit status is 1 if a fuzzer
# failed, hung (a batch ran ten times longer than its rate predicted) or ignored its count.
set -euo pipefail
cd "$(dirname "$0")/.."

# The whole script is one function, read before it runs: a long run is not thrown off by the
# file changing under it (a checkout or a pull during the run).
main() {
    cases_target=1000000
    budget_seconds=0
    filter=''
    list_only=0
    # A batch is sized to take about this long, so that a long run shows progress and a hang is
    # noticed within a bounded time.
    batch_seconds=300

    usage() {
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        echo "options: -n CASES (default $cases_target) -t SECONDS (per fuzzer; default none)"
        echo "         -f REGEX (run the fuzzers whose module::test matches) -l (list only) -h"
    }

    while getopts 'n:t:f:lh' option; do
        case "$option" in
            n) cases_target="$OPTARG" ;;
            t) budget_seconds="$OPTARG" ;;
            f) filter="$OPTARG" ;;
            l) list_only=1 ;;
            h) usage; exit 0 ;;
            *) usage >&2; exit 2 ;;
        esac
    done
    if ! [[ "$cases_target" =~ ^[1-9][0-9]{0,8}$ && "$budget_seconds" =~ ^[0-9]+$ ]]; then
        echo "fuzz-long: -n takes a positive count below a billion and -t whole seconds" >&2
        exit 2
    fi

    # The fuzzers, one line each: source file, module path, test function, cases in CI. A
    # function directly inside a `proptest!` block whose configuration names `fuzz_config!(N)` is
    # one (the block's closing brace is at the indentation of its opening line, as rustfmt and the
    # sources keep it).
    list_fuzzers() {
        local file module
        grep -rlE --include='*.rs' 'fuzz_config!\([0-9_]+\)' crates/engine/src crates/engine/tests |
            sort | while read -r file; do
            case "$file" in
                crates/engine/src/*)
                    module="${file#crates/engine/src/}"
                    module="${module%.rs}"
                    module="${module%/mod}"
                    module="${module//\//::}"
                    ;;
                *) module="tests::$(basename "$file" .rs)" ;;
            esac
            awk -v file="$file" -v module="$module" '
                !inside && /^ *(proptest::)?proptest! *\{ *$/ {
                    inside = 1; cases = ""; lead = $0; sub(/[^ ].*$/, "", lead); next
                }
                inside && $0 == lead "}" { inside = 0; next }
                inside && /fuzz_config!\([0-9_]+\)/ {
                    cases = $0; sub(/.*fuzz_config!\(/, "", cases); sub(/\).*/, "", cases)
                    gsub(/_/, "", cases)
                }
                inside && cases != "" && index($0, lead "    fn ") == 1 {
                    name = substr($0, length(lead) + 8); sub(/[^A-Za-z0-9_].*$/, "", name)
                    print file, module, name, cases
                }' "$file"
        done
    }

    # The decoder a fuzzer belongs to, as the table shows it: its module, without a `tests` leaf.
    decoder_of() {
        local module="${1%::tests}"
        echo "${module/%_tests/}"
    }

    fuzzers=$(list_fuzzers)
    if [ -z "$fuzzers" ]; then
        echo "fuzz-long: no fuzzer found (no proptest! block uses fuzz_config!)" >&2
        exit 1
    fi

    if [ "$list_only" -eq 1 ]; then
        printf '%-22s %-62s %s\n' decoder test 'cases in CI'
        while read -r file module name cases; do
            if [ -n "$filter" ] && ! [[ "$module::$name" =~ $filter ]]; then continue; fi
            printf '%-22s %-62s %s\n' "$(decoder_of "$module")" "$name" "$cases"
        done <<<"$fuzzers"
        # The property tests left out, so that a decoder's fuzzer written without the macro shows.
        echo
        echo "property tests not configured by fuzz_config! (model tests and the like; not run here):"
        grep -rlE --include='*.rs' 'proptest! *\{' crates | sort | while read -r file; do
            awk -v file="$file" '
                !inside && /^ *(proptest::)?proptest! *\{ *$/ {
                    inside = 1; fuzz = 0; lead = $0; sub(/[^ ].*$/, "", lead); next
                }
                inside && $0 == lead "}" { inside = 0; next }
                inside && /fuzz_config!/ { fuzz = 1 }
                inside && !fuzz && index($0, lead "    fn ") == 1 {
                    name = substr($0, length(lead) + 8); sub(/[^A-Za-z0-9_].*$/, "", name)
                    print "  " file ": " name
                }' "$file"
        done
        exit 0
    fi

    # The engine's integration tests are modules of a few binaries (crates/engine/tests/suite_*.rs,
    # Cargo.toml's [[test]] entries): the root source of the binary that holds FILE, and the
    # binary's name (a suite_X.rs root is test X; a file that is its own binary keeps its name).
    suite_source() {
        local root
        root=$(grep -l "^mod $(basename "$1" .rs);" crates/engine/tests/suite_*.rs 2>/dev/null | head -n 1)
        echo "${root:-$1}"
    }
    test_target() {
        local root
        root=$(basename "$(suite_source "$1")" .rs)
        echo "${root#suite_}"
    }

    # One test binary per source: the library's unit tests, and each integration test binary that
    # holds a fuzzer. Cargo names the executables in its JSON messages beside their source paths.
    test_arguments=(--lib)
    for target in $(awk '{ print $1 }' <<<"$fuzzers" | sort -u | while read -r file; do
        case "$file" in crates/engine/tests/*) test_target "$file" ;; esac
    done | sort -u); do
        test_arguments+=(--test "$target")
    done
    echo "== building the fuzzers (cargo test --profile fuzz -p tarn-engine ${test_arguments[*]})"
    messages=$(cargo test --profile fuzz -p tarn-engine "${test_arguments[@]}" --no-run \
        --message-format=json-render-diagnostics)
    executables=$(sed -n 's/.*"src_path":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p' <<<"$messages")
    engine_dir="$PWD/crates/engine"

    executable_for() {
        local source="$engine_dir/src/lib.rs"
        case "$1" in crates/engine/tests/*) source="$PWD/$(suite_source "$1")" ;; esac
        awk -v source="$source" '$1 == source { print $2; exit }' <<<"$executables"
    }

    run_directory="target/fuzz-long/$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$run_directory"
    table="$run_directory/table.txt"
    printf '%-22s %-62s %8s %10s %9s %s\n' decoder test 'CI' cases seconds result >"$table"
    status=0
    now() { echo "$EPOCHREALTIME"; }
    calculate() { awk "BEGIN { print $1 }"; }
    # A whole number, written out in full (awk would print a large one as 1.5e+09).
    whole() { awk "BEGIN { printf \"%.0f\", int($1) }"; }

    while read -r file module name cases_ci; do
        if [ -n "$filter" ] && ! [[ "$module::$name" =~ $filter ]]; then continue; fi
        executable=$(executable_for "$file")
        if [ -z "$executable" ]; then
            echo "fuzz-long: no test binary for $file" >&2
            exit 1
        fi
        # The test's full path in its binary: the module path, any inline modules, the name.
        prefix="$module"
        case "$file" in
            crates/engine/tests/*)
                prefix=''
                if [ "$(suite_source "$file")" != "$file" ]; then prefix=$(basename "$file" .rs); fi
                ;;
        esac
        test_path=$(cd "$engine_dir" && { "$executable" --list --format=terse 2>/dev/null || true; } |
            sed -n 's/: test$//p' |
            awk -v prefix="$prefix" -v name="$name" '
                (prefix == "" || index($0, prefix "::") == 1) &&
                ($0 == name || substr($0, length($0) - length(name) - 1) == "::" name)')
        log="$run_directory/${module//::/.}.$name.log"
        if [ "$(wc -l <<<"$test_path")" -ne 1 ] || [ -z "$test_path" ]; then
            echo "fuzz-long: $module::$name is not one test in $executable: '$test_path'" >&2
            printf '%-22s %-62s %8s %10s %9s %s\n' "$(decoder_of "$module")" "$name" "$cases_ci" 0 0 \
                'NOT FOUND' | tee -a "$table"
            status=1
            continue
        fi

        done_cases=0
        result=ok
        start=$(now)
        batch=$((cases_ci < cases_target ? cases_ci : cases_target))
        # The first batch runs the CI count, which CI runs in seconds: half an hour is a hang.
        batch_timeout=1800
        : >"$log"
        while :; do
            echo "== $test_path: $batch cases (done $done_cases)" >>"$log"
            set +e
            (cd "$engine_dir" && TARN_FUZZ_CASES="$batch" timeout -k 10 "$batch_timeout" \
                "$executable" --exact "$test_path" --nocapture --test-threads=1) </dev/null >>"$log" 2>&1
            code=$?
            set -e
            if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
                result="HANG (a batch of $batch ran over ${batch_timeout}s)"
                break
            elif [ "$code" -ne 0 ]; then
                result="FAIL (see $log)"
                break
            elif ! awk -v cases="$batch" '/^== / { taken = 0 }
                    index($0, "tarn-fuzz: ") { split(substr($0, index($0, "tarn-fuzz: ") + 11), word, " ")
                        taken = (word[1] == cases) }
                    END { exit !taken }' "$log"; then
                result="IGNORED ITS COUNT (does it use fuzz_config!?)"
                break
            fi
            done_cases=$((done_cases + batch))
            elapsed=$(calculate "$(now) - $start")
            remaining=$((cases_target - done_cases))
            if [ "$remaining" -le 0 ]; then break; fi
            window=$batch_seconds
            if [ "$budget_seconds" -gt 0 ]; then
                left=$(whole "$budget_seconds - $elapsed")
                if [ "$left" -le 0 ]; then break; fi
                window=$((left < window ? left : window))
            fi
            # The next batch at the rate measured so far, between one case and what is left.
            batch=$(whole "$done_cases / ($elapsed + 0.001) * $window")
            batch=$((batch < 1 ? 1 : batch))
            batch=$((batch > remaining ? remaining : batch))
            batch_timeout=$(whole "10 * $batch * ($elapsed + 0.001) / $done_cases + 120")
        done
        seconds=$(calculate "sprintf(\"%.1f\", $(now) - $start)")
        if [ "$result" != ok ]; then
            status=1
            grep -h -A3 'minimal failing input' "$log" >&2 || true
        fi
        printf '%-22s %-62s %8s %10s %9s %s\n' "$(decoder_of "$module")" "$name" "$cases_ci" \
            "$done_cases" "$seconds" "$result" | tee -a "$table"
    done <<<"$fuzzers"

    echo
    echo "== $(date -u +%FT%TZ): cases per fuzzer (target $cases_target$([ "$budget_seconds" -gt 0 ] &&
        echo ", budget ${budget_seconds}s")); logs in $run_directory"
    cat "$table"
    exit "$status"
}

main "$@"
