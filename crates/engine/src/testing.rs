//! Support for the engine's tests and the integration tests beside it; not part of the API.
//!
//! The decoders' fuzzers (docs/design/invariants.md §6, invariant 6) run a small number of cases in
//! CI and many more in a long run (`scripts/fuzz-long.sh`). Each takes its configuration from
//! [`fuzz_config!`](crate::fuzz_config), which keeps the CI count unless `TARN_FUZZ_CASES`
//! names another. The script finds the fuzzers by that macro: a property test whose
//! `proptest!` block is configured by it is a decoder fuzzer, run by the long run and listed
//! in its table.

/// The environment variable that sets every decoder fuzzer's number of cases.
pub const FUZZ_CASES_VARIABLE: &str = "TARN_FUZZ_CASES";

/// The number of cases a decoder fuzzer runs: `ci_cases`, or the count in
/// [`FUZZ_CASES_VARIABLE`]. A value that is not a positive count stops the test rather than
/// quietly running the CI count in a run that asked for more. A changed count is written to
/// standard error, which is how the long-run script knows the fuzzer it started took the count
/// it asked for.
pub fn fuzz_cases(ci_cases: u32) -> u32 {
    let Some(text) = std::env::var_os(FUZZ_CASES_VARIABLE) else {
        return ci_cases;
    };
    let cases = text
        .to_str()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&cases| cases > 0);
    let Some(cases) = cases else {
        panic!("{FUZZ_CASES_VARIABLE}={text:?} is not a positive number of cases");
    };
    eprintln!("tarn-fuzz: {cases} cases (CI {ci_cases})");
    cases
}

/// The proptest configuration of a decoder fuzzer whose CI run has `ci_cases` cases (see
/// [`fuzz_cases`]): proptest's defaults otherwise, so failures persist as before. The limits
/// on rejected cases grow with the count, as a strategy's filter rejects a share of the cases
/// and proptest's fixed limits would end a long run that found nothing.
///
/// Expands to a `proptest` path, so it serves the crates that have proptest as a
/// dependency: the engine's unit tests (`crate::fuzz_config!(256)`) and its integration tests
/// (`tarn::fuzz_config!(24)`).
#[doc(hidden)]
#[macro_export]
macro_rules! fuzz_config {
    ($ci_cases:expr) => {{
        let cases = $crate::testing::fuzz_cases($ci_cases);
        let default = ::proptest::test_runner::Config::default();
        ::proptest::test_runner::Config {
            cases,
            max_local_rejects: default.max_local_rejects.max(cases),
            max_global_rejects: default.max_global_rejects.max(cases),
            ..default
        }
    }};
}
