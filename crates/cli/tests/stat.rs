//! `tarn stat txgs` end to end against a daemon on its own socket: the exact columns in
//! OpenZFS's txgs order under -H -p, a history bounded by `txg_history`, JSON that parses,
//! INTERVAL and COUNT (later reports carry only newly committed txgs), and clear errors for a
//! pool no daemon holds and for an unknown field.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;
use tempfile::TempDir;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

const COLUMNS: &[&str] = &[
    "txg",
    "birth",
    "state",
    "ndirty",
    "nread",
    "nwritten",
    "reads",
    "writes",
    "otime",
    "qtime",
    "wtime",
    "stime",
    "passes",
    "blocks_written",
    "write_ios",
    "spacemap_writes",
    "ms_condensed",
    "ms_loaded",
    "ms_unloaded",
    "alloc_segments_p999",
    "alloc_load_waits",
    "alloc_p999_ns",
    "gang_blocks",
    "log_writes",
    "ms_flushed",
];

struct Fixture {
    dir: TempDir,
    run_dir: TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "--stop"]).output();
    }
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            run_dir: tempfile::tempdir().unwrap(),
        }
    }

    fn socket(&self) -> PathBuf {
        self.run_dir.path().join("tarn.sock")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(TARN);
        command
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TARN_") {
                command.env_remove(key);
            }
        }
        command
            .env("TARN_SOCKET", self.socket())
            .env("TARN_TUNABLE_txg_history", "4");
        command
    }

    /// Exit code, stdout, stderr.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.command(args).output().unwrap();
        let run = (
            output.status.code().expect("tarn was killed by a signal"),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        assert_ne!(run.0, 101, "tarn panicked: {run:?}");
        run
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.run(args);
        assert_eq!(code, 0, "tarn {args:?}\nstdout: {stdout}\nstderr: {stderr}");
        stdout
    }

    fn create(&self, name: &str) {
        let vdev = self.dir.path().join(format!("{name}.img"));
        self.ok(&[
            "pool",
            "create",
            "-m",
            "none",
            "-s",
            "128M",
            name,
            vdev.to_str().unwrap(),
        ]);
    }
}

#[test]
fn a_pool_no_daemon_holds_is_a_clear_error() {
    let fixture = Fixture::new();
    let (code, _, stderr) = fixture.run(&["stat", "txgs", "tank"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"tank\" is not imported"), "{stderr}");
    fixture.create("held");
    let (code, _, stderr) = fixture.run(&["stat", "txgs", "-H", "other"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"other\" is not imported"), "{stderr}");
    let (code, _, stderr) = fixture.run(&["stat", "txgs", "-o", "txg,bogus", "held"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bogus") && stderr.contains("blocks_written"),
        "{stderr}"
    );
    let (code, _, stderr) = fixture.run(&["stat", "txgs", "held", "0"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("interval"), "{stderr}");
    // Without POOL, the daemon's only pool; with two, the user must choose.
    let only = fixture.ok(&["stat", "txgs", "-H"]);
    assert!(!only.is_empty());
    fixture.create("second");
    let (code, _, stderr) = fixture.run(&["stat", "txgs", "-H", "1", "1"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("several pools") && stderr.contains("second"),
        "{stderr}"
    );
}

#[test]
fn txgs_table_has_the_kstat_columns_and_is_bounded() {
    let fixture = Fixture::new();
    fixture.create("tank");
    for _ in 0..6 {
        fixture.ok(&["pool", "sync", "tank"]);
    }
    let header = fixture.ok(&["stat", "txgs", "tank"]);
    let first: Vec<&str> = header.lines().next().unwrap().split_whitespace().collect();
    let expected: Vec<String> = COLUMNS.iter().map(|c| c.to_uppercase()).collect();
    assert_eq!(first, expected);

    let exact = fixture.ok(&["stat", "txgs", "-H", "-p", "tank"]);
    let rows: Vec<Vec<&str>> = exact
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 4, "txg_history=4 keeps 4 rows:\n{exact}");
    for row in &rows {
        assert_eq!(row.len(), COLUMNS.len(), "{row:?}");
        for (index, cell) in row.iter().enumerate() {
            if COLUMNS[index] == "state" {
                assert!(["O", "Q", "W", "S", "C"].contains(cell), "{row:?}");
            } else {
                cell.parse::<u64>().unwrap_or_else(|_| {
                    panic!("{} is not an exact number: {row:?}", COLUMNS[index])
                });
            }
        }
    }
    let txgs: Vec<u64> = rows.iter().map(|row| row[0].parse().unwrap()).collect();
    assert!(
        txgs.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "{txgs:?}"
    );
    assert_eq!(rows.last().unwrap()[2], "O", "the open txg comes last");
    assert!(rows[..3].iter().all(|row| row[2] == "C"), "{exact}");

    let json: Value = serde_json::from_str(&fixture.ok(&["stat", "txgs", "-j", "tank"])).unwrap();
    let items = json["txgs"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    for item in items {
        let keys: Vec<&String> = item.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), COLUMNS.len(), "{item}");
        for column in COLUMNS {
            assert!(item.get(*column).is_some(), "{column} missing in {item}");
        }
        assert!(item["txg"].is_u64() && item["state"].is_string());
    }
    // Flags may come before the table's name too, as CLI.md writes them.
    let selected = fixture.ok(&["stat", "-H", "txgs", "-o", "txg,state,passes", "tank"]);
    assert!(
        selected.lines().all(|line| line.split('\t').count() == 3),
        "{selected}"
    );
}

#[test]
fn interval_and_count_repeat_with_only_new_committed_txgs() {
    let fixture = Fixture::new();
    fixture.create("tank");
    fixture.ok(&["pool", "sync", "tank"]);
    let syncer = {
        let mut command = fixture.command(&["pool", "sync", "tank"]);
        std::thread::spawn(move || {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(60));
                let _ = command.output();
            }
        })
    };
    let started = Instant::now();
    let output = fixture.ok(&["stat", "txgs", "-j", "tank", "0.25", "3"]);
    assert!(
        started.elapsed().as_secs_f64() >= 0.5,
        "three reports take two intervals"
    );
    syncer.join().unwrap();
    let reports: Vec<Value> = serde_json::Deserializer::from_str(&output)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(reports.len(), 3, "{output}");
    let first = reports[0]["txgs"].as_array().unwrap();
    assert!(!first.is_empty());
    let mut committed: u64 = first
        .iter()
        .filter(|row| row["state"] == "C")
        .map(|row| row["txg"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    let mut later = 0;
    for report in &reports[1..] {
        for row in report["txgs"].as_array().unwrap() {
            assert_eq!(row["state"], "C", "later reports carry committed txgs only");
            let txg = row["txg"].as_u64().unwrap();
            assert!(txg > committed, "txg {txg} printed twice:\n{output}");
            committed = txg;
            later += 1;
        }
    }
    assert!(later > 0, "syncs between reports show up:\n{output}");
}
