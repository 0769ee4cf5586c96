//! Faults injected at run time into an imported pool's devices (`tarn inject`, OpenZFS's
//! zinject), for administrators rehearsing a bad day and for tests.
//!
//! Every device a pool opens (at create, import, attach, replace, online, and its cache
//! devices) is wrapped in an [`InjectedDevice`] that asks the pool's [`Injector`] about each
//! read, write and flush. With no injection active that is one atomic load. An injection
//! ([`Injection`]) names:
//! - **where**: every device, one device (by path), or byte ranges of devices (the copies of
//!   an object's blocks, which the caller computes from their block pointers);
//! - **what**: an I/O error (EIO), silent corruption (a read returns the device's bytes with
//!   every 512-byte sector's first eight bytes inverted; a write stores them so), a delay, or
//!   a device that vanishes (every I/O fails with ENXIO and the device reports itself removed,
//!   as a pulled disk does);
//! - **which I/O**: reads, writes (flushes count as writes), or both;
//! - **how often**: a percentage of the matching I/Os, and optionally how many of them in
//!   all, after which the injection stays listed but no longer fires.
//!
//! Injections live in memory and end when the pool is exported (the injector goes with it);
//! nothing about them is written to the pool. Choices by percentage use a generator seeded
//! from the injection's id, so a run repeats.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rand::{Rng, SeedableRng};

use super::BlockDevice;

/// What an injection does to the I/O it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// The I/O fails with EIO.
    Io,
    /// The bytes read (or written) are silently damaged.
    Corrupt,
    /// The I/O is delayed this long, then done.
    Delay(Duration),
    /// The device is gone: every I/O fails with ENXIO and it reports itself removed.
    Vanish,
}

/// Which I/O an injection hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedIo {
    Read,
    /// Writes and flushes.
    Write,
    Both,
}

/// A byte range of one device (by its path as the pool names it): device offsets.
pub type DeviceRange = (PathBuf, Range<u64>);

/// One injection, as asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    /// The device (its path as the pool names it), or None for every device.
    pub device: Option<PathBuf>,
    /// Byte ranges of devices (device offsets) the injection is limited to; empty for the
    /// whole device.
    pub ranges: Vec<DeviceRange>,
    pub fault: InjectedFault,
    pub io: InjectedIo,
    /// The share of matching I/Os hit, 1 to 100.
    pub percent: u32,
    /// How many I/Os to hit in all, or None until cleared.
    pub count: Option<u64>,
    /// What the injection targets, in words, for listings (e.g. "pool/fs object 8 level 0").
    pub target: String,
}

/// An active injection and what it has done ([`Injector::list`]).
#[derive(Clone, Debug)]
pub struct InjectionStatus {
    pub id: u64,
    pub injection: Injection,
    /// The I/Os it has hit.
    pub hits: u64,
}

struct Rule {
    id: u64,
    injection: Injection,
    hits: AtomicU64,
    random: Mutex<rand::rngs::StdRng>,
}

impl Rule {
    fn matches(&self, path: &Path, io: InjectedIo, range: &Range<u64>) -> bool {
        let injection = &self.injection;
        let io_matches = injection.io == InjectedIo::Both || injection.io == io;
        let device_matches = injection
            .device
            .as_deref()
            .is_none_or(|device| device == path);
        let range_matches = injection.ranges.is_empty()
            || injection.ranges.iter().any(|(device, hit)| {
                device == path && hit.start < range.end && range.start < hit.end
            });
        io_matches && device_matches && range_matches
    }

    /// Whether this I/O is hit: by the percentage, while the count lasts.
    fn fires(&self) -> bool {
        let chosen = self.injection.percent >= 100
            || self.random.lock().gen_range(0..100) < self.injection.percent;
        chosen
            && self
                .hits
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |hits| {
                    match self.injection.count {
                        Some(count) if hits >= count => None,
                        _ => Some(hits + 1),
                    }
                })
                .is_ok()
    }
}

/// A pool's injections. Cheap when there are none.
#[derive(Default)]
pub struct Injector {
    rules: RwLock<Vec<Arc<Rule>>>,
    any: AtomicBool,
    next_id: AtomicU64,
}

/// A wrapper that puts each device a pool opens under an injector (`DeviceWrapper`'s shape).
pub type InjectingWrapper =
    Arc<dyn Fn(&Path, Arc<dyn BlockDevice>) -> Arc<dyn BlockDevice> + Send + Sync>;

impl Injector {
    pub fn new() -> Arc<Injector> {
        Arc::new(Injector::default())
    }

    /// Wrap each device opened through `inner` (another wrapper, e.g. a test's fault layer,
    /// applied first) in an [`InjectedDevice`] of this injector.
    pub fn wrapper_over(self: &Arc<Self>, inner: Option<InjectingWrapper>) -> InjectingWrapper {
        let injector = self.clone();
        Arc::new(move |path: &Path, device: Arc<dyn BlockDevice>| {
            let device = match &inner {
                Some(wrap) => wrap(path, device),
                None => device,
            };
            Arc::new(InjectedDevice {
                inner: device,
                path: path.to_path_buf(),
                injector: injector.clone(),
            }) as Arc<dyn BlockDevice>
        })
    }

    /// Start an injection; returns its id (from 1).
    pub fn add(&self, injection: Injection) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.rules.write().push(Arc::new(Rule {
            id,
            injection,
            hits: AtomicU64::new(0),
            random: Mutex::new(rand::rngs::StdRng::seed_from_u64(id)),
        }));
        self.any.store(true, Ordering::Release);
        id
    }

    /// Clear injection `id`, or every one with None; returns how many were cleared.
    pub fn clear(&self, id: Option<u64>) -> usize {
        let mut rules = self.rules.write();
        let before = rules.len();
        rules.retain(|rule| id.is_some_and(|id| rule.id != id));
        self.any.store(!rules.is_empty(), Ordering::Release);
        before - rules.len()
    }

    /// The active injections, oldest first.
    pub fn list(&self) -> Vec<InjectionStatus> {
        self.rules
            .read()
            .iter()
            .map(|rule| InjectionStatus {
                id: rule.id,
                injection: rule.injection.clone(),
                hits: rule.hits.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Whether any injection is active (`pool status` says so).
    pub fn active(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The fault for an I/O of `range` on `path`, if one fires (the first matching rule).
    fn fault_for(&self, path: &Path, io: InjectedIo, range: Range<u64>) -> Option<InjectedFault> {
        if !self.active() {
            return None;
        }
        self.rules
            .read()
            .iter()
            .find(|rule| rule.matches(path, io, &range) && rule.fires())
            .map(|rule| rule.injection.fault)
    }

    /// Whether a vanish injection covers the whole of `path` (it reports itself removed).
    fn vanished(&self, path: &Path) -> bool {
        self.active()
            && self.rules.read().iter().any(|rule| {
                let injection = &rule.injection;
                injection.fault == InjectedFault::Vanish
                    && injection.ranges.is_empty()
                    && injection
                        .device
                        .as_deref()
                        .is_none_or(|device| device == path)
            })
    }
}

/// A device under an [`Injector`].
pub struct InjectedDevice {
    inner: Arc<dyn BlockDevice>,
    path: PathBuf,
    injector: Arc<Injector>,
}

/// Damage `data` as a corrupt injection does: the first eight bytes of every 512-byte sector
/// inverted, so every block's checksum fails and nothing else about the I/O changes.
fn corrupt(data: &mut [u8]) {
    for sector in data.chunks_mut(512) {
        for byte in sector.iter_mut().take(8) {
            *byte = !*byte;
        }
    }
}

/// The error of an injected fault: errno `raw`, with the device and the injection named.
fn injected(raw: i32, what: &str, path: &Path) -> io::Error {
    let errno = io::Error::from_raw_os_error(raw);
    io::Error::new(
        errno.kind(),
        format!("{}: injected {what} ({errno})", path.display()),
    )
}

impl InjectedDevice {
    /// Apply the fault (if any) that is not corruption; corruption is the caller's.
    fn before(&self, io_kind: InjectedIo, range: Range<u64>) -> io::Result<Option<InjectedFault>> {
        match self.injector.fault_for(&self.path, io_kind, range) {
            Some(InjectedFault::Io) => Err(injected(libc::EIO, "I/O error", &self.path)),
            Some(InjectedFault::Vanish) => Err(injected(libc::ENXIO, "device removal", &self.path)),
            Some(InjectedFault::Delay(delay)) => {
                std::thread::sleep(delay);
                Ok(None)
            }
            other => Ok(other),
        }
    }
}

impl BlockDevice for InjectedDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let range = offset..offset.saturating_add(buf.len() as u64);
        let fault = self.before(InjectedIo::Read, range)?;
        self.inner.read_at(offset, buf)?;
        if fault == Some(InjectedFault::Corrupt) {
            corrupt(buf);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let range = offset..offset.saturating_add(data.len() as u64);
        match self.before(InjectedIo::Write, range)? {
            Some(InjectedFault::Corrupt) => {
                let mut damaged = data.to_vec();
                corrupt(&mut damaged);
                self.inner.write_at(offset, &damaged)
            }
            _ => self.inner.write_at(offset, data),
        }
    }

    fn flush(&self) -> io::Result<()> {
        // A flush has no bytes to damage: only errors, removal and delays apply.
        self.before(InjectedIo::Write, 0..u64::MAX)?;
        self.inner.flush()
    }

    fn write_durable_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let range = offset..offset.saturating_add(data.len() as u64);
        match self.before(InjectedIo::Write, range)? {
            Some(InjectedFault::Corrupt) => {
                let mut damaged = data.to_vec();
                corrupt(&mut damaged);
                self.inner.write_durable_at(offset, &damaged)
            }
            _ => self.inner.write_durable_at(offset, data),
        }
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn release(&self) {
        self.inner.release()
    }

    fn is_missing(&self) -> bool {
        self.inner.is_missing()
    }

    fn is_removed(&self) -> bool {
        self.injector.vanished(&self.path) || self.inner.is_removed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vdev::FileDevice;

    fn device(dir: &tempfile::TempDir, injector: &Arc<Injector>) -> Arc<dyn BlockDevice> {
        let inner = FileDevice::create_sparse(&dir.path().join("a"), 1 << 20).unwrap();
        injector.wrapper_over(None)(Path::new("/d/a"), Arc::new(inner))
    }

    fn injection(fault: InjectedFault, io: InjectedIo) -> Injection {
        Injection {
            device: None,
            ranges: Vec::new(),
            fault,
            io,
            percent: 100,
            count: None,
            target: "all".into(),
        }
    }

    #[test]
    fn errors_corruption_counts_and_clearing() {
        let dir = tempfile::tempdir().unwrap();
        let injector = Injector::new();
        let device = device(&dir, &injector);
        device.write_at(0, &[7u8; 4096]).unwrap();
        let mut buf = vec![0u8; 4096];

        let id = injector.add(Injection {
            count: Some(2),
            ..injection(InjectedFault::Io, InjectedIo::Read)
        });
        assert!(device.read_at(0, &mut buf).is_err());
        assert!(device.write_at(0, &[7u8; 4096]).is_ok(), "reads only");
        assert!(device.read_at(0, &mut buf).is_err());
        device.read_at(0, &mut buf).expect("the count is spent");
        assert_eq!(injector.list()[0].hits, 2);
        assert_eq!(injector.clear(Some(id)), 1);
        assert!(!injector.active());

        injector.add(injection(InjectedFault::Corrupt, InjectedIo::Read));
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[..8], &[!7u8; 8]);
        assert_eq!(&buf[8..512], &[7u8; 504][..]);
        injector.clear(None);
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(
            buf,
            vec![7u8; 4096],
            "a corrupt read leaves the device alone"
        );

        injector.add(Injection {
            ranges: vec![(PathBuf::from("/d/a"), 8192..12288)],
            ..injection(InjectedFault::Io, InjectedIo::Both)
        });
        device.read_at(0, &mut buf).expect("outside the range");
        assert!(device.read_at(8192, &mut buf).is_err());
        assert!(device.write_at(10000, &[1u8; 10]).is_err());
        injector.clear(None);

        injector.add(Injection {
            device: Some(PathBuf::from("/d/b")),
            ..injection(InjectedFault::Vanish, InjectedIo::Both)
        });
        assert!(!device.is_removed(), "another device vanished");
        injector.clear(None);
        injector.add(injection(InjectedFault::Vanish, InjectedIo::Both));
        assert!(device.is_removed());
        let error = device.read_at(0, &mut buf).unwrap_err();
        assert!(
            error.to_string().contains("injected device removal"),
            "{error}"
        );
    }

    #[test]
    fn a_percentage_hits_about_that_share() {
        let dir = tempfile::tempdir().unwrap();
        let injector = Injector::new();
        let device = device(&dir, &injector);
        injector.add(Injection {
            percent: 25,
            ..injection(InjectedFault::Io, InjectedIo::Read)
        });
        let mut buf = vec![0u8; 512];
        let failed = (0..4000)
            .filter(|_| device.read_at(0, &mut buf).is_err())
            .count();
        assert!((800..1200).contains(&failed), "{failed} of 4000 at 25%");
    }
}
