//! The daemon's side of the `failmode` pool property (`tarn::pool::failmode`): a watcher that
//! notices a pool suspended by a failed sync, logs it once with the reason, and with
//! `failmode=panic` ends the daemon at once (exit status 70, without exporting anything: the
//! pool is in an unknown state, as after OpenZFS's deliberate panic), so that whatever
//! supervises it (systemd's `Restart=`, a cluster manager) takes over.
//!
//! Cost: one pass over the held pools every [`WATCH_INTERVAL`], reading one mutex each.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use log::error;
use tarn::status::{short_reason, FailMode};

use super::held::Daemon;

/// How often the watcher looks at the held pools.
const WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// The exit status of a daemon stopped by `failmode=panic` (EX_SOFTWARE).
pub(super) const FAILMODE_PANIC_EXIT: i32 = 70;

/// What to do about a pool that is (or is not) suspended.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Fine,
    Report,
    Exit,
}

fn verdict(failure: Option<&str>, mode: FailMode) -> Verdict {
    match (failure, mode) {
        (None, _) => Verdict::Fine,
        (Some(_), FailMode::Panic) => Verdict::Exit,
        (Some(_), _) => Verdict::Report,
    }
}

/// Start the watcher; it ends with the daemon.
pub(super) fn watch(daemon: &Arc<Daemon>) {
    let daemon: Weak<Daemon> = Arc::downgrade(daemon);
    let spawned = std::thread::Builder::new()
        .name("tarn-failmode".into())
        .spawn(move || {
            let mut reported = BTreeSet::new();
            while let Some(daemon) = daemon.upgrade() {
                for pool in daemon.pools() {
                    let failure = pool.suspended_reason();
                    let mode = pool.failmode();
                    match verdict(failure.as_deref(), mode) {
                        Verdict::Fine => {
                            reported.remove(pool.name());
                        }
                        Verdict::Report => {
                            if reported.insert(pool.name().to_string()) {
                                error!(
                                    "pool {} is suspended (failmode={}): {}; writes fail with EIO, reads go on; export and re-import it once its devices work",
                                    pool.name(),
                                    mode.as_str(),
                                    short_reason(&failure.unwrap_or_default())
                                );
                            }
                        }
                        Verdict::Exit => {
                            error!(
                                "pool {} is suspended and its failmode is panic: {}; the tarn daemon exits now without exporting",
                                pool.name(),
                                short_reason(&failure.unwrap_or_default())
                            );
                            log::logger().flush();
                            std::process::exit(FAILMODE_PANIC_EXIT);
                        }
                    }
                }
                drop(daemon);
                std::thread::sleep(WATCH_INTERVAL);
            }
        });
    if let Err(why) = spawned {
        error!("cannot start the failmode watcher: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_suspended_pool_with_failmode_panic_ends_the_daemon() {
        assert_eq!(verdict(None, FailMode::Panic), Verdict::Fine);
        assert_eq!(
            verdict(Some("write failed"), FailMode::Panic),
            Verdict::Exit
        );
        assert_eq!(
            verdict(Some("write failed"), FailMode::Wait),
            Verdict::Report
        );
        assert_eq!(
            verdict(Some("write failed"), FailMode::Continue),
            Verdict::Report
        );
    }
}
