//! Profiling harness for receive (not a benchmark of record: see `tarn bench receive`).
//!
//! `recv_profile DIR SIZE_MB RECORDSIZE MODE REPEATS` writes SIZE_MB of text-like files
//! (recordsize RECORDSIZE, lz4) to a pool on DIR/vdev, sends them to a file (`-c` if MODE is
//! `c`), and receives the file REPEATS times (MODE `single`: one record per transaction),
//! printing blocks/s and CPU microseconds per block. If `PERF_CTL` names a fifo (perf record
//! `--control fifo:PATH -D -1`), the receives alone are recorded.

use std::io::Write;
use std::time::Instant;

use tarn::pool::{CreateOptions, Pool, VdevSpec};
use tarn::send::{ReceiveOptions, SendOptions};
use tarn::tunables::Tunables;

fn pseudo_random(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(length);
    out
}

fn text(length: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "the",
        "storage",
        "pool",
        "block",
        "pointer",
        "checksum",
        "snapshot",
        "clone",
        "dataset",
        "metaslab",
        "allocation",
        "transaction",
        "group",
        "commit",
        "of",
        "and",
        "copy",
        "on",
        "write",
        "file",
        "system",
        "record",
        "receive",
        "stream",
        "send",
        "incremental",
        "bookmark",
        "spill",
        "dnode",
        "indirect",
        "level",
        "birth",
    ];
    let noise = pseudo_random(length / 2 + 16, seed);
    let mut out = Vec::with_capacity(length + 16);
    let mut index = 0;
    while out.len() < length {
        let pick = noise[index % noise.len()];
        index += 1;
        out.extend_from_slice(WORDS[(pick % 32) as usize].as_bytes());
        if pick >= 224 {
            out.extend_from_slice(format!(" {}", noise[(index * 7) % noise.len()]).as_bytes());
        }
        out.push(if pick.is_multiple_of(13) { b'\n' } else { b' ' });
    }
    out.truncate(length);
    out
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn perf(command: &str) {
    if let Ok(path) = std::env::var("PERF_CTL") {
        let mut fifo = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        fifo.write_all(command.as_bytes()).unwrap();
        if let Ok(ack) = std::env::var("PERF_ACK") {
            let mut buf = [0u8; 5];
            let _ = std::io::Read::read(&mut std::fs::File::open(ack).unwrap(), &mut buf);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let size: u64 = args[2].parse::<u64>().unwrap() << 20;
    let recordsize: u64 = args[3].parse().unwrap();
    let mode = args[4].as_str();
    let repeats: usize = args[5].parse().unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let vdev = dir.join("vdev");
    let stream = dir.join("stream");
    let _ = std::fs::remove_file(&vdev);
    let pool = Pool::create(CreateOptions {
        name: "prof".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Leaf(vdev.clone())],
        create_size: Some(size * 4 + (2 << 30)),
        force: true,
        tunables: Tunables::from_env().unwrap(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })
    .unwrap();
    pool.create_dataset(
        "prof/src",
        &[
            ("recordsize".into(), recordsize.to_string()),
            ("compression".into(), "lz4".into()),
        ],
        false,
    )
    .unwrap();
    let fs = pool.open_file_system("prof/src").unwrap();
    for index in 0..16u64 {
        let ino = fs
            .create(fs.root(), format!("f{index}").as_bytes(), 0o644, 0, 0)
            .unwrap()
            .ino;
        let chunk = text(1 << 20, index + 1);
        let length = size / 16;
        let mut written = 0;
        while written < length {
            let take = (length - written).min(chunk.len() as u64) as usize;
            fs.write(ino, written, &chunk[..take]).unwrap();
            written += take as u64;
        }
    }
    drop(fs);
    pool.create_snapshots(&["prof/src@s".to_string()], false)
        .unwrap();
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&stream).unwrap());
        tarn::send::send(
            &pool,
            "prof/src@s",
            &SendOptions {
                compressed: mode == "c",
                ..SendOptions::default()
            },
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        out.flush().unwrap();
    }
    pool.sync().unwrap();
    for repeat in 0..repeats {
        let target = format!("prof/r{repeat}");
        let mut input =
            std::io::BufReader::with_capacity(4 << 20, std::fs::File::open(&stream).unwrap());
        perf("enable\n");
        let cpu = cpu_seconds();
        let started = Instant::now();
        let report = tarn::send::receive(
            &pool,
            &target,
            &mut input,
            &ReceiveOptions {
                batch_bytes: Some(if mode == "single" { 0 } else { 1 << 20 }),
                ..ReceiveOptions::default()
            },
        )
        .unwrap();
        pool.sync().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu;
        perf("disable\n");
        println!(
            "{mode} {repeat}: {} blocks, {:.0} blocks/s, {:.1} CPU us/block, {} write txs",
            report.blocks,
            report.blocks as f64 / seconds,
            cpu * 1e6 / report.blocks as f64,
            report.write_transactions
        );
        pool.destroy_dataset(&target, true).unwrap();
        pool.sync().unwrap();
    }
    pool.destroy().unwrap();
    let _ = std::fs::remove_file(&vdev);
    let _ = std::fs::remove_file(&stream);
}
