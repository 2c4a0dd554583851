//! The GEMV shape and its validation (N >= 1, K >= 16, K % 16 == 0, M >= 1).

use crate::{CoreError, Result};

/// Elements of K covered by one E4M3 block scale.
pub const GROUP_SIZE: usize = 16;

/// `Y[M, N] = X[M, K] * W[N, K]^T`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemvShape {
    /// Rows of X and Y (tokens decoded at once).
    pub m: usize,
    /// Weight rows, columns of Y.
    pub n: usize,
    /// Weight columns, columns of X.
    pub k: usize,
}

impl GemvShape {
    /// Validates M, N and K and that every buffer size fits in `usize`.
    pub fn new(m: usize, n: usize, k: usize) -> Result<Self> {
        validate_weight_shape(n, k)?;
        if m == 0 {
            return Err(CoreError::ZeroM { n, k });
        }
        let shape = Self { m, n, k };
        for (what, size) in [("X", m.checked_mul(k)), ("Y", m.checked_mul(n))] {
            if size.and_then(|s| s.checked_mul(2)).is_none() {
                return Err(CoreError::SizeOverflow { what, m, n, k });
            }
        }
        Ok(shape)
    }

    /// Scale groups per weight row (K / 16).
    pub fn groups(&self) -> usize {
        self.k / GROUP_SIZE
    }

    /// Bytes streamed by one launch: packed weights, scales, X and Y: the bytes the effective bandwidth counts.
    pub fn bytes_moved(&self) -> u64 {
        let (m, n, k) = (self.m as u64, self.n as u64, self.k as u64);
        n * k / 2 + n * k / 16 + 2 * m * k + 2 * m * n
    }
}

/// Validates a weight matrix shape: N >= 1, K >= 16 and K % 16 == 0, sizes fit in `usize`.
pub fn validate_weight_shape(n: usize, k: usize) -> Result<()> {
    if n == 0 {
        return Err(CoreError::ZeroN { k });
    }
    if k == 0 || !k.is_multiple_of(GROUP_SIZE) {
        return Err(CoreError::InvalidK { k, n });
    }
    if n.checked_mul(k).is_none() {
        return Err(CoreError::SizeOverflow { what: "weights", m: 0, n, k });
    }
    Ok(())
}
