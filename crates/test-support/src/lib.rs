//! What the integration tests of every tarn crate share: [`Run`] and [`clean_command`] for
//! tests that drive a binary (module `command`), and the skips below. With the `pools` feature
//! (which links the engine, tarn-fuse and tarn-protocol), the pool fixtures too:
//! `cli::CliFixture` for tests of the `tarn` binary and its daemon, `mounted::MountedPool` for
//! tests of a mount served in the test's own process, and `pattern` for file contents in which
//! a misplaced block shows.
//!
//! # Skips are counted, not passed
//! A test that cannot run here (no `/dev/fuse`, not root, a peer tool missing) returns early,
//! and Rust's test harness counts it as passed. So every such test asks [`skip`] instead of
//! printing and returning on its own: the skip is printed, and appended (one line: the test's
//! name and the reason) to the file named by `TARN_TEST_SKIPS`, which `scripts/test.sh` sets and
//! counts apart from the passes. What the README's test command needs anyway (it installs fuse3
//! and the functional suite mounts pools through FUSE) is not skippable there:
//! `TARN_TEST_REQUIRE` lists it (comma-separated, e.g. `fuse,root`), and a test that would skip
//! for a listed reason fails instead, so a machine without `/dev/fuse` fails CI rather than
//! passing 40-odd mount tests that did nothing.

#[cfg(feature = "pools")]
pub mod cli;
pub mod command;
#[cfg(feature = "pools")]
pub mod mounted;

pub use command::{clean_command, number, Run};

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

/// Why a test cannot run here; [`Requirement::name`] is what `TARN_TEST_REQUIRE` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `/dev/fuse`, for every test that mounts a file system.
    Fuse,
    /// Root, for mounts of kernel file systems, loop devices and dropping caches.
    Root,
    /// A loop device (`losetup -f`), for pools on block devices.
    LoopDevice,
    /// A program on the PATH (a peer or a load generator: fio, mkfs.btrfs, fincore, losetup).
    Tool(&'static str),
    /// FUSE over io_uring switched on for the host (`enable_uring` reads Y). No test turns it
    /// on: the test command does, explicitly, when it requires this.
    FuseUring,
}

impl Requirement {
    pub fn name(self) -> &'static str {
        match self {
            Requirement::Fuse => "fuse",
            Requirement::Root => "root",
            Requirement::LoopDevice => "loop",
            Requirement::Tool(tool) => tool,
            Requirement::FuseUring => "fuse-uring",
        }
    }

    /// Whether this machine meets it.
    pub fn is_met(self) -> bool {
        match self {
            Requirement::Fuse => Path::new("/dev/fuse").exists(),
            // SAFETY: geteuid has no preconditions and cannot fail.
            Requirement::Root => (unsafe { libc::geteuid() }) == 0,
            Requirement::LoopDevice => Path::new("/dev/loop-control").exists(),
            Requirement::Tool(tool) => std::env::var_os("PATH").is_some_and(|path| {
                std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
            }),
            Requirement::FuseUring => {
                std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
                    .is_ok_and(|value| matches!(value.trim(), "Y" | "1"))
            }
        }
    }
}

/// Whether every requirement is met; if one is not, the test is recorded as skipped (or fails,
/// when `TARN_TEST_REQUIRE` names it) and the caller returns at once:
/// `if !tarn_test_support::requires(&[Requirement::Fuse]) { return; }`.
pub fn requires(requirements: &[Requirement]) -> bool {
    match requirements
        .iter()
        .find(|requirement| !requirement.is_met())
    {
        None => true,
        Some(missing) => {
            skip(*missing, &format!("needs {}", describe(*missing)));
            false
        }
    }
}

fn describe(requirement: Requirement) -> String {
    match requirement {
        Requirement::Fuse => "/dev/fuse".to_string(),
        Requirement::Root => "root".to_string(),
        Requirement::LoopDevice => "a loop device".to_string(),
        Requirement::Tool(tool) => format!("{tool}, which is not installed"),
        Requirement::FuseUring => {
            "FUSE over io_uring switched on (/sys/module/fuse/parameters/enable_uring)".to_string()
        }
    }
}

/// Record that the running test is skipped because `requirement` is not met (`reason` says
/// how), or panic if the test command requires it (`TARN_TEST_REQUIRE`).
pub fn skip(requirement: Requirement, reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("an unnamed test")
        .to_string();
    let required = std::env::var("TARN_TEST_REQUIRE").unwrap_or_default();
    if required
        .split(',')
        .any(|name| name.trim() == requirement.name())
    {
        panic!(
            "{test}: {reason}, and this run requires {} (TARN_TEST_REQUIRE={required}): \
             the README's test command cannot pass without it",
            requirement.name()
        );
    }
    eprintln!("SKIP {test}: {reason}");
    if let Some(skips) = std::env::var_os("TARN_TEST_SKIPS") {
        // One write per line, appended: tests of one binary run in parallel threads.
        let line = format!("{test}\t{reason}\n");
        if let Err(error) = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&skips)
            .and_then(|mut file| file.write_all(line.as_bytes()))
        {
            eprintln!("cannot record the skip in {skips:?}: {error}");
        }
    }
}

/// `length` pseudo-random bytes from `seed` (the protocol crate's xorshift, the seed spread
/// first so that nearby seeds give unrelated bytes), so that content is not trivially
/// compressible and a misplaced block shows.
#[cfg(feature = "pools")]
pub fn pattern(seed: u64, length: usize) -> Vec<u8> {
    tarn_protocol::format::pseudo_random(length, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_met_requirement_runs_and_a_missing_tool_skips() {
        assert!(requires(&[Requirement::Tool("sh")]));
        assert!(!Requirement::Tool("no-such-tool-anywhere").is_met());
    }

    #[test]
    #[should_panic(expected = "requires no-such-tool-anywhere")]
    fn a_required_requirement_that_is_missing_fails_the_test() {
        std::env::set_var("TARN_TEST_REQUIRE", "fuse,no-such-tool-anywhere");
        requires(&[Requirement::Tool("no-such-tool-anywhere")]);
    }

    #[test]
    #[cfg(feature = "pools")]
    fn patterns_of_nearby_seeds_differ_and_repeat() {
        // The generator's state is `seed | 1`: unspread, seeds 2 and 3 would give equal bytes.
        assert_ne!(pattern(2, 64), pattern(3, 64));
        assert_eq!(pattern(7, 1000), pattern(7, 1000));
        assert_eq!(pattern(7, 13), pattern(7, 1000)[..13]);
    }

    #[test]
    #[cfg(feature = "pools")]
    fn this_process_is_alive_and_a_pid_beyond_the_limit_is_not() {
        assert!(cli::alive(std::process::id() as i32));
        assert!(!cli::alive(i32::MAX));
        assert!(!cli::alive(-1));
    }
}
