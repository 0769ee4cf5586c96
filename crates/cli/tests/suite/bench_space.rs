//! Smoke tests of `tarn bench timeseries` and `tarn bench frag`: a tiny run
//! prints, in JSON, every column with plausible figures (allocations examined at least one
//! segment, fragmentation a percentage, a positive ratio to the plain-file baseline) and leaves
//! nothing behind in its directory. They time nothing: figures this small say nothing about
//! performance.

use std::process::Command;

use tarn_test_support::number;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

fn run(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let output = Command::new(TARN)
        .args(args)
        .args(["--dir", dir.to_str().unwrap(), "-j"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name != ".tarn-bench.lock")
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn bench_timeseries_reports_every_column() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let document = run(
        dir.path(),
        &[
            "bench",
            "timeseries",
            "--vdev-size",
            "256M",
            "--files",
            "40",
            "--intervals",
            "3",
            "--interval-ms",
            "50",
        ],
    );
    // One row with the log space map, one without.
    let rows = document["timeseries"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{document}");
    assert_eq!(rows[0]["log"], "on");
    assert_eq!(rows[1]["log"], "off");
    for row in rows {
        assert_eq!(number(row, "appends"), 120.0);
        assert!(number(row, "tarn_iops") > 0.0 && number(row, "file_iops") > 0.0);
        assert!(number(row, "tarn/file") > 0.0);
        assert!(number(row, "alloc_segments_p999") >= 1.0, "{row}");
        assert!(number(row, "passes_max") >= 1.0, "{row}");
        assert!(number(row, "write_max_us") >= number(row, "write_p50_us"));
        assert!(number(row, "frag") <= 100.0);
        assert!(number(row, "sm_writes_per_txg") > 0.0, "{row}");
    }
    assert!(number(&rows[0], "log_writes_per_txg") > 0.0);
    assert_eq!(number(&rows[1], "log_writes_per_txg"), 0.0);
    for mode in ["on", "off"] {
        assert_eq!(
            document["fragmentation_over_time"][mode]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
    // The comparison: space-map writes, IOPS and sync time, log on over log off.
    let comparisons = document["log_spacemap"].as_array().unwrap();
    assert_eq!(comparisons.len(), 3, "{document}");
    assert!(comparisons.iter().all(|row| number(row, "ratio") > 0.0));
}

#[test]
fn bench_frag_reports_each_fill_level() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let document = run(
        dir.path(),
        &[
            "bench",
            "frag",
            "--vdev-size",
            "1G",
            "--overwrites",
            "100",
            "--fills",
            "20,30",
        ],
    );
    // Two fill levels on a pool with the log space map, then the same on one without.
    let rows = document["frag"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{document}");
    for (index, row) in rows.iter().enumerate() {
        assert_eq!(row["log"], if index < 2 { "on" } else { "off" }, "{row}");
        assert!(number(row, "tarn_iops") > 0.0 && number(row, "tarn/file") > 0.0);
        assert!(number(row, "alloc_segments_p999") >= 1.0, "{row}");
        assert!(number(row, "frag") <= 100.0);
    }
    let comparisons = document["log_spacemap"].as_array().unwrap();
    assert_eq!(comparisons.len(), 6, "{document}");
    let writes = &comparisons[0];
    assert_eq!(writes["workload"], "20% spacemap_writes/txg");
    assert!(number(writes, "ratio") > 0.0, "{writes}");
}
