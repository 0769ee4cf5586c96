//! Model-based test of the file system layer: random namespace and data operations (create,
//! mkdir, symlink, link, unlink, rmdir, rename with and without flags, write, truncate) against
//! an in-memory tree that predicts each operation's outcome (success or which error), compared
//! in full every few steps and after every export and import, with `check` clean at the end.

use crate::common;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tarn::fs::{FileKind, FileSystem, FsError, SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE};

use common::*;

#[derive(Clone, Debug)]
enum Node {
    File(Vec<u8>),
    Symlink(Vec<u8>),
    Dir {
        entries: BTreeMap<String, u64>,
        parent: u64,
    },
}

struct Model {
    nodes: BTreeMap<u64, Node>,
    root: u64,
}

/// What an operation should give: Ok, or the error's variant name.
type Outcome = Result<(), &'static str>;

fn outcome<T>(result: Result<T, FsError>) -> Outcome {
    match result {
        Ok(_) => Ok(()),
        Err(FsError::NotFound) => Err("NotFound"),
        Err(FsError::Exists) => Err("Exists"),
        Err(FsError::NotDir) => Err("NotDir"),
        Err(FsError::IsDir) => Err("IsDir"),
        Err(FsError::NotEmpty) => Err("NotEmpty"),
        Err(FsError::Invalid(_)) => Err("Invalid"),
        Err(error) => panic!("unexpected error {error:?}"),
    }
}

impl Model {
    fn entries(&self, dir: u64) -> &BTreeMap<String, u64> {
        match &self.nodes[&dir] {
            Node::Dir { entries, .. } => entries,
            other => panic!("{dir} is not a directory: {other:?}"),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> &mut BTreeMap<String, u64> {
        match self.nodes.get_mut(&dir).unwrap() {
            Node::Dir { entries, .. } => entries,
            _ => panic!("not a directory"),
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes[&ino], Node::Dir { .. })
    }

    fn links(&self, ino: u64) -> u64 {
        if let Node::Dir { entries, .. } = &self.nodes[&ino] {
            return 2 + entries
                .values()
                .filter(|&&child| self.is_dir(child))
                .count() as u64;
        }
        self.nodes
            .values()
            .filter_map(|node| match node {
                Node::Dir { entries, .. } => Some(entries.values().filter(|&&c| c == ino).count()),
                _ => None,
            })
            .sum::<usize>() as u64
    }

    fn directories(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .filter(|(_, node)| matches!(node, Node::Dir { .. }))
            .map(|(&ino, _)| ino)
            .collect()
    }

    fn is_ancestor(&self, ancestor: u64, mut dir: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == self.root {
                return false;
            }
            dir = match &self.nodes[&dir] {
                Node::Dir { parent, .. } => *parent,
                _ => unreachable!(),
            };
        }
    }

    /// Drop `ino` if nothing names it any more.
    fn collect(&mut self, ino: u64) {
        if !self.is_dir(ino) && self.links(ino) == 0 {
            self.nodes.remove(&ino);
        }
    }

    fn rename(&mut self, od: u64, on: &str, nd: u64, nn: &str, flags: u32) -> Outcome {
        let exchange = flags & RENAME_EXCHANGE != 0;
        let Some(&source) = self.entries(od).get(on) else {
            return Err("NotFound");
        };
        let target = self.entries(nd).get(nn).copied();
        if flags & RENAME_NOREPLACE != 0 && target.is_some() {
            return Err("Exists");
        }
        if exchange && target.is_none() {
            return Err("NotFound");
        }
        if target == Some(source) {
            return Ok(());
        }
        let source_dir = self.is_dir(source);
        let target_dir = target.is_some_and(|t| self.is_dir(t));
        if od != nd {
            if source_dir && self.is_ancestor(source, nd) {
                return Err("Invalid");
            }
            if exchange && target_dir && self.is_ancestor(target.unwrap(), od) {
                return Err("Invalid");
            }
        }
        if let (Some(target), false) = (target, exchange) {
            match (source_dir, target_dir) {
                (true, false) => return Err("NotDir"),
                (false, true) => return Err("IsDir"),
                _ => {}
            }
            if target_dir && !self.entries(target).is_empty() {
                return Err("NotEmpty");
            }
        }
        let set_parent = |model: &mut Model, ino: u64, to: u64| {
            if let Node::Dir { parent, .. } = model.nodes.get_mut(&ino).unwrap() {
                *parent = to;
            }
        };
        if exchange {
            let target = target.unwrap();
            self.entries_mut(od).insert(on.into(), target);
            self.entries_mut(nd).insert(nn.into(), source);
            set_parent(self, source, nd);
            set_parent(self, target, od);
        } else {
            self.entries_mut(od).remove(on);
            self.entries_mut(nd).insert(nn.into(), source);
            set_parent(self, source, nd);
            if let Some(target) = target {
                if target_dir {
                    self.nodes.remove(&target);
                } else {
                    self.collect(target);
                }
            }
        }
        Ok(())
    }
}

fn compare(fs: &FileSystem, model: &Model, step: usize) {
    for (&ino, node) in &model.nodes {
        let attr = fs
            .getattr(ino)
            .unwrap_or_else(|e| panic!("step {step}: getattr {ino}: {e}"));
        assert_eq!(attr.nlink, model.links(ino), "step {step}: links of {ino}");
        match node {
            Node::File(data) => {
                assert_eq!(attr.kind, FileKind::Regular);
                assert_eq!(attr.size, data.len() as u64, "step {step}: size of {ino}");
                assert_eq!(
                    &fs.read(ino, 0, data.len() + 10).unwrap(),
                    data,
                    "step {step}"
                );
            }
            Node::Symlink(target) => {
                assert_eq!(&fs.readlink(ino).unwrap(), target, "step {step}");
            }
            Node::Dir { entries, parent } => {
                assert_eq!(
                    attr.size,
                    entries.len() as u64,
                    "step {step}: size of {ino}"
                );
                let mut listed = BTreeMap::new();
                let mut cookie = 0;
                loop {
                    let page = fs.readdir(ino, cookie, 5).unwrap();
                    let Some(last) = page.last() else { break };
                    cookie = last.next_cookie;
                    for entry in page {
                        listed.insert(String::from_utf8(entry.name).unwrap(), entry.ino);
                    }
                }
                assert_eq!(listed.remove("."), Some(ino));
                assert_eq!(
                    listed.remove(".."),
                    Some(*parent),
                    "step {step}: parent of {ino}"
                );
                assert_eq!(&listed, entries, "step {step}: entries of {ino}");
            }
        }
    }
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pool = create_pool(dir.path(), "fsmodel", single(dir.path(), "d0"), tiny());
    let mut fs = pool.file_system().unwrap();
    let root = fs.root();
    let mut model = Model {
        nodes: [(
            root,
            Node::Dir {
                entries: BTreeMap::new(),
                parent: root,
            },
        )]
        .into_iter()
        .collect(),
        root,
    };
    let names = ["a", "b", "c", "d", "e"];
    for step in 0..steps {
        let dirs = model.directories();
        let d1 = dirs[rng.gen_range(0..dirs.len())];
        let d2 = dirs[rng.gen_range(0..dirs.len())];
        let n1 = names[rng.gen_range(0..names.len())];
        let n2 = names[rng.gen_range(0..names.len())];
        let existing = model.entries(d1).get(n1).copied();
        let (expected, actual): (Outcome, Outcome) = match rng.gen_range(0..100) {
            0..=14 => {
                let result = fs.create(d1, n1.as_bytes(), 0o644, 0, 0);
                let expected = if existing.is_some() {
                    Err("Exists")
                } else {
                    Ok(())
                };
                if let Ok(attr) = &result {
                    model.nodes.insert(attr.ino, Node::File(Vec::new()));
                    model.entries_mut(d1).insert(n1.into(), attr.ino);
                }
                (expected, outcome(result))
            }
            15..=26 => {
                let result = fs.mkdir(d1, n1.as_bytes(), 0o755, 0, 0);
                let expected = if existing.is_some() {
                    Err("Exists")
                } else {
                    Ok(())
                };
                if let Ok(attr) = &result {
                    let node = Node::Dir {
                        entries: BTreeMap::new(),
                        parent: d1,
                    };
                    model.nodes.insert(attr.ino, node);
                    model.entries_mut(d1).insert(n1.into(), attr.ino);
                }
                (expected, outcome(result))
            }
            27..=30 => {
                let target = vec![b't'; rng.gen_range(1..400)];
                let result = fs.symlink(d1, n1.as_bytes(), &target, 0, 0);
                let expected = if existing.is_some() {
                    Err("Exists")
                } else {
                    Ok(())
                };
                if let Ok(attr) = &result {
                    model.nodes.insert(attr.ino, Node::Symlink(target));
                    model.entries_mut(d1).insert(n1.into(), attr.ino);
                }
                (expected, outcome(result))
            }
            31..=38 => {
                let expected = match existing {
                    None => Err("NotFound"),
                    Some(ino) if model.is_dir(ino) => Err("IsDir"),
                    Some(ino) => {
                        model.entries_mut(d1).remove(n1);
                        model.collect(ino);
                        Ok(())
                    }
                };
                (expected, outcome(fs.unlink(d1, n1.as_bytes())))
            }
            39..=44 => {
                let expected = match existing {
                    None => Err("NotFound"),
                    Some(ino) if !model.is_dir(ino) => Err("NotDir"),
                    Some(ino) if !model.entries(ino).is_empty() => Err("NotEmpty"),
                    Some(ino) => {
                        model.entries_mut(d1).remove(n1);
                        model.nodes.remove(&ino);
                        Ok(())
                    }
                };
                (expected, outcome(fs.rmdir(d1, n1.as_bytes())))
            }
            45..=52 => {
                let Some(ino) = existing else { continue };
                let expected = if model.is_dir(ino) {
                    Err("IsDir")
                } else if model.entries(d2).contains_key(n2) {
                    Err("Exists")
                } else {
                    model.entries_mut(d2).insert(n2.into(), ino);
                    Ok(())
                };
                (expected, outcome(fs.link(ino, d2, n2.as_bytes())))
            }
            53..=74 => {
                let flags = [0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE][rng.gen_range(0..4)];
                let expected = model.rename(d1, n1, d2, n2, flags);
                let actual = outcome(fs.rename(d1, n1.as_bytes(), d2, n2.as_bytes(), flags));
                (expected, actual)
            }
            75..=89 => {
                let Some(ino) = existing else { continue };
                let Node::File(data) = model.nodes.get_mut(&ino).unwrap() else {
                    continue;
                };
                let offset = rng.gen_range(0..20_000usize);
                let bytes = pattern(rng.gen(), rng.gen_range(1..9_000));
                if data.len() < offset + bytes.len() {
                    data.resize(offset + bytes.len(), 0);
                }
                data[offset..offset + bytes.len()].copy_from_slice(&bytes);
                (Ok(()), outcome(fs.write(ino, offset as u64, &bytes)))
            }
            90..=96 => {
                let Some(ino) = existing else { continue };
                let Node::File(data) = model.nodes.get_mut(&ino).unwrap() else {
                    continue;
                };
                let size = rng.gen_range(0..25_000usize);
                data.resize(size, 0);
                let changes = SetAttr {
                    size: Some(size as u64),
                    ..SetAttr::default()
                };
                (Ok(()), outcome(fs.setattr(ino, changes)))
            }
            _ => {
                if rng.gen_bool(0.5) {
                    drop(fs);
                    pool.export().unwrap();
                    pool = import(dir.path(), "fsmodel", tiny());
                } else {
                    pool.sync().unwrap();
                }
                fs = FileSystem::open(pool.root_objset(), pool.core.txgs.clone()).unwrap();
                compare(&fs, &model, step);
                continue;
            }
        };
        assert_eq!(actual, expected, "step {step}");
        if step % 25 == 0 {
            compare(&fs, &model, step);
        }
    }
    compare(&fs, &model, steps);
    assert!(model.nodes.len() > 5, "the tree stayed trivial");
    assert_clean(&pool);
    drop(fs);
    pool.export().unwrap();
}

#[test]
fn model_seed_1() {
    run(1, 1500);
}

#[test]
fn model_seed_2() {
    run(2, 1500);
}

#[test]
fn model_seed_3() {
    run(3, 1500);
}
