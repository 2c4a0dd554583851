//! The exact numeric contract (docs/numerics.md), executed on the host.
//!
//! For output (t, n), with G = K/16 groups and 64 partial sums: partial `l` starts at +0.0 and
//! visits groups `l, l+64, ...` in order, doing `a = fma(e2m1 * e4m3, f32(x), a)` term by term
//! (one rounding each); then a fixed tree (`d = 32, 16, ..., 1`: `a[l] += a[l+d]`) gives the
//! total, and `Y = bf16_rne(total * global_scale)` with every NaN written as 0x7FC0.
//!
//! Every product is exact in f32 unless it overflows (at most 6 + 8 significant bits), so the only
//! roundings are the multiply-adds in this fixed order, one multiply and the bf16 rounding: any
//! backend that keeps the order and fuses the multiply-add writes the same bits. An unfused
//! `a + ws * x` differs only where the product overflows f32 (|x| beyond about 2^115).

use crate::codec::{bf16_to_f32, decode_e2m1, e4m3_table, f32_to_bf16};
use crate::shape::GROUP_SIZE;
use crate::{CoreError, Nvfp4View, Result};

/// Partial sums per output.
pub const PARTIALS: usize = 64;

/// `fma(ws, x, a)`: `ws * x + a` with one rounding.
///
/// `ws` has at most 6 significant bits and `x` at most 8, so a finite `ws * x` is exact (subnormal
/// products included: they are multiples of 2^-143), and `a + ws * x` then rounds exactly as the
/// fused form does. Only an overflowing product (or a NaN/infinite operand) differs between the
/// two, and those take `f32::mul_add`, the fused operation itself. The fast branch is the same
/// arithmetic, four times cheaper on a machine where `mul_add` is a library call.
#[inline]
pub fn fused_multiply_add(ws: f32, x: f32, a: f32) -> f32 {
    let product = ws * x;
    if product.is_finite() { a + product } else { ws.mul_add(x, a) }
}

/// Widens bf16 activations to f32 (exact).
pub fn widen_bf16(x: &[u16]) -> Vec<f32> {
    x.iter().map(|&b| bf16_to_f32(b)).collect()
}

/// Computes, for every t < m of one weight row `n`, the value `Y[t][n]` rounds
/// (`total * global_scale`), writing `finish` of it to `out[t]`.
///
/// `x` is `[m][K]` f32 (widened bf16); `partials` is scratch of at least `m * 64`.
fn contract_column<T>(
    w: &Nvfp4View<'_>,
    x: &[f32],
    (m, n): (usize, usize),
    partials: &mut [f32],
    out: &mut [T],
    finish: fn(f32) -> T,
) {
    let k = w.k();
    let table = e4m3_table();
    let partials = &mut partials[..m * PARTIALS];
    partials.fill(0.0);
    let packed = w.row_packed(n);
    let scales = w.row_scales(n);
    for (g, &scale_code) in scales.iter().enumerate() {
        let scale = table[usize::from(scale_code)];
        let bytes = &packed[g * GROUP_SIZE / 2..(g + 1) * GROUP_SIZE / 2];
        let mut ws = [0f32; GROUP_SIZE];
        for (j, &byte) in bytes.iter().enumerate() {
            ws[2 * j] = decode_e2m1(byte & 0xF) * scale;
            ws[2 * j + 1] = decode_e2m1(byte >> 4) * scale;
        }
        let l = g % PARTIALS;
        for t in 0..m {
            let xs = &x[t * k + g * GROUP_SIZE..t * k + (g + 1) * GROUP_SIZE];
            let mut acc = partials[t * PARTIALS + l];
            for j in 0..GROUP_SIZE {
                acc = fused_multiply_add(ws[j], xs[j], acc);
            }
            partials[t * PARTIALS + l] = acc;
        }
    }
    for t in 0..m {
        let a = &mut partials[t * PARTIALS..(t + 1) * PARTIALS];
        let mut d = PARTIALS / 2;
        while d >= 1 {
            for l in 0..d {
                a[l] += a[l + d];
            }
            d /= 2;
        }
        out[t] = finish(a[0] * w.global_scale());
    }
}

/// `Y = contract(W, X)` for `x: [m][K]` bf16 bits into `y: [m][N]`, over `threads` OS threads
/// (split over N). Lengths are validated; the result is the same bits for any thread count.
pub fn gemv_contract(w: &Nvfp4View<'_>, x: &[u16], m: usize, y: &mut [u16], threads: usize) -> Result<()> {
    contract_into(w, x, m, y, threads, f32_to_bf16)
}

/// The values `Y = contract(W, X)` rounds, as an f32 Y ([`crate::YFormat::F32`]:
/// `total * global_scale`, every NaN as [`crate::F32_Y_NAN`]), for `x: [m][K]` bf16 bits into
/// `y: [m][N]`, over `threads` OS threads. Rounding each to bf16 gives [`gemv_contract`]'s bits.
pub fn gemv_contract_f32(w: &Nvfp4View<'_>, x: &[u16], m: usize, y: &mut [f32], threads: usize) -> Result<()> {
    contract_into(w, x, m, y, threads, crate::f32_y_element)
}

fn contract_into<T: Copy + Default + Send>(
    w: &Nvfp4View<'_>,
    x: &[u16],
    m: usize,
    y: &mut [T],
    threads: usize,
    finish: fn(f32) -> T,
) -> Result<()> {
    let (n, k) = (w.n(), w.k());
    crate::GemvShape::new(m, n, k)?;
    check_len("x", x.len(), m * k, m, n, k)?;
    check_len("y", y.len(), m * n, m, n, k)?;
    let xf = widen_bf16(x);
    let threads = threads.clamp(1, n);
    let columns_per_thread = n.div_ceil(threads);
    let mut transposed = vec![T::default(); n * m]; // [n][m], so each thread owns a contiguous slice
    std::thread::scope(|scope| {
        for (chunk_index, chunk) in transposed.chunks_mut(columns_per_thread * m).enumerate() {
            let xf = &xf;
            scope.spawn(move || {
                let mut partials = vec![0f32; m * PARTIALS];
                let first = chunk_index * columns_per_thread;
                for (offset, out) in chunk.chunks_mut(m).enumerate() {
                    contract_column(w, xf, (m, first + offset), &mut partials, out, finish);
                }
            });
        }
    });
    for (col, values) in transposed.chunks(m).enumerate() {
        for (t, &v) in values.iter().enumerate() {
            y[t * n + col] = v;
        }
    }
    Ok(())
}

/// The worker count a host computation should use: the machine's parallelism.
pub fn host_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |p| p.get())
}

fn check_len(what: &'static str, found: usize, expected: usize, m: usize, n: usize, k: usize) -> Result<()> {
    if found == expected { Ok(()) } else { Err(CoreError::LengthMismatch { what, expected, found, m, n, k }) }
}
