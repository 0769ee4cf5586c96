//! The rows the daemon sends and the CLI prints: `pool list` rows, `pool status` entries,
//! `pool get` properties, the dataset rows of `tarn list` and `tarn get`, and the owners of
//! `tarn userspace` (the daemon fills them with exact numbers, the CLI prints them with `-H`,
//! `-p`, `-o` and `-j`).
//!
//! `-j` prints them in OpenZFS 2.3's schema ([`crate::json`]): pools and datasets keyed by
//! name, each with its identity (`name`, `type`, `guid`, `createtxg`, ...) and a `properties`
//! object of value/source pairs named as zpool and zfs name them (`allocated`, not `alloc`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tarn::{Property, PropertySource};

use crate::format::{human_bytes, utc_time, Cell};
use crate::json::{self, Source};

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
    /// The last synced txg.
    #[serde(default)]
    pub txg: u64,
}

/// Columns of `pool list` (the first seven are the default; `freeing` with `-o`).
pub const POOL_LIST_COLUMNS: [&str; 8] = [
    "name", "size", "alloc", "free", "frag", "cap", "health", "freeing",
];

/// The property each column of `pool list` is in `-j` (zpool's names).
pub const POOL_LIST_PROPERTIES: [&str; 8] = [
    "name",
    "size",
    "allocated",
    "free",
    "fragmentation",
    "capacity",
    "health",
    "freeing",
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

    /// What `-j` says of the pool beside its properties (zpool's `fill_pool_info`): `name`,
    /// `type` (`POOL`, with `typed`), `state`, `guid` and `txg`.
    pub fn json_identity(&self, typed: bool, exact: bool) -> Map<String, Value> {
        let mut identity = Map::new();
        identity.insert("name".into(), self.name.clone().into());
        if typed {
            identity.insert("type".into(), "POOL".into());
        }
        identity.insert("state".into(), self.health.clone().into());
        identity.insert("guid".into(), json::number(self.guid, exact));
        if self.txg != 0 {
            identity.insert("txg".into(), json::number(self.txg, exact));
        }
        identity
    }

    /// The pool in `pool list -j`: its identity and the columns selected (`name` aside) as
    /// read-only properties.
    pub fn json_object(&self, selected: &[usize], exact: bool) -> Value {
        let cells = self.cells();
        let mut object = self.json_identity(true, exact);
        let properties = selected.iter().filter(|&&index| index != 0).map(|&index| {
            let cell = &cells[index];
            let value = json::value(&cell.human, &cell.exact, exact);
            (
                POOL_LIST_PROPERTIES[index].to_string(),
                json::property(value, &Source::None),
            )
        });
        object.insert("properties".into(), json::keyed(properties));
        Value::Object(object)
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

    /// The property as `pool get -j` prints it: its value/source pair.
    pub fn json_property(&self, exact: bool) -> Value {
        let cell = &self.cells()[2];
        json::property(
            json::value(&cell.human, &cell.exact, exact),
            &Source::parse(&self.source),
        )
    }
}

/// One pool of `pool status`: its text block and its `-j` object (the pool's entry under
/// `pools`, in zpool's schema).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatusEntry {
    pub name: String,
    pub guid: u64,
    pub text: String,
    pub json: serde_json::Value,
}

/// Columns of `tarn list` (the first five are the default).
pub const LIST_COLUMNS: [&str; 32] = [
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
    "quota",
    "refquota",
    "reservation",
    "refreservation",
    "usedbyrefreservation",
];

pub const LIST_DEFAULT_COLUMNS: [&str; 5] = ["name", "used", "avail", "refer", "mountpoint"];

/// The property a column of `tarn list` is in `-j` (zfs's names: `available`, `referenced`).
pub fn list_property(column: &str) -> &str {
    match column {
        "avail" => "available",
        "refer" => "referenced",
        other => other,
    }
}

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
    /// The space limits in bytes, 0 for none.
    #[serde(default)]
    pub quota: u64,
    #[serde(default)]
    pub refquota: u64,
    #[serde(default)]
    pub reservation: u64,
    #[serde(default)]
    pub refreservation: u64,
    #[serde(default)]
    pub usedbyrefreservation: u64,
    /// The source of each settable property shown (`default`, `local`, `inherited from NAME`),
    /// by property name; the others are read-only statistics.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
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

    pub fn is_bookmark(&self) -> bool {
        self.kind == "bookmark"
    }

    pub fn cells(&self) -> Vec<Cell> {
        // What a snapshot does not have (it is read through its file system's mount), nor a
        // bookmark.
        let for_filesystem = |cell: Cell| {
            if self.is_snapshot() || self.is_bookmark() {
                Cell::text("-")
            } else {
                cell
            }
        };
        // What a bookmark does not have: it holds no blocks (zfs shows `-`).
        let not_bookmark = |cell: Cell| {
            if self.is_bookmark() {
                Cell::text("-")
            } else {
                cell
            }
        };
        vec![
            Cell::text(self.name.clone()),
            not_bookmark(Cell::bytes(self.used)),
            for_filesystem(Cell::bytes(self.avail)),
            not_bookmark(Cell::bytes(self.refer)),
            for_filesystem(Cell::text(self.mountpoint.clone())),
            Cell::text(self.kind.clone()),
            time_cell(self.creation),
            not_bookmark(ratio_cell(self.compressratio)),
            not_bookmark(ratio_cell(self.refcompressratio)),
            for_filesystem(Cell::text(if self.mounted { "yes" } else { "no" })),
            not_bookmark(Cell::bytes(self.recordsize)),
            Cell::text(self.compression.clone()),
            Cell::text(self.checksum.clone()),
            not_bookmark(number_cell(self.copies)),
            Cell::text(self.atime.clone()),
            Cell::text(self.readonly.clone()),
            for_filesystem(Cell::text(self.canmount.clone())),
            not_bookmark(Cell::bytes(self.written)),
            for_filesystem(Cell::bytes(self.usedbydataset)),
            for_filesystem(Cell::bytes(self.usedbysnapshots)),
            for_filesystem(Cell::bytes(self.usedbychildren)),
            number_cell(self.guid),
            number_cell(self.createtxg),
            Cell::text(self.origin.clone()),
            Cell::text(self.snapdir.clone()),
            Cell::text(self.xattr.clone()),
            Cell::text(self.acltype.clone()),
            for_filesystem(Cell::limit(self.quota)),
            for_filesystem(Cell::limit(self.refquota)),
            for_filesystem(Cell::limit(self.reservation)),
            for_filesystem(Cell::limit(self.refreservation)),
            for_filesystem(Cell::bytes(self.usedbyrefreservation)),
        ]
    }

    /// The dataset in `tarn list -j`: its identity and the columns selected (`name` aside) as
    /// value/source pairs.
    pub fn json_object(&self, selected: &[usize], exact: bool) -> Value {
        let cells = self.cells();
        let mut object = dataset_identity(&self.name, &self.kind, self.createtxg, exact);
        let properties = selected.iter().filter(|&&index| index != 0).map(|&index| {
            let column = LIST_COLUMNS[index];
            let cell = &cells[index];
            let source = self
                .sources
                .get(column)
                .map_or(Source::None, |source| Source::parse(source));
            (
                list_property(column).to_string(),
                json::property(json::value(&cell.human, &cell.exact, exact), &source),
            )
        });
        object.insert("properties".into(), json::keyed(properties));
        Value::Object(object)
    }
}

/// What `-j` says of a dataset beside its properties (zfs's `fill_dataset_info`): `name`,
/// `type` (`FILESYSTEM`, `SNAPSHOT`, `BOOKMARK`), `pool`, `createtxg`, and for a snapshot its
/// `dataset` and `snapshot_name`.
pub fn dataset_identity(name: &str, kind: &str, createtxg: u64, exact: bool) -> Map<String, Value> {
    let mut identity = Map::new();
    identity.insert("name".into(), name.into());
    identity.insert("type".into(), kind.to_uppercase().into());
    let pool = name.split(['/', '@', '#']).next().unwrap_or(name);
    identity.insert("pool".into(), pool.into());
    identity.insert("createtxg".into(), json::number(createtxg, exact));
    if let Some((dataset, snapshot)) = name.split_once('@') {
        identity.insert("dataset".into(), dataset.into());
        identity.insert("snapshot_name".into(), snapshot.into());
    }
    identity
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
        let (value, human) = match property {
            Property::Recordsize => (value.clone(), human_bytes(value.parse().unwrap_or(0))),
            // zfs -p prints a limit of none as 0.
            _ if property.is_space_limit() => {
                let cell = Cell::limit(value.parse().unwrap_or(0));
                (cell.exact, cell.human)
            }
            _ => (value.clone(), value),
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

    /// The property as `tarn get -j` prints it: its value/source pair.
    pub fn json_property(&self, exact: bool) -> Value {
        json::property(
            json::value(&self.human, &self.exact, exact),
            &Source::parse(&self.source),
        )
    }
}

/// Columns of `tarn userspace|groupspace|projectspace`, zfs's; all of them are the default.
pub const USERSPACE_COLUMNS: [&str; 6] = ["type", "name", "used", "quota", "objused", "objquota"];

/// One owner in `tarn userspace|groupspace|projectspace`, as the daemon sends it: its kind and
/// numeric ID (a name is the CLI's to find), its usage as of the last sync and its quotas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerSpaceRow {
    /// `user`, `group` or `project` (the word of zfs's property names).
    pub kind: String,
    pub id: u32,
    /// Bytes charged to the owner (what `du` counts of its nodes).
    pub used: u64,
    pub quota: Option<u64>,
    /// Nodes the owner has.
    pub objused: u64,
    pub objquota: Option<u64>,
}

impl OwnerSpaceRow {
    /// The TYPE column, as zfs prints it.
    pub fn type_name(&self) -> &'static str {
        match self.kind.as_str() {
            "user" => "POSIX User",
            "group" => "POSIX Group",
            _ => "Project",
        }
    }

    /// The row's cells in [`USERSPACE_COLUMNS`]' order, the owner shown as `name`. As zfs
    /// prints them, an unset quota is `none` even with `-p`, and an object count is short
    /// (`1.46K`) in the form of a size.
    pub fn cells(&self, name: &str) -> Vec<Cell> {
        let quota = |quota: Option<u64>| match quota {
            Some(limit) => Cell::bytes(limit),
            None => Cell {
                exact: "none".into(),
                human: "none".into(),
                json: Value::Null,
            },
        };
        let name_json = if name == self.id.to_string() {
            Value::from(self.id)
        } else {
            Value::from(name)
        };
        vec![
            Cell::text(self.type_name()),
            Cell {
                json: name_json,
                ..Cell::text(name)
            },
            Cell::bytes(self.used),
            quota(self.quota),
            Cell::bytes(self.objused),
            quota(self.objquota),
        ]
    }
}

pub fn ratio_cell(ratio: f64) -> Cell {
    Cell {
        exact: format!("{ratio:.2}"),
        human: format!("{ratio:.2}x"),
        json: format!("{ratio:.2}").parse::<f64>().unwrap_or(1.0).into(),
    }
}

/// Columns of `tarn holds` (zfs holds: NAME, TAG, TIMESTAMP).
pub const HOLDS_COLUMNS: [&str; 3] = ["name", "tag", "timestamp"];

/// One user hold in `tarn holds`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldRow {
    /// The snapshot, `POOL/FS@SNAP`.
    pub name: String,
    pub tag: String,
    /// When the hold was taken, seconds since the Unix epoch (`-p` prints these).
    pub time: u64,
}

impl HoldRow {
    /// The row's cells in [`HOLDS_COLUMNS`]' order.
    pub fn cells(&self) -> Vec<Cell> {
        vec![
            Cell::text(self.name.clone()),
            Cell::text(self.tag.clone()),
            time_cell(self.time),
        ]
    }
}

fn time_cell(seconds: u64) -> Cell {
    Cell {
        exact: seconds.to_string(),
        human: utc_time(seconds),
        json: seconds.into(),
    }
}

/// A path as bytes: a file name need not be UTF-8. It travels as a JSON string when it is
/// UTF-8 (nearly always), else as an array of byte values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathBytes(pub Vec<u8>);

impl Serialize for PathBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => self.0.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for PathBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Text(String),
            Bytes(Vec<u8>),
        }
        Ok(PathBytes(match Either::deserialize(deserializer)? {
            Either::Text(text) => text.into_bytes(),
            Either::Bytes(bytes) => bytes,
        }))
    }
}

/// One change in `tarn diff` (zfs diff's line), its path relative to the file system's root
/// (the root is `/`); the CLI puts the mountpoint in front and formats it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffRow {
    /// `M` modified, `+` added, `-` removed, `R` renamed.
    pub change: char,
    /// The path (a rename's old one; a removal's in the earlier snapshot).
    pub path: PathBytes,
    /// A rename's new path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_path: Option<PathBytes>,
    /// zfs's type character: `F` file, `/` directory, `@` symlink, `=` socket, `|` fifo,
    /// `B` block device, `C` character device.
    pub file_type: char,
    /// The ctime, seconds and nanoseconds.
    pub ctime_seconds: i64,
    pub ctime_nanoseconds: u32,
    /// A regular file's link count change (printed as `(+1)`), 0 if none.
    #[serde(default)]
    pub link_change: i64,
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
            quota: 0,
            refquota: 0,
            reservation: 0,
            refreservation: 0,
            usedbyrefreservation: 0,
            sources: BTreeMap::new(),
        };
        let cells = row.cells();
        assert_eq!(cells.len(), LIST_COLUMNS.len());
        assert_eq!(cells[1].human, "1M");
        assert_eq!(cells[7].human, "1.50x");
        assert_eq!(cells[8].human, "1.25x");
        assert_eq!(cells[10].human, "128K");
    }

    #[test]
    fn owner_rows_print_as_zfs_userspace_does() {
        let row = OwnerSpaceRow {
            kind: "group".into(),
            id: 1001,
            used: 3 << 20,
            quota: None,
            objused: 1500,
            objquota: Some(2048),
        };
        let cells = row.cells("staff");
        assert_eq!(cells.len(), USERSPACE_COLUMNS.len());
        let human: Vec<&str> = cells.iter().map(|cell| cell.human.as_str()).collect();
        assert_eq!(human, ["POSIX Group", "staff", "3M", "none", "1.46K", "2K"]);
        let exact: Vec<&str> = cells.iter().map(|cell| cell.exact.as_str()).collect();
        assert_eq!(
            exact,
            ["POSIX Group", "staff", "3145728", "none", "1500", "2048"]
        );
        assert_eq!(cells[3].json, Value::Null);
        assert_eq!(row.cells("1001")[1].json, Value::from(1001));
    }

    /// A path that is UTF-8 travels as a string, any other as its bytes, and both come back
    /// byte for byte.
    #[test]
    fn paths_travel_as_their_bytes() {
        for (bytes, json) in [
            ("/a b/é".as_bytes().to_vec(), "\"/a b/é\""),
            (vec![b'/', 0xff, b'x'], "[47,255,120]"),
        ] {
            let encoded = serde_json::to_string(&PathBytes(bytes.clone())).unwrap();
            assert_eq!(encoded, json);
            let decoded: PathBytes = serde_json::from_str(&encoded).unwrap();
            assert_eq!(decoded.0, bytes);
        }
    }
}
