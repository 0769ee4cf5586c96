//! Running a program under test and asserting on what it did: one [`Run`] for every test that
//! drives a binary (the CLI's fixtures, the daemon's end-to-end tests), instead of one per file.

use std::process::{Command, Stdio};

/// A finished command: what was run, its exit status, and what it printed.
pub struct Run {
    pub command: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$ {}\n[exit {}]\n--- stdout ---\n{}--- stderr ---\n{}",
            self.command, self.code, self.stdout, self.stderr
        )
    }
}

impl Run {
    /// Run `command` to its end; `text` is how messages name it (`tarn pool list`). A program
    /// killed by a signal, or that panicked (Rust's exit status 101), fails the test.
    #[track_caller]
    pub fn of(text: String, command: &mut Command) -> Run {
        let output = command
            .output()
            .unwrap_or_else(|error| panic!("cannot run `{text}`: {error}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let Some(code) = output.status.code() else {
            panic!(
                "`{text}` was killed by a signal ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
                output.status
            );
        };
        let run = Run {
            command: text,
            code,
            stdout,
            stderr,
        };
        assert_ne!(run.code, 101, "it panicked:\n{run}");
        run
    }

    /// Assert exit status 0 and return self for chaining.
    #[track_caller]
    pub fn success(self) -> Run {
        assert_eq!(self.code, 0, "expected success:\n{self}");
        self
    }

    /// Assert a non-zero exit status and a message on stderr that contains every one of
    /// `needles` (case-insensitive): a failure always says why.
    #[track_caller]
    pub fn failure(self, needles: &[&str]) -> Run {
        assert_ne!(self.code, 0, "expected a failure:\n{self}");
        assert!(
            !self.stderr.trim().is_empty(),
            "a failure must say why on stderr:\n{self}"
        );
        let stderr = self.stderr.to_lowercase();
        for needle in needles {
            assert!(
                stderr.contains(&needle.to_lowercase()),
                "stderr should mention {needle:?}:\n{self}"
            );
        }
        self
    }

    /// Stdout read as one JSON document (a `-j` output).
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}):\n{self}"))
    }

    /// Assert that stdout contains every one of `needles`.
    #[track_caller]
    pub fn stdout_has(self, needles: &[&str]) -> Run {
        for needle in needles {
            assert!(
                self.stdout.contains(needle),
                "stdout should contain {needle:?}:\n{self}"
            );
        }
        self
    }
}

/// A command for `program` with no standard input and none of the caller's `TARN_*`
/// variables, so that a developer's own socket or tunables never reach a test's daemon. The
/// exception is `TARN_FUSE_TRANSPORT`, the transport the whole test run serves its mounts
/// through.
pub fn clean_command(program: &str) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if key_text.starts_with("TARN_") && key_text != "TARN_FUSE_TRANSPORT" {
            command.env_remove(key);
        }
    }
    command
}

/// Field `field` of a JSON row (a `-j` table's row) as a number; fails the test, showing the
/// row, if it is missing or not a number.
#[track_caller]
pub fn number(row: &serde_json::Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {row}"))
}
