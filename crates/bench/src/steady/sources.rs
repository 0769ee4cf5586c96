//! Where a live run's counters come from, and the sampler that turns two readings into one
//! interval's [`Measurement`].
//!
//! - A tarn pool the daemon holds: its ARC table (`tarn stat arc`'s request) and its iostat
//!   counters (`tarn pool iostat`'s request), read at each interval's start and end.
//! - A tarn pool opened in this process (`--engine`): the same counters read from the pool.
//! - An OpenZFS host: arcstats from `/proc/spl/kstat/zfs/arcstats` (or another file of that
//!   form) or from `sysctl kstat.zfs.misc.arcstats` (FreeBSD), read at each interval's start
//!   and end; the pool's load from `zpool iostat -l -H -p POOL INTERVAL 2`, which itself takes
//!   the interval (its last report covers it).
//!
//! The first reading must succeed (a pool that is not imported, a host without ZFS: a clear
//! error before the run starts). A later reading that fails fails that interval's metrics
//! from it, which the detector counts as steady for at most two intervals, flagged.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use tarn_protocol::request::pool::PoolRequest;
use tarn_protocol::request::stat::StatRequest;
use tarn_protocol::request::{PoolName, PoolOption};

use tarn::pool::Pool;
use tarn_protocol::error::Failure;
use tarn_protocol::kstat;

use super::detector::{Sample, METRICS};
use super::metrics::{
    has_l2arc, measure, parse_arcstats, parse_zpool_iostat, Arcstats, CacheConfig, Measurement,
    PoolCounters, PoolRates,
};

/// Where the arcstats of an OpenZFS host are read.
#[derive(Clone, Debug)]
pub enum ArcstatsFrom {
    File(PathBuf),
    Sysctl,
}

/// The source of a run's counters.
#[derive(Clone)]
pub enum Source {
    TarnDaemon {
        socket: PathBuf,
        pool: String,
    },
    TarnEngine(Arc<Pool>),
    OpenZfs {
        pool: String,
        arcstats: ArcstatsFrom,
    },
}

impl Source {
    /// How outputs name the source.
    pub fn describe(&self) -> String {
        match self {
            Source::TarnDaemon { pool, .. } => format!("tarn pool {pool}"),
            Source::TarnEngine(pool) => format!("tarn pool {} (in-process)", pool.name()),
            Source::OpenZfs { pool, .. } => format!("OpenZFS pool {pool}"),
        }
    }

    /// Make everything written so far durable in the pool: a txg sync, after the daemon has
    /// had the kernel write back its mounts' cached pages. Called after preconditioning, so
    /// that the measured load does not start with the preconditioning's writes still dirty
    /// (they would reach the pool, and the ARC, a txg or a writeback interval later).
    pub fn sync_pool(&self) -> Result<(), Failure> {
        match self {
            Source::TarnDaemon { socket, pool } => {
                let request = tarn_protocol::Request::Pool(PoolRequest::Sync(PoolOption {
                    pool: Some(pool.clone()),
                }));
                let response = tarn_protocol::client::ask_if_running(socket, &request)?
                    .ok_or_else(|| Failure(format!("no tarn daemon on {}", socket.display())))?;
                if response.status != 0 {
                    return Err(Failure(format!(
                        "cannot sync pool {pool}: {}",
                        response.stderr.trim()
                    )));
                }
                Ok(())
            }
            Source::TarnEngine(pool) => pool
                .sync()
                .map(|_| ())
                .map_err(|error| Failure(format!("cannot sync pool {}: {error}", pool.name()))),
            Source::OpenZfs { pool, .. } => {
                let output = Command::new("zpool")
                    .args(["sync", pool])
                    .output()
                    .map_err(|error| Failure(format!("zpool sync {pool}: {error}")))?;
                if !output.status.success() {
                    return Err(Failure(format!(
                        "zpool sync {pool}: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    )));
                }
                Ok(())
            }
        }
    }

    fn read_arcstats(&self) -> Result<Arcstats, String> {
        let from_tarn = |stats: &tarn::cache::BlockCacheStats| -> Arcstats {
            kstat::fields(stats, kstat::memory_available())
                .into_iter()
                .map(|(name, _, value)| (name.to_string(), value))
                .collect()
        };
        match self {
            Source::TarnDaemon { socket, pool } => tarn_protocol::client::fetch_table(
                socket,
                pool,
                &tarn_protocol::Request::Stat(StatRequest::Arc(PoolName { pool: pool.clone() })),
                "arc",
            )
            .map(|stats| from_tarn(&stats))
            .map_err(|failure| failure.0),
            Source::TarnEngine(pool) => Ok(from_tarn(&pool.arc_stats())),
            Source::OpenZfs { arcstats, .. } => read_host_arcstats(arcstats),
        }
    }

    fn read_pool_counters(&self) -> Result<PoolCounters, String> {
        match self {
            Source::TarnDaemon { socket, pool } => {
                let pools = tarn_protocol::client::fetch_iostat(socket, Some(pool))
                    .map_err(|failure| failure.0)?;
                pools
                    .iter()
                    .find(|(name, _)| name == pool)
                    .map(|(_, iostat)| PoolCounters::of(iostat))
                    .ok_or_else(|| format!("the daemon sent no counters of {pool}"))
            }
            Source::TarnEngine(pool) => Ok(PoolCounters::of(&pool.iostat())),
            Source::OpenZfs { .. } => Ok(PoolCounters::default()),
        }
    }
}

/// The arcstats of this host, by `from`.
pub fn read_host_arcstats(from: &ArcstatsFrom) -> Result<Arcstats, String> {
    let text = match from {
        ArcstatsFrom::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("{}: {e} (is OpenZFS loaded?)", path.display()))?,
        ArcstatsFrom::Sysctl => run_text("sysctl", &["kstat.zfs.misc.arcstats"])?,
    };
    parse_arcstats(&text)
}

fn run_text(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The pool's load over the next `seconds` (whole, at least 1), by `zpool iostat`.
fn zpool_iostat(pool: &str, seconds: u64) -> Result<PoolRates, String> {
    let interval = seconds.max(1).to_string();
    let text = run_text("zpool", &["iostat", "-l", "-H", "-p", pool, &interval, "2"])?;
    parse_zpool_iostat(&text, pool)
}

/// Reads a source interval by interval.
pub struct Sampler {
    source: Source,
    config: CacheConfig,
    at: Instant,
    arcstats: Arcstats,
    counters: PoolCounters,
    l2arc: bool,
}

impl Sampler {
    /// Take the first reading (which must succeed).
    pub fn start(source: Source, config: CacheConfig) -> Result<Sampler, Failure> {
        let what = source.describe();
        let arcstats = source
            .read_arcstats()
            .map_err(|error| Failure(format!("cannot read the ARC counters of {what}: {error}")))?;
        let counters = source
            .read_pool_counters()
            .map_err(|error| Failure(format!("cannot read the I/O counters of {what}: {error}")))?;
        if let Source::OpenZfs { pool, .. } = &source {
            run_text("zpool", &["list", "-H", "-o", "name", pool])
                .map_err(|error| Failure(format!("cannot find OpenZFS pool {pool}: {error}")))?;
        }
        let l2arc = has_l2arc(&arcstats, &config);
        Ok(Sampler {
            source,
            config,
            at: Instant::now(),
            arcstats,
            counters,
            l2arc,
        })
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Measure the interval that ends at `deadline` (sleeping until then).
    pub fn next(&mut self, deadline: Instant) -> Measurement {
        let pool_rates = if let Source::OpenZfs { pool, .. } = &self.source {
            let seconds = deadline
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
            zpool_iostat(pool, seconds.round() as u64)
        } else {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            Ok(PoolRates {
                ops_per_second: 0.0,
                bytes_per_second: 0.0,
                wait_ns: None,
            })
        };
        let now = Instant::now();
        let seconds = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        let pool_rates = match &self.source {
            Source::OpenZfs { .. } => pool_rates,
            _ => self.source.read_pool_counters().map(|counters| {
                let rates = PoolRates::between(&self.counters, &counters, seconds);
                self.counters = counters;
                rates
            }),
        };
        match self.source.read_arcstats() {
            Ok(arcstats) => {
                let measurement =
                    measure(&self.arcstats, &arcstats, seconds, pool_rates, &self.config);
                self.l2arc = has_l2arc(&arcstats, &self.config);
                self.arcstats = arcstats;
                measurement
            }
            Err(error) => {
                let pool = measure(
                    &Arcstats::new(),
                    &Arcstats::new(),
                    seconds,
                    pool_rates,
                    &self.config,
                );
                let samples = (0..METRICS.len())
                    .map(|metric| match metric {
                        0..=3 => Sample::Failed(error.clone()),
                        4..=6 if self.l2arc => Sample::Failed(error.clone()),
                        4..=6 => Sample::Absent,
                        _ => pool.samples[metric].clone(),
                    })
                    .collect();
                Measurement {
                    samples,
                    ads_cached_pct: None,
                }
            }
        }
    }
}

/// The default arcstats location of this kind of host.
pub fn default_arcstats() -> ArcstatsFrom {
    let linux = Path::new("/proc/spl/kstat/zfs/arcstats");
    if cfg!(target_os = "freebsd") {
        ArcstatsFrom::Sysctl
    } else {
        ArcstatsFrom::File(linux.to_path_buf())
    }
}
