//! Vdev specifications as zpool takes them on `pool create` and `pool add`: groups of data
//! vdevs (`PATH`, `mirror PATH PATH...` or `raidz[123] PATH...`), then optionally `log` followed by such groups and
//! `cache` followed by paths. Parsing only: the devices are checked and opened by `create.rs`
//! and `attach.rs`.

use std::path::PathBuf;

use super::PoolError;
use crate::vdev::TopVdevKind;

/// How to lay out the vdevs of a new pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VdevSpec {
    Leaf(PathBuf),
    Mirror(Vec<PathBuf>),
    /// `raidzP PATH...`: `parity` (1 to 3) columns of parity over the devices.
    Raidz {
        parity: u8,
        paths: Vec<PathBuf>,
    },
}

impl VdevSpec {
    pub fn paths(&self) -> Vec<PathBuf> {
        match self {
            VdevSpec::Leaf(path) => vec![path.clone()],
            VdevSpec::Mirror(paths) | VdevSpec::Raidz { paths, .. } => paths.clone(),
        }
    }

    /// The kind of top-level vdev this builds.
    pub fn kind(&self) -> TopVdevKind {
        match self {
            VdevSpec::Leaf(_) => TopVdevKind::Leaf,
            VdevSpec::Mirror(_) => TopVdevKind::Mirror,
            VdevSpec::Raidz { parity, .. } => TopVdevKind::Raidz { parity: *parity },
        }
    }

    /// The redundancy this vdev gives (zpool's replication check compares them).
    pub fn replication(&self) -> Replication {
        Replication::of(self.kind(), self.paths().len())
    }
}

/// A top-level vdev's redundancy, as zpool's "mismatched replication level" check compares
/// them: the kind and the width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    Single,
    Mirror(usize),
    Raidz { parity: u8, width: usize },
}

impl Replication {
    pub fn of(kind: TopVdevKind, width: usize) -> Replication {
        match kind {
            TopVdevKind::Raidz { parity } => Replication::Raidz { parity, width },
            _ if width == 1 => Replication::Single,
            _ => Replication::Mirror(width),
        }
    }
}

impl std::fmt::Display for Replication {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replication::Single => write!(formatter, "a single device"),
            Replication::Mirror(width) => write!(formatter, "a {width}-way mirror"),
            Replication::Raidz { parity, width } => {
                write!(formatter, "a {width}-wide raidz{parity}")
            }
        }
    }
}

/// The vdevs named on a `pool create` or `pool add` command line, by class: data vdevs (where
/// file data and metadata are allocated), log vdevs (the intent log's blocks only: the
/// allocator never puts other blocks there) and cache devices (the L2ARC: not part of the
/// pool's storage).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VdevLayout {
    pub data: Vec<VdevSpec>,
    pub log: Vec<VdevSpec>,
    pub cache: Vec<PathBuf>,
}

impl VdevLayout {
    /// Every device named, in order: data, log, cache.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.data
            .iter()
            .chain(&self.log)
            .flat_map(VdevSpec::paths)
            .chain(self.cache.iter().cloned())
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty() && self.log.is_empty() && self.cache.is_empty()
    }
}

/// Words of a vdev specification that are not device paths.
pub const VDEV_KEYWORDS: [&str; 10] = [
    "mirror", "raidz", "raidz1", "raidz2", "raidz3", "spare", "log", "cache", "special", "dedup",
];

/// The class the following groups of a vdev specification belong to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum VdevClassWord {
    Data,
    Log,
    Cache,
}

/// Parse a vdev specification as zpool takes it: `PATH... | mirror PATH PATH...` groups of
/// data vdevs, then optionally `log` followed by such groups, and `cache` followed by paths
/// (in any order; each class keyword switches the class of what follows it).
pub fn parse_vdev_layout(words: &[String]) -> Result<VdevLayout, PoolError> {
    let mut layout = VdevLayout::default();
    let mut class = VdevClassWord::Data;
    let mut class_word_without_devices: Option<&str> = None;
    let mut index = 0;
    while index < words.len() {
        let word = words[index].as_str();
        match word {
            "log" | "cache" => {
                if let Some(previous) = class_word_without_devices {
                    return Err(PoolError::BadVdevSpec(format!(
                        "{previous} requires at least one device"
                    )));
                }
                class = if word == "log" {
                    VdevClassWord::Log
                } else {
                    VdevClassWord::Cache
                };
                class_word_without_devices = Some(word);
                index += 1;
                continue;
            }
            "spare" | "special" | "dedup" => {
                return Err(PoolError::BadVdevSpec(format!(
                    "{word} vdevs are not supported yet"
                )));
            }
            _ => {}
        }
        class_word_without_devices = None;
        let raidz_parity = match word {
            "raidz" | "raidz1" => Some(1u8),
            "raidz2" => Some(2),
            "raidz3" => Some(3),
            _ => None,
        };
        let spec = if word == "mirror" || raidz_parity.is_some() {
            let mut children = Vec::new();
            index += 1;
            while index < words.len() && !VDEV_KEYWORDS.contains(&words[index].as_str()) {
                children.push(PathBuf::from(&words[index]));
                index += 1;
            }
            match raidz_parity {
                None if children.len() < 2 => {
                    return Err(PoolError::BadVdevSpec(
                        "a mirror needs at least two devices".into(),
                    ));
                }
                None => VdevSpec::Mirror(children),
                Some(parity) => {
                    let least = parity as usize + 1;
                    if children.len() < least {
                        return Err(PoolError::BadVdevSpec(format!(
                            "a raidz{parity} vdev needs at least {least} devices"
                        )));
                    }
                    if children.len() > crate::vdev::RAIDZ_CHILDREN_MAX {
                        return Err(PoolError::BadVdevSpec(format!(
                            "a raidz vdev takes at most {} devices",
                            crate::vdev::RAIDZ_CHILDREN_MAX
                        )));
                    }
                    VdevSpec::Raidz {
                        parity,
                        paths: children,
                    }
                }
            }
        } else {
            index += 1;
            VdevSpec::Leaf(PathBuf::from(word))
        };
        match (class, spec) {
            (VdevClassWord::Data, spec) => layout.data.push(spec),
            (VdevClassWord::Log, VdevSpec::Raidz { .. }) => {
                return Err(PoolError::BadVdevSpec(
                    "log devices cannot be raidz: use a single device or a mirror".into(),
                ))
            }
            (VdevClassWord::Log, spec) => layout.log.push(spec),
            (VdevClassWord::Cache, VdevSpec::Leaf(path)) => layout.cache.push(path),
            (VdevClassWord::Cache, VdevSpec::Mirror(_)) => {
                return Err(PoolError::BadVdevSpec(
                    "cache devices cannot be mirrored".into(),
                ))
            }
            (VdevClassWord::Cache, VdevSpec::Raidz { .. }) => {
                return Err(PoolError::BadVdevSpec(
                    "cache devices cannot be raidz".into(),
                ))
            }
        }
    }
    if let Some(previous) = class_word_without_devices {
        return Err(PoolError::BadVdevSpec(format!(
            "{previous} requires at least one device"
        )));
    }
    if layout.is_empty() {
        return Err(PoolError::BadVdevSpec("no devices given".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for path in layout.paths() {
        if !seen.insert(path.clone()) {
            return Err(PoolError::BadVdevSpec(format!(
                "{} is named twice",
                path.display()
            )));
        }
    }
    Ok(layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn leaf(path: &str) -> VdevSpec {
        VdevSpec::Leaf(PathBuf::from(path))
    }

    #[test]
    fn data_log_and_cache_groups_are_told_apart() {
        let layout = parse_vdev_layout(&words("c mirror a b log mirror d e cache g h")).unwrap();
        assert_eq!(
            layout.data,
            vec![leaf("c"), VdevSpec::Mirror(vec!["a".into(), "b".into()])]
        );
        assert_eq!(
            layout.log,
            vec![VdevSpec::Mirror(vec!["d".into(), "e".into()])]
        );
        assert_eq!(layout.cache, vec![PathBuf::from("g"), PathBuf::from("h")]);
        // A mirror's children end at a class keyword, not only at the next mirror.
        let layout = parse_vdev_layout(&words("mirror a b log c")).unwrap();
        assert_eq!(layout.data.len(), 1);
        assert_eq!(layout.log, vec![leaf("c")]);
        // Only logs (a `pool add`), classes in any order.
        let layout = parse_vdev_layout(&words("cache x log y")).unwrap();
        assert!(layout.data.is_empty());
        assert_eq!(layout.log, vec![leaf("y")]);
        assert_eq!(layout.cache, vec![PathBuf::from("x")]);
    }

    #[test]
    fn malformed_specifications_are_refused_with_the_reason() {
        let refused = |line: &str, expected: &str| {
            let error = parse_vdev_layout(&words(line)).unwrap_err().to_string();
            assert!(error.contains(expected), "{line:?}: {error}");
        };
        refused("a log", "log requires at least one device");
        refused("a log cache b", "log requires at least one device");
        refused("a cache", "cache requires at least one device");
        refused("a cache mirror b c", "cache devices cannot be mirrored");
        refused("a log mirror b", "a mirror needs at least two devices");
        refused("a log a", "named twice");
        refused("a cache a", "named twice");
        refused("a spare b", "spare vdevs are not supported yet");
        refused("raidz2 a b", "a raidz2 vdev needs at least 3 devices");
        refused("a log raidz b c", "log devices cannot be raidz");
        refused("a cache raidz b c", "cache devices cannot be raidz");
        let layout = parse_vdev_layout(&words("raidz a b c raidz3 d e f g log h")).unwrap();
        assert_eq!(
            layout.data,
            vec![
                VdevSpec::Raidz {
                    parity: 1,
                    paths: vec!["a".into(), "b".into(), "c".into()]
                },
                VdevSpec::Raidz {
                    parity: 3,
                    paths: vec!["d".into(), "e".into(), "f".into(), "g".into()]
                }
            ]
        );
        assert_eq!(layout.data[1].replication().to_string(), "a 4-wide raidz3");
        refused("", "no devices given");
    }
}
