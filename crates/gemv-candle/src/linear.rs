//! The layer: weights placed once on a device, `forward` over any leading dimensions.

use crate::op::LinearOp;
use crate::placement::{LayerDims, Placement};
use candle_core::{DType, Device, Result, Tensor, bail};
use gemv_core::{FamilyChoice, Nvfp4Matrix};

/// One NVFP4 linear layer without bias: `Y = X W^T`, W `[out_features, in_features]`.
pub struct Nvfp4Linear {
    pub(crate) placement: Placement,
    pub(crate) dims: LayerDims,
}

impl std::fmt::Debug for Nvfp4Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let device = self.placement.device_name();
        f.debug_struct("Nvfp4Linear")
            .field("out_features", &self.dims.n)
            .field("in_features", &self.dims.k)
            .field("global_scale", &self.dims.global_scale)
            .field("device", &device)
            .field("family", &self.dims.family)
            .finish()
    }
}

impl Nvfp4Linear {
    /// Places `matrix` on `device`: arranged for the CPU kernels, or uploaded on the CUDA
    /// device's stream with gemv's kernels loaded into its context (feature `cuda`). The exact
    /// family by default ([`Self::with_family`]).
    pub fn new(matrix: &Nvfp4Matrix, device: &Device) -> Result<Self> {
        let placement = Placement::new(&matrix.view(), device)?;
        Ok(Self {
            placement,
            dims: LayerDims {
                n: matrix.n(),
                k: matrix.k(),
                global_scale: matrix.global_scale(),
                family: FamilyChoice::Exact,
            },
        })
    }

    /// The kernel family the CUDA path runs: `Exact` (the default: the contract's bits, the
    /// CPU's), `Fast` (tensor cores, sm_80 and newer: within a derived bound of an f64
    /// reference, batch-invariant) or `Auto` (gemv's policy). The CPU path is always exact.
    pub fn with_family(mut self, family: FamilyChoice) -> Self {
        self.dims.family = family;
        self
    }

    /// K, the columns of X.
    pub fn in_features(&self) -> usize {
        self.dims.k
    }

    /// N, the columns of Y.
    pub fn out_features(&self) -> usize {
        self.dims.n
    }

    /// The global scale the layer multiplies by.
    pub fn global_scale(&self) -> f32 {
        self.dims.global_scale
    }

    /// `Y = X W^T` for a bf16 `x` of shape `[..., in_features]`: Y is `[..., out_features]`,
    /// bf16, on x's device (which must be the layer's).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let Some((&k, leading)) = x.dims().split_last() else {
            bail!("gemv-candle: x must have at least one dimension (its last is in_features)");
        };
        if k != self.dims.k {
            bail!("gemv-candle: x's last dimension is {k}, the layer's in_features {}", self.dims.k);
        }
        if x.dtype() != DType::BF16 {
            bail!("gemv-candle: x must be bf16, found {:?}", x.dtype());
        }
        let m: usize = leading.iter().product();
        let mut y_dims = leading.to_vec();
        y_dims.push(self.dims.n);
        if m == 0 {
            return Tensor::zeros(y_dims, DType::BF16, x.device());
        }
        let rows = x.contiguous()?.reshape((m, k))?;
        rows.apply_op1_no_bwd(&LinearOp { placement: &self.placement, dims: self.dims })?.reshape(y_dims)
    }
}

/// `Y = X W^T`, as [`Nvfp4Linear::forward`]: the layer in any candle model built of modules.
impl candle_core::Module for Nvfp4Linear {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Nvfp4Linear::forward(self, xs)
    }
}
