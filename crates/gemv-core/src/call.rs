//! One call, described the same way on every backend: how many tokens, where their rows lie in X
//! and Y, and which kernel family may serve them. The weights (N, K, global scale) come with the
//! backend's own weights type and the memory with its own buffer types; everything else a launch
//! needs is here, so a CUDA stream, a wgpu encoder and CPU slices are each driven by one method
//! taking a [`GemvCall`].
//!
//! Units: M counts tokens, strides count elements (bf16 values), never bytes.

use crate::launch::LaunchShape;
use crate::{FamilyChoice, Result};

/// M tokens through one weight matrix: `Y[t] = W X[t]` for t < M, X's and Y's rows at their row
/// strides (K and N unless set: contiguous rows), in the family `family` picks (the policy of
/// [`crate::select_family`]; [`FamilyChoice::Auto`] unless set). Any M >= 1: a backend covers it
/// with as many launches as its dispatch plan needs.
///
/// ```
/// use gemv_core::{FamilyChoice, GemvCall};
/// let call = GemvCall::new(3).with_x_row_stride(4096).with_family(FamilyChoice::Exact);
/// let shape = call.shape(1024, 2048)?; // N = 1024, K = 2048
/// assert_eq!((shape.x_row_stride(), shape.y_row_stride()), (4096, 1024));
/// # Ok::<(), gemv_core::CoreError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemvCall {
    m: usize,
    x_row_stride: Option<usize>,
    y_row_stride: Option<usize>,
    family: FamilyChoice,
}

impl GemvCall {
    /// `m` tokens, contiguous rows, the default family policy.
    pub fn new(m: usize) -> Self {
        Self { m, x_row_stride: None, y_row_stride: None, family: FamilyChoice::Auto }
    }

    /// X's rows `stride` elements apart (at least K; checked by [`Self::shape`]).
    pub fn with_x_row_stride(self, stride: usize) -> Self {
        Self { x_row_stride: Some(stride), ..self }
    }

    /// Y's rows `stride` elements apart (at least N; checked by [`Self::shape`]).
    pub fn with_y_row_stride(self, stride: usize) -> Self {
        Self { y_row_stride: Some(stride), ..self }
    }

    /// The family policy for this call.
    pub fn with_family(self, family: FamilyChoice) -> Self {
        Self { family, ..self }
    }

    /// Tokens.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The family policy.
    pub fn family(&self) -> FamilyChoice {
        self.family
    }

    /// The validated launch over an `n` x `k` matrix: M, N and K, and the strides (K and N where
    /// unset) covering their rows. Every check of the call happens here, once.
    pub fn shape(&self, n: usize, k: usize) -> Result<LaunchShape> {
        LaunchShape::new(self.m, n, k, self.x_row_stride.unwrap_or(k), self.y_row_stride.unwrap_or(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CoreError, Operand};

    #[test]
    fn a_call_defaults_to_contiguous_rows_and_checks_its_strides_against_the_matrix() {
        let shape = GemvCall::new(2).shape(64, 32).expect("contiguous");
        assert_eq!((shape.x_row_stride(), shape.y_row_stride()), (32, 64));
        assert_eq!(shape.bytes(Operand::X), 2 * 2 * 32);
        let strided = GemvCall::new(2).with_x_row_stride(40).with_y_row_stride(70).shape(64, 32).expect("wide rows");
        assert_eq!(strided.bytes(Operand::Y), 2 * (70 + 64));
        assert!(matches!(
            GemvCall::new(2).with_x_row_stride(31).shape(64, 32),
            Err(CoreError::RowStrideTooSmall { what: "x", stride: 31, width: 32 })
        ));
        assert!(matches!(
            GemvCall::new(2).with_y_row_stride(63).shape(64, 32),
            Err(CoreError::RowStrideTooSmall { what: "y", stride: 63, width: 64 })
        ));
        assert!(GemvCall::new(0).shape(64, 32).is_err(), "M = 0 is refused");
        assert_eq!(GemvCall::new(1).family(), FamilyChoice::Auto);
        assert_eq!(GemvCall::new(1).with_family(FamilyChoice::Fast).family(), FamilyChoice::Fast);
    }
}
