// W4A16 batched GEMV: Y[t][n] = bf16(global_scale * sum_k dequant(W)[n][k] * X[t][k]).
//
// The exact numeric contract (docs/numerics.md): 64 partial sums per output; partial l visits
// groups l, l+64, ... in order, doing a = fma(e2m1 * e4m3, x, a) term by term; a fixed tree (d =
// 32, 16, ..., 1) adds them; one multiply by the global scale, one bf16 rounding. Every f32
// operation is an explicit intrinsic (__fmaf_rn, __fadd_rn, __fmul_rn), so the emulator computes
// what the GPU computes, NaN bits included.
//
// Design (docs/kernels.md has the instruction budget this is built to):
// - A pass covers 64 consecutive groups (1,024 k): group 2i and 2i+1 belong to lane i, so a lane
//   owns partials 2i and 2i+1 and one 128-bit load brings both of its groups of a row. Each warp
//   computes ROWS weight rows; a block of 8 warps shares one copy of X per pass.
// - X is staged once per pass and block into shared memory as f32 times 2^S, in the order the
//   decoded weight pairs need it, padded so that 128-bit shared loads are conflict-free.
// - Weights are decoded 8 nibbles at a time into binary16 pairs whose value is e2m1 * 2^-14 (bit
//   placement; code 1 is an f16 subnormal), multiplied (f16x2) by the group's scale times
//   2^(14 - S): the product e2m1 * e4m3 * 2^-S has at most 6 significant bits and is exact in f16.
//   Converted to f32 (exact) and fused with x * 2^S, it gives exactly fma(e2m1 * e4m3, x, a).
// - Two builds of this source differ only in where the scales come from (row_scales below):
//   module w4a16_gemv (sm_75 and newer) looks each E4M3 code up in a shared-memory table of
//   binary16 e4m3 * 2^7 (S = 7); module w4a16_gemv_sm89 (GEMV_SCALES_BY_CVT, sm_89 and newer)
//   converts a lane's two codes with one cvt.rn.f16x2.e4m3x2 (the plain e4m3 value, S = 14).
// - Where some |x| >= 2^(128 - S) (x * 2^S overflows), an output of the block turns infinite or
//   NaN; a block with such an output runs again on a plain path (weights decoded to f32 one by
//   one, X read unscaled): the same bits, slower, on inputs no model produces.
// - The next pass's weights are loaded while the current one computes, with vector loads where
//   the block's alignment allows (decided once); the last, partial pass loads what exists.
//
// Layout (ModelOpt NVFP4): packed[n][K/2], even k in the low nibble; scales[n][K/16] E4M3.
#include "gemv_portable.cuh"
#include "gemv_routing.cuh"

namespace gemv {
// Each build in its own (inline) namespace, so that the emulator links every build into one
// library.
#ifdef GEMV_SCALES_BY_CVT
inline namespace scales_by_cvt {
#endif
#ifdef GEMV_DEPENDENT_LAUNCH
inline namespace dependent_launch {
#endif

constexpr int kWarp = 32;
constexpr int kGroup = 16;
constexpr int kPartials = 64;
// Threads per block; every launcher uses this (crates/gemv-cuda/src/launch.rs).
constexpr int kThreadsPerBlock = 256;
constexpr int kPassK = kPartials * kGroup;  // the k of one pass: one group per partial
constexpr int kLaneK = 2 * kGroup;          // a lane's k in a pass
constexpr int kLaneStride = kLaneK + 4;     // padded: lanes 36 floats apart hit distinct banks
constexpr int kTokenStride = kWarp * kLaneStride;
// stage_slice and word_activations address the staged activations in float4s, and a
// quarter-warp's eight float4 reads hit distinct banks only when the stride is an odd number
// of float4s.
static_assert(kLaneStride % 8 == 4, "lane stride: a whole, odd number of float4s");
// Tokens staged at once: a slice's weights are decoded once per slice, so fewer slices mean fewer
// decodes; its registers and shared memory (4.5 KB a token) grow with it. Tiers that keep two
// blocks per SM (128 registers) stage 4 tokens, those that trade them for 255 registers stage 8.
template <int MIN_BLOCKS>
struct SliceTokens {
    static constexpr int value = MIN_BLOCKS == 1 ? 8 : 4;
};
constexpr int kChunks = kPassK / 8;  // 8-k chunks of a pass
// Whether a kernel's one slice holds every token (see Stager).
template <int MAX_M, int SLICE>
struct Held {
    static constexpr bool value = MAX_M <= SLICE;
};
#ifdef GEMV_SCALES_BY_CVT
// bf16 (2^S, 2^S), S = 14: the converted scale is e4m3 itself.
constexpr gemv_u32 kBf16PairXScale = 0x46804680u;
#else
constexpr float kXScale = 128.0f;  // 2^S, S = 7: the table holds e4m3 * 2^7
#endif
constexpr gemv_u32 kHalfPairTwoTo15 = 0x78007800u;  // binary16 (2^15, 2^15)

// The common path `cargo xtask sass` counts (GEMV_ON_COMMON_PATH, gemv_portable.cuh): 16-byte
// aligned weights, whole passes, |x| < 2^(128 - S).

// Where a launch's token t reads X and writes Y (gemv_routing.cuh).
using gemv_routing::GatheredRows;
using gemv_routing::StridedRows;

#include "w4a16_gemv_decode.cuh"

#include "w4a16_gemv_loads.cuh"

#include "w4a16_gemv_staging.cuh"


__device__ __forceinline__ gemv_u32 word_of(const PassWeights& w, int h, int word) {
    return h == 0 ? (word == 0 ? w.packed.x : w.packed.y) : (word == 0 ? w.packed.z : w.packed.w);
}

// Fuses one staged slice (X times 2^S) into the accumulators of every row of the warp, with
// weights e2m1 * e4m3 * 2^-S. Each 8-element word is decoded once per row and its activations loaded once
// per token (two 128-bit shared loads), whichever of the two is fewer held in registers while
// the other is streamed; elements run in order j = 0..15 within a group, as the contract's
// chain requires. The slice's tokens are staged at `first` .. `first + SLICE_TOKENS` of `xs`,
// which holds CAPACITY tokens (the ring pipeline stages several passes at once).
template <int MAX_M, int ROWS, int SLICE_TOKENS, bool FULL, int CAPACITY = SLICE_TOKENS>
__device__ __forceinline__ void compute_slice(const PassWeights (&w)[ROWS], const ScaleTable& table,
                                              const GemvShared<float, CAPACITY * kTokenStride>& xs, int t0,
                                              int m, int lane, float (&acc)[ROWS][2][MAX_M], int first = 0) {
    RowScales scales[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) scales[r] = row_scales(table, w[r].codes);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        gemv_u32 scale[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) scale[r] = scales[r].pair[h];
#pragma unroll
        for (int word = 0; word < 2; ++word) {
            const int lane_vector = lane * (kLaneStride / 4);
            if (SLICE_TOKENS <= ROWS) {
                // Few tokens: hold their activations, stream the rows.
                float xv[SLICE_TOKENS][8];
#pragma unroll
                for (int t = 0; t < SLICE_TOKENS; ++t) {
                    if (t0 + t < MAX_M && (FULL || t0 + t < m)) {
                        word_activations<CAPACITY>(xs, first + t, lane_vector, 2 * h + word, xv[t]);
                    }
                }
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    float wf[8];
                    word_weights(word_of(w[r], h, word), scale[r], h, wf);
#pragma unroll
                    for (int t = 0; t < SLICE_TOKENS; ++t) {
                        if (t0 + t >= MAX_M || (!FULL && t0 + t >= m)) continue;
                        float sum = acc[r][h][t0 + t];
#pragma unroll
                        for (int j = 0; j < 8; ++j) sum = __fmaf_rn(wf[j], xv[t][j], sum);
                        acc[r][h][t0 + t] = sum;
                    }
                }
            } else {
                // Few rows: hold their weights, stream the tokens.
                float wf[ROWS][8];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) word_weights(word_of(w[r], h, word), scale[r], h, wf[r]);
#pragma unroll
                for (int t = 0; t < SLICE_TOKENS; ++t) {
                    if (t0 + t >= MAX_M || (!FULL && t0 + t >= m)) continue;
                    float xv[8];
                    word_activations<CAPACITY>(xs, first + t, lane_vector, 2 * h + word, xv);
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        float sum = acc[r][h][t0 + t];
#pragma unroll
                        for (int j = 0; j < 8; ++j) sum = __fmaf_rn(wf[r][j], xv[j], sum);
                        acc[r][h][t0 + t] = sum;
                    }
                }
            }
        }
    }
}

// One pass: stage every slice of X (times 2^S) and fuse it.
template <int MAX_M, int ROWS, int SLICE>
__device__ __forceinline__ void run_pass(const PassWeights (&w)[ROWS], const ScaleTable& table, const Stager& stager,
                                         int x_stride, bool x_aligned, bool chunk_in_k, int m, int lane,
                                         float (&acc)[ROWS][2][MAX_M]) {
    constexpr int kSliceTokens = MAX_M < SLICE ? MAX_M : SLICE;
    GEMV_SHARED(float, xs, kSliceTokens * kTokenStride);
#pragma unroll
    for (int t0 = 0; t0 < MAX_M; t0 += kSliceTokens) {
        if (t0 >= m) break;
        __syncthreads();  // the previous slice's readers are done
        stage_slice<kSliceTokens, Held<MAX_M, SLICE>::value>(xs, stager, x_stride, x_aligned, chunk_in_k, t0, m);
        __syncthreads();
        // Every token of the slice live (the plan's usual case) compiles without token guards.
        if (GEMV_ON_COMMON_PATH(t0 + kSliceTokens <= m, true)) {
            compute_slice<MAX_M, ROWS, kSliceTokens, true>(w, table, xs, t0, m, lane, acc);
        } else {
            compute_slice<MAX_M, ROWS, kSliceTokens, false>(w, table, xs, t0, m, lane, acc);
        }
    }
}

// Adds the 64 partials of each of the warp's ROWS x MAX_M outputs in the contract's tree; returns
// the total of the output this lane holds (lane l holds output l / (32 / P), P the outputs padded
// to a power of two, replicated on 32 / P lanes). Lane i holds partials 2i and 2i+1, so the
// tree's steps d = 32 .. 2 pair lane i with lane i + d/2 (shuffles) and the last step d = 1 adds
// a lane's two partials. With V values per lane (2 per output), each shuffle level first splits
// the values between the two lanes of a pair (the lower keeps the lower half) so one shuffle
// moves two useful values, until a lane holds one output's two partials; each sum is
// a[l] + a[l + d] (or its mirror: IEEE addition is commutative bit for bit).
template <int MAX_M, int ROWS>
struct Tree {
    static constexpr int kOutputs = ROWS * MAX_M;
    static constexpr int P = kOutputs <= 1    ? 1
                             : kOutputs <= 2  ? 2
                             : kOutputs <= 4  ? 4
                             : kOutputs <= 8  ? 8
                             : kOutputs <= 16 ? 16
                                              : 32;
    static constexpr int kLanesPerOutput = kWarp / P;
    static_assert(kOutputs <= 32, "at most 32 outputs per warp");
};

template <int MAX_M, int ROWS>
__device__ __forceinline__ float reduce(const float (&acc)[ROWS][2][MAX_M], int lane) {
    constexpr int P = Tree<MAX_M, ROWS>::P;
    float v[2 * P];
#pragma unroll
    for (int o = 0; o < P; ++o) {
        const int r = o / MAX_M;
        const int t = o % MAX_M;
        v[2 * o] = o < Tree<MAX_M, ROWS>::kOutputs ? acc[r][0][t] : 0.0f;
        v[2 * o + 1] = o < Tree<MAX_M, ROWS>::kOutputs ? acc[r][1][t] : 0.0f;
    }
    int count = 2 * P;
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) {
        const bool upper = (lane & d) != 0;
        if (count > 2) {
            const int half = count / 2;
#pragma unroll
            for (int i = 0; i < P; ++i) {
                if (i >= half) break;
                const float keep = upper ? v[half + i] : v[i];
                const float give = upper ? v[i] : v[half + i];
                v[i] = __fadd_rn(keep, __shfl_xor_sync(0xFFFFFFFFu, give, d));
            }
            count = half;
        } else {
            v[0] = __fadd_rn(v[0], __shfl_xor_sync(0xFFFFFFFFu, v[0], d));
            v[1] = __fadd_rn(v[1], __shfl_xor_sync(0xFFFFFFFFu, v[1], d));
        }
    }
    return __fadd_rn(v[0], v[1]);
}

// Whether this lane stores the output it holds (one lane per output, live rows and tokens).
template <int MAX_M, int ROWS>
__device__ __forceinline__ bool stores(int lane, int m, int n, int row0) {
    const int o = lane / Tree<MAX_M, ROWS>::kLanesPerOutput;
    return lane % Tree<MAX_M, ROWS>::kLanesPerOutput == 0 && o < Tree<MAX_M, ROWS>::kOutputs && o % MAX_M < m &&
           row0 + o / MAX_M < n;
}

template <int MAX_M, int ROWS, class Rows>
__device__ __forceinline__ void store(float total, gemv_u16* y, bool y_f32, float global_scale, const Rows& token_rows,
                                      int lane, int row0) {
    const int o = lane / Tree<MAX_M, ROWS>::kLanesPerOutput;
    gemv_routing::store_output(y, y_f32, token_rows, o % MAX_M, row0 + o / MAX_M, __fmul_rn(total, global_scale));
}

template <int MAX_M, int ROWS>
__device__ __forceinline__ void zero_accumulators(float (&acc)[ROWS][2][MAX_M]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) acc[r][h][t] = 0.0f;
}

// The cursor of a warp's ROWS rows from row0 at this lane's first group. Rows past N (the last
// warps of the last block) repeat row N - 1, the first row included.
template <int ROWS>
__device__ __forceinline__ RowCursor<ROWS> make_row_cursor(const gemv_u8* packed, const gemv_u8* scales, int n, int k,
                                                           int lane, int row0) {
    const int first = row0 < n ? row0 : n - 1;
    RowCursor<ROWS> rows;
    rows.group = 2 * lane;
    rows.packed = packed + (gemv_u64)first * (gemv_u64)(k / 2) + 8 * rows.group;
    rows.scales = scales + (gemv_u64)first * (gemv_u64)(k / kGroup) + rows.group;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + r < n ? row0 + r : n - 1;
        rows.unit[r] = (gemv_u32)(row - first) * (gemv_u32)(k / 16);
    }
    return rows;
}

// Fills the block's scale table, one E4M3 code per thread (the cvt build has none to fill); a
// barrier must follow before any lookup.
__device__ __forceinline__ void fill_scale_table(ScaleTable& table, int tid) {
    static_assert(kThreadsPerBlock == 256, "one thread per E4M3 code fills the scale table");
#ifdef GEMV_SCALES_BY_CVT
    (void)table;
    (void)tid;
#else
    gemv_u32 pair, unused;
    scale_pairs((gemv_u32)tid, pair, unused);
    table[tid] = pair;
#endif
}

// One warp computes ROWS consecutive weight rows from row0 for every t < m (m <= MAX_M) and returns
// the total of the output this lane holds (see reduce). Every warp of the block runs every pass
// (the staging barriers are block-wide), rows past N included: they reload row N - 1 and are never
// stored. SLICE: tokens staged at once (SliceTokens).
template <int MAX_M, int ROWS, int SLICE>
__device__ __forceinline__ float gemv_rows(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, int m,
                                           int n, int k, int x_stride, bool x_aligned, const Loads& loads, int tid,
                                           int lane, int row0) {
    const int groups = k / kGroup;
    const int passes = (groups + kPartials - 1) / kPartials;
    float acc[ROWS][2][MAX_M];
    zero_accumulators(acc);
    // This thread's staging, advanced one pass at a time.
    const int chunk = tid % kChunks;
    RowCursor<ROWS> rows = make_row_cursor<ROWS>(packed, scales, n, k, lane, row0);
    Stager stager = make_stager<Held<MAX_M, SLICE>::value>(x, tid, x_stride, m);
    // The scale table; the first pass's staging barrier orders it before any lookup.
    GEMV_SHARED(gemv_u32, scale_table, 256);
    fill_scale_table(scale_table, tid);
    // Two weight buffers alternate: the next pass's loads are in flight while the current pass
    // computes, and nothing is copied between them.
    PassWeights a[ROWS], b[ROWS];
    load_all(rows, groups, loads, a);
    GEMV_AWAIT_INPUTS();  // the first pass's weights are in flight; X is staged from here on
    for (int pass = 0; pass < passes; pass += 2) {
        const bool second = pass + 1 < passes;
        if (second) load_all(rows, groups, loads, b);
        const bool in_k = pass * kPassK + 8 * chunk < k;
        run_pass<MAX_M, ROWS, SLICE>(a, scale_table, stager, x_stride, x_aligned, in_k, m, lane, acc);
        stager.x += kPassK;
        if (!second) break;
        if (pass + 2 < passes) load_all(rows, groups, loads, a);
        const bool next_in_k = (pass + 1) * kPassK + 8 * chunk < k;
        run_pass<MAX_M, ROWS, SLICE>(b, scale_table, stager, x_stride, x_aligned, next_in_k, m, lane, acc);
        stager.x += kPassK;
    }
    return reduce<MAX_M, ROWS>(acc, lane);
}

#include "w4a16_gemv_ring.cuh"

#include "w4a16_gemv_plain.cuh"

// One warp's ROWS rows from row0, computed and stored: the pipeline DEPTH selects (0: the classic
// gemv_rows; >= 2: gemv_rows_ring, which skips the loads and arithmetic of an inactive warp, one
// with no rows this round of a persistent grid, while it still takes the block's barriers).
template <int MAX_M, int ROWS, int SLICE, int DEPTH, class Rows>
__device__ __forceinline__ void gemv_warp_rows(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales,
                                               gemv_u16* y, bool y_f32, float global_scale, int m, int n,
                                               int k, const Rows& token_rows, bool x_aligned, const Loads& loads,
                                               int tid, int lane, int row0, bool active) {
    // X staged times 2^S is exact unless some |x| >= 2^(128 - S) overflows it; then an output of the
    // block is infinite or NaN (the overflowed x meets a weight in every output that reads it).
    // Only then does the block run again on the plain path: the same bits, slower, on inputs no
    // model produces. Outputs that are infinite or NaN anyway take the same detour.
    float total;
    if constexpr (DEPTH == 0) {
        (void)active;
        total = gemv_rows<MAX_M, ROWS, SLICE>(x, packed, scales, m, n, k, token_rows.x_stride, x_aligned, loads, tid,
                                              lane, row0);
    } else {
        total = gemv_rows_ring<MAX_M, ROWS, DEPTH>(x, packed, scales, m, n, k, token_rows, x_aligned, loads, tid, lane,
                                                   row0, active);
    }
    const bool mine = stores<MAX_M, ROWS>(lane, m, n, row0);
    const bool finite = (__float_as_uint(total) & 0x7F800000u) != 0x7F800000u;
    const int suspect = __syncthreads_or(mine && !finite);
    if (GEMV_ON_COMMON_PATH(suspect, 0)) {
        if (tid == 0) gemv_note_fallback();
        total = gemv_rows_plain<MAX_M, ROWS>(x, packed, scales, m, n, k, token_rows, lane, row0);
    }
    if (mine) store<MAX_M, ROWS>(total, y, y_f32, global_scale, token_rows, lane, row0);
}

// Entry: reads the alignments once; the passes then branch on them uniformly. A grid sized by N
// gives warp w of block b the rows from (8 b + w) ROWS. A PERSISTENT grid (sized from the device:
// blocks per SM times SMs, gemv_cuda::launch) walks the groups of ROWS rows warp-major: in round r,
// warp w of block b takes group b + G (w + 8 r), G blocks, so consecutive groups go to different
// blocks and every SM gets the same number of groups, give or take one, however N falls. Every
// warp runs every round (the block's barriers), those past the last group inactive.
template <int MAX_M, int ROWS, int SLICE, int DEPTH, bool PERSISTENT>
__device__ __forceinline__ void gemv_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                           float global_scale, int m, int n, int k, int x_stride, int y_stride,
                                           int y_f32) {
    GEMV_ALLOW_DEPENDENTS();
    const int tid = (int)threadIdx.x;
    const int lane = tid % kWarp;
    const int warp = tid / kWarp;
    const gemv_u64 packed_address = (gemv_u64)packed;
    Loads loads;
    loads.vector16 = (packed_address & 15u) == 0u && (k / 2) % 16 == 0;
    loads.vector8 = (packed_address & 7u) == 0u;
    loads.scales16 = (((gemv_u64)scales) & 1u) == 0u && (k / kGroup) % 2 == 0;
    // Every token row 16-byte aligned: the base, and a stride of whole 8-element vectors.
    const bool x_aligned = (((gemv_u64)x) & 15u) == 0u && x_stride % 8 == 0;
    constexpr int kWarps = kThreadsPerBlock / kWarp;
    const StridedRows token_rows{x_stride, y_stride};
    if constexpr (!PERSISTENT) {
        const int row0 = ((int)blockIdx.x * kWarps + warp) * ROWS;
        gemv_warp_rows<MAX_M, ROWS, SLICE, DEPTH>(x, packed, scales, y, y_f32 != 0, global_scale, m, n, k, token_rows,
                                                  x_aligned, loads, tid, lane, row0, true);
    } else {
        static_assert(DEPTH >= 2, "persistent grids run the ring pipeline");
        const int groups = (n + ROWS - 1) / ROWS;
        const int blocks = (int)gridDim.x;
        const int per_round = blocks * kWarps;
        const int rounds = (groups + per_round - 1) / per_round;
        for (int round = 0; round < rounds; ++round) {
            // At most groups + per_round - 1 < 2^31: N and the grid are 32-bit kernel parameters.
            const int group = (int)blockIdx.x + blocks * (warp + kWarps * round);
            const bool active = group < groups;
            // An inactive warp's rows start past N: it loads nothing and stores nothing.
            gemv_warp_rows<MAX_M, ROWS, SLICE, DEPTH>(x, packed, scales, y, y_f32 != 0, global_scale, m, n, k,
                                                      token_rows, x_aligned, loads, tid, lane,
                                                      active ? group * ROWS : n, active);
        }
    }
}

#include "w4a16_gemv_grouped.cuh"

#ifdef GEMV_DEPENDENT_LAUNCH
}  // namespace dependent_launch
#endif
#ifdef GEMV_SCALES_BY_CVT
}  // namespace scales_by_cvt
#endif
}  // namespace gemv

// The entry list, generated from gemv_core::KERNELS: name, MAX_M, rows per warp, blocks per SM
// the registers must allow, ring depth (0: the classic pipeline), persistent grid (0 or 1).
#include "kernel_table.h"

#define GEMV_DEFINE_ENTRY(name, max_m, rows, min_blocks, depth, persistent)                                      \
    GEMV_KERNEL(GEMV_ENTRY_NAME(name), gemv::kThreadsPerBlock, min_blocks)                                      \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, float global_scale, int m, int n, int k, int x_stride, int y_stride,             \
     int y_f32) {                                                                                                \
        gemv::gemv_entry<max_m, rows, gemv::SliceTokens<min_blocks>::value, depth, persistent != 0>(              \
            x, packed, scales, y, global_scale, m, n, k, x_stride, y_stride, y_f32);                             \
    }

GEMV_KERNELS(GEMV_DEFINE_ENTRY)

// The grouped entries (a routed mixture-of-experts layer), from gemv_core::GROUPED_KERNELS: name,
// tokens an expert computes at once, rows per warp, blocks per SM, ring depth.
#define GEMV_DEFINE_GROUPED_ENTRY(name, max_m, rows, min_blocks, depth)                                          \
    GEMV_KERNEL(GEMV_ENTRY_NAME(name), gemv::kThreadsPerBlock, min_blocks)                                      \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, const float* __restrict__ global_scales, int per_expert_scales,                   \
     const gemv_u32* __restrict__ routing, int experts, int pairs, int top_k, int n, int k) {                   \
        gemv::grouped_entry<max_m, rows, gemv::SliceTokens<min_blocks>::value, depth>(                            \
            x, packed, scales, y, global_scales, per_expert_scales, routing, experts, pairs, top_k, n, k);         \
    }

GEMV_GROUPED_KERNELS(GEMV_DEFINE_GROUPED_ENTRY)
