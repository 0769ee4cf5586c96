//! What a pool records about itself, as the CLI shows it: the `errors:` section of
//! `pool status` (the error log, `tarn::pool::errlog`) and `pool history` (the history ring,
//! `tarn::pool::history`), in zpool's words. Used by the daemon and by in-process runs alike.

use tarn::Pool;

/// The `errors:` section of `pool status` and its JSON: with `verbose`, every damaged file by
/// name (zpool status -v), else their count; and that count.
pub fn errors_section(pool: &Pool, verbose: bool) -> (String, serde_json::Value, usize) {
    // Several damaged blocks of one file (or a read's entry and check's) name it once.
    let mut seen = std::collections::BTreeSet::new();
    let mut names: Vec<String> = pool
        .data_errors(verbose)
        .iter()
        .filter(|entry| seen.insert((entry.bookmark.dataset, entry.bookmark.object)))
        .map(|entry| entry.display_name())
        .collect();
    names.sort();
    // A pool suspended by a failed sync says so just before its errors (zpool's "status: One
    // or more devices are faulted in response to IO failures").
    let suspended = pool.suspended_reason().map(|why| {
        let why = tarn::status::short_reason(&why);
        format!(
            "status: the pool is suspended: a txg could not be written ({why}); writes fail, reads go on (failmode={}).\naction: make the devices work again, then export and re-import the pool.\n",
            pool.failmode().as_str()
        )
    });
    let mut text = suspended.clone().unwrap_or_default();
    text += &if names.is_empty() {
        "errors: No known data errors\n".to_string()
    } else if verbose {
        let mut text =
            "errors: Permanent errors have been detected in the following files:\n\n".to_string();
        for name in &names {
            text.push_str(&format!("        {name}\n"));
        }
        text
    } else {
        format!(
            "errors: {} data error{}, use '-v' for a list\n",
            names.len(),
            if names.len() == 1 { "" } else { "s" }
        )
    };
    let count = names.len();
    let json = serde_json::json!({"count": count, "files": if verbose { names } else { Vec::new() }, "suspended": suspended.is_some()});
    (text, json, count)
}

/// One history record on the wire: the engine's record as it is.
pub type HistoryRow = tarn::status::HistoryRecord;

pub fn history_rows(pool: &Pool) -> Result<Vec<HistoryRow>, tarn::PoolError> {
    pool.history()
}

/// `pool history` as zpool prints it: a heading, then one line a command, the time first
/// (`YYYY-MM-DD.HH:MM:SS`, UTC); with `long`, each line ends with who ran it where and in which
/// txg (zpool history -l).
pub fn history_text(pool: &str, rows: &[HistoryRow], long: bool) -> String {
    let mut text = format!("History for '{pool}':\n");
    for row in rows {
        // format::utc_time gives `YYYY-MM-DD HH:MM`; zpool joins date and time with a dot.
        let time = format!(
            "{}:{:02}",
            tarn_protocol::format::utc_time(row.time_seconds).replacen(' ', ".", 1),
            row.time_seconds % 60
        );
        text.push_str(&format!("{time} {}", row.command));
        if long {
            let user = if row.user.is_empty() {
                String::new()
            } else {
                format!(" ({})", row.user)
            };
            text.push_str(&format!(
                " [user {}{user} on {}, txg {}]",
                row.uid, row.host, row.txg
            ));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lines_read_as_zpool_history() {
        let rows = vec![HistoryRow {
            time_seconds: 1_700_000_000,
            uid: 0,
            txg: 12,
            user: "root".into(),
            host: "box".into(),
            command: "tarn pool create tank /dev/sdb".into(),
        }];
        assert_eq!(
            history_text("tank", &rows, false),
            "History for 'tank':\n2023-11-14.22:13:20 tarn pool create tank /dev/sdb\n"
        );
        assert!(history_text("tank", &rows, true)
            .ends_with("/dev/sdb [user 0 (root) on box, txg 12]\n"));
    }
}
