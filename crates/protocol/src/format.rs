//! Number parsing and printing in the zpool/zfs style, and the table printer shared by every
//! listing verb (`-H`, `-p`, `-o`, `-j`).

use serde_json::{Map, Value};

// The numbers in zfs's style live below both this table printer and the JSON documents
// ([`crate::json`]), which the printer uses for `-j`.
pub use crate::units::{human_bytes, utc_time};

/// Deterministic incompressible bytes (xorshift64) for demos and benchmarks.
pub fn pseudo_random(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(length);
    out
}

/// Parse a size such as `512`, `64K`, `2G`, `1.5T` (binary multiples, as zfs does).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| {
        format!("invalid size {text:?}: expected a number with an optional K, M, G or T suffix")
    })?;
    let shift = match suffix.to_ascii_uppercase().trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        other => return Err(format!("invalid size suffix {other:?} in {text:?}")),
    };
    if !(number.is_finite() && number >= 0.0) {
        return Err(format!("invalid size {text:?}"));
    }
    let bytes = number * (1u64 << shift) as f64;
    if bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(bytes as u64)
}

/// One cell: what `-p` prints and what the human form prints.
#[derive(Clone, Debug)]
pub struct Cell {
    pub exact: String,
    pub human: String,
    pub json: Value,
}

impl Cell {
    pub fn text(value: impl Into<String>) -> Cell {
        let value = value.into();
        Cell {
            exact: value.clone(),
            human: value.clone(),
            json: Value::String(value),
        }
    }

    pub fn bytes(value: u64) -> Cell {
        Cell {
            exact: value.to_string(),
            human: human_bytes(value),
            json: Value::from(value),
        }
    }

    /// A space limit: bytes, or `none` (exact `0`, as zfs -p prints it) when unset.
    pub fn limit(value: u64) -> Cell {
        if value == 0 {
            Cell {
                exact: "0".into(),
                human: "none".into(),
                json: Value::from(0u64),
            }
        } else {
            Cell::bytes(value)
        }
    }

    pub fn percent(value: Option<u64>) -> Cell {
        match value {
            Some(value) => Cell {
                exact: value.to_string(),
                human: format!("{value}%"),
                json: Value::from(value),
            },
            None => Cell {
                exact: "-".into(),
                human: "-".into(),
                json: Value::Null,
            },
        }
    }
}

/// How a listing is printed.
#[derive(Clone, Debug, Default)]
pub struct ListFormat {
    pub no_header: bool,
    pub exact: bool,
    pub json: bool,
    pub fields: Option<Vec<String>>,
}

/// The indexes of the columns `-o` selects (all of them without `-o`), in its order; an
/// unknown field is an error naming the valid ones.
pub fn selected_fields(columns: &[&str], format: &ListFormat) -> Result<Vec<usize>, String> {
    match &format.fields {
        None => Ok((0..columns.len()).collect()),
        Some(fields) => fields
            .iter()
            .map(|field| {
                columns
                    .iter()
                    .position(|column| column == field)
                    .ok_or_else(|| {
                        format!(
                            "invalid field {field:?}; valid fields are: {}",
                            columns.join(", ")
                        )
                    })
            })
            .collect(),
    }
}

/// Print rows of named cells. Unknown `-o` fields are an error naming the valid ones. `-j`
/// prints the rows as an array under `json_key`, after the `output_version` header naming
/// `command` ([`crate::json`]): the form of tarn's own tables, which OpenZFS has no `-j` for.
pub fn print_table(
    columns: &[&str],
    rows: &[Vec<Cell>],
    format: &ListFormat,
    command: &str,
    json_key: &str,
) -> Result<(), String> {
    let selected = selected_fields(columns, format)?;
    if format.json {
        let items: Vec<Value> = rows
            .iter()
            .map(|row| {
                let mut object = Map::new();
                for &index in &selected {
                    object.insert(columns[index].to_string(), row[index].json.clone());
                }
                Value::Object(object)
            })
            .collect();
        let mut document = crate::json::Document::new(command);
        document.insert(json_key, Value::Array(items));
        document.print();
        return Ok(());
    }
    let cell_text = |cell: &Cell| {
        if format.exact {
            cell.exact.clone()
        } else {
            cell.human.clone()
        }
    };
    if format.no_header {
        for row in rows {
            let line: Vec<String> = selected
                .iter()
                .map(|&index| cell_text(&row[index]))
                .collect();
            out!("{}", line.join("\t"));
        }
        return Ok(());
    }
    let mut widths: Vec<usize> = selected.iter().map(|&index| columns[index].len()).collect();
    for row in rows {
        for (position, &index) in selected.iter().enumerate() {
            widths[position] = widths[position].max(cell_text(&row[index]).len());
        }
    }
    let header: Vec<String> = selected
        .iter()
        .enumerate()
        .map(|(position, &index)| {
            format!(
                "{:<width$}",
                columns[index].to_uppercase(),
                width = widths[position]
            )
        })
        .collect();
    out!("{}", header.join("  ").trim_end());
    for row in rows {
        let line: Vec<String> = selected
            .iter()
            .enumerate()
            .map(|(position, &index)| {
                format!(
                    "{:<width$}",
                    cell_text(&row[index]),
                    width = widths[position]
                )
            })
            .collect();
        out!("{}", line.join("  ").trim_end());
    }
    Ok(())
}

/// A count: the same in every form.
pub fn count_cell(value: u64) -> Cell {
    Cell {
        exact: value.to_string(),
        human: value.to_string(),
        json: serde_json::Value::from(value),
    }
}

/// A size in bytes: exact, human (`1.5M`) and JSON forms.
pub fn byte_cell(value: u64) -> Cell {
    Cell {
        exact: value.to_string(),
        human: human_bytes(value),
        json: serde_json::Value::from(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
        assert_eq!(human_bytes(1000), "1000");
        assert_eq!(human_bytes(2 << 30), "2G");
        assert_eq!(human_bytes(131072), "128K");
        assert_eq!(human_bytes((1 << 20) + 1), "1.00M");
        assert_eq!(human_bytes(150 << 20), "150M");
    }
}
