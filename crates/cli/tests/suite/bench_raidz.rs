//! Smoke test of `tarn bench raidz`: a tiny run without peers (64 MiB per writer) prints, in
//! JSON, the rows of both raidz layouts with positive figures and ratios that agree with them,
//! the degraded-read and physical-write targets, and leaves nothing behind in its directory.
//! It times nothing: figures this small say nothing about throughput. Skipped with a message
//! without /dev/fuse, fio or root.

use std::process::Command;

use tarn_test_support::{number, requires, Requirement};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

fn can_run() -> bool {
    // Root for drop_caches.
    requires(&[
        Requirement::Fuse,
        Requirement::Root,
        Requirement::Tool("fio"),
    ])
}

#[test]
fn bench_raidz_prints_layout_rows_and_targets() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let output = Command::new(TARN)
        .args(["bench", "raidz", "--size", "64M", "--no-peers", "-j"])
        .arg("--dir")
        .arg(dir.path())
        .env_remove("TARN_SOCKET")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = json["raidz"].as_array().expect("a raidz array");
    for layout in ["raidz1 on 4 files", "raidz2 on 6 files"] {
        for workload in [
            "engine write, data",
            "engine read",
            "mount write, data",
            "mount read",
            "mount read, 1 child offline",
            "scrub, MiB/s of file data",
        ] {
            let what = format!("{layout}: {workload}");
            assert!(
                rows.iter().any(|row| row["workload"] == what.as_str()),
                "no row {what:?} in {stdout}"
            );
        }
    }
    assert!(
        rows.iter()
            .any(|row| row["workload"] == "raidz2 on 6 files: mount read, 2 children offline"),
        "{stdout}"
    );
    for row in rows {
        let tarn = number(row, "tarn");
        let baseline = number(row, "baseline_value");
        assert!(tarn > 0.0 && baseline > 0.0, "{row}");
        assert!(
            (number(row, "ratio") - tarn / baseline).abs() < 1e-6 * (1.0 + tarn / baseline),
            "{row}"
        );
    }
    // Physical bytes per data byte (in the row's name): at least the parity's share (4/3, 6/4).
    let physical = |layout: &str| -> f64 {
        let prefix = format!("{layout}: engine write, physical (");
        let what = rows
            .iter()
            .filter_map(|row| row["workload"].as_str())
            .find(|what| what.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no physical row of {layout}: {stdout}"));
        what[prefix.len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        physical("raidz1 on 4 files") >= 4.0 / 3.0 * 0.99,
        "{stdout}"
    );
    assert!(physical("raidz2 on 6 files") >= 1.5 * 0.99, "{stdout}");
    let targets = json["targets"].as_array().expect("a targets array");
    // raidz1: two physical rows and two degraded; raidz2: two physical and four degraded.
    assert_eq!(targets.len(), 10, "{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
