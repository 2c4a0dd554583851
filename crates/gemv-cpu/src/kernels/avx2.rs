//! The AVX2 + FMA row kernel: 8 groups per vector, 8 vectors per 64-group superblock.
//!
//! A block's 64 packed bytes load as two vectors of 32-bit words; group g's words 2g and 2g + 1
//! hold its nibbles 0..7 and 8..15. Gathering the even and the odd words puts group g in lane g.
//! Each word's nibbles are then looked up 32 at a time: `vpshufb` on the low and on the high
//! nibbles of every byte gives `2 * e2m1` as a signed byte (sign included). For element j one more
//! `vpshufb` moves that byte to the top of its lane with zeros below, an integer conversion makes
//! it `2 * e2m1 * 2^24` exactly, and one multiply by `scale * 2^-25` gives the weight (exact: at
//! most 6 significant bits). Per weight vector that is a shuffle, a conversion and a multiply,
//! where a magnitude permute with the sign moved in by shifts and masks took six operations: on
//! Zen 3 a C model of the loop measured 1.9 against 2.8 cycles per vector (counted at the nominal
//! 2.95 GHz), two rows in flight.
//! The integer lookup has no negative zero; the product's sign only matters when the partial it
//! meets is zero, and a partial starts at +0 and can never become -0 (see `activations`).
//!
//! For each superblock, each row of the tile has its 8 x 16 weight vectors decoded once; then
//! every token runs its 64 partials (8 vectors: 8 independent chains) through them, against a
//! slice of X that stays in L1 across the tile.

// Lane, row, token and element indices address several arrays at once in these loops.
#![allow(clippy::needless_range_loop)]

use super::{TILE_ROWS, block_bytes, prefetch_row};
use crate::activations::TransposedX;
use gemv_core::codec::BF16_NAN;
use gemv_core::{GROUP_SIZE, PARTIALS};
use std::arch::x86_64::*;

const W: usize = 8;
/// Blocks per 64-group superblock.
const Q: usize = PARTIALS / W;

/// 8 E4M3 codes (one per lane) as f32 times 2^-25 (see the module doc), exactly, without gathers
/// or subnormal arithmetic (see the AVX-512 kernel).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_scales(codes: __m256i) -> __m256 {
    let magnitude = _mm256_and_si256(codes, _mm256_set1_epi32(0x7F));
    // Normal codes: exponent field + 120 is the f32 exponent; 25 less for the 2^-25.
    let normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32::<20>(magnitude), _mm256_set1_epi32(95 << 23)));
    let mantissa = _mm256_and_si256(codes, _mm256_set1_epi32(7));
    // Subnormal codes: m * 2^-9, times 2^-25.
    let subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(f32::from_bits(93 << 23)));
    let is_subnormal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), magnitude));
    let value = _mm256_blendv_ps(normal, subnormal, is_subnormal);
    let is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F)));
    let value = _mm256_blendv_ps(value, _mm256_set1_ps(f32::NAN), is_nan);
    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)));
    _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(value), sign))
}

/// `2 * e2m1` for the 16 nibble codes, as signed bytes, in both 128-bit lanes (`vpshufb` looks
/// up within a lane).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn doubled_e2m1_table() -> __m256i {
    _mm256_setr_epi8(
        0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8,
        -12,
    )
}

/// The nibbles of 8 groups' words, looked up: byte k of lane g is `2 * e2m1` of the word's
/// nibble 2k (first vector) and 2k + 1 (second).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn doubled_nibbles(words: __m256i, table: __m256i) -> [__m256i; 2] {
    let low_nibbles = _mm256_set1_epi8(0x0F);
    [
        _mm256_shuffle_epi8(table, _mm256_and_si256(words, low_nibbles)),
        _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi32::<4>(words), low_nibbles)),
    ]
}

/// Weight `2K + HIGH` of a half (elements 0..7 of the even words, 8..15 of the odd ones) of the 8
/// groups whose looked-up nibbles are `doubled`: byte K of each lane moved to the top (the rest
/// zero), converted, times `scale * 2^-25`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn weights<const K: i8, const HIGH: usize>(doubled: &[__m256i; 2], scaled: __m256) -> __m256 {
    const Z: i8 = -128;
    let to_top = _mm256_setr_epi8(
        Z,
        Z,
        Z,
        K,
        Z,
        Z,
        Z,
        K + 4,
        Z,
        Z,
        Z,
        K + 8,
        Z,
        Z,
        Z,
        K + 12,
        Z,
        Z,
        Z,
        K,
        Z,
        Z,
        Z,
        K + 4,
        Z,
        Z,
        Z,
        K + 8,
        Z,
        Z,
        Z,
        K + 12,
    );
    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(doubled[HIGH], to_top)), scaled)
}

/// The words of groups 0..7 in order, from the per-128-bit-lane shuffle's 0, 1, 4, 5 | 2, 3, 6, 7.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn in_group_order(v: __m256) -> __m256i {
    _mm256_castpd_si256(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(v)))
}

/// The 8 weights of a half (see [`weights`]) of 8 groups.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_half(words: __m256i, table: __m256i, scaled: __m256, out: &mut [__m256]) {
    let doubled = doubled_nibbles(words, table);
    out[0] = weights::<0, 0>(&doubled, scaled);
    out[1] = weights::<0, 1>(&doubled, scaled);
    out[2] = weights::<1, 0>(&doubled, scaled);
    out[3] = weights::<1, 1>(&doubled, scaled);
    out[4] = weights::<2, 0>(&doubled, scaled);
    out[5] = weights::<2, 1>(&doubled, scaled);
    out[6] = weights::<3, 0>(&doubled, scaled);
    out[7] = weights::<3, 1>(&doubled, scaled);
}

/// Rows of a tile: two groups of three rows at M = 1 and M > 2, three pairs at M = 2.
pub(crate) const ROWS: usize = 6;
/// Rows streamed together at M = 1: three chains of fused multiply-adds in flight (each waits on
/// its previous one) where two left the loop latency-bound (cache-resident 512 x 5120, one
/// thread: 388-417 us against 442-518 us), with every decoded vector still in registers; four
/// were no faster.
const M1_ROWS: usize = 3;
/// Rows streamed together at M = 2 (2 x 2 chains).
const PAIR: usize = 2;
/// At M > 2, rows whose decoded weights meet each activation load, and tokens whose accumulators
/// are held at once: 3 x 3 = 9 chains, three weight and three activation loads per 9 FMAs,
/// within the 16 registers. Measured against 2 x 4 (cache-resident 512 x 5120, one thread, M = 8):
/// 1113-1399 us against 1430-1545 us; 3 x 4 was slower (1386-1923 us).
const ACC_ROWS: usize = 3;
const TOKENS: usize = 3;

/// Accumulates tokens `t0 .. t0 + T` of rows `first .. first + ACC_ROWS` over one superblock (see
/// the AVX-512 kernel): the ACC_ROWS x T accumulators of one partial vector stay in registers.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn accumulate<const T: usize>(
    ws: &[[[__m256; GROUP_SIZE]; Q]; ACC_ROWS],
    xt: &TransposedX,
    superblock: usize,
    first: usize,
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
        let mut acc = [[_mm256_setzero_ps(); T]; ACC_ROWS];
        // SAFETY: partial vector q of row first + r, token t0 + t lies inside `partials`
        // (ROWS * m * 64 values); unaligned loads.
        unsafe {
            for (r, row_acc) in acc.iter_mut().enumerate() {
                for (t, sum) in row_acc.iter_mut().enumerate() {
                    *sum = _mm256_loadu_ps(partials.as_ptr().add(((first + r) * m + t0 + t) * PARTIALS + q * W));
                }
            }
        }
        for j in 0..GROUP_SIZE {
            let offset = (q * GROUP_SIZE + j) * W;
            // A loop, not `array::from_fn`: a closure does not inherit the target features, and
            // an out-of-line call per load cost more than the load.
            let mut xs = [_mm256_setzero_ps(); T];
            for t in 0..T {
                // SAFETY: each token's slice holds Q blocks of 16 vectors of 8 f32.
                xs[t] = unsafe { _mm256_loadu_ps(x[t].as_ptr().add(offset)) };
            }
            for r in 0..ACC_ROWS {
                let w = ws[r][q][j];
                for t in 0..T {
                    acc[r][t] = _mm256_fmadd_ps(w, xs[t], acc[r][t]);
                }
            }
        }
        // SAFETY: as for the loads above; unaligned stores.
        unsafe {
            for (r, row_acc) in acc.iter().enumerate() {
                for (t, &sum) in row_acc.iter().enumerate() {
                    _mm256_storeu_ps(partials.as_mut_ptr().add(((first + r) * m + t0 + t) * PARTIALS + q * W), sum);
                }
            }
        }
    }
}

/// One block of every row of the tile, decoded in registers, for one or two tokens: per element
/// j each row's weight vector is decoded and fused straight into that row's accumulators, so at
/// M <= 2 weights never go through memory (see the AVX-512 kernel).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn stream_block<const R: usize, const T: usize>(
    words: &[[__m256i; 2]; R],
    scale: &[__m256; R],
    table: __m256i,
    x: [&[f32]; T],
    acc: &mut [[__m256; T]; R],
) {
    for half in 0..2 {
        let mut doubled = [[_mm256_setzero_si256(); 2]; R];
        for r in 0..R {
            doubled[r] = doubled_nibbles(words[r][half], table);
        }
        macro_rules! element {
            ($k:expr, $high:expr) => {{
                let j = 8 * half + 2 * $k + $high;
                let mut xs = [_mm256_setzero_ps(); T];
                for t in 0..T {
                    // SAFETY: each token's block holds 16 vectors of 8 f32.
                    xs[t] = unsafe { _mm256_loadu_ps(x[t].as_ptr().add(j * W)) };
                }
                for r in 0..R {
                    let w = weights::<$k, $high>(&doubled[r], scale[r]);
                    for t in 0..T {
                        acc[r][t] = _mm256_fmadd_ps(w, xs[t], acc[r][t]);
                    }
                }
            }};
        }
        element!(0, 0);
        element!(0, 1);
        element!(1, 0);
        element!(1, 1);
        element!(2, 0);
        element!(2, 1);
        element!(3, 0);
        element!(3, 1);
    }
}

/// Loads the accumulators of partial vector `q` for tokens 0..T of rows `first .. first + R`,
/// streams block `b` through them, and stores them back.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn stream_tokens<const R: usize, const T: usize>(
    words: &[[__m256i; 2]; R],
    scale: &[__m256; R],
    table: __m256i,
    xt: &TransposedX,
    b: usize,
    q: usize,
    first: usize,
    partials: &mut [f32],
) {
    let m = xt.m();
    let mut x: [&[f32]; T] = [&[]; T];
    for t in 0..T {
        x[t] = xt.block(t, b);
    }
    let at = |r: usize, t: usize| ((first + r) * m + t) * PARTIALS + q * W;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    // SAFETY: partial vector q of row first + r, token t lies inside `partials` (ROWS * m * 64
    // values); unaligned loads and stores.
    unsafe {
        for (r, row_acc) in acc.iter_mut().enumerate() {
            for (t, sum) in row_acc.iter_mut().enumerate() {
                *sum = _mm256_loadu_ps(partials.as_ptr().add(at(r, t)));
            }
        }
    }
    stream_block::<R, T>(words, scale, table, x, &mut acc);
    // SAFETY: as above.
    unsafe {
        for (r, row_acc) in acc.iter().enumerate() {
            for (t, &sum) in row_acc.iter().enumerate() {
                _mm256_storeu_ps(partials.as_mut_ptr().add(at(r, t)), sum);
            }
        }
    }
}

/// Prefetches what the rows after this pair will read where it reads now: the same superblock of
/// row `row` (a pair further on). A row of a 5120-wide matrix is only five superblocks, so
/// looking ahead within the row would leave every tile's start cold; rows are consecutive in
/// memory, so one tile ahead is the stream's true frontier. The address may lie past the slice
/// (or the matrix): it is only prefetched, never read, and a prefetch does not fault.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn prefetch_next_tile(tile: &Tile<'_>, row: usize, superblock: usize) {
    let shape = (tile.row_bytes, tile.groups);
    prefetch_row(tile.packed, tile.scales, shape, row, superblock * 512, 8, Some(superblock * 64));
}

/// At M <= 2, block by block: prefetches block `b` of row `row` (two groups of streamed rows
/// further on; one line of packed bytes; at the superblock's first block also its line of scale
/// codes). Spread over the
/// blocks, the prefetches keep pace with the stream where one burst per superblock did not
/// (measured with a C model of this loop, 16384 x 5120 weights (46 MB) from DRAM: 0.185-0.205
/// ns per weight without, 0.153-0.155 with). Like [`prefetch_next_tile`], it may point past the matrix: only
/// prefetched, never read.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn prefetch_block_ahead(tile: &Tile<'_>, row: usize, b: usize) {
    let shape = (tile.row_bytes, tile.groups);
    prefetch_row(tile.packed, tile.scales, shape, row, b * 64, 1, b.is_multiple_of(Q).then_some(b * W));
}

/// Block `b` of one row as (even words, odd words) in group order, and its scales.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn load_block(bytes: &[u8], codes: &[u8]) -> ([__m256i; 2], __m256) {
    // SAFETY: `bytes` has 64 bytes and `codes` 8 (a block of 8 groups); unaligned.
    let (codes, low, high) = unsafe {
        (
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.as_ptr().cast())),
            _mm256_castsi256_ps(_mm256_loadu_si256(bytes.as_ptr().cast())),
            _mm256_castsi256_ps(_mm256_loadu_si256(bytes.as_ptr().add(32).cast())),
        )
    };
    // Per 128-bit lane: [low0, low2, high0, high2], i.e. groups 0, 1, 4, 5 | 2, 3, 6, 7.
    let even = in_group_order(_mm256_shuffle_ps::<0x88>(low, high));
    let odd = in_group_order(_mm256_shuffle_ps::<0xDD>(low, high));
    ([even, odd], decode_scales(codes))
}

/// # Safety
/// The CPU must support AVX2 and FMA. `packed` and `scales` hold `rows <= ROWS` whole rows;
/// `partials` holds `ROWS * 64 * xt.m()` values (rows past `rows` are scratch); `xt` was built
/// for width 8.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn row_tile(packed: &[u8], scales: &[u8], rows: usize, xt: &TransposedX, partials: &mut [f32]) {
    debug_assert!(rows <= ROWS && ROWS <= TILE_ROWS);
    let (row_bytes, groups) = (packed.len() / rows, scales.len() / rows);
    let tile = Tile { packed, scales, rows, row_bytes, groups, table: doubled_e2m1_table() };
    match xt.m() {
        1 => {
            for first in (0..rows).step_by(M1_ROWS) {
                stream_rows::<M1_ROWS, 1>(&tile, first, xt, partials);
            }
        }
        2 => {
            for first in (0..rows).step_by(PAIR) {
                stream_rows::<PAIR, 2>(&tile, first, xt, partials);
            }
        }
        _ => {
            for first in (0..rows).step_by(ACC_ROWS) {
                decode_and_accumulate(&tile, first, xt, partials);
            }
        }
    }
}

/// The rows of one tile (`rows` whole rows of packed bytes and scale codes) and the E2M1 table.
struct Tile<'a> {
    packed: &'a [u8],
    scales: &'a [u8],
    rows: usize,
    /// Packed bytes and scale codes per row (divided once per tile, not per block).
    row_bytes: usize,
    groups: usize,
    table: __m256i,
}

impl Tile<'_> {
    /// Block `b` of row `r` as words and scales (see [`load_block`]); zero weights for a row at
    /// or past `rows` (its partials are scratch).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn block(&self, r: usize, b: usize, tail: &mut ([u8; 128], [u8; 16])) -> ([__m256i; 2], __m256) {
        if r >= self.rows {
            return ([_mm256_setzero_si256(); 2], _mm256_setzero_ps());
        }
        let (row_bytes, groups) = (self.row_bytes, self.groups);
        let row_packed = &self.packed[r * row_bytes..(r + 1) * row_bytes];
        let row_scales = &self.scales[r * groups..(r + 1) * groups];
        let (bytes, codes) = block_bytes::<W>(row_packed, row_scales, b, tail);
        load_block(bytes, codes)
    }
}

/// At M <= 2: rows `first .. first + R` (those below `rows`; the others are zero weights into
/// scratch partials), block by block, decoded in registers and fused straight into the tokens'
/// accumulators.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn stream_rows<const R: usize, const T: usize>(tile: &Tile<'_>, first: usize, xt: &TransposedX, partials: &mut [f32]) {
    let mut tail = ([0u8; 128], [0u8; 16]);
    for b in 0..xt.blocks() {
        let mut words = [[_mm256_setzero_si256(); 2]; R];
        let mut scale = [_mm256_setzero_ps(); R];
        for i in 0..R {
            prefetch_block_ahead(tile, first + i + 2 * R, b);
            (words[i], scale[i]) = tile.block(first + i, b, &mut tail);
        }
        stream_tokens::<R, T>(&words, &scale, tile.table, xt, b, b % Q, first, partials);
    }
}

/// At M > 2: rows `first .. first + ACC_ROWS` (a row at or past `rows` keeps zero weights: its
/// partials are scratch), superblock by superblock: each row's 8 x 16 weight vectors decoded once,
/// then every token runs through them.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn decode_and_accumulate(tile: &Tile<'_>, first: usize, xt: &TransposedX, partials: &mut [f32]) {
    let m = xt.m();
    let mut tail = ([0u8; 128], [0u8; 16]);
    let mut ws = [[[_mm256_setzero_ps(); GROUP_SIZE]; Q]; ACC_ROWS];
    for superblock in 0..xt.blocks() / Q {
        for (i, row_ws) in ws.iter_mut().enumerate() {
            let r = first + i;
            prefetch_next_tile(tile, r + ACC_ROWS, superblock);
            if r >= tile.rows {
                continue;
            }
            for (q, block_ws) in row_ws.iter_mut().enumerate() {
                let ([even, odd], scale) = tile.block(r, Q * superblock + q, &mut tail);
                let (low, high) = block_ws.split_at_mut(GROUP_SIZE / 2);
                decode_half(even, tile.table, scale, low);
                decode_half(odd, tile.table, scale, high);
            }
        }
        let mut t0 = 0;
        while t0 < m {
            match m - t0 {
                1 => accumulate::<1>(&ws, xt, superblock, first, t0, partials),
                2 => accumulate::<2>(&ws, xt, superblock, first, t0, partials),
                3 => accumulate::<3>(&ws, xt, superblock, first, t0, partials),
                _ => accumulate::<TOKENS>(&ws, xt, superblock, first, t0, partials),
            }
            t0 += TOKENS;
        }
    }
}

/// Outputs [`finish_outputs`] finishes together, one per lane.
pub(crate) const FINISH_OUTPUTS: usize = W;

/// The contract's tree over the 64 partials of 8 outputs (`partials[64 * o..][..64]`) and
/// `bf16(total * global_scale)` of each into `out[o]`: every addition of [`super::finish`], with
/// the same operands in the same order, 8 outputs to a vector (see the AVX-512 version). Levels
/// 32, 16 and 8 add an output's own vectors; level 4 pairs two outputs' 128-bit halves, levels 2
/// and 1 two vectors' values within the halves, which leaves the outputs in the lane order 0 2 4 6
/// 1 3 5 7, put right by one permute.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn finish_outputs(partials: &[f32], global_scale: f32, out: &mut [u16]) {
    assert!(partials.len() >= W * PARTIALS && out.len() >= W, "finish_outputs: 8 outputs");
    let mut level = [_mm256_setzero_ps(); W];
    for (o, sums) in level.iter_mut().enumerate() {
        // SAFETY: output o's 64 partials lie inside `partials` (asserted above); unaligned loads.
        let p: [__m256; 8] = unsafe {
            let base = partials.as_ptr().add(o * PARTIALS);
            [
                _mm256_loadu_ps(base),
                _mm256_loadu_ps(base.add(W)),
                _mm256_loadu_ps(base.add(2 * W)),
                _mm256_loadu_ps(base.add(3 * W)),
                _mm256_loadu_ps(base.add(4 * W)),
                _mm256_loadu_ps(base.add(5 * W)),
                _mm256_loadu_ps(base.add(6 * W)),
                _mm256_loadu_ps(base.add(7 * W)),
            ]
        };
        let q = [
            _mm256_add_ps(p[0], p[4]),
            _mm256_add_ps(p[1], p[5]),
            _mm256_add_ps(p[2], p[6]),
            _mm256_add_ps(p[3], p[7]),
        ];
        *sums = _mm256_add_ps(_mm256_add_ps(q[0], q[2]), _mm256_add_ps(q[1], q[3]));
    }
    // Level 4: [a0..a3 | b0..b3] + [a4..a7 | b4..b7].
    for v in 0..4 {
        let (a, b) = (level[2 * v], level[2 * v + 1]);
        level[v] = _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b));
    }
    // Level 2, within each half: [a0 a1 b0 b1] + [a2 a3 b2 b3].
    for v in 0..2 {
        let (a, b) = (level[2 * v], level[2 * v + 1]);
        level[v] = _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(a, b), _mm256_shuffle_ps::<0b11_10_11_10>(a, b));
    }
    // Level 1: [a0 a2 b0 b2] + [a1 a3 b1 b3], leaving outputs 0 2 4 6 | 1 3 5 7.
    let (a, b) = (level[0], level[1]);
    let totals = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(a, b), _mm256_shuffle_ps::<0b11_01_11_01>(a, b));
    let totals = _mm256_permutevar8x32_ps(totals, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let scaled = _mm256_mul_ps(totals, _mm256_set1_ps(global_scale));
    // Round to nearest even on the bits; NaN to the canonical bf16 NaN.
    let bits = _mm256_castps_si256(scaled);
    let odd = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))));
    let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(scaled, scaled));
    let values = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(i32::from(BF16_NAN)), nan);
    // Each value fits 16 bits: the unsigned pack keeps it; the halves' low quadwords hold 0..3 and
    // 4..7.
    let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi32(values, values));
    // SAFETY: `out` holds at least 8 u16 (asserted above); an unaligned 16-byte store.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm256_castsi256_si128(packed)) };
}
