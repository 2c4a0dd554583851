//! Tile kernels: the 64 partial sums of every token for the 16 rows of one tile of the
//! arrangement (see `layout`), on one instruction set, and the shared finish.
//!
//! Partial l of a row visits groups l, l + 64, ... in order and each group's 16 elements in
//! order, with fused multiply-adds: exactly the contract's chains. A vector's lanes are rows, so
//! the 16 rows of a tile are 16 independent chains, and a kernel keeps several groups' chains
//! (and every token's) in flight at once. The tree over the 64 partials adds whole vectors of 16
//! rows, the same additions in the same order as one output at a time, and the final rounding is
//! `bf16(total * global_scale)`.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_bf16;
#[cfg(target_arch = "x86_64")]
mod avx512_products;
#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;

#[cfg(target_arch = "x86_64")]
use crate::activations::Pairs;
use crate::layout::{Geometry, READ_PAST, TILE_ROWS};
use crate::simd::SimdPath;
pub(crate) use gemv_core::codec::e4m3_table;

/// Tiles one pass of the products kernel covers (at most): each activation's products, made once,
/// serve all their rows.
pub(crate) const PRODUCT_TILES: usize = 4;

/// Calls `$pass::<T, P>($args)` for a pass of `$tokens` tokens, choosing from the `(T, P)` pairs
/// listed: `T` tokens share each decoded weight and `P` groups of a block advance together, so
/// `T x P` chains are in flight (each kernel lists what fits its registers).
macro_rules! pass_for_tokens {
    ($tokens:expr, $pass:ident $args:tt, $(($t:literal, $p:literal)),+ $(,)?) => {
        match $tokens {
            $($t => $pass::<$t, $p> $args,)+
            tokens => unreachable!("{tokens} tokens in one pass"),
        }
    };
}
pub(crate) use pass_for_tokens;

/// The most tokens one pass over a tile serves on `path` (the AVX-512 BF16 path's count is its
/// pair kernel's); more tokens take more passes (the tile is in cache by then).
pub(crate) fn tokens_per_pass(path: SimdPath) -> usize {
    match path {
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx512Bf16 => avx512_bf16::TOKENS,
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx512 | SimdPath::Avx512Products => avx512::TOKENS,
        #[cfg(target_arch = "x86_64")]
        SimdPath::Avx2 => avx2::TOKENS,
        #[cfg(target_arch = "aarch64")]
        SimdPath::Neon => neon::TOKENS,
        _ => 8,
    }
}

/// Prefetches `lines` 64-byte lines from `address` into the cache. The address may lie past any
/// allocation (a tile after the last): it is only prefetched, never read, and a prefetch does
/// not fault.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_lines(address: *const u8, lines: usize) {
    for line in 0..lines {
        // SAFETY: `prefetcht0` is SSE, part of every x86-64 CPU, and never faults.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                address.wrapping_add(64 * line).cast(),
            )
        };
    }
}

/// The 64 partials of every token of `x` (at most [`tokens_per_pass`]) for one tile:
/// `partials[t][l][row]`, `x.len() * 64 * 16` values. `ahead` is as far ahead of the tile as the
/// kernel prefetches (prefetched, never read); `special_scales` says whether the matrix has NaN or
/// subnormal scale codes (without them the decode takes its short way).
#[allow(clippy::too_many_arguments)]
pub(crate) fn tile_partials(
    path: SimdPath,
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: &[&[f32]],
    products_finite: bool,
    partials: &mut [f32],
    ahead: *const u8,
) {
    assert!(tile.len() >= geometry.tile_bytes() + READ_PAST, "a whole tile and the bytes a kernel may read past it");
    assert!(x.len() <= tokens_per_pass(path) && partials.len() >= x.len() * gemv_core::PARTIALS * TILE_ROWS);
    assert!(x.iter().all(|x| x.len() >= geometry.padded_k()), "padded activations");
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a backend only holds an x86 path after `SimdPath::is_supported` confirmed the
        // CPU has its features (AVX-512F, and AVX-512 BF16 beside it; AVX2 and FMA); the lengths
        // were asserted above.
        SimdPath::Avx512 | SimdPath::Avx512Bf16 | SimdPath::Avx512Products => unsafe {
            avx512::tile_partials(tile, geometry, special_scales, x, partials, ahead)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        SimdPath::Avx2 => unsafe { avx2::tile_partials(tile, geometry, special_scales, x, partials, ahead) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a backend only holds the NEON path after `SimdPath::is_supported` confirmed it.
        SimdPath::Neon => unsafe { neon::tile_partials(tile, geometry, x, partials) },
        _ => {
            let _ = (ahead, special_scales);
            portable::tile_partials(tile, geometry, x, products_finite, partials)
        }
    }
}

/// The 64 partials of `tokens` (2 to the pair kernel's [`tokens_per_pass`]) for one tile, as
/// [`tile_partials`] gives them, from X's bf16 pairs on the AVX-512 BF16 path (the activations
/// hold pairs only where X allows).
#[cfg(target_arch = "x86_64")]
pub(crate) fn tile_partials_pairs(
    tile: &[u8],
    geometry: &Geometry,
    special_scales: bool,
    x: Pairs<'_>,
    tokens: std::ops::Range<usize>,
    partials: &mut [f32],
    ahead: *const u8,
) {
    let count = tokens.len();
    assert!(tile.len() >= geometry.tile_bytes(), "a whole tile");
    assert!(
        (crate::simd::PAIR_TOKENS_MIN..=avx512_bf16::TOKENS).contains(&count)
            && partials.len() >= count * gemv_core::PARTIALS * TILE_ROWS
    );
    assert!(tokens.end <= x.tokens && x.values.len() >= geometry.padded_k() / 2 * x.tokens, "padded pairs");
    assert!(crate::dpbf16_probe::adds_in_turn(), "the pair kernel on a CPU whose vdpbf16ps it cannot use");
    // SAFETY: the CPU has AVX-512F and AVX-512 BF16 (`adds_in_turn` checked both); the
    // lengths were asserted above.
    unsafe { avx512_bf16::tile_partials(tile, geometry, special_scales, x, (tokens.start, count), partials, ahead) }
}

/// The 64 partials of one token for each of `tiles` (1 to 4; `partials[tile][l][row]`), as
/// [`tile_partials`] gives them, on the AVX-512F products kernel: each activation's products by
/// the E2M1 values made once for all the tiles' rows. Only for X whose products with weights
/// cannot overflow (`Activations::products_finite`). `tiles` lie back to back in the
/// arrangement; the kernel prefetches the ones after them.
#[cfg(target_arch = "x86_64")]
pub(crate) fn tile_partials_products(
    tiles: &[&[u8]],
    geometry: &Geometry,
    special_scales: bool,
    x: &[f32],
    partials: &mut [f32],
) {
    assert!((1..=PRODUCT_TILES).contains(&tiles.len()), "1 to {PRODUCT_TILES} tiles a pass");
    assert!(tiles.iter().all(|tile| tile.len() >= geometry.tile_bytes() + READ_PAST), "whole tiles and the bytes past");
    assert!(x.len() >= geometry.padded_k() && partials.len() >= tiles.len() * gemv_core::PARTIALS * TILE_ROWS);
    assert!(std::arch::is_x86_feature_detected!("avx512f"), "the products kernel on a CPU without AVX-512F");
    // SAFETY: the CPU has AVX-512F and the lengths hold (asserted above).
    unsafe { avx512_products::tile_partials(tiles, geometry, special_scales, x, partials) }
}

/// The tree over each token's 64 partials (`partials[t][l][row]`) and the rounding into
/// `out[t][row]`.
pub(crate) fn finish(path: SimdPath, partials: &mut [f32], global_scale: f32, out: &mut [[u16; TILE_ROWS]]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F (as above); `finish` asserts the lengths.
        SimdPath::Avx512 | SimdPath::Avx512Bf16 | SimdPath::Avx512Products => unsafe {
            avx512::finish(partials, global_scale, out)
        },
        _ => portable::finish(partials, global_scale, out),
    }
}
