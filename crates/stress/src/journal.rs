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
//! failure MESSAGE                              the child found an inconsistency while running
//! ```
//! Dataset names are the tool's own (`POOL/ds…`, `POOL/c…`) and contain no spaces.

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
            std::process::exit(crate::child::EXIT_INTERNAL);
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

    pub fn failure(&self, message: &str) {
        self.append(format!("failure {}", message.replace('\n', " | ")));
    }
}

/// The parent's side: the promises in force, built from every record so far.
#[derive(Default)]
pub struct Promises {
    /// (dataset, ino) to the newest promise.
    pub files: BTreeMap<(String, u64), Promise>,
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
            ["failure", ..] => self.failures.push(line["failure ".len()..].to_string()),
            _ => return Err(bad_record(line)),
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
}
