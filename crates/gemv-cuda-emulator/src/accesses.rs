//! The global-memory accesses the emulator counts, by launch argument and width.
//!
//! Results cannot show how a kernel read its inputs: a kernel whose alignment test wrongly says
//! "unaligned" falls back to narrower loads and still gives the exact bits, only slower on a GPU
//! (the weights stream at the width of their loads). These counts let a test hold each kernel to
//! the widest loads its arguments' alignment allows.

use super::ffi::ACCESS_WIDTHS;
use std::fmt;

/// One argument's accesses by width (1, 2, 4, 8 and 16 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccessWidths([u64; ACCESS_WIDTHS]);

impl AccessWidths {
    pub(super) fn from_counts(counts: [u64; ACCESS_WIDTHS]) -> Self {
        Self(counts)
    }

    /// The widths in bytes that occurred, narrowest first.
    pub fn widths(&self) -> Vec<usize> {
        (0..ACCESS_WIDTHS).filter(|&w| self.0[w] > 0).map(|w| 1 << w).collect()
    }

    /// Bytes accessed, over every width.
    pub fn bytes(&self) -> u64 {
        (0..ACCESS_WIDTHS).map(|w| self.0[w] << w).sum()
    }

    fn add(&mut self, other: &Self) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }
}

impl fmt::Display for AccessWidths {
    /// `16 B x 1200, 8 B x 4`, widest first; `none` when there were none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        for w in (0..ACCESS_WIDTHS).rev().filter(|&w| self.0[w] > 0) {
            write!(f, "{}{} B x {}", if any { ", " } else { "" }, 1 << w, self.0[w])?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// The global-memory accesses of an emulator's launches, per gemv argument. Prefetches are
/// checked like loads but not counted; an input is never stored to and Y never loaded (either
/// would be a fault).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalAccesses {
    /// Loads of X.
    pub x_loads: AccessWidths,
    /// Loads of the packed weights.
    pub packed_loads: AccessWidths,
    /// Loads of the scale codes.
    pub scales_loads: AccessWidths,
    /// Stores to Y.
    pub y_stores: AccessWidths,
}

impl GlobalAccesses {
    pub(super) fn add(&mut self, other: &Self) {
        self.x_loads.add(&other.x_loads);
        self.packed_loads.add(&other.packed_loads);
        self.scales_loads.add(&other.scales_loads);
        self.y_stores.add(&other.y_stores);
    }
}

impl fmt::Display for GlobalAccesses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "x loads: {}; packed loads: {}; scales loads: {}; y stores: {}",
            self.x_loads, self.packed_loads, self.scales_loads, self.y_stores
        )
    }
}
