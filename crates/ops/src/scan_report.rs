//! What `pool status` says about scans, RAID-Z expansion and leaves: the `scan:` lines as
//! zpool prints them (scrub or resilver in progress with scanned, issued, repaired, rate,
//! percent done and time to go; or the last scan's outcome), the `expand:` lines of the newest
//! RAID-Z expansion (in progress, paused, or finished), the per-leaf notes (`resilvering`, or
//! the txgs a leaf missed while nothing resilvers it), and the same as JSON.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tarn::status::{Leaf, RaidzExpansionStatus, ScanFunction, ScanState, ScanStatus};
use tarn::Pool;

use tarn_protocol::format::utc_time;

/// Bytes as zpool prints them in `scan:` lines: `0B`, `512B`, `160K`, `1.17G`.
fn human_bytes(bytes: u64) -> String {
    let text = tarn_protocol::format::human_bytes(bytes);
    if bytes < 1024 {
        format!("{text}B")
    } else {
        text
    }
}

/// `H:MM:SS` (zpool's time to go and scan duration).
fn duration(seconds: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

pub(crate) fn resilvering(pool: &Pool) -> bool {
    pool.scan_status().is_some_and(|status| {
        status.phys.state == ScanState::Scanning && status.phys.function == ScanFunction::Resilver
    })
}

/// The `  scan:` line and its continuation lines (with the trailing newline), or nothing for a
/// pool that was never scanned.
pub fn scan_text(pool: &Pool) -> String {
    let Some(status) = pool.scan_status() else {
        return String::new();
    };
    scan_lines(&status)
}

/// The `scan:` lines of one scan state.
pub fn scan_lines(status: &ScanStatus) -> String {
    let phys = &status.phys;
    let function = phys.function.as_str();
    let total = phys.to_examine.max(phys.examined);
    let percent = if total == 0 {
        100.0
    } else {
        phys.examined as f64 * 100.0 / total as f64
    };
    let errors = phys.errors;
    match (phys.state, phys.paused) {
        (ScanState::Scanning, paused) => {
            let head = if paused {
                format!(
                    "  scan: {function} paused since {}\n\t{function} started on {}\n",
                    utc_time(phys.start_time),
                    utc_time(phys.start_time)
                )
            } else {
                format!(
                    "  scan: {function} in progress since {}\n",
                    utc_time(phys.start_time)
                )
            };
            let rate = if paused || status.rate_bytes_per_second == 0 {
                String::new()
            } else {
                format!(" at {}/s", human_bytes(status.rate_bytes_per_second))
            };
            let repaired = match phys.function {
                ScanFunction::Scrub => format!("{} repaired", human_bytes(phys.repaired)),
                ScanFunction::Resilver => format!("{} resilvered", human_bytes(phys.repaired)),
            };
            let to_go = match status.eta_seconds {
                Some(seconds) if !paused => format!(", {} to go", duration(seconds)),
                _ if paused => String::new(),
                _ => ", no estimated completion time".to_string(),
            };
            format!(
                "{head}\t{} / {} scanned{rate}, {} issued\n\t{repaired}, {percent:.2}% done{to_go}, {errors} errors\n",
                human_bytes(phys.examined),
                human_bytes(total),
                human_bytes(phys.issued),
            )
        }
        (ScanState::Finished, _) => {
            let took = duration(phys.end_time.saturating_sub(phys.start_time));
            let on = utc_time(phys.end_time);
            let mut text = match phys.function {
                ScanFunction::Scrub => format!(
                    "  scan: scrub repaired {} in {took} with {errors} errors on {on}\n",
                    human_bytes(phys.repaired)
                ),
                ScanFunction::Resilver => format!(
                    "  scan: resilvered {} in {took} with {errors} errors on {on}\n",
                    human_bytes(phys.repaired)
                ),
            };
            // Errors count blocks with no good copy; a bad copy whose rewrite failed is not
            // among them, yet it keeps a replace from finishing: say so.
            if phys.unrepaired > 0 {
                text.push_str(&format!(
                    "\t{} bad copies found could not be rewritten (a device failed writes or went away)\n",
                    phys.unrepaired
                ));
            }
            text
        }
        (ScanState::Canceled, _) => format!(
            "  scan: {function} canceled on {} ({} of {} examined, {} repaired)\n",
            utc_time(phys.end_time),
            human_bytes(phys.examined),
            human_bytes(total),
            human_bytes(phys.repaired)
        ),
    }
}

/// Seconds since the Unix epoch, now (what the rate and time to go of a running expansion are
/// measured against).
pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// Beyond this many seconds to go, zpool gives no estimate for an expansion (30 days).
const EXPAND_ETA_MAX_SECONDS: u64 = 30 * 24 * 3600;

/// How far a running expansion has come at `now`: the share of the vdev's address space
/// reflowed (percent, at most 100), the rate (bytes of it reflowed a second since the start:
/// free space the copy skips counts, as the progress it is) and the seconds to go at the pace the address space has been reflowed so far (none before
/// anything is reflowed).
pub(crate) struct ExpandProgress {
    pub(crate) percent: f64,
    pub(crate) rate_bytes_per_second: u64,
    pub(crate) eta_seconds: Option<u64>,
}

pub(crate) fn expand_progress(status: &RaidzExpansionStatus, now: u64) -> ExpandProgress {
    let reflowed = status.reflowed.min(status.total);
    let percent = if status.total == 0 {
        100.0
    } else {
        (reflowed as f64 * 100.0 / status.total as f64).min(100.0)
    };
    let elapsed = now.saturating_sub(status.start_time).max(1);
    let eta_seconds = (reflowed > 0).then(|| {
        let left = status.total - reflowed;
        (u128::from(left) * u128::from(elapsed) / u128::from(reflowed)).min(u128::from(u64::MAX))
            as u64
    });
    ExpandProgress {
        percent,
        rate_bytes_per_second: reflowed / elapsed,
        eta_seconds,
    }
}

/// The `expand:` line of `pool status` (with the trailing newline), or nothing for a pool that
/// never had a RAID-Z expansion.
pub fn expand_text(pool: &Pool) -> String {
    match pool.raidz_expansion() {
        Some(status) => expand_lines(&status, now_seconds()),
        None => String::new(),
    }
}

/// The `expand:` lines of one expansion at `now` (seconds since the epoch), in OpenZFS 2.3's
/// words (`print_raidz_expand_status`): while the copy runs, `expansion of raidz1-0 in progress
/// since ...`, then the bytes of the vdev's address space reflowed of its size (zpool counts
/// the allocated bytes copied of the allocated ones; the copy here skips free space in whole
/// ranges, so the address space is its measure), the rate, the share and the time to go, or why the copy waits; once finished, `expanded raidz1-0
/// copied ... in H:MM:SS, on ...`.
pub fn expand_lines(status: &RaidzExpansionStatus, now: u64) -> String {
    let vdev = &status.vdev;
    if status.finished {
        let end = status.end_time.unwrap_or(status.start_time);
        return format!(
            "expand: expanded {vdev} copied {} in {}, on {}\n",
            human_bytes(status.copied),
            duration(end.saturating_sub(status.start_time)),
            utc_time(end)
        );
    }
    let progress = expand_progress(status, now);
    let head = format!(
        "expand: expansion of {vdev} in progress since {}\n\t{} / {} copied",
        utc_time(status.start_time),
        human_bytes(status.reflowed.min(status.total)),
        human_bytes(status.total),
    );
    let percent = progress.percent;
    match &status.paused {
        Some(why) => format!("{head}, {percent:.2}% done, paused: {why}\n"),
        None => {
            let to_go = match progress.eta_seconds {
                Some(seconds) if seconds < EXPAND_ETA_MAX_SECONDS => {
                    format!("{} to go", duration(seconds))
                }
                Some(_) => "(copy is slow, no estimated time)".to_string(),
                None => "no estimated completion time".to_string(),
            };
            format!(
                "{head} at {}/s, {percent:.2}% done, {to_go}\n",
                human_bytes(progress.rate_bytes_per_second)
            )
        }
    }
}

/// The expansion as the daemon's scan state carries it for `pool wait -t raidz_expand` (null
/// for a pool never expanded): exact numbers.
pub fn expand_json(pool: &Pool) -> Value {
    let Some(status) = pool.raidz_expansion() else {
        return Value::Null;
    };
    json!({
        "vdev": status.vdev,
        "vdev_id": status.vdev_id.0,
        "width": status.width,
        "finished": status.finished,
        "paused": status.paused,
        "start_time": status.start_time,
        "end_time": status.end_time,
        "copied": status.copied,
        "reflowed": status.reflowed,
        "total": status.total,
    })
}

/// What follows a leaf's counters in the vdev tree: `  (resilvering)` while a resilver runs for
/// it, the txgs it missed while none does, else nothing.
pub fn leaf_note(pool: &Pool, leaf: &Leaf) -> String {
    let ranges = leaf.dtl.ranges();
    if ranges.is_empty() {
        return String::new();
    }
    if leaf.is_usable() && resilvering(pool) {
        return "  (resilvering)".to_string();
    }
    let first = ranges.first().map_or(0, |range| range.0);
    let last = ranges.last().map_or(0, |range| range.1.saturating_sub(1));
    format!("  (missed txgs {first}-{last})")
}

/// The leaf's DTL and resilvering state for `pool status -j`.
pub fn leaf_json(pool: &Pool, leaf: &Leaf) -> Value {
    let ranges: Vec<[u64; 2]> = leaf
        .dtl
        .ranges()
        .into_iter()
        .map(|(first, end)| [first, end])
        .collect();
    json!({
        "missed_txgs": ranges,
        "resilvering": !ranges.is_empty() && leaf.is_usable() && resilvering(pool),
    })
}

/// The scan state as JSON (null for a pool never scanned).
pub fn scan_json(pool: &Pool) -> Value {
    let Some(status) = pool.scan_status() else {
        return Value::Null;
    };
    let phys = &status.phys;
    json!({
        "function": phys.function.as_str(),
        "state": match phys.state {
            ScanState::Scanning => "scanning",
            ScanState::Finished => "finished",
            ScanState::Canceled => "canceled",
        },
        "paused": phys.paused,
        "start_time": phys.start_time,
        "end_time": phys.end_time,
        "min_txg": phys.min_txg.0,
        "max_txg": phys.max_txg.0,
        "to_examine": phys.to_examine,
        "examined": phys.examined,
        "issued": phys.issued,
        "repaired": phys.repaired,
        "errors": phys.errors,
        "copies_bad": phys.copies_bad,
        "unrepaired": phys.unrepaired,
        "rate_bytes_per_second": status.rate_bytes_per_second,
        "eta_seconds": status.eta_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn::debug::Bookmark;
    use tarn::status::ScanPhys;
    use tarn::types::Txg;

    fn status(state: ScanState, function: ScanFunction, paused: bool) -> ScanStatus {
        ScanStatus {
            phys: ScanPhys {
                function,
                state,
                paused,
                min_txg: Txg(0),
                max_txg: Txg(10),
                start_time: 1_700_000_000,
                end_time: 1_700_000_065,
                to_examine: 4 << 30,
                examined: 2 << 30,
                issued: 1 << 30,
                repaired: 3 << 20,
                errors: 0,
                cursor_objset: 0,
                cursor: Bookmark::default(),
                copies_bad: 3,
                unrepaired: 0,
            },
            rate_bytes_per_second: 100 << 20,
            eta_seconds: Some(3725),
        }
    }

    /// An expansion of raidz1-0 started at 2023-11-14 22:13:20 UTC: 600M copied, 1G of 4G of
    /// address space reflowed.
    fn expansion() -> RaidzExpansionStatus {
        RaidzExpansionStatus {
            vdev: "raidz1-0".into(),
            vdev_id: tarn::types::VdevId(0),
            width: 5,
            finished: false,
            paused: None,
            start_time: 1_700_000_000,
            end_time: None,
            copied: 600 << 20,
            reflowed: 1 << 30,
            total: 4 << 30,
        }
    }

    #[test]
    fn expand_lines_in_progress_read_like_zpool() {
        // 100 s in, a quarter of the address space reflowed: three quarters to go at that pace.
        assert_eq!(
            expand_lines(&expansion(), 1_700_000_100),
            "expand: expansion of raidz1-0 in progress since 2023-11-14 22:13\n\
             \t1G / 4G copied at 10.2M/s, 25.00% done, 00:05:00 to go\n"
        );
        // Nothing reflowed yet: no estimate; a clock behind the start counts one second.
        let mut status = expansion();
        status.reflowed = 0;
        status.copied = 0;
        assert_eq!(
            expand_lines(&status, 1_699_999_990),
            "expand: expansion of raidz1-0 in progress since 2023-11-14 22:13\n\
             \t0B / 4G copied at 0B/s, 0.00% done, no estimated completion time\n"
        );
        // A pace that would take more than 30 days gives no estimate, as zpool's.
        let mut status = expansion();
        status.reflowed = 1 << 20;
        assert_eq!(
            expand_lines(&status, 1_700_000_000 + 3600),
            "expand: expansion of raidz1-0 in progress since 2023-11-14 22:13\n\
             \t1M / 4G copied at 291B/s, 0.02% done, (copy is slow, no estimated time)\n"
        );
    }

    #[test]
    fn expand_lines_clamp_to_the_whole_vdev() {
        let mut status = expansion();
        status.reflowed = 5 << 30;
        assert_eq!(
            expand_lines(&status, 1_700_000_100),
            "expand: expansion of raidz1-0 in progress since 2023-11-14 22:13\n\
             \t4G / 4G copied at 41.0M/s, 100.00% done, 00:00:00 to go\n"
        );
        status.total = 0;
        assert!(expand_lines(&status, 1_700_000_100).contains(", 100.00% done, "));
    }

    #[test]
    fn expand_lines_paused_say_why() {
        let mut status = expansion();
        status.paused = Some("/d/c.img is OFFLINE".into());
        assert_eq!(
            expand_lines(&status, 1_700_000_100),
            "expand: expansion of raidz1-0 in progress since 2023-11-14 22:13\n\
             \t1G / 4G copied, 25.00% done, paused: /d/c.img is OFFLINE\n"
        );
    }

    #[test]
    fn expand_lines_finished_read_like_zpool() {
        let mut status = expansion();
        status.finished = true;
        status.end_time = Some(1_700_003_725);
        status.copied = 3 << 30;
        status.reflowed = status.total;
        // The time of day does not matter once finished.
        for now in [0, 1_700_003_725, u64::MAX] {
            assert_eq!(
                expand_lines(&status, now),
                "expand: expanded raidz1-0 copied 3G in 01:02:05, on 2023-11-14 23:15\n"
            );
        }
        let mut raidz2 = status.clone();
        raidz2.vdev = "raidz2-1".into();
        raidz2.copied = 1536;
        assert_eq!(
            expand_lines(&raidz2, 0),
            "expand: expanded raidz2-1 copied 1.50K in 01:02:05, on 2023-11-14 23:15\n"
        );
    }

    #[test]
    fn scan_lines_read_like_zpool() {
        let text = scan_lines(&status(ScanState::Scanning, ScanFunction::Scrub, false));
        assert!(
            text.starts_with("  scan: scrub in progress since 2023-11-14"),
            "{text}"
        );
        assert!(
            text.contains("2G / 4G scanned at 100M/s, 1G issued"),
            "{text}"
        );
        assert!(
            text.contains("3M repaired, 50.00% done, 01:02:05 to go"),
            "{text}"
        );
        let text = scan_lines(&status(ScanState::Scanning, ScanFunction::Resilver, false));
        assert!(text.contains("  scan: resilver in progress"), "{text}");
        assert!(text.contains("3M resilvered"), "{text}");
        let text = scan_lines(&status(ScanState::Scanning, ScanFunction::Scrub, true));
        assert!(text.starts_with("  scan: scrub paused since"), "{text}");
        assert!(!text.contains("to go"), "{text}");
        let text = scan_lines(&status(ScanState::Finished, ScanFunction::Scrub, false));
        assert!(
            text.starts_with("  scan: scrub repaired 3M in 00:01:05 with 0 errors on 2023-11-14"),
            "{text}"
        );
        let text = scan_lines(&status(ScanState::Finished, ScanFunction::Resilver, false));
        assert!(
            text.starts_with("  scan: resilvered 3M in 00:01:05"),
            "{text}"
        );
        let text = scan_lines(&status(ScanState::Canceled, ScanFunction::Scrub, false));
        assert!(text.starts_with("  scan: scrub canceled on"), "{text}");
        let mut clean = status(ScanState::Finished, ScanFunction::Scrub, false);
        clean.phys.repaired = 0;
        assert!(scan_lines(&clean).starts_with("  scan: scrub repaired 0B in"));
    }
}
