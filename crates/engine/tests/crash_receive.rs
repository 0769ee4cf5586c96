//! Crash test for receive: a child process receives a full stream into a new file
//! system and then an incremental one (with -F), destroys the copy and starts again, and is
//! killed with SIGKILL at a random moment, 12 times in a row on one pool. After each kill the
//! parent re-imports: a full receive the kill interrupted is destroyed by the import (its file
//! system is still flagged inconsistent); `check` is clean; and every snapshot the copy has is
//! exactly the source's snapshot of that name, file by file. A snapshot is taken only after
//! its stream's END was verified and everything before it synced, so a received snapshot is
//! never partial.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use tarn::pool::Pool;
use tarn::send::{receive, send, ReceiveOptions, SendOptions};

use common::tree::snapshot_tree;
use common::*;

const ROUNDS: usize = 12;
const CHILD_ENV: &str = "TARN_RECEIVE_CRASH_CHILD_DIR";

fn stream_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.stream"))
}

/// The child: import, then receive the full and the incremental stream over and over,
/// noting each finished receive.
fn child_main(dir: PathBuf) {
    let pool = import(&dir, "rcrash", tiny());
    let mut done = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("done"))
        .unwrap();
    loop {
        if pool.has_dataset("rcrash/copy") {
            pool.destroy_dataset("rcrash/copy", true).unwrap();
        }
        for (name, force) in [("full", false), ("incremental", true)] {
            let mut input =
                std::io::BufReader::new(std::fs::File::open(stream_file(&dir, name)).unwrap());
            receive(
                &pool,
                "rcrash/copy",
                &mut input,
                &ReceiveOptions {
                    force,
                    ..ReceiveOptions::default()
                },
            )
            .unwrap();
            done.write_all(format!("{name}\n").as_bytes()).unwrap();
            done.sync_all().unwrap();
        }
    }
}

#[test]
fn crash_receive_child_entry() {
    // Runs only when the parent test re-executes this binary as the child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

#[test]
fn kill9_while_receiving_then_import_check_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    {
        let pool = create_pool(&dir_path, "rcrash", single(&dir_path, "v.img"), tiny());
        pool.create_dataset("rcrash/src", &[], false).unwrap();
        let fs = pool.open_file_system("rcrash/src").unwrap();
        let root = fs.root();
        for index in 0..40u64 {
            let ino = fs
                .create(root, format!("f{index}").as_bytes(), 0o644, 0, 0)
                .unwrap()
                .ino;
            fs.write(ino, 0, &pattern(index, 40_000 + index as usize * 3000))
                .unwrap();
            fs.setxattr(ino, b"user.i", &pattern(index, 700), 0)
                .unwrap();
        }
        pool.create_snapshots(&["rcrash/src@a".to_string()], false)
            .unwrap();
        for index in (0..40u64).step_by(3) {
            let ino = fs.lookup(root, format!("f{index}").as_bytes()).unwrap().ino;
            fs.write(ino, 10_000, &pattern(index + 100, 50_000))
                .unwrap();
        }
        for index in (1..40u64).step_by(7) {
            fs.unlink(root, format!("f{index}").as_bytes()).unwrap();
        }
        drop(fs);
        pool.create_snapshots(&["rcrash/src@b".to_string()], false)
            .unwrap();
        for (name, from) in [("full", None), ("incremental", Some("@a".to_string()))] {
            let mut out = std::fs::File::create(stream_file(&dir_path, name)).unwrap();
            let to = if from.is_some() {
                "rcrash/src@b"
            } else {
                "rcrash/src@a"
            };
            send(
                &pool,
                to,
                &SendOptions {
                    from,
                    ..SendOptions::default()
                },
                &mut out,
                &mut |_| {},
            )
            .unwrap();
        }
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let mut destroyed_partial = 0;
    // Odd rounds: one more receive, then a kill anywhere in the ones after it.
    let kill_at = KillPoint {
        after_ms: 100..1200,
        progress: &dir_path.join("done"),
        prefix: "",
        units: 1,
        then_ms: 0..800,
    };
    for round in 0..ROUNDS {
        crash_round(
            module_path!(),
            "crash_receive_child_entry",
            &[(CHILD_ENV, dir_path.display().to_string())],
            round,
            &mut rng,
            &kill_at,
        );
        let (pool, report) = Pool::import(
            "rcrash",
            tarn::pool::ImportOptions::new(dirs(&dir_path), tiny()),
        )
        .unwrap_or_else(|error| panic!("round {round}: import: {error}"));
        destroyed_partial += report
            .damaged
            .iter()
            .filter(|line| line.contains("rcrash/copy"))
            .count();
        assert_clean(&pool);
        if pool.has_dataset("rcrash/copy") {
            for snapshot in ["a", "b"] {
                if pool
                    .snapshot_info(&format!("rcrash/copy@{snapshot}"))
                    .is_ok()
                {
                    assert_eq!(
                        snapshot_tree(&pool, &format!("rcrash/copy@{snapshot}")),
                        snapshot_tree(&pool, &format!("rcrash/src@{snapshot}")),
                        "round {round}: copy@{snapshot}"
                    );
                }
            }
            assert!(
                pool.snapshot_info("rcrash/copy@a").is_ok(),
                "round {round}: a copy that survived import has its first snapshot"
            );
        }
        pool.export().unwrap();
    }
    let done = std::fs::read_to_string(dir_path.join("done")).unwrap_or_default();
    let finished = done.lines().count();
    eprintln!(
        "{finished} receives finished, {destroyed_partial} partial ones destroyed at import in \
         {ROUNDS} rounds"
    );
    // The rounds killed after work finished one receive each, at least.
    assert!(
        finished >= ROUNDS / 2,
        "the children received little: {finished}"
    );
}
