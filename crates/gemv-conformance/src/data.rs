//! Deterministic test data (no RNG crate): random codes, chosen scale codes, bf16 activations
//! from ordinary to extreme.

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

/// The global scale of [`matrix`].
pub const GLOBAL_SCALE: f32 = 0.0371;

/// Random weights `[n, k]`: every nibble code, scales 2^-4 .. 2^3 (no subnormal products).
///
/// # Panics
/// If the shape is invalid (N = 0, or K not a positive multiple of 16): pass validated shapes.
pub fn matrix(n: usize, k: usize, seed: u64) -> Nvfp4Matrix {
    matrix_with_scales(n, k, seed, GLOBAL_SCALE, |_, _, rng| 0x18 + (rng.next_u32() % 0x38) as u8)
}

/// Random nibbles `[n, k]` with the scale code of (row, group) chosen by `scale` and the given
/// global scale (any f32: zero, negative, subnormal, infinite or NaN included).
///
/// # Panics
/// If the shape is invalid: pass validated shapes.
pub fn matrix_with_scales(
    n: usize,
    k: usize,
    seed: u64,
    global_scale: f32,
    mut scale: impl FnMut(usize, usize, &mut Lcg) -> u8,
) -> Nvfp4Matrix {
    let mut rng = Lcg::new(seed);
    let packed = (0..n * k / 2).map(|_| rng.next_u32() as u8).collect();
    let groups = k / 16;
    let scales = (0..n * groups).map(|i| scale(i / groups, i % groups, &mut rng)).collect();
    Nvfp4Matrix::from_parts(packed, scales, global_scale, n, k).expect("generated shapes are valid")
}

/// Random activations `[m, k]` in [-3, 3] as bf16 bits.
pub fn activations(m: usize, k: usize, seed: u64) -> Vec<u16> {
    let mut rng = Lcg::new(seed.wrapping_add(0xA5A5));
    (0..m * k).map(|_| f32_to_bf16(rng.uniform(-3.0, 3.0))).collect()
}

/// The kinds of activation row [`extreme_activations`] cycles through.
pub const EXTREME_ROWS: [&str; 5] = [
    "ordinary values in [-3, 3]",
    "bf16 subnormals and signed zeros",
    "the smallest normals (products subnormal in f32)",
    "large magnitudes up to 2^100 (sums near the f32 limit)",
    "all of the above mixed",
];

/// Activations `[m, k]` whose row t is of kind `EXTREME_ROWS[t % 5]`: subnormal, zero, tiny
/// and huge values next to ordinary ones. No product overflows f32 (|x| <= 2^100 and
/// |e2m1 x e4m3| <= 2688), so fused and unfused multiply-adds agree on every element.
pub fn extreme_activations(m: usize, k: usize, seed: u64) -> Vec<u16> {
    let mut rng = Lcg::new(seed.wrapping_add(0x5EED));
    let value = |kind: usize, rng: &mut Lcg| -> u16 {
        let sign = if rng.next_u32() & 1 == 1 { 0x8000 } else { 0 };
        match kind {
            0 => f32_to_bf16(rng.uniform(-3.0, 3.0)),
            // Exponent field 0: zero (mantissa 0) or a subnormal.
            1 => sign | (rng.next_u32() % 0x80) as u16,
            // Exponent field 1..3: 2^-126 .. 2^-124.
            2 => sign | (((1 + rng.next_u32() % 3) << 7) | (rng.next_u32() % 0x80)) as u16,
            // Exponent field 200..227: 2^73 .. 2^100.
            3 => sign | (((200 + rng.next_u32() % 28) << 7) | (rng.next_u32() % 0x80)) as u16,
            _ => unreachable!("kinds 0..=3"),
        }
    };
    (0..m * k)
        .map(|i| {
            let kind = (i / k) % EXTREME_ROWS.len();
            let kind = if kind == 4 { (rng.next_u32() % 4) as usize } else { kind };
            value(kind, &mut rng)
        })
        .collect()
}

/// A matrix and one activation row whose second product overflows f32 while the fused chain
/// stays finite: row 0, group 0 has scale 448 and weights -4, 6; X starts 2^117, 2^117. Partial
/// 0 becomes `fma(-1792, 2^117, 0) = -1.75 * 2^127`, then `fma(2688, 2^117, -1.75 * 2^127) =
/// 0.875 * 2^127` (finite), where an unfused `a + ws * x` gives +Inf. The other rows are ordinary
/// (`n` rows, `k` columns, k >= 32).
pub fn overflowing_product(n: usize, k: usize) -> (Nvfp4Matrix, Vec<u16>) {
    let ordinary = matrix(n, k, 117);
    let (mut packed, mut scales, _) = ordinary.into_parts();
    packed[..k / 2].fill(0);
    scales[..k / 16].fill(0x38); // 1.0
    packed[0] = 0x7E; // j = 0: code 0xE (-4), j = 1: code 0x7 (6)
    scales[0] = 0x7E; // 448
    let mut x = vec![0u16; k];
    x[0] = 0x7A00; // 2^117
    x[1] = 0x7A00;
    for (i, value) in x.iter_mut().enumerate().skip(16) {
        *value = f32_to_bf16(((i % 7) as f32 - 3.0) * 0.25);
    }
    let w = Nvfp4Matrix::from_parts(packed, scales, 1.0, n, k).expect("the shape of `matrix`");
    (w, x)
}

/// A matrix (`n` rows, K = 48) and two activation rows with values that overflow f32 once
/// multiplied by 2^7 or more (as a kernel that stages X scaled by a power of two may do) while
/// every output of the contract stays finite. In every row k = 0 and k = 16 (groups 0 and 1, so
/// two partial sums) have weight 1.0 under scale 1.0; the other weights are ordinary. Token 0
/// has x = 2^121 at k = 0: scaled, one infinite partial and an infinite total; unscaled 2^121
/// plus terms it absorbs. Token 1 has 2^122 at k = 0 and -2^121 at k = 16: scaled, +inf and
/// -inf in two partials, a NaN where the tree adds them; unscaled 2^121. Global scale 1.0.
pub fn staged_overflow(n: usize) -> (Nvfp4Matrix, Vec<u16>) {
    let k = 48;
    let (mut packed, mut scales, _) = matrix(n, k, 121).into_parts();
    for row in 0..n {
        for group in [0, 1] {
            scales[row * (k / 16) + group] = 0x38; // 1.0
            let byte = &mut packed[row * (k / 2) + 8 * group];
            *byte = (*byte & 0xF0) | 0x2; // the group's first k: code 2, 1.0
        }
    }
    let mut x = activations(2, k, 121);
    x[0] = f32_to_bf16(2f32.powi(121));
    x[k] = f32_to_bf16(2f32.powi(122));
    x[k + 16] = f32_to_bf16(-(2f32.powi(121)));
    let w = Nvfp4Matrix::from_parts(packed, scales, 1.0, n, k).expect("the shape of `matrix`");
    (w, x)
}

/// Weights of 1.0 (N = 24, K = 1024: one 128-k chunk per warp of the fast kernels) and `m`
/// activation rows whose partial sums cancel: chunk 0 is +2^20 (t + 1), chunk 1 -2^20 (t + 1),
/// the rest 1.0078125. Added in order the big halves cancel first and the total is exact;
/// added in another order the small partials are absorbed and the bf16 result changes, so a
/// summation order that depends on M shows.
pub fn order_sensitive(m: usize) -> (Nvfp4Matrix, Vec<u16>) {
    let (n, k) = (24, 1024);
    // Nibble 2 is 1.0, scale code 0x38 is 1.0.
    let w = Nvfp4Matrix::from_parts(vec![0x22; n * k / 2], vec![0x38; n * k / 16], 1.0, n, k).expect("a valid shape");
    let x = (0..m * k)
        .map(|i| {
            let (t, chunk) = (i / k, (i % k) / 128);
            let big = 1_048_576.0 * (t + 1) as f32;
            f32_to_bf16(match chunk {
                0 => big,
                1 => -big,
                _ => 1.0078125,
            })
        })
        .collect();
    (w, x)
}
