//! Quotas and reservations (`pool/limits.rs`): a quota stops a file system's writes with
//! "quota exceeded" exactly at its limit (what the txgs sync is never over it) and not much
//! before; a reservation keeps space from its siblings; `used`, `avail` and the used
//! breakdown follow zfs; limit changes zfs refuses are refused; `check` agrees with all of it
//! after export and import.

use crate::common;

use tarn::fs::{FileSystem, FsError};
use tarn::pool::datasets::DatasetInfo;
use tarn::Pool;

use common::*;

const MIB: u64 = 1 << 20;

fn info(pool: &Pool, name: &str) -> DatasetInfo {
    pool.datasets()
        .into_iter()
        .find(|info| info.name == name)
        .unwrap_or_else(|| panic!("no dataset {name}"))
}

/// Write incompressible 128 KiB pieces to a new file until refused; returns the bytes written
/// and the refusal.
fn fill(fs: &FileSystem, name: &str, limit: u64) -> (u64, FsError) {
    let ino = root_file(fs, name);
    let chunk = 128 << 10;
    let mut written = 0u64;
    loop {
        match fs.write(ino, written, &pattern(written ^ ino, chunk)) {
            Ok(length) => written += length as u64,
            Err(error) => return (written, error),
        }
        assert!(
            written <= limit,
            "{written} bytes accepted, more than {limit}"
        );
    }
}

/// Write `bytes` incompressible bytes to a new file, every write accepted.
fn write_file(fs: &FileSystem, name: &str, bytes: u64) {
    let ino = root_file(fs, name);
    let chunk = 128 << 10;
    for offset in (0..bytes).step_by(chunk) {
        fs.write(ino, offset, &pattern(offset ^ ino, chunk))
            .unwrap_or_else(|error| panic!("write at {offset} of {name}: {error}"));
    }
}

fn pool_with(dir: &std::path::Path, name: &str, datasets: &[&str]) -> Pool {
    let pool = create_pool(dir, name, single(dir, "a.img"), tiny());
    for dataset in datasets {
        pool.create_dataset(&format!("{name}/{dataset}"), &[], false)
            .unwrap();
        pool.set_property(&format!("{name}/{dataset}"), "compression", Some("off"))
            .unwrap();
    }
    pool
}

#[test]
fn a_quota_is_exact_and_not_early() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "q", &["a"]);
    pool.set_property("q/a", "quota", Some("8M")).unwrap();
    assert_eq!(
        pool.property("q/a", tarn::dataset::props::Property::Quota)
            .unwrap()
            .0,
        (8 * MIB).to_string()
    );
    let fs = pool.open_file_system("q/a").unwrap();
    let (written, refusal) = fill(&fs, "f", 8 * MIB);
    assert!(
        matches!(refusal, FsError::QuotaExceeded),
        "refused with {refusal}"
    );
    pool.sync().unwrap();
    let used = info(&pool, "q/a").used;
    eprintln!("quota 8 MiB: {written} bytes written, used {used}");
    assert!(used <= 8 * MIB, "used {used} is over the quota");
    // Not early: at most a write's charge, the object set's own blocks and the file's
    // metadata short of the quota.
    assert!(written >= 7 * MIB, "refused after {written} bytes of 8 MiB");
    assert_eq!(info(&pool, "q/a").available, 8 * MIB - used);
    // The write-back of a kernel cache is never refused by a quota (write(2) accepted it):
    // it is counted, and the quota's margin is what the mount holds back for it.
    let ino = root_file(&fs, "f");
    fs.write_from(
        ino,
        written,
        &pattern(written, 128 << 10),
        tarn::fs::WriteSource::WriteBack { after_loss: false },
    )
    .expect("a write-back at a full quota");
    // New names are charged too: creates stop at the full quota, and what synced stays
    // within it.
    let mut created = 0;
    let refusal = loop {
        match fs.create(fs.root(), format!("empty{created}").as_bytes(), 0o644, 0, 0) {
            Ok(_) => created += 1,
            Err(error) => break error,
        }
        assert!(created < 10_000, "{created} files created in a full quota");
    };
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    pool.sync().unwrap();
    let after_creates = info(&pool, "q/a").used;
    assert!(
        after_creates <= 8 * MIB,
        "used {after_creates} after {created} creates"
    );
    // Another file is refused too; a delete makes room again.
    fs.unlink(fs.root(), b"f").unwrap();
    pool.sync().unwrap();
    pool.sync().unwrap();
    write_file(&fs, "h", 4 * MIB);
    drop(fs);
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "q", tiny());
    assert_eq!(
        pool.property("q/a", tarn::dataset::props::Property::Quota)
            .unwrap()
            .0,
        (8 * MIB).to_string()
    );
    let fs = pool.open_file_system("q/a").unwrap();
    let (after_import, refusal) = fill(&fs, "i", 8 * MIB);
    assert!(matches!(refusal, FsError::QuotaExceeded));
    assert!(after_import < 4 * MIB + MIB);
    drop(fs);
    pool.sync().unwrap();
    assert!(info(&pool, "q/a").used <= 8 * MIB);
    assert_clean(&pool);
}

#[test]
fn a_parents_quota_counts_its_children_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "p", &["home", "home/x", "home/y"]);
    pool.set_property("p/home", "quota", Some("6M")).unwrap();
    let x = pool.open_file_system("p/home/x").unwrap();
    write_file(&x, "f", 3 * MIB);
    pool.create_snapshots(&["p/home/x@s".to_string()], false)
        .unwrap();
    // Overwrite what the snapshot holds: both copies count against the parent's quota.
    let ino = root_file(&x, "f");
    let mut rewritten = 0u64;
    let refusal = loop {
        match x.write(ino, rewritten, &pattern(rewritten + 7, 128 << 10)) {
            Ok(length) => rewritten += length as u64,
            Err(error) => break error,
        }
        assert!(rewritten <= 3 * MIB);
    };
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    let y = pool.open_file_system("p/home/y").unwrap();
    let (in_y, refusal) = fill(&y, "g", 6 * MIB);
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    assert!(
        in_y < MIB,
        "the sibling wrote {in_y} bytes into a full quota"
    );
    pool.sync().unwrap();
    let home = info(&pool, "p/home");
    assert!(home.used <= 6 * MIB, "used {} over the quota", home.used);
    assert!(info(&pool, "p/home/x").used_by_snapshots > 0);
    assert_eq!(info(&pool, "p/home/y").available, 6 * MIB - home.used);
    drop((x, y));
    assert_clean(&pool);
}

#[test]
fn refquota_limits_referenced_bytes_not_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "r", &["a"]);
    pool.set_property("r/a", "refquota", Some("4M")).unwrap();
    let fs = pool.open_file_system("r/a").unwrap();
    let (first, refusal) = fill(&fs, "f", 4 * MIB);
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    pool.create_snapshots(&["r/a@s".to_string()], false)
        .unwrap();
    fs.unlink(fs.root(), b"f").unwrap();
    pool.sync().unwrap();
    // The snapshot holds the old file; the dataset may reference 4 MiB again.
    let (second, _) = fill(&fs, "g", 4 * MIB);
    assert!(
        second + MIB >= first,
        "{second} bytes after the delete, {first} before"
    );
    pool.sync().unwrap();
    let a = info(&pool, "r/a");
    assert!(a.referenced <= 4 * MIB);
    assert!(
        a.used > 6 * MIB,
        "used {} should hold the snapshot too",
        a.used
    );
    drop(fs);
    assert_clean(&pool);
}

#[test]
fn a_reservation_takes_space_from_siblings() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "s", &["kept", "other"]);
    let before = info(&pool, "s/other").available;
    let reserved = before - 6 * MIB;
    pool.set_property("s/kept", "reservation", Some(&reserved.to_string()))
        .unwrap();
    let kept = info(&pool, "s/kept");
    let root = info(&pool, "s");
    assert!(
        root.used >= reserved,
        "the root's used {} lacks the reservation",
        root.used
    );
    assert!(root.used_by_children >= reserved);
    assert!(
        kept.available >= reserved,
        "kept can write {} of its {reserved}",
        kept.available
    );
    let other = info(&pool, "s/other");
    assert!(
        other.available <= 6 * MIB + (256 << 10),
        "other still sees {} available",
        other.available
    );
    let fs = pool.open_file_system("s/other").unwrap();
    let (written, refusal) = fill(&fs, "f", 7 * MIB);
    assert!(matches!(refusal, FsError::NoSpace), "{refusal}");
    assert!(written <= 6 * MIB + (256 << 10));
    // The reserved dataset still writes into its reservation.
    pool.sync().unwrap();
    let root = info(&pool, "s");
    let kept_fs = pool.open_file_system("s/kept").unwrap();
    let ino = root_file(&kept_fs, "f");
    for offset in (0..4 * MIB).step_by(128 << 10) {
        kept_fs
            .write(ino, offset, &pattern(offset, 128 << 10))
            .expect("write into the reservation");
    }
    pool.sync().unwrap();
    assert_eq!(
        info(&pool, "s").used,
        root.used,
        "writing inside a reservation changes no parent's used"
    );
    drop((fs, kept_fs));
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "s", tiny());
    assert!(info(&pool, "s/other").available <= 6 * MIB + (256 << 10));
    assert_clean(&pool);
}

#[test]
fn refreservation_counts_what_the_dataset_does_not_fill() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "v", &["a"]);
    pool.set_property("v/a", "refreservation", Some("5M"))
        .unwrap();
    let a = info(&pool, "v/a");
    assert_eq!(a.used_by_refreservation, 5 * MIB - a.used_by_dataset);
    assert_eq!(a.used, a.used_by_dataset + a.used_by_refreservation);
    let fs = pool.open_file_system("v/a").unwrap();
    let ino = root_file(&fs, "f");
    fs.write(ino, 0, &pattern(1, 2 << 20)).unwrap();
    pool.sync().unwrap();
    let a = info(&pool, "v/a");
    assert_eq!(
        a.used,
        5 * MIB,
        "filling the refreservation leaves used where it was"
    );
    assert_eq!(a.used_by_refreservation, 5 * MIB - a.used_by_dataset);
    // A snapshot shares every byte: the whole refreservation is unfilled again (zfs's rule:
    // what the dataset references can still be overwritten).
    pool.create_snapshots(&["v/a@s".to_string()], false)
        .unwrap();
    let a = info(&pool, "v/a");
    assert_eq!(a.used_by_refreservation, 5 * MIB);
    assert_eq!(a.used, a.used_by_dataset + 5 * MIB);
    // Under a parent quota that cannot take that again, the next snapshot is refused.
    let used = info(&pool, "v").used;
    pool.set_property("v", "quota", Some(&(used + MIB).to_string()))
        .unwrap();
    let ino = root_file(&fs, "f");
    fs.write(ino, 0, &pattern(2, 2 << 20)).unwrap();
    pool.sync().unwrap();
    let error = pool
        .create_snapshots(&["v/a@t".to_string()], false)
        .unwrap_err();
    assert!(error.to_string().contains("refreservation"), "{error}");
    drop(fs);
    assert_clean(&pool);
}

/// `set PROPERTY=VALUE` on `dataset` is refused with a message containing `why`.
fn refused(pool: &Pool, dataset: &str, property: &str, value: &str, why: &str) {
    let error = pool
        .set_property(dataset, property, Some(value))
        .unwrap_err();
    assert!(error.to_string().contains(why), "{error}");
}

#[test]
fn limit_changes_zfs_refuses_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "z", &["a", "b"]);
    let fs = pool.open_file_system("z/a").unwrap();
    let ino = root_file(&fs, "f");
    fs.write(ino, 0, &pattern(1, 2 << 20)).unwrap();
    drop(fs);
    refused(&pool, "z/a", "quota", "1M", "less than current used");
    refused(&pool, "z/a", "refquota", "1M", "less than current used");
    refused(&pool, "z/b", "reservation", "10G", "greater than available");
    refused(
        &pool,
        "z/b",
        "refreservation",
        "10G",
        "greater than available",
    );
    pool.set_property("z/b", "quota", Some("4M")).unwrap();
    refused(&pool, "z/b", "reservation", "5M", "greater than available");
    pool.set_property("z/b", "reservation", Some("3M")).unwrap();
    refused(&pool, "z/b", "quota", "2M", "less than current used");
    assert!(pool.set_property("z/b", "quota", Some("lots")).is_err());
    // none clears, and is the default; nothing inherits.
    pool.set_property("z/b", "quota", Some("none")).unwrap();
    let (value, source) = pool
        .property("z/b", tarn::dataset::props::Property::Quota)
        .unwrap();
    assert_eq!(
        (value.as_str(), source.to_string().as_str()),
        ("none", "default")
    );
    pool.set_property("z", "quota", Some("40M")).unwrap();
    let (value, _) = pool
        .property("z/a", tarn::dataset::props::Property::Quota)
        .unwrap();
    assert_eq!(value, "none");
    assert_clean(&pool);
}

#[test]
fn send_p_carries_the_limits_and_receive_keeps_what_fits() {
    use tarn::dataset::props::Property;
    use tarn::send::{receive, send, ReceiveOptions, SendOptions};
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "t", &["src"]);
    pool.set_property("t/src", "quota", Some("20M")).unwrap();
    pool.set_property("t/src", "refreservation", Some("3M"))
        .unwrap();
    let fs = pool.open_file_system("t/src").unwrap();
    write_file(&fs, "f", 2 * MIB);
    drop(fs);
    pool.create_snapshots(&["t/src@1".to_string()], false)
        .unwrap();
    let options = SendOptions {
        properties: true,
        ..SendOptions::default()
    };
    let mut stream = Vec::new();
    send(&pool, "t/src@1", &options, &mut stream, &mut |_| {}).unwrap();
    let mut input: &[u8] = &stream;
    receive(&pool, "t/copy", &mut input, &ReceiveOptions::default()).unwrap();
    let value = |name: &str, property| pool.property(name, property).unwrap().0;
    assert_eq!(value("t/copy", Property::Quota), (20 * MIB).to_string());
    assert_eq!(
        value("t/copy", Property::Refreservation),
        (3 * MIB).to_string()
    );
    // -o overrides; a quota the received data does not fit in is left unset, the receive
    // stands.
    let mut input: &[u8] = &stream;
    let overridden = ReceiveOptions {
        set: vec![("quota".into(), "1M".into())],
        exclude: vec!["refreservation".into()],
        ..ReceiveOptions::default()
    };
    receive(&pool, "t/small", &mut input, &overridden).unwrap();
    assert_eq!(value("t/small", Property::Quota), "none");
    assert_eq!(value("t/small", Property::Refreservation), "none");
    assert!(pool.has_dataset("t/small"));
    assert_clean(&pool);
}

#[test]
fn a_pool_without_the_feature_refuses_limits() {
    let dir = tempfile::tempdir().unwrap();
    let pool = tarn::Pool::create(tarn::pool::CreateOptions {
        name: "nf".into(),
        log: Vec::new(),
        cache: Vec::new(),
        vdevs: single(dir.path(), "a.img"),
        create_size: Some(VDEV_SIZE),
        force: false,
        tunables: tiny(),
        wrap_device: None,
        disabled_features: vec!["space_limits".into()],
    })
    .unwrap();
    refused(&pool, "nf", "quota", "10M", "feature@space_limits");
    let state = |pool: &Pool| pool.feature_state("space_limits").unwrap();
    assert_eq!(state(&pool), tarn::pool::FeatureState::Disabled);
    pool.enable_feature("space_limits").unwrap();
    assert_eq!(state(&pool), tarn::pool::FeatureState::Enabled);
    pool.set_property("nf", "quota", Some("10M")).unwrap();
    assert_eq!(state(&pool), tarn::pool::FeatureState::Active);
    pool.export().unwrap();
    let pool = import(dir.path(), "nf", tiny());
    assert_eq!(state(&pool), tarn::pool::FeatureState::Active);
    assert_clean(&pool);
}

#[test]
fn a_rename_or_promote_into_a_full_quota_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "m", &["small", "big", "src"]);
    pool.set_property("m/small", "quota", Some("3M")).unwrap();
    let fs = pool.open_file_system("m/big").unwrap();
    write_file(&fs, "f", 4 * MIB);
    drop(fs);
    pool.sync().unwrap();
    let error = pool.rename_dataset("m/big", "m/small/big").unwrap_err();
    assert!(error.to_string().contains("quota"), "{error}");
    assert!(pool.has_dataset("m/big"));
    // A clone under the quota cannot take its origin's 4 MiB by a promote.
    let fs = pool.open_file_system("m/src").unwrap();
    write_file(&fs, "f", 4 * MIB);
    drop(fs);
    pool.create_snapshots(&["m/src@o".to_string()], false)
        .unwrap();
    pool.create_clone("m/src@o", "m/small/clone", &[]).unwrap();
    let error = pool.promote("m/small/clone").unwrap_err();
    assert!(error.to_string().contains("quota"), "{error}");
    // Within one quota's tree a rename moves nothing past it.
    pool.rename_dataset("m/small/clone", "m/small/renamed")
        .unwrap();
    pool.sync().unwrap();
    assert!(info(&pool, "m/small").used <= 3 * MIB);
    assert_clean(&pool);
}

/// As in zfs, frees are never refused, not even at a full quota (a user must always be able
/// to delete): hole punches in a file a snapshot holds free nothing, and what they rewrite (its
/// indirect blocks, in three copies here) may take the dataset past its quota; its next
/// growth is refused.
#[test]
fn frees_are_never_refused_at_a_full_quota() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "f", &["a"]);
    pool.set_property("f/a", "recordsize", Some("4K")).unwrap();
    pool.set_property("f/a", "copies", Some("2")).unwrap();
    let fs = pool.open_file_system("f/a").unwrap();
    write_file(&fs, "f", 6 * MIB);
    pool.sync().unwrap();
    let quota = info(&pool, "f/a").used + 4096;
    pool.set_property("f/a", "quota", Some(&quota.to_string()))
        .unwrap();
    pool.create_snapshots(&["f/a@s".to_string()], false)
        .unwrap();
    let ino = root_file(&fs, "f");
    const PUNCH_HOLE_KEEP_SIZE: u32 = 0x01 | 0x02;
    for hole in 0..200u64 {
        fs.fallocate(ino, hole * 32768, 4096, PUNCH_HOLE_KEEP_SIZE)
            .expect("a punch at a full quota");
    }
    pool.sync().unwrap();
    let used = info(&pool, "f/a").used;
    assert!(used > quota, "the punches rewrote nothing? used {used}");
    let refusal = fs.write(ino, 0, &pattern(9, 4096)).unwrap_err();
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    fs.unlink(fs.root(), b"f")
        .expect("an unlink at a full quota");
    drop(fs);
    assert_clean(&pool);
}

#[test]
fn limits_given_at_create_and_clone_hold_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool_with(dir.path(), "c", &[]);
    let settings = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    };
    pool.create_dataset(
        "c/a",
        &settings(&[("quota", "2M"), ("compression", "off")]),
        false,
    )
    .unwrap();
    let fs = pool.open_file_system("c/a").unwrap();
    let (written, refusal) = fill(&fs, "f", 2 * MIB);
    assert!(matches!(refusal, FsError::QuotaExceeded), "{refusal}");
    assert!(written < 2 * MIB);
    drop(fs);
    let error = pool
        .create_dataset("c/b", &settings(&[("reservation", "10G")]), false)
        .unwrap_err();
    assert!(
        error.to_string().contains("greater than available"),
        "{error}"
    );
    assert!(!pool.has_dataset("c/b"));
    let error = pool
        .create_dataset(
            "c/p/q",
            &settings(&[("quota", "1M"), ("reservation", "2M")]),
            true,
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("greater than available"),
        "{error}"
    );
    pool.create_snapshots(&["c/a@s".to_string()], false)
        .unwrap();
    // A clone references its origin's 2 MiB from the start.
    let error = pool
        .create_clone("c/a@s", "c/k", &settings(&[("refquota", "1M")]))
        .unwrap_err();
    assert!(
        error.to_string().contains("less than current used"),
        "{error}"
    );
    assert!(!pool.has_dataset("c/k"));
    pool.create_clone("c/a@s", "c/k", &settings(&[("refquota", "8M")]))
        .unwrap();
    assert_eq!(
        pool.property("c/k", tarn::dataset::props::Property::Refquota)
            .unwrap()
            .0,
        (8 * MIB).to_string()
    );
    pool.create_dataset("c/n", &settings(&[("quota", "none")]), false)
        .unwrap();
    let (value, source) = pool
        .property("c/n", tarn::dataset::props::Property::Quota)
        .unwrap();
    assert_eq!(
        (value.as_str(), source.to_string().as_str()),
        ("none", "default")
    );
    assert_clean(&pool);
    pool.export().unwrap();
    let pool = import(dir.path(), "c", tiny());
    assert_eq!(info(&pool, "c/a").limits.quota, 2 * MIB);
    assert_clean(&pool);
}
