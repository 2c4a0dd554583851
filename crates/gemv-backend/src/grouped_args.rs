//! The arguments of one grouped launch: a routed mixture-of-experts layer over a backend's
//! buffers, the routing read from device memory (no host round trip).

use crate::{BufferRange, Error, Result};
use gemv_core::{CoreError, Family, GROUPED_ALIGNMENTS, GROUPED_OPERANDS, GroupedCall, GroupedKernelSpec};

/// `Y[t][s] = contract(W[ids[t][s]], X[t])` for every token t < m and slot s < top_k, in one launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedArgs {
    /// X `[m][K]` bf16, contiguous, 2-byte aligned.
    pub x: BufferRange,
    /// Every expert's packed E2M1 weights, `[E][N][K/2]`.
    pub packed: BufferRange,
    /// Every expert's E4M3 block scales, `[E][N][K/16]`.
    pub scales: BufferRange,
    /// f32 global scales: exactly 4 bytes (one for every expert) or `4 E` (one each), 4-byte
    /// aligned.
    pub global_scales: BufferRange,
    /// u32 expert ids `[m][top_k]`, 4-byte aligned; an id `>= E` is an error, not a read past the
    /// weights.
    pub routing: BufferRange,
    /// Y `[m][top_k][N]` bf16, contiguous, 2-byte aligned; nothing else is written.
    pub y: BufferRange,
    /// Experts.
    pub experts: usize,
    /// Tokens.
    pub m: usize,
    /// Slots per token.
    pub top_k: usize,
    /// Weight rows of each expert.
    pub n: usize,
    /// Weight columns of each expert.
    pub k: usize,
    /// The family that computes the layer, as the caller's policy decided it
    /// ([`ResolvedTiers::family`](crate::ResolvedTiers::family)).
    pub family: Family,
    /// A grouped kernel a benchmark or a test chose ([`Self::with_kernel`]); None: the one
    /// [`gemv_core::grouped_kernel`] picks. Every kernel of a family gives the same bits.
    pub forced_kernel: Option<&'static GroupedKernelSpec>,
}

impl GroupedArgs {
    /// Whether each expert has its own global scale (else one serves all).
    pub fn per_expert_global_scales(&self) -> bool {
        self.global_scales.len != 4
    }

    /// Checks the shape and every operand's length against the call
    /// ([`GroupedCall::check_operands`]), every range inside its buffer and aligned (X and Y 2
    /// bytes, the global scales and the routing 4), and that Y overlaps no input. Every backend
    /// calls this before touching memory. The routing's values are checked by the launch.
    pub fn validate(&self) -> Result<()> {
        let ranges = [self.x, self.packed, self.scales, self.global_scales, self.routing, self.y];
        GroupedCall::new(self.m, self.top_k).check_operands(self.experts, self.n, self.k, ranges.map(|r| r.len))?;
        for ((what, range), align) in GROUPED_OPERANDS.into_iter().zip(ranges).zip(GROUPED_ALIGNMENTS) {
            range.check_bounds(what)?;
            if !range.offset.is_multiple_of(align) {
                return Err(CoreError::Misaligned { what, offset: range.offset, align }.into());
            }
        }
        let y = self.y_written();
        for (what, input) in [
            ("x", self.x_read()),
            ("packed", self.packed),
            ("scales", self.scales),
            ("global_scales", self.global_scales),
            ("routing", self.routing_read()),
        ] {
            if y.overlaps(&input) {
                return Err(Error::OutputOverlaps { what, buffer: input.buffer.id() });
            }
        }
        Ok(())
    }

    /// These arguments launched on `kernel` whatever the selector would pick, in its family.
    pub fn with_kernel(self, kernel: &'static GroupedKernelSpec) -> Self {
        Self { family: kernel.family, forced_kernel: Some(kernel), ..self }
    }

    /// The grouped kernel that serves these arguments on a backend that has the fast family
    /// (`fast_available`) or not: the forced one, else [`gemv_core::grouped_kernel`] of their
    /// family; [`CoreError::FamilyUnavailable`] for the fast family where the backend lacks it.
    /// Every backend asks this before launching, including those that run no CUDA kernel.
    pub fn kernel(&self, fast_available: bool) -> Result<&'static GroupedKernelSpec> {
        let spec = match self.forced_kernel {
            Some(spec) => spec,
            None => gemv_core::grouped_kernel(self.family, self.m, self.top_k, self.experts),
        };
        if spec.family != self.family {
            return Err(Error::KernelFamilyMismatch {
                kernel: spec.name,
                kernel_family: spec.family.name(),
                family: self.family.name(),
            });
        }
        if spec.family == Family::Fast && !fast_available {
            return Err(CoreError::FamilyUnavailable { family: Family::Fast.name() }.into());
        }
        Ok(spec)
    }

    /// The bytes of X a launch reads: `2 m K` from X's start.
    pub fn x_read(&self) -> BufferRange {
        self.x.buffer.range(self.x.offset, 2 * self.m * self.k)
    }

    /// The bytes of the routing a launch reads: `4 m top_k` from its start.
    pub fn routing_read(&self) -> BufferRange {
        self.routing.buffer.range(self.routing.offset, 4 * self.m * self.top_k)
    }

    /// The bytes of Y a launch writes: `2 m top_k N` from Y's start.
    pub fn y_written(&self) -> BufferRange {
        self.y.buffer.range(self.y.offset, 2 * self.m * self.top_k * self.n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceBuffer;

    fn args() -> GroupedArgs {
        let (e, m, top_k, n, k) = (3, 2, 2, 8, 32);
        GroupedArgs {
            x: DeviceBuffer::new(1, 2 * m * k).whole(),
            packed: DeviceBuffer::new(2, e * n * k / 2).whole(),
            scales: DeviceBuffer::new(3, e * n * k / 16).whole(),
            global_scales: DeviceBuffer::new(4, 4 * e).whole(),
            routing: DeviceBuffer::new(5, 4 * m * top_k).whole(),
            y: DeviceBuffer::new(6, 2 * m * top_k * n).whole(),
            experts: e,
            m,
            top_k,
            n,
            k,
            family: Family::Exact,
            forced_kernel: None,
        }
    }

    #[test]
    fn every_operand_is_checked_before_a_launch() {
        assert!(args().validate().is_ok());
        assert!(args().per_expert_global_scales());
        let shared = GroupedArgs { global_scales: DeviceBuffer::new(4, 4).whole(), ..args() };
        assert!(shared.validate().is_ok() && !shared.per_expert_global_scales());
        let two = GroupedArgs { global_scales: DeviceBuffer::new(4, 8).whole(), ..args() };
        assert!(matches!(two.validate(), Err(Error::Core(CoreError::LengthMismatch { what: "global_scales", .. }))));
        let short = GroupedArgs { routing: DeviceBuffer::new(5, 12).whole(), ..args() };
        assert!(matches!(short.validate(), Err(Error::Core(CoreError::RangeTooSmall { what: "routing", .. }))));
        let odd = GroupedArgs { routing: DeviceBuffer::new(5, 32).range(2, 16), ..args() };
        assert!(matches!(odd.validate(), Err(Error::Core(CoreError::Misaligned { what: "routing", .. }))));
        let outside = GroupedArgs { x: DeviceBuffer::new(1, 64).range(32, 128), ..args() };
        assert!(matches!(outside.validate(), Err(Error::RangeOutOfBounds { what: "x", .. })));
        let buffer = DeviceBuffer::new(7, 4096);
        let overlapping = GroupedArgs { routing: buffer.range(0, 16), y: buffer.range(8, 64), ..args() };
        assert!(matches!(overlapping.validate(), Err(Error::OutputOverlaps { what: "routing", .. })));
        let no_experts = GroupedArgs { experts: 0, ..args() };
        assert!(matches!(no_experts.validate(), Err(Error::Core(CoreError::ZeroCount { what: "experts" }))));
    }

    #[test]
    fn the_fast_family_is_refused_where_a_backend_lacks_it() {
        assert_eq!(args().kernel(false).ok().map(|spec| spec.family), Some(Family::Exact));
        let fast = GroupedArgs { family: Family::Fast, ..args() };
        assert!(matches!(fast.kernel(false), Err(Error::Core(CoreError::FamilyUnavailable { family: "fast" }))));
        assert_eq!(fast.kernel(true).ok().map(|spec| spec.family), Some(Family::Fast));
    }

    #[test]
    fn a_forced_kernel_serves_the_launch_in_its_family() {
        let widest = gemv_core::GROUPED_KERNELS.iter().find(|s| s.name == "w4a16_grouped_batch8_ring2_r2_b1");
        let widest = widest.expect("registry");
        assert_eq!(args().kernel(false).ok().map(|spec| spec.max_m), Some(2), "the selector's choice");
        assert_eq!(args().with_kernel(widest).kernel(false).ok(), Some(widest));
        let fast = gemv_core::GROUPED_KERNELS.iter().find(|s| s.family == Family::Fast).expect("registry");
        let forced = args().with_kernel(fast);
        assert!(matches!(forced.kernel(false), Err(Error::Core(CoreError::FamilyUnavailable { .. }))));
        assert_eq!(forced.kernel(true).ok(), Some(fast));
        let mismatched = GroupedArgs { family: Family::Exact, ..forced };
        assert!(matches!(mismatched.kernel(true), Err(Error::KernelFamilyMismatch { kernel_family: "fast", .. })));
    }
}
