//! `tarn bench`: benchmarks that print tarn's figure beside a baseline from the same run.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use clap::Subcommand;
use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::object::ObjectProps;
use tarn::pool::{CreateOptions, Pool, VdevSpec};

use crate::format::parse_size;
use crate::CliFailure as Failure;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Engine sequential write of incompressible data (recordsize 1M, compression off), timed
    /// to the end of the final txg sync, beside fio (--bs=1M --direct=1 --end_fsync=1) on a file
    /// in the same directory.
    Seqwrite {
        /// Directory on the disk to measure.
        #[arg(long, default_value = "/var/tmp/tarn-bench")]
        dir: PathBuf,
        /// Bytes to write.
        #[arg(long, default_value = "4G")]
        size: String,
        /// Size of the pool's single vdev (a sparse file).
        #[arg(long, default_value = "8G")]
        vdev_size: String,
        /// Skip the fio baseline.
        #[arg(long)]
        no_fio: bool,
    },
}

fn mib_per_second(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / seconds
}

fn fio_write(dir: &std::path::Path, size: u64) -> Result<f64, String> {
    let file = dir.join("fio-baseline.dat");
    let output = Command::new("fio")
        .args([
            "--name=seqwrite",
            "--rw=write",
            "--bs=1M",
            "--direct=1",
            "--end_fsync=1",
            "--ioengine=psync",
            "--output-format=json",
        ])
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--size={size}"))
        .output()
        .map_err(|e| format!("cannot run fio: {e} (install it: apt-get install fio)"))?;
    let _ = std::fs::remove_file(&file);
    if !output.status.success() {
        return Err(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("fio output: {e}"))?;
    let job = &json["jobs"][0]["write"];
    let bytes = job["io_bytes"]
        .as_f64()
        .ok_or("fio output has no io_bytes")?;
    let runtime_ms = job["runtime"].as_f64().ok_or("fio output has no runtime")?;
    Ok(bytes / (1 << 20) as f64 / (runtime_ms / 1000.0))
}

pub fn run(command: BenchCommand) -> Result<(), Failure> {
    match command {
        BenchCommand::Seqwrite {
            dir,
            size,
            vdev_size,
            no_fio,
        } => {
            let size = parse_size(&size)?;
            let vdev_size = parse_size(&vdev_size)?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
            let vdev = dir.join("bench-vdev0.img");
            let _ = std::fs::remove_file(&vdev);
            let mut tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
            tunables.recordsize = 1 << 20;
            let pool = Pool::create(CreateOptions {
                name: "bench".into(),
                vdevs: vec![VdevSpec::Leaf(vdev.clone())],
                create_size: Some(vdev_size),
                force: true,
                tunables: tunables.clone(),
                wrap_device: None,
                disabled_features: Vec::new(),
            })?;
            let objset = pool.root_objset();
            let buffer = crate::format::pseudo_random(64 << 20, 0x9e37_79b9_7f4a_7c15);
            let record = 1usize << 20;
            let started = Instant::now();
            let object = {
                let hold = pool.assign()?;
                let props = ObjectProps {
                    object_type: ObjectType::PlainFile,
                    data_block_size: record as u32,
                    indirect_block_shift: tunables.indirect_block_shift as u8,
                    checksum: ChecksumType::Fletcher4,
                    compression: Compression::Off,
                    copies: 1,
                };
                objset
                    .create_object(&hold.tx(), props, ObjectType::None, &[])
                    .map_err(|e| Failure(e.to_string()))?
            };
            let mut written = 0u64;
            while written < size {
                let hold = pool.assign()?;
                let at = (written as usize) % buffer.len();
                objset
                    .write(&hold.tx(), object, written, &buffer[at..at + record])
                    .map_err(|e| Failure(e.to_string()))?;
                written += record as u64;
            }
            pool.sync()?;
            let seconds = started.elapsed().as_secs_f64();
            let tarn_rate = mib_per_second(written, seconds);
            pool.destroy()?;
            let _ = std::fs::remove_file(&vdev);
            out!(
                "tarn engine sequential write: {} MiB in {seconds:.2} s = {tarn_rate:.0} MiB/s",
                written >> 20
            );
            if no_fio {
                return Ok(());
            }
            let fio_rate = fio_write(&dir, size)?;
            out!(
                "fio on a file in {} (bs=1M direct end_fsync): {fio_rate:.0} MiB/s",
                dir.display()
            );
            out!("ratio tarn/fio: {:.2}", tarn_rate / fio_rate);
            Ok(())
        }
    }
}
