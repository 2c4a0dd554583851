//! gemv-candle: NVFP4 (W4A16) linear layers for candle, on gemv's kernels.
//!
//! [`Nvfp4Linear`] holds one layer's weights in NVIDIA ModelOpt's NVFP4 format (E2M1 values, an
//! E4M3 scale per 16, an FP32 global scale), loaded from a checkpoint in either layout in use
//! (ModelOpt's or compressed-tensors'), from a `VarBuilder` ([`nvfp4_linear`], as
//! `candle_nn::linear_no_bias` loads a dense layer) or from tensors any loader produced.
//! [`Nvfp4Linear::forward`] computes `Y = X W^T` for a bf16 `X` of any leading dimensions:
//!
//! - on a CUDA device (feature `cuda`), gemv's kernels are enqueued on candle's own stream, read
//!   X from candle's storage in place and write Y into a buffer candle owns: no host round trip,
//!   no synchronisation;
//! - on the CPU, gemv's CPU backend computes the exact contract, the bits the exact CUDA family
//!   writes.
//!
//! [`Nvfp4RoutedExperts`] is a routed mixture-of-experts layer: a stack of experts and, per
//! token, the ids its router chose (a u32 tensor on the same device, read by the GPU on CUDA);
//! [`Nvfp4RoutedExperts::forward`] is one grouped launch that reads each touched expert once.
//!
//! ```no_run
//! use candle_core::{DType, Device, Tensor};
//! use candle_core::safetensors::MmapedSafetensors;
//! use gemv_candle::Nvfp4Linear;
//!
//! # fn main() -> candle_core::Result<()> {
//! let device = Device::Cpu;
//! // SAFETY: the file is not modified while mapped.
//! let checkpoint = unsafe { MmapedSafetensors::new("model-nvfp4.safetensors")? };
//! let up = Nvfp4Linear::from_safetensors(&checkpoint, "model.layers.0.mlp.up_proj", &device)?;
//! let x = Tensor::zeros((2, 3, up.in_features()), DType::BF16, &device)?;
//! let y = up.forward(&x)?; // [2, 3, out_features], bf16
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod experts;
mod linear;
mod load;
mod op;
mod placement;

pub use experts::Nvfp4RoutedExperts;
pub use gemv_core::{FamilyChoice, Nvfp4Experts, Nvfp4ExpertsView, Nvfp4Layout};
pub use linear::Nvfp4Linear;
pub use load::{TensorSource, nvfp4_linear};
#[cfg(feature = "cuda")]
pub use placement::cuda_kernel_loads;
