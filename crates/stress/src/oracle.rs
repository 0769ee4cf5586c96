//! The oracle: reading a file system back and judging every block by its tag.
//!
//! # Theory
//! Two judgments, one used while running and both after a crash:
//! 1. *Every block is a valid tag for its place* ([`verify_file`]): each [`TAG_BLOCK_SIZE`]
//!    block of every regular file is either zeros (a hole, which a truncate, a punch, a
//!    rollback or a crash may rightly leave) or a tagged block naming this file system's
//!    family, this inode and its birth time, and this offset, with a round no later than the
//!    newest child's. Extended attributes the tool set are tagged the same way. This needs no
//!    model at all, which is what makes it usable everywhere: in the child after each fsync
//!    and on every `ReadVerify`, and in the parent on every head and every snapshot.
//! 2. *Every fsynced file holds at least what its fsync promised* ([`check_promises`]): the
//!    file still exists with the same birth time, is at least as long, and each block
//!    that held generation `g` holds `g` or a newer one, unless the journal says that an
//!    operation which may take the promise back was started since (see [`crate::journal`]).
//!
//! # The file-system stamp
//! A tag names the file system its file was created in by a *family*: a random number the
//! tool writes, once, into the file `.stamp` at the root of each file system it creates, and
//! fsyncs before any other file is made there. A clone inherits the stamp with the rest of
//! its origin's contents, so blocks shared with the origin verify in the clone too; a
//! promote moves nothing. A block of one file system found in another (a different family)
//! is misplaced.

use std::collections::{BTreeMap, BTreeSet};

use tarn::fs::{FileKind, FileSystem, FsError};
use tarn::pool::Pool;

use crate::journal::Promises;
use crate::tag::{birth_of, BlockState, Place, Tag, TAG_BLOCK_SIZE, XATTR_OFFSET};

/// The stamp file at the root of every file system the tool made.
pub const STAMP_NAME: &[u8] = b".stamp";
/// The prefix of the extended attributes the tool sets (and verifies).
pub const XATTR_PREFIX: &str = "user.stress.";
/// The extended attribute that holds the birth of a file made through a mount, where the
/// creation time cannot be read (see [`crate::mount`]); it does not start with
/// [`XATTR_PREFIX`], so it is not taken for a tagged value.
pub const BIRTH_XATTR: &str = "user.tarn-stress-birth";
/// Bytes read per call when reading a file back.
const READ_CHUNK: usize = 1 << 20;

/// What a verified file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileContents {
    pub birth: u64,
    pub size: u64,
    /// Per tagged block: its generation, or 0 for a hole.
    pub generations: Vec<u64>,
}

/// The file system's family, or None when it has no stamp (a file system created just
/// before a crash, before its stamp was written: it holds no other file). A stamp file left
/// empty (the crash came between its creation and its write) is no stamp either.
pub fn read_stamp(fs: &FileSystem) -> Result<Option<u64>, FsError> {
    let attr = match fs.lookup(fs.root(), STAMP_NAME) {
        Ok(attr) => attr,
        Err(FsError::NotFound) => return Ok(None),
        Err(error) => return Err(error),
    };
    if attr.size == 0 {
        return Ok(None);
    }
    let bytes = fs.read(attr.ino, 0, 8)?;
    let bytes: [u8; 8] = bytes
        .try_into()
        .map_err(|_| FsError::Corrupt("the stamp file is not 8 bytes long".into()))?;
    Ok(Some(u64::from_le_bytes(bytes)))
}

/// Write the stamp of a new file system and make it durable before anything else is made.
pub fn write_stamp(fs: &FileSystem, family: u64) -> Result<(), FsError> {
    let attr = match fs.lookup(fs.root(), STAMP_NAME) {
        Ok(attr) => attr,
        Err(FsError::NotFound) => fs.create(fs.root(), STAMP_NAME, 0o644, 0, 0)?,
        Err(error) => return Err(error),
    };
    fs.write(attr.ino, 0, &family.to_le_bytes())?;
    fs.fsync(attr.ino)
}

/// Read file `ino` whole and check every block and every tool xattr against its tag.
/// `newest_round` bounds the rounds a tag may name. Any error, the engine's included, is an
/// inconsistency: the caller reads only files that exist and that nothing else changes.
pub fn verify_file(
    fs: &FileSystem,
    family: u64,
    ino: u64,
    newest_round: u64,
) -> Result<FileContents, String> {
    let attr = fs
        .getattr(ino)
        .map_err(|error| format!("inode {ino}: getattr: {error}"))?;
    let birth = file_birth(fs, ino, &attr)?;
    let mut contents = FileContents {
        birth,
        size: attr.size,
        generations: Vec::new(),
    };
    let check_tag = |bytes: &[u8], offset: u64| -> Result<u64, String> {
        let place = Place {
            family,
            ino,
            birth,
            offset,
        };
        match Tag::verify(bytes, place) {
            Ok(BlockState::Hole) => Ok(0),
            Ok(BlockState::Tagged(tag)) => {
                if tag.round > newest_round || tag.generation >> 32 != tag.round {
                    return Err(format!(
                        "inode {ino} offset {offset}: tag from round {} generation {:#x}, but the newest round is {newest_round}",
                        tag.round, tag.generation
                    ));
                }
                Ok(tag.generation)
            }
            Err(why) => Err(format!("inode {ino} offset {offset}: {why}")),
        }
    };
    let mut offset = 0u64;
    while offset < attr.size {
        let length = READ_CHUNK.min((attr.size - offset) as usize);
        let data = fs
            .read(ino, offset, length)
            .map_err(|error| format!("inode {ino}: read at {offset}: {error}"))?;
        if data.len() != length {
            return Err(format!(
                "inode {ino}: read of {length} bytes at {offset} returned {} within the file's size {}",
                data.len(),
                attr.size
            ));
        }
        for (index, block) in data.chunks(TAG_BLOCK_SIZE).enumerate() {
            let block_offset = offset + (index * TAG_BLOCK_SIZE) as u64;
            contents.generations.push(check_tag(block, block_offset)?);
        }
        offset += length as u64;
    }
    let names = fs
        .listxattr(ino)
        .map_err(|error| format!("inode {ino}: listxattr: {error}"))?;
    for name in names {
        if !name.starts_with(XATTR_PREFIX.as_bytes()) {
            continue;
        }
        let value = fs.getxattr(ino, &name).map_err(|error| {
            format!(
                "inode {ino}: getxattr {}: {error}",
                String::from_utf8_lossy(&name)
            )
        })?;
        if check_tag(&value, XATTR_OFFSET)? == 0 {
            return Err(format!(
                "inode {ino}: xattr {} is all zeros",
                String::from_utf8_lossy(&name)
            ));
        }
    }
    Ok(contents)
}

/// The birth a file's tags name: its [`BIRTH_XATTR`] when it has one (a file made through a
/// mount), else its creation time.
pub fn file_birth(fs: &FileSystem, ino: u64, attr: &tarn::fs::Attr) -> Result<u64, String> {
    match fs.getxattr(ino, BIRTH_XATTR.as_bytes()) {
        Ok(value) => value
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| format!("inode {ino}: its birth xattr is not 8 bytes")),
        Err(FsError::NoData) => Ok(birth_of(attr)),
        Err(error) => Err(format!("inode {ino}: getxattr of its birth: {error}")),
    }
}

/// The files of one tree, by inode number.
#[derive(Default)]
pub struct TreeFiles {
    /// The files that verified, with their contents.
    pub verified: BTreeMap<u64, FileContents>,
    /// The files that did not (each already reported).
    pub damaged: BTreeSet<u64>,
}

/// Verify every regular file below the root of `fs`; returns the files found, and appends
/// each inconsistency (prefixed with `what`) to `problems`.
pub fn verify_tree(
    fs: &FileSystem,
    what: &str,
    newest_round: u64,
    problems: &mut Vec<String>,
) -> TreeFiles {
    let mut verified = BTreeMap::new();
    let mut damaged = BTreeSet::new();
    let family = match read_stamp(fs) {
        Ok(stamp) => stamp.unwrap_or(0),
        Err(error) => {
            problems.push(format!("{what}: reading the stamp: {error}"));
            return TreeFiles::default();
        }
    };
    let mut directories = vec![(fs.root(), String::new())];
    while let Some((directory, path)) = directories.pop() {
        let mut cookie = 0;
        loop {
            let entries = match fs.readdir(directory, cookie, 256) {
                Ok(entries) => entries,
                Err(error) => {
                    problems.push(format!("{what}:{path}/: readdir: {error}"));
                    break;
                }
            };
            let Some(last) = entries.last() else { break };
            cookie = last.next_cookie;
            for entry in entries {
                let name = String::from_utf8_lossy(&entry.name).into_owned();
                if name == "." || name == ".." || entry.name == STAMP_NAME {
                    continue;
                }
                let child_path = format!("{path}/{name}");
                match entry.kind {
                    FileKind::Directory => directories.push((entry.ino, child_path)),
                    FileKind::Regular => match verify_file(fs, family, entry.ino, newest_round) {
                        Ok(contents) => {
                            verified.insert(entry.ino, contents);
                        }
                        Err(why) => {
                            problems.push(format!("{what}:{child_path}: {why}"));
                            damaged.insert(entry.ino);
                        }
                    },
                    kind => problems.push(format!(
                        "{what}:{child_path}: a {kind:?}, which the tool never makes"
                    )),
                }
            }
        }
    }
    TreeFiles { verified, damaged }
}

/// What [`verify_pool`] looked at, and what it found wrong.
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// Inconsistencies (empty when all is well).
    pub problems: Vec<String>,
    /// File systems and snapshots read.
    pub trees: u64,
    /// Regular files read whole.
    pub files: u64,
    /// Tagged blocks that verified (holes not counted).
    pub blocks: u64,
    /// Promises checked.
    pub promises: u64,
}

/// The whole after-crash verification of an imported pool: every file system and snapshot
/// the tool made, block by block, then every promise still in force.
pub fn verify_pool(pool: &Pool, promises: &Promises, newest_round: u64) -> Verification {
    let mut verification = Verification::default();
    let mut count = |files: &TreeFiles| {
        verification.trees += 1;
        verification.files += files.verified.len() as u64;
        verification.blocks += files
            .verified
            .values()
            .flat_map(|contents| &contents.generations)
            .filter(|&&generation| generation != 0)
            .count() as u64;
    };
    let mut problems = Vec::new();
    for (name, why) in pool.unavailable_datasets() {
        problems.push(format!("{name}: unavailable after import: {why}"));
    }
    let mut heads: BTreeMap<String, TreeFiles> = BTreeMap::new();
    for info in pool.datasets() {
        if info.name == pool.name() {
            continue; // The root file system is not the tool's.
        }
        match pool.open_file_system(&info.name) {
            Ok(fs) => {
                let files = verify_tree(&fs, &info.name, newest_round, &mut problems);
                count(&files);
                heads.insert(info.name, files);
            }
            Err(error) => problems.push(format!("{}: cannot open: {error}", info.name)),
        }
    }
    for snapshot in pool.snapshots() {
        match pool.snapshot_file_system(&snapshot.name) {
            Ok(fs) => count(&verify_tree(
                &fs,
                &snapshot.name,
                newest_round,
                &mut problems,
            )),
            Err(error) => problems.push(format!("{}: cannot open: {error}", snapshot.name)),
        }
    }
    check_promises(&heads, promises, &mut problems);
    verification.promises = promises.files.len() as u64;
    verification.problems = problems;
    verification
}

/// Judgment 2 of the module documentation, against the files [`verify_tree`] found.
fn check_promises(
    heads: &BTreeMap<String, TreeFiles>,
    promises: &Promises,
    problems: &mut Vec<String>,
) {
    for ((dataset, ino), promise) in &promises.files {
        let Some(files) = heads.get(dataset) else {
            problems.push(format!(
                "{dataset}: gone, but inode {ino} in it was fsynced and no destroy was started"
            ));
            continue;
        };
        if files.damaged.contains(ino) {
            continue; // Reported already, block by block.
        }
        let Some(found) = files.verified.get(ino) else {
            problems.push(format!(
                "{dataset}: inode {ino} was fsynced ({} bytes) and is gone",
                promise.size
            ));
            continue;
        };
        if found.birth != promise.birth {
            problems.push(format!(
                "{dataset}: inode {ino} was fsynced as the file born at {}, now holds one born at {}",
                promise.birth, found.birth
            ));
            continue;
        }
        if found.size < promise.size {
            problems.push(format!(
                "{dataset}: inode {ino} was fsynced at {} bytes, now {} bytes",
                promise.size, found.size
            ));
        }
        for (index, &promised) in promise.generations.iter().enumerate() {
            let now = found.generations.get(index).copied().unwrap_or(0);
            if promised != 0 && now < promised {
                problems.push(format!(
                    "{dataset}: inode {ino} block {index}: fsynced with generation {promised:#x}, now {}",
                    if now == 0 { "a hole".to_string() } else { format!("{now:#x} (stale)") }
                ));
            }
        }
    }
}
