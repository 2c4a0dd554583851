//! The AVX-512F row kernel: 16 groups per vector, 4 vectors per 64-group superblock.
//!
//! A block's 128 packed bytes load as two vectors of 32-bit words; one two-source permute
//! gathers the even words (nibbles 0..7 of each group) and one the odd words (8..15), group g in
//! lane g. For element j: shift right by 4j and look the signed E2M1 value up in a 16-entry table
//! (the permute reads the low 4 bits, sign included), multiply by the group's scale (exact). For
//! each superblock, each row of the tile has its 4 x 16 weight vectors decoded once; then every
//! token, two at a time, runs its 64 partials (4 vectors: 8 independent chains for a pair)
//! through them, against a slice of X that stays in L1 across the tile.

// Lane, row, token and element indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{TILE_ROWS, block_bytes, prefetch_row};
use crate::activations::TransposedX;
use gemv_core::codec::BF16_NAN;
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

const W: usize = 16;
/// Blocks per 64-group superblock.
const Q: usize = PARTIALS / W;

/// 16 E4M3 codes (one per lane) as f32, exactly, without gathers or subnormal arithmetic: normal
/// codes by moving the bits into place, subnormal ones (`m * 2^-9`) by an integer conversion,
/// 0x7F and 0xFF as NaN.
#[inline]
#[target_feature(enable = "avx512f")]
fn decode_scales(codes: __m512i) -> __m512 {
    let magnitude = _mm512_and_si512(codes, _mm512_set1_epi32(0x7F));
    let normal =
        _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32::<20>(magnitude), _mm512_set1_epi32(120 << 23)));
    let mantissa = _mm512_and_si512(codes, _mm512_set1_epi32(7));
    let subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mantissa), _mm512_set1_ps(1.0 / 512.0));
    let is_subnormal = _mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(8));
    let value = _mm512_mask_blend_ps(is_subnormal, normal, subnormal);
    let is_nan = _mm512_cmpeq_epi32_mask(magnitude, _mm512_set1_epi32(0x7F));
    let value = _mm512_mask_blend_ps(is_nan, value, _mm512_set1_ps(f32::NAN));
    let sign = _mm512_slli_epi32::<24>(_mm512_and_si512(codes, _mm512_set1_epi32(0x80)));
    _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign))
}

#[inline]
#[target_feature(enable = "avx512f")]
fn weights<const SHR: u32>(words: __m512i, table: __m512, scale: __m512) -> __m512 {
    _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32::<SHR>(words), table), scale)
}

/// Elements 0..7 (from the even words) or 8..15 (odd words) of 16 groups.
#[inline]
#[target_feature(enable = "avx512f")]
fn decode_half(words: __m512i, table: __m512, scale: __m512, out: &mut [MaybeUninit<__m512>]) {
    out[0].write(weights::<0>(words, table, scale));
    out[1].write(weights::<4>(words, table, scale));
    out[2].write(weights::<8>(words, table, scale));
    out[3].write(weights::<12>(words, table, scale));
    out[4].write(weights::<16>(words, table, scale));
    out[5].write(weights::<20>(words, table, scale));
    out[6].write(weights::<24>(words, table, scale));
    out[7].write(weights::<28>(words, table, scale));
}

/// Rows decoded together (a tile).
pub(crate) const ROWS: usize = 4;
/// Tokens whose accumulators are held at once: ROWS x TOKENS = 16 vectors, plus the tokens'
/// activations and one weight vector, within the 32 registers.
const TOKENS: usize = 4;

/// Accumulates tokens `t0 .. t0 + T` of every row of the tile over one superblock. For each of
/// the superblock's 4 partial vectors, the ROWS x T accumulators stay in registers while the 16
/// elements run: per element, T activation loads and ROWS weight loads feed ROWS x T independent
/// fused multiply-adds.
#[inline]
#[target_feature(enable = "avx512f")]
fn accumulate<const T: usize>(
    ws: &[[[__m512; GROUP_SIZE]; Q]; ROWS],
    xt: &TransposedX,
    superblock: usize,
    t0: usize,
    partials: &mut [f32],
) {
    let m = xt.m();
    // Loops, not `array::from_fn`: a closure does not inherit the target features, and an
    // out-of-line call here spills every vector register around it.
    let mut x: [&[f32]; T] = [&[]; T];
    for t in 0..T {
        x[t] = xt.blocks_from(t0 + t, Q * superblock, Q);
    }
    for q in 0..Q {
        let mut acc = [[_mm512_setzero_ps(); T]; ROWS];
        // SAFETY: partial vector q of row r, token t0 + t lies inside `partials` (ROWS * m * 64
        // values); unaligned loads.
        unsafe {
            for (r, row_acc) in acc.iter_mut().enumerate() {
                for (t, sum) in row_acc.iter_mut().enumerate() {
                    *sum = _mm512_loadu_ps(partials.as_ptr().add((r * m + t0 + t) * PARTIALS + q * W));
                }
            }
        }
        for j in 0..GROUP_SIZE {
            let offset = (q * GROUP_SIZE + j) * W;
            // SAFETY: each token's slice holds Q blocks of 16 vectors of 16 f32.
            let xs: [__m512; T] = std::array::from_fn(|t| unsafe { _mm512_loadu_ps(x[t].as_ptr().add(offset)) });
            for r in 0..ROWS {
                let w = ws[r][q][j];
                for t in 0..T {
                    acc[r][t] = _mm512_fmadd_ps(w, xs[t], acc[r][t]);
                }
            }
        }
        // SAFETY: as for the loads above; unaligned stores.
        unsafe {
            for (r, row_acc) in acc.iter().enumerate() {
                for (t, &sum) in row_acc.iter().enumerate() {
                    _mm512_storeu_ps(partials.as_mut_ptr().add((r * m + t0 + t) * PARTIALS + q * W), sum);
                }
            }
        }
    }
}

/// One block of every row of the tile, decoded in registers, for one or two tokens: per element
/// j, each row's weight vector is decoded and immediately fused into that row's accumulator(s),
/// so weights never go through memory (at M <= 2 there are too few tokens to amortise a store
/// and a reload per weight vector). ROWS x T independent chains hide the FMA latency.
#[inline]
#[target_feature(enable = "avx512f")]
fn stream_block<const T: usize>(
    words: &[[__m512i; 2]; ROWS],
    scale: &[__m512; ROWS],
    table: __m512,
    x: [&[f32]; T],
    acc: &mut [[__m512; T]; ROWS],
) {
    macro_rules! element {
        ($half:expr, $shift:expr, $j:expr) => {{
            // SAFETY: each token's block holds 16 vectors of 16 f32.
            let xs: [__m512; T] = std::array::from_fn(|t| unsafe { _mm512_loadu_ps(x[t].as_ptr().add($j * W)) });
            for r in 0..ROWS {
                let w =
                    _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32::<$shift>(words[r][$half]), table), scale[r]);
                for t in 0..T {
                    acc[r][t] = _mm512_fmadd_ps(w, xs[t], acc[r][t]);
                }
            }
        }};
    }
    element!(0, 0, 0);
    element!(0, 4, 1);
    element!(0, 8, 2);
    element!(0, 12, 3);
    element!(0, 16, 4);
    element!(0, 20, 5);
    element!(0, 24, 6);
    element!(0, 28, 7);
    element!(1, 0, 8);
    element!(1, 4, 9);
    element!(1, 8, 10);
    element!(1, 12, 11);
    element!(1, 16, 12);
    element!(1, 20, 13);
    element!(1, 24, 14);
    element!(1, 28, 15);
}

/// Loads the accumulators of partial vector `q` for tokens 0..T of every row, streams block `b`
/// through them, and stores them back.
#[inline]
#[target_feature(enable = "avx512f")]
fn stream_tokens<const T: usize>(
    words: &[[__m512i; 2]; ROWS],
    scale: &[__m512; ROWS],
    table: __m512,
    xt: &TransposedX,
    b: usize,
    q: usize,
    partials: &mut [f32],
) {
    let m = xt.m();
    let mut x: [&[f32]; T] = [&[]; T];
    for t in 0..T {
        x[t] = xt.block(t, b);
    }
    let mut acc = [[_mm512_setzero_ps(); T]; ROWS];
    // SAFETY: partial vector q of row r, token t lies inside `partials` (ROWS * m * 64 values);
    // unaligned loads and stores.
    unsafe {
        for (r, row_acc) in acc.iter_mut().enumerate() {
            for (t, sum) in row_acc.iter_mut().enumerate() {
                *sum = _mm512_loadu_ps(partials.as_ptr().add((r * m + t) * PARTIALS + q * W));
            }
        }
    }
    stream_block::<T>(words, scale, table, x, &mut acc);
    // SAFETY: as above.
    unsafe {
        for (r, row_acc) in acc.iter().enumerate() {
            for (t, &sum) in row_acc.iter().enumerate() {
                _mm512_storeu_ps(partials.as_mut_ptr().add((r * m + t) * PARTIALS + q * W), sum);
            }
        }
    }
}

/// Prefetches block `b` of row `row` (its two lines of packed bytes; at a superblock's first
/// block also its line of scale codes). The M <= 2 loop calls it for the next tile's rows as it
/// reads the same block of this tile's: rows are consecutive in memory, so the next tile is the
/// stream's frontier (a row of a 5120-wide matrix is only five superblocks, so looking ahead
/// within the row, as this kernel first did, left every tile's start cold), and spread over the
/// blocks the prefetches keep pace with the stream. qkv (5120 x 5120), 40 weight copies cycled,
/// two threads, Xeon with AVX-512 (`GEMV_COPIES=40 GEMV_LAUNCHES=41 cargo run --release -p
/// gemv-cpu --example throughput -- 5120 5120 1 2`), median of three runs each: 1.93-2.09 ms
/// within the row, 1.47-1.77 ms one tile ahead in one burst per superblock, 1.29-1.43 ms spread.
/// The address may lie past `packed` (or the matrix): it is only prefetched, never read, and a
/// prefetch does not fault.
#[inline]
#[target_feature(enable = "avx512f")]
fn prefetch_block(packed: &[u8], scales: &[u8], row_bytes: usize, groups: usize, row: usize, b: usize) {
    let scale_code = b.is_multiple_of(Q).then_some(b * W);
    prefetch_row(packed, scales, (row_bytes, groups), row, b * 8 * W, 2, scale_code);
}

/// Prefetches superblock `superblock` of row `row` (512 packed bytes, 64 scale codes): the M > 2
/// loop calls it for the row one tile on as it decodes the same superblock of this one (see
/// [`prefetch_block`]; there every token's multiply-adds follow a superblock's decode, so one
/// burst per superblock is early enough). Only prefetched, never read: the address may lie past
/// the matrix.
#[inline]
#[target_feature(enable = "avx512f")]
fn prefetch_superblock(packed: &[u8], scales: &[u8], row_bytes: usize, groups: usize, row: usize, superblock: usize) {
    prefetch_row(packed, scales, (row_bytes, groups), row, superblock * 8 * PARTIALS, 8, Some(superblock * PARTIALS));
}

/// # Safety
/// The CPU must support AVX-512F. `packed` and `scales` hold `rows <= ROWS` whole rows;
/// `partials` holds `ROWS * 64 * xt.m()` values (rows past `rows` are scratch); `xt` was built
/// for width 16.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn row_tile(packed: &[u8], scales: &[u8], rows: usize, xt: &TransposedX, partials: &mut [f32]) {
    debug_assert!(rows <= ROWS && ROWS <= TILE_ROWS);
    let e2m1 = _mm512_setr_ps(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0);
    let even_words = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd_words = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let (row_bytes, groups, m) = (packed.len() / rows, scales.len() / rows, xt.m());
    let mut tail = ([0u8; 128], [0u8; 16]);
    if m <= 2 {
        for superblock in 0..xt.blocks() / Q {
            let mut words = [[_mm512_setzero_si512(); 2]; ROWS];
            let mut scale = [_mm512_setzero_ps(); ROWS];
            for q in 0..Q {
                for r in 0..rows {
                    let (row_packed, row_scales) =
                        (&packed[r * row_bytes..(r + 1) * row_bytes], &scales[r * groups..(r + 1) * groups]);
                    let (bytes, codes) = block_bytes::<W>(row_packed, row_scales, Q * superblock + q, &mut tail);
                    // SAFETY: `bytes` has 128 bytes and `codes` 16 (a block of 16 groups); unaligned.
                    let (codes, low, high) = unsafe {
                        (
                            _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.as_ptr().cast())),
                            _mm512_loadu_si512(bytes.as_ptr().cast()),
                            _mm512_loadu_si512(bytes.as_ptr().add(64).cast()),
                        )
                    };
                    scale[r] = decode_scales(codes);
                    words[r] = [
                        _mm512_permutex2var_epi32(low, even_words, high),
                        _mm512_permutex2var_epi32(low, odd_words, high),
                    ];
                }
                let b = Q * superblock + q;
                for r in ROWS..2 * ROWS {
                    prefetch_block(packed, scales, row_bytes, groups, r, b);
                }
                if m == 1 {
                    stream_tokens::<1>(&words, &scale, e2m1, xt, b, q, partials);
                } else {
                    stream_tokens::<2>(&words, &scale, e2m1, xt, b, q, partials);
                }
            }
        }
        return;
    }
    // Not zeroed as a whole: 16 KB of stores per tile, where a superblock's decode writes 16 KB
    // and each tile decodes five (qkv/o). Rows of the tile past `rows` hold zero weights (their
    // partials are scratch); the decode writes every element of the others, every superblock.
    let mut ws = [[[MaybeUninit::<__m512>::uninit(); GROUP_SIZE]; Q]; ROWS];
    for row_ws in ws.iter_mut().skip(rows) {
        for block_ws in row_ws.iter_mut() {
            block_ws.fill(MaybeUninit::new(_mm512_setzero_ps()));
        }
    }
    for superblock in 0..xt.blocks() / Q {
        for (r, row_ws) in ws.iter_mut().enumerate().take(rows) {
            let (row_packed, row_scales) =
                (&packed[r * row_bytes..(r + 1) * row_bytes], &scales[r * groups..(r + 1) * groups]);
            prefetch_superblock(packed, scales, row_bytes, groups, r + ROWS, superblock);
            for (q, block_ws) in row_ws.iter_mut().enumerate() {
                let (bytes, codes) = block_bytes::<W>(row_packed, row_scales, Q * superblock + q, &mut tail);
                // SAFETY: `bytes` has 128 bytes and `codes` 16 (a block of 16 groups); unaligned.
                let (codes, low, high) = unsafe {
                    (
                        _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.as_ptr().cast())),
                        _mm512_loadu_si512(bytes.as_ptr().cast()),
                        _mm512_loadu_si512(bytes.as_ptr().add(64).cast()),
                    )
                };
                let scale = decode_scales(codes);
                let (first, second) = block_ws.split_at_mut(GROUP_SIZE / 2);
                decode_half(_mm512_permutex2var_epi32(low, even_words, high), e2m1, scale, first);
                decode_half(_mm512_permutex2var_epi32(low, odd_words, high), e2m1, scale, second);
            }
        }
        // SAFETY: every element of `ws` is initialised: rows from `rows` on were zeroed before the
        // loop, and the decode above wrote all Q blocks of 16 vectors of every row below it.
        // `MaybeUninit<T>` has `T`'s layout, so the array casts element for element.
        let ready = unsafe { &*(&raw const ws).cast::<[[[__m512; GROUP_SIZE]; Q]; ROWS]>() };
        let mut t0 = 0;
        while t0 < m {
            match m - t0 {
                1 => accumulate::<1>(ready, xt, superblock, t0, partials),
                2 => accumulate::<2>(ready, xt, superblock, t0, partials),
                3 => accumulate::<3>(ready, xt, superblock, t0, partials),
                _ => accumulate::<TOKENS>(ready, xt, superblock, t0, partials),
            }
            t0 += TOKENS;
        }
    }
}

/// Outputs [`finish_outputs`] finishes together, one per lane.
pub(crate) const FINISH_OUTPUTS: usize = W;

/// Lane indices into a pair of vectors `(a, b)` that each hold `16 / (2 * d)` outputs' `2 * d`
/// values (output by output), for one level of the tree with half-width `d`: lane `i` of the
/// result is output `i / d`'s value `i % d` (`high`: value `i % d + d`), outputs of `a` first.
const fn pair_lanes(d: usize, high: bool) -> [u32; W] {
    let mut lanes = [0u32; W];
    let per_vector = W / (2 * d);
    let mut lane = 0;
    while lane < W {
        let (output, value) = (lane / d, lane % d);
        let source = if output < per_vector { 0 } else { W };
        let index = source + (output % per_vector) * 2 * d + value + if high { d } else { 0 };
        lanes[lane] = index as u32;
        lane += 1;
    }
    lanes
}

/// [`pair_lanes`] for d = 8, 4, 2, 1: the lower and the upper operands of each level.
static PAIR_LANES: [[[u32; W]; 2]; 4] = [
    [pair_lanes(8, false), pair_lanes(8, true)],
    [pair_lanes(4, false), pair_lanes(4, true)],
    [pair_lanes(2, false), pair_lanes(2, true)],
    [pair_lanes(1, false), pair_lanes(1, true)],
];

/// The contract's tree over the 64 partials of 16 outputs (`partials[64 * o..][..64]`) and
/// `bf16(total * global_scale)` of each into `out[o]`: every addition of [`super::finish`], with
/// the same operands in the same order, 16 outputs to a vector. Levels 32 and 16 add an output's
/// own vectors; levels 8, 4, 2 and 1 pair two vectors' outputs with two permutes and one add, so
/// 16 outputs cost about 100 vector operations (48 adds for levels 32 and 16, 45 for the pairing
/// levels, 8 for the rounding), where the tree one output at a time took 9-20 ns of a thread's
/// time each: 190-410 us of a cold qkv/o launch at M = 8 on two threads (launches with and
/// without it).
#[target_feature(enable = "avx512f")]
pub(crate) fn finish_outputs(partials: &[f32], global_scale: f32, out: &mut [u16]) {
    assert!(partials.len() >= W * PARTIALS && out.len() >= W, "finish_outputs: 16 outputs");
    let mut level = [_mm512_setzero_ps(); W];
    for (o, sums) in level.iter_mut().enumerate() {
        // SAFETY: output o's 64 partials lie inside `partials` (asserted above); unaligned loads.
        let (p0, p1, p2, p3) = unsafe {
            let base = partials.as_ptr().add(o * PARTIALS);
            (
                _mm512_loadu_ps(base),
                _mm512_loadu_ps(base.add(W)),
                _mm512_loadu_ps(base.add(2 * W)),
                _mm512_loadu_ps(base.add(3 * W)),
            )
        };
        *sums = _mm512_add_ps(_mm512_add_ps(p0, p2), _mm512_add_ps(p1, p3));
    }
    let mut vectors = W;
    for [low, high] in &PAIR_LANES {
        // SAFETY: each table is 16 u32 lanes; unaligned loads.
        let (low, high) =
            unsafe { (_mm512_loadu_si512(low.as_ptr().cast()), _mm512_loadu_si512(high.as_ptr().cast())) };
        for v in 0..vectors / 2 {
            let (a, b) = (level[2 * v], level[2 * v + 1]);
            level[v] = _mm512_add_ps(_mm512_permutex2var_ps(a, low, b), _mm512_permutex2var_ps(a, high, b));
        }
        vectors /= 2;
    }
    let scaled = _mm512_mul_ps(level[0], _mm512_set1_ps(global_scale));
    // Round to nearest even on the bits; NaN to the canonical bf16 NaN.
    let bits = _mm512_castps_si512(scaled);
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(scaled, scaled);
    let values = _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(i32::from(BF16_NAN)));
    // SAFETY: `out` holds at least 16 u16 (asserted above); an unaligned 32-byte store.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi16(values)) };
}
