//! The kstat field tables: the counters of a pool as OpenZFS's kstats name them, and the text
//! of a kstat file. `tarn stat` prints them, the Prometheus renderer ([`crate::metrics`])
//! exports them, and `tarn bench steady` reads them like an OpenZFS host's, so each table is
//! defined here once.

use tarn::stats::BlockCacheStats;

/// A field of the arcstats table: its name, whether it is a size in bytes, and its value.
pub type Field = (&'static str, bool, u64);

/// The arcstats fields, named as OpenZFS names them, in its order where it has them.
pub fn fields(stats: &BlockCacheStats, memory_available: u64) -> Vec<Field> {
    let counters = &stats.counters;
    vec![
        ("hits", false, counters.hits),
        ("misses", false, counters.misses),
        ("demand_data_hits", false, counters.demand_data_hits),
        ("demand_data_misses", false, counters.demand_data_misses),
        ("demand_metadata_hits", false, counters.demand_metadata_hits),
        (
            "demand_metadata_misses",
            false,
            counters.demand_metadata_misses,
        ),
        ("prefetch_data_hits", false, counters.prefetch_data_hits),
        ("prefetch_data_misses", false, counters.prefetch_data_misses),
        (
            "prefetch_metadata_hits",
            false,
            counters.prefetch_metadata_hits,
        ),
        (
            "prefetch_metadata_misses",
            false,
            counters.prefetch_metadata_misses,
        ),
        ("mru_hits", false, counters.mru_hits),
        ("mru_ghost_hits", false, counters.mru_ghost_hits),
        ("mfu_hits", false, counters.mfu_hits),
        ("mfu_ghost_hits", false, counters.mfu_ghost_hits),
        ("deleted", false, counters.evicted),
        ("evict_skip", false, counters.evict_skip),
        ("inserted", false, counters.inserted),
        ("removed", false, counters.removed),
        ("refused", false, counters.refused),
        ("decompressed", false, counters.decompressed),
        ("p", true, stats.p),
        ("c", true, stats.c),
        ("c_min", true, stats.c_min),
        ("c_max", true, stats.c_max),
        ("size", true, stats.size_bytes),
        ("compressed_size", true, stats.compressed_size),
        ("uncompressed_size", true, stats.uncompressed_size),
        ("overhead_size", true, stats.overhead_size),
        ("data_size", true, stats.data_size),
        ("metadata_size", true, stats.metadata_size),
        ("meta", true, stats.meta),
        ("mru_size", true, stats.mru_size),
        ("mru_ghost_size", true, stats.mru_ghost_size),
        ("mfu_size", true, stats.mfu_size),
        ("mfu_ghost_size", true, stats.mfu_ghost_size),
        ("buffers", false, stats.entries),
        ("shards", false, stats.shards),
        ("shrinks", false, stats.shrinks),
        ("memory_available_bytes", true, memory_available),
    ]
    .into_iter()
    .chain(stats.l2.fields())
    .collect()
}

/// The kstat text of `fields`, as /proc/spl/kstat/zfs/arcstats prints it.
pub fn kstat_text<N: AsRef<str>>(fields: &[(N, bool, u64)], now_ns: u64) -> String {
    let mut text = format!(
        "13 1 0x01 {} {} {now_ns} {now_ns}\nname                            type data\n",
        fields.len(),
        fields.len() * 40
    );
    for (name, _, value) in fields {
        text.push_str(&format!("{:<32}4    {value}\n", name.as_ref()));
    }
    text
}

/// MemAvailable of the host, in bytes (0 when /proc/meminfo cannot be read).
pub fn memory_available() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemAvailable:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstat_lines_parse_as_arcstats_parsers_read_them() {
        let mut stats = BlockCacheStats::default();
        stats.counters.hits = 7;
        stats.size_bytes = 4096;
        let text = kstat_text(&fields(&stats, 1 << 30), 123);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().starts_with("13 1 0x01 "));
        assert_eq!(
            lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
            ["name", "type", "data"]
        );
        // node_exporter and arcstat split each line into name, type, value.
        let parsed: Vec<(String, u64)> = lines
            .map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(words.len(), 3, "{line}");
                assert_eq!(words[1], "4");
                (words[0].to_string(), words[2].parse().unwrap())
            })
            .collect();
        assert!(parsed.contains(&("hits".into(), 7)));
        assert!(parsed.contains(&("size".into(), 4096)));
        assert!(parsed.contains(&("memory_available_bytes".into(), 1 << 30)));
    }
}
