//! Helpers for `tools.rs` only, the tests that run real tools (cp, rsync, tar, git, sqlite3,
//! fio) on a tarn mount (the fixture itself is tarn-test-support's `CliFixture`): a pool of a
//! chosen size mounted under the fixture's altroot, export and re-import, running an external
//! program with its output shown on failure, a source tree with every kind of file, and a manifest of a tree (types, modes, sizes, times,
//! link targets, hard-link groups) to compare copies with.
//!
//! A tool that is not installed fails the test with a message naming it and the script that
//! installs it: these tests must never pass without having run their tool.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tarn_test_support::cli::{is_mounted, CliFixture};
pub use tarn_test_support::pattern;

/// A pool of `size` (a sparse file vdev) created and mounted at ALTROOT/NAME; returns the
/// mountpoint.
pub fn create_mounted(t: &CliFixture, name: &str, size: &str) -> PathBuf {
    let altroot = t.altroot();
    t.create_pool(
        name,
        &["-s", size, "-R", &altroot],
        &[&format!("{name}.img")],
    )
    .success();
    let mnt = t.file("altroot").join(name);
    assert!(is_mounted(&mnt), "{} is not mounted", mnt.display());
    mnt
}

/// Export `name` (which unmounts it) and import it again under the same altroot.
pub fn export_import(t: &CliFixture, name: &str) {
    let mnt = t.file("altroot").join(name);
    t.run(&["pool", "export", name]).success();
    assert!(!is_mounted(&mnt), "export left {} mounted", mnt.display());
    let altroot = t.altroot();
    t.run(&["pool", "import", "-d", &t.d(), "-R", &altroot, name])
        .success();
    assert!(is_mounted(&mnt), "import did not mount {}", mnt.display());
}

/// The path of `tool` on PATH; fails the test if it is missing.
#[track_caller]
pub fn require_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(tool);
        if let Ok(metadata) = fs::metadata(&candidate) {
            if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    panic!("`{tool}` is not installed (not on PATH); scripts/install-deps.sh installs it");
}

/// An external program to run in `cwd`, with environment additions and optional stdin.
pub struct Tool<'a> {
    program: &'a str,
    args: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
}

impl<'a> Tool<'a> {
    #[track_caller]
    pub fn new(program: &'a str, cwd: &Path) -> Tool<'a> {
        require_tool(program);
        Tool {
            program,
            args: Vec::new(),
            cwd: cwd.to_path_buf(),
            env: Vec::new(),
            stdin: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.args.push(arg.as_ref().to_string_lossy().into_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        for arg in args {
            self = self.arg(arg);
        }
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.env.push((
            key.to_string(),
            value.as_ref().to_string_lossy().into_owned(),
        ));
        self
    }

    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// Run to completion; (exit code, stdout, stderr).
    pub fn output(self) -> (i32, String, String) {
        let mut command = Command::new(self.program);
        command
            .args(&self.args)
            .current_dir(&self.cwd)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {}: {error}", self.program));
        if let Some(input) = &self.stdin {
            // Written from a thread so that a tool filling its stdout cannot deadlock us.
            let mut pipe = child.stdin.take().unwrap();
            let input = input.clone();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            });
        }
        let output = child.wait_with_output().expect("wait for tool");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Run; the test fails, showing the command and its output, unless it exits 0. Returns
    /// stdout.
    #[track_caller]
    pub fn success(self) -> String {
        let command = format!("{} {}", self.program, self.args.join(" "));
        let cwd = self.cwd.clone();
        let (code, stdout, stderr) = self.output();
        assert_eq!(
            code,
            0,
            "$ {command}  (in {})\n[exit {code}]\n--- stdout ---\n{}\n--- stderr ---\n{}",
            cwd.display(),
            tail(&stdout),
            tail(&stderr)
        );
        stdout
    }
}

/// The last few KiB of a tool's output: enough to see what went wrong.
fn tail(text: &str) -> &str {
    const KEEP: usize = 8192;
    if text.len() <= KEEP {
        return text;
    }
    let mut start = text.len() - KEEP;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The repository's top directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fill `dir` (which must not exist) with a source tree for copy tests: the repository's
/// sources and docs (a real tree of text files) plus one of every kind of thing a copy must
/// keep: a multi-record file, an empty file, a sparse file, hard links, relative, absolute and
/// dangling symlinks, a fifo, unusual modes and names, deep nesting and old timestamps.
pub fn make_source_tree(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let root = repo_root();
    for part in ["crates", "docs", "scripts", "README.md", "Cargo.toml"] {
        let source = root.join(part);
        if source.exists() {
            Tool::new("cp", dir)
                .arg("-a")
                .arg(&source)
                .arg(dir)
                .success();
        }
    }
    let extra = dir.join("extra");
    fs::create_dir(&extra).unwrap();
    fs::write(extra.join("big.bin"), pattern(1, 5 << 20)).unwrap();
    fs::write(extra.join("odd-size.bin"), pattern(2, 131_072 * 3 + 17)).unwrap();
    fs::write(extra.join("empty"), b"").unwrap();
    {
        let sparse = fs::File::create(extra.join("sparse")).unwrap();
        sparse.set_len(20 << 20).unwrap();
        use std::os::unix::fs::FileExt;
        sparse.write_all_at(b"end", (20 << 20) - 3).unwrap();
        sparse.write_all_at(b"middle", 7 << 20).unwrap();
    }
    fs::write(extra.join("linked"), b"one inode, two names\n").unwrap();
    fs::hard_link(extra.join("linked"), extra.join("linked-too")).unwrap();
    symlink("linked", extra.join("relative-link")).unwrap();
    symlink("/etc/hostname", extra.join("absolute-link")).unwrap();
    symlink("../nowhere/at/all", extra.join("dangling-link")).unwrap();
    symlink("x".repeat(300), extra.join("long-target-link")).unwrap();
    let fifo = CString::new(extra.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    fs::write(extra.join("private"), b"secret\n").unwrap();
    fs::set_permissions(extra.join("private"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(extra.join("tool.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(extra.join("tool.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(extra.join("name with spaces ü ☃"), b"unicode\n").unwrap();
    fs::write(extra.join(".hidden"), b"dot file\n").unwrap();
    let mut deep = extra.join("deep");
    for level in 0..12 {
        deep = deep.join(format!("level{level}"));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("bottom"), b"bottom\n").unwrap();
    let many = extra.join("many");
    fs::create_dir(&many).unwrap();
    for index in 0..600 {
        fs::write(
            many.join(format!("small-{index:04}")),
            pattern(index, index as usize % 3000),
        )
        .unwrap();
    }
    fs::create_dir(extra.join("sticky")).unwrap();
    fs::set_permissions(extra.join("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    // Old timestamps, set last so nothing above touches them again.
    Tool::new("touch", dir)
        .args(["-h", "-d", "2001-02-03 04:05:06.123456789"])
        .arg(extra.join("linked"))
        .arg(extra.join("relative-link"))
        .arg(extra.join("private"))
        .success();
}

/// One entry of a tree manifest: everything a faithful copy keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Files: the size. Other kinds: 0 (directory sizes differ between file systems).
    pub size: u64,
    pub mtime: (i64, i64),
    /// Symlinks: the target.
    pub target: Option<PathBuf>,
    /// Regular files with more than one link: the first path (in sorted order) of the group.
    pub link_group: Option<PathBuf>,
}

/// What a manifest records of modification times.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Times {
    /// Seconds and nanoseconds (cp -a, rsync -a).
    Nanoseconds,
    /// Seconds only (tar's default format).
    Seconds,
}

/// Every entry under `dir` (not `dir` itself, whose times the copy tools differ on), keyed by
/// relative path.
pub fn manifest(dir: &Path, times: Times) -> BTreeMap<PathBuf, Entry> {
    let mut entries = BTreeMap::new();
    let mut inodes: BTreeMap<(u64, u64), PathBuf> = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut paths = Vec::new();
    while let Some(current) = stack.pop() {
        for child in fs::read_dir(&current).unwrap() {
            let path = child.unwrap().path();
            let metadata = fs::symlink_metadata(&path).unwrap();
            if metadata.is_dir() {
                stack.push(path.clone());
            }
            paths.push((path, metadata));
        }
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, metadata) in paths {
        let relative = path.strip_prefix(dir).unwrap().to_path_buf();
        let file_type = metadata.file_type();
        use std::os::unix::fs::FileTypeExt;
        let kind = if file_type.is_dir() {
            "directory"
        } else if file_type.is_symlink() {
            "symlink"
        } else if file_type.is_file() {
            "file"
        } else if file_type.is_fifo() {
            "fifo"
        } else {
            "other"
        };
        let link_group = if kind == "file" && metadata.nlink() > 1 {
            Some(
                inodes
                    .entry((metadata.dev(), metadata.ino()))
                    .or_insert_with(|| relative.clone())
                    .clone(),
            )
        } else {
            None
        };
        let nanoseconds = match times {
            Times::Nanoseconds => metadata.mtime_nsec(),
            Times::Seconds => 0,
        };
        entries.insert(
            relative,
            Entry {
                kind,
                mode: metadata.mode(),
                uid: metadata.uid(),
                gid: metadata.gid(),
                size: if kind == "file" { metadata.size() } else { 0 },
                mtime: (metadata.mtime(), nanoseconds),
                target: file_type
                    .is_symlink()
                    .then(|| fs::read_link(&path).unwrap()),
                link_group,
            },
        );
    }
    entries
}

/// `copy` has exactly the entries of `original`, with the same metadata and contents.
#[track_caller]
pub fn assert_same_tree(original: &Path, copy: &Path, times: Times) {
    let expected = manifest(original, times);
    let actual = manifest(copy, times);
    let mut differences = Vec::new();
    for (path, entry) in &expected {
        match actual.get(path) {
            None => differences.push(format!("missing: {}", path.display())),
            Some(found) if found != entry => differences.push(format!(
                "differs: {}\n  expected {entry:?}\n  found    {found:?}",
                path.display()
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys() {
        if !expected.contains_key(path) {
            differences.push(format!("unexpected: {}", path.display()));
        }
    }
    assert!(
        differences.is_empty(),
        "{} differs from {} in {} entries:\n{}",
        copy.display(),
        original.display(),
        differences.len(),
        differences
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Contents, by a tool that knows nothing of tarn (diff reports any two fifos as
    // different, so they are left to the manifest).
    Tool::new("diff", original)
        .args(["-r", "--no-dereference", "--exclude=fifo"])
        .arg(original)
        .arg(copy)
        .success();
}
