//! Smoke test of `tarn bench sync`: a tiny run prints, in JSON, one txg row per workload with
//! plausible figures (at least one non-empty txg, at least one pass, passes_max not below the
//! median) and the fsync table with tarn, btrfs and their ratio, and leaves nothing behind in
//! its directory. It times nothing: figures this small say nothing about performance. Skipped
//! with a message without /dev/fuse, root or mkfs.btrfs.

use std::process::Command;

use tarn_test_support::{number, requires, Requirement};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

fn can_run() -> bool {
    // Root for mount and losetup.
    requires(&[
        Requirement::Fuse,
        Requirement::Root,
        Requirement::Tool("mkfs.btrfs"),
    ])
}

#[test]
fn bench_sync_prints_txg_and_fsync_tables() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let source = tempfile::tempdir().unwrap();
    for index in 0..10 {
        let sub = source.path().join(format!("d{}", index % 3));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{index}")), vec![index as u8; 3000]).unwrap();
    }
    let output = Command::new(TARN)
        .args([
            "bench",
            "sync",
            "--vdev-size",
            "512M",
            "--small-files",
            "30",
            "--file-size",
            "1M",
            "--fsyncs",
            "5",
            "-j",
        ])
        .arg("--copy-source")
        .arg(source.path())
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
    let txgs = json["txgs"].as_array().expect("a txgs array");
    let names: Vec<&str> = txgs
        .iter()
        .map(|row| row["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["copy-tree", "small-files", "overwrite-fsync"],
        "{stdout}"
    );
    for row in txgs {
        assert!(number(row, "txgs") >= 1.0, "{row}");
        assert!(number(row, "passes_median") >= 1.0, "{row}");
        assert!(
            number(row, "passes_max") >= number(row, "passes_median"),
            "{row}"
        );
        assert!(number(row, "blocks_written_median") >= 1.0, "{row}");
        assert!(number(row, "write_ios_median") >= 1.0, "{row}");
    }
    let fsync = json["fsync"].as_array().expect("an fsync array");
    let names: Vec<&str> = fsync
        .iter()
        .map(|row| row["fs"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tarn", "btrfs", "tarn/btrfs"], "{stdout}");
    // An fsync commits the intent log: one log block write each, not a txg's writes.
    assert!(number(&fsync[0], "write_ios_per_fsync") <= 2.0, "{stdout}");
    for row in &fsync[..2] {
        assert!(number(row, "fsyncs_s") > 0.0, "{row}");
        assert!(number(row, "write_ios_per_fsync") > 0.0, "{row}");
        assert!(number(row, "write_bytes_per_fsync") >= 4096.0, "{row}");
    }
    let ratio = number(&fsync[2], "write_ios_per_fsync");
    let expected =
        number(&fsync[0], "write_ios_per_fsync") / number(&fsync[1], "write_ios_per_fsync");
    assert!((ratio - expected).abs() / expected < 0.01, "{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
