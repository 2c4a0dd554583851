//! The arrangements the backend made for the weight ranges its launches named: a launch through
//! [`GpuBackend`](gemv_backend::GpuBackend) passes raw buffer ranges, so the first launch over a
//! range arranges it and later ones reuse that, until a write touches the range or its buffer is
//! freed.

use crate::layout::{Geometry, READ_PAST};
use gemv_backend::{AlignedBytes, BufferRange};
use std::collections::HashMap;
use std::sync::Arc;

/// A matrix in the CPU's arrangement, without its global scale (a launch argument).
pub(crate) struct Arranged {
    /// The arrangement, then [`READ_PAST`] zero bytes.
    pub(crate) bytes: AlignedBytes,
    pub(crate) geometry: Geometry,
    /// Whether any scale code is NaN (0x7F, 0xFF) or subnormal (exponent field 0, mantissa not):
    /// only then do the kernels decode them the long way.
    pub(crate) special_scales: bool,
}

impl Arranged {
    /// Arranges `packed [n][k/2]` and `scales [n][k/16]` (lengths validated by the caller).
    pub(crate) fn new(packed: &[u8], scales: &[u8], n: usize, k: usize) -> Self {
        let geometry = Geometry::new(n, k);
        let mut bytes = AlignedBytes::zeroed(geometry.bytes() + READ_PAST);
        geometry.arrange(packed, scales, &mut bytes);
        let special_scales = scales.iter().any(|&code| {
            let magnitude = code & 0x7F;
            magnitude == 0x7F || (1..8).contains(&magnitude)
        });
        Self { bytes, geometry, special_scales }
    }
}

/// Which weights an arrangement was made from: both ranges exactly as the launch read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Source {
    pub(crate) packed: BufferRange,
    pub(crate) scales: BufferRange,
    pub(crate) n: usize,
    pub(crate) k: usize,
}

/// Arrangements by source.
#[derive(Default)]
pub(crate) struct Arrangements {
    entries: HashMap<Source, Arc<Arranged>>,
}

impl Arrangements {
    /// The arrangement of `source`, made by `arrange` when there is none yet.
    pub(crate) fn get_or_make(&mut self, source: Source, arrange: impl FnOnce() -> Arranged) -> Arc<Arranged> {
        Arc::clone(self.entries.entry(source).or_insert_with(|| Arc::new(arrange())))
    }

    /// Forgets every arrangement made from bytes that `written` overlaps (their source changed).
    pub(crate) fn forget_overlapping(&mut self, written: &BufferRange) {
        if !self.entries.is_empty() {
            self.entries.retain(|source, _| !(source.packed.overlaps(written) || source.scales.overlaps(written)));
        }
    }

    /// Forgets every arrangement made from `buffer`'s bytes (it was freed).
    pub(crate) fn forget_buffer(&mut self, buffer: u64) {
        self.entries.retain(|source, _| source.packed.buffer.id() != buffer && source.scales.buffer.id() != buffer);
    }

    /// Arrangements held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gemv_backend::DeviceBuffer;

    #[test]
    fn nan_and_subnormal_scale_codes_are_special_and_no_other() {
        let special = |code: u8| Arranged::new(&[0; 16], &[0x38, code], 1, 32).special_scales;
        for code in 0..=255u8 {
            let magnitude = code & 0x7F;
            let expected = magnitude == 0x7F || (1..=7).contains(&magnitude);
            assert_eq!(special(code), expected, "code {code:#04x}");
        }
    }

    #[test]
    fn writes_and_frees_forget_exactly_the_arrangements_they_touch() {
        let (a, b) = (DeviceBuffer::new(1, 4096), DeviceBuffer::new(2, 4096));
        // Two matrices in buffer a (packed at 0 and 1024, scales in b at 0 and 512).
        let first = Source { packed: a.range(0, 1024), scales: b.range(0, 128), n: 16, k: 128 };
        let second = Source { packed: a.range(1024, 1024), scales: b.range(512, 128), n: 16, k: 128 };
        let mut arrangements = Arrangements::default();
        let mut made = 0;
        for source in [first, second, first] {
            arrangements.get_or_make(source, || {
                made += 1;
                Arranged::new(&[0; 1024], &[0; 128], 16, 128)
            });
        }
        assert_eq!((made, arrangements.len()), (2, 2), "the second launch over a range reuses it");
        arrangements.forget_overlapping(&a.range(2048, 100));
        assert_eq!(arrangements.len(), 2, "bytes no arrangement came from");
        arrangements.forget_overlapping(&b.range(600, 1));
        assert_eq!(arrangements.len(), 1, "one scale byte of the second");
        arrangements.forget_buffer(a.id());
        assert_eq!(arrangements.len(), 0);
    }
}
