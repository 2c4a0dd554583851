//! A grouped launch streams each touched expert's weights once, however many (token, slot) pairs
//! chose it: only the block row of an expert's first pair computes, for all of its pairs. Outputs
//! cannot show this (a block of a later pair that computed its own pairs again would write the
//! same bits), so the emulator's load counts do: eight tokens on one expert read what one expert
//! holds, eight tokens on eight experts eight times that.
//!
//! Both families' grouped kernels. Planted: the exact kernel's early return for an expert's later
//! pairs removed; the eight-on-one case then read the expert's weights once per pair (8 x 32,768
//! bytes) and this test failed.

use gemv_backend::{DeviceExperts, ResolvedTiers};
use gemv_conformance::{activations, matrix};
use gemv_core::{FamilyChoice, GroupedCall, KillSwitches, Nvfp4Experts};
use gemv_cuda_emulator::CudaEmulator;

/// Rows a whole number of every grouped kernel's row blocks, K whole passes: each weight byte is
/// read once by the block row that owns it.
const N: usize = 64;
const K: usize = 1024;
const EXPERTS: usize = 8;

/// Packed-weight bytes one grouped launch of `ids` (M = 8, top-k = 1) in `family` loads.
fn packed_bytes(stack: &Nvfp4Experts, ids: &[u32], family: FamilyChoice) -> u64 {
    let emulator = CudaEmulator::new();
    let tiers = ResolvedTiers::resolve(&emulator, KillSwitches::default());
    let layer = DeviceExperts::upload(&emulator, &stack.view()).expect("upload");
    let call = GroupedCall::new(ids.len(), 1).with_family(family);
    layer.call(&tiers, &activations(ids.len(), K, 3), ids, &call).expect("grouped launch");
    emulator.global_accesses().packed_loads.bytes()
}

#[test]
fn each_touched_expert_is_streamed_once_per_launch() {
    let matrices: Vec<_> = (0..EXPERTS).map(|e| matrix(N, K, 40 + e as u64)).collect();
    let stack = Nvfp4Experts::stack(&matrices).expect("one shape");
    for family in [FamilyChoice::Exact, FamilyChoice::Fast] {
        let one_expert = packed_bytes(&stack, &[3; 8], family);
        let eight_experts = packed_bytes(&stack, &[0, 1, 2, 3, 4, 5, 6, 7], family);
        assert_eq!(one_expert, (N * K / 2) as u64, "{family:?}: eight pairs on one expert read it once");
        assert_eq!(eight_experts, 8 * one_expert, "{family:?}: eight experts are each read once");
    }
}
