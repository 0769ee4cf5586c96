//! Counts of what some operations met (which way a resilver request went, how a damaged
//! stream was refused), left for the parent's summary: a row's weight says how often it is
//! drawn, not whether it reached the states it is there for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

static COUNTS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Where a child leaves its outcome counts (overwritten; see [`report`]).
pub fn outcome_counts_path(dir: &Path) -> PathBuf {
    dir.join("child-outcomes")
}

/// Count one `outcome` (a short phrase without digits, e.g. "resilver request: restarted").
pub(super) fn note(outcome: &'static str) {
    *COUNTS.lock().entry(outcome).or_insert(0) += 1;
}

/// Count what the livelist reader did for `pool` since its import (sub-lists of destroyed
/// clones freed, sub-lists condensed, stale reads discarded): called once per imported pool,
/// as it is closed, so that a run shows whether its clones' destroys and overwrites reached
/// the reader at all.
pub(super) fn note_livelist_work(pool: &tarn::pool::Pool) {
    let stats = pool.core.livelist_work_stats();
    let mut counts = COUNTS.lock();
    for (outcome, count) in [
        (
            "livelist sub-lists freed by the reader",
            stats.sublists_freed,
        ),
        ("livelist sub-lists condensed", stats.condensed),
        ("livelist reads found stale and discarded", stats.discarded),
    ] {
        if count > 0 {
            *counts.entry(outcome).or_insert(0) += count;
        }
    }
}

/// Leave the counts for the parent, one `COUNT OUTCOME` line each.
pub(super) fn report(dir: &Path) {
    let text: String = (COUNTS.lock().iter())
        .map(|(outcome, count)| format!("{count} {outcome}\n"))
        .collect();
    let _ = std::fs::write(outcome_counts_path(dir), text);
}

/// The counts a child left, by outcome; empty if none.
pub fn read_outcome_counts(dir: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(outcome_counts_path(dir)).unwrap_or_default();
    (text.lines())
        .filter_map(|line| {
            let (count, outcome) = line.split_once(' ')?;
            Some((outcome.to_string(), count.parse().ok()?))
        })
        .collect()
}
