//! Device buffers are opaque ids owned by the backend that made them; ranges address bytes.

use crate::{Error, Result};

/// A buffer allocated by one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceBuffer {
    id: u64,
    len: usize,
}

impl DeviceBuffer {
    /// Made by backends when they allocate.
    pub fn new(id: u64, len: usize) -> Self {
        Self { id, len }
    }

    /// The backend's id for it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole buffer as a range.
    pub fn whole(&self) -> BufferRange {
        BufferRange { buffer: *self, offset: 0, len: self.len }
    }

    /// `len` bytes from `offset` (checked when used).
    pub fn range(&self, offset: usize, len: usize) -> BufferRange {
        BufferRange { buffer: *self, offset, len }
    }
}

/// Bytes `[offset, offset + len)` of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferRange {
    /// The buffer.
    pub buffer: DeviceBuffer,
    /// First byte.
    pub offset: usize,
    /// Byte count.
    pub len: usize,
}

impl BufferRange {
    /// One past the last byte, or None on overflow.
    pub fn end(&self) -> Option<usize> {
        self.offset.checked_add(self.len)
    }

    /// Whether the range lies inside its buffer.
    pub fn in_bounds(&self) -> bool {
        self.end().is_some_and(|end| end <= self.buffer.len())
    }

    /// [`Error::RangeOutOfBounds`] unless the range lies inside its buffer.
    pub fn check_bounds(&self, what: &'static str) -> Result<()> {
        if self.in_bounds() {
            Ok(())
        } else {
            Err(Error::RangeOutOfBounds { what, offset: self.offset, len: self.len, buffer_len: self.buffer.len() })
        }
    }

    /// [`Error::HostLengthMismatch`] unless a host slice of `host_len` bytes fits the range exactly
    /// (uploads and downloads).
    pub fn check_host_len(&self, what: &'static str, host_len: usize) -> Result<()> {
        if host_len == self.len {
            Ok(())
        } else {
            Err(Error::HostLengthMismatch { what, expected: self.len, found: host_len })
        }
    }

    /// Whether two ranges share a byte.
    pub fn overlaps(&self, other: &BufferRange) -> bool {
        self.buffer.id() == other.buffer.id()
            && self.len > 0
            && other.len > 0
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_only_when_they_share_a_byte_of_one_buffer() {
        let (a, b) = (DeviceBuffer::new(1, 64), DeviceBuffer::new(2, 64));
        assert!(a.range(0, 8).overlaps(&a.range(7, 4)) && a.range(7, 4).overlaps(&a.range(0, 8)));
        // Touching ends share no byte, in either order.
        assert!(!a.range(0, 8).overlaps(&a.range(8, 8)) && !a.range(8, 8).overlaps(&a.range(0, 8)));
        // An empty range shares no byte, even inside another range.
        assert!(!a.range(4, 0).overlaps(&a.range(0, 8)) && !a.range(0, 8).overlaps(&a.range(4, 0)));
        assert!(!a.range(0, 8).overlaps(&b.range(0, 8)), "another buffer");
    }

    #[test]
    fn a_host_slice_must_fit_the_range_exactly() {
        let range = DeviceBuffer::new(1, 64).range(8, 16);
        assert!(range.check_host_len("upload", 16).is_ok());
        for wrong in [15, 17, 0] {
            match range.check_host_len("upload", wrong) {
                Err(Error::HostLengthMismatch { what: "upload", expected: 16, found }) => assert_eq!(found, wrong),
                other => panic!("{wrong} bytes: expected HostLengthMismatch, got {other:?}"),
            }
        }
    }
}
