//! Smoke test of `tarn bench mount`: a small run (64 MiB per job) prints, in JSON, a write row
//! and a read row with positive tarn, null-FUSE and raw figures and ratios that agree with them,
//! and leaves nothing behind in its directory. It times nothing: figures this small say nothing
//! about throughput. Skipped with a message without /dev/fuse, fio or root.

use std::process::Command;

use tarn_test_support::{number, requires, Requirement};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

fn can_run() -> bool {
    // Root for mount and drop_caches.
    requires(&[
        Requirement::Fuse,
        Requirement::Root,
        Requirement::Tool("fio"),
    ])
}

#[test]
fn bench_mount_prints_write_and_read_rows() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let output = Command::new(TARN)
        .args([
            "bench",
            "mount",
            "--size",
            "64M",
            "--vdev-size",
            "512M",
            "-j",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = json["workloads"].as_array().expect("a workloads array");
    let names: Vec<&str> = rows
        .iter()
        .map(|row| row["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["seqwrite 64M", "seqread 64M"], "{stdout}");
    for row in rows {
        let tarn = number(row, "tarn_mib_s");
        let null = number(row, "null_fuse_mib_s");
        let raw = number(row, "raw_mib_s");
        assert!(tarn > 0.0 && null > 0.0 && raw > 0.0, "{row}");
        let ratio_null = number(row, "tarn/null");
        let ratio_raw = number(row, "tarn/raw");
        assert!((ratio_null - tarn / null).abs() < 0.01, "{row}");
        assert!((ratio_raw - tarn / raw).abs() < 0.01, "{row}");
    }
    // The vdev, the raw file and the mountpoints are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bench_mount_refuses_a_bad_size() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(TARN)
        .args(["bench", "mount", "--size", "1000", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("multiple of 1M"), "{stderr}");
}
