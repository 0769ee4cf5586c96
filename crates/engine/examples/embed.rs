//! Embedding tarn: a program that uses the engine as a library, through its facade only (the
//! types the crate root re-exports).
//!
//! It creates a pool on two sparse files (a mirror) in a temporary directory, creates a file
//! system in it, writes a file through the engine's file-system API, snapshots the file
//! system, sends the snapshot into a second pool (a receive, as `tarn send | tarn receive`
//! would), reads the file back from the received copy and checks it, then exports both pools.
//!
//! Run it with `cargo run -p tarn-engine --example embed`. `cargo test -p tarn-engine` runs it
//! too (the example is a test target, `test = true` in Cargo.toml, whose one test calls
//! `main`), so it keeps working as the engine changes.

use std::error::Error;
use std::io::Cursor;
use std::path::Path;

use tarn::{receive, send, CreateOptions, Pool, ReceiveOptions, SendOptions, Tunables, VdevSpec};

/// Size of each sparse device file: they take disk space only as blocks are written.
const DEVICE_BYTES: u64 = 256 << 20;

fn create_pool(dir: &Path, name: &str, vdevs: Vec<VdevSpec>) -> Result<Pool, Box<dyn Error>> {
    let pool = Pool::create(CreateOptions {
        name: name.to_string(),
        vdevs,
        log: Vec::new(),
        cache: Vec::new(),
        create_size: Some(DEVICE_BYTES),
        force: false,
        tunables: Tunables::default(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })?;
    println!(
        "created pool {name} (guid {}) on {} device file(s) in {}",
        pool.guid().0,
        pool.vdev_paths().len(),
        dir.display()
    );
    Ok(pool)
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let text = b"hello from an embedded tarn pool\n".repeat(1000);

    // A pool on two sparse files, mirrored, and a file system in it.
    let source = create_pool(
        dir.path(),
        "source",
        vec![VdevSpec::Mirror(vec![
            dir.path().join("disk0"),
            dir.path().join("disk1"),
        ])],
    )?;
    source.create_dataset("source/docs", &[], false)?;

    // A file written through the file-system API (what the FUSE adapter calls).
    let fs = source.open_file_system("source/docs")?;
    let file = fs.create(fs.root(), b"hello.txt", 0o644, 0, 0)?;
    fs.write(file.ino, 0, &text)?;
    drop(fs);
    println!("wrote source/docs/hello.txt: {} bytes", text.len());

    // A snapshot, durable on return (it includes the write above).
    source.create_snapshots(&["source/docs@first".to_string()], false)?;
    println!("snapshot source/docs@first");

    // Send the snapshot into a second pool, through an in-memory stream.
    let mut stream = Vec::new();
    let sent = send(
        &source,
        "source/docs@first",
        &SendOptions::default(),
        &mut stream,
        &mut |_| {},
    )?;
    let backup = create_pool(
        dir.path(),
        "backup",
        vec![VdevSpec::Leaf(dir.path().join("disk2"))],
    )?;
    let received = receive(
        &backup,
        "backup/docs",
        &mut Cursor::new(stream),
        &ReceiveOptions::default(),
    )?;
    println!(
        "sent {} bytes ({} records) and received {} into pool backup",
        sent.bytes,
        sent.records,
        received.snapshots.join(", ")
    );

    // Read the file back from the received snapshot and compare.
    let copy = backup.snapshot_file_system("backup/docs@first")?;
    let attr = copy.lookup(copy.root(), b"hello.txt")?;
    let read = copy.read(attr.ino, 0, attr.size as usize)?;
    if read != text {
        return Err("the received file differs from the one written".into());
    }
    println!(
        "read backup/docs@first/hello.txt: {} bytes, identical",
        read.len()
    );
    drop(copy);

    source.export()?;
    backup.export()?;
    println!("exported both pools");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example's whole run succeeds: pool creation, write, snapshot, send and receive,
    /// and the file read back from the received snapshot equals the one written.
    #[test]
    fn embeds_tarn() {
        super::main().expect("the embedding example runs");
    }
}
