//! `tarn stat txgs` end to end against a daemon on its own socket: the exact columns in
//! OpenZFS's txgs order under -H -p, a history bounded by `txg_history`, JSON that parses,
//! INTERVAL and COUNT (later reports carry only newly committed txgs), and clear errors for a
//! pool no daemon holds and for an unknown field.

use std::time::Instant;

use serde_json::Value;
use tarn_test_support::cli::CliFixture;
use tarn_test_support::Run;

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

/// A fixture whose daemon keeps four txgs of history.
fn fixture() -> CliFixture {
    CliFixture::new(TARN).with_env("TARN_TUNABLE_txg_history", "4")
}

/// `tarn pool create -m none -s 128M NAME NAME.img`, which must succeed.
fn create(fixture: &CliFixture, name: &str) {
    fixture
        .create_pool(
            name,
            &["-m", "none", "-s", "128M"],
            &[&format!("{name}.img")],
        )
        .success();
}

#[test]
fn a_pool_no_daemon_holds_is_a_clear_error() {
    let fixture = fixture();
    let Run { code, stderr, .. } = fixture.run(&["stat", "txgs", "tank"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"tank\" is not imported"), "{stderr}");
    create(&fixture, "held");
    let Run { code, stderr, .. } = fixture.run(&["stat", "txgs", "-H", "other"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"other\" is not imported"), "{stderr}");
    let Run { code, stderr, .. } = fixture.run(&["stat", "txgs", "-o", "txg,bogus", "held"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bogus") && stderr.contains("blocks_written"),
        "{stderr}"
    );
    let Run { code, stderr, .. } = fixture.run(&["stat", "txgs", "held", "0"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("interval"), "{stderr}");
    // Without POOL, the daemon's only pool; with two, the user must choose.
    let only = fixture.run(&["stat", "txgs", "-H"]).success().stdout;
    assert!(!only.is_empty());
    create(&fixture, "second");
    let Run { code, stderr, .. } = fixture.run(&["stat", "txgs", "-H", "1", "1"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("several pools") && stderr.contains("second"),
        "{stderr}"
    );
}

#[test]
fn txgs_table_has_the_kstat_columns_and_is_bounded() {
    let fixture = fixture();
    create(&fixture, "tank");
    for _ in 0..6 {
        fixture.run(&["pool", "sync", "tank"]).success();
    }
    let header = fixture.run(&["stat", "txgs", "tank"]).success().stdout;
    let first: Vec<&str> = header.lines().next().unwrap().split_whitespace().collect();
    let expected: Vec<String> = COLUMNS.iter().map(|c| c.to_uppercase()).collect();
    assert_eq!(first, expected);

    let exact = fixture
        .run(&["stat", "txgs", "-H", "-p", "tank"])
        .success()
        .stdout;
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

    let json: Value = serde_json::from_str(
        &fixture
            .run(&["stat", "txgs", "-j", "tank"])
            .success()
            .stdout,
    )
    .unwrap();
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
    let selected = fixture
        .run(&["stat", "-H", "txgs", "-o", "txg,state,passes", "tank"])
        .success()
        .stdout;
    assert!(
        selected.lines().all(|line| line.split('\t').count() == 3),
        "{selected}"
    );
}

#[test]
fn interval_and_count_repeat_with_only_new_committed_txgs() {
    let fixture = fixture();
    create(&fixture, "tank");
    fixture.run(&["pool", "sync", "tank"]).success();
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
    let output = fixture
        .run(&["stat", "txgs", "-j", "tank", "0.25", "3"])
        .success()
        .stdout;
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
