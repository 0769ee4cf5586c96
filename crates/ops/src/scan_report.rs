//! What `pool status` says about scans and leaves: the `scan:` lines as zpool prints them
//! (scrub or resilver in progress with scanned, issued, repaired, rate, percent done and time
//! to go; or the last scan's outcome), the per-leaf notes (`resilvering`, or the txgs a leaf
//! missed while nothing resilvers it), and the same as JSON.

use serde_json::{json, Value};
use tarn::status::{Leaf, ScanFunction, ScanState, ScanStatus};
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
