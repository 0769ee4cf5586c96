//! Prometheus / OpenMetrics text of every `tarn stat` table:
//! `tarn stat --prometheus` prints it, and `tarn daemon --metrics ADDR` serves it at
//! `http://ADDR/metrics` (the daemon's `metrics_http`).
//!
//! Names follow node_exporter's ZFS collector where it has one, so that existing dashboards
//! work: the arcstats fields as `node_zfs_arc_<field>` and a pool's I/O counters as
//! `node_zfs_zpool_{nread,nwritten,reads,writes}` (label `zpool`), the intent log's kstat as
//! `node_zfs_zil_<field>` (`node_zfs_zil_zil_commit_count`, ...). tarn's own tables use a
//! `tarn_` prefix: the newest committed txg's row of `tarn stat txgs` (`tarn_txg_*`) and the
//! vdev queues of `tarn stat vdev_queue` (`tarn_vdev_queue_*`, labels `zpool`, `vdev`,
//! `class`). tarn keeps one ARC per pool, so the ARC families carry the `zpool` label too.
//! Every family is typed `unknown` (node_exporter exposes kstats untyped, and their names do not
//! end in `_total`), except the queue gauges.

use std::fmt::Write as _;

use tarn::stats::{BlockCacheStats, PoolIostat, TxgHistoryRow, TxgState, VdevIostat};

/// A metric read from a value of type `T`: its name suffix, help and accessor.
type Metric<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Everything exported about one pool.
pub struct PoolMetrics {
    pub name: String,
    pub arc: BlockCacheStats,
    pub iostat: PoolIostat,
    pub txgs: Vec<TxgHistoryRow>,
    /// The intent-log counters (`tarn stat zil`): kstat name, whether bytes, value.
    pub zil: Vec<(String, bool, u64)>,
}

/// A metric family being written: its samples, after its `# TYPE` line.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(key, value)| format!("{key}=\"{}\"", escape(value)))
            .collect();
        let _ = writeln!(self.out, "{name}{{{}}} {value}", labels.join(","));
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family<'a>(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "# HELP {name} {help}");
    Family { out }
}

fn leaves<'a>(vdev: &'a VdevIostat, out: &mut Vec<&'a VdevIostat>) {
    if vdev.children.is_empty() {
        out.push(vdev);
    }
    for child in &vdev.children {
        leaves(child, out);
    }
}

/// The OpenMetrics text of `pools`, ending with `# EOF`.
pub fn render(pools: &[PoolMetrics]) -> String {
    let mut out = String::new();
    let memory = crate::kstat::memory_available();
    // arcstats: one family per field, one sample per pool.
    let field_names: Vec<(&str, bool)> = crate::kstat::fields(&BlockCacheStats::default(), 0)
        .iter()
        .map(|(name, bytes, _)| (*name, *bytes))
        .collect();
    for (index, (field, bytes)) in field_names.iter().enumerate() {
        let name = format!("node_zfs_arc_{field}");
        let help = if *bytes {
            format!("arcstats {field}, bytes")
        } else {
            format!("arcstats {field}")
        };
        let mut samples = family(&mut out, &name, "unknown", &help);
        for pool in pools {
            let value = crate::kstat::fields(&pool.arc, memory)[index].2;
            samples.sample(&name, &[("zpool", &pool.name)], value);
        }
    }
    // The pool's I/O, as node_exporter reads /proc/spl/kstat/zfs/POOL/io.
    let io: [Metric<VdevIostat>; 4] = [
        ("nread", "bytes read from the pool's devices", |v| {
            v.stats.read_bytes
        }),
        ("nwritten", "bytes written to the pool's devices", |v| {
            v.stats.write_bytes
        }),
        ("reads", "read operations", |v| v.stats.read_ops),
        ("writes", "write operations", |v| v.stats.write_ops),
    ];
    for (field, help, value) in io {
        let name = format!("node_zfs_zpool_{field}");
        let mut samples = family(&mut out, &name, "unknown", help);
        for pool in pools {
            samples.sample(&name, &[("zpool", &pool.name)], value(&pool.iostat.root));
        }
    }
    // The intent log, as node_exporter reads /proc/spl/kstat/zfs/zil (one kstat per host
    // there; per pool here).
    for (index, (field, bytes, _)) in tarn::stats::ZilStats::default().kstat().iter().enumerate() {
        let name = format!("node_zfs_zil_{field}");
        let help = if *bytes {
            format!("zil {field}, bytes")
        } else {
            format!("zil {field}")
        };
        let mut samples = family(&mut out, &name, "unknown", &help);
        for pool in pools {
            if let Some((_, _, value)) = pool.zil.get(index).filter(|(name, _, _)| name == field) {
                samples.sample(&name, &[("zpool", &pool.name)], *value);
            }
        }
    }
    // The newest committed txg (tarn stat txgs).
    let txg: [Metric<TxgHistoryRow>; 11] = [
        ("txg", "the newest committed txg", |r| r.txg),
        ("dirty_bytes", "dirty bytes it carried into its sync", |r| {
            r.dirty_bytes
        }),
        ("written_bytes", "bytes its sync wrote", |r| r.written_bytes),
        ("sync_ns", "time its sync took, nanoseconds", |r| r.sync_ns),
        ("passes", "its sync passes", |r| r.passes as u64),
        ("blocks_written", "block copies its sync wrote", |r| {
            r.blocks_written
        }),
        (
            "spacemap_writes",
            "space-map block writes of its sync",
            |r| r.space.spacemap_writes,
        ),
        (
            "alloc_p999_ns",
            "99.9th percentile allocation time, nanoseconds",
            |r| r.space.alloc_p999_ns,
        ),
        ("gang_blocks", "blocks it wrote as gangs", |r| {
            r.space.gang_blocks
        }),
        (
            "log_writes",
            "of the space-map block writes, the log space map's",
            |r| r.space.log_writes,
        ),
        ("ms_flushed", "metaslabs flushed from the log", |r| {
            r.space.ms_flushed
        }),
    ];
    for (field, help, value) in txg {
        let name = format!("tarn_txg_{field}");
        let mut samples = family(&mut out, &name, "gauge", help);
        for pool in pools {
            if let Some(row) = pool
                .txgs
                .iter()
                .rev()
                .find(|row| row.state == TxgState::Committed)
            {
                samples.sample(&name, &[("zpool", &pool.name)], value(row));
            }
        }
    }
    // The vdev queues (tarn stat vdev_queue).
    let queue: [Metric<tarn::stats::ClassSnapshot>; 6] = [
        ("pending", "requests waiting in the queue", |c| c.pending),
        ("active", "device I/Os being executed", |c| c.active),
        ("requests", "requests completed", |c| c.requests),
        ("bytes", "bytes of the requests completed", |c| c.bytes),
        (
            "queue_ns",
            "nanoseconds requests waited in the queue",
            |c| c.queue_ns,
        ),
        ("disk_ns", "nanoseconds requests spent at the device", |c| {
            c.disk_ns
        }),
    ];
    for (field, help, value) in queue {
        let kind = if matches!(field, "pending" | "active") {
            "gauge"
        } else {
            "unknown"
        };
        let name = format!("tarn_vdev_queue_{field}");
        let mut samples = family(&mut out, &name, kind, help);
        for pool in pools {
            let mut found = Vec::new();
            for top in &pool.iostat.root.children {
                leaves(top, &mut found);
            }
            for leaf in found {
                for class in tarn::stats::IoClass::ALL {
                    samples.sample(
                        &name,
                        &[
                            ("zpool", &pool.name),
                            ("vdev", &leaf.name),
                            ("class", class.name()),
                        ],
                        value(leaf.stats.class(class)),
                    );
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_pool() -> PoolMetrics {
        let mut arc = BlockCacheStats::default();
        arc.counters.hits = 42;
        arc.size_bytes = 4096;
        PoolMetrics {
            name: "tank".into(),
            arc,
            iostat: PoolIostat {
                elapsed_ns: 1,
                root: VdevIostat {
                    name: "tank".into(),
                    size_bytes: Some(1 << 30),
                    allocated_bytes: Some(1 << 20),
                    stats: Default::default(),
                    children: vec![VdevIostat {
                        name: "/dev/a".into(),
                        size_bytes: Some(1 << 30),
                        allocated_bytes: Some(1 << 20),
                        stats: Default::default(),
                        children: Vec::new(),
                    }],
                },
            },
            txgs: Vec::new(),
            zil: tarn::stats::ZilStats::default()
                .kstat()
                .into_iter()
                .map(|(name, bytes, _)| (name.to_string(), bytes, 7))
                .collect(),
        }
    }

    #[test]
    fn text_is_openmetrics_with_node_exporter_names() {
        let text = render(&[sample_pool()]);
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("node_zfs_arc_hits{zpool=\"tank\"} 42\n"));
        assert!(text.contains("node_zfs_arc_size{zpool=\"tank\"} 4096\n"));
        assert!(text.contains("# TYPE node_zfs_zpool_nread unknown\n"));
        assert!(text.contains("node_zfs_zil_zil_commit_count{zpool=\"tank\"} 7\n"));
        assert!(text.contains("node_zfs_zil_zil_itx_indirect_bytes{zpool=\"tank\"} 7\n"));
        assert!(text.contains(
            "tarn_vdev_queue_pending{zpool=\"tank\",vdev=\"/dev/a\",class=\"sync_read\"} 0\n"
        ));
        // Every sample line: name{labels} integer; every family declared before its samples.
        let mut declared = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.insert(rest.split_whitespace().next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let (name, value) = line.split_once(' ').unwrap();
                let family = name.split('{').next().unwrap();
                assert!(declared.contains(family), "{family} not declared");
                value.parse::<u64>().unwrap();
            }
        }
    }
}
