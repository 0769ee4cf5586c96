//! The two transports under real mounts of the null file system: FUSE over io_uring serves
//! every kind of request through the ring (and FORGET through /dev/fuse), on every CPU's
//! queue, and unmounts cleanly; `auto` stays on /dev/fuse when the host has the ring switched
//! off, without switching it on; an explicit `uring` then fails the mount instead of silently
//! testing /dev/fuse. The ring tests need the host switch on (`Requirement::FuseUring`); the
//! test command turns it on explicitly.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use tarn_fuse::{MountHandle, MountOptions, TransportChoice, TransportState};
use tarn_test_support::Requirement;

fn mount_null(dir: &Path, transport: TransportChoice) -> std::io::Result<(PathBuf, MountHandle)> {
    let mnt = dir.join("mnt");
    tarn_fuse::mountpoint::prepare(&mnt).unwrap();
    let mut options = MountOptions::new("tarn-transport-test");
    options.transport = transport;
    let handle = tarn_fuse::null::mount(&mnt, &options)?;
    Ok((mnt, handle))
}

fn ring_count(handle: &MountHandle, name: &str) -> u64 {
    handle
        .request_counts()
        .iter()
        .find(|count| count.name == name)
        .map_or(0, |count| count.ring)
}

/// Pins the calling thread to `cpu`; false if it cannot be.
fn pin_to(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set, filled and read by the calls below only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

#[test]
fn uring_serves_every_kind_of_request_through_the_ring() {
    if !tarn_test_support::requires(&[Requirement::Fuse, Requirement::FuseUring]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mnt, mut handle) = mount_null(dir.path(), TransportChoice::Uring).unwrap();
    let state = handle.transport();
    let TransportState::Uring {
        queues,
        workers,
        entry_bytes,
    } = state
    else {
        panic!("the mount should be served through the ring, not {state:?}");
    };
    assert!(queues >= 1 && workers >= queues, "{state:?}");
    assert!(
        entry_bytes >= 1 << 20,
        "1 MiB writes need 1 MiB entries: {state:?}"
    );

    // Names (in the payload), 1 MiB writes and reads (the largest payloads), listings,
    // attributes, links and removal.
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    fs::create_dir(mnt.join("d")).unwrap();
    let file = mnt.join("d/f");
    fs::File::create(&file).unwrap().write_all(&data).unwrap();
    let mut back = Vec::new();
    fs::File::open(&file)
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back.len(), data.len());
    symlink("f", mnt.join("d/l")).unwrap();
    assert_eq!(fs::read_link(mnt.join("d/l")).unwrap(), Path::new("f"));
    fs::rename(&file, mnt.join("d/g")).unwrap();
    let names: Vec<_> = fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    fs::remove_file(mnt.join("d/g")).unwrap();
    fs::remove_file(mnt.join("d/l")).unwrap();
    fs::remove_dir(mnt.join("d")).unwrap();
    assert!(!mnt.join("d").exists());

    for name in [
        "lookup", "mkdir", "create", "write", "rename", "unlink", "rmdir", "symlink",
    ] {
        assert!(
            ring_count(&handle, name) > 0,
            "no {name} through the ring: {:?}",
            handle.request_counts()
        );
    }
    // Only what the kernel keeps on /dev/fuse comes through it once the ring is up.
    for count in handle.request_counts() {
        if count.dev > 0 {
            assert!(
                [
                    "init",
                    "forget",
                    "batch_forget",
                    "interrupt",
                    "destroy",
                    "statfs"
                ]
                .contains(&count.name.as_str()),
                "{} served through /dev/fuse: {:?}",
                count.name,
                handle.request_counts()
            );
        }
    }
    handle.unmount(false).unwrap();
}

#[test]
fn uring_serves_the_queue_of_each_cpu() {
    if !tarn_test_support::requires(&[Requirement::Fuse, Requirement::FuseUring]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mnt, mut handle) = mount_null(dir.path(), TransportChoice::Uring).unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Requests from a thread on CPU c go to queue c: each must be served, or this hangs.
    let pinned = std::thread::spawn(move || {
        let mut served = 0;
        for cpu in 0..cpus {
            if pin_to(cpu) {
                fs::write(mnt.join(format!("cpu{cpu}")), b"x").unwrap();
                assert!(mnt.join(format!("cpu{cpu}")).exists());
                served += 1;
            }
        }
        served
    })
    .join()
    .unwrap();
    assert!(pinned >= 1);
    assert!(ring_count(&handle, "create") >= pinned as u64);
    handle.unmount(true).unwrap();
}

#[test]
fn a_failed_register_sends_the_mount_back_to_dev_fuse() {
    if !tarn_test_support::requires(&[Requirement::Fuse, Requirement::FuseUring]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    tarn_fuse::mountpoint::prepare(&mnt).unwrap();
    let mut options = MountOptions::new("tarn-transport-test");
    options.transport = TransportChoice::Auto;
    // Entries a page short of what the kernel needs: every REGISTER fails with EINVAL, and the
    // kernel serves the connection through /dev/fuse instead; nothing hangs.
    options.uring.test_payload_shortfall = 4096;
    let mut handle = tarn_fuse::null::mount(&mnt, &options).unwrap();
    fs::write(mnt.join("f"), b"still served").unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"still served");
    // The worker records the fallback when its REGISTER's completion comes back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while handle.transport().name() != "dev" && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let state = handle.transport();
    let TransportState::Dev { reason } = &state else {
        panic!("a failed REGISTER must leave the mount on /dev/fuse: {state:?}");
    };
    assert!(reason.contains("REGISTER failed"), "{reason}");
    assert_eq!(ring_count(&handle, "create"), 0);
    let dev_creates = handle
        .request_counts()
        .iter()
        .find(|count| count.name == "create")
        .map_or(0, |count| count.dev);
    assert!(dev_creates > 0, "{:?}", handle.request_counts());
    handle.unmount(false).unwrap();
}

#[test]
fn without_the_host_switch_auto_stays_on_dev_and_uring_fails() {
    if !tarn_test_support::requires(&[Requirement::Fuse]) {
        return;
    }
    let parameter = fs::read(tarn_fuse::transport::ENABLE_URING_PARAMETER).ok();
    let dir = tempfile::tempdir().unwrap();
    let (mnt, mut handle) = mount_null(dir.path(), TransportChoice::Auto).unwrap();
    fs::write(mnt.join("f"), b"x").unwrap();
    match tarn_fuse::transport::host_uring() {
        tarn_fuse::transport::HostUring::On => {
            assert_eq!(
                handle.transport().name(),
                "uring",
                "{:?}",
                handle.transport()
            );
        }
        _ => {
            let state = handle.transport();
            let TransportState::Dev { reason } = &state else {
                panic!("auto without the host switch must use /dev/fuse: {state:?}");
            };
            assert!(reason.contains("did not offer"), "{reason}");
            assert_eq!(ring_count(&handle, "create"), 0);
        }
    }
    handle.unmount(false).unwrap();
    if tarn_fuse::transport::host_uring() != tarn_fuse::transport::HostUring::On {
        let dir = tempfile::tempdir().unwrap();
        let error = mount_null(dir.path(), TransportChoice::Uring)
            .err()
            .expect("an explicit ring must not fall back to /dev/fuse");
        assert!(error.to_string().contains("io_uring"), "{error}");
    }
    // No mount changed the host's switch.
    assert_eq!(
        fs::read(tarn_fuse::transport::ENABLE_URING_PARAMETER).ok(),
        parameter
    );
}
