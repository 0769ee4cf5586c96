//! The ten metrics of one interval, computed from counters read at its start and end, and the
//! parsers of the texts those counters come in.
//!
//! Every source is reduced to the same two things, so that tarn and OpenZFS are measured by
//! one computation:
//! - [`Arcstats`]: the ARC's kstat fields by name, as `/proc/spl/kstat/zfs/arcstats` prints
//!   them (Linux, [`parse_kstat`]), as `sysctl kstat.zfs.misc.arcstats` prints them (FreeBSD,
//!   [`parse_sysctl`]), or as `tarn stat arc` names tarn's counters (`tarn_protocol::kstat::fields`);
//! - [`PoolRates`]: the pool's operations, bytes and average total wait per second over the
//!   interval, as the second line of `zpool iostat -l -H -p POOL INTERVAL 2` prints them
//!   ([`parse_zpool_iostat`]; tarn's `pool iostat -l -H -p` prints the same columns), or from
//!   two readings of tarn's cumulative counters ([`PoolRates::between`]).
//!
//! Fields differ between OpenZFS releases: `p` and `arc_meta_limit`/`_max`/`_min` exist only
//! up to 2.1; `iohits`, `meta`, `pd`, `pm` and the per-state `_data`/`_metadata` sizes from 2.2.
//! Nothing here needs an optional field: hit ratios count `iohits` as hits when present. A
//! field a metric needs that is missing makes that metric's collection fail (flagged), never
//! the whole interval. L2ARC metrics are absent by configuration when the host has no cache
//! device (`l2_ndev` is 0, or without `l2_ndev` nothing was ever written to an L2ARC and no
//! capacity was given).

use std::collections::BTreeMap;

use super::detector::{Sample, METRICS};

/// ARC kstat fields by name. Negative values (`memory_available_bytes` can be) are skipped.
pub type Arcstats = BTreeMap<String, u64>;

/// Parse `/proc/spl/kstat/zfs/arcstats`: a kstat header line, `name type data`, then one
/// `NAME TYPE VALUE` line per field.
pub fn parse_kstat(text: &str) -> Result<Arcstats, String> {
    let mut fields = Arcstats::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [name, kind, value] = words[..] {
            if kind.parse::<u32>().is_ok() {
                if let Ok(value) = value.parse::<u64>() {
                    fields.insert(name.to_string(), value);
                }
            }
        }
    }
    nonempty(
        fields,
        "no `NAME TYPE VALUE` lines (is this /proc/spl/kstat/zfs/arcstats?)",
    )
}

/// Parse `sysctl kstat.zfs.misc.arcstats` (FreeBSD): `kstat.zfs.misc.arcstats.NAME: VALUE`.
pub fn parse_sysctl(text: &str) -> Result<Arcstats, String> {
    let mut fields = Arcstats::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("kstat.zfs.misc.arcstats.") else {
            continue;
        };
        if let Some((name, value)) = rest.split_once(':') {
            if let Ok(value) = value.trim().parse::<u64>() {
                fields.insert(name.trim().to_string(), value);
            }
        }
    }
    nonempty(fields, "no `kstat.zfs.misc.arcstats.NAME: VALUE` lines")
}

/// Parse either form, by its look.
pub fn parse_arcstats(text: &str) -> Result<Arcstats, String> {
    if text.contains("kstat.zfs.misc.arcstats.") {
        parse_sysctl(text)
    } else {
        parse_kstat(text)
    }
}

fn nonempty(fields: Arcstats, what: &str) -> Result<Arcstats, String> {
    if fields.is_empty() {
        Err(format!("unreadable arcstats: {what}"))
    } else {
        Ok(fields)
    }
}

/// A pool's load over one interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolRates {
    pub ops_per_second: f64,
    pub bytes_per_second: f64,
    /// Average total wait (queue and device) of the interval's operations; `None` without any.
    pub wait_ns: Option<f64>,
}

/// Cumulative pool counters at one instant (tarn's iostat, summed over reads and writes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolCounters {
    pub ops: u64,
    pub bytes: u64,
    /// Sum of every completed operation's total wait, and how many were summed.
    pub wait_ns_total: u64,
    pub waited_ops: u64,
}

impl PoolCounters {
    /// The pool-wide counters of tarn's iostat.
    pub fn of(iostat: &tarn::pool::PoolIostat) -> PoolCounters {
        let stats = &iostat.root.stats;
        PoolCounters {
            ops: stats.read_ops + stats.write_ops,
            bytes: stats.read_bytes + stats.write_bytes,
            wait_ns_total: stats.read.total_ns + stats.write.total_ns,
            waited_ops: stats.read.requests + stats.write.requests,
        }
    }
}

impl PoolRates {
    /// The rates between two readings `seconds` apart.
    pub fn between(earlier: &PoolCounters, now: &PoolCounters, seconds: f64) -> PoolRates {
        let seconds = seconds.max(1e-9);
        let waited = now.waited_ops.saturating_sub(earlier.waited_ops);
        PoolRates {
            ops_per_second: now.ops.saturating_sub(earlier.ops) as f64 / seconds,
            bytes_per_second: now.bytes.saturating_sub(earlier.bytes) as f64 / seconds,
            wait_ns: (waited > 0).then(|| {
                now.wait_ns_total.saturating_sub(earlier.wait_ns_total) as f64 / waited as f64
            }),
        }
    }
}

/// The rates of `pool` in the last report of `zpool iostat -l -H -p POOL INTERVAL 2` (the
/// first report covers the time since import; the last one the interval). Columns: name,
/// alloc, free, read and write operations, read and write bandwidth, then read and write
/// total_wait (nanoseconds, `-` when nothing completed), then more waits that are not used.
pub fn parse_zpool_iostat(text: &str, pool: &str) -> Result<PoolRates, String> {
    let line = text
        .lines()
        .rfind(|line| line.split('\t').next().map(str::trim) == Some(pool))
        .ok_or_else(|| format!("zpool iostat printed no line for pool {pool:?}"))?;
    let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
    if fields.len() < 9 {
        return Err(format!(
            "zpool iostat line has {} fields, expected at least 9 (was -l -H -p given?): {line:?}",
            fields.len()
        ));
    }
    let number = |index: usize| -> Result<Option<f64>, String> {
        match fields[index] {
            "-" => Ok(None),
            text => text.parse::<f64>().map(Some).map_err(|_| {
                format!(
                    "zpool iostat field {index} is not an exact number (was -p given?): {text:?}"
                )
            }),
        }
    };
    let (read_ops, write_ops) = (number(3)?.unwrap_or(0.0), number(4)?.unwrap_or(0.0));
    let (read_bytes, write_bytes) = (number(5)?.unwrap_or(0.0), number(6)?.unwrap_or(0.0));
    let (read_wait, write_wait) = (number(7)?, number(8)?);
    let weighted = read_wait.map_or(0.0, |wait| wait * read_ops)
        + write_wait.map_or(0.0, |wait| wait * write_ops);
    let weight = read_wait.map_or(0.0, |_| read_ops) + write_wait.map_or(0.0, |_| write_ops);
    Ok(PoolRates {
        ops_per_second: read_ops + write_ops,
        bytes_per_second: read_bytes + write_bytes,
        wait_ns: (weight > 0.0).then(|| weighted / weight),
    })
}

/// What the arcstats cannot tell about the L2ARC, and the active data set's size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheConfig {
    /// Bytes the cache devices hold (their capacity).
    pub l2arc_capacity: Option<u64>,
    /// The most the L2ARC feed writes per second (`l2arc_write_max` per `l2arc_feed_secs`).
    pub l2arc_write_max_per_second: Option<f64>,
    /// Bytes of the workload's active data set.
    pub active_data_set: Option<u64>,
}

/// One interval's measurements: a [`Sample`] per metric in [`METRICS`] order and the gate.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub samples: Vec<Sample>,
    pub ads_cached_pct: Option<f64>,
}

fn percent(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0).then(|| part / whole * 100.0)
}

/// Whether the host has an L2ARC (see the module comment).
pub fn has_l2arc(arcstats: &Arcstats, config: &CacheConfig) -> bool {
    match arcstats.get("l2_ndev") {
        Some(devices) => *devices > 0,
        None => {
            config.l2arc_capacity.is_some()
                || arcstats.get("l2_asize").copied().unwrap_or(0) > 0
                || arcstats.get("l2_write_bytes").copied().unwrap_or(0) > 0
        }
    }
}

/// The ten metrics and the gate of an interval of `seconds` that began with `earlier` ARC
/// counters and ended with `now`; `pool` is the interval's pool load or why it could not be
/// read.
pub fn measure(
    earlier: &Arcstats,
    now: &Arcstats,
    seconds: f64,
    pool: Result<PoolRates, String>,
    config: &CacheConfig,
) -> Measurement {
    let field = |name: &str| -> Result<f64, String> {
        now.get(name)
            .map(|value| *value as f64)
            .ok_or_else(|| format!("arcstats has no {name}"))
    };
    let delta = |name: &str| -> Result<f64, String> {
        match (earlier.get(name), now.get(name)) {
            (Some(before), Some(after)) => Ok(after.saturating_sub(*before) as f64),
            _ => Err(format!("arcstats has no {name}")),
        }
    };
    let optional_delta = |name: &str| delta(name).unwrap_or(0.0);
    let share =
        |part: Result<f64, String>, whole: Result<f64, String>, empty: &str| match (part, whole) {
            (Ok(part), Ok(whole)) => {
                percent(part, whole).map_or_else(|| Sample::Failed(empty.into()), Sample::Value)
            }
            (Err(error), _) | (_, Err(error)) => Sample::Failed(error),
        };
    let l2arc = has_l2arc(now, config);
    let hits = delta("hits").map(|hits| hits + optional_delta("iohits"));
    let accesses = hits.clone().and_then(|hits| Ok(hits + delta("misses")?));
    let mut samples = vec![
        share(field("size"), field("c_max"), "c_max is 0"),
        share(
            field("mru_size"),
            field("mru_size").and_then(|mru| Ok(mru + field("mfu_size")?)),
            "the ARC holds no MRU or MFU buffers",
        ),
        share(
            field("data_size"),
            field("data_size").and_then(|data| Ok(data + field("metadata_size")?)),
            "the ARC holds no data or metadata",
        ),
        share(hits, accesses, "no ARC accesses in the interval"),
    ];
    if l2arc {
        // tarn publishes its cache devices' capacity (l2_dev_size); OpenZFS does not.
        let capacity = config
            .l2arc_capacity
            .or_else(|| now.get("l2_dev_size").copied().filter(|size| *size > 0))
            .map(|capacity| capacity as f64)
            .ok_or_else(|| "L2ARC capacity unknown (give --l2arc-size)".to_string());
        let write_max = config
            .l2arc_write_max_per_second
            .map(|rate| rate * seconds)
            .ok_or_else(|| "L2ARC write maximum unknown (give --l2arc-write-max)".to_string());
        let l2_hits = delta("l2_hits");
        let l2_accesses = l2_hits
            .clone()
            .and_then(|hits| Ok(hits + delta("l2_misses")?));
        samples.extend([
            share(field("l2_asize"), capacity, "the L2ARC capacity is 0"),
            share(
                delta("l2_write_bytes"),
                write_max,
                "the L2ARC write maximum is 0",
            ),
            share(l2_hits, l2_accesses, "no L2ARC accesses in the interval"),
        ]);
    } else {
        samples.extend([Sample::Absent, Sample::Absent, Sample::Absent]);
    }
    match pool {
        Ok(rates) => samples.extend([
            Sample::Value(rates.ops_per_second / 1000.0),
            Sample::Value(rates.bytes_per_second / (1u64 << 20) as f64),
            rates.wait_ns.map_or_else(
                || Sample::Failed("no pool operation completed in the interval".into()),
                |wait| Sample::Value(wait / 1e6),
            ),
        ]),
        Err(error) => samples.extend(std::iter::repeat_n(Sample::Failed(error), 3)),
    }
    debug_assert_eq!(samples.len(), METRICS.len());
    let cached = now.get("data_size").copied().unwrap_or(0)
        + if l2arc {
            now.get("l2_size").copied().unwrap_or(0)
        } else {
            0
        };
    Measurement {
        samples,
        ads_cached_pct: config
            .active_data_set
            .filter(|size| *size > 0)
            .map(|size| (cached as f64 / size as f64 * 100.0).min(100.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KSTAT_2_1: &str = include_str!("fixtures/arcstats-2.1.txt");
    const KSTAT_2_2: &str = include_str!("fixtures/arcstats-2.2.txt");
    const KSTAT_2_3: &str = include_str!("fixtures/arcstats-2.3.txt");
    const KSTAT_2_4: &str = include_str!("fixtures/arcstats-2.4.txt");
    const SYSCTL_2_2: &str = include_str!("fixtures/arcstats-freebsd-2.2.txt");
    const IOSTAT_2_1: &str = include_str!("fixtures/zpool-iostat-2.1.txt");
    const IOSTAT_2_2: &str = include_str!("fixtures/zpool-iostat-2.2.txt");

    /// The second reading of a fixture: every counter moved on by a fixed amount (the L2ARC
    /// ones only on a host with a cache device).
    fn later(fields: &Arcstats) -> Arcstats {
        let mut later = fields.clone();
        let l2arc = fields.get("l2_ndev").is_some_and(|devices| *devices > 0);
        for (name, step) in [
            ("hits", 900),
            ("iohits", 50),
            ("misses", 50),
            ("l2_hits", 30),
            ("l2_misses", 10),
            ("l2_write_bytes", 4 << 20),
        ] {
            if name.starts_with("l2_") && !l2arc {
                continue;
            }
            if let Some(value) = later.get_mut(name) {
                *value += step;
            }
        }
        later
    }

    fn value(sample: &Sample) -> f64 {
        match sample {
            Sample::Value(value) => *value,
            other => panic!("{other:?} is no value"),
        }
    }

    #[test]
    fn every_release_parses_and_gives_the_arc_metrics() {
        for (release, text, has_p, has_iohits) in [
            ("2.1", KSTAT_2_1, true, false),
            ("2.2", KSTAT_2_2, false, true),
            ("2.3", KSTAT_2_3, false, true),
            ("2.4", KSTAT_2_4, false, true),
            ("2.2 FreeBSD", SYSCTL_2_2, false, true),
        ] {
            let fields = parse_arcstats(text).unwrap_or_else(|e| panic!("{release}: {e}"));
            assert_eq!(fields.contains_key("p"), has_p, "{release}");
            assert_eq!(fields.contains_key("arc_meta_limit"), has_p, "{release}");
            assert_eq!(fields.contains_key("iohits"), has_iohits, "{release}");
            // Every fixture: size 4 GiB of c_max 8 GiB, MRU 1 GiB of 4, data 3 GiB of 3.5.
            let config = CacheConfig::default();
            let pool = Ok(PoolRates {
                ops_per_second: 2500.0,
                bytes_per_second: 100.0 * 1048576.0,
                wait_ns: Some(1_500_000.0),
            });
            let measurement = measure(&fields, &later(&fields), 1.0, pool, &config);
            let samples = &measurement.samples;
            assert_eq!(value(&samples[0]), 50.0, "{release}");
            assert_eq!(value(&samples[1]), 25.0, "{release}");
            assert!(
                (value(&samples[2]) - 3.0 / 3.5 * 100.0).abs() < 1e-9,
                "{release}"
            );
            // 2.2 and later count iohits as hits: 950 of 1000; 2.1 900 of 950.
            let hit = if has_iohits {
                95.0
            } else {
                900.0 / 950.0 * 100.0
            };
            assert!((value(&samples[3]) - hit).abs() < 1e-9, "{release}");
            assert_eq!(value(&samples[7]), 2.5);
            assert_eq!(value(&samples[8]), 100.0);
            assert_eq!(value(&samples[9]), 1.5);
            assert_eq!(measurement.ads_cached_pct, None);
        }
    }

    #[test]
    fn l2arc_metrics_are_absent_without_a_cache_device_and_measured_with_one() {
        let no_cache = parse_kstat(KSTAT_2_2).unwrap();
        let config = CacheConfig {
            active_data_set: Some(6 << 30),
            ..CacheConfig::default()
        };
        let measurement = measure(&no_cache, &later(&no_cache), 1.0, Err("x".into()), &config);
        assert!(measurement.samples[4..7]
            .iter()
            .all(|s| *s == Sample::Absent));
        // 3 GiB of ARC data over a 6 GiB data set.
        assert_eq!(measurement.ads_cached_pct, Some(50.0));
        assert!(matches!(&measurement.samples[7], Sample::Failed(reason) if reason == "x"));
        // 2.4's fixture has one cache device holding 16 GiB (l2_asize 8 GiB, l2_size 10 GiB).
        let cached = parse_kstat(KSTAT_2_4).unwrap();
        assert!(has_l2arc(&cached, &CacheConfig::default()));
        let unknown = measure(&cached, &later(&cached), 1.0, Err("x".into()), &config);
        assert!(
            matches!(&unknown.samples[4], Sample::Failed(reason) if reason.contains("--l2arc-size"))
        );
        let config = CacheConfig {
            l2arc_capacity: Some(16 << 30),
            l2arc_write_max_per_second: Some((8 << 20) as f64),
            active_data_set: Some(10 << 30),
        };
        let measurement = measure(&cached, &later(&cached), 2.0, Err("x".into()), &config);
        assert_eq!(value(&measurement.samples[4]), 50.0);
        // 4 MiB written in 2 s against 8 MiB/s.
        assert_eq!(value(&measurement.samples[5]), 25.0);
        assert_eq!(value(&measurement.samples[6]), 75.0);
        // (3 GiB data + 10 GiB L2) over 10 GiB: capped at 100.
        assert_eq!(measurement.ads_cached_pct, Some(100.0));
    }

    #[test]
    fn a_missing_field_fails_only_its_metric() {
        let mut fields = parse_kstat(KSTAT_2_3).unwrap();
        fields.remove("mfu_size");
        let measurement = measure(
            &fields,
            &later(&fields),
            1.0,
            Err("x".into()),
            &CacheConfig::default(),
        );
        assert!(
            matches!(&measurement.samples[1], Sample::Failed(reason) if reason == "arcstats has no mfu_size")
        );
        assert!(matches!(measurement.samples[0], Sample::Value(_)));
        // No accesses in the interval: the hit ratio fails, flagged.
        let idle = measure(
            &fields,
            &fields,
            1.0,
            Err("x".into()),
            &CacheConfig::default(),
        );
        assert!(
            matches!(&idle.samples[3], Sample::Failed(reason) if reason.contains("no ARC accesses"))
        );
    }

    #[test]
    fn zpool_iostat_of_each_release_gives_the_pool_metrics() {
        for text in [IOSTAT_2_1, IOSTAT_2_2] {
            let rates = parse_zpool_iostat(text, "tank").unwrap();
            // The second report: 1000 reads at 2 ms and 3000 writes at 1 ms per second.
            assert_eq!(rates.ops_per_second, 4000.0);
            assert_eq!(rates.bytes_per_second, (64 << 20) as f64);
            assert_eq!(rates.wait_ns, Some(1_250_000.0));
        }
        assert!(parse_zpool_iostat(IOSTAT_2_2, "other")
            .unwrap_err()
            .contains("no line"));
        let human = "tank\t1.2G\t3G\t1K\t3K\t16M\t48M\t2ms\t1ms\t1ms\t1ms\t-\t-\t-\t-\t-\t-\n";
        assert!(parse_zpool_iostat(human, "tank")
            .unwrap_err()
            .contains("-p"));
        assert!(parse_zpool_iostat("tank\t1\t2\n", "tank")
            .unwrap_err()
            .contains("-l -H -p"));
        let idle = "tank\t1\t2\t0\t0\t0\t0\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\n";
        assert_eq!(parse_zpool_iostat(idle, "tank").unwrap().wait_ns, None);
    }

    #[test]
    fn unreadable_arcstats_are_an_error_not_a_panic() {
        assert!(parse_arcstats("").is_err());
        assert!(parse_arcstats("garbage\n\u{0}\u{1}").is_err());
        assert!(parse_sysctl("kstat.zfs.misc.arcstats.hits: many").is_err());
    }

    #[test]
    fn tarn_counters_give_pool_rates() {
        let earlier = PoolCounters {
            ops: 100,
            bytes: 1 << 20,
            wait_ns_total: 1000,
            waited_ops: 10,
        };
        let now = PoolCounters {
            ops: 2100,
            bytes: 3 << 20,
            wait_ns_total: 41_000,
            waited_ops: 30,
        };
        let rates = PoolRates::between(&earlier, &now, 2.0);
        assert_eq!(rates.ops_per_second, 1000.0);
        assert_eq!(rates.bytes_per_second, (1 << 20) as f64);
        assert_eq!(rates.wait_ns, Some(2000.0));
    }
}
