//! `tarn pool iostat` end to end against a daemon on its own socket: `-H -p` output parsed back
//! (one tab-separated line per vdev, exact integers, `-` only where nothing was measured, the
//! pool line equal to its only leaf's), the histogram forms' shapes, and clear errors.

use tarn_test_support::cli::CliFixture;
use tarn_test_support::Run;

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// One parsed `-H -p` field: an exact integer, or `-` (nothing measured / not applicable).
fn field(text: &str) -> Option<u64> {
    if text == "-" {
        return None;
    }
    Some(
        text.parse::<u64>()
            .unwrap_or_else(|_| panic!("{text:?} is neither an exact integer nor -")),
    )
}

#[test]
fn scripted_exact_output_parses_back() {
    let fixture = CliFixture::new(TARN);
    let vdev = fixture.file("tank.img");
    fixture
        .create_pool("tank", &["-m", "none", "-s", "128M"], &["tank.img"])
        .success();
    fixture.run(&["pool", "sync", "tank"]).success();
    let output = fixture
        .run(&["pool", "iostat", "-H", "-p", "-l", "-q", "-v", "tank"])
        .success()
        .stdout;
    let lines: Vec<Vec<&str>> = output
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(lines.len(), 2, "pool and leaf:\n{output}");
    assert_eq!(lines[0][0], "tank");
    assert_eq!(lines[1][0], vdev.to_str().unwrap());
    for line in &lines {
        assert_eq!(line.len(), 1 + 6 + 11 + 14, "{line:?}");
        let values: Vec<Option<u64>> = line[1..].iter().map(|text| field(text)).collect();
        // Capacity, operations and bandwidth are always numbers; so are queue depths.
        assert!(values[..6].iter().all(Option::is_some), "{line:?}");
        assert!(values[17..].iter().all(Option::is_some), "{line:?}");
        let allocated = values[0].unwrap();
        let free = values[1].unwrap();
        assert!(
            allocated > 0 && free > 0 && allocated + free <= 128 << 20,
            "{line:?}"
        );
        // The pool was written (create and sync): write bandwidth, a write total_wait and
        // disk_wait in nanoseconds, and an async write queue wait; the idle classes are -.
        assert!(values[5].unwrap() > 0, "{line:?}");
        let total_write = values[7].expect("a write total_wait");
        let disk_write = values[9].expect("a write disk_wait");
        assert!(total_write >= disk_write && disk_write > 0, "{line:?}");
        assert!(values[13].is_some(), "asyncq_wait write: {line:?}");
        assert_eq!(values[15], None, "trim wait: {line:?}");
        assert_eq!(values[16], None, "rebuild wait: {line:?}");
    }
    // A single-leaf pool: the pool line is the leaf's line (same counters, same space).
    assert_eq!(lines[0][1..3], lines[1][1..3]);

    let histogram = fixture
        .run(&["pool", "iostat", "-w", "-H", "-p", "tank"])
        .success()
        .stdout;
    let rows: Vec<Vec<&str>> = histogram
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 37);
    let mut writes = 0;
    for (bucket, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 13, "{row:?}");
        assert_eq!(row[0], "tank");
        assert_eq!(field(row[1]), Some((1u64 << (bucket + 1)) - 1));
        writes += field(row[5]).unwrap();
    }
    assert!(writes > 0, "no write disk waits:\n{histogram}");

    let sizes = fixture
        .run(&["pool", "iostat", "-r", "-H", "-p", "tank"])
        .success()
        .stdout;
    let rows: Vec<Vec<&str>> = sizes
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 16);
    assert_eq!(field(rows[0][1]), Some(512));
    assert_eq!(field(rows[15][1]), Some(16 << 20));

    // Later reports cover their interval only.
    let repeated = fixture
        .run(&["pool", "iostat", "-H", "-p", "-y", "tank", "0.2", "2"])
        .success()
        .stdout;
    assert_eq!(repeated.lines().count(), 2, "{repeated}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let fixture = CliFixture::new(TARN);
    let Run { code, stderr, .. } = fixture.run(&["pool", "iostat", "tank"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("\"tank\" is not imported"), "{stderr}");
    let Run { code, stderr, .. } = fixture.run(&["pool", "iostat"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no pools"), "{stderr}");
    for (args, message) in [
        (&["pool", "iostat", "-w", "-q"][..], "cannot be combined"),
        (&["pool", "iostat", "tank", "0"][..], "invalid interval"),
        (&["pool", "iostat", "tank", "1", "0"][..], "invalid count"),
        (
            &["pool", "iostat", "tank", "1", "2", "3"][..],
            "unexpected value",
        ),
    ] {
        let Run { code, stderr, .. } = fixture.run(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
