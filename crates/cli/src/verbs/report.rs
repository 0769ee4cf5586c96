//! Reports at intervals, shared by `tarn stat`, `tarn stat arc` and `tarn pool iostat`: the
//! `[POOL] [INTERVAL [COUNT]]` words, the interval and count checked, and the printer that keeps
//! the first report's column widths for the later ones.

use std::time::Duration;

use tarn_protocol::error::Failure;
use tarn_protocol::format::{print_table, selected_fields, Cell, ListFormat};

/// The interval and the number of reports of `[INTERVAL [COUNT]]`, checked.
pub fn repeat(
    interval: Option<f64>,
    count: Option<u64>,
) -> Result<(Option<Duration>, u64), Failure> {
    let interval = match interval {
        Some(seconds) if !(seconds.is_finite() && seconds > 0.0) => {
            return Err(Failure(format!(
                "invalid interval {seconds}: expected a positive number of seconds"
            )))
        }
        Some(seconds) => Some(Duration::from_secs_f64(seconds)),
        None => None,
    };
    if count == Some(0) {
        return Err(Failure("invalid count 0: expected at least 1".into()));
    }
    let reports = match (interval, count) {
        (None, _) => 1,
        (Some(_), Some(count)) => count,
        (Some(_), None) => u64::MAX,
    };
    Ok((interval, reports))
}

/// Prints a table report by report: the header once, and (in the aligned form) the column
/// widths of the first report kept for the later ones, so that they line up below it.
pub struct Reporter {
    /// The command `-j` names in its header (`tarn stat txgs`).
    command: String,
    columns: &'static [&'static str],
    pub format: ListFormat,
    selected: Vec<usize>,
    widths: Option<Vec<usize>>,
}

impl Reporter {
    pub fn new(
        command: &str,
        columns: &'static [&'static str],
        format: ListFormat,
    ) -> Result<Reporter, Failure> {
        let selected = selected_fields(columns, &format).map_err(Failure)?;
        Ok(Reporter {
            command: command.to_string(),
            columns,
            format,
            selected,
            widths: None,
        })
    }

    pub fn report(&mut self, rows: &[Vec<Cell>], json_key: &str) -> Result<(), Failure> {
        if self.format.json || self.format.no_header {
            return print_table(self.columns, rows, &self.format, &self.command, json_key)
                .map_err(Failure);
        }
        let text = |cell: &Cell| {
            if self.format.exact {
                cell.exact.clone()
            } else {
                cell.human.clone()
            }
        };
        let first = self.widths.is_none();
        let widths = self.widths.get_or_insert_with(|| {
            self.selected
                .iter()
                .map(|&index| self.columns[index].len())
                .collect()
        });
        for row in rows {
            for (position, &index) in self.selected.iter().enumerate() {
                widths[position] = widths[position].max(text(&row[index]).len());
            }
        }
        let line = |cells: Vec<String>| -> String {
            cells
                .iter()
                .zip(widths.iter())
                .map(|(cell, width)| format!("{cell:>width$}"))
                .collect::<Vec<_>>()
                .join("  ")
        };
        if first {
            out!(
                "{}",
                line(
                    self.selected
                        .iter()
                        .map(|&index| self.columns[index].to_uppercase())
                        .collect()
                )
            );
        }
        for row in rows {
            out!(
                "{}",
                line(
                    self.selected
                        .iter()
                        .map(|&index| text(&row[index]))
                        .collect()
                )
            );
        }
        Ok(())
    }
}

/// The pool named (if any), the interval and the count.
pub type StatWords = (Option<String>, Option<f64>, Option<u64>);

/// `[POOL] [INTERVAL [COUNT]]`: the pool named (if the first word starts with a letter, as pool
/// names do), the interval and the count.
pub fn parse_words(words: &[String]) -> Result<StatWords, Failure> {
    let mut rest = words;
    let mut pool = None;
    if let Some(first) = rest.first() {
        if first.starts_with(|c: char| c.is_ascii_alphabetic()) {
            pool = Some(first.clone());
            rest = &rest[1..];
        }
    }
    if rest.len() > 2 {
        return Err(Failure(format!(
            "too many arguments: expected [POOL] [INTERVAL [COUNT]], got {}",
            words.join(" ")
        )));
    }
    let interval = rest
        .first()
        .map(|word| {
            word.parse::<f64>().map_err(|_| {
                Failure(format!(
                    "invalid interval {word:?}: expected a positive number of seconds"
                ))
            })
        })
        .transpose()?;
    let count = rest
        .get(1)
        .map(|word| {
            word.parse::<u64>().map_err(|_| {
                Failure(format!(
                    "invalid count {word:?}: expected a whole number of reports"
                ))
            })
        })
        .transpose()?;
    Ok((pool, interval, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_interval_and_count_are_told_apart() {
        let words =
            |text: &str| -> Vec<String> { text.split_whitespace().map(str::to_string).collect() };
        let parsed = parse_words(&words("tank 0.5 3")).ok().unwrap();
        assert_eq!(parsed, (Some("tank".into()), Some(0.5), Some(3)));
        let parsed = parse_words(&words("2 4")).ok().unwrap();
        assert_eq!(parsed, (None, Some(2.0), Some(4)));
        let parsed = parse_words(&words("tank")).ok().unwrap();
        assert_eq!(parsed, (Some("tank".into()), None, None));
        assert!(parse_words(&words("1 2 3")).is_err());
        assert!(parse_words(&words("tank soon")).is_err());
        assert!(parse_words(&words("tank 1 x")).is_err());
    }
}
