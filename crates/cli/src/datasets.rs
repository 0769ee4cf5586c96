//! The dataset verbs (`tarn create|destroy|list|get|set|inherit|mount|unmount`): the daemon
//! side that acts on an imported pool, and the rows both sides share (the daemon fills them,
//! the CLI prints them with `-H`, `-p`, `-o` and `-j`).
//!
//! # JSON shapes (stable)
//! - `tarn list -j`: `{"datasets": [{"name": "tank/a", "used": 12345, "avail": 6789,
//!   "refer": 4096, "mountpoint": "/tank/a", ...}]}`, byte counts as exact numbers, one key
//!   per selected column.
//! - `tarn get -j`: `{"properties": [{"name": "tank/a", "property": "compression", "value":
//!   "lz4", "source": "local"}]}`; `value` is text (exact with `-p`), `source` is `default`,
//!   `local`, `inherited from NAME` or `-` for read-only statistics.
//! - `tarn mount -j`: `{"mounts": [{"name": "tank/a", "mountpoint": "/tank/a"}]}`.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tarn::dataset::props::{Property, PropertySource, READ_ONLY_PROPERTIES};
use tarn::pool::datasets::DatasetInfo;
use tarn::pool::Pool;

use crate::format::{human_bytes, Cell};
use crate::mounts::{Mounts, Placement};
use crate::Failure;

/// Columns of `tarn list` (the first five are the default).
pub const LIST_COLUMNS: [&str; 17] = [
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
}

impl DatasetRow {
    pub fn cells(&self) -> Vec<Cell> {
        vec![
            Cell::text(self.name.clone()),
            Cell::bytes(self.used),
            Cell::bytes(self.avail),
            Cell::bytes(self.refer),
            Cell::text(self.mountpoint.clone()),
            Cell::text("filesystem"),
            time_cell(self.creation),
            ratio_cell(self.compressratio),
            ratio_cell(self.refcompressratio),
            Cell::text(if self.mounted { "yes" } else { "no" }),
            Cell::bytes(self.recordsize),
            Cell::text(self.compression.clone()),
            Cell::text(self.checksum.clone()),
            Cell {
                exact: self.copies.to_string(),
                human: self.copies.to_string(),
                json: self.copies.into(),
            },
            Cell::text(self.atime.clone()),
            Cell::text(self.readonly.clone()),
            Cell::text(self.canmount.clone()),
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

fn ratio_cell(ratio: f64) -> Cell {
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

/// `YYYY-MM-DD HH:MM` in UTC (days to civil date after Howard Hinnant's algorithm).
pub fn utc_time(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let minute_of_day = (seconds % 86_400) / 60;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        minute_of_day / 60,
        minute_of_day % 60
    )
}

/// A mountpoint as shown: the property's path under the pool's altroot, or none/legacy.
fn shown_mountpoint(pool: &Pool, mounts: &Mounts, name: &str) -> Result<String, Failure> {
    Ok(match mounts.placement(pool, name)? {
        Placement::At { path, .. } => path.display().to_string(),
        Placement::Never(_) => {
            let (value, _) = pool.property(name, Property::Mountpoint)?;
            if value.starts_with('/') {
                // canmount=off: still shown where it would mount.
                match mounts.altroot(pool.name()) {
                    Some(root) => root
                        .join(value.trim_start_matches('/'))
                        .display()
                        .to_string(),
                    None => value,
                }
            } else {
                value
            }
        }
    })
}

fn row(pool: &Pool, mounts: &Mounts, info: &DatasetInfo) -> Result<DatasetRow, Failure> {
    let value = |property| {
        pool.property(&info.name, property)
            .map(|(value, _)| value)
            .map_err(Failure::from)
    };
    Ok(DatasetRow {
        name: info.name.clone(),
        used: info.used,
        avail: info.available,
        refer: info.referenced,
        mountpoint: shown_mountpoint(pool, mounts, &info.name)?,
        creation: info.creation_time,
        compressratio: info.compress_ratio(),
        refcompressratio: info.ref_compress_ratio(),
        mounted: mounts.mountpoint_of(&info.name).is_some(),
        recordsize: value(Property::Recordsize)?.parse().unwrap_or(0),
        compression: value(Property::Compression)?,
        checksum: value(Property::Checksum)?,
        copies: value(Property::Copies)?.parse().unwrap_or(1),
        atime: value(Property::Atime)?,
        readonly: value(Property::Readonly)?,
        canmount: value(Property::Canmount)?,
    })
}

/// `tarn list`: every dataset of every pool, or `name` (and with `recursive` its
/// descendants).
pub fn list(
    pools: &[Arc<Pool>],
    mounts: &Mounts,
    name: Option<&str>,
    recursive: bool,
) -> Result<Vec<DatasetRow>, Failure> {
    let mut rows = Vec::new();
    let mut found = name.is_none();
    for pool in pools {
        for info in pool.datasets() {
            let wanted = match name {
                None => true,
                Some(name) => {
                    info.name == name
                        || (recursive
                            && info
                                .name
                                .strip_prefix(name)
                                .is_some_and(|rest| rest.starts_with('/')))
                }
            };
            if wanted {
                found |= Some(info.name.as_str()) == name;
                rows.push(row(pool, mounts, &info)?);
            }
        }
    }
    if !found {
        return Err(Failure(format!(
            "dataset {:?} does not exist",
            name.unwrap_or_default()
        )));
    }
    Ok(rows)
}

/// `tarn get`: `properties` (names, or `all`) of one dataset.
pub fn get(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    properties: &[String],
) -> Result<Vec<PropertyRow>, Failure> {
    let info = pool
        .datasets()
        .into_iter()
        .find(|info| info.name == name)
        .ok_or_else(|| Failure(format!("dataset {name:?} does not exist")))?;
    let wanted: Vec<String> = if properties.iter().any(|p| p == "all") {
        READ_ONLY_PROPERTIES
            .iter()
            .map(|p| p.to_string())
            .chain(["mounted".to_string()])
            .chain(Property::ALL.iter().map(|p| p.name().to_string()))
            .collect()
    } else {
        properties.to_vec()
    };
    let mut rows = Vec::new();
    for property in wanted {
        let statistic = |exact: String, human: String| PropertyRow {
            name: name.to_string(),
            property: property.clone(),
            exact,
            human,
            source: PropertySource::None.to_string(),
        };
        let bytes = |value: u64| statistic(value.to_string(), human_bytes(value));
        let row = match property.as_str() {
            "type" => statistic("filesystem".into(), "filesystem".into()),
            "creation" => statistic(info.creation_time.to_string(), utc_time(info.creation_time)),
            "used" => bytes(info.used),
            "available" | "avail" => bytes(info.available),
            "referenced" | "refer" => bytes(info.referenced),
            "compressratio" => {
                let cell = ratio_cell(info.compress_ratio());
                statistic(cell.exact, cell.human)
            }
            "refcompressratio" => {
                let cell = ratio_cell(info.ref_compress_ratio());
                statistic(cell.exact, cell.human)
            }
            "origin" => statistic("-".into(), "-".into()),
            "mounted" => {
                let mounted = if mounts.mountpoint_of(name).is_some() {
                    "yes"
                } else {
                    "no"
                };
                statistic(mounted.into(), mounted.into())
            }
            "name" => statistic(name.into(), name.into()),
            other => {
                let property = Property::from_name(other).ok_or_else(|| {
                    Failure(format!(
                        "unknown property {other:?}; known properties: {}, {}",
                        READ_ONLY_PROPERTIES.join(", "),
                        Property::ALL.map(Property::name).join(", ")
                    ))
                })?;
                let (mut value, source) = pool.property(name, property)?;
                if property == Property::Mountpoint {
                    value = shown_mountpoint(pool, mounts, name)?;
                }
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
        };
        rows.push(row);
    }
    Ok(rows)
}

/// `tarn set` and `tarn inherit` (value None).
pub fn set(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    property: &str,
    value: Option<&str>,
) -> Result<(), Failure> {
    if pool.core.readonly {
        return Err(Failure(format!(
            "pool {} is imported read-only",
            pool.name()
        )));
    }
    pool.set_property(name, property, value)?;
    let property = Property::from_name(property).expect("validated by set_property");
    mounts.apply_change(pool, name, property)
}

/// `tarn destroy`: unmount (children first), then destroy.
pub fn destroy(pool: &Pool, mounts: &Mounts, name: &str, recursive: bool) -> Result<(), Failure> {
    if name == pool.name() {
        return Err(Failure(format!(
            "cannot destroy {name}: it is the pool's root file system; destroy the pool instead (tarn pool destroy {name})"
        )));
    }
    if !pool.has_dataset(name) {
        return Err(Failure(format!("dataset {name:?} does not exist")));
    }
    let children: Vec<String> = pool
        .datasets()
        .into_iter()
        .map(|info| info.name)
        .filter(|other| {
            other
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('/'))
        })
        .collect();
    if !children.is_empty() && !recursive {
        return Err(Failure(format!(
            "cannot destroy {name}: it has children ({}); use -r to destroy them too",
            children.join(", ")
        )));
    }
    mounts.unmount_within(name, false)?;
    for destroyed in pool.destroy_dataset(name, recursive)? {
        out!("destroyed {destroyed}");
    }
    Ok(())
}

/// `tarn mount FS [MOUNTPOINT]`.
pub fn mount(
    pool: &Pool,
    mounts: &Mounts,
    name: &str,
    mountpoint: Option<&Path>,
) -> Result<(), Failure> {
    if pool.core.readonly {
        return Err(Failure(format!(
            "pool {} is imported read-only: its file systems are not mounted",
            pool.name()
        )));
    }
    if !pool.has_dataset(name) {
        return Err(Failure(format!("dataset {name:?} does not exist")));
    }
    let target = match (mountpoint, mounts.placement(pool, name)?) {
        (Some(path), _) if path.is_absolute() => path.to_path_buf(),
        (Some(path), _) => {
            return Err(Failure(format!(
                "bad request: mountpoint {} is not absolute",
                path.display()
            )))
        }
        (None, Placement::At { path, .. }) => path,
        (None, Placement::Never(why)) => {
            return Err(Failure(format!(
                "cannot mount {name}: {why}; set mountpoint to a path (and canmount to on), or name a mountpoint"
            )))
        }
    };
    mounts.mount(pool, name, &target)
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
        };
        let cells = row.cells();
        assert_eq!(cells.len(), LIST_COLUMNS.len());
        assert_eq!(cells[1].human, "1M");
        assert_eq!(cells[7].human, "1.50x");
        assert_eq!(cells[8].human, "1.25x");
        assert_eq!(cells[10].human, "128K");
    }
}

/// The CLI side of the dataset verbs: build the request, ask the daemon (which must be
/// running: datasets live in imported pools), print the answer.
pub mod cli {
    use std::path::{Path, PathBuf};

    use crate::client;
    use crate::format::{print_table, Cell, ListFormat};
    use crate::protocol::{Request, Response};
    use crate::Failure;

    use super::{DatasetRow, PropertyRow, GET_COLUMNS, LIST_COLUMNS, LIST_DEFAULT_COLUMNS};

    /// Ask the daemon about `dataset`; without a daemon no pool is imported and there is
    /// nothing to act on.
    fn ask(socket: &Path, dataset: Option<&str>, request: &Request) -> Result<Response, Failure> {
        client::ask_if_running(socket, request)?.ok_or_else(|| {
            let pool = dataset.map(crate::mounts::pool_of);
            Failure(match pool {
                Some(pool) => format!(
                    "pool {pool:?} is not imported (no pools are: no tarn daemon on {}); import it with tarn pool import {pool}",
                    socket.display()
                ),
                None => format!(
                    "no pools are imported (no tarn daemon on {}); import one with tarn pool import",
                    socket.display()
                ),
            })
        })
    }

    /// Print the daemon's output; its status.
    fn forward(response: &Response) -> u8 {
        crate::output::print_raw(&response.stdout, &response.stderr);
        response.status
    }

    /// Split `prop=value` settings.
    pub fn parse_settings(settings: &[String]) -> Result<Vec<(String, String)>, Failure> {
        settings
            .iter()
            .map(|setting| {
                setting
                    .split_once('=')
                    .map(|(name, value)| (name.to_string(), value.to_string()))
                    .filter(|(name, _)| !name.is_empty())
                    .ok_or_else(|| {
                        Failure(format!(
                            "invalid property setting {setting:?}: expected prop=value"
                        ))
                    })
            })
            .collect()
    }

    /// A dataset name as the user gave it, checked for the obvious mistakes before asking.
    fn check_name(name: &str) -> Result<(), Failure> {
        if name.is_empty() || name.starts_with('/') || name.ends_with('/') {
            return Err(Failure(format!(
                "invalid dataset name {name:?}: expected POOL/NAME"
            )));
        }
        Ok(())
    }

    pub fn create(
        socket: &Path,
        parents: bool,
        settings: &[String],
        name: String,
    ) -> Result<u8, Failure> {
        check_name(&name)?;
        if !name.contains('/') {
            return Err(Failure(format!(
                "cannot create {name:?}: a file system is named POOL/NAME; create pools with tarn pool create"
            )));
        }
        let properties = parse_settings(settings)?;
        let dataset_name = name.clone();
        let request = Request::Create {
            name,
            properties,
            parents,
        };
        Ok(forward(&ask(socket, Some(&dataset_name), &request)?))
    }

    pub fn destroy(
        socket: &Path,
        recursive: bool,
        dry_run: bool,
        name: String,
    ) -> Result<u8, Failure> {
        check_name(&name)?;
        if dry_run {
            let mut names = list_rows(socket, Some(name.clone()), true)?
                .into_iter()
                .map(|row| row.name)
                .collect::<Vec<_>>();
            if names.len() > 1 && !recursive {
                return Err(Failure(format!(
                    "cannot destroy {name}: it has children; use -r to destroy them too"
                )));
            }
            names.sort_by_key(|name| std::cmp::Reverse(name.matches('/').count()));
            for name in names {
                out!("would destroy {name}");
            }
            return Ok(0);
        }
        Ok(forward(&ask(
            socket,
            Some(&name.clone()),
            &Request::Destroy { name, recursive },
        )?))
    }

    fn list_rows(
        socket: &Path,
        name: Option<String>,
        recursive: bool,
    ) -> Result<Vec<DatasetRow>, Failure> {
        let request = Request::List { name, recursive };
        let Some(response) = client::ask_if_running(socket, &request)? else {
            return match request {
                Request::List {
                    name: Some(name), ..
                } => Err(Failure(format!(
                    "dataset {name:?} does not exist (no pools are imported)"
                ))),
                _ => Ok(Vec::new()),
            };
        };
        if response.status != 0 {
            return Err(Failure(
                response
                    .stderr
                    .trim()
                    .trim_start_matches("tarn: ")
                    .to_string(),
            ));
        }
        serde_json::from_value(response.data["datasets"].clone())
            .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))
    }

    pub fn list(
        socket: &Path,
        recursive: bool,
        types: Option<Vec<String>>,
        mut format: ListFormat,
        name: Option<String>,
    ) -> Result<u8, Failure> {
        for kind in types.iter().flatten() {
            if !["filesystem", "snapshot", "all"].contains(&kind.as_str()) {
                return Err(Failure(format!(
                    "invalid type {kind:?}: expected filesystem, snapshot or all"
                )));
            }
        }
        let rows = list_rows(socket, name, recursive)?;
        // Snapshots do not exist yet, so -t snapshot lists nothing.
        let only_snapshots = types
            .as_ref()
            .is_some_and(|kinds| kinds.iter().all(|kind| kind == "snapshot"));
        let rows: Vec<Vec<Cell>> = if only_snapshots {
            Vec::new()
        } else {
            rows.iter().map(DatasetRow::cells).collect()
        };
        if format.fields.is_none() {
            format.fields = Some(LIST_DEFAULT_COLUMNS.map(str::to_string).to_vec());
        }
        print_table(&LIST_COLUMNS, &rows, &format, "datasets")?;
        Ok(0)
    }

    pub fn get(
        socket: &Path,
        format: ListFormat,
        properties: String,
        names: Vec<String>,
    ) -> Result<u8, Failure> {
        let properties: Vec<String> = properties
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if properties.is_empty() {
            return Err(Failure(
                "no property named: give PROP[,PROP...] or all".into(),
            ));
        }
        for name in &names {
            check_name(name)?;
        }
        let first = names.first().cloned();
        let response = ask(
            socket,
            first.as_deref(),
            &Request::Get { names, properties },
        )?;
        if response.status != 0 {
            return Ok(forward(&response));
        }
        let rows: Vec<PropertyRow> = serde_json::from_value(response.data["properties"].clone())
            .map_err(|error| Failure(format!("unreadable answer from the daemon: {error}")))?;
        let cells: Vec<Vec<Cell>> = rows
            .iter()
            .map(|row| {
                if format.exact {
                    row.cells()
                } else {
                    row.human_json_cells()
                }
            })
            .collect();
        print_table(&GET_COLUMNS, &cells, &format, "properties")?;
        Ok(0)
    }

    pub fn set(socket: &Path, setting: String, name: String) -> Result<u8, Failure> {
        check_name(&name)?;
        let (property, value) = parse_settings(std::slice::from_ref(&setting))?
            .pop()
            .expect("one setting");
        Ok(forward(&ask(
            socket,
            Some(&name.clone()),
            &Request::Set {
                name,
                property,
                value: Some(value),
            },
        )?))
    }

    pub fn inherit(socket: &Path, property: String, name: String) -> Result<u8, Failure> {
        check_name(&name)?;
        Ok(forward(&ask(
            socket,
            Some(&name.clone()),
            &Request::Set {
                name,
                property,
                value: None,
            },
        )?))
    }

    pub fn mount(
        socket: &Path,
        all: bool,
        json: bool,
        name: Option<String>,
        mountpoint: Option<PathBuf>,
    ) -> Result<u8, Failure> {
        if all && name.is_some() {
            return Err(Failure("mount -a takes no file system name".into()));
        }
        let request = Request::Mount {
            name: name.clone(),
            mountpoint: mountpoint.as_deref().map(crate::verbs::absolute),
            all,
        };
        if name.is_none() && !all {
            // List what is mounted (nothing when no daemon runs).
            let rows = match client::ask_if_running(socket, &request)? {
                Some(response) => response.data["mounts"].clone(),
                None => serde_json::json!([]),
            };
            let empty = Vec::new();
            let cells: Vec<Vec<Cell>> = rows
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|row| {
                    vec![
                        Cell::text(row["name"].as_str().unwrap_or_default()),
                        Cell::text(row["mountpoint"].as_str().unwrap_or_default()),
                    ]
                })
                .collect();
            let format = ListFormat {
                no_header: !json,
                json,
                ..ListFormat::default()
            };
            print_table(&["name", "mountpoint"], &cells, &format, "mounts")?;
            return Ok(0);
        }
        if let Some(name) = &name {
            check_name(name)?;
        }
        Ok(forward(&ask(socket, name.as_deref(), &request)?))
    }

    pub fn unmount(
        socket: &Path,
        all: bool,
        force: bool,
        target: Option<String>,
    ) -> Result<u8, Failure> {
        let target = match (target, all) {
            (Some(_), true) => return Err(Failure("unmount -a takes no file system".into())),
            (None, false) => {
                return Err(Failure(
                    "unmount what? name a file system or its mountpoint, or use -a".into(),
                ))
            }
            (Some(target), false) if target.starts_with('/') || target.starts_with('.') => Some(
                crate::verbs::absolute(Path::new(&target))
                    .display()
                    .to_string(),
            ),
            (target, _) => target,
        };
        let dataset = target.clone().filter(|target| !target.starts_with('/'));
        Ok(forward(&ask(
            socket,
            dataset.as_deref(),
            &Request::Unmount { target, all, force },
        )?))
    }
}
