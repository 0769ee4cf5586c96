//! Memory pressure: how the ARC of a user-space daemon learns that it must shrink.
//!
//! # Theory
//! In the kernel, OpenZFS's ARC is told by the kernel's shrinker callbacks when memory is short.
//! A user-space daemon gets no such callback, so a reaper thread looks every
//! [`REAP_INTERVAL`] at what the kernel publishes:
//! - the host's `MemAvailable` (/proc/meminfo) against `arc_sys_free` (by default 1/32 of
//!   memory, as OpenZFS's `arc_sys_free` on Linux);
//! - the cgroup the daemon runs in: its working set (usage less inactive file pages, which the
//!   kernel reclaims first, as the kubelet counts it) against its limits (v2 `memory.high` and
//!   `memory.max`, v1 `memory.soft_limit_in_bytes` and `memory.limit_in_bytes`), kept below 90%
//!   of the lower limit, since a container's limit, not the host's free memory, is what kills
//!   the daemon;
//! - pressure stall information (/proc/pressure/memory `some avg10`): tasks stalled on memory
//!   for more than [`PSI_SHRINK_PERCENT`] percent of the last ten seconds.
//!
//! When any of them shows a shortfall, the target `c` drops by the shortfall (at least 1/32 of
//! `c`, as `arc_shrink_shift`), never below `c_min`; the shards evict at once, and freed
//! memory is handed back to the system (`malloc_trim`), so the daemon's resident size really
//! falls. With no pressure for [`GROW_RETRY`], `c` grows back by 1/32 per look, up to `c_max`.
//!
//! The kernel page cache above FUSE holds file data a second time: a file read through a mount
//! is in the page cache and, decompressed, in the ARC. Both give way under pressure (the page
//! cache through the kernel's own reclaim, the ARC through this thread), and the default
//! `arc_max` (256 MiB) is kept small for that reason: the page cache serves repeated reads of
//! file data, and the ARC's value is mostly metadata and blocks the page cache dropped.

use std::time::Duration;

/// How often the reaper looks at memory.
pub const REAP_INTERVAL: Duration = Duration::from_secs(1);
/// How long without pressure before `c` grows again (arc_grow_retry).
pub const GROW_RETRY: Duration = Duration::from_secs(5);
/// How often the reaper hands memory the allocator holds free back to the system, pressure or
/// not: the dirty buffers of every txg are written by FUSE threads and freed by the sync
/// thread, and without this they stay resident in the allocator's per-thread arenas (2 GiB
/// written through a mount left 915 MiB resident with a 256 MiB ARC, while idle).
pub const TRIM_INTERVAL: Duration = Duration::from_secs(5);
/// Memory stall share (some avg10, percent) above which the ARC shrinks.
pub const PSI_SHRINK_PERCENT: f64 = 10.0;

/// What the kernel says about memory, as far as it could be read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryReading {
    pub total: Option<u64>,
    pub available: Option<u64>,
    /// The cgroup's lower limit (high/soft or max/hard), when it has one.
    pub cgroup_limit: Option<u64>,
    pub cgroup_usage: Option<u64>,
    pub psi_some_avg10: Option<f64>,
}

fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// A cgroup limit that is really one (v1 reports "no limit" as a huge number, v2 as "max").
fn real_limit(value: Option<u64>) -> Option<u64> {
    value.filter(|&limit| limit < 1 << 60)
}

/// The daemon's cgroup limit and usage, v2 first, then v1's memory controller.
fn cgroup_memory() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return (None, None);
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (dir, limits, usage, inactive) = if controllers.is_empty() {
            (
                format!("/sys/fs/cgroup{path}"),
                ["memory.high", "memory.max"],
                "memory.current",
                "inactive_file ",
            )
        } else if controllers.split(',').any(|name| name == "memory") {
            (
                format!("/sys/fs/cgroup/memory{path}"),
                ["memory.soft_limit_in_bytes", "memory.limit_in_bytes"],
                "memory.usage_in_bytes",
                "total_inactive_file ",
            )
        } else {
            continue;
        };
        let limit = limits
            .iter()
            .filter_map(|file| real_limit(read_number(&format!("{dir}/{file}"))))
            .min();
        let inactive_file = std::fs::read_to_string(format!("{dir}/memory.stat"))
            .ok()
            .and_then(|stat| {
                stat.lines()
                    .find_map(|line| line.strip_prefix(inactive))
                    .and_then(|value| value.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        let used =
            read_number(&format!("{dir}/{usage}")).map(|usage| usage.saturating_sub(inactive_file));
        if limit.is_some() || used.is_some() {
            return (limit, used);
        }
    }
    (None, None)
}

/// Read what the kernel publishes now.
pub fn read_memory() -> MemoryReading {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let (cgroup_limit, cgroup_usage) = cgroup_memory();
    let psi_some_avg10 = std::fs::read_to_string("/proc/pressure/memory")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("some "))
                .and_then(|line| {
                    line.split_whitespace()
                        .find_map(|word| word.strip_prefix("avg10="))
                        .and_then(|value| value.parse().ok())
                })
        });
    MemoryReading {
        total: meminfo_field(&meminfo, "MemTotal:"),
        available: meminfo_field(&meminfo, "MemAvailable:"),
        cgroup_limit,
        cgroup_usage,
        psi_some_avg10,
    }
}

/// Bytes the ARC should give up now, given `reading`, `c` and `arc_sys_free` (0 = 1/32 of
/// memory): the largest shortfall any source shows, 0 when there is none.
pub fn shortfall(reading: &MemoryReading, c: u64, arc_sys_free: u64) -> u64 {
    let sys_free = match (arc_sys_free, reading.total) {
        (0, Some(total)) => total / 32,
        (0, None) => 0,
        (bytes, _) => bytes,
    };
    let host = reading
        .available
        .map_or(0, |available| sys_free.saturating_sub(available));
    let cgroup = match (reading.cgroup_limit, reading.cgroup_usage) {
        (Some(limit), Some(usage)) => usage.saturating_sub(limit / 10 * 9),
        _ => 0,
    };
    let stalled = if reading
        .psi_some_avg10
        .is_some_and(|share| share > PSI_SHRINK_PERCENT)
    {
        c / 32
    } else {
        0
    };
    host.max(cgroup).max(stalled)
}

/// The next target: shrink by the shortfall (at least `c`/32) when there is one, grow by
/// `c_max`/32 when `may_grow`, within [`c_min`, `c_max`].
pub fn next_target(c: u64, c_min: u64, c_max: u64, shortfall: u64, may_grow: bool) -> u64 {
    if shortfall > 0 {
        c.saturating_sub(shortfall.max(c / 32)).max(c_min)
    } else if may_grow {
        (c + (c_max / 32).max(1)).min(c_max)
    } else {
        c
    }
}

/// Hand memory the allocator holds free back to the system.
pub fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn no_pressure_no_shortfall() {
        let reading = MemoryReading {
            total: Some(16 * GIB),
            available: Some(8 * GIB),
            cgroup_limit: Some(4 * GIB),
            cgroup_usage: Some(GIB),
            psi_some_avg10: Some(0.5),
        };
        assert_eq!(shortfall(&reading, 256 * MIB, 0), 0);
        assert_eq!(
            next_target(200 * MIB, 8 * MIB, 256 * MIB, 0, false),
            200 * MIB
        );
        assert_eq!(
            next_target(200 * MIB, 8 * MIB, 256 * MIB, 0, true),
            208 * MIB
        );
        assert_eq!(
            next_target(255 * MIB, 8 * MIB, 256 * MIB, 0, true),
            256 * MIB
        );
    }

    #[test]
    fn each_source_shows_its_shortfall() {
        let host = MemoryReading {
            total: Some(16 * GIB),
            available: Some(100 * MIB),
            ..MemoryReading::default()
        };
        // arc_sys_free defaults to 1/32 of 16 GiB = 512 MiB.
        assert_eq!(shortfall(&host, 256 * MIB, 0), 412 * MIB);
        assert_eq!(shortfall(&host, 256 * MIB, 50 * MIB), 0);
        let cgroup = MemoryReading {
            cgroup_limit: Some(1000 * MIB),
            cgroup_usage: Some(950 * MIB),
            ..MemoryReading::default()
        };
        assert_eq!(
            shortfall(&cgroup, 256 * MIB, 0),
            950 * MIB - 1000 * MIB / 10 * 9
        );
        let stalled = MemoryReading {
            psi_some_avg10: Some(25.0),
            ..MemoryReading::default()
        };
        assert_eq!(shortfall(&stalled, 256 * MIB, 0), 8 * MIB);
    }

    #[test]
    fn shrinking_stops_at_c_min() {
        assert_eq!(
            next_target(256 * MIB, 8 * MIB, 256 * MIB, 100 * MIB, false),
            156 * MIB
        );
        assert_eq!(
            next_target(256 * MIB, 8 * MIB, 256 * MIB, 1, false),
            248 * MIB
        );
        assert_eq!(
            next_target(10 * MIB, 8 * MIB, 256 * MIB, GIB, true),
            8 * MIB
        );
    }

    #[test]
    fn the_reading_of_this_machine_is_plausible() {
        let reading = read_memory();
        let total = reading.total.expect("/proc/meminfo has MemTotal");
        assert!(reading.available.unwrap() <= total);
    }
}
