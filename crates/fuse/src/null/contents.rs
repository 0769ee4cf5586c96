//! A regular file's contents in the null file system: its bytes while it is small (at most
//! [`KEEP_BYTES_MAX`]), only its size once it has grown past that (it then reads as zeros).

use fuser::Errno;

/// A file keeps its bytes while its size is at most this; past it the bytes are dropped for
/// good (until a truncate to 0) and the file reads as zeros, so that a multi-GiB fio file
/// costs no memory.
pub const KEEP_BYTES_MAX: u64 = 4 << 20;
/// The largest file size (as ext4 and tarn: offsets are signed).
const SIZE_MAX: u64 = i64::MAX as u64;

/// A regular file's size, and its bytes while it keeps them (then exactly `size` of them).
pub(super) struct File {
    pub(super) size: u64,
    pub(super) data: Option<Vec<u8>>,
}

/// What a read returns: kept bytes, or this many zeros.
pub(super) enum Bytes<'a> {
    Kept(&'a [u8]),
    Zeros(usize),
}

impl File {
    pub(super) fn new() -> File {
        File {
            size: 0,
            data: Some(Vec::new()),
        }
    }

    /// Whether the file keeps its bytes (else it reads as zeros).
    pub(super) fn keeps_bytes(&self) -> bool {
        self.data.is_some()
    }

    /// Up to `length` bytes at `offset` (fewer at the end of the file).
    pub(super) fn read(&self, offset: u64, length: u32) -> Bytes<'_> {
        let end = offset.saturating_add(length as u64).min(self.size);
        let start = offset.min(end);
        match &self.data {
            Some(bytes) => Bytes::Kept(&bytes[start as usize..end as usize]),
            None => Bytes::Zeros((end - start) as usize),
        }
    }

    /// Write `data` at `offset`, extending the file (with zeros up to `offset`) if it ends
    /// past the end.
    pub(super) fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= SIZE_MAX)
            .ok_or(Errno::EFBIG)?;
        if end > KEEP_BYTES_MAX {
            self.data = None;
        }
        if let Some(bytes) = &mut self.data {
            let offset = offset as usize;
            if offset > bytes.len() {
                bytes.resize(offset, 0);
            }
            let overlap = bytes.len().min(offset + data.len()) - offset;
            bytes[offset..offset + overlap].copy_from_slice(&data[..overlap]);
            bytes.extend_from_slice(&data[overlap..]);
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Truncate or extend (with zeros) to `size`. A file truncated to nothing keeps its bytes
    /// again: they are known.
    pub(super) fn set_size(&mut self, size: u64) -> Result<(), Errno> {
        if size > SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        if size > KEEP_BYTES_MAX {
            self.data = None;
        } else if size == 0 {
            self.data = Some(Vec::new());
        }
        if let Some(bytes) = &mut self.data {
            bytes.resize(size as usize, 0);
            if bytes.capacity() > 2 * bytes.len() + 4096 {
                bytes.shrink_to_fit();
            }
        }
        self.size = size;
        Ok(())
    }

    /// fallocate(2): allocation (a no-op but for the size), FALLOC_FL_PUNCH_HOLE and
    /// FALLOC_FL_ZERO_RANGE; with FALLOC_FL_KEEP_SIZE the size stays.
    pub(super) fn allocate(&mut self, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        let end = offset
            .checked_add(length)
            .filter(|end| *end <= SIZE_MAX)
            .ok_or(Errno::EFBIG)?;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let zero = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => false,
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => true,
            libc::FALLOC_FL_ZERO_RANGE => true,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        if zero {
            if let Some(bytes) = &mut self.data {
                let len = bytes.len() as u64;
                bytes[offset.min(len) as usize..end.min(len) as usize].fill(0);
            }
        }
        if !keep_size && end > self.size {
            self.set_size(end)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(file: &File) -> &[u8] {
        file.data.as_deref().unwrap()
    }

    #[test]
    fn writes_overwrite_extend_and_fill_gaps_with_zeros() {
        let mut file = File::new();
        file.write(0, b"hello").unwrap();
        file.write(3, b"LOWORLD").unwrap();
        assert_eq!(kept(&file), b"helLOWORLD");
        file.write(12, b"!").unwrap();
        assert_eq!(kept(&file), b"helLOWORLD\0\0!");
        assert_eq!(file.size, 13);
        file.write(1, b"E").unwrap();
        assert_eq!(kept(&file), b"hElLOWORLD\0\0!");
        assert!(matches!(file.read(11, 10), Bytes::Kept(b"\0!")));
        assert!(matches!(file.read(20, 10), Bytes::Kept(b"")));
    }

    #[test]
    fn truncation_keeps_bytes_below_the_limit_and_drops_them_past_it() {
        let mut file = File::new();
        file.write(0, b"abcdef").unwrap();
        file.set_size(3).unwrap();
        file.set_size(5).unwrap();
        assert_eq!(kept(&file), b"abc\0\0");
        file.write(KEEP_BYTES_MAX, b"x").unwrap();
        assert!(!file.keeps_bytes());
        assert_eq!(file.size, KEEP_BYTES_MAX + 1);
        assert!(matches!(file.read(0, 4), Bytes::Zeros(4)));
        file.set_size(10).unwrap();
        assert!(!file.keeps_bytes());
        file.set_size(0).unwrap();
        assert!(file.keeps_bytes());
        assert_eq!(file.write(u64::MAX - 1, b"ab").unwrap_err(), Errno::EFBIG);
    }

    #[test]
    fn fallocate_extends_punches_and_keeps_the_size_when_asked() {
        let mut file = File::new();
        file.write(0, b"abcdef").unwrap();
        file.allocate(0, 8, 0).unwrap();
        assert_eq!(kept(&file), b"abcdef\0\0");
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        file.allocate(1, 2, punch).unwrap();
        assert_eq!(kept(&file), b"a\0\0def\0\0");
        file.allocate(0, 100, libc::FALLOC_FL_KEEP_SIZE).unwrap();
        assert_eq!(file.size, 8);
        assert_eq!(
            file.allocate(0, 1, libc::FALLOC_FL_PUNCH_HOLE).unwrap_err(),
            Errno::EOPNOTSUPP
        );
    }
}
