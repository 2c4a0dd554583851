//! Deterministic test data (no RNG crate): random codes, normal-range scales, bf16 activations.

use gemv_core::Nvfp4Matrix;
use gemv_core::codec::f32_to_bf16;

/// A small LCG; the same seed gives the same data on every machine.
pub struct Lcg(u64);

impl Lcg {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next_u32() as f32 / 4_294_967_296.0)
    }
}

/// Random weights `[n, k]`: every nibble code, scales 2^-4 .. 2^3 (no subnormal products).
///
/// # Panics
/// If the shape is invalid (N = 0, or K not a positive multiple of 16): pass validated shapes.
pub fn matrix(n: usize, k: usize, seed: u64) -> Nvfp4Matrix {
    let mut rng = Lcg::new(seed);
    let packed = (0..n * k / 2).map(|_| rng.next_u32() as u8).collect();
    let scales = (0..n * k / 16).map(|_| 0x18 + (rng.next_u32() % 0x38) as u8).collect();
    Nvfp4Matrix::from_parts(packed, scales, 0.0371, n, k).expect("generated shapes are valid")
}

/// Random activations `[m, k]` in [-3, 3] as bf16 bits.
pub fn activations(m: usize, k: usize, seed: u64) -> Vec<u16> {
    let mut rng = Lcg::new(seed.wrapping_add(0xA5A5));
    (0..m * k).map(|_| f32_to_bf16(rng.uniform(-3.0, 3.0))).collect()
}
