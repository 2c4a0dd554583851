//! The 27B qkv/o shape N = K = 5120 at M = 8 under the emulator, bit-exact against the host
//! reference. Release only (`cargo xtask test` runs it with --release); prints its time.

use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_conformance as conformance;
use gemv_core::{KillSwitches, gemv_contract, host_threads};
use gemv_cuda_emulator::CudaEmulator;
use std::time::Instant;

#[test]
#[cfg_attr(debug_assertions, ignore = "release-mode test: `cargo xtask test` runs it with --release")]
fn qkv_shape_m8_is_bit_exact() {
    let (n, k, m) = (5120, 5120, 8);
    let weights = conformance::matrix(n, k, 2026);
    let x = conformance::activations(m, k, 11);
    let mut expected = vec![0u16; m * n];
    gemv_contract(&weights.view(), &x, m, &mut expected, host_threads()).expect("host contract");

    let emulator = CudaEmulator::new();
    let tiers = ResolvedTiers::resolve(&emulator, KillSwitches::default());
    let matrix = DeviceMatrix::upload(&emulator, &weights.view()).expect("upload");
    let start = Instant::now();
    let found = matrix.gemv(&tiers, &x, m, 8).expect("emulated launch");
    let elapsed = start.elapsed();
    let differing = expected.iter().zip(&found).filter(|(a, b)| a != b).count();
    assert_eq!(differing, 0, "{differing} of {} outputs differ from the host contract", expected.len());
    eprintln!("cuda-emu N={n} K={k} M={m} (w4a16_gemv_batch8_rt2): {:.2} s, bit-exact", elapsed.as_secs_f64());
}
