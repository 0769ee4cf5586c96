//! The journal: what the child tells the parent about durability, one line a record.
//!
//! # Theory
//! The parent can only check "an fsynced file holds at least what its fsync promised" if it
//! knows what was promised, and the child that knew is dead. So the child appends a record to
//! a file as soon as a promise is made (after `fsync` returned, with the file's contents read
//! back), and before any operation that may rightly take a promise back (a truncate, a punch,
//! an unlink, a replacing rename, a rollback or a destroy). A record is one `write(2)` of one
//! whole line, so a SIGKILL leaves at most one line cut short, which the parent drops (it
//! ends without a newline) and cuts off the file before the next child appends.
//!
//! The journal is not fsynced: the crashes this tool makes are SIGKILLs of the child process,
//! after which the host's page cache still holds every line written, and power cuts of the
//! pool's devices only (the device model of `child::power`), not of the host. A child that
//! cuts its devices' power seals its journal first ([`JournalWriter::seal`]): an fsync that
//! returns after the cut (the stopped devices report success for every write they drop)
//! promises nothing.
//!
//! # Records
//! ```text
//! fsync DATASET INO BIRTH SIZE GEN,GEN,...     promise: file INO of DATASET (born at BIRTH,
//!                                              see `tag`) is at least SIZE bytes and block i
//!                                              holds generation >= GEN_i (0: a hole, no promise)
//! forget DATASET INO                           an operation that may shrink the file follows
//! drop DATASET                                 a rollback or destroy of DATASET follows
//! drop-all                                     a rewind import follows
//! rename OLD NEW                               a rename of file system OLD to NEW follows:
//!                                              the promises of OLD (and of its descendants)
//!                                              move to NEW, and OLD is still accepted for
//!                                              them (a crash may come before the rename)
//! renamed NAME                                 the rename to NAME is settled: only NAME now
//! sent GUID DIGEST SNAPSHOT                    a send of SNAPSHOT (guid GUID, hex) follows;
//!                                              its tree's digest is DIGEST (see `oracle`)
//! received KIND GUID TARGET                    a receive (full, incremental, resumed) of the
//!                                              snapshot GUID into TARGET ended and verified
//! failure MESSAGE                              the child found an inconsistency while running
//! ```
//! Dataset names are the tool's own (`POOL/ds…`, `POOL/c…`, `replica/r…`) and contain no
//! spaces.
//!
//! The parent appends records too, between children: after a crash it settles each rename
//! left unsettled by the name the pool holds (`rename`, `renamed`), so that the promises
//! follow the file system whichever side of the rename the crash fell on.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// What one fsync promised about one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promise {
    pub birth: u64,
    pub size: u64,
    /// Per tagged block: the generation it held at the fsync (0 for a hole).
    pub generations: Vec<u64>,
}

/// The child's side: appends records.
pub struct JournalWriter {
    /// The file, and whether the journal is sealed (records are dropped from then on).
    file: Mutex<(File, bool)>,
}

impl JournalWriter {
    pub fn open(path: &Path) -> std::io::Result<JournalWriter> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(JournalWriter {
            file: Mutex::new((file, false)),
        })
    }

    /// Append no more records: what happens after this is not to be promised.
    pub fn seal(&self) {
        self.file.lock().1 = true;
    }

    fn append(&self, line: String) {
        debug_assert!(!line.contains('\n'));
        let mut guard = self.file.lock();
        let (file, sealed) = &mut *guard;
        if *sealed {
            return;
        }
        // One write(2) per record: see the module documentation. A journal that cannot be
        // written makes every later check meaningless, so it ends the child.
        if let Err(error) = file.write_all(format!("{line}\n").as_bytes()) {
            eprintln!("tarn-stress child: cannot append to the journal: {error}");
            std::process::exit(crate::exit_status::EXIT_INTERNAL);
        }
    }

    pub fn fsynced(&self, dataset: &str, ino: u64, promise: &Promise) {
        let generations: Vec<String> = promise
            .generations
            .iter()
            .map(|generation| format!("{generation:x}"))
            .collect();
        self.append(format!(
            "fsync {dataset} {ino} {} {} {}",
            promise.birth,
            promise.size,
            if generations.is_empty() {
                "-".to_string()
            } else {
                generations.join(",")
            }
        ));
    }

    pub fn forget(&self, dataset: &str, ino: u64) {
        self.append(format!("forget {dataset} {ino}"));
    }

    pub fn drop_dataset(&self, dataset: &str) {
        self.append(format!("drop {dataset}"));
    }

    pub fn drop_everything(&self) {
        self.append("drop-all".to_string());
    }

    pub fn rename(&self, old: &str, new: &str) {
        self.append(format!("rename {old} {new}"));
    }

    pub fn renamed(&self, name: &str) {
        self.append(format!("renamed {name}"));
    }

    pub fn sent(&self, guid: u64, digest: &str, snapshot: &str) {
        self.append(format!("sent {guid:x} {digest} {snapshot}"));
    }

    pub fn received(&self, kind: ReceiveKind, guid: u64, target: &str) {
        self.append(format!("received {} {guid:x} {target}", kind.name()));
    }

    pub fn failure(&self, message: &str) {
        self.append(format!("failure {}", message.replace('\n', " | ")));
    }
}

/// How a snapshot reached the second pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveKind {
    Full,
    Incremental,
    /// A receive cut short, then resumed with its token (full or incremental).
    Resumed,
}

impl ReceiveKind {
    const ALL: [ReceiveKind; 3] = [
        ReceiveKind::Full,
        ReceiveKind::Incremental,
        ReceiveKind::Resumed,
    ];

    fn name(self) -> &'static str {
        match self {
            ReceiveKind::Full => "full",
            ReceiveKind::Incremental => "incremental",
            ReceiveKind::Resumed => "resumed",
        }
    }
}

/// A snapshot sent: what its copies must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The digest of its tree ([`crate::oracle::tree_digest`]).
    pub digest: String,
    /// Its name when first sent, for messages.
    pub name: String,
}

/// The parent's side: the promises in force, built from every record so far.
#[derive(Default)]
pub struct Promises {
    /// (dataset, ino) to the newest promise.
    pub files: BTreeMap<(String, u64), Promise>,
    /// Renames not settled: the new name to the old one, either of which the pool may hold.
    pub renames: BTreeMap<String, String>,
    /// Snapshots sent, by guid (a received copy keeps its source's guid).
    pub sent: BTreeMap<u64, Sent>,
    /// Receives that ended and verified, by kind (full, incremental, resumed).
    pub receives: [u64; 3],
    /// Inconsistencies the children reported while running.
    pub failures: Vec<String>,
    /// Bytes of the journal already read.
    consumed: u64,
}

/// A journal line that does not parse: the tool's own bug.
fn bad_record(line: &str) -> String {
    format!("journal record does not parse: {line:?}")
}

impl Promises {
    /// Read the records appended since the last call, drop a last line cut short by a kill
    /// (truncating the file there, so that the next child starts on a fresh line), and apply
    /// them in order.
    pub fn catch_up(&mut self, path: &Path) -> Result<(), String> {
        let describe = |error: std::io::Error| format!("journal {}: {error}", path.display());
        let mut file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(describe(error)),
        };
        file.seek(SeekFrom::Start(self.consumed))
            .map_err(describe)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(describe)?;
        let whole = text.rfind('\n').map_or(0, |at| at + 1);
        if whole < text.len() {
            file.set_len(self.consumed + whole as u64)
                .map_err(describe)?;
        }
        for line in text[..whole].lines() {
            self.apply(line)?;
        }
        self.consumed += whole as u64;
        Ok(())
    }

    fn apply(&mut self, line: &str) -> Result<(), String> {
        let words: Vec<&str> = line.split(' ').collect();
        let number = |word: &str| word.parse::<u64>().map_err(|_| bad_record(line));
        match words.as_slice() {
            ["fsync", dataset, ino, birth, size, generations] => {
                let generations = if *generations == "-" {
                    Vec::new()
                } else {
                    generations
                        .split(',')
                        .map(|word| u64::from_str_radix(word, 16).map_err(|_| bad_record(line)))
                        .collect::<Result<Vec<u64>, String>>()?
                };
                self.files.insert(
                    (dataset.to_string(), number(ino)?),
                    Promise {
                        birth: number(birth)?,
                        size: number(size)?,
                        generations,
                    },
                );
            }
            ["forget", dataset, ino] => {
                self.files.remove(&(dataset.to_string(), number(ino)?));
            }
            ["drop", dataset] => {
                self.files.retain(|(name, _), _| name != dataset);
            }
            ["drop-all"] => self.files.clear(),
            ["rename", old, new] => {
                let moved: Vec<(String, u64)> = (self.files.keys())
                    .filter(|(name, _)| within(name, old).is_some())
                    .cloned()
                    .collect();
                for key in moved {
                    let promise = self.files.remove(&key).expect("listed");
                    let rest = within(&key.0, old).expect("listed");
                    self.files.insert((format!("{new}{rest}"), key.1), promise);
                }
                self.renames.remove(*old);
                self.renames.insert(new.to_string(), old.to_string());
            }
            ["renamed", name] => {
                self.renames.remove(*name);
            }
            ["sent", guid, digest, name] => {
                let guid = u64::from_str_radix(guid, 16).map_err(|_| bad_record(line))?;
                let sent = Sent {
                    digest: digest.to_string(),
                    name: name.to_string(),
                };
                match self.sent.get(&guid) {
                    Some(known) if known.digest != sent.digest => self.failures.push(format!(
                        "snapshot guid {guid:#x} was sent as {} with digest {}, and now as {} \
                         with digest {}: one snapshot, two contents",
                        known.name, known.digest, sent.name, sent.digest
                    )),
                    Some(_) => {}
                    None => {
                        self.sent.insert(guid, sent);
                    }
                }
            }
            ["received", kind, guid, _target] => {
                let index = (ReceiveKind::ALL.iter())
                    .position(|known| known.name() == *kind)
                    .ok_or_else(|| bad_record(line))?;
                u64::from_str_radix(guid, 16).map_err(|_| bad_record(line))?;
                self.receives[index] += 1;
            }
            ["failure", ..] => self.failures.push(line["failure ".len()..].to_string()),
            _ => return Err(bad_record(line)),
        }
        Ok(())
    }
}

/// The part of `name` after `top` when `name` is `top` or one of its descendants.
fn within<'a>(name: &'a str, top: &str) -> Option<&'a str> {
    name.strip_prefix(top)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl Promises {
    /// The name under which promises about `dataset` are kept may be the new name of a
    /// rename not settled: the names the pool may hold it under instead (the old one).
    pub fn other_names(&self, dataset: &str) -> Vec<String> {
        (self.renames.iter())
            .filter_map(|(new, old)| within(dataset, new).map(|rest| format!("{old}{rest}")))
            .collect()
    }

    /// Settle every rename left unsettled (by a crash) with the name the pool holds
    /// (`exists`), appending the records to the journal at `path`; the next
    /// [`Promises::catch_up`] applies them. Called by the parent between children.
    pub fn settle_renames(&self, path: &Path, exists: impl Fn(&str) -> bool) -> Result<(), String> {
        if self.renames.is_empty() {
            return Ok(());
        }
        let writer = JournalWriter::open(path)
            .map_err(|error| format!("journal {}: {error}", path.display()))?;
        for (new, old) in &self.renames {
            if !exists(new) && exists(old) {
                writer.rename(new, old);
                writer.renamed(old);
            } else {
                writer.renamed(new);
            }
        }
        Ok(())
    }
}

/// Where the journal of a run directory lives.
pub fn journal_path(dir: &Path) -> PathBuf {
    dir.join("journal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_apply_in_order_and_a_cut_line_is_dropped() {
        let dir = std::env::temp_dir().join(format!("tarn-stress-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = journal_path(&dir);
        let _ = std::fs::remove_file(&path);
        let promise = Promise {
            birth: 5,
            size: 8192,
            generations: vec![0x1_0000_0001, 0],
        };
        {
            let writer = JournalWriter::open(&path).unwrap();
            writer.fsynced("p/ds1", 7, &promise);
            writer.fsynced("p/ds1", 8, &promise);
            writer.forget("p/ds1", 8);
            writer.fsynced("p/ds2", 9, &promise);
        }
        let mut cut = OpenOptions::new().append(true).open(&path).unwrap();
        cut.write_all(b"fsync p/ds2 10 5 81").unwrap();
        let mut promises = Promises::default();
        promises.catch_up(&path).unwrap();
        assert_eq!(promises.files.len(), 2);
        assert_eq!(promises.files[&("p/ds1".to_string(), 7)], promise);
        JournalWriter::open(&path).unwrap().drop_dataset("p/ds1");
        promises.catch_up(&path).unwrap();
        assert_eq!(
            promises.files.keys().cloned().collect::<Vec<_>>(),
            vec![("p/ds2".to_string(), 9)]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rename_moves_promises_and_accepts_either_name_until_settled() {
        let dir = std::env::temp_dir().join(format!("tarn-stress-rename-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = journal_path(&dir);
        let _ = std::fs::remove_file(&path);
        let promise = Promise {
            birth: 5,
            size: 4096,
            generations: vec![0x1_0000_0001],
        };
        let writer = JournalWriter::open(&path).unwrap();
        writer.fsynced("p/a", 7, &promise);
        writer.fsynced("p/a/child", 8, &promise);
        writer.fsynced("p/ab", 9, &promise);
        writer.rename("p/a", "p/b");
        let mut promises = Promises::default();
        promises.catch_up(&path).unwrap();
        let keys: Vec<(String, u64)> = promises.files.keys().cloned().collect();
        assert_eq!(
            keys,
            vec![
                ("p/ab".to_string(), 9),
                ("p/b".to_string(), 7),
                ("p/b/child".to_string(), 8)
            ]
        );
        // The crash came before the engine's rename: the pool still says p/a.
        assert_eq!(promises.other_names("p/b/child"), vec!["p/a/child"]);
        assert!(promises.other_names("p/ab").is_empty());
        promises
            .settle_renames(&path, |name| name == "p/a" || name == "p/ab")
            .unwrap();
        promises.catch_up(&path).unwrap();
        assert!(promises.renames.is_empty());
        assert!(promises.files.contains_key(&("p/a/child".to_string(), 8)));
        assert!(promises.files.contains_key(&("p/a".to_string(), 7)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_snapshot_sent_with_two_digests_is_a_failure() {
        let mut promises = Promises::default();
        promises.apply("sent 1f 00aa p/a@s1").unwrap();
        promises.apply("sent 1f 00aa p/b@s1").unwrap();
        promises.apply("received resumed 1f replica/r1").unwrap();
        assert!(promises.failures.is_empty());
        assert_eq!(promises.receives, [0, 0, 1]);
        assert_eq!(promises.sent[&0x1f].name, "p/a@s1");
        promises.apply("sent 1f 00bb p/a@s1").unwrap();
        assert_eq!(promises.failures.len(), 1, "{:?}", promises.failures);
        assert!(promises.apply("received sideways 1f replica/r1").is_err());
    }
}
