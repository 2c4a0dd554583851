//! A mixture-of-experts layer's weights: E NVFP4 matrices of one shape stacked as one tensor, the
//! layout checkpoints store them in (`[E, N, K/2]` packed, `[E, N, K/16]` scales) with a global
//! scale per expert or one shared by all.

use crate::shape::{GROUP_SIZE, validate_weight_shape};
use crate::{CoreError, Nvfp4Matrix, Nvfp4View, Result};

/// Expert `e`'s global scale among `global_scales`: the one given for every expert, or its own.
///
/// # Panics
/// When there are several scales and `e` is not below their count.
pub fn expert_global_scale(global_scales: &[f32], e: usize) -> f32 {
    global_scales[if global_scales.len() == 1 { 0 } else { e }]
}

/// A validated, borrowed stack of `experts` NVFP4 matrices `[N, K]`: expert e's packed bytes at
/// `e * N * K/2`, its scales at `e * N * K/16`, its global scale `global_scales[e]` (or
/// `global_scales[0]` for every expert when one is given).
#[derive(Debug, Clone, Copy)]
pub struct Nvfp4ExpertsView<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    global_scales: &'a [f32],
    experts: usize,
    n: usize,
    k: usize,
}

impl<'a> Nvfp4ExpertsView<'a> {
    /// Checks the shape, `experts >= 1`, the lengths (`E N K/2` packed bytes, `E N K/16` scale
    /// bytes) and that there is one global scale or `experts` of them.
    pub fn new(
        packed: &'a [u8],
        scales: &'a [u8],
        global_scales: &'a [f32],
        experts: usize,
        n: usize,
        k: usize,
    ) -> Result<Self> {
        validate_weight_shape(n, k)?;
        if experts == 0 {
            return Err(CoreError::ZeroCount { what: "experts" });
        }
        let overflow = || CoreError::SizeOverflow { what: "experts' weights", m: experts, n, k };
        let expected_packed = experts.checked_mul(n * k / 2).ok_or_else(overflow)?;
        let expected_scales = experts.checked_mul(n * k / GROUP_SIZE).ok_or_else(overflow)?;
        for (what, expected, found) in
            [("packed", expected_packed, packed.len()), ("scales", expected_scales, scales.len())]
        {
            if found != expected {
                return Err(CoreError::LengthMismatch { what, expected, found, m: 0, n, k });
            }
        }
        if global_scales.len() != 1 && global_scales.len() != experts {
            return Err(CoreError::LengthMismatch {
                what: "global_scales",
                expected: experts,
                found: global_scales.len(),
                m: 0,
                n,
                k,
            });
        }
        Ok(Self { packed, scales, global_scales, experts, n, k })
    }

    /// Experts.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// Weight rows of each expert.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns of each expert.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Every expert's packed bytes, expert after expert.
    pub fn packed(&self) -> &'a [u8] {
        self.packed
    }

    /// Every expert's scale bytes, expert after expert.
    pub fn scales(&self) -> &'a [u8] {
        self.scales
    }

    /// The global scales as given: one shared, or one per expert.
    pub fn global_scales(&self) -> &'a [f32] {
        self.global_scales
    }

    /// Expert `e`'s global scale.
    ///
    /// # Panics
    /// When `e >= experts`.
    pub fn global_scale(&self, e: usize) -> f32 {
        assert!(e < self.experts, "expert {e} of {}", self.experts);
        expert_global_scale(self.global_scales, e)
    }

    /// Expert `e`'s matrix; [`CoreError::ExpertOutOfRange`] when `e >= experts`.
    pub fn expert(&self, e: usize) -> Result<Nvfp4View<'a>> {
        if e >= self.experts {
            return Err(CoreError::ExpertOutOfRange { token: 0, slot: 0, id: e as u64, experts: self.experts });
        }
        let (packed_len, scales_len) = (self.n * self.k / 2, self.n * self.k / GROUP_SIZE);
        Nvfp4View::new(
            &self.packed[e * packed_len..(e + 1) * packed_len],
            &self.scales[e * scales_len..(e + 1) * scales_len],
            self.global_scale(e),
            self.n,
            self.k,
        )
    }
}

/// An owned stack of NVFP4 matrices of one shape (see [`Nvfp4ExpertsView`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4Experts {
    packed: Vec<u8>,
    scales: Vec<u8>,
    global_scales: Vec<f32>,
    experts: usize,
    n: usize,
    k: usize,
}

impl Nvfp4Experts {
    /// Stacks `matrices` (at least one, all of one shape), keeping each one's global scale.
    pub fn stack(matrices: &[Nvfp4Matrix]) -> Result<Self> {
        let first = matrices.first().ok_or(CoreError::ZeroCount { what: "experts" })?;
        let (n, k) = (first.n(), first.k());
        let mut packed = Vec::with_capacity(matrices.len() * n * k / 2);
        let mut scales = Vec::with_capacity(matrices.len() * n * k / GROUP_SIZE);
        for matrix in matrices {
            // The first dimension that differs is the one the error names.
            let (what, expected, found) =
                if matrix.n() != n { ("expert rows", n, matrix.n()) } else { ("expert columns", k, matrix.k()) };
            if expected != found {
                return Err(CoreError::LengthMismatch { what, expected, found, m: 0, n: matrix.n(), k: matrix.k() });
            }
            packed.extend_from_slice(matrix.view().packed());
            scales.extend_from_slice(matrix.view().scales());
        }
        let global_scales: Vec<f32> = matrices.iter().map(Nvfp4Matrix::global_scale).collect();
        let experts = matrices.len();
        Nvfp4ExpertsView::new(&packed, &scales, &global_scales, experts, n, k)?;
        Ok(Self { packed, scales, global_scales, experts, n, k })
    }

    /// Borrows the stack.
    pub fn view(&self) -> Nvfp4ExpertsView<'_> {
        Nvfp4ExpertsView {
            packed: &self.packed,
            scales: &self.scales,
            global_scales: &self.global_scales,
            experts: self.experts,
            n: self.n,
            k: self.k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(n: usize, k: usize, fill: u8, global_scale: f32) -> Nvfp4Matrix {
        Nvfp4Matrix::from_parts(vec![fill; n * k / 2], vec![0x38; n * k / 16], global_scale, n, k).expect("valid")
    }

    #[test]
    fn a_stack_hands_out_each_expert_with_its_own_bytes_and_global_scale() {
        let experts = Nvfp4Experts::stack(&[matrix(3, 32, 0x11, 1.0), matrix(3, 32, 0x22, 2.0)]).expect("stack");
        let view = experts.view();
        assert_eq!((view.experts(), view.n(), view.k()), (2, 3, 32));
        let second = view.expert(1).expect("expert 1");
        assert_eq!(second.packed(), &[0x22; 48][..]);
        assert_eq!(second.global_scale(), 2.0);
        assert!(matches!(view.expert(2), Err(CoreError::ExpertOutOfRange { id: 2, experts: 2, .. })));
    }

    #[test]
    fn one_global_scale_serves_every_expert_and_bad_lengths_are_refused() {
        let (packed, scales) = (vec![0u8; 2 * 3 * 16], vec![0x38u8; 2 * 3 * 2]);
        let shared = Nvfp4ExpertsView::new(&packed, &scales, &[0.5], 2, 3, 32).expect("shared scale");
        assert_eq!((shared.global_scale(0), shared.global_scale(1)), (0.5, 0.5));
        let three = [1.0f32; 3];
        assert!(matches!(
            Nvfp4ExpertsView::new(&packed, &scales, &three, 2, 3, 32),
            Err(CoreError::LengthMismatch { what: "global_scales", expected: 2, found: 3, .. })
        ));
        assert!(matches!(
            Nvfp4ExpertsView::new(&packed[1..], &scales, &[1.0], 2, 3, 32),
            Err(CoreError::LengthMismatch { what: "packed", .. })
        ));
        assert!(matches!(
            Nvfp4ExpertsView::new(&[], &[], &[1.0], 0, 3, 32),
            Err(CoreError::ZeroCount { what: "experts" })
        ));
        assert!(Nvfp4Experts::stack(&[matrix(3, 32, 0, 1.0), matrix(4, 32, 0, 1.0)]).is_err());
        assert!(matches!(
            Nvfp4Experts::stack(&[matrix(3, 32, 0, 1.0), matrix(3, 48, 0, 1.0)]),
            Err(CoreError::LengthMismatch { what: "expert columns", expected: 32, found: 48, .. })
        ));
    }
}
