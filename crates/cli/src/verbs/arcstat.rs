//! `tarn stat arc`: the ARC's counters as OpenZFS's arcstats kstat and the `arcstat` tool show
//! them.
//!
//! - Without INTERVAL: every field, one per line. `-p` prints them exactly as
//!   `/proc/spl/kstat/zfs/arcstats` does (a kstat header line, `name type data`, then one
//!   `name 4 value` line per field, type 4 being KSTAT_DATA_UINT64), so that parsers written for
//!   that file read this output; `-j` prints one JSON object; otherwise an aligned NAME VALUE
//!   table with sizes in human form.
//! - With INTERVAL: one line per interval with arcstat's default columns (OpenZFS 2.2 and
//!   later): `time read ddread ddh% dmread dmh% pread ph% size c avail`, rates per second over
//!   the interval; `avail` is the host's MemAvailable. The first line comes after the first
//!   interval. `-o` picks columns among those and arcstat's L2ARC columns (`l2hits l2miss
//!   l2read l2hit% l2miss% l2asize l2size l2bytes l2wbytes l2pref l2mfu l2mru l2data l2meta`
//!   and their `%` forms, of `l2asize`), which arcstat
//!   prints only when asked with `-f`, as here with `-o`).
//!
//! tarn keeps one ARC per pool (OpenZFS one per host), so the counters are the pool's.
//!
//! `tarn stat zil` prints the intent log's counters (OpenZFS's zil kstat) the same way
//! ([`print_kstat`]), summed over the pool's mounted file systems.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tarn::stats::BlockCacheStats;
use tarn_protocol::client;
use tarn_protocol::error::Failure;
use tarn_protocol::format::{byte_cell, count_cell};
use tarn_protocol::format::{Cell, ListFormat};
use tarn_protocol::json::Document;
use tarn_protocol::kstat::{fields, kstat_text, memory_available};
use tarn_protocol::request::stat::StatRequest;
use tarn_protocol::request::PoolName;
use tarn_protocol::Request;

use super::report::{repeat, Reporter};

/// Print a kstat's `fields` (name, whether a size, value) as `tarn stat TABLE` does without
/// INTERVAL: `-p` as the kstat file, `-j` as one JSON object under `table`, else an aligned
/// NAME VALUE table with sizes in human form.
pub fn print_kstat<N: AsRef<str>>(
    fields: &[(N, bool, u64)],
    format: ListFormat,
    table: &str,
) -> Result<(), Failure> {
    if format.exact && !format.json && format.fields.is_none() {
        out!("{}", kstat_text(fields, unix_ns()).trim_end());
        return Ok(());
    }
    let command = format!("tarn stat {table}");
    if format.json {
        let object: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|(name, _, value)| (name.as_ref().to_string(), serde_json::Value::from(*value)))
            .collect();
        let mut document = Document::new(&command);
        document.insert(table, serde_json::Value::Object(object));
        document.print();
        return Ok(());
    }
    let rows: Vec<Vec<Cell>> = fields
        .iter()
        .map(|(name, bytes, value)| {
            vec![
                Cell::text(name.as_ref()),
                if *bytes {
                    byte_cell(*value)
                } else {
                    count_cell(*value)
                },
            ]
        })
        .collect();
    let mut reporter = Reporter::new(&command, &["name", "value"], format)?;
    reporter.report(&rows, table)
}

/// The columns `tarn stat arc INTERVAL` can print (`-o`): arcstat's default set, then its L2ARC
/// columns (arcstat's names and meanings).
pub const ARCSTAT_COLUMNS: &[&str] = &[
    "time", "read", "ddread", "ddh%", "dmread", "dmh%", "pread", "ph%", "size", "c", "avail",
    "l2hits", "l2miss", "l2read", "l2hit%", "l2miss%", "l2asize", "l2size", "l2bytes", "l2wbytes",
    "l2pref", "l2mfu", "l2mru", "l2data", "l2meta", "l2pref%", "l2mfu%", "l2mru%", "l2data%",
    "l2meta%",
];

/// The columns printed without `-o`: arcstat's default set.
pub const ARCSTAT_DEFAULT_COLUMNS: usize = 11;

/// One arcstat line for the change from `earlier` to `now` over `seconds`.
pub fn arcstat_cells(
    earlier: &BlockCacheStats,
    now: &BlockCacheStats,
    seconds: f64,
    avail: u64,
    time: &str,
) -> Vec<Cell> {
    let (a, b) = (&earlier.counters, &now.counters);
    let rate = |count: u64| count_cell((count as f64 / seconds.max(1e-9)).round() as u64);
    let percent = |hits: u64, total: u64| Cell::percent((hits * 100).checked_div(total));
    let demand_data = |c: &tarn::stats::CacheCounters| c.demand_data_hits + c.demand_data_misses;
    let demand_meta =
        |c: &tarn::stats::CacheCounters| c.demand_metadata_hits + c.demand_metadata_misses;
    let prefetch = |c: &tarn::stats::CacheCounters| {
        c.prefetch_data_hits
            + c.prefetch_data_misses
            + c.prefetch_metadata_hits
            + c.prefetch_metadata_misses
    };
    let prefetch_hits =
        |c: &tarn::stats::CacheCounters| c.prefetch_data_hits + c.prefetch_metadata_hits;
    let ddread = demand_data(b) - demand_data(a);
    let dmread = demand_meta(b) - demand_meta(a);
    let pread = prefetch(b) - prefetch(a);
    let (l2a, l2b) = (&earlier.l2, &now.l2);
    let l2hits = l2b.l2_hits - l2a.l2_hits;
    let l2read = l2hits + (l2b.l2_misses - l2a.l2_misses);
    let byte_rate = |bytes: u64| byte_cell((bytes as f64 / seconds.max(1e-9)).round() as u64);
    vec![
        Cell::text(time),
        rate((b.hits + b.misses) - (a.hits + a.misses)),
        rate(ddread),
        percent(b.demand_data_hits - a.demand_data_hits, ddread),
        rate(dmread),
        percent(b.demand_metadata_hits - a.demand_metadata_hits, dmread),
        rate(pread),
        percent(prefetch_hits(b) - prefetch_hits(a), pread),
        byte_cell(now.size_bytes),
        byte_cell(now.c),
        byte_cell(avail),
        rate(l2hits),
        rate(l2read - l2hits),
        rate(l2read),
        percent(l2hits, l2read),
        percent(l2read - l2hits, l2read),
        byte_cell(l2b.l2_asize),
        byte_cell(l2b.l2_size),
        byte_rate(l2b.l2_read_bytes - l2a.l2_read_bytes),
        byte_rate(l2b.l2_write_bytes - l2a.l2_write_bytes),
        byte_cell(l2b.l2_prefetch_asize),
        byte_cell(l2b.l2_mfu_asize),
        byte_cell(l2b.l2_mru_asize),
        byte_cell(l2b.l2_bufc_data_asize),
        byte_cell(l2b.l2_bufc_metadata_asize),
        percent(l2b.l2_prefetch_asize, l2b.l2_asize),
        percent(l2b.l2_mfu_asize, l2b.l2_asize),
        percent(l2b.l2_mru_asize, l2b.l2_asize),
        percent(l2b.l2_bufc_data_asize, l2b.l2_asize),
        percent(l2b.l2_bufc_metadata_asize, l2b.l2_asize),
    ]
}

/// `tarn stat zil [POOL]`: the intent-log counters (OpenZFS's zil kstat), summed over the
/// pool's mounted file systems, printed as the ARC's are without INTERVAL.
pub fn run_zil(socket: &Path, format: ListFormat, pool: &str) -> Result<(), Failure> {
    let fields: Vec<(String, bool, u64)> = client::fetch_table(
        socket,
        pool,
        &Request::Stat(StatRequest::Zil(PoolName {
            pool: pool.to_string(),
        })),
        "zil",
    )?;
    print_kstat(&fields, format, "zil")
}

fn fetch_arc(socket: &Path, pool: &str) -> Result<BlockCacheStats, Failure> {
    client::fetch_table(
        socket,
        pool,
        &Request::Stat(StatRequest::Arc(PoolName {
            pool: pool.to_string(),
        })),
        "arc",
    )
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

pub fn run(
    socket: &Path,
    format: ListFormat,
    pool: &str,
    interval: Option<f64>,
    count: Option<u64>,
) -> Result<(), Failure> {
    let (interval, reports) = repeat(interval, count)?;
    let Some(interval) = interval else {
        let stats = fetch_arc(socket, pool)?;
        return print_kstat(&fields(&stats, memory_available()), format, "arc");
    };
    let format = ListFormat {
        fields: format.fields.clone().or_else(|| {
            let defaults = &ARCSTAT_COLUMNS[..ARCSTAT_DEFAULT_COLUMNS];
            Some(defaults.iter().map(|column| column.to_string()).collect())
        }),
        ..format
    };
    let mut reporter = Reporter::new("tarn stat arc", ARCSTAT_COLUMNS, format)?;
    let mut earlier = fetch_arc(socket, pool)?;
    let mut then = Instant::now();
    let started = then;
    for report in 1..=reports {
        let due = started + interval * report.min(u32::MAX as u64) as u32;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = fetch_arc(socket, pool)?;
        let elapsed = then.elapsed().max(Duration::from_millis(1));
        then = Instant::now();
        let time = chrono_free_time_of_day(unix_ns());
        let cells = arcstat_cells(
            &earlier,
            &now,
            elapsed.as_secs_f64(),
            memory_available(),
            &time,
        );
        reporter.report(&[cells], "arc")?;
        earlier = now;
    }
    Ok(())
}

/// HH:MM:SS (UTC) of a Unix time in nanoseconds, as arcstat's `time` column.
fn chrono_free_time_of_day(unix_ns: u64) -> String {
    let seconds = unix_ns / 1_000_000_000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arcstat_line_is_rates_and_hit_percentages() {
        let earlier = BlockCacheStats::default();
        let mut now = BlockCacheStats::default();
        now.counters.hits = 30;
        now.counters.misses = 10;
        now.counters.demand_data_hits = 30;
        now.counters.demand_data_misses = 10;
        now.c = 1 << 20;
        now.l2.l2_hits = 6;
        now.l2.l2_misses = 2;
        now.l2.l2_read_bytes = 8192;
        now.l2.l2_size = 1 << 20;
        now.l2.l2_asize = 1 << 19;
        now.l2.l2_bufc_data_asize = 1 << 18;
        now.l2.l2_bufc_metadata_asize = 1 << 18;
        now.l2.l2_mfu_asize = 1 << 17;
        now.l2.l2_mru_asize = 3 << 17;
        now.l2.l2_prefetch_asize = 1 << 16;
        let cells = arcstat_cells(&earlier, &now, 2.0, 0, "00:00:01");
        let exact: Vec<&str> = cells.iter().map(|cell| cell.exact.as_str()).collect();
        assert_eq!(
            exact[..ARCSTAT_DEFAULT_COLUMNS],
            ["00:00:01", "20", "20", "75", "0", "-", "0", "-", "0", "1048576", "0"]
        );
        assert_eq!(
            exact[ARCSTAT_DEFAULT_COLUMNS..],
            [
                "3", "1", "4", "75", "25", "524288", "1048576", "4096", "0", "65536", "131072",
                "393216", "262144", "262144", "12", "25", "75", "50", "50"
            ]
        );
        assert_eq!(cells.len(), ARCSTAT_COLUMNS.len());
    }
}
