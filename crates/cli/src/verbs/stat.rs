//! `tarn stat`: kstat-style tables of an imported pool's counters, as OpenZFS exposes them
//! under /proc/spl/kstat/zfs. Each table is one subcommand (`tarn stat txgs ...`); later
//! tables (arcstats and others) are further subcommands beside it, printed by the same code.
//!
//! The counters live in the daemon that holds the pool: the CLI asks for the rows (one request
//! per report) and prints them, so an exported pool, or a pool no daemon holds, has no table
//! and is an error.
//!
//! POOL may be left out when the daemon holds exactly one pool (pool names start with a
//! letter, so `tarn stat txgs 1 5` reads as INTERVAL and COUNT).
//!
//! # Repeating (`INTERVAL [COUNT]`)
//! As `zpool iostat`: with INTERVAL (seconds, fractions allowed) the table is reported every
//! INTERVAL seconds, COUNT reports in all (forever without COUNT). A txg table is a history,
//! so the first report prints every row kept (open, quiescing and syncing txgs included) and
//! each later report prints only the txgs committed since, once each, like `tail -f`: no row
//! is printed twice in its final form, and the header is printed once. With `-j` every report
//! is one JSON document (`{"txgs": [...]}`).

use std::path::Path;
use std::time::Instant;

use clap::{Args, Subcommand};
use tarn::stats::{TxgHistoryRow, TxgState};
use tarn_protocol::client;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{byte_cell, count_cell, Cell, ListFormat};
use tarn_protocol::request::stat::StatRequest;
use tarn_protocol::request::PoolName;
use tarn_protocol::Request;

use super::report::{parse_words, repeat, Reporter};

/// Flags every stat table takes, before or after the table's name (`tarn stat -H txgs` and
/// `tarn stat txgs -H` are the same).
#[derive(Args, Clone, Debug)]
pub struct StatFormatArgs {
    /// No header; fields separated by tabs.
    #[arg(short = 'H', global = true)]
    pub no_header: bool,
    /// Exact numbers (bytes, nanoseconds).
    #[arg(short = 'p', global = true)]
    pub exact: bool,
    /// JSON output (one document per report).
    #[arg(short = 'j', global = true)]
    pub json: bool,
    /// Fields to print, comma-separated.
    #[arg(short = 'o', value_delimiter = ',', global = true)]
    pub fields: Option<Vec<String>>,
}

/// `tarn stat [-H] [-p] [-j] [-o ...] TABLE ...`
#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    pub format: StatFormatArgs,
    /// Every table of every pool the daemon holds, in the Prometheus/OpenMetrics text format
    /// (the text `tarn daemon --metrics` serves).
    #[arg(long, conflicts_with_all = ["json", "no_header", "exact"])]
    pub prometheus: bool,
    #[command(subcommand)]
    pub table: Option<StatCommand>,
}

impl StatFormatArgs {
    fn format(&self) -> ListFormat {
        ListFormat {
            no_header: self.no_header,
            exact: self.exact,
            json: self.json,
            fields: self.fields.clone(),
        }
    }
}

#[derive(Subcommand)]
pub enum StatCommand {
    /// One row per recent txg (OpenZFS's txgs kstat; `txg_history` rows are kept):
    /// tarn stat txgs [-H] [-p] [-j] [POOL] [INTERVAL [COUNT]]
    Txgs {
        /// [POOL] [INTERVAL [COUNT]]: a pool the daemon holds (default: its only pool); report
        /// again every INTERVAL seconds (later reports print only newly committed txgs), COUNT
        /// reports in all (default: until interrupted).
        #[arg(num_args = 0..=3, value_name = "POOL|INTERVAL|COUNT")]
        words: Vec<String>,
    },
    /// One row per leaf and I/O class: the vdev queues' counters (the ones `tarn pool iostat`
    /// prints), cumulative since import:
    /// tarn stat vdev_queue [-H] [-p] [-j] [-o ...] [POOL] [INTERVAL [COUNT]]
    #[command(name = "vdev_queue")]
    VdevQueue {
        /// [POOL] [INTERVAL [COUNT]]: as for txgs; every report prints every row.
        #[arg(num_args = 0..=3, value_name = "POOL|INTERVAL|COUNT")]
        words: Vec<String>,
    },
    /// The ARC's counters (OpenZFS's arcstats kstat; `-p` prints `name type data` lines as
    /// /proc/spl/kstat/zfs/arcstats does); with INTERVAL, one line per interval with arcstat's
    /// default columns, or with `-o` any of those and arcstat's L2ARC columns (l2hits l2miss
    /// l2read l2hit% l2miss% l2asize l2size l2bytes l2wbytes l2pref l2mfu l2mru l2data l2meta and
    /// l2pref% l2mfu% l2mru% l2data% l2meta%):
    /// tarn stat arc [-H] [-p] [-j] [-o ...] [POOL] [INTERVAL [COUNT]]
    Arc {
        /// [POOL] [INTERVAL [COUNT]]: as for txgs.
        #[arg(num_args = 0..=3, value_name = "POOL|INTERVAL|COUNT")]
        words: Vec<String>,
    },
    /// The intent log's counters, summed over the pool's mounted file systems (OpenZFS's zil
    /// kstat; `-p` prints `name type data` lines as /proc/spl/kstat/zfs/zil does):
    /// tarn stat zil [-H] [-p] [-j] [POOL]
    Zil {
        /// A pool the daemon holds (default: its only pool).
        pool: Option<String>,
    },
}

/// The columns of `tarn stat vdev_queue`: one row per leaf and class.
pub const VDEV_QUEUE_COLUMNS: &[&str] = &[
    "vdev",
    "class",
    "pending",
    "active",
    "requests",
    "bytes",
    "queue_wait",
    "disk_wait",
    "queue_ns",
    "disk_ns",
    "ind_ios",
    "agg_ios",
];

/// The rows of `tarn stat vdev_queue` for one pool's counters.
pub fn vdev_queue_cells(iostat: &tarn::stats::PoolIostat) -> Vec<Vec<Cell>> {
    fn leaves<'a>(vdev: &'a tarn::stats::VdevIostat, out: &mut Vec<&'a tarn::stats::VdevIostat>) {
        if vdev.children.is_empty() {
            out.push(vdev);
        }
        for child in &vdev.children {
            leaves(child, out);
        }
    }
    let mut found = Vec::new();
    for top in &iostat.root.children {
        leaves(top, &mut found);
    }
    let mut rows = Vec::new();
    for leaf in found {
        for class in tarn::stats::IoClass::ALL {
            let counters = leaf.stats.class(class);
            let average = |sum: u64| sum.checked_div(counters.requests).unwrap_or(0);
            rows.push(vec![
                Cell::text(leaf.name.clone()),
                Cell::text(class.name()),
                count_cell(counters.pending),
                count_cell(counters.active),
                count_cell(counters.requests),
                byte_cell(counters.bytes),
                ns_cell(average(counters.queue_ns)),
                ns_cell(average(counters.disk_ns)),
                count_cell(counters.queue_ns),
                count_cell(counters.disk_ns),
                count_cell(counters.individual_histogram.iter().sum()),
                count_cell(counters.aggregated_histogram.iter().sum()),
            ]);
        }
    }
    rows
}

/// `tarn stat vdev_queue`: every report prints every row, cumulative since import.
fn vdev_queue(
    socket: &Path,
    format: ListFormat,
    pool: &str,
    interval: Option<f64>,
    count: Option<u64>,
) -> Result<(), Failure> {
    let (interval, reports) = repeat(interval, count)?;
    let mut reporter = Reporter::new("tarn stat vdev_queue", VDEV_QUEUE_COLUMNS, format)?;
    let started = Instant::now();
    for report in 0..reports {
        if report > 0 {
            let due = started + interval.expect("repeats need an interval") * report as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let pools = client::fetch_iostat(socket, Some(pool))?;
        let cells: Vec<Vec<Cell>> = pools
            .iter()
            .flat_map(|(_, iostat)| vdev_queue_cells(iostat))
            .collect();
        reporter.report(&cells, "vdev_queue")?;
    }
    Ok(())
}

/// The columns of `tarn stat txgs`: OpenZFS's txgs kstat in its order, then tarn's own.
/// Later issues add columns after these.
pub const TXG_COLUMNS: &[&str] = &[
    "txg",
    "birth",
    "state",
    "ndirty",
    "nread",
    "nwritten",
    "reads",
    "writes",
    "otime",
    "qtime",
    "wtime",
    "stime",
    "passes",
    "blocks_written",
    "write_ios",
    "spacemap_writes",
    "ms_condensed",
    "ms_loaded",
    "ms_unloaded",
    "alloc_segments_p999",
    "alloc_load_waits",
    "alloc_p999_ns",
    "gang_blocks",
    "log_writes",
    "ms_flushed",
];

/// A duration in nanoseconds, human form: 850ns, 12.5us, 3.20ms, 1.25s.
fn human_ns(ns: u64) -> String {
    let value = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", value / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", value / 1e6)
    } else {
        format!("{:.2}s", value / 1e9)
    }
}

fn ns_cell(value: u64) -> Cell {
    Cell {
        exact: value.to_string(),
        human: human_ns(value),
        json: serde_json::Value::from(value),
    }
}

/// Wall-clock time of day (UTC) with milliseconds, for the human form of `birth`.
fn time_of_day_cell(unix_ns: u64) -> Cell {
    let seconds = unix_ns / 1_000_000_000;
    let millis = (unix_ns / 1_000_000) % 1000;
    let day = seconds % 86_400;
    Cell {
        exact: unix_ns.to_string(),
        human: format!(
            "{:02}:{:02}:{:02}.{millis:03}",
            day / 3600,
            (day / 60) % 60,
            day % 60
        ),
        json: serde_json::Value::from(unix_ns),
    }
}

/// One row of cells in [`TXG_COLUMNS`] order.
pub fn txg_cells(row: &TxgHistoryRow) -> Vec<Cell> {
    vec![
        count_cell(row.txg),
        time_of_day_cell(row.birth_ns),
        Cell::text(row.state.letter().to_string()),
        byte_cell(row.dirty_bytes),
        byte_cell(row.read_bytes),
        byte_cell(row.written_bytes),
        count_cell(row.reads),
        count_cell(row.writes),
        ns_cell(row.open_ns),
        ns_cell(row.quiesce_ns),
        ns_cell(row.wait_ns),
        ns_cell(row.sync_ns),
        count_cell(row.passes as u64),
        count_cell(row.blocks_written),
        count_cell(row.write_ios),
        count_cell(row.space.spacemap_writes),
        count_cell(row.space.ms_condensed),
        count_cell(row.space.ms_loaded),
        count_cell(row.space.ms_unloaded),
        count_cell(row.space.alloc_segments_p999),
        count_cell(row.space.alloc_load_waits),
        ns_cell(row.space.alloc_p999_ns),
        count_cell(row.space.gang_blocks),
        count_cell(row.space.log_writes),
        count_cell(row.space.ms_flushed),
    ]
}

/// `tarn stat txgs`.
fn txgs(
    socket: &Path,
    format: ListFormat,
    pool: &str,
    interval: Option<f64>,
    count: Option<u64>,
) -> Result<(), Failure> {
    let (interval, reports) = repeat(interval, count)?;
    let mut reporter = Reporter::new("tarn stat txgs", TXG_COLUMNS, format)?;
    // The newest committed txg printed so far: later reports print committed txgs above it.
    let mut committed_through: Option<u64> = None;
    let started = Instant::now();
    for report in 0..reports {
        if report > 0 {
            let due = started + interval.expect("repeats need an interval") * report as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let history: Vec<TxgHistoryRow> = client::fetch_table(
            socket,
            pool,
            &Request::Stat(StatRequest::Txgs(PoolName {
                pool: pool.to_string(),
            })),
            "txgs",
        )?;
        let rows: Vec<&TxgHistoryRow> = match committed_through {
            None if report == 0 => history.iter().collect(),
            through => history
                .iter()
                .filter(|row| {
                    row.state == TxgState::Committed && through.is_none_or(|t| row.txg > t)
                })
                .collect(),
        };
        let newest_committed = history
            .iter()
            .filter(|row| row.state == TxgState::Committed)
            .map(|row| row.txg)
            .max();
        committed_through = committed_through.max(newest_committed);
        if report > 0 && rows.is_empty() && !reporter.format.json {
            continue;
        }
        let cells: Vec<Vec<Cell>> = rows.into_iter().map(txg_cells).collect();
        reporter.report(&cells, "txgs")?;
    }
    Ok(())
}

/// The pool to report on: the one named, else the daemon's only pool.
fn resolve_pool(socket: &Path, pool: Option<String>) -> Result<String, Failure> {
    if let Some(pool) = pool {
        return Ok(pool);
    }
    let pools: Vec<String> = client::ask_if_running(socket, &Request::Ping)?
        .and_then(|response| serde_json::from_value(response.data["pools"].clone()).ok())
        .unwrap_or_default();
    match pools.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(Failure(
            "no pool is imported: tarn stat reads the counters of a pool the daemon holds".into(),
        )),
        several => Err(Failure(format!(
            "several pools are imported ({}): name one",
            several.join(", ")
        ))),
    }
}

/// `tarn stat --prometheus`: every table of every pool the daemon holds.
fn prometheus(socket: &Path) -> Result<(), Failure> {
    let pools: Vec<String> = client::ask_if_running(socket, &Request::Ping)?
        .and_then(|response| serde_json::from_value(response.data["pools"].clone()).ok())
        .unwrap_or_default();
    let mut metrics = Vec::new();
    for pool in pools {
        metrics.push(tarn_protocol::metrics::PoolMetrics {
            arc: client::fetch_table(
                socket,
                &pool,
                &Request::Stat(StatRequest::Arc(PoolName { pool: pool.clone() })),
                "arc",
            )?,
            txgs: client::fetch_table(
                socket,
                &pool,
                &Request::Stat(StatRequest::Txgs(PoolName { pool: pool.clone() })),
                "txgs",
            )?,
            zil: client::fetch_table(
                socket,
                &pool,
                &Request::Stat(StatRequest::Zil(PoolName { pool: pool.clone() })),
                "zil",
            )?,
            iostat: client::fetch_iostat(socket, Some(&pool))?
                .into_iter()
                .next()
                .map(|(_, iostat)| iostat)
                .ok_or_else(|| Failure(format!("no I/O counters for pool {pool:?}")))?,
            name: pool,
        });
    }
    out!("{}", tarn_protocol::metrics::render(&metrics).trim_end());
    Ok(())
}

pub fn run(socket: &Path, command: StatArgs) -> Result<(), Failure> {
    let format = command.format.format();
    if command.prometheus {
        if command.table.is_some() {
            return Err(Failure("--prometheus prints every table: name none".into()));
        }
        return prometheus(socket);
    }
    let Some(table) = command.table else {
        return Err(Failure(
            "name a table (txgs, vdev_queue, arc, zil) or give --prometheus".into(),
        ));
    };
    match table {
        StatCommand::Txgs { words } => {
            let (pool, interval, count) = parse_words(&words)?;
            let pool = resolve_pool(socket, pool)?;
            txgs(socket, format, &pool, interval, count)
        }
        StatCommand::VdevQueue { words } => {
            let (pool, interval, count) = parse_words(&words)?;
            let pool = resolve_pool(socket, pool)?;
            vdev_queue(socket, format, &pool, interval, count)
        }
        StatCommand::Arc { words } => {
            let (pool, interval, count) = parse_words(&words)?;
            let pool = resolve_pool(socket, pool)?;
            super::arcstat::run(socket, format, &pool, interval, count)
        }
        StatCommand::Zil { pool } => {
            let pool = resolve_pool(socket, pool)?;
            super::arcstat::run_zil(socket, format, &pool)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_with_units() {
        assert_eq!(human_ns(850), "850ns");
        assert_eq!(human_ns(12_500), "12.5us");
        assert_eq!(human_ns(3_200_000), "3.20ms");
        assert_eq!(human_ns(1_250_000_000), "1.25s");
    }

    #[test]
    fn a_row_has_a_cell_per_column_in_order() {
        let row = TxgHistoryRow {
            txg: 7,
            birth_ns: 3_600_000_000_000 + 61_001_000_000,
            state: TxgState::Committed,
            dirty_bytes: 2048,
            read_bytes: 0,
            written_bytes: 8192,
            reads: 0,
            writes: 2,
            open_ns: 1,
            quiesce_ns: 2,
            wait_ns: 3,
            sync_ns: 4,
            passes: 3,
            blocks_written: 5,
            write_ios: 6,
            space: tarn::stats::SpaceTxgStats {
                spacemap_writes: 7,
                ms_condensed: 8,
                ms_loaded: 9,
                ms_unloaded: 10,
                alloc_segments_p999: 11,
                alloc_load_waits: 12,
                alloc_p999_ns: 13,
                allocations: 100,
                gang_blocks: 14,
                log_writes: 15,
                ms_flushed: 16,
                spacemap_headers: 17,
            },
        };
        let cells = txg_cells(&row);
        assert_eq!(cells.len(), TXG_COLUMNS.len());
        let exact: Vec<&str> = cells.iter().map(|cell| cell.exact.as_str()).collect();
        assert_eq!(
            exact,
            [
                "7",
                "3661001000000",
                "C",
                "2048",
                "0",
                "8192",
                "0",
                "2",
                "1",
                "2",
                "3",
                "4",
                "3",
                "5",
                "6",
                "7",
                "8",
                "9",
                "10",
                "11",
                "12",
                "13",
                "14",
                "15",
                "16"
            ]
        );
        assert_eq!(cells[1].human, "01:01:01.001");
    }
}
