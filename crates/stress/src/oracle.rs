//! The oracle: reading a file system back and judging every block by its tag.
//!
//! # Theory
//! Two judgments about the first pool, one used while running and both after a crash (a
//! third, about the second pool, is below):
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
//!    A rename the journal shows as started but not settled (a crash came between the record
//!    and the engine's rename, or just after it) leaves the promises under either name.
//!
//! # The file-system stamp
//! A tag names the file system its file was created in by a *family*: a random number the
//! tool writes, once, into the file `.stamp` at the root of each file system it creates, and
//! fsyncs before any other file is made there. A clone inherits the stamp with the rest of
//! its origin's contents, so blocks shared with the origin verify in the clone too; a
//! promote moves nothing. A block of one file system found in another (a different family)
//! is misplaced. A rename changes no family: the stamp is inside the file system.
//!
//! # Received snapshots
//! A stream carries a snapshot's objects as they are: the stamp, the inode numbers and the
//! birth times arrive with the blocks, so a copy's tags verify against the copy's own stamp,
//! which is its source's family. That says every block of the copy is a block of some file
//! of the source's family; it does not say the copy is its source. So a third judgment:
//! 3. *A received snapshot holds exactly what its source held* ([`verify_replica`]): before
//!    a send starts, the child reads the source snapshot back (every tag verified, under a
//!    short hold) and journals the digest of what it found ([`tree_digest`]: the stamp, and
//!    each file's path, inode, birth, size, per-block generation and tool xattrs, which with
//!    the places the tags name fix every byte) under the snapshot's guid, which every copy
//!    keeps. The copy must verify block by block and have that digest. Since the record is
//!    the journal's, not the source's, a copy whose source has since been destroyed, rolled
//!    away by a rewind or renamed is judged the same way; and a guid journaled twice with two
//!    digests (one snapshot that changed) is a failure of the first pool.
//!
//! A copy nothing receives into is also unchanged since its newest snapshot (nothing writes
//! to a copy), and a receive a crash left part-way is either gone (destroyed at import, as
//! the engine defines it) or kept with its resume token.

use std::collections::{BTreeMap, BTreeSet};

use tarn::fs::{FileKind, FileSystem, FsError};
use tarn::pool::Pool;

use crate::journal::{Promises, Sent};
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
    /// The tool's extended attributes: name, generation and length of the value (which with
    /// the file's place fix every byte of it, as a block's generation does).
    pub xattrs: Vec<(Vec<u8>, u64, usize)>,
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
        xattrs: Vec::new(),
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
        // Every other chunk (by inode and offset) is read as a mount answers a READ: the
        // blocks that hold it, shared with the cache, joined here.
        let data = if (ino + offset / READ_CHUNK as u64).is_multiple_of(2) {
            fs.read(ino, offset, length)
        } else {
            let mut pieces = Vec::new();
            fs.read_shared(ino, offset, length, &mut pieces).map(|()| {
                pieces
                    .iter()
                    .flat_map(|piece| piece.bytes())
                    .copied()
                    .collect()
            })
        }
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
        let generation = check_tag(&value, XATTR_OFFSET)?;
        if generation == 0 {
            return Err(format!(
                "inode {ino}: xattr {} is all zeros",
                String::from_utf8_lossy(&name)
            ));
        }
        contents.xattrs.push((name, generation, value.len()));
    }
    contents.xattrs.sort();
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
    /// The tree's stamp (0 without one).
    pub family: u64,
    /// The files that verified, with their contents.
    pub verified: BTreeMap<u64, FileContents>,
    /// The files that did not (each already reported).
    pub damaged: BTreeSet<u64>,
    /// Every regular file's path from the root (`/t0/f3`), with its inode number.
    pub paths: BTreeMap<String, u64>,
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
    let mut paths = BTreeMap::new();
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
                            paths.insert(child_path, entry.ino);
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
    TreeFiles {
        family,
        verified,
        damaged,
        paths,
    }
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

impl Verification {
    /// Count a tree read.
    fn count(&mut self, files: &TreeFiles) {
        self.trees += 1;
        self.files += files.verified.len() as u64;
        self.blocks += (files.verified.values())
            .flat_map(|contents| &contents.generations)
            .filter(|&&generation| generation != 0)
            .count() as u64;
    }
}

/// The whole after-crash verification of an imported pool: every file system and snapshot
/// the tool made, block by block, then every promise still in force.
pub fn verify_pool(pool: &Pool, promises: &Promises, newest_round: u64) -> Verification {
    let mut verification = Verification::default();
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
                verification.count(&files);
                heads.insert(info.name, files);
            }
            Err(error) => problems.push(format!("{}: cannot open: {error}", info.name)),
        }
    }
    for snapshot in pool.snapshots() {
        match pool.snapshot_file_system(&snapshot.name) {
            Ok(fs) => verification.count(&verify_tree(
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
        // A rename a crash left unsettled: the file system may hold either name.
        let files = heads
            .get(dataset)
            .or_else(|| (promises.other_names(dataset).iter()).find_map(|other| heads.get(other)));
        let Some(files) = files else {
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

/// The digest of a verified tree: its stamp, and every file's path, inode number, birth,
/// size, per-block generation and tool xattrs (name, generation, length). With the places
/// the tags name, these fix every byte the tool wrote, so two trees of one digest hold the
/// same files with the same bytes. 32 hex digits (the first 16 bytes of a BLAKE3 hash).
pub fn tree_digest(files: &TreeFiles) -> String {
    fn number(hasher: &mut blake3::Hasher, value: u64) {
        hasher.update(&value.to_le_bytes());
    }
    fn bytes(hasher: &mut blake3::Hasher, value: &[u8]) {
        number(hasher, value.len() as u64);
        hasher.update(value);
    }
    let mut hasher = blake3::Hasher::new();
    number(&mut hasher, files.family);
    number(&mut hasher, files.paths.len() as u64);
    for (path, &ino) in &files.paths {
        // (Every path listed is of a file that verified.)
        let Some(contents) = files.verified.get(&ino) else {
            continue;
        };
        bytes(&mut hasher, path.as_bytes());
        for value in [ino, contents.birth, contents.size] {
            number(&mut hasher, value);
        }
        number(&mut hasher, contents.generations.len() as u64);
        for &generation in &contents.generations {
            number(&mut hasher, generation);
        }
        number(&mut hasher, contents.xattrs.len() as u64);
        for (name, generation, length) in &contents.xattrs {
            bytes(&mut hasher, name);
            number(&mut hasher, *generation);
            number(&mut hasher, *length as u64);
        }
    }
    hasher.finalize().as_bytes()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The after-crash verification of the second pool, into which the child sends: every
/// received snapshot holds exactly what its source held when it was sent (its digest, as
/// the `sent` record of its guid gives it), block by block; a file system that is not
/// being received into is unchanged since its newest snapshot (nothing writes to a
/// replica); and a receive left part-way by a crash was either destroyed at import or is
/// kept with its resume token.
pub fn verify_replica(pool: &Pool, promises: &Promises, newest_round: u64) -> Verification {
    let mut verification = Verification::default();
    let mut problems = Vec::new();
    for (name, why) in pool.unavailable_datasets() {
        problems.push(format!("{name}: unavailable after import: {why}"));
    }
    for snapshot in pool.snapshots() {
        let Some(Sent { digest, name }) = promises.sent.get(&snapshot.guid) else {
            problems.push(format!(
                "{}: received, but no snapshot of its guid {:#x} was sent",
                snapshot.name, snapshot.guid
            ));
            continue;
        };
        let fs = match pool.snapshot_file_system(&snapshot.name) {
            Ok(fs) => fs,
            Err(error) => {
                problems.push(format!("{}: cannot open: {error}", snapshot.name));
                continue;
            }
        };
        let before = problems.len();
        let files = verify_tree(&fs, &snapshot.name, newest_round, &mut problems);
        verification.count(&files);
        let found = tree_digest(&files);
        if problems.len() == before && found != *digest {
            problems.push(format!(
                "{}: holds the tree of digest {found}, but its source {name} was sent with \
                 digest {digest}",
                snapshot.name
            ));
        }
    }
    for info in pool.datasets() {
        if info.name == pool.name() {
            continue;
        }
        match pool.is_inconsistent(&info.name) {
            Ok(true) => match tarn::send::resume_token(pool, &info.name) {
                Ok(Some(_)) => {}
                Ok(None) => problems.push(format!(
                    "{}: a receive left it part-way, without a resume token, and the import \
                     kept it",
                    info.name
                )),
                Err(error) => problems.push(format!("{}: resume token: {error}", info.name)),
            },
            Ok(false) => match pool.modified_since_newest_snapshot(&info.name) {
                Ok(false) => {}
                Ok(true) => problems.push(format!(
                    "{}: changed since its newest snapshot, but nothing writes to a replica",
                    info.name
                )),
                Err(error) => problems.push(format!("{}: {error}", info.name)),
            },
            Err(error) => problems.push(format!("{}: {error}", info.name)),
        }
    }
    verification.problems = problems;
    verification
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Promise;

    fn heads_with(dataset: &str, ino: u64, contents: FileContents) -> BTreeMap<String, TreeFiles> {
        let mut files = TreeFiles::default();
        files.paths.insert("/t0/f0".into(), ino);
        files.verified.insert(ino, contents);
        BTreeMap::from([(dataset.to_string(), files)])
    }

    #[test]
    fn a_promise_follows_an_unsettled_rename_under_either_name() {
        let contents = FileContents {
            birth: 5,
            size: 4096,
            generations: vec![0x1_0000_0002],
            xattrs: Vec::new(),
        };
        let mut promises = Promises::default();
        promises.files.insert(
            ("p/b".to_string(), 7),
            Promise {
                birth: 5,
                size: 4096,
                generations: vec![0x1_0000_0001],
            },
        );
        let mut problems = Vec::new();
        check_promises(
            &heads_with("p/a", 7, contents.clone()),
            &promises,
            &mut problems,
        );
        assert_eq!(
            problems.len(),
            1,
            "without the rename, p/b is gone: {problems:?}"
        );
        promises.renames.insert("p/b".into(), "p/a".into());
        for name in ["p/a", "p/b"] {
            let mut problems = Vec::new();
            check_promises(
                &heads_with(name, 7, contents.clone()),
                &promises,
                &mut problems,
            );
            assert!(problems.is_empty(), "{name}: {problems:?}");
        }
    }

    #[test]
    fn the_digest_sees_every_difference_the_tool_can_make() {
        let contents = FileContents {
            birth: 5,
            size: 8192,
            generations: vec![0x1_0000_0002, 0],
            xattrs: vec![(b"user.stress.0".to_vec(), 0x1_0000_0003, 100)],
        };
        let digest = |files: &TreeFiles| tree_digest(files);
        let base = heads_with("p/a", 7, contents.clone())
            .remove("p/a")
            .unwrap();
        let same = heads_with("p/b", 7, contents.clone())
            .remove("p/b")
            .unwrap();
        assert_eq!(digest(&base), digest(&same));
        let changes: [fn(&mut TreeFiles); 7] = [
            |files| files.family = 3,
            |files| {
                let ino = files.paths.remove("/t0/f0").unwrap();
                files.paths.insert("/t0/f1".into(), ino);
            },
            |files| files.verified.get_mut(&7).unwrap().size = 4096,
            |files| files.verified.get_mut(&7).unwrap().birth = 6,
            |files| files.verified.get_mut(&7).unwrap().generations[1] = 0x1_0000_0004,
            |files| files.verified.get_mut(&7).unwrap().xattrs[0].2 = 101,
            |files| files.verified.get_mut(&7).unwrap().xattrs.clear(),
        ];
        for (index, change) in changes.iter().enumerate() {
            let mut changed = heads_with("p/a", 7, contents.clone())
                .remove("p/a")
                .unwrap();
            change(&mut changed);
            assert_ne!(digest(&base), digest(&changed), "change {index}");
        }
    }
}
