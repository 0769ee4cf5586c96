//! The rows the daemon sends and the CLI prints: `pool list` rows, `pool status` entries,
//! `pool get` properties, and the dataset rows of `tarn list` and `tarn get` (the daemon fills
//! them with exact numbers, the CLI prints them with `-H`, `-p`, `-o` and `-j`).
//!
//! # JSON shapes (stable)
//! - `tarn list -j`: `{"datasets": [{"name": "tank/a", "used": 12345, "avail": 6789,
//!   "refer": 4096, "mountpoint": "/tank/a", ...}]}`, byte counts as exact numbers, one key
//!   per selected column.
//! - `tarn get -j`: `{"properties": [{"name": "tank/a", "property": "compression", "value":
//!   "lz4", "source": "local"}]}`; `value` is text (exact with `-p`), `source` is `default`,
//!   `local`, `inherited from NAME` or `-` for read-only statistics.
//! - `tarn mount -j`: `{"mounts": [{"name": "tank/a", "mountpoint": "/tank/a"}]}`.

use serde::{Deserialize, Serialize};
use tarn::dataset::props::{Property, PropertySource};

use crate::format::{human_bytes, utc_time, Cell};

/// One row of `pool list`, as the daemon sends it (exact numbers; the CLI formats).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolRow {
    pub name: String,
    pub guid: u64,
    pub size: u64,
    pub alloc: u64,
    pub frag: Option<u64>,
    pub health: String,
    /// Bytes still to be freed in the background (absent from older daemons: 0).
    #[serde(default)]
    pub freeing: u64,
}

/// Columns of `pool list` (the first seven are the default; `freeing` with `-o`).
pub const POOL_LIST_COLUMNS: [&str; 8] = [
    "name", "size", "alloc", "free", "frag", "cap", "health", "freeing",
];

/// The columns `pool list` prints without `-o`.
pub const POOL_LIST_DEFAULT_COLUMNS: [&str; 7] =
    ["name", "size", "alloc", "free", "frag", "cap", "health"];

impl PoolRow {
    pub fn cells(&self) -> Vec<Cell> {
        let cap = (self.alloc * 100).checked_div(self.size).unwrap_or(0);
        vec![
            Cell::text(self.name.clone()),
            Cell::bytes(self.size),
            Cell::bytes(self.alloc),
            Cell::bytes(self.size - self.alloc.min(self.size)),
            Cell::percent(self.frag),
            Cell::percent(Some(cap)),
            Cell::text(self.health.clone()),
            Cell::bytes(self.freeing),
        ]
    }
}

/// A pool property's value, typed so the CLI can print it exactly (`-p`) or for people.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolPropertyValue {
    Bytes(u64),
    /// A percentage, or none (`-`).
    Percent(Option<u64>),
    Number(u64),
    Text(String),
}

/// One row of `pool get` (columns [`GET_COLUMNS`], as zpool's NAME PROPERTY VALUE SOURCE).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PoolPropertyRow {
    pub name: String,
    pub property: String,
    pub value: PoolPropertyValue,
    /// `default`, `local` or `-` (a read-only figure).
    pub source: String,
}

impl PoolPropertyRow {
    pub fn cells(&self) -> Vec<Cell> {
        let value = match &self.value {
            PoolPropertyValue::Bytes(bytes) => Cell::bytes(*bytes),
            PoolPropertyValue::Percent(percent) => Cell::percent(*percent),
            PoolPropertyValue::Number(number) => Cell {
                exact: number.to_string(),
                human: number.to_string(),
                json: serde_json::Value::from(*number),
            },
            PoolPropertyValue::Text(text) => Cell::text(text.clone()),
        };
        vec![
            Cell::text(self.name.clone()),
            Cell::text(self.property.clone()),
            value,
            Cell::text(self.source.clone()),
        ]
    }
}

/// One pool of `pool status`: its text block and its JSON document.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusEntry {
    pub name: String,
    pub guid: u64,
    pub text: String,
    pub json: serde_json::Value,
}

/// Columns of `tarn list` (the first five are the default).
pub const LIST_COLUMNS: [&str; 27] = [
    "name",
    "used",
    "avail",
    "refer",
    "mountpoint",
    "type",
    "creation",
    "compressratio",
    "refcompressratio",
    "mounted",
    "recordsize",
    "compression",
    "checksum",
    "copies",
    "atime",
    "readonly",
    "canmount",
    "written",
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "guid",
    "createtxg",
    "origin",
    "snapdir",
    "xattr",
    "acltype",
];

pub const LIST_DEFAULT_COLUMNS: [&str; 5] = ["name", "used", "avail", "refer", "mountpoint"];

/// Columns of `tarn get`.
pub const GET_COLUMNS: [&str; 4] = ["name", "property", "value", "source"];

/// One dataset in `tarn list`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetRow {
    pub name: String,
    pub used: u64,
    pub avail: u64,
    pub refer: u64,
    pub mountpoint: String,
    pub creation: u64,
    pub compressratio: f64,
    pub refcompressratio: f64,
    pub mounted: bool,
    pub recordsize: u64,
    pub compression: String,
    pub checksum: String,
    pub copies: u64,
    pub atime: String,
    pub readonly: String,
    pub canmount: String,
    /// `filesystem`, `snapshot` or `bookmark`.
    #[serde(default = "filesystem")]
    pub kind: String,
    #[serde(default)]
    pub written: u64,
    #[serde(default)]
    pub usedbydataset: u64,
    #[serde(default)]
    pub usedbysnapshots: u64,
    #[serde(default)]
    pub usedbychildren: u64,
    #[serde(default)]
    pub guid: u64,
    #[serde(default)]
    pub createtxg: u64,
    /// A clone's origin snapshot, `-` for none.
    #[serde(default = "dash")]
    pub origin: String,
    #[serde(default = "dash")]
    pub snapdir: String,
    #[serde(default = "dash")]
    pub xattr: String,
    #[serde(default = "dash")]
    pub acltype: String,
}

fn dash() -> String {
    "-".into()
}

fn filesystem() -> String {
    "filesystem".into()
}

/// A number printed the same way everywhere.
fn number_cell(value: u64) -> Cell {
    Cell {
        exact: value.to_string(),
        human: value.to_string(),
        json: value.into(),
    }
}

impl DatasetRow {
    pub fn is_snapshot(&self) -> bool {
        self.kind == "snapshot"
    }

    pub fn cells(&self) -> Vec<Cell> {
        // What a snapshot does not have (it is read through its file system's mount).
        let for_filesystem = |cell: Cell| {
            if self.is_snapshot() {
                Cell::text("-")
            } else {
                cell
            }
        };
        vec![
            Cell::text(self.name.clone()),
            Cell::bytes(self.used),
            for_filesystem(Cell::bytes(self.avail)),
            Cell::bytes(self.refer),
            for_filesystem(Cell::text(self.mountpoint.clone())),
            Cell::text(self.kind.clone()),
            time_cell(self.creation),
            ratio_cell(self.compressratio),
            ratio_cell(self.refcompressratio),
            for_filesystem(Cell::text(if self.mounted { "yes" } else { "no" })),
            Cell::bytes(self.recordsize),
            Cell::text(self.compression.clone()),
            Cell::text(self.checksum.clone()),
            number_cell(self.copies),
            Cell::text(self.atime.clone()),
            Cell::text(self.readonly.clone()),
            for_filesystem(Cell::text(self.canmount.clone())),
            Cell::bytes(self.written),
            for_filesystem(Cell::bytes(self.usedbydataset)),
            for_filesystem(Cell::bytes(self.usedbysnapshots)),
            for_filesystem(Cell::bytes(self.usedbychildren)),
            number_cell(self.guid),
            number_cell(self.createtxg),
            Cell::text(self.origin.clone()),
            Cell::text(self.snapdir.clone()),
            Cell::text(self.xattr.clone()),
            Cell::text(self.acltype.clone()),
        ]
    }
}

/// One property of one dataset in `tarn get`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PropertyRow {
    pub name: String,
    pub property: String,
    /// The value as `-p` prints it (exact numbers).
    pub exact: String,
    /// The value as people read it (`128K`).
    pub human: String,
    pub source: String,
}

impl PropertyRow {
    /// The `tarn get` row of a settable property's effective value (of a file system or a
    /// snapshot): sizes in human form beside the exact value.
    pub fn settable(
        name: &str,
        property: Property,
        value: String,
        source: PropertySource,
    ) -> PropertyRow {
        let human = match property {
            Property::Recordsize => human_bytes(value.parse().unwrap_or(0)),
            _ => value.clone(),
        };
        PropertyRow {
            name: name.to_string(),
            property: property.name().to_string(),
            exact: value,
            human,
            source: source.to_string(),
        }
    }

    pub fn cells(&self) -> Vec<Cell> {
        vec![
            Cell::text(self.name.clone()),
            Cell::text(self.property.clone()),
            Cell {
                exact: self.exact.clone(),
                human: self.human.clone(),
                json: self.exact.clone().into(),
            },
            Cell::text(self.source.clone()),
        ]
    }

    /// The cells for `-j` without `-p`: the human value.
    pub fn human_json_cells(&self) -> Vec<Cell> {
        let mut cells = self.cells();
        cells[2].json = self.human.clone().into();
        cells
    }
}

pub fn ratio_cell(ratio: f64) -> Cell {
    Cell {
        exact: format!("{ratio:.2}"),
        human: format!("{ratio:.2}x"),
        json: format!("{ratio:.2}").parse::<f64>().unwrap_or(1.0).into(),
    }
}

fn time_cell(seconds: u64) -> Cell {
    Cell {
        exact: seconds.to_string(),
        human: utc_time(seconds),
        json: seconds.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00");
        assert_eq!(utc_time(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc_time(1_795_315_140), "2026-11-22 02:39");
    }

    #[test]
    fn rows_have_a_cell_per_column() {
        let row = DatasetRow {
            name: "tank/a".into(),
            used: 1 << 20,
            avail: 1 << 30,
            refer: 4096,
            mountpoint: "/tank/a".into(),
            creation: 0,
            compressratio: 1.5,
            refcompressratio: 1.25,
            mounted: true,
            recordsize: 131072,
            compression: "lz4".into(),
            checksum: "fletcher4".into(),
            copies: 1,
            atime: "on".into(),
            readonly: "off".into(),
            canmount: "on".into(),
            kind: "filesystem".into(),
            written: 0,
            usedbydataset: 0,
            usedbysnapshots: 0,
            usedbychildren: 0,
            guid: 7,
            createtxg: 4,
            origin: "-".into(),
            snapdir: "hidden".into(),
            xattr: "sa".into(),
            acltype: "off".into(),
        };
        let cells = row.cells();
        assert_eq!(cells.len(), LIST_COLUMNS.len());
        assert_eq!(cells[1].human, "1M");
        assert_eq!(cells[7].human, "1.50x");
        assert_eq!(cells[8].human, "1.25x");
        assert_eq!(cells[10].human, "128K");
    }
}
