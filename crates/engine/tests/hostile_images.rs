//! Pool images as hostile input: bits flipped at random in the sectors of an exported pool
//! that hold something (labels, the uberblock ring, metadata and data), a quarter of them in
//! the labels. `Pool::import` and `check` of each image must import (repairing from copies where
//! they can) or refuse with an error; never panic, never hang, and never write to an image
//! they refused (the image is byte for byte what it was).
//!
//! Each image is opened in a child process (this test binary run again), so that a panic on
//! any thread or a hang is seen from outside: the parent gives the child a time limit and reads
//! its exit status. `TARN_HOSTILE_IMAGE_ROUNDS` runs more rounds (CI runs a few).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tarn::check::check_pool;
use tarn::pool::{ImportOptions, Pool};
use tarn::vdev::label::VDEV_LABEL_START_SIZE;

use common::*;

const CHILD_ENV: &str = "TARN_HOSTILE_IMAGE_DIR";
const ROUNDS_DEFAULT: u64 = 12;
const CHILD_PATIENCE: Duration = Duration::from_secs(120);

/// The child: import the image in the directory, check it, export it. Exit 0 when it imported
/// (whatever check said), 3 when import refused; a panic exits otherwise.
fn child_main(dir: PathBuf) {
    match Pool::import("hostile", ImportOptions::new(vec![dir.clone()], tiny())) {
        Ok((pool, _)) => {
            match check_pool(&pool, true) {
                Ok(report) => eprintln!("imported; check clean: {}", report.is_clean()),
                Err(error) => eprintln!("imported; check refused: {error}"),
            }
            if let Err(error) = pool.export() {
                eprintln!("export: {error}");
            }
            std::process::exit(0);
        }
        Err(error) => {
            eprintln!("refused: {error}");
            std::process::exit(3);
        }
    }
}

#[test]
fn hostile_image_child_entry() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child_main(PathBuf::from(dir));
    }
}

/// A pool worth damaging: datasets, directories, files of several sizes, a snapshot and a
/// clone, on one disk; exported. Returns the image's path.
fn make_image(dir: &Path) -> PathBuf {
    let pool = create_pool(dir, "hostile", single(dir, "d0"), tiny());
    pool.create_dataset("hostile/fs", &[], false).unwrap();
    let fs = pool.open_file_system("hostile/fs").unwrap();
    let sub = fs.mkdir(fs.root(), b"sub", 0o755, 0, 0).unwrap().ino;
    for index in 0..12u64 {
        let file = fs
            .create(sub, format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        fs.write(file, 0, &pattern(index, 3000 + index as usize * 7000))
            .unwrap();
        fs.setxattr(file, b"user.x", b"value", 0).unwrap();
    }
    drop(fs);
    pool.create_snapshots(&["hostile/fs@s".to_string()], false)
        .unwrap();
    pool.create_clone("hostile/fs@s", "hostile/clone", &[])
        .unwrap();
    pool.sync().unwrap();
    pool.export().unwrap();
    dir.join("d0")
}

/// Flip `flips` bits of `image`, each in a 512-byte sector that holds something (`used`, the
/// sectors with a nonzero byte: labels, uberblocks, metadata and data), so that the damage
/// lands on structures rather than on empty space; a quarter of them in the labels' sectors.
fn damage(image: &[u8], rng: &mut rand::rngs::StdRng, flips: usize, used: &[usize]) -> Vec<u8> {
    let mut damaged = image.to_vec();
    let labels: Vec<usize> = used
        .iter()
        .copied()
        .filter(|&sector| {
            let offset = (sector * 512) as u64;
            offset < VDEV_LABEL_START_SIZE || offset >= image.len() as u64 - (512 << 10)
        })
        .collect();
    for _ in 0..flips {
        let from = if rng.gen_range(0..4) == 0 && !labels.is_empty() {
            &labels
        } else {
            used
        };
        let sector = from[rng.gen_range(0..from.len())];
        damaged[sector * 512 + rng.gen_range(0..512)] ^= 1 << rng.gen_range(0..8);
    }
    damaged
}

#[test]
fn damaged_images_import_or_are_refused_never_panic_or_hang() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let rounds: u64 = std::env::var("TARN_HOSTILE_IMAGE_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(ROUNDS_DEFAULT);
    let seed: u64 = std::env::var("TARN_HOSTILE_IMAGE_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("seed {seed} (TARN_HOSTILE_IMAGE_SEED repeats it), {rounds} rounds");
    let template_dir = tempfile::tempdir().unwrap();
    let template = std::fs::read(make_image(template_dir.path())).unwrap();
    let used: Vec<usize> = template
        .chunks(512)
        .enumerate()
        .filter(|(_, sector)| sector.iter().any(|&byte| byte != 0))
        .map(|(index, _)| index)
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut imported, mut refused) = (0, 0);
    for round in 0..rounds {
        let flips = 1 << rng.gen_range(0..10);
        let damaged = damage(&template, &mut rng, flips, &used);
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("d0");
        std::fs::write(&image, &damaged).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg(test_name(module_path!(), "hostile_image_child_entry"))
            .args(["--exact", "--nocapture"])
            .env(CHILD_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > CHILD_PATIENCE {
                let _ = child.kill();
                panic!("round {round} (seed {seed}, {flips} flips): the import or check hangs");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(
            !stderr.contains("panicked"),
            "round {round} (seed {seed}, {flips} flips): a panic:\n{stderr}"
        );
        match status.code() {
            Some(0) => imported += 1,
            Some(3) => {
                refused += 1;
                let after = std::fs::read(&image).unwrap();
                if let Some(at) = (0..after.len()).find(|&at| after[at] != damaged[at]) {
                    panic!(
                        "round {round} (seed {seed}, {flips} flips): a refused image was written \
                         to at byte {at} (sector {}):\n{stderr}",
                        at / 512
                    );
                }
            }
            other => panic!(
                "round {round} (seed {seed}, {flips} flips): the child ended with {other:?}:\n{stderr}"
            ),
        }
    }
    eprintln!("{imported} imported, {refused} refused");
}
