//! Every SIMD path this CPU has, at several thread counts, against the host contract bit for bit
//! on random and adversarial data: NaN and infinite activations, subnormal and huge ones, every
//! E4M3 code, signed zeros, a product that overflows f32 inside a finite fused chain, and
//! activations on both sides of every bound the AVX-512 BF16 pair kernel is taken within.

use gemv_backend::{DeviceMatrix, ResolvedTiers};
use gemv_conformance::{
    Lcg, activations, extreme_activations, matrix, matrix_with_scales, overflowing_product,
    skip::{Requirement, skip},
};
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
        if let Some(reason) = path.unsupported_reason() {
            skip(Requirement::CpuFeature, &format!("{case}: {reason}"));
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
    let (n, k) = (256, 80);
    for m in [1, 5] {
        let w = matrix_with_scales(n, k, 9, 0.0371, |row, _, _| row as u8);
        all_paths_match(&format!("row r scaled by code r, M={m}"), &w, &extreme_activations(m, k, 3), m);
        let w = matrix_with_scales(33, 1552, 10, -1.0e-40, |_, g, rng| (g as u32 ^ rng.next_u32()) as u8);
        all_paths_match(
            &format!("mixed codes, subnormal global scale, M={m}"),
            &w,
            &extreme_activations(m, 1552, 4),
            m,
        );
    }
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
    // Four tokens, the pair kernel's width, each with the overflowing product.
    let x4: Vec<u16> = x.iter().copied().cycle().take(4 * x.len()).collect();
    all_paths_match("overflowing product, four tokens", &w, &x4, 4);
}

#[test]
fn one_token_whose_activation_times_six_overflows() {
    // Weights 6 with scale 2^-6 (code 0x08): `ws * x` = 1.5 * 2^123 stays finite for x = 2^127,
    // while `6 * x` alone overflows f32, so the products kernel must not take this X.
    let (n, k) = (40, 64);
    let (packed, scales) = (vec![0x77u8; n * k / 2], vec![0x08u8; n * k / 16]);
    let w = Nvfp4Matrix::from_parts(packed, scales, 1.0, n, k).expect("a valid shape");
    let mut x = vec![0u16; k];
    x[5] = 0x7F00; // 2^127
    x[40] = 0x7E80; // 2^126
    let expected = contract(&w, &x, 1);
    assert!(expected.iter().all(|&y| bf16_to_f32(y).is_finite() && y != 0), "finite, nonzero sums");
    all_paths_give("6 x past f32, ws x finite", &w, &x, 1, &expected);
}

/// `m` rows of K activations with exponents spread over `2^low .. 2^high` (random signs and
/// mantissas) and a zero now and then.
fn spread_activations(m: usize, k: usize, (low, high): (i32, i32), seed: u64) -> Vec<u16> {
    let mut rng = Lcg::new(seed);
    (0..m * k)
        .map(|_| {
            let bits = rng.next_u32();
            if bits.is_multiple_of(29) {
                return 0;
            }
            let exponent = (127 + low + (bits >> 8) as i32 % (high - low + 1)) as u16;
            ((bits & 1) as u16) << 15 | exponent << 7 | ((bits >> 1) % 128) as u16
        })
        .collect()
}

#[test]
fn each_pair_of_elements_is_added_in_order() {
    // Row r: partial l = r % 64 meets +2^24 in its first group, then -2^24 and 1 as elements
    // 2 i and 2 i + 1 (i = r % 8) of its second: in order the sum is 1; with the pair's two
    // products swapped, 2^24 + 1 rounds to 2^24 and the sum is 0.
    let (n, k) = (64, 2048);
    let groups = k / 16;
    let (mut packed, scales) = (vec![0u8; n * k / 2], vec![0x38u8; n * groups]); // scale 1.0
    let mut set = |row: usize, element: usize, code: u8| {
        packed[row * k / 2 + element / 2] |= code << (4 * (element % 2));
    };
    for row in 0..n {
        let (l, i) = (row % 64, row % 8);
        set(row, 16 * l, 0x6); // 4
        set(row, 16 * (l + 64) + 2 * i, 0xE); // -4
        set(row, 16 * (l + 64) + 2 * i + 1, 0x2); // 1
    }
    let w = Nvfp4Matrix::from_parts(packed, scales, 1.0, n, k).expect("a valid shape");
    // Even elements 2^22, odd ones 1.
    let m = 4;
    let x: Vec<u16> = (0..m * k).map(|i| if i % 2 == 0 { 0x4A80 } else { 0x3F80 }).collect();
    let expected = contract(&w, &x, m);
    assert!(expected.iter().all(|&y| y == 0x3F80), "the contract's sums are 1");
    all_paths_give("pairs whose order decides the sum", &w, &x, m, &expected);
    let wide = matrix(48, 1024, 21);
    for m in [3, 5, 8] {
        let x = spread_activations(m, 1024, (-24, 24), m as u64);
        all_paths_match(&format!("activations from 2^-24 to 2^24, M={m}"), &wide, &x, m);
    }
}

#[test]
fn products_below_the_smallest_normal_count() {
    // Subnormal scales (weights 2^-10 .. 42 * 2^-9) and activations from 2^-126 to 2^-118:
    // nearly every product is subnormal in f32, and the sums are the contract's only if none is
    // flushed to zero.
    // One token (the products kernel, whose `e2m1 * x` are subnormal here too) and four.
    let w = matrix_with_scales(40, 1024, 24, 1.0, |_, _, rng| (1 + rng.next_u32() % 7) as u8);
    for m in [1, 4] {
        let x = spread_activations(m, 1024, (-126, -118), 25);
        let expected = contract(&w, &x, m);
        assert!(expected.iter().filter(|&&y| y & 0x7FFF != 0).count() > expected.len() / 2, "mostly nonzero sums");
        all_paths_give(&format!("subnormal products, M={m}"), &w, &x, m, &expected);
    }
}

#[test]
fn activations_at_the_bounds_of_the_pair_and_products_kernels() {
    // Subnormal scale codes among the others: weights down to 2^-10.
    let w = matrix_with_scales(40, 1552, 22, 1.0, |_, g, rng| {
        if g % 3 == 0 { (rng.next_u32() % 8) as u8 } else { rng.next_u32() as u8 & 0x7F }
    });
    // From 2^-109 up every product and partial is a multiple of 2^-126 (pairs); below, products
    // are subnormal in f32 (widened). Just below 2^116 no product overflows (pairs, and products
    // at one token); from 2^116 up one can (widened), and from 2^125 `6 x` itself overflows,
    // which the products kernel must never compute.
    for m in [1, 4] {
        for (case, range) in [
            ("2^-109 .. 2^-100, partials near the subnormals", (-109, -100)),
            ("2^-126 .. 2^-110, products subnormal", (-126, -110)),
            ("2^100 .. 2^115, products near the f32 limit", (100, 115)),
            ("2^110 .. 2^127, products overflowing", (110, 127)),
        ] {
            all_paths_match(&format!("{case}, M={m}"), &w, &spread_activations(m, 1552, range, 23), m);
        }
    }
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
    let k = 1552;
    let w = matrix_with_scales(33, k, 12, -1.0e-40, |_, g, rng| (g as u32 ^ rng.next_u32()) as u8);
    let cases: Vec<(usize, Vec<u16>)> = [1, 3].map(|m| (m, extreme_activations(m, k, 13))).into();
    let expected: Vec<Vec<u16>> = cases.iter().map(|(m, x)| contract(&w, x, *m)).collect();
    let saved = set_flush_modes(None);
    let outcome = std::panic::catch_unwind(|| {
        for ((m, x), expected) in cases.iter().zip(&expected) {
            all_paths_give(&format!("caller with FTZ and DAZ set, M={m}"), &w, x, *m, expected);
        }
    });
    set_flush_modes(Some(saved));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
