//! Where a verb's output goes: the terminal, or a buffer that the daemon sends back.
//!
//! Every verb prints through `out!` (stdout) and `err!` (stderr). In the CLI process these write
//! straight to the process's streams, dropping output into a closed pipe instead of panicking.
//! In the daemon, each request runs on its own thread inside [`capture`], which redirects that
//! thread's `out!`/`err!` into strings; the response carries them back and the CLI prints them
//! unchanged, so a verb prints exactly the same text wherever it ran.

use std::cell::RefCell;
use std::fmt;
use std::io::Write as _;

/// What one captured verb printed.
#[derive(Debug, Default)]
pub struct Captured {
    pub stdout: String,
    pub stderr: String,
}

thread_local! {
    static CAPTURE: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Run `work` with this thread's `out!`/`err!` redirected into buffers; return its result and
/// what it printed. Captures do not nest (an inner capture would steal the outer's output).
pub fn capture<T>(work: impl FnOnce() -> T) -> (T, Captured) {
    CAPTURE.with(|slot| {
        let previous = slot.borrow_mut().replace(Captured::default());
        assert!(previous.is_none(), "output captures do not nest");
    });
    // Take the buffers back even if `work` panics, so the thread can be reused.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            CAPTURE.with(|slot| {
                if std::thread::panicking() {
                    slot.borrow_mut().take();
                }
            });
        }
    }
    let guard = Restore;
    let result = work();
    drop(guard);
    let captured = CAPTURE.with(|slot| slot.borrow_mut().take().unwrap_or_default());
    (result, captured)
}

/// One line to stdout (or the capture buffer).
pub fn write_stdout_line(arguments: fmt::Arguments) {
    let captured = CAPTURE.with(|slot| {
        if let Some(buffer) = slot.borrow_mut().as_mut() {
            let _ = fmt::Write::write_fmt(&mut buffer.stdout, arguments);
            buffer.stdout.push('\n');
            true
        } else {
            false
        }
    });
    if !captured {
        let _ = writeln!(std::io::stdout(), "{arguments}");
    }
}

/// One line to stderr (or the capture buffer).
pub fn write_stderr_line(arguments: fmt::Arguments) {
    let captured = CAPTURE.with(|slot| {
        if let Some(buffer) = slot.borrow_mut().as_mut() {
            let _ = fmt::Write::write_fmt(&mut buffer.stderr, arguments);
            buffer.stderr.push('\n');
            true
        } else {
            false
        }
    });
    if !captured {
        let _ = writeln!(std::io::stderr(), "{arguments}");
    }
}

/// Print text received from the daemon exactly as it came (no newline added).
pub fn print_raw(stdout: &str, stderr: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(stdout.as_bytes());
    let _ = out.flush();
    let mut error = std::io::stderr().lock();
    let _ = error.write_all(stderr.as_bytes());
    let _ = error.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_collects_both_streams_and_restores() {
        let (value, captured) = capture(|| {
            write_stdout_line(format_args!("one {}", 1));
            write_stderr_line(format_args!("two"));
            write_stdout_line(format_args!("three"));
            7
        });
        assert_eq!(value, 7);
        assert_eq!(captured.stdout, "one 1\nthree\n");
        assert_eq!(captured.stderr, "two\n");
        // A second capture on the same thread starts empty.
        let ((), again) = capture(|| write_stdout_line(format_args!("x")));
        assert_eq!(again.stdout, "x\n");
    }

    #[test]
    fn a_panicking_capture_leaves_the_thread_usable() {
        let result = std::panic::catch_unwind(|| {
            capture(|| {
                write_stdout_line(format_args!("lost"));
                panic!("boom");
            })
        });
        assert!(result.is_err());
        let ((), captured) = capture(|| write_stdout_line(format_args!("kept")));
        assert_eq!(captured.stdout, "kept\n");
    }
}
