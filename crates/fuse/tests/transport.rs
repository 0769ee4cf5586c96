//! The two transports under real mounts of the null file system: FUSE over io_uring serves
//! every kind of request through the ring (and FORGET through /dev/fuse), on every CPU's
//! queue, and unmounts cleanly; `auto` stays on /dev/fuse when the host has the ring switched
//! off, without switching it on; an explicit `uring` then fails the mount instead of silently
//! testing /dev/fuse; a failed REGISTER sends a mount back to /dev/fuse; a lazy unmount releases
//! the callers of a stuck handler at once, on either transport. The ring tests need the host switch on (`Requirement::FuseUring`); the
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

/// Every opcode served but DESTROY (answered before any handler) has its handlers' time, on
/// whichever transport served it, and a mean per request of at most a second. A request is
/// counted as it arrives and its time added once its handler has returned, after the answer
/// that may have let the test go on: a time may land a moment after the count.
fn assert_handlers_timed(handle: &MountHandle) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let untimed: Vec<_> = (handle.request_counts().into_iter())
            .filter(|count| count.name != "destroy")
            .filter(|count| !(count.handler_nanos > 0 && count.micros_per_request() < 1e6))
            .collect();
        if untimed.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{untimed:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
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
    assert_handlers_timed(&handle);
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
    // Background requests (write-backs) may not take every entry of a queue: the kernel keeps
    // a request in its CPU's queue, and a foreground one would wait behind them.
    let TransportState::Uring {
        queues, workers, ..
    } = handle.transport()
    else {
        panic!("not on the ring: {:?}", handle.transport());
    };
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = online
        .trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((low, high)) => high.parse::<usize>().unwrap() - low.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum::<usize>();
    // An offline CPU's queue has one worker.
    let per_online_queue = (workers - (queues - online)) / online;
    let connection =
        std::os::unix::fs::MetadataExt::dev(&fs::metadata(dir.path().join("mnt")).unwrap());
    let minor = libc::minor(connection);
    let max_background: usize =
        fs::read_to_string(format!("/sys/fs/fuse/connections/{minor}/max_background"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
    assert!(
        (1..per_online_queue).contains(&max_background),
        "max_background {max_background}, {per_online_queue} workers per queue"
    );
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
    assert_handlers_timed(&handle);
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

/// A file system whose statfs, once armed, blocks until released: a handler stuck in its work.
struct Stuck {
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    entered: std::sync::mpsc::SyncSender<()>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl fuser::Filesystem for Stuck {
    fn init(
        &mut self,
        _req: &fuser::Request,
        config: &mut fuser::KernelConfig,
    ) -> std::io::Result<()> {
        tarn_fuse::configure_kernel(config);
        Ok(())
    }

    fn statfs(&self, _req: &fuser::Request, _ino: fuser::INodeNo, reply: fuser::ReplyStatfs) {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = self.entered.send(());
            // Longer than the lazy unmount's write-back patience (30 s; see below).
            let _ = self
                .release
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(90));
        }
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 0);
    }
}

/// A lazy unmount while a handler is stuck: the caller waiting on it gets an error at once,
/// not after the handler, and the handler's late answer ends its thread (over the ring: its
/// commit fails with ENOTCONN), so the session joins.
fn lazy_unmount_with_a_stuck_handler(transport: TransportChoice) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    tarn_fuse::mountpoint::prepare(&mnt).unwrap();
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (entered_tx, entered_rx) = std::sync::mpsc::sync_channel(1);
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let stuck = Stuck {
        armed: armed.clone(),
        entered: entered_tx,
        release: std::sync::Mutex::new(release_rx),
    };
    let mut options = MountOptions::new("tarn-transport-test");
    options.transport = transport;
    let mut handle = tarn_fuse::mount_filesystem(stuck, &mnt, &options).unwrap();
    assert_eq!(
        handle.transport().name(),
        tarn_fuse::transport::transport_name(transport)
    );
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let caller = {
        let mnt = mnt.clone();
        std::thread::spawn(move || nix_statfs(&mnt))
    };
    entered_rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the statfs reached the handler");
    let started = std::time::Instant::now();
    let unmounting = std::thread::spawn(move || {
        let result = handle.unmount(true);
        (result, handle)
    });
    // The caller is released by the abort, while the handler is still stuck.
    let error = caller
        .join()
        .unwrap()
        .expect_err("a statfs on an aborted mount fails");
    assert!(
        matches!(
            error.raw_os_error(),
            Some(libc::ENOTCONN | libc::ECONNABORTED)
        ),
        "{error}"
    );
    // Known gap (the s39 note): over the ring, under load, the GETATTR that the unmount's
    // write-back child sends when it opens the mount was seen to sit undelivered while every
    // entry but the stuck one waited idle, until the write-back's patience (30 s) ran out and
    // the abort ended it. The caller is still released by the abort, before the handler
    // answers (the assertion above), but only that late.
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_secs(45), "{waited:?}");
    if waited >= std::time::Duration::from_secs(10) {
        eprintln!("the abort came after the write-back's patience: {waited:?}");
    }
    release_tx.send(()).unwrap();
    let (result, _handle) = unmounting.join().unwrap();
    result.unwrap();
    assert!(!tarn_fuse::mountpoint::is_dead_fuse_mount(&mnt));
}

fn nix_statfs(path: &Path) -> std::io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string and a zeroed buffer the call fills.
    let mut figures: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut figures) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn lazy_unmount_releases_callers_of_a_stuck_handler_over_dev_fuse() {
    if !tarn_test_support::requires(&[Requirement::Fuse]) {
        return;
    }
    lazy_unmount_with_a_stuck_handler(TransportChoice::Dev);
}

#[test]
fn lazy_unmount_releases_callers_of_a_stuck_handler_over_the_ring() {
    if !tarn_test_support::requires(&[Requirement::Fuse, Requirement::FuseUring]) {
        return;
    }
    lazy_unmount_with_a_stuck_handler(TransportChoice::Uring);
}
