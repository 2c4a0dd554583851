//! A routed mixture-of-experts layer: its experts placed once on a device, `forward` over the
//! tokens and the routing an engine's router gives them.

use crate::op::GroupedOp;
use crate::placement::{ExpertsDims, ExpertsPlacement};
use candle_core::{DType, Device, Result, Tensor, bail};
use gemv_core::{FamilyChoice, Nvfp4ExpertsView};

/// The experts of one routed layer without bias: `y[t][s] = x[t] W[ids[t][s]]^T`, every
/// `W` `[out_features, in_features]` NVFP4, one global scale per expert or one shared.
pub struct Nvfp4RoutedExperts {
    placement: ExpertsPlacement,
    dims: ExpertsDims,
}

impl std::fmt::Debug for Nvfp4RoutedExperts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvfp4RoutedExperts")
            .field("experts", &self.dims.experts)
            .field("out_features", &self.dims.n)
            .field("in_features", &self.dims.k)
            .field("device", &self.placement.device_name())
            .finish()
    }
}

impl Nvfp4RoutedExperts {
    /// Places a stack of experts (`gemv_core::Nvfp4Experts::view`, or a view of a checkpoint's
    /// `[E, N, K/2]` tensors) on `device`: each expert arranged for the CPU kernels, or the stack
    /// uploaded on the CUDA device's stream with gemv's kernels loaded into its context (feature
    /// `cuda`). The exact family by default ([`Self::with_family`]): every output is its
    /// expert's exact contract.
    pub fn new(experts: &Nvfp4ExpertsView<'_>, device: &Device) -> Result<Self> {
        let placement = ExpertsPlacement::new(experts, device)?;
        let dims =
            ExpertsDims { experts: experts.experts(), n: experts.n(), k: experts.k(), family: FamilyChoice::Exact };
        Ok(Self { placement, dims })
    }

    /// The kernel family the CUDA path runs: `Exact` (the default: the contract's bits, the
    /// CPU's), `Fast` (tensor cores, sm_80 and newer: each slot's output is the fast family's
    /// single launch of its expert, within its bound of an f64 reference, independent of the other
    /// tokens) or `Auto` (gemv's policy). The CPU path is always exact.
    pub fn with_family(mut self, family: FamilyChoice) -> Self {
        self.dims.family = family;
        self
    }

    /// Experts in the layer.
    pub fn experts(&self) -> usize {
        self.dims.experts
    }

    /// K, the columns of X.
    pub fn in_features(&self) -> usize {
        self.dims.k
    }

    /// N, the columns of each expert's output.
    pub fn out_features(&self) -> usize {
        self.dims.n
    }

    /// Every token of `x` (bf16 `[..., in_features]`) through the experts its row of `ids` (u32
    /// `[..., top_k]`, the same leading dimensions) names: Y is bf16 `[..., top_k,
    /// out_features]` on x's device, in one grouped launch that reads each touched expert's
    /// weights once. An id past the experts is an error on the CPU; on CUDA, where the GPU reads
    /// the routing, it gives that slot NaN rows.
    pub fn forward(&self, x: &Tensor, ids: &Tensor) -> Result<Tensor> {
        let Some((&k, leading)) = x.dims().split_last() else {
            bail!("gemv-candle: x must have at least one dimension (its last is in_features)");
        };
        if k != self.dims.k {
            bail!("gemv-candle: x's last dimension is {k}, the experts' in_features {}", self.dims.k);
        }
        if x.dtype() != DType::BF16 || ids.dtype() != DType::U32 {
            bail!("gemv-candle: x must be bf16 and ids u32, found {:?} and {:?}", x.dtype(), ids.dtype());
        }
        let Some((&top_k, id_leading)) = ids.dims().split_last() else {
            bail!("gemv-candle: ids must have at least one dimension (its last is top_k)");
        };
        if id_leading != leading || top_k == 0 {
            bail!("gemv-candle: ids {:?} must be x's leading dimensions {leading:?} and top_k >= 1", ids.dims());
        }
        let m: usize = leading.iter().product();
        let mut y_dims = leading.to_vec();
        y_dims.extend([top_k, self.dims.n]);
        if m == 0 {
            return Tensor::zeros(y_dims, DType::BF16, x.device());
        }
        let rows = x.contiguous()?.reshape((m, k))?;
        let routing = ids.contiguous()?.reshape((m, top_k))?;
        let op = GroupedOp { placement: &self.placement, dims: self.dims };
        rows.apply_op2_no_bwd(&routing, &op)?.reshape(y_dims)
    }
}
