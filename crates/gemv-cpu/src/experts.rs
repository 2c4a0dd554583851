//! [`CpuExperts`]: a mixture-of-experts layer's matrices, each in the CPU's arrangement.

use crate::weights::CpuWeights;
use gemv_core::{CoreError, Nvfp4ExpertsView};

/// E matrices of one shape arranged for the CPU kernels, made once (like [`CpuWeights`], of
/// which it holds one per expert); launches ([`CpuBackend::grouped`](crate::CpuBackend::grouped))
/// read only the touched experts' arrangements.
#[derive(Debug)]
pub struct CpuExperts {
    experts: Vec<CpuWeights>,
    n: usize,
    k: usize,
}

impl CpuExperts {
    /// Arranges every expert of a validated stack.
    pub fn new(weights: &Nvfp4ExpertsView<'_>) -> Result<Self, CoreError> {
        let experts = (0..weights.experts())
            .map(|e| weights.expert(e).map(|view| CpuWeights::new(&view)))
            .collect::<Result<_, _>>()?;
        Ok(Self { experts, n: weights.n(), k: weights.k() })
    }

    /// Experts.
    pub fn experts(&self) -> usize {
        self.experts.len()
    }

    /// Weight rows of each expert.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Weight columns of each expert.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Expert `e` (`e < experts`, which a validated routing guarantees).
    pub(crate) fn expert(&self, e: usize) -> &CpuWeights {
        &self.experts[e]
    }
}
