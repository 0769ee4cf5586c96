//! Resumable receives (`receive -s`, `receive_resume_token`, `send -t`, `receive -A`): a
//! receive stopped at any point, by a cut stream or by kill -9, keeps what it applied and its
//! position; `send -t TOKEN` continues it from exactly there, and the result is the source's
//! snapshot file by file with `check` clean.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tarn::pool::Pool;
use tarn::send::{
    abort_receive, receive, resume_send_options, resume_token, send, ReceiveOptions, SendOptions,
};

use common::tree::{snapshot_tree, tree};
use common::*;

fn stream(pool: &Pool, to: &str, options: &SendOptions) -> Vec<u8> {
    let mut out = Vec::new();
    send(pool, to, options, &mut out, &mut |_| {}).unwrap();
    out
}

fn resumable() -> ReceiveOptions {
    ReceiveOptions {
        resumable: true,
        ..ReceiveOptions::default()
    }
}

fn receive_bytes(
    pool: &Pool,
    target: &str,
    bytes: &[u8],
    options: &ReceiveOptions,
) -> Result<Vec<String>, tarn::send::SendError> {
    let mut input: &[u8] = bytes;
    receive(pool, target, &mut input, options).map(|report| report.snapshots)
}

/// The stream `send -t` makes from `file_system`'s token.
fn resumed_stream(pool: &Pool, file_system: &str) -> Vec<u8> {
    let token = resume_token(pool, file_system)
        .unwrap()
        .expect("a resume token");
    let (to, options) = resume_send_options(pool, &token).unwrap();
    stream(pool, &to, &options)
}

/// `src@a` with files large and small, holes and xattrs; `src@b` changes it.
fn source(pool: &Pool, name: &str) {
    pool.create_dataset(&format!("{name}/src"), &[], false)
        .unwrap();
    let fs = pool.open_file_system(&format!("{name}/src")).unwrap();
    let root = fs.root();
    for index in 0..24u64 {
        let ino = fs
            .create(root, format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(index, 20_000 + index as usize * 9000))
            .unwrap();
        if index % 4 == 0 {
            fs.write(ino, 2 << 20, b"after a hole").unwrap();
        }
        fs.setxattr(ino, b"user.i", &pattern(index, 500), 0)
            .unwrap();
    }
    pool.create_snapshots(&[format!("{name}/src@a")], false)
        .unwrap();
    for index in (0..24u64).step_by(3) {
        let ino = fs.lookup(root, format!("f{index}").as_bytes()).unwrap().ino;
        fs.write(ino, 5_000, &pattern(index + 50, 60_000)).unwrap();
    }
    for index in (1..24u64).step_by(5) {
        fs.unlink(root, format!("f{index}").as_bytes()).unwrap();
    }
    pool.create_snapshots(&[format!("{name}/src@b")], false)
        .unwrap();
}

#[test]
fn a_cut_full_stream_resumes_from_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "rs", single(dir.path(), "rs0"), tiny());
    source(&pool, "rs");
    for compressed in [false, true] {
        let options = SendOptions {
            compressed,
            ..SendOptions::default()
        };
        let full = stream(&pool, "rs/src@a", &options);
        // Cut it three times, each time resuming with a stream itself cut further on.
        let mut pending = full.clone();
        let mut resumes = 0;
        for share in [0.3, 0.5, 0.7] {
            let cut = (pending.len() as f64 * share) as usize;
            let error = receive_bytes(&pool, "rs/copy", &pending[..cut], &resumable())
                .unwrap_err()
                .to_string();
            assert!(error.contains("truncated"), "{error}");
            assert!(pool.has_dataset("rs/copy"), "kept for resuming");
            assert!(pool.is_inconsistent("rs/copy").unwrap());
            pending = resumed_stream(&pool, "rs/copy");
            assert!(
                pending.len() < full.len(),
                "a resumed stream leaves out what was received ({} of {})",
                pending.len(),
                full.len()
            );
            resumes += 1;
        }
        assert_eq!(resumes, 3);
        // A new receive is refused while the partial one waits.
        let error = receive_bytes(&pool, "rs/copy", &full, &resumable())
            .unwrap_err()
            .to_string();
        assert!(error.contains("partial receive"), "{error}");
        assert_eq!(
            receive_bytes(&pool, "rs/copy", &pending, &ReceiveOptions::default()).unwrap(),
            ["rs/copy@a"]
        );
        assert_eq!(
            snapshot_tree(&pool, "rs/copy@a"),
            snapshot_tree(&pool, "rs/src@a")
        );
        assert!(!pool.is_inconsistent("rs/copy").unwrap());
        assert_eq!(resume_token(&pool, "rs/copy").unwrap(), None);
        assert_eq!(pool.receive_resume_state("rs/copy").unwrap(), None);
        pool.destroy_dataset("rs/copy", true).unwrap();
    }
    assert_clean(&pool);
}

#[test]
fn a_cut_incremental_stream_resumes_in_the_hidden_clone() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ri", single(dir.path(), "ri0"), tiny());
    source(&pool, "ri");
    let full = stream(&pool, "ri/src@a", &SendOptions::default());
    receive_bytes(&pool, "ri/copy", &full, &ReceiveOptions::default()).unwrap();
    pool.set_property("ri/copy", "atime", Some("off")).unwrap();
    let before = tree(&pool.open_file_system("ri/copy").unwrap());
    let incremental = stream(
        &pool,
        "ri/src@b",
        &SendOptions {
            from: Some("ri/src@a".into()),
            ..SendOptions::default()
        },
    );
    let cut = incremental.len() / 2;
    assert!(receive_bytes(&pool, "ri/copy", &incremental[..cut], &resumable()).is_err());
    assert!(pool.has_dataset("ri/copy/%recv"));
    assert_eq!(tree(&pool.open_file_system("ri/copy").unwrap()), before);
    // It survives export and import (a partial receive with a position is not destroyed).
    pool.export().unwrap();
    let pool = import(dir.path(), "ri", tiny());
    assert!(pool.has_dataset("ri/copy/%recv"));
    let resumed = resumed_stream(&pool, "ri/copy");
    assert!(resumed.len() < incremental.len());
    // A resumed stream of another position is refused, and changes nothing.
    let token = resume_token(&pool, "ri/copy").unwrap().unwrap();
    let (to, mut options) = resume_send_options(&pool, &token).unwrap();
    options.resume_at = options
        .resume_at
        .map(|(object, offset)| (object + 1, offset));
    let elsewhere = stream(&pool, &to, &options);
    let error = receive_bytes(&pool, "ri/copy", &elsewhere, &ReceiveOptions::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("stopped at object"), "{error}");
    assert_eq!(
        receive_bytes(&pool, "ri/copy", &resumed, &ReceiveOptions::default()).unwrap(),
        ["ri/copy@b"]
    );
    assert_eq!(
        tree(&pool.open_file_system("ri/copy").unwrap()),
        snapshot_tree(&pool, "ri/src@b")
    );
    assert!(!pool.has_dataset("ri/copy/%recv"));
    assert_eq!(resume_token(&pool, "ri/copy").unwrap(), None);
    assert_clean(&pool);
}

#[test]
fn abort_discards_a_partial_receive_and_bad_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "ra", single(dir.path(), "ra0"), tiny());
    source(&pool, "ra");
    let full = stream(&pool, "ra/src@a", &SendOptions::default());
    assert!(abort_receive(&pool, "ra/copy").is_err(), "nothing to abort");
    assert!(receive_bytes(&pool, "ra/copy", &full[..full.len() / 3], &resumable()).is_err());
    let token = resume_token(&pool, "ra/copy").unwrap().unwrap();
    let mut damaged = token.clone().into_bytes();
    damaged[5] = if damaged[5] == b'a' { b'b' } else { b'a' };
    let error = resume_send_options(&pool, std::str::from_utf8(&damaged).unwrap())
        .unwrap_err()
        .to_string();
    assert!(error.contains("resume token"), "{error}");
    assert_eq!(abort_receive(&pool, "ra/copy").unwrap(), "ra/copy");
    assert!(!pool.has_dataset("ra/copy"));
    // Without -s, a cut receive keeps nothing.
    assert!(receive_bytes(
        &pool,
        "ra/copy",
        &full[..full.len() / 3],
        &ReceiveOptions::default()
    )
    .is_err());
    assert!(!pool.has_dataset("ra/copy"));
    // The token names a snapshot that is gone: a clear error.
    receive_bytes(&pool, "ra/copy", &full[..full.len() / 2], &resumable()).unwrap_err();
    let token = resume_token(&pool, "ra/copy").unwrap().unwrap();
    pool.destroy_snapshots("ra/src@a", false).unwrap();
    let error = resume_send_options(&pool, &token).unwrap_err().to_string();
    assert!(error.contains("the snapshot the token resumes"), "{error}");
    assert_clean(&pool);
}

const ROUNDS: usize = 10;
const CHILD_ENV: &str = "TARN_RESUME_CRASH_CHILD_DIR";

fn full_stream_file(dir: &Path) -> PathBuf {
    dir.join("full.stream")
}

fn halfway_marker(dir: &Path) -> PathBuf {
    dir.join("halfway")
}

/// A stream read in 64 KiB pieces, slowly after its middle (where it leaves a marker): the
/// parent kills the child while a receive is part-way, whatever the machine's load.
struct MarkedStream {
    bytes: Vec<u8>,
    at: usize,
    marker: PathBuf,
}

impl std::io::Read for MarkedStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let half = self.bytes.len() / 2;
        if self.at >= half {
            if !self.marker.exists() {
                std::fs::write(&self.marker, b"")?;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let length = buf.len().min(64 << 10).min(self.bytes.len() - self.at);
        buf[..length].copy_from_slice(&self.bytes[self.at..self.at + length]);
        self.at += length;
        Ok(length)
    }
}

/// The child: receive the full stream resumably, resuming what an earlier round left, and
/// start again once it is whole.
fn child_main(dir: PathBuf) {
    let pool = import(&dir, "rk", tiny());
    // Txgs every few milliseconds, as a long receive sees them every few seconds: positions
    // reach disk while a stream is being received.
    let pool = std::sync::Arc::new(pool);
    let syncing = pool.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(15));
        let _ = syncing.sync();
    });
    loop {
        let bytes = if pool.has_dataset("rk/copy") && pool.is_inconsistent("rk/copy").unwrap() {
            resumed_stream(&pool, "rk/copy")
        } else {
            if pool.has_dataset("rk/copy") {
                pool.destroy_dataset("rk/copy", true).unwrap();
            }
            std::fs::read(full_stream_file(&dir)).unwrap()
        };
        let mut input = MarkedStream {
            bytes,
            at: 0,
            marker: halfway_marker(&dir),
        };
        receive(&pool, "rk/copy", &mut input, &resumable()).unwrap();
    }
}

#[test]
fn resume_child_entry() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

#[test]
fn kill9_during_resumable_receives_then_resume_after_import() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    {
        let pool = create_pool(&dir_path, "rk", single(&dir_path, "v.img"), tiny());
        source(&pool, "rk");
        let full = stream(&pool, "rk/src@a", &SendOptions::default());
        std::fs::write(full_stream_file(&dir_path), full).unwrap();
        pool.export().unwrap();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let mut resumed = 0;
    for round in 0..ROUNDS {
        let _ = std::fs::remove_file(halfway_marker(&dir_path));
        let child = spawn_child(
            module_path!(),
            "resume_child_entry",
            &[(CHILD_ENV, dir_path.display().to_string())],
        );
        wait_for_file(&halfway_marker(&dir_path), Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..300)));
        kill_child(child);
        let pool = import(&dir_path, "rk", tiny());
        assert_clean(&pool);
        if pool.has_dataset("rk/copy") && pool.is_inconsistent("rk/copy").unwrap() {
            // Every third partial receive is finished here, the others by the next child.
            if round % 3 == 0 {
                let bytes = resumed_stream(&pool, "rk/copy");
                receive_bytes(&pool, "rk/copy", &bytes, &resumable())
                    .unwrap_or_else(|error| panic!("round {round}: resume: {error}"));
            }
            resumed += 1;
        }
        if pool.snapshot_info("rk/copy@a").is_ok() {
            assert_eq!(
                snapshot_tree(&pool, "rk/copy@a"),
                snapshot_tree(&pool, "rk/src@a"),
                "round {round}"
            );
        }
        assert_clean(&pool);
        pool.export().unwrap();
    }
    eprintln!("{resumed} of {ROUNDS} kills left a partial receive that resumed");
    assert!(
        resumed >= ROUNDS / 2,
        "only {resumed} of {ROUNDS} kills after a receive's middle left a partial receive"
    );
}

/// A partial receive is continued only by the stream its token names: another snapshot's full
/// stream, an incremental stream, or the right stream cut at a different place and sent from
/// the start (not from the token's position) is refused, the partial receive stays resumable,
/// and the stream `send -t` makes from the token still completes it.
#[test]
fn a_partial_receive_takes_only_the_stream_its_token_names() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_pool(dir.path(), "rt", single(dir.path(), "rt0"), tiny());
    source(&pool, "rt");
    let full_a = stream(&pool, "rt/src@a", &SendOptions::default());
    let full_b = stream(&pool, "rt/src@b", &SendOptions::default());
    let incremental = stream(
        &pool,
        "rt/src@b",
        &SendOptions {
            from: Some("rt/src@a".into()),
            ..SendOptions::default()
        },
    );
    assert!(receive_bytes(&pool, "rt/copy", &full_a[..full_a.len() / 2], &resumable()).is_err());
    let token = resume_token(&pool, "rt/copy").unwrap().expect("a token");
    for (what, wrong) in [
        ("another snapshot's full stream", &full_b),
        ("an incremental stream", &incremental),
        ("the same stream from its start", &full_a),
    ] {
        let error = receive_bytes(&pool, "rt/copy", wrong, &resumable());
        assert!(error.is_err(), "{what} was taken by a partial receive");
        assert_eq!(
            resume_token(&pool, "rt/copy").unwrap().as_deref(),
            Some(token.as_str()),
            "{what} changed the partial receive"
        );
    }
    let resumed = resumed_stream(&pool, "rt/copy");
    receive_bytes(&pool, "rt/copy", &resumed, &resumable()).expect("the token's stream");
    assert_eq!(
        tree(&pool.open_file_system("rt/copy").unwrap()),
        snapshot_tree(&pool, "rt/src@a")
    );
    assert_clean(&pool);
    pool.export().unwrap();
}
