//! Every SIMD path this CPU has, at several thread counts, against the host contract bit for bit
//! on random and adversarial data: NaN and infinite activations, subnormal and huge ones, every
//! E4M3 code, signed zeros, and a product that overflows f32 inside a finite fused chain.

use gemv_backend::conformance::{
    activations, extreme_activations, matrix, matrix_with_scales, overflowing_product,
    skip::{Requirement, skip},
};
use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_core::codec::{BF16_NAN, bf16_to_f32, f32_to_bf16};
use gemv_core::{KillSwitches, Nvfp4Matrix, gemv_contract};
use gemv_cpu::{CpuBackend, SimdPath};

fn contract(w: &Nvfp4Matrix, x: &[u16], m: usize) -> Vec<u16> {
    let mut y = vec![0u16; m * w.n()];
    gemv_contract(&w.view(), x, m, &mut y, 1).expect("valid shapes");
    y
}

/// Runs `x` through every supported path at 1, 2 and 3 threads and compares with the contract.
fn all_paths_match(case: &str, w: &Nvfp4Matrix, x: &[u16], m: usize) {
    all_paths_give(case, w, x, m, &contract(w, x, m));
}

/// Runs `x` through every supported path at 1, 2 and 3 threads and compares with `expected`.
fn all_paths_give(case: &str, w: &Nvfp4Matrix, x: &[u16], m: usize, expected: &[u16]) {
    for path in SimdPath::ALL {
        if !path.is_supported() {
            skip(Requirement::CpuFeature, &format!("{case}: no {} on this CPU", path.name()));
            continue;
        }
        for threads in [1, 2, 3] {
            let backend = CpuBackend::with_path(path).expect("supported").with_threads(threads);
            let tiers = ResolvedTiers::resolve(&backend, KillSwitches::default());
            let matrix = DeviceMatrix::upload(&backend, &w.view()).expect("upload");
            let found = matrix.gemv(&tiers, x, m, 32).expect("launch");
            let bad = (0..expected.len()).find(|&i| expected[i] != found[i]);
            if let Some(i) = bad {
                panic!(
                    "{case} on {} with {threads} threads: Y[{}][{}] expected {:#06x} ({}), found {:#06x} ({})",
                    path.name(),
                    i / w.n(),
                    i % w.n(),
                    expected[i],
                    bf16_to_f32(expected[i]),
                    found[i],
                    bf16_to_f32(found[i])
                );
            }
        }
    }
}

#[test]
fn random_data_on_tails_of_every_width() {
    // K/16 = 1, 3, 17, 50, 97: blocks of 8 and 16 groups with every kind of tail.
    for k in [16, 48, 272, 800, 1552] {
        let w = matrix(37, k, k as u64);
        for m in [1, 3, 8] {
            all_paths_match(&format!("K={k} M={m}"), &w, &activations(m, k, m as u64), m);
        }
    }
}

#[test]
fn every_scale_code_and_extreme_activations() {
    let (n, k, m) = (256, 80, 5);
    let w = matrix_with_scales(n, k, 9, 0.0371, |row, _, _| row as u8);
    all_paths_match("row r scaled by code r", &w, &extreme_activations(m, k, 3), m);
    let w = matrix_with_scales(33, 1552, 10, -1.0e-40, |_, g, rng| (g as u32 ^ rng.next_u32()) as u8);
    all_paths_match("mixed codes, subnormal global scale", &w, &extreme_activations(m, 1552, 4), m);
}

#[test]
fn nan_infinity_and_signed_zero_activations() {
    let (n, k, m) = (19, 272, 4);
    let w = matrix(n, k, 5);
    let mut x = activations(m, k, 6);
    x[7] = BF16_NAN;
    x[k + 3] = f32_to_bf16(f32::INFINITY);
    x[2 * k + 100] = f32_to_bf16(f32::NEG_INFINITY);
    x[3 * k..4 * k].iter_mut().step_by(2).for_each(|v| *v = 0x8000);
    all_paths_match("NaN, ±Inf, -0", &w, &x, m);
}

#[test]
fn an_overflowing_product_inside_a_finite_fused_chain() {
    let (w, x) = overflowing_product(9, 48);
    let y = contract(&w, &x, 1);
    assert!(bf16_to_f32(y[0]).is_finite(), "the fused chain must stay finite: {:#06x}", y[0]);
    all_paths_match("overflowing product", &w, &x, 1);
}

/// Sets (or clears) the flush-to-zero and denormals-are-zero bits of this thread's SSE control
/// register; returns the previous register.
#[cfg(target_arch = "x86_64")]
fn set_flush_modes(control: Option<u64>) -> u64 {
    const FLUSH_MODES: u32 = (1 << 15) | (1 << 6);
    let mut previous: u32 = 0;
    // SAFETY: `stmxcsr` stores the control register to a valid, writable local; `ldmxcsr` loads a
    // value that differs from it only in the two flush-mode bits (or the saved register itself),
    // which change how this thread treats subnormals and unmask no exception.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut previous, options(nostack, preserves_flags));
        let next = control.map_or(previous | FLUSH_MODES, |c| c as u32);
        std::arch::asm!("ldmxcsr [{}]", in(reg) &next, options(nostack, preserves_flags, readonly));
    }
    u64::from(previous)
}

/// Sets (or restores) the flush-to-zero bit of this thread's FPCR; returns the previous FPCR.
#[cfg(target_arch = "aarch64")]
fn set_flush_modes(control: Option<u64>) -> u64 {
    const FLUSH_TO_ZERO: u64 = 1 << 24;
    let previous: u64;
    // SAFETY: reading FPCR has no effect beyond the read; the value written differs from it only
    // in the flush-to-zero bit (or is the saved register itself), which changes how this thread
    // treats subnormals and traps nothing.
    unsafe {
        std::arch::asm!("mrs {}, fpcr", out(reg) previous, options(nomem, nostack, preserves_flags));
        let next = control.unwrap_or(previous | FLUSH_TO_ZERO);
        std::arch::asm!("msr fpcr, {}", in(reg) next, options(nomem, nostack, preserves_flags));
    }
    previous
}

#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn a_caller_in_flush_to_zero_mode_still_gets_the_contract() {
    // The worker pool starts from this thread, so its threads inherit the flush modes unless they
    // clear them; subnormal activations and a subnormal global scale then change the bits.
    let (k, m) = (1552, 3);
    let w = matrix_with_scales(33, k, 12, -1.0e-40, |_, g, rng| (g as u32 ^ rng.next_u32()) as u8);
    let x = extreme_activations(m, k, 13);
    let expected = contract(&w, &x, m);
    let saved = set_flush_modes(None);
    let outcome = std::panic::catch_unwind(|| all_paths_give("caller with FTZ and DAZ set", &w, &x, m, &expected));
    set_flush_modes(Some(saved));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
