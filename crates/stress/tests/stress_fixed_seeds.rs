//! The stress tool end to end, as CI runs it: a fixed set of seeds (threaded, and one replayed
//! on one thread) must run with zero inconsistencies, through kills, power cuts, imports and
//! verifications, with faults injected on one side of the mirror, copies damaged on one side
//! and phases near full, and the power cuts, faults, damage and phases they claim must have
//! happened; sends into the second pool must run and verify, of every kind; and the oracle
//! must be able to fail: a pool changed behind the tool's back (a block punched out of a file
//! whose fsync the journal recorded, a block copied to another offset, a received snapshot
//! that is not what was sent) must be reported, kept under `failures/`, and end the run with
//! status 1.

use std::path::Path;
use std::process::{Command, Output};

use tarn::pool::{ImportOptions, Pool};
use tarn::tunables::Tunables;
use tarn_stress::child::FILLER;
use tarn_stress::journal::{journal_path, JournalWriter, Promises};
use tarn_stress::ops::OPERATIONS;
use tarn_stress::oracle::verify_tree;
use tarn_stress::runner::POOL_NAME;
use tarn_stress::tag::TAG_BLOCK_SIZE;

fn stress(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_tarn-stress"))
        .args(args)
        .output()
        .expect("run tarn-stress");
    eprintln!(
        "tarn-stress {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The number before `word` in the summary line (`... 5 kills, ...`).
fn count_before(stdout: &str, word: &str) -> u64 {
    let summary = stdout
        .lines()
        .find(|line| line.contains(" operations ("))
        .expect("a summary line");
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = words
        .iter()
        .position(|candidate| candidate.trim_end_matches([',', ';']) == word)
        .unwrap_or_else(|| panic!("no {word:?} in {summary:?}"));
    words[at - 1]
        .trim_start_matches('(')
        .parse()
        .expect("a count")
}

fn assert_clean_run(output: &Output) {
    assert_clean_run_of(output, 1);
}

/// [`assert_clean_run`] with a floor of `operations_floor` operations.
fn assert_clean_run_of(output: &Output, operations_floor: u64) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the run failed: {stdout}");
    assert_eq!(count_before(&stdout, "failures"), 0);
    // Runs are counted in operations (`--operations`), the same work however loaded the
    // machine is (a run of 4 s did 25 operations in a loaded CI, several hundred on an idle
    // machine). Rounds ended and files verified are floors of the tests' sums over their runs
    // (`rounds_and_files`), which run more seeds while those fall short.
    assert!(
        count_before(&stdout, "operations") >= operations_floor,
        "too few operations: {stdout}"
    );
}

/// Rounds a run ended (kills, power cuts, clean ends) and the files it verified.
fn rounds_and_files(output: &Output) -> (u64, u64) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    (
        count_before(&stdout, "kills")
            + count_before(&stdout, "power")
            + count_before(&stdout, "clean"),
        count_before(&stdout, "files"),
    )
}

#[test]
fn fixed_seeds_run_without_inconsistency() {
    let dir = tempfile::tempdir().unwrap();
    let mut kills = 0;
    let mut power_cuts = 0;
    let mut faults = 0;
    let mut fault_hits = 0;
    let mut near_full_phases = 0;
    let mut damaged = 0;
    let (mut rounds, mut files) = (0, 0);
    // Seeds 1-3 always; more while what they did falls short of the floors below (what a seed
    // draws depends on its threads' interleaving, so a floor can still fall short).
    for seed in 1..=12 {
        let floors_met = kills + power_cuts >= 3
            && power_cuts >= 1
            && faults >= 1
            && fault_hits >= 1
            && damaged >= 1
            && rounds >= 3
            && files >= 1;
        if seed > 3 && floors_met {
            break;
        }
        let seed = seed.to_string();
        let seed = seed.as_str();
        let run_dir = dir.path().join(format!("seed-{seed}"));
        let output = stress(&[
            "--operations",
            "150",
            "--dir",
            run_dir.to_str().unwrap(),
            "--seed",
            seed,
            "--threads",
            "2",
        ]);
        assert_clean_run(&output);
        let (ended, verified) = rounds_and_files(&output);
        rounds += ended;
        files += verified;
        let stdout = String::from_utf8_lossy(&output.stdout);
        kills += count_before(&stdout, "kills");
        power_cuts += count_before(&stdout, "power");
        faults += count_before(&stdout, "faults");
        fault_hits += count_before(&stdout, "I/Os");
        near_full_phases += count_before(&stdout, "near-full");
        damaged += count_before(&stdout, "damaged");
    }
    assert!(files >= 1, "the fixed seeds verified no file");
    assert!(
        kills + power_cuts >= 3,
        "the fixed seeds killed only {kills} children and cut the power of {power_cuts}"
    );
    // Each verified as any round is: every promise in force held after the cut.
    assert!(power_cuts >= 1, "no fixed seed cut the power");
    // Each injection was cleared, healed and scrubbed clean, and the reads through it
    // verified, or the run would have failed.
    assert!(
        faults >= 1 && fault_hits >= 1,
        "the fixed seeds injected {faults} faults, hitting {fault_hits} I/Os"
    );
    // Each damage was settled (two scrubs, the second finding nothing) or repaired by the
    // next child, or the run would have failed.
    assert!(damaged >= 1, "the fixed seeds damaged no copy");
    // Replay 14 draws `NearFull` among its first operations. Filling the pool, RAID-Z vdev
    // and all, takes seconds (5 on an idle machine, 8 beside this file's other tests, more
    // under a loaded CI), so the floor here is one operation: the phase is what this run is
    // for (a replay of 8 s once did 9 operations and failed a floor of 10).
    let replay_dir = dir.path().join("replay");
    let output = stress(&[
        "--replay",
        "14",
        "--duration",
        "12",
        "--dir",
        replay_dir.to_str().unwrap(),
    ]);
    assert_clean_run_of(&output, 1);
    near_full_phases += count_before(&String::from_utf8_lossy(&output.stdout), "near-full");
    assert!(
        near_full_phases >= 1,
        "no fixed seed ran the pool near full"
    );
}

/// What a replication run keeps of the table: what makes data and snapshots, some of what
/// changes them under a send, and the sends, so that sends are a fair share of a short run
/// (with the whole table they are about one operation in a hundred).
const REPLICATION_MIX: &[&str] = &[
    "Overwrite",
    "SetXattr",
    "Snapshot",
    "DestroySnapshot",
    "Clone",
    "RenameFileSystem",
    "SendFull",
    "SendIncremental",
    "SendResumed",
];

/// The `--exclude` list that leaves only `kept`.
fn all_but(kept: &[&str]) -> String {
    let excluded: Vec<String> = OPERATIONS
        .iter()
        .filter(|spec| spec.implemented)
        .map(|spec| format!("{:?}", spec.op))
        .filter(|name| !kept.contains(&name.as_str()))
        .collect();
    excluded.join(",")
}

/// What a RAID-Z expansion run keeps of the table: data and snapshots, the expansion, and what
/// meets the expanded vdev afterwards (damage its scrub must repair, children offline, export
/// and import, rewinds, which a copy in progress refuses).
const RAIDZ_EXPAND_MIX: &[&str] = &[
    "Write",
    "Overwrite",
    "Unlink",
    "Fsync",
    "ReadVerify",
    "Snapshot",
    "DestroySnapshot",
    "RaidzExpand",
    "DamageRaidzChildren",
    "RaidzOfflineOnline",
    "ExportImport",
    "RewindImport",
];

/// The count of `outcome` in a run's summary (0 when it never happened).
fn outcome_count(stdout: &str, outcome: &str) -> u64 {
    let needle = format!("; {outcome}: ");
    stdout
        .lines()
        .find(|line| line.contains(" operations ("))
        .and_then(|summary| summary.split(&needle).nth(1))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

#[test]
fn raidz_expansions_run_beside_writes_damage_and_kills() {
    let dir = tempfile::tempdir().unwrap();
    let mut finished = 0;
    let mut runs = 0;
    for seed in 21..=30 {
        runs += 1;
        let seed = seed.to_string();
        let run_dir = dir.path().join(format!("run-{seed}"));
        let output = stress(&[
            "--operations",
            "80",
            "--dir",
            run_dir.to_str().unwrap(),
            "--seed",
            &seed,
            "--threads",
            "2",
            "--exclude",
            &all_but(RAIDZ_EXPAND_MIX),
        ]);
        assert_clean_run(&output);
        let stdout = String::from_utf8_lossy(&output.stdout);
        finished += outcome_count(&stdout, "raidz expansions finished");
        if finished >= 2 {
            break;
        }
    }
    assert!(
        finished >= 2,
        "{runs} runs finished {finished} raidz expansions"
    );
}

#[test]
fn sends_of_every_kind_run_and_a_received_snapshot_unlike_its_source_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Seeds are run until every kind of receive has ended and verified at least once (up to
    // twelve; what a seed draws depends on its threads' interleaving).
    let kinds = ["full", "incremental", "resumed", "received"];
    let mut counts = [0u64; 4];
    let mut last_run = None;
    let (mut runs, mut rounds, mut files) = (0, 0, 0);
    for seed in 7..=18 {
        runs += 1;
        let seed = seed.to_string();
        let seed = seed.as_str();
        let run_dir = dir.path().join(format!("run-{seed}"));
        let output = stress(&[
            "--operations",
            "100",
            "--dir",
            run_dir.to_str().unwrap(),
            "--seed",
            seed,
            "--exclude",
            &all_but(REPLICATION_MIX),
        ]);
        assert_clean_run(&output);
        let (ended, verified) = rounds_and_files(&output);
        rounds += ended;
        files += verified;
        let stdout = String::from_utf8_lossy(&output.stdout);
        for (count, kind) in counts.iter_mut().zip(kinds) {
            *count += count_before(&stdout, kind);
        }
        if count_before(&stdout, "received") > 0 {
            last_run = Some(run_dir);
        }
        if counts.iter().all(|&count| count > 0) && rounds >= 1 && files >= 1 {
            break;
        }
    }
    for (count, kind) in counts.iter().zip(kinds) {
        assert!(*count > 0, "none counted as {kind} in {runs} runs");
    }
    assert!(
        rounds >= 1 && files >= 1,
        "{runs} runs ended {rounds} rounds, verified {files} files"
    );
    let run_dir = last_run.expect("a run that left received snapshots");
    // The journal's digests are what the parent holds received snapshots to: changed, every
    // received snapshot is one its source never was.
    let journal = journal_path(&run_dir);
    let text = std::fs::read_to_string(&journal).unwrap();
    let changed: Vec<String> = text
        .lines()
        .map(
            |line| match line.split(' ').collect::<Vec<_>>().as_slice() {
                ["sent", guid, digest, name] => {
                    format!(
                        "sent {guid} {} {name}",
                        digest.chars().rev().collect::<String>()
                    )
                }
                _ => line.to_string(),
            },
        )
        .collect();
    std::fs::write(&journal, changed.join("\n") + "\n").unwrap();
    assert_run_fails_with(&run_dir, "was sent with digest");
}

/// A run that fsynced a file with data, tried over `seeds` (what a seed draws depends on its
/// threads' interleaving): its directory and one promise's dataset.
fn run_with_a_promise(dir: &Path, seeds: &[&str]) -> (std::path::PathBuf, String) {
    seeds
        .iter()
        .find_map(|seed| {
            let run_dir = dir.join(format!("run-{seed}"));
            assert_clean_run(&stress(&[
                "--operations",
                "40",
                "--dir",
                run_dir.to_str().unwrap(),
                "--seed",
                seed,
            ]));
            let mut promises = Promises::default();
            promises.catch_up(&journal_path(&run_dir)).unwrap();
            let dataset = promised_dataset(&promises)?;
            Some((run_dir, dataset))
        })
        .expect("no run fsynced a file")
}

/// A dataset holding a promised file, other than the filler of a near-full phase (whose
/// fsync is journaled too, but which [`import`] destroys, as the next child would).
fn promised_dataset(promises: &Promises) -> Option<String> {
    let filler = format!("{POOL_NAME}/{FILLER}");
    (promises.files.keys())
        .map(|(dataset, _)| dataset.clone())
        .find(|dataset| *dataset != filler)
}

/// Run again on `dir` (which re-imports and verifies first): must pass.
fn assert_run_passes(dir: &Path) {
    let output = stress(&[
        "--duration",
        "1",
        "--dir",
        dir.to_str().unwrap(),
        "--seed",
        "98",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_rename_cut_by_a_crash_keeps_its_promises_under_either_name() {
    let dir = tempfile::tempdir().unwrap();
    let (run_dir, dataset) = run_with_a_promise(dir.path(), &["13", "23", "33", "43"]);
    let journal = journal_path(&run_dir);
    let append = |line: String| {
        let mut text = std::fs::read_to_string(&journal).unwrap();
        text.push_str(&line);
        text.push('\n');
        std::fs::write(&journal, text).unwrap();
    };
    // The crash came after the engine's rename: the pool has the new name.
    let renamed = format!("{dataset}x");
    let pool = import(&run_dir);
    pool.rename_dataset(&dataset, &renamed).unwrap();
    pool.export().unwrap();
    append(format!("rename {dataset} {renamed}"));
    assert_run_passes(&run_dir);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains(&format!("renamed {renamed}\n")),
        "not settled"
    );
    // The crash came before it: the pool still has the old name. The run above may have
    // dropped every promise (a rewind import drops them all, a destroy those of its file
    // system): a file system without one is renamed and settled all the same. Never the
    // near-full filler, which the import destroys.
    let dataset = {
        let mut promises = Promises::default();
        promises.catch_up(&journal).unwrap();
        match promised_dataset(&promises) {
            Some(dataset) => dataset,
            None => {
                let filler = format!("{POOL_NAME}/{FILLER}");
                let pool = import(&run_dir);
                let name = (pool.datasets().into_iter())
                    .map(|info| info.name)
                    .find(|name| name != POOL_NAME && *name != filler)
                    .expect("a file system");
                pool.export().unwrap();
                name
            }
        }
    };
    append(format!("rename {dataset} {dataset}y"));
    assert_run_passes(&run_dir);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.contains(&format!("rename {dataset}y {dataset}\nrenamed {dataset}\n")),
        "not settled back"
    );
}

/// Import a run's pool to change it behind the tool's back. A filler that a child killed in
/// a near-full phase left (the next child would destroy it) is destroyed first, as the child
/// does, so that the change finds space.
fn import(dir: &Path) -> Pool {
    let options = ImportOptions::new(vec![dir.join("pool")], Tunables::tiny());
    let pool = Pool::import(POOL_NAME, options).expect("import").0;
    let filler = format!("{POOL_NAME}/{FILLER}");
    if pool.datasets().iter().any(|info| info.name == filler) {
        JournalWriter::open(&journal_path(dir))
            .unwrap()
            .drop_dataset(&filler);
        pool.destroy_datasets(&filler, true, false).unwrap();
    }
    pool
}

/// Run again on `dir` (which re-imports and verifies first): must fail saying `symptom`, and
/// keep the failure.
fn assert_run_fails_with(dir: &Path, symptom: &str) {
    let output = stress(&[
        "--duration",
        "1",
        "--dir",
        dir.to_str().unwrap(),
        "--seed",
        "99",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the run did not fail: {stdout}"
    );
    assert!(stdout.contains(symptom), "no {symptom:?} in {stdout}");
    let kept: Vec<_> = std::fs::read_dir(dir.join("failures"))
        .expect("a failures directory")
        .collect();
    assert_eq!(kept.len(), 1);
    let kept = kept[0].as_ref().unwrap().path();
    for name in ["failure.txt", "journal", "pool"] {
        assert!(
            kept.join(name).exists(),
            "{name} not kept in {}",
            kept.display()
        );
    }
}

#[test]
fn a_block_lost_after_its_fsync_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Seeds are tried until one run has fsynced a file with data (what a seed draws depends
    // on its threads' interleaving).
    let (run_dir, ((dataset, ino), block)) = ["11", "21", "31", "41", "51"]
        .into_iter()
        .find_map(|seed| {
            let run_dir = dir.path().join(format!("run-{seed}"));
            assert_clean_run(&stress(&[
                "--operations",
                "40",
                "--dir",
                run_dir.to_str().unwrap(),
                "--seed",
                seed,
            ]));
            let mut promises = Promises::default();
            promises.catch_up(&journal_path(&run_dir)).unwrap();
            // Not the near-full phase's filler: a child killed during that phase leaves it
            // with its fsync promise, and `import` below destroys it.
            let filler = format!("{POOL_NAME}/{FILLER}");
            let found = (promises.files.iter())
                .filter(|((dataset, _), _)| *dataset != filler)
                .find_map(|(key, promise)| {
                    let block = promise.generations.iter().position(|&g| g != 0)?;
                    Some((key.clone(), block))
                })?;
            Some((run_dir, found))
        })
        .expect("no run fsynced a file with data");
    let pool = import(&run_dir);
    let fs = pool.open_file_system(&dataset).unwrap();
    fs.fallocate(
        ino,
        (block * TAG_BLOCK_SIZE) as u64,
        TAG_BLOCK_SIZE as u64,
        tarn::fs::FALLOC_FL_PUNCH_HOLE | tarn::fs::FALLOC_FL_KEEP_SIZE,
    )
    .unwrap();
    drop(fs);
    pool.export().unwrap();
    assert_run_fails_with(&run_dir, "now a hole");
}

#[test]
fn a_block_copied_to_another_offset_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Seeds are tried until a run leaves a file with two tagged blocks (see the test above).
    let run_dir = ["12", "22", "32", "42", "52"]
        .into_iter()
        .find_map(|seed| {
            let run_dir = dir.path().join(format!("run-{seed}"));
            assert_clean_run(&stress(&[
                "--operations",
                "40",
                "--dir",
                run_dir.to_str().unwrap(),
                "--seed",
                seed,
            ]));
            let pool = import(&run_dir);
            let moved = copy_a_tagged_block_elsewhere(&pool);
            pool.export().unwrap();
            moved.then_some(run_dir)
        })
        .expect("no run left a file with two tagged blocks");
    assert_run_fails_with(&run_dir, "misplaced block");
}

/// Copy the first tagged block of some file with two tagged blocks over its second block;
/// whether there was such a file.
fn copy_a_tagged_block_elsewhere(pool: &Pool) -> bool {
    for info in pool.datasets() {
        if info.name == POOL_NAME {
            continue;
        }
        let fs = pool.open_file_system(&info.name).unwrap();
        let mut problems = Vec::new();
        let files = verify_tree(&fs, &info.name, u64::MAX >> 32, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let Some((&ino, _)) = files
            .verified
            .iter()
            .find(|(_, contents)| contents.generations.iter().filter(|&&g| g != 0).count() >= 2)
        else {
            continue;
        };
        let first = fs.read(ino, 0, TAG_BLOCK_SIZE).unwrap();
        if first.iter().all(|&byte| byte == 0) {
            continue;
        }
        fs.write(ino, TAG_BLOCK_SIZE as u64, &first).unwrap();
        return true;
    }
    false
}
