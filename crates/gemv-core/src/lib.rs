//! gemv-core: everything about W4A16 batched GEMV that needs no GPU.
//!
//! - [`codec`]: E2M1, E4M3 and bf16, bit-exact against ml_dtypes.
//! - [`Nvfp4Matrix`] / [`Nvfp4View`]: the ModelOpt NVFP4 layout, validated at construction.
//! - [`quantize_f32`]: ModelOpt's recipe; [`Nvfp4TensorNames`]: where a checkpoint keeps a layer.
//! - [`gemv_contract`]: the exact numeric contract every backend reproduces bit for bit, and
//!   [`f64_reference`], the independent reference with its derived error bound.
//! - [`GemvCall`]: one call as every backend's engine path takes it (M, row strides, family);
//!   [`LaunchShape`]: one launch described once (shape, strides, what each operand needs);
//!   [`Bf16Element`]: X and Y as `u16` bits or `half::bf16`.
//! - [`Nvfp4Experts`], [`ExpertRouting`], [`GroupedCall`], [`grouped_contract`]: a routed
//!   mixture-of-experts layer, every output its one expert's exact contract.
//! - [`select_tier`], [`dispatch_plan`], [`KillSwitches`]: the one place tiers are decided;
//!   [`select_family`]: the one place the kernel family (exact or fast) is decided;
//!   [`device_tuning`]: what a device's measurements say to run there (the tuned table).
#![warn(missing_docs)]

pub use half;

mod bf16_element;
mod builds;
mod call;
mod checkpoint_names;
pub mod codec;
mod contract;
mod error;
mod experts;
mod family;
mod grouped;
mod grouped_kernels;
mod kill_switch;
mod launch;
mod matrix;
mod moe_layers;
mod plan;
mod quantize;
mod reference;
mod routing;
mod shape;
mod tiers;
mod tuned_table;
mod tuning;
mod y_format;

pub use bf16_element::{Bf16Element, bf16_bits, bf16_bits_mut};
pub use builds::{MODULE_BUILDS, ModuleBuild, dependent_module_build, module_build, module_builds};
pub use call::GemvCall;
pub use checkpoint_names::{Nvfp4Layout, Nvfp4TensorNames};
pub use contract::{PARTIALS, fused_multiply_add, gemv_contract, gemv_contract_f32, host_threads, widen_bf16};
pub use error::{CoreError, Result};
pub use experts::{Nvfp4Experts, Nvfp4ExpertsView, expert_global_scale};
pub use family::{Family, FamilyChoice, select_family};
pub use grouped::{GROUPED_ALIGNMENTS, GROUPED_OPERANDS, GroupedCall, grouped_contract};
pub use grouped_kernels::{
    GROUPED_KERNELS, GroupedKernelSpec, MAX_GROUPED_PAIRS, WARPS_PER_BLOCK, grouped_kernel, grouped_kernel_spec,
};
pub use kill_switch::{EXACT_ONLY, KillSwitches, NO_BATCH8_RT, NO_EXACT_M_TIERS, NO_TUNED_TABLE};
pub use launch::{LaunchShape, Operand, strided_span};
pub use matrix::{Nvfp4Matrix, Nvfp4View};
pub use moe_layers::{MOE_LAYERS, MoeLayer, expected_pairs_per_expert, expected_touched_experts};
pub use plan::{Launch, TierMask, dispatch_plan, fast_dispatch_plan};
pub use quantize::{global_scale_for_amax, quantize_bf16, quantize_f32, quantize_f32_with_amax, quantize_rows};
pub use reference::{ReferenceOutput, f64_reference, fast_reference, fast_rounding_depth, rounding_depth};
pub use routing::{ExpertGroup, ExpertRouting};
pub use shape::{GROUP_SIZE, GemvShape, validate_weight_shape};
pub use tiers::{
    BATCH4_TO_8, FAST_MODULE_NAME, FAST_TIERS, KERNELS, KernelSpec, MODULE_NAME, TIERS, Tier, WIDEST_TIER, batch4_to_8,
    family_kernels, family_tiers, kernel_in_module, kernel_index, kernel_spec, narrowest_tier, select_tier,
};
pub use tuning::{
    DeviceTuning, Evidence, TUNED_DEVICES, TunedKernel, TunedLaunch, TunedPlan, device_tuning, tuning_is_consistent,
};
pub use y_format::{F32_Y_NAN, YElement, YFormat, f32_y_element};
