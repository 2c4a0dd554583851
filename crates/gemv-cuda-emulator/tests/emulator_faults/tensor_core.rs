//! Tensor-core primitives: bf16 products and the mma's fragment layout.

use crate::primitives::product_sweep;
use gemv_cuda_emulator::{CudaEmulator, HostLaunch};

/// An exact value to bf16 bits, rounding to nearest even with subnormals kept (None for NaN).
fn bf16_bits_rounded(value: f64) -> Option<u16> {
    if value.is_nan() {
        return None;
    }
    let sign = if value.is_sign_negative() { 0x8000u16 } else { 0 };
    let magnitude = value.abs();
    if magnitude == 0.0 {
        return Some(sign);
    }
    if magnitude.is_infinite() {
        return Some(sign | 0x7F80);
    }
    // The quantum of the binade (subnormals share the smallest normal binade's quantum).
    let binade = (((magnitude.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(-126);
    let quantum = 2f64.powi(binade - 7);
    let rounded = (magnitude / quantum).round_ties_even() * quantum;
    if rounded >= 2f64.powi(128) {
        return Some(sign | 0x7F80);
    }
    Some(sign | ((rounded as f32).to_bits() >> 16) as u16)
}

fn bf16_value(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

#[test]
fn bf16x2_mul_is_the_correctly_rounded_product_with_canonical_nan() {
    // Exact in f64: 8 x 8 significant bits.
    let products =
        product_sweep("emu_test_bf16x2_mul", |a, b| bf16_bits_rounded(bf16_value(a) * bf16_value(b)).unwrap_or(0x7FFF));
    let (mut subnormal, mut rounded, mut overflow, mut nan) = (0, 0, 0, 0);
    for &(a, b, expected) in &products {
        let exact = bf16_value(a) * bf16_value(b);
        subnormal += usize::from(expected & 0x7F80 == 0 && expected & 0x7F != 0);
        rounded += usize::from(exact.is_finite() && bf16_value(expected) != exact);
        overflow += usize::from(expected & 0x7FFF == 0x7F80 && exact.is_finite());
        nan += usize::from(expected == 0x7FFF);
    }
    eprintln!(
        "bf16x2 mul: {} products, {subnormal} subnormal, {rounded} rounded, {overflow} overflowing, {nan} NaN",
        products.len()
    );
    assert!(subnormal > 100 && rounded > 100 && overflow > 100 && nan > 100, "the sweep must reach every regime");
}

#[test]
fn mma_multiplies_the_fragments_of_the_ptx_layout_in_the_documented_order() {
    // Two warps, each its own A (16 x 16), B (16 x 8) and C (16 x 8) of bf16 values in [-8, 8).
    let (warps, k) = (2usize, 64usize);
    let mut state = 0x2545_F491u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let x: Vec<u16> = (0..warps * 512)
        .map(|_| {
            let value = (next() % 4096) as f32 / 256.0 - 8.0;
            (value.to_bits() >> 16) as u16
        })
        .collect();
    let (m, n) = (x.len() / k, warps * 128);
    let mut y = vec![0u16; m * n];
    let packed = vec![0u8; n * k / 2];
    let scales = vec![0u8; n * k / 16];
    CudaEmulator::new()
        .launch_on_host(HostLaunch {
            kernel: "emu_test_mma",
            grid: 1,
            block: (32 * warps) as u32,
            x: &x,
            packed: &packed,
            scales: &scales,
            y: &mut y,
            global_scale: 1.0,
            m,
            n,
            k,
        })
        .unwrap_or_else(|error| panic!("emu_test_mma: {error}"));
    let value = |bits: u16| f32::from_bits(u32::from(bits) << 16);
    for warp in 0..warps {
        let base = &x[512 * warp..];
        for r in 0..16 {
            for c in 0..8 {
                let mut expected = value(base[384 + 8 * r + c]);
                for kk in 0..16 {
                    expected = value(base[16 * r + kk]).mul_add(value(base[256 + 8 * kk + c]), expected);
                }
                let at = 256 * warp + 2 * (8 * r + c);
                let found = f32::from_bits(u32::from(y[at]) | (u32::from(y[at + 1]) << 16));
                assert_eq!(
                    found.to_bits(),
                    expected.to_bits(),
                    "warp {warp} D[{r}][{c}]: expected {expected}, found {found}"
                );
            }
        }
    }
}
