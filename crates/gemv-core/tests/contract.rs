//! The host contract: hand-checked values, thread-count independence, the quantizer round trip,
//! and the f64 reference bound.

use gemv_core::codec::{bf16_to_f32, decode_e4m3, encode_e4m3, f32_to_bf16};
use gemv_core::{
    CoreError, F32_Y_NAN, GemvShape, Nvfp4Matrix, Nvfp4View, f64_reference, gemv_contract, gemv_contract_f32,
    quantize_f32, rounding_depth,
};

/// A small deterministic generator (tests need no RNG crate).
fn lcg(seed: &mut u64) -> u32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 33) as u32
}

fn random_matrix(n: usize, k: usize, seed: &mut u64) -> Nvfp4Matrix {
    let packed = (0..n * k / 2).map(|_| lcg(seed) as u8).collect();
    // Scales in a normal range (codes 0x30..0x50: 2^-1 .. 2^3) so nothing is subnormal.
    let scales = (0..n * k / 16).map(|_| 0x30 + (lcg(seed) % 0x20) as u8).collect();
    Nvfp4Matrix::from_parts(packed, scales, 0.37, n, k).expect("valid")
}

fn random_x(m: usize, k: usize, seed: &mut u64) -> Vec<u16> {
    (0..m * k).map(|_| f32_to_bf16((lcg(seed) as f32 / u32::MAX as f32) * 4.0 - 2.0)).collect()
}

#[test]
fn hand_checked_single_group() {
    // Row 0: codes 1 (0.5) everywhere, scale 1.0 (0x38); X = 2.0 everywhere: 16 * 0.5 * 2 = 16.
    let packed = vec![0x11u8; 8];
    let scales = vec![encode_e4m3(1.0)];
    let w = Nvfp4View::new(&packed, &scales, 0.5, 1, 16).expect("valid");
    let x = vec![f32_to_bf16(2.0); 16];
    let mut y = vec![0u16; 1];
    gemv_contract(&w, &x, 1, &mut y, 1).expect("runs");
    assert_eq!(bf16_to_f32(y[0]), 8.0, "16 * 0.5 * 2 * global 0.5");
}

#[test]
fn nibble_order_low_is_even_k() {
    // Byte 0x70: k = 0 is code 0 (0.0), k = 1 is code 7 (6.0).
    let mut packed = vec![0u8; 8];
    packed[0] = 0x70;
    let scales = vec![encode_e4m3(1.0)];
    let w = Nvfp4View::new(&packed, &scales, 1.0, 1, 16).expect("valid");
    let mut x = vec![0u16; 16];
    x[1] = f32_to_bf16(1.0);
    let mut y = vec![0u16];
    gemv_contract(&w, &x, 1, &mut y, 1).expect("runs");
    assert_eq!(bf16_to_f32(y[0]), 6.0);
}

#[test]
fn thread_count_does_not_change_bits() {
    let mut seed = 7;
    let w = random_matrix(37, 16 * 70, &mut seed);
    let x = random_x(5, 16 * 70, &mut seed);
    let mut one = vec![0u16; 5 * 37];
    gemv_contract(&w.view(), &x, 5, &mut one, 1).expect("runs");
    for threads in [2, 3, 8, 100] {
        let mut many = vec![0u16; 5 * 37];
        gemv_contract(&w.view(), &x, 5, &mut many, threads).expect("runs");
        assert_eq!(one, many, "threads = {threads}");
    }
}

#[test]
fn rows_are_independent_of_m() {
    let mut seed = 11;
    let w = random_matrix(9, 16 * 130, &mut seed);
    let x = random_x(8, 16 * 130, &mut seed);
    let mut all = vec![0u16; 8 * 9];
    gemv_contract(&w.view(), &x, 8, &mut all, 2).expect("runs");
    for t in 0..8 {
        let mut one = vec![0u16; 9];
        gemv_contract(&w.view(), &x[t * 16 * 130..(t + 1) * 16 * 130], 1, &mut one, 1).expect("runs");
        assert_eq!(one, all[t * 9..(t + 1) * 9], "row {t}");
    }
}

#[test]
fn within_the_f64_bound() {
    let mut seed = 3;
    for (n, k) in [(7, 16), (33, 16 * 64), (5, 16 * 200), (3, 5136)] {
        let w = random_matrix(n, k, &mut seed);
        let x = random_x(3, k, &mut seed);
        let mut y = vec![0u16; 3 * n];
        gemv_contract(&w.view(), &x, 3, &mut y, 2).expect("runs");
        let reference = f64_reference(&w.view(), &x, 3).expect("runs");
        for (i, (r, &found)) in reference.iter().zip(&y).enumerate() {
            assert!(
                r.admits(found),
                "N={n} K={k} output {i}: expected {} ± {}, found {}",
                r.value,
                r.bound,
                bf16_to_f32(found)
            );
        }
    }
}

#[test]
fn the_bound_is_tight_enough_to_fail() {
    // A wrong answer by one bf16 ulp on a large value must be rejected.
    let mut seed = 5;
    let w = random_matrix(4, 64, &mut seed);
    let x = random_x(1, 64, &mut seed);
    let mut y = vec![0u16; 4];
    gemv_contract(&w.view(), &x, 1, &mut y, 1).expect("runs");
    let reference = f64_reference(&w.view(), &x, 1).expect("runs");
    let (i, r) =
        reference.iter().enumerate().max_by(|a, b| a.1.value.abs().total_cmp(&b.1.value.abs())).expect("outputs");
    assert!(!r.admits(y[i] + 2), "two ulps off must fail: {} ± {}", r.value, r.bound);
    assert_eq!(rounding_depth(1), 15 + 6);
    assert_eq!(rounding_depth(65), 31 + 6);
    assert_eq!(rounding_depth(321), 101, "K = 5136, the figure docs/numerics.md quotes");
}

#[test]
fn quantizer_follows_modelopt_recipe() {
    let (n, k) = (3, 32);
    let values: Vec<f32> = (0..n * k).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
    let q = quantize_f32(&values, n, k).expect("quantizes");
    let amax = values.iter().fold(0f32, |a, v| a.max(v.abs()));
    assert_eq!(q.global_scale(), amax / (6.0 * 448.0));
    let view = q.view();
    for row in 0..n {
        for col in 0..k {
            let back = view.scaled_weight(row, col) * view.global_scale();
            let block_amax = values[row * k + col / 16 * 16..][..16].iter().fold(0f32, |a, v| a.max(v.abs()));
            // Half a step of the E2M1 grid at the top of the block, plus the E4M3 scale error.
            let tolerance = block_amax / 6.0 * 1.0 + 1e-6;
            assert!(
                (back - values[row * k + col]).abs() <= tolerance,
                "[{row},{col}] {} vs {back}",
                values[row * k + col]
            );
        }
    }
    // Each block's scale is its own amax / 6 in units of the global scale, rounded to E4M3: a
    // block far below the tensor's maximum gets a small scale, not the tensor's.
    let mut blocks = values.clone();
    blocks[16..32].iter_mut().for_each(|v| *v *= 0.01);
    let q2 = quantize_f32(&blocks, n, k).expect("quantizes");
    let global = q2.global_scale();
    for (block, chunk) in blocks.chunks(16).enumerate() {
        let block_amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
        let expected = encode_e4m3((block_amax / (6.0 * global)).max(1.0 / 512.0));
        assert_eq!(q2.view().scales()[block], expected, "block {block} (amax {block_amax})");
    }
    // The largest magnitude of the tensor is representable: code 6.0 at scale 448.
    let (imax, _) = values.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).expect("values");
    let back = view.scaled_weight(imax / k, imax % k) * view.global_scale();
    assert!((back.abs() - amax).abs() <= amax * 1e-6, "amax {amax} came back as {back}");
}

#[test]
fn quantizer_rejects_bad_input() {
    assert!(matches!(quantize_f32(&[0.0; 16], 1, 15), Err(CoreError::InvalidK { k: 15, .. })));
    assert!(matches!(quantize_f32(&[0.0; 15], 1, 16), Err(CoreError::LengthMismatch { what: "values", .. })));
    let mut v = vec![0.0f32; 32];
    v[17] = f32::NAN;
    assert!(matches!(quantize_f32(&v, 2, 16), Err(CoreError::NonFiniteWeight { row: 1, col: 1, .. })));
    let zeros = quantize_f32(&[0.0; 32], 2, 16).expect("zeros quantize");
    assert!(zeros.view().packed().iter().all(|&b| b == 0));
}

/// ModelOpt's edge cases, each in its own block of one row (the byte-for-byte comparison with
/// ModelOpt's own output is `gemv-cli/tests/modelopt.rs`).
#[test]
fn quantizer_edge_cases_follow_modelopt() {
    let mut row = vec![0f32; 16 * 5];
    row[0] = 3.0; // block 0 sets the tensor's amax: scale 448
    // block 1: all zero, some negative zeros
    row[17] = -0.0;
    // block 2: far below the maximum (ratio 448 * 1e-7 / 3 < 2^-9): clamped to 2^-9, not zeroed
    row[32] = 1e-7;
    row[33] = -1e-7;
    // block 3: a tiny negative value next to a larger one rounds to zero and keeps its sign
    row[48] = 1e-3;
    row[49] = -1e-6;
    // block 4: a ratio in E4M3's subnormal range (2^-8 = code 0x02)
    row[64] = 6.0 * (3.0 / 2688.0) / 256.0;
    let q = quantize_f32(&row, 1, row.len()).expect("quantizes");
    let view = q.view();
    let scales = view.scales();
    assert_eq!(scales[0], 0x7E, "the maximum block gets scale 448");
    assert_eq!(scales[1], 0x38, "an all-zero block gets scale 1.0 (ModelOpt), not 0");
    assert!(
        view.packed()[8..16].iter().all(|&b| b == 0),
        "negative zeros get the positive code: {:02x?}",
        &view.packed()[8..16]
    );
    assert_eq!(scales[2], 0x01, "a tiny block is clamped to the smallest scale 2^-9");
    assert_eq!(view.packed()[16], 0x80, "1e-7 -> +0, -1e-7 -> -0 at scale 2^-9");
    assert_eq!(view.packed()[24] >> 4, 0x8, "a tiny negative rounding to zero keeps its sign");
    assert_eq!(scales[4], 0x02, "subnormal scales are kept");
    assert_eq!(decode_e4m3(scales[4]), 1.0 / 256.0);
}

#[test]
fn shapes_and_lengths_are_validated() {
    assert!(matches!(GemvShape::new(0, 1, 16), Err(CoreError::ZeroM { .. })));
    assert!(matches!(GemvShape::new(1, 0, 16), Err(CoreError::ZeroN { .. })));
    assert!(matches!(GemvShape::new(1, 1, 0), Err(CoreError::InvalidK { .. })));
    assert!(matches!(GemvShape::new(1, 1, 24), Err(CoreError::InvalidK { .. })));
    assert!(matches!(GemvShape::new(usize::MAX / 2, 1, 16), Err(CoreError::SizeOverflow { .. })));
    assert!(matches!(
        Nvfp4View::new(&[0; 7], &[0; 1], 1.0, 1, 16),
        Err(CoreError::LengthMismatch { what: "packed", .. })
    ));
    assert!(matches!(
        Nvfp4View::new(&[0; 8], &[0; 2], 1.0, 1, 16),
        Err(CoreError::LengthMismatch { what: "scales", .. })
    ));
    let w = Nvfp4View::new(&[0; 8], &[0; 1], 1.0, 1, 16).expect("valid");
    let mut y = vec![0u16; 1];
    assert!(matches!(gemv_contract(&w, &[0; 15], 1, &mut y, 1), Err(CoreError::LengthMismatch { what: "x", .. })));
    assert!(matches!(gemv_contract(&w, &[0; 16], 1, &mut [], 1), Err(CoreError::LengthMismatch { what: "y", .. })));
    assert!(matches!(gemv_contract(&w, &[], 0, &mut [], 1), Err(CoreError::ZeroM { .. })));
}

#[test]
fn a_matrix_and_its_view_hand_back_what_was_given() {
    let (n, k) = (3, 48);
    let packed: Vec<u8> = (0..n * k / 2).map(|i| (i * 7 + 1) as u8).collect();
    let scales: Vec<u8> = (0..n * k / 16).map(|i| 0x30 + i as u8).collect();
    let matrix = Nvfp4Matrix::from_parts(packed.clone(), scales.clone(), 0.25, n, k).expect("valid");
    assert_eq!((matrix.n(), matrix.k(), matrix.global_scale()), (n, k, 0.25));
    let view = matrix.view();
    assert_eq!((view.packed(), view.scales()), (&packed[..], &scales[..]));
    assert_eq!((view.n(), view.k(), view.groups()), (n, k, 3));
    assert_eq!(matrix.into_parts(), (packed, scales, 0.25));
}

#[test]
fn shape_arithmetic_counts_groups_and_the_bytes_a_launch_moves() {
    let shape = GemvShape::new(3, 5, 48).expect("valid");
    assert_eq!(shape.groups(), 3);
    // Packed 5 * 48 / 2 = 120, scales 5 * 3 = 15, X 2 * 3 * 48 = 288, Y 2 * 3 * 5 = 30.
    assert_eq!(shape.bytes_moved(), 120 + 15 + 288 + 30);
    let qkv = GemvShape::new(8, 5120, 5120).expect("valid");
    assert_eq!(qkv.bytes_moved(), 13_107_200 + 1_638_400 + 81_920 + 81_920);
}

#[test]
fn an_f32_y_holds_the_values_the_bf16_result_rounds() {
    let mut seed = 11;
    let (m, n, k) = (3, 29, 16 * 70);
    let w = random_matrix(n, k, &mut seed);
    let mut x = random_x(m, k, &mut seed);
    // Token 1's products overflow (infinities of both signs meet: NaN), token 2 holds a NaN.
    x[k..2 * k].fill(f32_to_bf16(3.0e38));
    x[2 * k + 5] = 0x7FC1;
    let mut y = vec![0u16; m * n];
    gemv_contract(&w.view(), &x, m, &mut y, 2).expect("runs");
    let mut y32 = vec![0f32; m * n];
    gemv_contract_f32(&w.view(), &x, m, &mut y32, 3).expect("runs");
    for (i, (&bf16, &value)) in y.iter().zip(&y32).enumerate() {
        assert_eq!(f32_to_bf16(value), bf16, "output {i}");
        assert!(!value.is_nan() || value.to_bits() == F32_Y_NAN, "output {i}: NaN written as {:#x}", value.to_bits());
    }
    assert!(y32[n..].iter().all(|v| v.is_nan()), "every non-finite case reaches the f32 Y as NaN");
    // Some value is not a bf16 already: the f32 Y keeps what the rounding drops, within the f64
    // reference's f32 bound, tighter than the bf16 one.
    assert!(y32[..n].iter().any(|&v| bf16_to_f32(f32_to_bf16(v)) != v));
    let reference = f64_reference(&w.view(), &x[..k], 1).expect("token 0");
    for (row, (r, &value)) in reference.iter().zip(&y32[..n]).enumerate() {
        assert!(r.admits_f32(value) && r.f32_bound < r.bound, "row {row}: {value} against {r:?}");
        assert!(!r.admits_f32(value + (r.f32_bound * 2.0) as f32), "row {row}: the f32 bound can fail");
    }
    let mut short = vec![0f32; m * n - 1];
    assert!(matches!(
        gemv_contract_f32(&w.view(), &x, m, &mut short, 1),
        Err(CoreError::LengthMismatch { what: "y", .. })
    ));
}
