//! Argument decomposition for FUSE operation requests.
//!
//! Helper to decompose a slice of binary data (incoming FUSE request) into multiple data
//! structures (request arguments).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use zerocopy::FromBytes;
use zerocopy::Immutable;
use zerocopy::KnownLayout;
use zerocopy::error::ConvertError;

/// An iterator that can be used to fetch typed arguments from a byte slice.
///
/// tarn: a request read from `/dev/fuse` is one slice. A request delivered through FUSE over
/// io_uring comes in two: the per-operation header (the kernel's `in_args[0]`) in the entry's
/// header buffer, and every further argument (names, write data) in its payload buffer. The
/// iterator reads the first slice until it is empty and then the second. No argument straddles
/// the two, because the kernel puts exactly one whole argument in the first.
pub(crate) struct ArgumentIterator<'a> {
    data: &'a [u8],
    /// The second slice of a split request; empty for a contiguous one.
    rest: &'a [u8],
}

impl<'a> ArgumentIterator<'a> {
    /// Create a new argument iterator for the given byte slice.
    pub(crate) fn new(data: &'a [u8]) -> ArgumentIterator<'a> {
        ArgumentIterator { data, rest: &[] }
    }

    /// An iterator over a request in two slices: `first`, then `rest` (see the type's comment).
    pub(crate) fn new_split(first: &'a [u8], rest: &'a [u8]) -> ArgumentIterator<'a> {
        let mut iter = ArgumentIterator { data: first, rest };
        iter.advance_if_empty();
        iter
    }

    /// Moves on to the second slice once the first is used up.
    fn advance_if_empty(&mut self) {
        if self.data.is_empty() {
            self.data = std::mem::take(&mut self.rest);
        }
    }

    /// Returns the size of the remaining data.
    pub(crate) fn len(&self) -> usize {
        self.data.len() + self.rest.len()
    }

    /// Fetch a slice of all remaining bytes. For a split request that has not used up its first
    /// slice (which the kernel never sends), that is the rest of the first slice only.
    pub(crate) fn fetch_all(&mut self) -> &'a [u8] {
        let bytes = self.data;
        self.data = &[];
        self.advance_if_empty();
        bytes
    }

    /// Fetch a typed argument. Returns `None` if there's not enough data left.
    pub(crate) fn fetch<T: FromBytes + KnownLayout + Immutable>(&mut self) -> Option<&'a T> {
        match zerocopy::Ref::<_, T>::from_prefix(self.data) {
            Err(ConvertError::Alignment(_)) => {
                // Panic on alignment errors as this is under the control
                // of the programmer, we can still return None for size
                // failures as this may be caused by insufficient external
                // data.
                panic!("Data unaligned");
            }
            Err(ConvertError::Size(_)) => None,
            Err(ConvertError::Validity(infallible)) => match infallible {},
            Ok((x, rest)) => {
                self.data = rest;
                self.advance_if_empty();
                Some(zerocopy::Ref::<&[u8], T>::into_ref(x))
            }
        }
    }

    /// Fetch a slice of typed of arguments. Returns `None` if there's not enough data left.
    pub(crate) fn fetch_slice<T: FromBytes + Immutable>(
        &mut self,
        count: usize,
    ) -> Option<&'a [T]> {
        match zerocopy::Ref::<_, [T]>::from_prefix_with_elems(self.data, count) {
            Err(ConvertError::Alignment(_)) => {
                // Panic on alignment errors as this is under the control
                // of the programmer, we can still return None for size
                // failures as this may be caused by insufficient external
                // data.
                panic!("Data unaligned");
            }
            Err(ConvertError::Size(_)) => None,
            Err(ConvertError::Validity(infallible)) => match infallible {},
            Ok((x, rest)) => {
                self.data = rest;
                self.advance_if_empty();
                Some(zerocopy::Ref::<&[u8], [T]>::into_ref(x))
            }
        }
    }

    /// Fetch a (zero-terminated) string (can be non-utf8). Returns `None` if there's not enough
    /// data left or no zero-termination could be found.
    pub(crate) fn fetch_str(&mut self) -> Option<&'a OsStr> {
        let len = memchr::memchr(0, self.data)?;
        let (out, rest) = self.data.split_at(len);
        self.data = &rest[1..];
        self.advance_if_empty();
        Some(OsStr::from_bytes(out))
    }
}

#[cfg(test)]
pub(crate) mod tests {

    use zerocopy::FromBytes;

    use crate::ll::argument::*;
    use crate::ll::test::AlignedData;

    const TEST_DATA: AlignedData<[u8; 10]> =
        AlignedData([0x66, 0x6f, 0x6f, 0x00, 0x62, 0x61, 0x72, 0x00, 0x62, 0x61]);

    #[repr(C)]
    #[derive(FromBytes, KnownLayout, Immutable)]
    struct TestArgument {
        p1: u8,
        p2: u8,
        p3: u16,
    }

    #[test]
    fn all_data() {
        let mut it = ArgumentIterator::new(&*TEST_DATA);
        it.fetch_str().unwrap();
        let arg = it.fetch_all();
        assert_eq!(arg, [0x62, 0x61, 0x72, 0x00, 0x62, 0x61]);
    }

    #[test]
    fn generic_argument() {
        let mut it = ArgumentIterator::new(&*TEST_DATA);
        let arg: &TestArgument = it.fetch().unwrap();
        assert_eq!(arg.p1, 0x66);
        assert_eq!(arg.p2, 0x6f);
        assert_eq!(arg.p3, 0x006f);
        let arg: &TestArgument = it.fetch().unwrap();
        assert_eq!(arg.p1, 0x62);
        assert_eq!(arg.p2, 0x61);
        assert_eq!(arg.p3, 0x0072);
        assert_eq!(it.len(), 2);
    }

    #[test]
    fn string_argument() {
        let mut it = ArgumentIterator::new(&*TEST_DATA);
        let arg = it.fetch_str().unwrap();
        assert_eq!(arg, "foo");
        let arg = it.fetch_str().unwrap();
        assert_eq!(arg, "bar");
        assert_eq!(it.len(), 2);
    }

    #[test]
    fn mixed_arguments() {
        let mut it = ArgumentIterator::new(&*TEST_DATA);
        let arg: &TestArgument = it.fetch().unwrap();
        assert_eq!(arg.p1, 0x66);
        assert_eq!(arg.p2, 0x6f);
        assert_eq!(arg.p3, 0x006f);
        let arg = it.fetch_str().unwrap();
        assert_eq!(arg, "bar");
        let arg = it.fetch_all();
        assert_eq!(arg, [0x62, 0x61]);
    }

    #[test]
    fn split_arguments_read_the_first_slice_then_the_second() {
        let first = AlignedData([1u8, 0, 2, 0]);
        let rest = AlignedData([0x66, 0x6f, 0x6f, 0x00, 0x62, 0x61, 0x72]);
        let mut it = ArgumentIterator::new_split(&*first, &*rest);
        assert_eq!(it.len(), 11);
        let arg: &TestArgument = it.fetch().unwrap();
        assert_eq!((arg.p1, arg.p2, arg.p3), (1, 0, 2));
        assert_eq!(it.fetch_str().unwrap(), "foo");
        assert_eq!(it.fetch_all(), b"bar");
        assert_eq!(it.len(), 0);

        // An empty first slice (an operation whose header has size 0, as LOOKUP's since 6.14).
        let mut it = ArgumentIterator::new_split(&[], &*rest);
        assert_eq!(it.fetch_str().unwrap(), "foo");
        // A string is never read across the two slices.
        let mut it = ArgumentIterator::new_split(b"fo", b"o\0");
        assert!(it.fetch_str().is_none());
    }

    #[test]
    fn out_of_data() {
        let mut it = ArgumentIterator::new(&*TEST_DATA);
        it.fetch::<u64>().unwrap();
        let arg: Option<&TestArgument> = it.fetch();
        assert!(arg.is_none());
        assert_eq!(it.len(), 2);
        let arg = it.fetch_str();
        assert!(arg.is_none());
        assert_eq!(it.len(), 2);
    }
}
