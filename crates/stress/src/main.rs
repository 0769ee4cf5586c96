//! tarn-stress: randomized stress of the tarn engine, in the spirit of OpenZFS's ztest and
//! zloop.
//!
//! ```text
//! tarn-stress --duration SECONDS --dir DIR [--seed N] [--threads T]
//! tarn-stress --replay SEED --duration SECONDS --dir DIR
//! tarn-stress --loop --duration SECONDS --dir DIR [--seed-duration SECONDS] [--threads T]
//! any form: [--exclude OP,OP...]   leave operations out, to narrow a failure down
//! tarn-stress --mount [--loop] --duration SECONDS --dir DIR [--seed N] [--threads T] [--tarn PATH]
//! ```
//! The first form runs one seed (a random one, printed, unless `--seed` names it) for the
//! given time against a pool on sparse files in DIR, created there or re-imported: a parent
//! process starts children that run `T` threads of random operations (see [`tarn_stress::ops`]) on the
//! engine directly, in-process, and SIGKILL themselves at a moment the seed chooses (in some
//! rounds, as the seed chooses, after cutting the power of the pool's devices); after
//! each, the parent re-imports the pool, runs `check` and verifies every block and every
//! fsync's promise (see [`tarn_stress::oracle`]). `--replay` runs a seed on one thread, its children dying
//! after a number of operations rather than a time, so the seed fixes the whole sequence of
//! operations. `--loop` runs fresh seeds, each in its own directory under DIR, until the time
//! is spent. A failure keeps the pool images, the journal, the log and the seed under
//! `DIR/failures/SEED-rROUND/`; the program prints a summary line (operations, kills, power
//! cuts, imports, failures, injected faults, near-full phases) and exits 1 on any failure, 2
//! on bad usage or a run that could not start.
//!
//! The library ([`tarn_stress`]) holds the parts; this file only parses the command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tarn_stress::{child, mount, ops, runner};

#[derive(Parser, Debug)]
#[command(
    name = "tarn-stress",
    about = "Randomized stress of the tarn engine with self-kill, re-import and verification (ztest-like)"
)]
struct Args {
    /// Seconds to run (for --loop: in all).
    #[arg(long, required_unless_present_any = ["child_round", "operations"])]
    duration: Option<u64>,
    /// Run until the children have done this many operations together, instead of for
    /// --duration: the same work however loaded the machine is (the tests' form).
    #[arg(long, value_name = "COUNT", conflicts_with_all = ["duration", "loop_mode", "mount"])]
    operations: Option<u64>,
    /// Directory for the pool's sparse vdev files, the journal, logs and kept failures.
    #[arg(long)]
    dir: PathBuf,
    /// The seed (random and printed if not given).
    #[arg(long, conflicts_with_all = ["replay", "loop_mode"])]
    seed: Option<u64>,
    /// Run SEED on one thread, deterministically.
    #[arg(long, value_name = "SEED", conflicts_with = "loop_mode")]
    replay: Option<u64>,
    /// Run fresh seeds until the time is spent and print a summary.
    #[arg(long = "loop")]
    loop_mode: bool,
    /// With --loop: seconds given to each seed.
    #[arg(long, default_value_t = 60, requires = "loop_mode")]
    seed_duration: u64,
    /// Leave these operations out (names from the table in ops.rs, comma-separated): a
    /// diagnostic, to narrow a failure down to the operations it needs.
    #[arg(long, value_name = "OP,...")]
    exclude: Option<String>,
    /// Drive the file operations through a FUSE mount of the tarn daemon, which is the
    /// process killed (see tarn_stress::mount); with --loop, fresh seeds of that.
    #[arg(long, conflicts_with_all = ["replay", "exclude"])]
    mount: bool,
    /// With --mount: the tarn binary whose daemon serves the mount (default: the one beside
    /// this program, else tarn on the PATH).
    #[arg(long, value_name = "PATH", requires = "mount")]
    tarn: Option<PathBuf>,
    /// Worker threads in each child.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// Internal: run as the child of this round.
    #[arg(long, hide = true)]
    child_round: Option<u64>,
    #[arg(long, hide = true)]
    child_run_ms: Option<u64>,
    #[arg(long, hide = true)]
    child_kill_ms: Option<u64>,
    #[arg(long, hide = true)]
    child_kill_ops: Option<u64>,
    #[arg(long, hide = true)]
    child_ashift: Option<u32>,
    /// Internal: the scan pacing the seed chose (`scan_blocks_per_txg_max`).
    #[arg(long, hide = true)]
    child_scan_blocks: Option<u64>,
    /// Internal: the seed's `livelist_min_percent_shared`.
    #[arg(long, hide = true)]
    child_livelist_share: Option<u64>,
    /// Internal: the child dies by a power cut of its devices, with this seed.
    #[arg(long, hide = true)]
    child_power_cut: Option<u64>,
}

/// Log records to stderr, warnings and worse unless `RUST_LOG` says otherwise (env_logger's
/// syntax), without timestamps or colour when stderr is not a terminal.
fn init_logging() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    if !std::io::stderr().is_terminal() {
        builder.format_timestamp(None);
    }
    builder.target(env_logger::Target::Stderr).init();
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging();
    if let Some(round) = args.child_round {
        run_child(&args, round);
    }
    let excluded = match excluded_operations(&args) {
        Ok(excluded) => excluded,
        Err(why) => {
            eprintln!("tarn-stress: {why}");
            return ExitCode::from(2);
        }
    };
    let duration = Duration::from_secs(args.duration.unwrap_or(0));
    let threads = args.threads as usize;
    let tarn_binary = args.tarn.clone().unwrap_or_else(mount::default_tarn_binary);
    let mount_options =
        |seed: u64, dir: &std::path::Path, duration: Duration| mount::MountOptions {
            dir: dir.to_path_buf(),
            seed,
            threads,
            duration,
            tarn: tarn_binary.clone(),
            failures_dir: args.dir.clone(),
        };
    let result = if args.mount && args.loop_mode {
        runner::loop_seeds(
            &args.dir,
            duration,
            Duration::from_secs(args.seed_duration.max(1)),
            |seed, dir, duration| mount::run_mount(&mount_options(seed, dir, duration)),
        )
    } else if args.mount {
        let seed = args.seed.unwrap_or_else(|| rand::random::<u64>() >> 1);
        println!("tarn-stress: seed {seed} (through a mount)");
        mount::run_mount(&mount_options(seed, &args.dir, duration))
    } else if args.loop_mode {
        runner::run_loop(
            &args.dir,
            duration,
            Duration::from_secs(args.seed_duration.max(1)),
            threads,
            &excluded,
        )
    } else {
        let seed = args
            .replay
            .or(args.seed)
            .unwrap_or_else(|| rand::random::<u64>() >> 1);
        println!(
            "tarn-stress: seed {seed}{}",
            if args.replay.is_some() {
                " (replay, one thread)"
            } else {
                ""
            }
        );
        runner::run(&runner::RunOptions {
            dir: args.dir.clone(),
            seed,
            threads,
            duration,
            operations: args.operations,
            replay: args.replay.is_some(),
            failures_dir: args.dir.clone(),
            excluded,
        })
    };
    match result {
        Ok(summary) => {
            println!("tarn-stress: {}", summary.line());
            for failure in &summary.failures {
                println!("tarn-stress: FAILURE {failure}");
            }
            if summary.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(why) => {
            eprintln!("tarn-stress: {why}");
            ExitCode::from(2)
        }
    }
}

/// The operations `--exclude` names; an error if it names an unknown one or leaves none.
fn excluded_operations(args: &Args) -> Result<Vec<ops::Op>, String> {
    let excluded = ops::parse_op_list(args.exclude.as_deref().unwrap_or(""))?;
    if !(ops::OPERATIONS.iter()).any(|spec| spec.implemented && !excluded.contains(&spec.op)) {
        return Err("--exclude leaves no operation to run".into());
    }
    Ok(excluded)
}

/// The hidden child form: every internal flag must be there (the parent gives them all).
fn run_child(args: &Args, round: u64) -> ! {
    let missing = |what: &str| -> ! {
        eprintln!("tarn-stress: --child-round needs {what}");
        std::process::exit(2)
    };
    let death = match (args.child_kill_ms, args.child_kill_ops) {
        (Some(ms), None) => child::Death::AfterTime(Duration::from_millis(ms)),
        (None, Some(count)) => child::Death::AfterOperations(count),
        _ => missing("exactly one of --child-kill-ms and --child-kill-ops"),
    };
    let plan = child::ChildPlan {
        dir: args.dir.clone(),
        power_cut: args.child_power_cut,
        pool_name: runner::POOL_NAME.into(),
        round,
        seed: args.seed.unwrap_or_else(|| missing("--seed")),
        threads: args.threads as usize,
        run_for: Duration::from_millis(
            args.child_run_ms
                .unwrap_or_else(|| missing("--child-run-ms")),
        ),
        death,
        tunables: runner::tunables(
            args.child_ashift
                .unwrap_or_else(|| missing("--child-ashift")),
            args.child_scan_blocks
                .unwrap_or_else(|| missing("--child-scan-blocks")),
            args.child_livelist_share
                .unwrap_or_else(|| missing("--child-livelist-share")),
        ),
        excluded: excluded_operations(args).unwrap_or_else(|why| {
            eprintln!("tarn-stress: {why}");
            std::process::exit(2)
        }),
    };
    child::child_main(plan)
}
