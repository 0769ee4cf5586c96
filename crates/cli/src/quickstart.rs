//! `tarn quickstart [DIR]`: a guided demo on sparse files in DIR. It never prompts.
//!
//! The demo does what a user would do, by running the real commands: this executable, as
//! subprocesses, with `TARN_SOCKET=DIR/tarn.sock` so the demo has a daemon of its own. It
//! creates a mirrored pool `demo` on two sparse files with its root file system mounted under
//! `DIR/altroot`, copies data in through the mount, lists the pool, syncs it, records a SHA-256
//! of every file (in `DIR/demo.sha256`, `sha256sum -c` format), exports and re-imports the pool,
//! verifies every file through the mount again, checks the pool and exports it at the end (the
//! daemon then exits). Each command is printed before it runs, with a line saying why.
//!
//! A second run in the same DIR cleans up the first: it exports the pool if that daemon still
//! runs, lazily unmounts whatever is left under `DIR/altroot`, and removes the old disk images.
//!
//! Without a usable `/dev/fuse` nothing can be mounted: the demo says so and falls back to the
//! engine level ([`engine_demo`]), storing bytes in an object of the root dataset in-process.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tarn::debug::{check_pool, compute_checksum, ObjectType};
use tarn::types::ObjectId;
use tarn::{ChecksumType, Compression, CreateOptions, ObjectProps, Pool, VdevSpec};
use tarn_fuse::mountpoint;

use tarn_protocol::error::Failure;
use tarn_protocol::format::{human_bytes, pseudo_random};

const POOL: &str = "demo";
const DISKS: [&str; 2] = ["disk0.img", "disk1.img"];
/// The manifest of checksums, beside the disk images.
const MANIFEST: &str = "demo.sha256";
/// A real directory tree to copy in with `cp -a`, the first one present.
const REAL_TREES: [&str; 2] = ["/usr/share/common-licenses", "/etc/ssl/certs"];
/// Longest socket path a `sockaddr_un` takes (108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

fn step(number: u32, text: &str) {
    out!("\n== Step {number}: {text}");
}

/// A line of explanation, shell-comment style, so the transcript can be pasted into a shell.
fn say(text: &str) {
    out!("# {text}");
}

pub fn run(dir: PathBuf) -> Result<(), Failure> {
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    let dir =
        std::fs::canonicalize(&dir).map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    let demo = Demo::new(dir)?;
    demo.clean_previous_run()?;
    match fuse_unavailable() {
        None => demo.run(),
        Some(why) => {
            out!("tarn quickstart: {why}, so nothing can be mounted here.");
            out!("Falling back to the engine-level demo: the same pool, driven in this process, with a file's bytes stored in an object of the root dataset (what the file system does).");
            engine_demo(&demo.dir, &demo.disks)
        }
    }
}

/// Why FUSE mounts cannot work here, if they cannot.
fn fuse_unavailable() -> Option<String> {
    if let Err(error) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!("/dev/fuse is not usable ({error})"));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && !on_path("fusermount3") {
        return Some("fusermount3 is not installed (package fuse3) and this is not root".into());
    }
    None
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// One file system entry as the demo records it, for comparing after the re-import.
#[derive(PartialEq, Eq, Debug)]
enum Entry {
    Directory,
    File { size: u64, sha256: [u8; 32] },
    Symlink(PathBuf),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct Demo {
    dir: PathBuf,
    socket: PathBuf,
    altroot: PathBuf,
    /// Where the pool's root file system mounts: ALTROOT/POOL.
    mnt: PathBuf,
    disks: Vec<PathBuf>,
    exe: PathBuf,
}

impl Demo {
    fn new(dir: PathBuf) -> Result<Demo, Failure> {
        let socket = dir.join("tarn.sock");
        if socket.as_os_str().len() + ".lock".len() > MAX_SOCKET_PATH {
            return Err(Failure(format!(
                "quickstart: {} is too long a path for a socket; choose a shorter DIR",
                socket.display()
            )));
        }
        let altroot = dir.join("altroot");
        Ok(Demo {
            socket,
            mnt: altroot.join(POOL),
            altroot,
            disks: DISKS.iter().map(|name| dir.join(name)).collect(),
            exe: std::env::current_exe()
                .map_err(|e| Failure(format!("cannot find the tarn executable: {e}")))?,
            dir,
        })
    }

    fn tarn_command(&self, args: &[&OsStr]) -> Command {
        let mut command = Command::new(&self.exe);
        command
            .args(args)
            .env("TARN_SOCKET", &self.socket)
            .stdin(Stdio::null());
        command
    }

    /// Print `$ tarn ARGS` after a line saying `why`, run it, print what it printed; fail if it
    /// failed.
    fn tarn(&self, why: &str, args: &[&OsStr]) -> Result<(), Failure> {
        say(why);
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        out!("$ tarn {shown}");
        let output = self
            .tarn_command(args)
            .output()
            .map_err(|e| Failure(format!("cannot run {}: {e}", self.exe.display())))?;
        print_output(&output);
        if !output.status.success() {
            return Err(Failure(format!(
                "quickstart: `tarn {shown}` failed ({}); the daemon's log is {}.log; run `tarn quickstart {}` again to start over",
                output.status,
                self.socket.display(),
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// Undo an earlier run in this DIR: its pool exported, its mounts gone, its disks removed.
    fn clean_previous_run(&self) -> Result<(), Failure> {
        if tarn_protocol::client::ping(&self.socket).is_some() {
            say("A daemon from an earlier run still serves this directory: export its demo pool.");
            // -d DIR: if the daemon does not hold it, look for the pool here only.
            out!("$ tarn pool export -f -d {} {POOL}", self.dir.display());
            let _ = self
                .tarn_command(&[
                    "pool".as_ref(),
                    "export".as_ref(),
                    "-f".as_ref(),
                    "-d".as_ref(),
                    self.dir.as_os_str(),
                    POOL.as_ref(),
                ])
                .output();
            if tarn_protocol::client::ping(&self.socket).is_some() {
                out!("$ tarn daemon --stop");
                tarn_protocol::client::stop_daemon(&self.socket)?;
            }
        }
        for entry in mountpoint::mounts() {
            if entry.mount_point.starts_with(&self.altroot) {
                say("A mount left by an earlier run: detach it.");
                out!("$ umount -l {}", entry.mount_point.display());
                mountpoint::unmount_path(&entry.mount_point, true).map_err(|e| {
                    Failure(format!(
                        "cannot unmount {}: {e}",
                        entry.mount_point.display()
                    ))
                })?;
            }
        }
        let still_mounted = mountpoint::mounts()
            .iter()
            .any(|entry| entry.mount_point.starts_with(&self.altroot));
        if !still_mounted && self.altroot.exists() {
            std::fs::remove_dir_all(&self.altroot).map_err(|e| {
                Failure(format!("cannot remove old {}: {e}", self.altroot.display()))
            })?;
        }
        for old in self.disks.iter().chain([&self.dir.join(MANIFEST)]) {
            if old.exists() {
                std::fs::remove_file(old)
                    .map_err(|e| Failure(format!("cannot remove old {}: {e}", old.display())))?;
            }
        }
        Ok(())
    }

    fn run(&self) -> Result<(), Failure> {
        let dir = self.dir.as_os_str();
        let altroot = self.altroot.as_os_str();
        out!(
            "tarn quickstart: a pool on two sparse files in {}, its file system mounted at {}.",
            self.dir.display(),
            self.mnt.display()
        );
        out!(
            "Every command runs {} (\"tarn\" below) with a daemon of its own:",
            self.exe.display()
        );
        out!("$ export TARN_SOCKET={}", self.socket.display());

        step(1, "create a mirrored pool on two sparse files and mount it");
        self.tarn(
            "Two 1 GiB sparse files, one mirror: every block is written to both. The daemon starts on first need, imports the pool and mounts its root file system at ALTROOT/demo.",
            &[
                "pool".as_ref(),
                "create".as_ref(),
                "-s".as_ref(),
                "1G".as_ref(),
                "-R".as_ref(),
                altroot,
                POOL.as_ref(),
                "mirror".as_ref(),
                self.disks[0].as_os_str(),
                self.disks[1].as_os_str(),
            ],
        )?;
        match mountpoint::mount_at(&self.mnt) {
            Some(entry) => say(&format!(
                "Mounted: {} on {} type {}",
                entry.source,
                entry.mount_point.display(),
                entry.fstype
            )),
            None => {
                return Err(Failure(format!(
                    "quickstart: {} is not mounted after pool create",
                    self.mnt.display()
                )))
            }
        }

        step(
            2,
            "copy data in through the mount, with ordinary file operations",
        );
        self.write_files()?;
        self.copy_real_tree();
        let child = format!("{POOL}/projects");
        self.tarn(
            "A second file system inside the pool, with its own properties (zstd compression, 16K records): it mounts below its parent, at ALTROOT/demo/projects.",
            &[
                "create".as_ref(),
                "-o".as_ref(),
                "compression=zstd".as_ref(),
                "-o".as_ref(),
                "recordsize=16K".as_ref(),
                child.as_ref(),
            ],
        )?;
        let notes: String = (0..2000)
            .map(|line| format!("line {line}: notes compress well with zstd\n"))
            .collect();
        std::fs::write(self.mnt.join("projects/notes.txt"), notes)
            .map_err(|e| Failure(format!("cannot write into {child}: {e}")))?;
        self.external(
            "What the file system now holds:",
            None,
            "ls",
            &["-l".as_ref(), self.mnt.as_os_str()],
        );

        step(3, "sync, then list the pool and show its layout");
        self.tarn(
            "Force a transaction group to disk now instead of waiting for the timer: every block checksummed in its parent, the uberblock written last.",
            &["pool".as_ref(), "sync".as_ref(), POOL.as_ref()],
        )?;
        self.tarn(
            "Size, allocated and free space, fragmentation, health:",
            &["pool".as_ref(), "list".as_ref()],
        )?;
        self.tarn(
            "The file systems: space used by each (children included), referenced, compression ratio, mountpoint.",
            &[
                "list".as_ref(),
                "-o".as_ref(),
                "name,used,refer,compressratio,mountpoint".as_ref(),
            ],
        )?;
        self.tarn(
            "The vdev tree: one mirror of two files, with read/write/checksum error counts.",
            &["pool".as_ref(), "status".as_ref(), POOL.as_ref()],
        )?;

        step(4, "record a checksum of every file");
        let before = self.record()?;

        step(
            5,
            "export the pool: unmount, write everything, mark it exported",
        );
        self.tarn(
            "The daemon unmounts the file system, syncs a last time and marks the labels exported; with no pool left it exits.",
            &["pool".as_ref(), "export".as_ref(), POOL.as_ref()],
        )?;
        if mountpoint::mount_at(&self.mnt).is_some() {
            return Err(Failure(format!(
                "quickstart: {} is still mounted after export",
                self.mnt.display()
            )));
        }
        say(&format!("{} is no longer mounted.", self.mnt.display()));

        step(6, "import it again from the disk images");
        self.tarn(
            "Scan DIR for vdev labels, open the pool at its newest verified uberblock and mount it again under the altroot.",
            &[
                "pool".as_ref(),
                "import".as_ref(),
                "-d".as_ref(),
                dir,
                "-R".as_ref(),
                altroot,
                POOL.as_ref(),
            ],
        )?;

        step(7, "verify every file through the mount");
        self.verify(&before)?;

        step(8, "snapshot, change, and roll back");
        self.snapshot_and_roll_back()?;

        step(
            9,
            "check the whole pool: every block, every copy, against the space maps",
        );
        self.tarn(
            "Walk every block pointer, verify both mirror copies of each block and compare what is allocated with the space maps.",
            &["check".as_ref(), POOL.as_ref()],
        )?;

        step(10, "export the pool and leave it on disk");
        let daemon = tarn_protocol::client::ping(&self.socket);
        self.tarn(
            "Unmount and export; the daemon exits with no pool left.",
            &["pool".as_ref(), "export".as_ref(), POOL.as_ref()],
        )?;
        if let Some(pid) = daemon {
            wait_gone(pid);
        }
        self.print_next_steps();
        Ok(())
    }

    /// Step 8: a recursive snapshot (one txg for both file systems), a deleted file, the
    /// snapshot's space, and a rollback that brings the file back through the mount.
    fn snapshot_and_roll_back(&self) -> Result<(), Failure> {
        let notes = self.mnt.join("projects/notes.txt");
        let original = std::fs::read(&notes)
            .map_err(|e| Failure(format!("cannot read {}: {e}", notes.display())))?;
        let snapshot = format!("{POOL}@before");
        self.tarn(
            "Snapshot the pool's file systems recursively, in one transaction group: it costs two records per file system, whatever they hold.",
            &["snapshot".as_ref(), "-r".as_ref(), snapshot.as_ref()],
        )?;
        std::fs::remove_file(&notes)
            .map_err(|e| Failure(format!("cannot remove {}: {e}", notes.display())))?;
        self.tarn(
            "Delete projects/notes.txt and sync: its blocks are not freed, the snapshot holds them (its USED).",
            &["pool".as_ref(), "sync".as_ref(), POOL.as_ref()],
        )?;
        self.tarn(
            "The snapshots: what each holds alone (USED), what it references, what was written before it.",
            &[
                "list".as_ref(),
                "-t".as_ref(),
                "snapshot".as_ref(),
                "-o".as_ref(),
                "name,used,refer,written".as_ref(),
            ],
        )?;
        let child_snapshot = format!("{POOL}/projects@before");
        self.tarn(
            "Roll the projects file system back to its snapshot: the mount shows the snapshot's contents at once.",
            &["rollback".as_ref(), child_snapshot.as_ref()],
        )?;
        let restored = std::fs::read(&notes).map_err(|e| {
            Failure(format!(
                "{} is not back after the rollback: {e}",
                notes.display()
            ))
        })?;
        if restored != original {
            return Err(Failure(format!(
                "quickstart: {} differs after the rollback",
                notes.display()
            )));
        }
        say("projects/notes.txt is back, byte for byte.");
        self.tarn(
            "Destroy the snapshots; the space they held alone comes back in the background.",
            &["destroy".as_ref(), "-r".as_ref(), snapshot.as_ref()],
        )?;
        Ok(())
    }

    fn write_files(&self) -> Result<(), Failure> {
        let mnt = &self.mnt;
        let write = |relative: &str, data: &[u8]| -> Result<(), Failure> {
            let path = mnt.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Failure(format!("cannot create {}: {e}", parent.display())))?;
            }
            std::fs::write(&path, data)
                .map_err(|e| Failure(format!("cannot write {}: {e}", path.display())))
        };
        say("Files of different sizes, written with plain write(2): an empty one, a few bytes, one 4 KiB page, a size that is no multiple of a record, and 32 MiB of incompressible data.");
        write(
            "hello.txt",
            b"Hello from tarn: this file lives in a pool on two sparse files.\n",
        )?;
        write("empty", b"")?;
        write("page.bin", &pseudo_random(4096, 1))?;
        write("odd-size.bin", &pseudo_random(1_000_003, 2))?;
        let text: Vec<u8> = (0..100_000)
            .flat_map(|line| {
                format!("log line {line}: compressible text, lz4 shrinks it\n").into_bytes()
            })
            .collect();
        write("compressible.log", &text)?;
        let big = pseudo_random(32 << 20, 3);
        let started = Instant::now();
        {
            let path = mnt.join("big.bin");
            let mut file = std::fs::File::create(&path)
                .map_err(|e| Failure(format!("cannot create {}: {e}", path.display())))?;
            for chunk in big.chunks(1 << 20) {
                file.write_all(chunk)
                    .map_err(|e| Failure(format!("cannot write {}: {e}", path.display())))?;
            }
        }
        say(&format!(
            "big.bin: {} in {:.2?}, in 1 MiB writes.",
            human_bytes(big.len() as u64),
            started.elapsed()
        ));
        say("A small directory tree, with a symbolic link:");
        write("tree/README", b"a small tree\n")?;
        write("tree/a/one.txt", b"one\n")?;
        write("tree/a/b/two.txt", b"two\n")?;
        write("tree/a/b/c/three.txt", b"three\n")?;
        let link = mnt.join("tree/link-to-one");
        std::os::unix::fs::symlink("a/one.txt", &link)
            .map_err(|e| Failure(format!("cannot create {}: {e}", link.display())))?;
        for path in [
            "tree/README",
            "tree/a/one.txt",
            "tree/a/b/two.txt",
            "tree/a/b/c/three.txt",
            "tree/link-to-one -> a/one.txt",
        ] {
            out!("#   {path}");
        }
        Ok(())
    }

    /// `cp -a` a real directory of this machine into the mount, if one is there.
    fn copy_real_tree(&self) {
        let Some(source) = REAL_TREES.iter().map(Path::new).find(|p| p.is_dir()) else {
            say("(No /usr/share/common-licenses or /etc/ssl/certs here to copy in.)");
            return;
        };
        self.external(
            "A real directory of this machine, with permissions, times and symlinks (cp -a):",
            None,
            "cp",
            &["-a".as_ref(), source.as_os_str(), self.mnt.as_os_str()],
        );
    }

    /// Run a program other than tarn (in `cwd` if given); whether it succeeded. A failure is
    /// reported, and the caller decides whether it matters.
    fn external(&self, why: &str, cwd: Option<&Path>, program: &str, args: &[&OsStr]) -> bool {
        say(why);
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        match cwd {
            Some(cwd) => out!("$ (cd {} && {program} {shown})", cwd.display()),
            None => out!("$ {program} {shown}"),
        }
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null());
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        match command.output() {
            Ok(output) => {
                print_output(&output);
                if !output.status.success() {
                    err!("quickstart: {program} failed ({})", output.status);
                }
                output.status.success()
            }
            Err(error) => {
                err!("quickstart: cannot run {program}: {error}");
                false
            }
        }
    }

    /// Every entry under the mount, with a SHA-256 of each regular file.
    fn walk(&self) -> Result<BTreeMap<PathBuf, Entry>, Failure> {
        let mut entries = BTreeMap::new();
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let path = self.mnt.join(&relative);
            let listing = std::fs::read_dir(&path)
                .map_err(|e| Failure(format!("cannot list {}: {e}", path.display())))?;
            for item in listing {
                let item = item.map_err(|e| Failure(format!("{}: {e}", path.display())))?;
                let child = relative.join(item.file_name());
                let full = item.path();
                let meta = std::fs::symlink_metadata(&full)
                    .map_err(|e| Failure(format!("{}: {e}", full.display())))?;
                let entry = if meta.is_dir() {
                    pending.push(child.clone());
                    Entry::Directory
                } else if meta.file_type().is_symlink() {
                    Entry::Symlink(
                        std::fs::read_link(&full)
                            .map_err(|e| Failure(format!("{}: {e}", full.display())))?,
                    )
                } else {
                    let data = std::fs::read(&full)
                        .map_err(|e| Failure(format!("cannot read {}: {e}", full.display())))?;
                    Entry::File {
                        size: data.len() as u64,
                        sha256: compute_checksum(ChecksumType::Sha256, &data),
                    }
                };
                entries.insert(child, entry);
            }
        }
        Ok(entries)
    }

    /// Checksum everything under the mount and write the manifest.
    fn record(&self) -> Result<BTreeMap<PathBuf, Entry>, Failure> {
        let manifest = self.dir.join(MANIFEST);
        say(&format!(
            "SHA-256 of every file, read back through the mount, into {} (sha256sum -c format).",
            manifest.display()
        ));
        let entries = self.walk()?;
        let mut text = String::new();
        for (path, entry) in &entries {
            if let Entry::File { sha256, .. } = entry {
                text.push_str(&format!("{}  {}\n", hex(sha256), path.display()));
            }
        }
        std::fs::write(&manifest, text)
            .map_err(|e| Failure(format!("cannot write {}: {e}", manifest.display())))?;
        let (files, bytes, dirs, links) = summary(&entries);
        say(&format!(
            "{files} files ({}), {dirs} directories, {links} symbolic links.",
            human_bytes(bytes)
        ));
        Ok(entries)
    }

    fn verify(&self, before: &BTreeMap<PathBuf, Entry>) -> Result<(), Failure> {
        let manifest = self.dir.join(MANIFEST);
        if on_path("sha256sum")
            && !self.external(
                "Every file's SHA-256, recomputed through the new mount, against the manifest:",
                Some(&self.mnt),
                "sha256sum",
                &["--quiet".as_ref(), "-c".as_ref(), manifest.as_os_str()],
            )
        {
            return Err(Failure(format!(
                "quickstart: files under {} do not match {}",
                self.mnt.display(),
                manifest.display()
            )));
        }
        say("And the whole tree, compared in this process with what was recorded before the export: every file's size and SHA-256, every directory and symbolic link.");
        let after = self.walk()?;
        let mut problems = Vec::new();
        for (path, entry) in before {
            match after.get(path) {
                None => problems.push(format!("{}: missing", path.display())),
                Some(now) if now != entry => problems.push(format!("{}: differs", path.display())),
                Some(_) => {}
            }
        }
        for path in after.keys().filter(|path| !before.contains_key(*path)) {
            problems.push(format!("{}: unexpected", path.display()));
        }
        if !problems.is_empty() {
            return Err(Failure(format!(
                "quickstart: {} entries did not survive export and import:\n  {}",
                problems.len(),
                problems.join("\n  ")
            )));
        }
        let (files, bytes, dirs, links) = summary(&after);
        say(&format!(
            "All {files} files ({}) read back intact; {dirs} directories and {links} symbolic links as they were.",
            human_bytes(bytes)
        ));
        Ok(())
    }

    fn print_next_steps(&self) {
        step(11, "look around");
        say("The pool is exported; its disk images and the manifest stay in the directory. Next:");
        let d = self.dir.display();
        let a = self.altroot.display();
        let m = self.mnt.display();
        print_commands(&[
            (
                format!("tarn pool import -d {d} -R {a} {POOL}"),
                "import and mount it again",
            ),
            (
                format!("(cd {m} && sha256sum -c {d}/{MANIFEST})"),
                "verify the files yourself",
            ),
            (
                format!("tarn pool status {POOL}"),
                "vdev tree and error counters",
            ),
            (format!("tarn check {POOL}"), "verify every block again"),
            (
                format!("tarn snapshot {POOL}@now && ls {m}/.zfs/snapshot/now"),
                "take a snapshot and read it",
            ),
            (format!("tarn pool export {POOL}"), "unmount and export"),
            (
                format!("tarn pool destroy -d {d} {POOL}"),
                "when you are done",
            ),
        ]);
        say(&format!(
            "(with TARN_SOCKET={} to use this demo's own daemon)",
            self.socket.display()
        ));
    }
}

fn summary(entries: &BTreeMap<PathBuf, Entry>) -> (usize, u64, usize, usize) {
    let (mut files, mut bytes, mut dirs, mut links) = (0, 0, 0, 0);
    for entry in entries.values() {
        match entry {
            Entry::Directory => dirs += 1,
            Entry::Symlink(_) => links += 1,
            Entry::File { size, .. } => {
                files += 1;
                bytes += size;
            }
        }
    }
    (files, bytes, dirs, links)
}

fn print_output(output: &std::process::Output) {
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        out!("{line}");
    }
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        err!("{line}");
    }
}

/// Wait (a little) until process `pid` has exited.
fn wait_gone(pid: u32) {
    let started = Instant::now();
    while tarn_protocol::client::process_alive(pid) && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn print_commands(commands: &[(String, &str)]) {
    let width = commands
        .iter()
        .map(|(command, _)| command.len())
        .max()
        .unwrap_or(0);
    for (command, what) in commands {
        out!("   {command:<width$}  {what}");
    }
}

/// The demo without FUSE: the pool driven in this process, a file's bytes in an object.
fn engine_demo(dir: &Path, disks: &[PathBuf]) -> Result<(), Failure> {
    const DATA_BYTES: usize = 64 << 20;
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
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: vec![VdevSpec::Mirror(disks.to_vec())],
        create_size: Some(1 << 30),
        force: true,
        tunables: tunables.clone(),
        wrap_device: None,
        disabled_features: Vec::new(),
    })?;
    let stats = pool.metaslab_stats();
    out!(
        "   Each file got four labels (config + uberblock ring); the data area is split into {} metaslabs of {}.",
        stats[0].metaslabs.len(),
        human_bytes(stats[0].metaslabs.first().map_or(0, |m| m.size))
    );

    step(
        2,
        "write 64 MiB of data into an object of the root dataset, in 128 KiB records",
    );
    let data = pseudo_random(DATA_BYTES, 0x7a_72_6e);
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
    let options = tarn_ops::import_options(&[dir.to_path_buf()], false)?;
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
    let d = dir.display();
    print_commands(&[
        (
            format!("tarn pool import -d {d}"),
            "the exported pool's vdev tree and state",
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
    ]);
    Ok(())
}
