//! `tarn pool iostat [-l] [-w] [-q] [-r] [-v] [-H] [-p] [-y] [POOL] [INTERVAL [COUNT]]`, as
//! `zpool iostat` prints it in OpenZFS 2.2.
//!
//! The counters live in the daemon that holds the pool (every leaf's `vdev::stats`, summed up
//! the vdev tree, `tarn::pool::PoolIostat`): one request per report. The first report covers
//! the time since the pool was imported (or created), unless `-y`; each later one covers the
//! INTERVAL before it. Operations and bandwidth are per second over the report's span;
//! latencies are averages over the requests completed in it (exact sums divided by counts,
//! not histogram midpoints); histograms (`-w`, `-r`) are counts of the span; queue depths
//! (`-q`) are the values at the moment of the report.
//!
//! Column sets:
//! - always: `capacity` (alloc, free), `operations` (read, write), `bandwidth` (read, write);
//! - `-l`: `total_wait`, `disk_wait`, `syncq_wait`, `asyncq_wait` (read, write each), then
//!   `scrub`, `trim` and `rebuild` queue waits;
//! - `-q`: pending and active counts of `syncq_read`, `syncq_write`, `asyncq_read`,
//!   `asyncq_write`, `scrubq_read`, `trimq_write`, `rebuildq_write`;
//! - `-w` (instead of the table): one latency histogram per vdev, rows of power-of-two buckets
//!   labelled by their upper bound (1ns, 3ns, 7ns ... 137s), columns `total_wait`,
//!   `disk_wait`, `syncq_wait`, `asyncq_wait` (read, write), `scrub`, `trim`, `rebuild`;
//! - `-r` (instead of the table): request-size histograms, rows 512 to 16M, columns `ind` and
//!   `agg` (I/Os of one request, aggregated I/Os) per class.
//!
//! `-v` adds a line (or a histogram) per top-level vdev and per leaf. `-H` drops the headers
//! and separates fields by tabs (histogram rows then start with the vdev's name); `-p` prints
//! exact integers (bytes, operations, nanoseconds). A latency with nothing measured prints
//! `-`, as does the capacity of a mirror's leaf.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use tarn::stats::{
    ClassSnapshot, IoClass, LeafStatsSnapshot, PoolIostat, VdevIostat, LATENCY_HISTOGRAM_BUCKETS,
    SIZE_HISTOGRAM_BUCKETS,
};

use tarn_protocol::client;
use tarn_protocol::error::Failure;
use tarn_protocol::format::human_bytes;

/// `tarn pool iostat` arguments.
#[derive(Args, Debug)]
pub struct IostatArgs {
    /// Latency columns: average total, device and queue waits.
    #[arg(short = 'l')]
    pub latency: bool,
    /// Latency histograms instead of the table.
    #[arg(short = 'w')]
    pub latency_histograms: bool,
    /// Queue columns: pending and active I/Os per class.
    #[arg(short = 'q')]
    pub queues: bool,
    /// Request-size histograms instead of the table.
    #[arg(short = 'r')]
    pub size_histograms: bool,
    /// A line per top-level vdev and per leaf.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Scripted: no headers, fields separated by tabs.
    #[arg(short = 'H')]
    pub scripted: bool,
    /// Exact numbers (bytes, operations, nanoseconds).
    #[arg(short = 'p')]
    pub exact: bool,
    /// Skip the first report (the one since import).
    #[arg(short = 'y')]
    pub skip_first: bool,
    /// [POOL] [INTERVAL [COUNT]]: a pool the daemon holds (default: every pool); report again
    /// every INTERVAL seconds, COUNT reports in all (default: until interrupted).
    #[arg(num_args = 0..=3, value_name = "POOL|INTERVAL|COUNT")]
    pub words: Vec<String>,
}

/// The counters of `now` accumulated since `earlier`, vdev by vdev (vdevs are matched by
/// name; one that is new since `earlier` keeps all its counters).
fn since(now: &VdevIostat, earlier: Option<&VdevIostat>) -> VdevIostat {
    let Some(earlier) = earlier else {
        return now.clone();
    };
    VdevIostat {
        name: now.name.clone(),
        size_bytes: now.size_bytes,
        allocated_bytes: now.allocated_bytes,
        stats: now.stats.since(&earlier.stats),
        children: now
            .children
            .iter()
            .map(|child| {
                since(
                    child,
                    earlier.children.iter().find(|old| old.name == child.name),
                )
            })
            .collect(),
    }
}

/// One printed value: its exact and human forms.
#[derive(Clone, Debug, PartialEq)]
struct Value {
    exact: String,
    human: String,
}

impl Value {
    fn dash() -> Value {
        Value {
            exact: "-".into(),
            human: "-".into(),
        }
    }

    fn bytes(bytes: Option<u64>) -> Value {
        match bytes {
            None => Value::dash(),
            Some(bytes) => Value {
                exact: bytes.to_string(),
                human: human_bytes(bytes),
            },
        }
    }

    /// A count or rate: 1024-based like zfs_nicenum (1.50K), no unit.
    fn count(count: u64) -> Value {
        Value {
            exact: count.to_string(),
            human: human_bytes(count),
        }
    }

    /// A latency; nothing measured (0) prints `-`.
    fn nanos(ns: u64) -> Value {
        if ns == 0 {
            return Value::dash();
        }
        Value {
            exact: ns.to_string(),
            human: human_time(ns),
        }
    }

    fn text(&self, exact: bool) -> &str {
        if exact {
            &self.exact
        } else {
            &self.human
        }
    }
}

/// A duration as `zpool iostat` prints it: whole units of ns, us, ms or s (truncated).
pub fn human_time(ns: u64) -> String {
    let units = [
        ("ns", 1u64),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ];
    let (unit, scale) = units
        .iter()
        .rev()
        .find(|(_, scale)| ns >= *scale)
        .copied()
        .unwrap_or(units[0]);
    format!("{}{unit}", ns / scale)
}

/// A column: its group (printed centred over the group's columns) and its name.
type Column = (&'static str, &'static str);

const QUEUE_COLUMNS: [(&str, IoClass); 7] = [
    ("syncq_read", IoClass::SyncRead),
    ("syncq_write", IoClass::SyncWrite),
    ("asyncq_read", IoClass::AsyncRead),
    ("asyncq_write", IoClass::AsyncWrite),
    ("scrubq_read", IoClass::Scrub),
    ("trimq_write", IoClass::Trim),
    ("rebuildq_write", IoClass::Rebuild),
];

/// The columns of the table form for the flags given.
fn table_columns(args: &IostatArgs) -> Vec<Column> {
    let mut columns = vec![
        ("capacity", "alloc"),
        ("capacity", "free"),
        ("operations", "read"),
        ("operations", "write"),
        ("bandwidth", "read"),
        ("bandwidth", "write"),
    ];
    if args.latency {
        for group in ["total_wait", "disk_wait", "syncq_wait", "asyncq_wait"] {
            columns.push((group, "read"));
            columns.push((group, "write"));
        }
        columns.extend([("scrub", "wait"), ("trim", "wait"), ("rebuild", "wait")]);
    }
    if args.queues {
        for (group, _) in QUEUE_COLUMNS {
            columns.push((group, "pend"));
            columns.push((group, "activ"));
        }
    }
    columns
}

/// One vdev's values in [`table_columns`] order over a span of `seconds`.
fn table_values(args: &IostatArgs, line: &VdevIostat, seconds: f64) -> Vec<Value> {
    let stats = &line.stats;
    let rate = |value: u64| Value::count((value as f64 / seconds.max(1e-9)) as u64);
    let free = match (line.size_bytes, line.allocated_bytes) {
        (Some(size), Some(allocated)) => Some(size.saturating_sub(allocated)),
        _ => None,
    };
    let mut values = vec![
        Value::bytes(line.allocated_bytes),
        Value::bytes(free),
        rate(stats.read_ops),
        rate(stats.write_ops),
        rate(stats.read_bytes),
        rate(stats.write_bytes),
    ];
    let class = |class: IoClass| stats.class(class);
    if args.latency {
        values.extend([
            Value::nanos(stats.read.total_wait_ns()),
            Value::nanos(stats.write.total_wait_ns()),
            Value::nanos(stats.read.disk_wait_ns()),
            Value::nanos(stats.write.disk_wait_ns()),
            Value::nanos(class(IoClass::SyncRead).queue_wait_ns()),
            Value::nanos(class(IoClass::SyncWrite).queue_wait_ns()),
            Value::nanos(class(IoClass::AsyncRead).queue_wait_ns()),
            Value::nanos(class(IoClass::AsyncWrite).queue_wait_ns()),
            Value::nanos(class(IoClass::Scrub).queue_wait_ns()),
            Value::nanos(class(IoClass::Trim).queue_wait_ns()),
            Value::nanos(class(IoClass::Rebuild).queue_wait_ns()),
        ]);
    }
    if args.queues {
        for (_, queue) in QUEUE_COLUMNS {
            values.push(Value::count(class(queue).pending));
            values.push(Value::count(class(queue).active));
        }
    }
    values
}

/// The lines of one report, in order: (indent, vdev).
fn lines(pools: &[VdevIostat], verbose: bool) -> Vec<Vec<(usize, &VdevIostat)>> {
    fn walk<'a>(vdev: &'a VdevIostat, depth: usize, out: &mut Vec<(usize, &'a VdevIostat)>) {
        out.push((depth, vdev));
        for child in &vdev.children {
            walk(child, depth + 1, out);
        }
    }
    pools
        .iter()
        .map(|pool| {
            let mut out = Vec::new();
            if verbose {
                walk(pool, 0, &mut out);
            } else {
                out.push((0, pool));
            }
            out
        })
        .collect()
}

/// Prints aligned tables: widths grow to fit the widest value seen and are kept.
struct Printer {
    scripted: bool,
    exact: bool,
    name_width: usize,
    widths: Vec<usize>,
}

impl Printer {
    fn new(scripted: bool, exact: bool, columns: &[Column]) -> Printer {
        Printer {
            scripted,
            exact,
            name_width: 10,
            widths: columns.iter().map(|(_, name)| name.len().max(5)).collect(),
        }
    }

    fn fit(&mut self, name: &str, values: &[Value]) {
        self.name_width = self.name_width.max(name.len());
        for (width, value) in self.widths.iter_mut().zip(values) {
            *width = (*width).max(value.text(self.exact).len());
        }
    }

    fn separator(&self) -> String {
        let mut line = "-".repeat(self.name_width);
        for width in &self.widths {
            line.push_str("  ");
            line.push_str(&"-".repeat(*width));
        }
        line
    }

    /// The two header lines and the separator (nothing when scripted).
    fn header(&self, columns: &[Column], title: &str) {
        if self.scripted {
            return;
        }
        let mut groups = " ".repeat(self.name_width);
        let mut index = 0;
        while index < columns.len() {
            let group = columns[index].0;
            let mut span = self.widths[index];
            let mut end = index + 1;
            while end < columns.len() && columns[end].0 == group && !group.is_empty() {
                span += 2 + self.widths[end];
                end += 1;
            }
            // A group of one column whose name is its group's (scrub wait) still gets its
            // group printed above it, as zpool does.
            groups.push_str("  ");
            groups.push_str(&format!("{group:^span$}"));
            index = end;
        }
        out!("{}", groups.trim_end());
        let mut names = format!("{title:<width$}", width = self.name_width);
        for ((_, name), width) in columns.iter().zip(&self.widths) {
            names.push_str(&format!("  {name:>width$}"));
        }
        out!("{names}");
        out!("{}", self.separator());
    }

    fn row(&self, name: &str, values: &[Value]) {
        if self.scripted {
            let mut fields = vec![name.to_string()];
            fields.extend(
                values
                    .iter()
                    .map(|value| value.text(self.exact).to_string()),
            );
            out!("{}", fields.join("\t"));
            return;
        }
        let mut line = format!("{name:<width$}", width = self.name_width);
        for (value, width) in values.iter().zip(&self.widths) {
            line.push_str(&format!("  {:>width$}", value.text(self.exact)));
        }
        out!("{line}");
    }
}

/// Print one report of the table form.
fn print_table(
    args: &IostatArgs,
    printer: &mut Printer,
    pools: &[VdevIostat],
    seconds: f64,
    header: bool,
) {
    let columns = table_columns(args);
    let blocks = lines(pools, args.verbose);
    let rows: Vec<Vec<(String, Vec<Value>)>> = blocks
        .iter()
        .map(|block| {
            block
                .iter()
                .map(|(depth, vdev)| {
                    let name = if args.scripted {
                        vdev.name.clone()
                    } else {
                        format!("{}{}", "  ".repeat(*depth), vdev.name)
                    };
                    (name, table_values(args, vdev, seconds))
                })
                .collect()
        })
        .collect();
    for (name, values) in rows.iter().flatten() {
        printer.fit(name, values);
    }
    if header {
        printer.header(&columns, "pool");
    }
    for block in &rows {
        for (name, values) in block {
            printer.row(name, values);
        }
        if args.verbose && !args.scripted {
            out!("{}", printer.separator());
        }
    }
}

/// The label of latency bucket `bucket`: its upper bound, 2^(bucket+1) - 1 ns.
fn latency_label(bucket: usize, exact: bool) -> String {
    let bound = (1u64 << (bucket + 1)) - 1;
    if exact {
        bound.to_string()
    } else {
        human_time(bound)
    }
}

/// The first size bucket printed (512 bytes, the smallest sector).
const SIZE_FIRST_BUCKET: usize = 9;

fn histogram_columns(latency: bool) -> Vec<Column> {
    if latency {
        let mut columns = Vec::new();
        for group in ["total_wait", "disk_wait", "syncq_wait", "asyncq_wait"] {
            columns.push((group, "read"));
            columns.push((group, "write"));
        }
        columns.extend([("", "scrub"), ("", "trim"), ("", "rebuild")]);
        columns
    } else {
        let mut columns = Vec::new();
        for class in IoClass::ALL {
            columns.push((class.name(), "ind"));
            columns.push((class.name(), "agg"));
        }
        columns
    }
}

/// The rows of one vdev's histogram: (label, values).
fn histogram_rows(
    latency: bool,
    stats: &LeafStatsSnapshot,
    exact: bool,
) -> Vec<(String, Vec<Value>)> {
    let at = |histogram: &[u64], bucket: usize| histogram.get(bucket).copied().unwrap_or(0);
    if latency {
        let queue = |class: IoClass| &stats.class(class).queue_histogram;
        (0..LATENCY_HISTOGRAM_BUCKETS)
            .map(|bucket| {
                let histograms: [&Vec<u64>; 11] = [
                    &stats.read.total_histogram,
                    &stats.write.total_histogram,
                    &stats.read.disk_histogram,
                    &stats.write.disk_histogram,
                    queue(IoClass::SyncRead),
                    queue(IoClass::SyncWrite),
                    queue(IoClass::AsyncRead),
                    queue(IoClass::AsyncWrite),
                    queue(IoClass::Scrub),
                    queue(IoClass::Trim),
                    queue(IoClass::Rebuild),
                ];
                let values = histograms
                    .iter()
                    .map(|histogram| Value::count(at(histogram, bucket)))
                    .collect();
                (latency_label(bucket, exact), values)
            })
            .collect()
    } else {
        (SIZE_FIRST_BUCKET..SIZE_HISTOGRAM_BUCKETS)
            .map(|bucket| {
                let values = IoClass::ALL
                    .iter()
                    .flat_map(|&class| {
                        let counters: &ClassSnapshot = stats.class(class);
                        [
                            Value::count(at(&counters.individual_histogram, bucket)),
                            Value::count(at(&counters.aggregated_histogram, bucket)),
                        ]
                    })
                    .collect();
                let size = 1u64 << bucket;
                let label = if exact {
                    size.to_string()
                } else {
                    human_bytes(size)
                };
                (label, values)
            })
            .collect()
    }
}

/// Print one report of a histogram form (`-w` or `-r`): one histogram per vdev.
fn print_histograms(args: &IostatArgs, latency: bool, pools: &[VdevIostat]) {
    let columns = histogram_columns(latency);
    for (_, vdev) in lines(pools, args.verbose).into_iter().flatten() {
        let rows = histogram_rows(latency, &vdev.stats, args.exact);
        let mut printer = Printer::new(args.scripted, args.exact, &columns);
        printer.fit(&vdev.name, &[]);
        for (label, values) in &rows {
            printer.fit(label, values);
        }
        if !args.scripted {
            // The vdev's name heads the group line, as zpool prints it.
            let mut groups = format!("{:<width$}", vdev.name, width = printer.name_width);
            let mut index = 0;
            while index < columns.len() {
                let group = columns[index].0;
                let mut span = printer.widths[index];
                let mut end = index + 1;
                while end < columns.len() && columns[end].0 == group && !group.is_empty() {
                    span += 2 + printer.widths[end];
                    end += 1;
                }
                groups.push_str(&format!("  {group:^span$}"));
                index = end;
            }
            out!("{}", groups.trim_end());
            let title = if latency { "latency" } else { "req_size" };
            let mut names = format!("{title:<width$}", width = printer.name_width);
            for ((_, name), width) in columns.iter().zip(&printer.widths) {
                names.push_str(&format!("  {name:>width$}"));
            }
            out!("{names}");
            out!("{}", printer.separator());
        }
        for (label, values) in &rows {
            if args.scripted {
                let mut fields = vec![vdev.name.clone(), label.clone()];
                fields.extend(
                    values
                        .iter()
                        .map(|value| value.text(args.exact).to_string()),
                );
                out!("{}", fields.join("\t"));
            } else {
                printer.row(label, values);
            }
        }
        if !args.scripted {
            out!("{}", printer.separator());
            out!();
        }
    }
}

/// The pool named, the interval and the count, checked.
fn parse(args: &IostatArgs) -> Result<(Option<String>, Option<Duration>, u64), Failure> {
    if (args.latency_histograms || args.size_histograms) && (args.latency || args.queues) {
        return Err(Failure(
            "-w and -r print histograms and cannot be combined with -l or -q".into(),
        ));
    }
    let (pool, interval, count) = super::report::parse_words(&args.words)?;
    let (interval, reports) = super::report::repeat(interval, count)?;
    Ok((pool, interval, reports))
}

/// `tarn pool iostat`.
pub fn run(socket: &Path, args: IostatArgs) -> Result<(), Failure> {
    let (pool, interval, reports) = parse(&args)?;
    // -y without an interval still needs a span to report on: one second, as zpool waits.
    let interval = match (args.skip_first, interval) {
        (true, None) => Some(Duration::from_secs(1)),
        (_, interval) => interval,
    };
    let mut previous: Option<Vec<(String, PoolIostat)>> = None;
    let started = Instant::now();
    let columns = table_columns(&args);
    let mut printer = Printer::new(args.scripted, args.exact, &columns);
    let mut printed = 0u64;
    let mut tick = 0u32;
    while printed < reports {
        if tick > 0 {
            let due = started + interval.expect("repeats need an interval") * tick;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        tick += 1;
        let now = client::fetch_iostat(socket, pool.as_deref())?;
        if args.skip_first && previous.is_none() {
            previous = Some(now);
            continue;
        }
        let mut seconds = f64::MAX;
        let pools: Vec<VdevIostat> = now
            .iter()
            .map(|(name, iostat)| {
                let earlier = previous
                    .as_ref()
                    .and_then(|earlier| earlier.iter().find(|(old, _)| old == name))
                    .map(|(_, earlier)| earlier);
                let span_ns = match earlier {
                    Some(earlier) if earlier.elapsed_ns <= iostat.elapsed_ns => {
                        iostat.elapsed_ns - earlier.elapsed_ns
                    }
                    _ => iostat.elapsed_ns,
                };
                seconds = seconds.min(span_ns as f64 / 1e9);
                since(&iostat.root, earlier.map(|earlier| &earlier.root))
            })
            .collect();
        if args.latency_histograms {
            print_histograms(&args, true, &pools);
        }
        if args.size_histograms {
            print_histograms(&args, false, &pools);
        }
        if !args.latency_histograms && !args.size_histograms {
            let header = printed == 0 || args.verbose;
            print_table(&args, &mut printer, &pools, seconds, header);
        }
        printed += 1;
        previous = Some(now);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_whole_units() {
        assert_eq!(human_time(960), "960ns");
        assert_eq!(human_time(1023), "1us");
        assert_eq!(human_time(65_535), "65us");
        assert_eq!(human_time(33_554_431), "33ms");
        assert_eq!(human_time(1_250_000_000), "1s");
        assert_eq!(latency_label(0, false), "1ns");
        assert_eq!(latency_label(1, false), "3ns");
        assert_eq!(latency_label(36, false), "137s");
        assert_eq!(latency_label(9, true), "1023");
    }

    #[test]
    fn zero_latency_is_a_dash_and_counts_are_not() {
        assert_eq!(Value::nanos(0).text(true), "-");
        assert_eq!(Value::count(0).text(true), "0");
        assert_eq!(Value::bytes(None).text(false), "-");
        assert_eq!(Value::count(1536).text(false), "1.50K");
    }

    #[test]
    fn columns_follow_the_flags() {
        let args = |words: &[&str]| {
            use clap::Parser;
            #[derive(Parser)]
            struct Wrapper {
                #[command(flatten)]
                args: IostatArgs,
            }
            let mut argv = vec!["iostat"];
            argv.extend(words);
            Wrapper::try_parse_from(argv).unwrap().args
        };
        assert_eq!(table_columns(&args(&[])).len(), 6);
        assert_eq!(table_columns(&args(&["-l"])).len(), 6 + 11);
        assert_eq!(table_columns(&args(&["-q"])).len(), 6 + 14);
        assert_eq!(table_columns(&args(&["-l", "-q"])).len(), 6 + 11 + 14);
        assert!(parse(&args(&["-w", "-l"])).is_err());
        assert!(parse(&args(&["-r", "-q"])).is_err());
        assert!(parse(&args(&["-w", "-r"])).is_ok());
        assert!(parse(&args(&["tank", "0"])).is_err());
        assert!(parse(&args(&["tank", "1", "0"])).is_err());
        assert!(parse(&args(&["tank", "soon"])).is_err());
        let (pool, interval, reports) = parse(&args(&["tank", "0.5", "3"])).ok().unwrap();
        assert_eq!(pool.as_deref(), Some("tank"));
        assert_eq!(interval, Some(Duration::from_millis(500)));
        assert_eq!(reports, 3);
        let stats = LeafStatsSnapshot::default();
        let line = VdevIostat {
            name: "tank".into(),
            size_bytes: Some(1000),
            allocated_bytes: Some(400),
            stats,
            children: Vec::new(),
        };
        let values = table_values(&args(&["-l", "-q"]), &line, 1.0);
        assert_eq!(values.len(), table_columns(&args(&["-l", "-q"])).len());
        assert_eq!(values[1].exact, "600");
        assert_eq!(values[6].exact, "-");
        assert_eq!(histogram_rows(true, &line.stats, true).len(), 37);
        assert_eq!(histogram_rows(false, &line.stats, true).len(), 16);
        assert_eq!(histogram_rows(false, &line.stats, true)[0].1.len(), 14);
    }
}
