//! `tarn bench run` end to end: a random-write workload on a tarn pool on a sparse
//! file (opened in-process, no FUSE) sampled every second with a 5-interval window reaches
//! steady state, measures, writes its JSON record and its chart, and leaves nothing behind;
//! the record replays through `tarn bench steady` to the same decision; CSV replays; bad
//! replay files and bad options are clear errors, not panics.

use std::process::Command;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

fn tarn(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(TARN).args(args).output().unwrap();
    let run = (
        output.status.code().expect("tarn was killed by a signal"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert_ne!(run.0, 101, "tarn panicked: {run:?}");
    run
}

#[test]
fn a_run_on_a_tarn_pool_reaches_steady_state_and_charts_it() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("run.json");
    let chart = out.path().join("run.svg");
    let (code, stdout, stderr) = tarn(&[
        "bench",
        "run",
        "--engine",
        dir.path().to_str().unwrap(),
        "--vdev-size",
        "256M",
        "--size",
        "16M",
        "--rw",
        "randwrite",
        "--interval",
        "1",
        "--window",
        "5",
        "--measure",
        "2",
        "--max-time",
        "40",
        "--json",
        json.to_str().unwrap(),
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("steady at interval"), "{stdout}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(record["interval_s"], 1.0);
    assert_eq!(record["window"], 5);
    assert_eq!(record["ending"], "measured");
    let steady_at = record["steady_at"].as_u64().expect("a steady interval") as usize;
    let intervals = record["intervals"].as_array().unwrap();
    // Never before the window is full; the first steady interval is steady, none before it.
    assert!(steady_at >= 4, "{steady_at}");
    assert_eq!(intervals[steady_at]["steady"], true);
    assert!(intervals[..steady_at].iter().all(|i| i["steady"] == false));
    // Measured after it: at least the two seconds asked for.
    assert!(intervals.len() >= steady_at + 3, "{}", intervals.len());
    assert_eq!(intervals.last().unwrap()["phase"], "measuring");
    // No L2ARC in tarn: its three metrics are absent, the other seven present, 4 of 7 needed.
    let metrics = intervals[steady_at]["metrics"].as_object().unwrap();
    assert_eq!(metrics.len(), 7, "{metrics:?}");
    assert!(!metrics.contains_key("l2_size_pct"));
    assert_eq!(intervals[steady_at]["required"], 4);
    assert!(intervals[steady_at]["steady_count"].as_u64().unwrap() >= 4);
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("arc_size_pct") && svg.contains("steady at"));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name != ".tarn-bench.lock")
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");

    // The record replays to the same decision, with the recorded window.
    let (code, replayed, stderr) =
        tarn(&["bench", "steady", "--replay", json.to_str().unwrap(), "-j"]);
    assert_eq!(code, 0, "{stderr}");
    let replayed: serde_json::Value = serde_json::from_str(&replayed).unwrap();
    assert_eq!(replayed["steady_at"], record["steady_at"]);
    assert_eq!(replayed["window"], 5);
    let (code, table, _) = tarn(&["bench", "steady", "--replay", json.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        table.contains(&format!("steady at interval {steady_at}")),
        "{table}"
    );

    // A PNG chart of the replay, where rsvg-convert is installed (scripts/install-deps.sh).
    if Command::new("rsvg-convert")
        .arg("--version")
        .output()
        .is_ok()
    {
        let png = out.path().join("replay.png");
        let (code, _, stderr) = tarn(&[
            "bench",
            "steady",
            "--replay",
            json.to_str().unwrap(),
            "--chart",
            png.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    }
}

#[test]
fn csv_replays_and_bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("series.csv");
    let mut text = String::from("t,pool_kops,pool_mibps,pool_lat_ms,arc_hit_pct\n");
    for index in 0..8 {
        // Ramping for four intervals, then flat.
        let kops = if index < 4 { 1.0 + index as f64 } else { 5.0 };
        text.push_str(&format!("{},{kops},{},2.0,99\n", index * 15, kops * 4.0));
    }
    std::fs::write(&csv, text).unwrap();
    let (code, stdout, stderr) = tarn(&[
        "bench",
        "steady",
        "--replay",
        csv.to_str().unwrap(),
        "--window",
        "3",
        "-j",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let record: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // The window (3) is flat first at interval 6 (4, 5, 6); four present metrics, all needed.
    assert_eq!(record["steady_at"], 6);
    assert_eq!(record["intervals"][6]["required"], 4);

    for (contents, expected) in [
        ("t,pool_kopz\n1,2\n", "unknown column \"pool_kopz\""),
        ("{\"intervals\": 3}", "no \"intervals\" array"),
        ("", "empty"),
    ] {
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, contents).unwrap();
        let (code, _, stderr) = tarn(&["bench", "steady", "--replay", bad.to_str().unwrap()]);
        assert_ne!(code, 0);
        assert!(
            stderr.contains("bad.csv") && stderr.contains(expected),
            "{stderr}"
        );
    }
    let (code, _, stderr) = tarn(&["bench", "steady", "--replay", "/nonexistent/series.csv"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("/nonexistent/series.csv"), "{stderr}");
    let (code, _, stderr) = tarn(&[
        "bench",
        "steady",
        "--replay",
        csv.to_str().unwrap(),
        "--window",
        "1",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--window must be at least 2"), "{stderr}");
    let (code, _, stderr) = tarn(&["bench", "run", "--interval", "1"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--directory"), "{stderr}");
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/src/steady/fixtures");

/// A directory of scripts standing in for an OpenZFS host's `zpool` (list; iostat, which
/// sleeps the interval and prints OpenZFS 2.2's recorded output) and FreeBSD's `sysctl`, and
/// the PATH that finds them first.
fn fake_openzfs_host() -> (tempfile::TempDir, String) {
    let bin = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let path = bin.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(
        "zpool",
        &format!(
            "case \"$1\" in list) echo \"$5\";; iostat) sleep \"$6\"; cat {FIXTURES}/zpool-iostat-2.2.txt;; *) exit 1;; esac"
        ),
    );
    script(
        "sysctl",
        &format!("cat {FIXTURES}/arcstats-freebsd-2.2.txt"),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap()
    );
    (bin, path)
}

/// An OpenZFS host, faked: `zpool` and `sysctl` are scripts on PATH that print the recorded
/// outputs of OpenZFS 2.2 (the fixtures of the parsers' unit tests), and arcstats is a file.
/// The ARC counters do not move, so arc_hit_pct fails (no accesses) and, flagged, counts
/// steady for two intervals only; the other six present metrics are flat: steady once the
/// window of 5 is full. No L2ARC in the recording: its metrics are absent.
#[test]
fn an_openzfs_host_is_read_through_arcstats_and_zpool_iostat() {
    let (_bin, path) = fake_openzfs_host();
    let work = tempfile::tempdir().unwrap();
    for arcstats in [format!("{FIXTURES}/arcstats-2.2.txt"), "sysctl".to_string()] {
        let json = work.path().join("openzfs.json");
        let output = Command::new(TARN)
            .env("PATH", &path)
            .args(["bench", "run", "--directory", work.path().to_str().unwrap()])
            .args(["--openzfs", "tank", "--arcstats", &arcstats, "--size", "1M"])
            .args([
                "--interval",
                "1",
                "--window",
                "5",
                "--measure",
                "1",
                "--max-time",
                "30",
            ])
            .args(["--json", json.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{arcstats}: {stderr}");
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(record["source"], "OpenZFS pool tank");
        assert_eq!(record["steady_at"], 4, "{arcstats}");
        let interval = &record["intervals"][4];
        let metrics = interval["metrics"].as_object().unwrap();
        assert_eq!(metrics.len(), 7);
        assert_eq!(metrics["pool_kops"]["value"], 4.0);
        assert_eq!(metrics["pool_mibps"]["value"], 64.0);
        assert_eq!(metrics["pool_lat_ms"]["value"], 1.25);
        assert_eq!(metrics["arc_size_pct"]["value"], 50.0);
        assert_eq!(metrics["arc_hit_pct"]["value"], serde_json::Value::Null);
        assert_eq!(metrics["arc_hit_pct"]["steady"], false);
        assert!(metrics["arc_hit_pct"]["flag"]
            .as_str()
            .unwrap()
            .contains("no ARC accesses"));
        assert_eq!(interval["steady_count"], 6);
        // The workload's files are removed afterwards.
        assert!(!work.path().join("tarn-bench-job.0").exists());
    }
}

/// The named workloads reuse bench timeseries, frag, clone-destroy and
/// receive on an in-process pool; each runs as a fixed-duration run (`--runtime`, which never
/// stops early and records every interval) and does work; on a directory they are refused.
#[test]
fn named_workloads_run_for_a_fixed_duration() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = tempfile::tempdir().unwrap();
    for workload in ["timeseries", "frag", "clone-churn", "receive"] {
        let json = out.path().join(format!("{workload}.json"));
        let (code, stdout, stderr) = tarn(&[
            "bench",
            "run",
            "--engine",
            dir.path().to_str().unwrap(),
            "--vdev-size",
            "512M",
            "--size",
            "4M",
            "--workload",
            workload,
            "--fill",
            "20",
            "--interval",
            "1",
            "--window",
            "2",
            "--runtime",
            "3",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{workload}: {stdout}\n{stderr}");
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(record["ending"], "fixed runtime", "{workload}");
        assert_eq!(record["workload"]["name"], workload);
        assert_eq!(
            record["intervals"].as_array().unwrap().len(),
            3,
            "{workload}"
        );
        assert!(
            record["workload_iops"].as_f64().unwrap() > 0.0,
            "{workload}"
        );
    }
    let (code, _, stderr) = tarn(&[
        "bench",
        "run",
        "--directory",
        "/tmp",
        "--pool",
        "x",
        "--workload",
        "frag",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--engine"), "{stderr}");
}

/// With fio installed, `--fio-steadystate` runs the job with fio as the load and records what
/// fio's own --steadystate decided beside the harness's decision (here the harness, judging
/// flat recorded counters, is steady once its window of 5 is full and measures 2 s more; fio
/// needs 5 s of steady IOPS and is interrupted, or stopped its job first).
#[test]
fn fio_steadystate_is_reported_beside_the_harness() {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("fio is not installed: skipped");
        return;
    }
    let (_bin, path) = fake_openzfs_host();
    let work = tempfile::tempdir().unwrap();
    let json = work.path().join("fio.json");
    let data = work.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let output = Command::new(TARN)
        .env("PATH", &path)
        .args(["bench", "run", "--directory", data.to_str().unwrap()])
        .args([
            "--openzfs",
            "tank",
            "--arcstats",
            &format!("{FIXTURES}/arcstats-2.2.txt"),
        ])
        .args(["--size", "8M", "--fio-steadystate", "iops:20%"])
        .args([
            "--interval",
            "1",
            "--window",
            "5",
            "--measure",
            "2",
            "--max-time",
            "30",
        ])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("fio --steadystate=iops:20%: "), "{stdout}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let fio = &record["fio"];
    assert_eq!(fio["criterion"], "iops:20%");
    assert!(fio["attained"].is_boolean());
    assert!(fio["iops"].as_f64().unwrap() > 0.0, "{fio}");
    assert!(fio["runtime_s"].as_f64().unwrap() > 0.0, "{fio}");
    assert!(!data.join("tarn-bench-job.0").exists());
}
