//! `tarn quickstart [DIR]`: a guided demo on sparse files. It never prompts.
//!
//! Until the file system and daemon exist, the demo works at the engine level: it stores a file's
//! bytes in an object of the root dataset, which is exactly what the file system will do.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tarn::block::blkptr::{ChecksumType, Compression, ObjectType};
use tarn::check::check_pool;
use tarn::object::ObjectProps;
use tarn::pool::{CreateOptions, Pool, VdevSpec};
use tarn::types::ObjectId;

use crate::format::human_bytes;
use crate::CliFailure as Failure;

const POOL: &str = "demo";
const DATA_BYTES: usize = 64 << 20;

fn step(number: u32, text: &str) {
    out!("\n== Step {number}: {text}");
}

pub fn run(dir: PathBuf) -> Result<(), Failure> {
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    let dir =
        std::fs::canonicalize(&dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let disks: Vec<PathBuf> = ["disk0.img", "disk1.img"]
        .iter()
        .map(|name| dir.join(name))
        .collect();
    for disk in &disks {
        if disk.exists() {
            std::fs::remove_file(disk)
                .map_err(|e| Failure(format!("cannot remove old {}: {e}", disk.display())))?;
        }
    }
    out!(
        "tarn quickstart: a pooled copy-on-write store on two sparse files in {}",
        dir.display()
    );

    step(
        1,
        "create a pool whose one top-level vdev mirrors two 1 GiB sparse files",
    );
    out!(
        "   tarn pool create -s 1G {POOL} mirror {} {}",
        disks[0].display(),
        disks[1].display()
    );
    let tunables = tarn::tunables::Tunables::from_env().map_err(Failure)?;
    let pool = Pool::create(CreateOptions {
        name: POOL.into(),
        vdevs: vec![VdevSpec::Mirror(disks.clone())],
        create_size: Some(1 << 30),
        force: true,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })?;
    let stats = pool.core.io.space.stats();
    out!(
        "   Each file got four labels (config + uberblock ring); the data area is split into {} metaslabs of {}.",
        stats[0].metaslabs.len(),
        human_bytes(stats[0].metaslabs.first().map_or(0, |m| m.size))
    );

    step(
        2,
        "write 64 MiB of data into an object of the root dataset, in 128 KiB records",
    );
    let data = crate::format::pseudo_random(DATA_BYTES, 0x7a_72_6e);
    let objset = pool.root_objset();
    let started = Instant::now();
    let object: ObjectId = {
        let hold = pool.assign()?;
        let props = ObjectProps {
            object_type: ObjectType::PlainFile,
            data_block_size: 128 << 10,
            indirect_block_shift: tunables.indirect_block_shift as u8,
            checksum: ChecksumType::Fletcher4,
            compression: Compression::Lz4,
            copies: 1,
        };
        objset
            .create_object(
                &hold.tx(),
                props,
                ObjectType::None,
                &(DATA_BYTES as u64).to_le_bytes(),
            )
            .map_err(|e| Failure(e.to_string()))?
    };
    for chunk in 0..(DATA_BYTES / (1 << 20)) {
        let hold = pool.assign()?;
        let range = chunk << 20..(chunk + 1) << 20;
        objset
            .write(&hold.tx(), object, range.start as u64, &data[range])
            .map_err(|e| Failure(e.to_string()))?;
    }
    let txg = pool.sync()?;
    out!(
        "   Wrote {} in {:.2?}; txg {txg} is on disk: every block checksummed in its parent, metadata in extra copies, the uberblock written last.",
        human_bytes(DATA_BYTES as u64),
        started.elapsed()
    );
    pool.export()?;
    out!("   Exported: labels now say the pool was closed cleanly.");

    step(3, "scan the directory and import the pool again");
    out!("   tarn pool import -d {} {POOL}", dir.display());
    let options = crate::import_options(std::slice::from_ref(&dir), false)?;
    let (pool, report) = Pool::import(POOL, options)?;
    out!(
        "   Found by its labels; opened at txg {} (the newest uberblock whose tree verifies).",
        report.txg
    );

    step(4, "read the data back and compare");
    let objset = pool.root_objset();
    let mut back = vec![0u8; DATA_BYTES];
    objset
        .read(object, 0, &mut back)
        .map_err(|e| Failure(e.to_string()))?;
    if back != data {
        return Err(Failure(
            "quickstart: the data read back differs from what was written".into(),
        ));
    }
    out!(
        "   All {} read back intact (checksums verified on every block).",
        human_bytes(DATA_BYTES as u64)
    );

    step(
        5,
        "check the whole pool: every block, every copy, against the space maps",
    );
    let report = check_pool(&pool, true)?;
    out!(
        "   {} blocks, {} copies verified, {} leaks, {} double allocations: {}",
        report.blocks,
        report.copies_verified,
        report.leaks.len(),
        report.double_allocations.len(),
        if report.is_clean() { "clean" } else { "ERRORS" }
    );
    if !report.is_clean() {
        return Err(Failure(format!(
            "quickstart: check found errors: {report:?}"
        )));
    }
    pool.export()?;

    step(6, "look around");
    print_next_steps(&dir);
    Ok(())
}

fn print_next_steps(dir: &Path) {
    let d = dir.display();
    let steps = [
        (
            format!("tarn pool list -d {d}"),
            "size, allocated, free, fragmentation",
        ),
        (
            format!("tarn pool status -d {d}"),
            "vdev tree and error counters",
        ),
        (
            format!("tarn debug metaslabs -d {d} {POOL}"),
            "each metaslab's space map and free space",
        ),
        (format!("tarn check -d {d} {POOL}"), "verify the pool again"),
        (
            format!("tarn pool destroy -d {d} {POOL}"),
            "when you are done",
        ),
    ];
    let width = steps
        .iter()
        .map(|(command, _)| command.len())
        .max()
        .unwrap_or(0);
    for (command, what) in steps {
        out!("   {command:<width$}  {what}");
    }
}
