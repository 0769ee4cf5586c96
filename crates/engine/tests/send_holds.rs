//! A send and the snapshots it reads: a send holds them, so no destroy frees their blocks under
//! it, and its reads repair nothing. Every test ends with `check` clean.

use crate::common;

use std::io::Write;
use std::sync::mpsc;

use tarn::fs::FileSystem;
use tarn::pool::{Pool, PoolError};
use tarn::send::{receive, send, ReceiveOptions, SendOptions};

use common::tree::snapshot_tree;
use common::*;

/// A writer that, at its first write, tells `reached` and then waits for `go`: the send it
/// is given stops part-way (its buffer full, its walk not done) until the test lets it on.
struct Stalling {
    out: Vec<u8>,
    reached: Option<mpsc::Sender<()>>,
    go: mpsc::Receiver<()>,
}

impl Write for Stalling {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Some(reached) = self.reached.take() {
            reached.send(()).unwrap();
            self.go.recv().unwrap();
        }
        self.out.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn write_file(fs: &FileSystem, name: &str, seed: u64, length: usize) {
    let ino = fs
        .create(fs.root(), name.as_bytes(), 0o644, 0, 0)
        .unwrap()
        .ino;
    fs.write(ino, 0, &pattern(seed, length)).unwrap();
}

fn snapshot(pool: &Pool, name: &str) {
    pool.create_snapshots(&[name.to_string()], false).unwrap();
}

/// Send `to` with `options`, stopped part-way while `during` runs (it must not panic: it
/// returns what it saw, for the caller to assert once the send has been let on). Returns the
/// send's stream (or error) and what `during` returned.
fn stalled_send<T: Send>(
    pool: &Pool,
    to: &str,
    options: &SendOptions,
    during: impl FnOnce() -> T + Send,
) -> (Result<Vec<u8>, tarn::send::SendError>, T) {
    let (reached_sender, reached) = mpsc::channel();
    let (go, go_receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        let sending = scope.spawn(|| {
            let mut out = Stalling {
                out: Vec::new(),
                reached: Some(reached_sender),
                go: go_receiver,
            };
            send(pool, to, options, &mut out, &mut |_| {}).map(|_| out.out)
        });
        reached.recv().unwrap();
        let seen = during();
        go.send(()).unwrap();
        (sending.join().unwrap(), seen)
    })
}

/// `result` is a refusal naming `snapshot` as being sent.
fn assert_busy<T: std::fmt::Debug>(result: Result<T, PoolError>, snapshot: &str) {
    match result {
        Err(PoolError::DatasetBusy(_, why)) => assert_eq!(
            why,
            format!("snapshot {snapshot} is being sent"),
            "the refusal names the holder"
        ),
        other => panic!("expected DatasetBusy for {snapshot} being sent, got {other:?}"),
    }
}

/// A snapshot could be destroyed while a send was reading it: its blocks went to the free
/// list, were reused within seconds, and the send read whatever had been written there since
/// (with repair on, charging checksum errors to healthy disks). Here a send stops part-way;
/// every destroy that would free a snapshot it reads is refused with `DatasetBusy` naming the
/// send, with nothing destroyed; the send then completes and its stream receives correctly
/// into another pool, and once it has ended the destroys go through.
#[test]
fn a_snapshot_being_sent_cannot_be_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let source = create_pool(dir.path(), "ho", single(dir.path(), "ho0"), tiny());
    let target = create_pool(dir.path(), "tg", single(dir.path(), "tg0"), tiny());
    source.create_dataset("ho/src", &[], false).unwrap();
    let fs = source.open_file_system("ho/src").unwrap();
    write_file(&fs, "old", 1, 1 << 20);
    snapshot(&source, "ho/src@old");
    write_file(&fs, "a", 2, 2 << 20);
    snapshot(&source, "ho/src@a");
    // More than the send's 1 MiB buffer, so that its first write comes before its end.
    write_file(&fs, "b", 3, 6 << 20);
    snapshot(&source, "ho/src@b");
    let mut full = Vec::new();
    send(
        &source,
        "ho/src@a",
        &SendOptions::default(),
        &mut full,
        &mut |_| {},
    )
    .unwrap();
    receive(
        &target,
        "tg/copy",
        &mut &full[..],
        &ReceiveOptions::default(),
    )
    .unwrap();

    // What the stalled send met; asserted once the send has been let on, so that a failed
    // assertion cannot leave it waiting forever.
    let mut refusals: Vec<(&str, Result<(), PoolError>)> = Vec::new();
    let options = SendOptions {
        from: Some("@a".into()),
        ..SendOptions::default()
    };
    let (sent, (names, renames)) = stalled_send(&source, "ho/src@b", &options, || {
        let mut record = |expected: &'static str, result: Result<Vec<String>, PoolError>| {
            refusals.push((expected, result.map(drop)));
        };
        // The snapshot sent, and the incremental stream's source, alone and with others.
        record("ho/src@b", source.destroy_snapshots("ho/src@b", false));
        record("ho/src@a", source.destroy_snapshots("ho/src@a", false));
        record("ho/src@b", source.destroy_snapshots("ho/src@old,b", false));
        record("ho/src@a", source.destroy_snapshots("ho/src@old%b", false));
        record("ho/src@b", source.destroy_snapshots("ho@b", true));
        // Its file system, and a rollback that would destroy it.
        record(
            "ho/src@a",
            source.destroy_dataset("ho/src", true).map(|_| Vec::new()),
        );
        record("ho/src@a", source.rollback("ho/src@old", true));
        // A held snapshot may be renamed (holds are by dataset, not name), as in OpenZFS.
        let renamed = source.rename_snapshot("ho/src@b", "ho/src@c");
        record("ho/src@c", source.destroy_snapshots("ho/src@c", false));
        let renamed_back = source.rename_snapshot("ho/src@c", "ho/src@b");
        let names: Vec<String> = source
            .core
            .snapshots_of("ho/src")
            .map(|infos| infos.into_iter().map(|info| info.name).collect())
            .unwrap_or_default();
        // Churn that would reuse freed blocks, had anything been freed.
        write_file(&fs, "churn", 4, 4 << 20);
        let _ = source.sync();
        (names, [renamed, renamed_back])
    });
    for (snapshot, result) in refusals {
        assert_busy(result, snapshot);
    }
    for rename in renames {
        rename.expect("a held snapshot may be renamed");
    }
    // A refused destroy of several destroyed none of them.
    assert_eq!(names, ["ho/src@old", "ho/src@a", "ho/src@b"]);
    let incremental = sent.expect("the send completes");
    receive(
        &target,
        "tg/copy",
        &mut &incremental[..],
        &ReceiveOptions::default(),
    )
    .unwrap();
    assert_eq!(
        snapshot_tree(&target, "tg/copy@b"),
        snapshot_tree(&source, "ho/src@b")
    );
    // The send has ended: nothing holds the snapshots any more.
    assert_eq!(
        source.destroy_snapshots("ho/src@old%b", false).unwrap(),
        ["ho/src@old", "ho/src@a", "ho/src@b"]
    );
    drop(fs);
    assert_clean(&source);
    assert_clean(&target);
    source.export().unwrap();
    target.export().unwrap();
}

/// With `-I` a send reads every snapshot between its source and its target, and with `-R`
/// every snapshot of every file system of the tree up to the one named: each is held for the
/// whole stream, not only the one being read when the destroy comes.
#[test]
fn every_snapshot_of_a_send_with_intermediates_or_descendants_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ri", single(dir.path(), "ri0"), tiny());
    pool.create_dataset("ri/src", &[], false).unwrap();
    pool.create_dataset("ri/src/kid", &[], false).unwrap();
    for (index, name) in ["1", "2", "3"].iter().enumerate() {
        for file_system in ["ri/src", "ri/src/kid"] {
            let fs = pool.open_file_system(file_system).unwrap();
            write_file(&fs, name, index as u64, 2 << 20);
        }
        snapshot(&pool, &format!("ri/src@{name}"));
        snapshot(&pool, &format!("ri/src/kid@{name}"));
    }
    let intermediates = SendOptions {
        from: Some("@1".into()),
        intermediates: true,
        ..SendOptions::default()
    };
    let recursive = SendOptions {
        recursive: true,
        ..SendOptions::default()
    };
    for (options, held) in [
        (&intermediates, ["ri/src@1", "ri/src@2", "ri/src@3"]),
        (&recursive, ["ri/src/kid@1", "ri/src/kid@2", "ri/src/kid@3"]),
    ] {
        let (sent, refusals) = stalled_send(&pool, "ri/src@3", options, || {
            held.map(|name| pool.destroy_snapshots(name, false))
        });
        for (result, name) in refusals.into_iter().zip(held) {
            assert_busy(result, name);
        }
        sent.expect("the send completes");
    }
    assert_eq!(
        pool.destroy_snapshots("ri/src@1%3", true).unwrap().len(),
        6,
        "the sends have ended: nothing holds the snapshots"
    );
    assert_clean(&pool);
    pool.export().unwrap();
}

/// A send reads without repairing. A send's reads used to repair any bad copy they met from a
/// good one; had the block been freed and reused under the send, that "repair" would have
/// written stale bytes over a live block. Here one side of a mirror is damaged under a
/// snapshot's blocks: the send reads the good side and completes, and leaves every bad copy
/// as it found it (a scrub repairs them after).
#[test]
fn a_send_repairs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.img");
    let b = dir.path().join("b.img");
    let pool = create_pool(
        dir.path(),
        "mi",
        vec![tarn::pool::VdevSpec::Mirror(vec![a.clone(), b])],
        tiny(),
    );
    pool.create_dataset("mi/src", &[], false).unwrap();
    let fs = pool.open_file_system("mi/src").unwrap();
    write_file(&fs, "data", 5, 8 << 20);
    drop(fs);
    snapshot(&pool, "mi/src@s");
    pool.export().unwrap();

    // Scribble over the data area of one side of the mirror.
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        file.write_all_at(&pattern(99, 24 << 20), 4 << 20).unwrap();
        file.sync_all().unwrap();
    }
    let pool = import(dir.path(), "mi", tiny());
    // What a check that repairs nothing (its metadata reads too) counts, before the send and
    // after; twice before, so that the count is known to be stable.
    let bad_copies = || {
        let _verify_only = tarn::block::pipeline::VerifyOnlyScope::new();
        tarn::check::check_pool(&pool, false).unwrap().copies_bad
    };
    let before = bad_copies();
    assert!(before > 0, "the damage was not noticed");
    assert_eq!(bad_copies(), before, "check alone repairs nothing");
    let mut stream = Vec::new();
    send(
        &pool,
        "mi/src@s",
        &SendOptions::default(),
        &mut stream,
        &mut |_| {},
    )
    .expect("the send reads the good side");
    assert_eq!(bad_copies(), before, "the send repaired copies");
    let target = create_pool(dir.path(), "tg", single(dir.path(), "tg0"), tiny());
    receive(
        &target,
        "tg/copy",
        &mut &stream[..],
        &ReceiveOptions::default(),
    )
    .unwrap();
    assert_eq!(
        snapshot_tree(&target, "tg/copy@s"),
        snapshot_tree(&pool, "mi/src@s")
    );
    // A repairing check mends what the send left.
    assert!(tarn::check::check_pool(&pool, true).unwrap().copies_bad > 0);
    assert_eq!(bad_copies(), 0, "the repairing check mended every copy");
    assert_clean(&target);
    target.export().unwrap();
    pool.export().unwrap();
}
