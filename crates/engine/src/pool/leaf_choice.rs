//! Which device to open for each leaf of a pool being imported, when the scan found more than
//! one device carrying the same leaf guid (a `cp` or `dd` of a vdev image, a disk cloned by
//! hand, or a stale copy left next to the real one).
//!
//! Before this, the last path in sort order won, and an import could mix the leaves of two
//! copies of one pool, or open the stale copy and relabel it. OpenZFS tells such devices apart
//! by their label's txg (`vdev_validate`, the label txg against the config's) and its host
//! name. Here: of the devices with one leaf guid, the one whose newest valid label has the
//! highest txg is the leaf; the others are reported (never opened, never written). When the
//! highest txg is shared by devices whose labels say the same thing (same txg, same host),
//! they cannot be told apart and the import is refused with a message naming every path, so
//! that the user moves the copies away or names a directory holding only one of them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::vdev::scan::FoundLeaf;

use super::PoolError;

/// The order in which copies of one leaf are preferred: the newest label txg first, then by
/// path (the listing of `pool import` shows the copy that import opens).
pub(super) fn newest_first(a: &FoundLeaf, b: &FoundLeaf) -> std::cmp::Ordering {
    b.config.txg.cmp(&a.config.txg).then(a.path.cmp(&b.path))
}

/// The devices chosen for the leaves of pool `pool_guid`, by leaf guid, and a warning for
/// every device passed over.
pub(super) fn choose_leaves(
    name: &str,
    pool_guid: u64,
    found: Vec<FoundLeaf>,
) -> Result<(BTreeMap<u64, PathBuf>, Vec<String>), PoolError> {
    let mut by_guid: BTreeMap<u64, Vec<FoundLeaf>> = BTreeMap::new();
    for leaf in found {
        if leaf.config.pool_guid == pool_guid {
            by_guid.entry(leaf.config.leaf_guid).or_default().push(leaf);
        }
    }
    let mut chosen = BTreeMap::new();
    let mut warnings = Vec::new();
    for (guid, mut devices) in by_guid {
        devices.sort_by(newest_first);
        let newest = devices.remove(0);
        let tied: Vec<&FoundLeaf> = devices
            .iter()
            .filter(|other| other.config.txg == newest.config.txg)
            .collect();
        if !tied.is_empty() {
            let paths: Vec<String> = std::iter::once(&newest)
                .chain(tied.iter().copied())
                .map(|leaf| format!("{} (host {:?})", leaf.path.display(), leaf.config.hostname))
                .collect();
            return Err(PoolError::Refused(format!(
                "pool {name:?}: devices {} carry the same vdev (guid {guid}) with labels of the same txg {}: one is a copy of the other and they cannot be told apart; move the copies away or name a directory with -d that holds only one",
                paths.join(" and "),
                newest.config.txg
            )));
        }
        for other in &devices {
            warnings.push(format!(
                "device {} is an older copy of vdev {} (guid {guid}; its label txg {} on host {:?}, the newest {} on host {:?}): not used",
                other.path.display(),
                newest.path.display(),
                other.config.txg,
                other.config.hostname,
                newest.config.txg,
                newest.config.hostname
            ));
        }
        chosen.insert(guid, newest.path);
    }
    Ok((chosen, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::label::tests::sample_config;

    fn leaf(path: &str, leaf_guid: u64, txg: u64) -> FoundLeaf {
        let mut config = sample_config(txg);
        config.leaf_guid = leaf_guid;
        FoundLeaf {
            path: PathBuf::from(path),
            config,
            uberblock_slots: Vec::new(),
        }
    }

    #[test]
    fn the_newest_copy_wins_and_the_older_is_named() {
        let pool_guid = sample_config(1).pool_guid;
        let (chosen, warnings) = choose_leaves(
            "p",
            pool_guid,
            vec![
                leaf("/a/copy.img", 7, 10),
                leaf("/b/real.img", 7, 12),
                leaf("/b/other.img", 8, 12),
            ],
        )
        .unwrap();
        assert_eq!(chosen[&7], PathBuf::from("/b/real.img"));
        assert_eq!(chosen[&8], PathBuf::from("/b/other.img"));
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("/a/copy.img"), "{}", warnings[0]);
    }

    #[test]
    fn identical_copies_are_refused_naming_both() {
        let pool_guid = sample_config(1).pool_guid;
        let error = choose_leaves(
            "p",
            pool_guid,
            vec![leaf("/a/x.img", 7, 10), leaf("/b/x.img", 7, 10)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("/a/x.img") && error.contains("/b/x.img"),
            "{error}"
        );
    }
}
