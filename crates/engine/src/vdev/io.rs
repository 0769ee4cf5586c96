//! The block device trait and the file / block-device leaf that implements it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::VdevError;

/// Positional I/O on one leaf device. Every I/O of the engine goes through this trait, so that
/// tests can substitute a device that fails, stops or tears writes ([`super::FaultyDevice`]).
///
/// Offsets are absolute byte offsets on the device (labels included). Implementations must
/// return an error, never panic, for I/O that reaches past [`BlockDevice::size_bytes`].
pub trait BlockDevice: Send + Sync {
    /// Fill `buf` from `offset`; a short read is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Write all of `data` at `offset`; durable only after a later [`BlockDevice::flush`].
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Make every write that returned before this call durable.
    fn flush(&self) -> io::Result<()>;
    /// Write all of `data` at `offset`, durable when this returns, without making other
    /// writes durable as [`BlockDevice::flush`] would: the intent log's writes must not wait
    /// for a syncing txg's buffered writes to reach the disk. By default a write and a flush.
    fn write_durable_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_at(offset, data)?;
        self.flush()
    }
    /// The device's size in bytes.
    fn size_bytes(&self) -> u64;
    /// A human-readable name, normally the path, used in every error message.
    fn describe(&self) -> String;
    /// Give up the device: release its lock so another process (or pool) may open it, and
    /// refuse every later write. Called when a pool is exported, even if stale handles to the
    /// pool's objects are still alive somewhere.
    fn release(&self) {}
    /// True for the stand-in of a device that was not found at import ([`MissingDevice`]).
    fn is_missing(&self) -> bool {
        false
    }
    /// True when the device went away while it was open (zpool's REMOVED): a file leaf whose
    /// file was unlinked, or a device the fault layer removed. Asked by `pool status`, not per
    /// I/O: I/O to a gone device fails by itself and is logged in the leaf's DTL.
    fn is_removed(&self) -> bool {
        false
    }
}

/// The stand-in for a leaf that import could not find: it keeps the vdev tree's shape (a
/// mirror stays a mirror, DEGRADED, and the config keeps naming the absent child) while every
/// I/O to it fails. Writes it misses are recorded by the mirror as missed writes.
#[derive(Debug)]
pub struct MissingDevice {
    path: PathBuf,
    size_bytes: u64,
}

impl MissingDevice {
    /// A missing device standing in for one that held `allocatable_bytes` of data area.
    pub fn new(path: PathBuf, allocatable_bytes: u64) -> MissingDevice {
        // Labels sit on 256 KiB boundaries: round up so that the data area is at least as large.
        let size_bytes = allocatable_bytes.next_multiple_of(super::VDEV_LABEL_SIZE)
            + super::VDEV_LABEL_START_SIZE
            + super::VDEV_LABEL_END_SIZE;
        MissingDevice { path, size_bytes }
    }

    fn unavailable(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is missing (not found at import)", self.path.display()),
        )
    }
}

impl BlockDevice for MissingDevice {
    fn read_at(&self, _offset: u64, _buf: &mut [u8]) -> io::Result<()> {
        Err(self.unavailable())
    }

    fn write_at(&self, _offset: u64, _data: &[u8]) -> io::Result<()> {
        Err(self.unavailable())
    }

    fn flush(&self) -> io::Result<()> {
        Err(self.unavailable())
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn is_missing(&self) -> bool {
        true
    }
}

/// A leaf backed by a regular file or a block device.
///
/// A device opened for writing holds `flock(LOCK_EX | LOCK_NB)` on its descriptor until it is
/// dropped. flock (not POSIX `fcntl` locks) because the kernel drops it when the process dies
/// and closing another descriptor of the same file does not (DESIGN §4).
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    /// A second descriptor of the same file opened with O_DIRECT, used for large aligned
    /// writes and reads (they skip the page cache, as fio --direct=1 does). None where the file system
    /// refuses O_DIRECT (tmpfs) or for read-only opens.
    direct: Option<File>,
    /// A third descriptor opened with O_DIRECT | O_DSYNC, for durable writes
    /// ([`BlockDevice::write_durable_at`]): each is on stable storage when it returns (a FUA
    /// write or a flush of its own range), while `fdatasync` would write back every dirty
    /// page of the file first. None where `direct` is None.
    durable: Option<File>,
    path: PathBuf,
    size_bytes: u64,
    writable: bool,
    released: std::sync::atomic::AtomicBool,
}

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)` on the Linux architectures with the generic ioctl
/// encoding (x86, x86_64, arm, aarch64, riscv). Other targets fall back to seeking to the end.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
const BLKGETSIZE64: libc::c_ulong =
    (2 << 30) | ((std::mem::size_of::<usize>() as libc::c_ulong) << 16) | (0x12 << 8) | 114;

impl FileDevice {
    /// Open an existing regular file or block device for reading and writing, and lock it.
    ///
    /// Fails with [`VdevError::InUse`] if another open file description holds the lock.
    pub fn open(path: &Path) -> Result<FileDevice, VdevError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| VdevError::Open {
                path: path.to_path_buf(),
                operation: "open",
                source,
            })?;
        let size_bytes = device_size(&file, path)?;
        lock_exclusive(&file, path)?;
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            writable: true,
            released: std::sync::atomic::AtomicBool::new(false),
            direct: open_direct(path, 0),
            durable: open_direct(path, libc::O_DSYNC),
        })
    }

    /// Create a new sparse file of `size_bytes` and open it (locked). Refuses an existing path.
    pub fn create_sparse(path: &Path, size_bytes: u64) -> Result<FileDevice, VdevError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| {
                if source.kind() == io::ErrorKind::AlreadyExists {
                    VdevError::AlreadyExists {
                        path: path.to_path_buf(),
                    }
                } else {
                    VdevError::Open {
                        path: path.to_path_buf(),
                        operation: "create",
                        source,
                    }
                }
            })?;
        lock_exclusive(&file, path)?;
        file.set_len(size_bytes).map_err(|source| VdevError::Open {
            path: path.to_path_buf(),
            operation: "create",
            source,
        })?;
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            writable: true,
            released: std::sync::atomic::AtomicBool::new(false),
            direct: open_direct(path, 0),
            durable: open_direct(path, libc::O_DSYNC),
        })
    }

    /// Open a regular file or block device read-only without taking the lock, for label
    /// scanning. Opened non-blocking and checked after opening, so a FIFO or other special
    /// file that replaced the path is refused instead of hanging.
    pub fn open_unlocked_readonly(path: &Path) -> Result<FileDevice, VdevError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| VdevError::Open {
                path: path.to_path_buf(),
                operation: "open",
                source,
            })?;
        let size_bytes = device_size(&file, path)?;
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size_bytes,
            writable: false,
            released: std::sync::atomic::AtomicBool::new(false),
            direct: None,
            durable: None,
        })
    }

    /// The path this device was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_range(&self, offset: u64, length: usize) -> io::Result<()> {
        let end = offset.checked_add(length as u64);
        match end {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "I/O of {length} bytes at offset {offset} reaches past the end of the device ({} bytes)",
                    self.size_bytes
                ),
            )),
        }
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        if let Some(direct) = &self.direct {
            if buf.len() >= DIRECT_IO_MIN_BYTES
                && offset.is_multiple_of(DIRECT_IO_ALIGNMENT as u64)
                && buf.len().is_multiple_of(DIRECT_IO_ALIGNMENT)
            {
                return read_direct(direct, offset, buf);
            }
        }
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device was opened read-only",
            ));
        }
        if self.released.load(std::sync::atomic::Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "device was released by its pool (exported)",
            ));
        }
        self.check_range(offset, data.len())?;
        if let Some(direct) = &self.direct {
            if data.len() >= DIRECT_IO_MIN_BYTES
                && offset.is_multiple_of(DIRECT_IO_ALIGNMENT as u64)
                && data.len().is_multiple_of(DIRECT_IO_ALIGNMENT)
            {
                return write_direct(direct, offset, data);
            }
        }
        self.file.write_all_at(data, offset)
    }

    fn flush(&self) -> io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.file.sync_data()
    }

    fn write_durable_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if let Some(durable) = &self.durable {
            if self.writable
                && !self.released.load(std::sync::atomic::Ordering::Acquire)
                && offset.is_multiple_of(DIRECT_IO_ALIGNMENT as u64)
                && data.len().is_multiple_of(DIRECT_IO_ALIGNMENT)
            {
                self.check_range(offset, data.len())?;
                return write_direct(durable, offset, data);
            }
        }
        self.write_at(offset, data)?;
        self.flush()
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn is_removed(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.file
            .metadata()
            .is_ok_and(|metadata| metadata.is_file() && metadata.nlink() == 0)
    }

    fn release(&self) {
        if !self
            .released
            .swap(true, std::sync::atomic::Ordering::AcqRel)
            && self.writable
        {
            // SAFETY: flock on a descriptor this struct owns; unlocking cannot violate memory safety.
            unsafe {
                libc::flock(std::os::fd::AsRawFd::as_raw_fd(&self.file), libc::LOCK_UN);
            }
        }
    }
}

/// Alignment of offsets, lengths and buffers for O_DIRECT writes.
pub(crate) const DIRECT_IO_ALIGNMENT: usize = 4096;
/// Writes smaller than this go through the page cache: small metadata writes are cheap there,
/// and large data writes gain most from skipping it.
const DIRECT_IO_MIN_BYTES: usize = 64 << 10;

fn open_direct(path: &Path, flags: libc::c_int) -> Option<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | flags)
        .open(path)
        .ok()
}

thread_local! {
    /// A reusable aligned staging buffer per thread, so that direct writes of unaligned
    /// buffers cost one memory copy and no page faults.
    static DIRECT_STAGING: std::cell::RefCell<Option<AlignedBuffer>> = const { std::cell::RefCell::new(None) };
}

fn write_direct(file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
    if (data.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGNMENT) {
        return file.write_all_at(data, offset);
    }
    DIRECT_STAGING.with(|staging| {
        let mut staging = staging.borrow_mut();
        if staging
            .as_ref()
            .is_none_or(|buffer| buffer.len() < data.len())
        {
            *staging = Some(AlignedBuffer::zeroed(data.len(), DIRECT_IO_ALIGNMENT));
        }
        let buffer = staging.as_mut().expect("just filled");
        buffer[..data.len()].copy_from_slice(data);
        file.write_all_at(&buffer[..data.len()], offset)
    })
}

/// A large aligned read through the O_DIRECT descriptor. Copying from the page cache was most
/// of the CPU time of a sequential read through a mount (and the page cache only doubled the
/// block cache); the kernel writes back any dirty cached pages of the range before a direct
/// read, so buffered small writes stay visible.
fn read_direct(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    if (buf.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGNMENT) {
        return file.read_exact_at(buf, offset);
    }
    DIRECT_STAGING.with(|staging| {
        let mut staging = staging.borrow_mut();
        if staging
            .as_ref()
            .is_none_or(|buffer| buffer.len() < buf.len())
        {
            *staging = Some(AlignedBuffer::zeroed(buf.len(), DIRECT_IO_ALIGNMENT));
        }
        let buffer = staging.as_mut().expect("just filled");
        let length = buf.len();
        file.read_exact_at(&mut buffer[..length], offset)?;
        buf.copy_from_slice(&buffer[..length]);
        Ok(())
    })
}

/// The size of an opened regular file or block device; anything else is refused.
fn device_size(file: &File, path: &Path) -> Result<u64, VdevError> {
    let metadata = file.metadata().map_err(|source| VdevError::Open {
        path: path.to_path_buf(),
        operation: "inspect",
        source,
    })?;
    let file_type = metadata.file_type();
    if file_type.is_file() {
        Ok(metadata.len())
    } else if file_type.is_block_device() {
        block_device_size(file).map_err(|source| VdevError::Open {
            path: path.to_path_buf(),
            operation: "size",
            source,
        })
    } else {
        Err(VdevError::NotADevice {
            path: path.to_path_buf(),
        })
    }
}

#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size_bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live u64.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size_bytes) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size_bytes)
}

#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
)))]
fn block_device_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::End(0))
}

/// Take `flock(LOCK_EX | LOCK_NB)` on the descriptor (never a POSIX fcntl lock).
fn lock_exclusive(file: &File, path: &Path) -> Result<(), VdevError> {
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let result = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                return Err(VdevError::InUse {
                    path: path.to_path_buf(),
                })
            }
            _ => {
                return Err(VdevError::Open {
                    path: path.to_path_buf(),
                    operation: "lock",
                    source: error,
                })
            }
        }
    }
}

/// A zero-initialised byte buffer whose start is aligned to a power of two (normally the
/// sector size), so that it can be used for direct I/O (`O_DIRECT` needs aligned memory).
pub struct AlignedBuffer {
    pointer: std::ptr::NonNull<u8>,
    length: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuffer {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// A zeroed buffer of `length` bytes aligned to `alignment` (a power of two).
    pub fn zeroed(length: usize, alignment: usize) -> AlignedBuffer {
        assert!(
            alignment.is_power_of_two(),
            "alignment {alignment} is not a power of two"
        );
        let layout = std::alloc::Layout::from_size_align(length.max(1), alignment)
            .expect("buffer size overflows when aligned");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let pointer =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuffer {
            pointer,
            length,
            layout,
        }
    }

    pub fn alignment(&self) -> usize {
        self.layout.align()
    }
}

impl std::ops::Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the allocation holds at least `length` initialised (zeroed) bytes.
        unsafe { std::slice::from_raw_parts(self.pointer.as_ptr(), self.length) }
    }
}

impl std::ops::DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), self.length) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { std::alloc::dealloc(self.pointer.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AlignedBuffer")
            .field("length", &self.length)
            .field("alignment", &self.alignment())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_fails_while_first_is_alive_and_works_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf0");
        let first = FileDevice::create_sparse(&path, 1 << 20).unwrap();
        let error = FileDevice::open(&path).unwrap_err();
        assert!(matches!(error, VdevError::InUse { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains("in use by another process"), "{message}");
        assert!(message.contains("leaf0"), "{message}");
        drop(first);
        let second = FileDevice::open(&path).unwrap();
        assert_eq!(second.size_bytes(), 1 << 20);
    }

    #[test]
    fn create_sparse_refuses_existing_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf0");
        std::fs::write(&path, b"precious").unwrap();
        let error = FileDevice::create_sparse(&path, 1 << 20).unwrap_err();
        assert!(
            matches!(error, VdevError::AlreadyExists { .. }),
            "{error:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    }

    #[test]
    fn read_write_round_trip_and_out_of_range_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf0");
        let device = FileDevice::create_sparse(&path, 8192).unwrap();
        device.write_at(4096, &[7u8; 512]).unwrap();
        device.flush().unwrap();
        let mut buf = [0u8; 512];
        device.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 512]);
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 512]);
        assert!(device.read_at(8000, &mut buf).is_err());
        assert!(device.read_at(u64::MAX - 10, &mut buf).is_err());
        assert!(device.write_at(8192, &[1u8]).is_err());
        // The file did not grow.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
    }

    /// Durable writes, aligned (the O_DSYNC direct descriptor) or not (a write and a flush),
    /// read back through the buffered descriptor; past the end or after release, errors.
    #[test]
    fn durable_writes_read_back_and_are_refused_where_writes_are() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf0");
        let device = FileDevice::create_sparse(&path, 64 << 10).unwrap();
        device.write_at(8192, &[3u8; 4096]).unwrap();
        device.write_durable_at(8192, &[5u8; 8192]).unwrap();
        device.write_durable_at(100, &[6u8; 50]).unwrap();
        let mut buf = vec![0u8; 8192];
        device.read_at(8192, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&byte| byte == 5),
            "the buffered page was not stale"
        );
        let mut small = [0u8; 50];
        device.read_at(100, &mut small).unwrap();
        assert_eq!(small, [6u8; 50]);
        assert!(device.write_durable_at(60 << 10, &[1u8; 8192]).is_err());
        device.release();
        assert!(device.write_durable_at(0, &[1u8; 4096]).is_err());
        let reader = FileDevice::open_unlocked_readonly(&path).unwrap();
        assert!(reader.write_durable_at(0, &[1u8; 4096]).is_err());
    }

    #[test]
    fn readonly_open_does_not_lock_and_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leaf0");
        let locked = FileDevice::create_sparse(&path, 8192).unwrap();
        let reader = FileDevice::open_unlocked_readonly(&path).unwrap();
        assert!(reader.write_at(0, &[1u8; 512]).is_err());
        let mut buf = [1u8; 16];
        reader.read_at(0, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 16]);
        drop(locked);
    }

    #[test]
    fn aligned_buffer_is_aligned_zeroed_and_writable() {
        for (length, alignment) in [(0, 512), (1, 4096), (12288, 4096), (100, 8192)] {
            let mut buffer = AlignedBuffer::zeroed(length, alignment);
            assert_eq!(buffer.len(), length);
            assert_eq!(buffer.as_ptr() as usize % alignment, 0);
            assert!(buffer.iter().all(|&byte| byte == 0));
            buffer.fill(0xEE);
            assert!(buffer.iter().all(|&byte| byte == 0xEE));
        }
    }

    #[test]
    fn directory_is_not_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let error = FileDevice::open_unlocked_readonly(dir.path()).unwrap_err();
        assert!(matches!(error, VdevError::NotADevice { .. }), "{error:?}");
    }
}
