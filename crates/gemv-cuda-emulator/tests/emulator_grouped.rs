//! A grouped launch streams each touched expert's weights once per chunk of its pairs (the
//! kernel's width), however many (token, slot) pairs chose it: only the block row of a chunk's
//! first pair computes, for the chunk's pairs. Outputs cannot show this (a block of a later pair
//! that computed its own pairs again would write the same bits), so the emulator's load counts
//! do: every token on every expert, on the family's kernel as wide as an expert's pairs, reads
//! each expert once; eight tokens on one expert under the selector's kernel, narrower than that,
//! read it once per chunk; eight tokens on eight experts read each once.
//!
//! Both families' grouped kernels. Planted: the early return of the blocks whose pair does not
//! start a chunk removed; every token on every expert then read each expert once per pair
//! (8 x 32,768 bytes an expert) and this test failed.

use gemv_backend::{DeviceExperts, ResolvedTiers};
use gemv_conformance::{activations, matrix};
use gemv_core::{
    Family, FamilyChoice, GROUPED_KERNELS, GroupedCall, GroupedKernelSpec, KillSwitches, Nvfp4Experts, grouped_kernel,
};
use gemv_cuda_emulator::CudaEmulator;

/// Rows a whole number of every grouped kernel's row blocks, K whole passes: each weight byte is
/// read once by the block row that owns it.
const N: usize = 64;
const K: usize = 1024;
const EXPERTS: usize = 8;
/// One expert's packed bytes.
const EXPERT_BYTES: u64 = (N * K / 2) as u64;

/// Packed-weight bytes one grouped launch of `ids` (M = 8 tokens, `ids.len() / 8` slots each) in
/// `family` loads, on `kernel` where given, else on the selector's.
fn packed_bytes(stack: &Nvfp4Experts, ids: &[u32], family: Family, kernel: Option<&'static GroupedKernelSpec>) -> u64 {
    let emulator = CudaEmulator::new();
    let tiers = ResolvedTiers::resolve(&emulator, KillSwitches::default());
    let layer = DeviceExperts::upload(&emulator, &stack.view()).expect("upload");
    let call = GroupedCall::new(8, ids.len() / 8).with_family(FamilyChoice::from(family));
    let x = activations(8, K, 3);
    match kernel {
        Some(kernel) => layer.call_on(kernel, &x, ids, &call),
        None => layer.call(&tiers, &x, ids, &call),
    }
    .expect("grouped launch");
    emulator.global_accesses().packed_loads.bytes()
}

#[test]
fn each_touched_expert_is_streamed_once_per_chunk_of_its_pairs() {
    let matrices: Vec<_> = (0..EXPERTS).map(|e| matrix(N, K, 40 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    for family in [Family::Exact, Family::Fast] {
        // Top 8 of 8: every expert has eight pairs, and the family's 8-wide kernel one chunk.
        let eight_wide = GROUPED_KERNELS.iter().find(|spec| spec.family == family && spec.max_m == 8);
        assert!(eight_wide.is_some(), "{family:?} has an 8-wide grouped kernel");
        let every: Vec<u32> = (0..8 * EXPERTS as u32).map(|i| i % EXPERTS as u32).collect();
        let each_once = EXPERTS as u64 * EXPERT_BYTES;
        assert_eq!(packed_bytes(&stack, &every, family, eight_wide), each_once, "{family:?}: each once");
        // Top 1 (1.5 pairs a touched expert at M = 8): eight pairs on one expert run in chunks of
        // the selector's width (2 in the exact family, 8 in the fast), each reading the expert.
        let width = grouped_kernel(family, 8, 1, EXPERTS).max_m;
        let one_expert = packed_bytes(&stack, &[3; 8], family, None);
        assert_eq!(one_expert, 8usize.div_ceil(width) as u64 * EXPERT_BYTES, "{family:?}: eight pairs on one expert");
        let eight_experts = packed_bytes(&stack, &[0, 1, 2, 3, 4, 5, 6, 7], family, None);
        assert_eq!(eight_experts, EXPERTS as u64 * EXPERT_BYTES, "{family:?}: eight experts are each read once");
    }
}
