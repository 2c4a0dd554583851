// W4A16 batched GEMV: Y[t][n] = bf16(global_scale * sum_k dequant(W)[n][k] * X[t][k]).
//
// The exact numeric contract (docs/numerics.md): 64 partial sums per output; partial l visits
// groups l, l+64, ... in order, doing a = fma(e2m1 * e4m3, x, a) term by term (explicitly fused,
// __fmaf_rn, so the emulator computes what the GPU computes); a fixed tree (d = 32, 16, ..., 1)
// adds them; one multiply by the global scale, one bf16 rounding.
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

namespace gemv {
#ifdef GEMV_SCALES_BY_CVT
// Its own (inline) namespace, so that the emulator links both builds into one library.
inline namespace scales_by_cvt {
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

// The 8 nibbles of a word (element i in bits 4i..4i+3) as binary16 pairs of value e2m1 * 2^-14:
// p[0] = (n0, n4), p[1] = (n1, n5), p[2] = (n2, n6), p[3] = (n3, n7) (low half first). The high
// byte of such a binary16 is [s 0 0 0 e1 e0 m 0] and its low byte zero.
__device__ __forceinline__ void e2m1_pairs(gemv_u32 q, gemv_u32 (&p)[4]) {
    const gemv_u32 odd = (q & 0x80808080u) | ((q >> 3) & 0x0E0E0E0Eu);          // n1, n3, n5, n7
    const gemv_u32 even = ((q << 4) & 0x80808080u) | ((q << 1) & 0x0E0E0E0Eu);  // n0, n2, n4, n6
    p[0] = gemv_prmt(even, 0u, 0x2404u);  // bytes 1 and 3 from even bytes 0 and 2, zeros elsewhere
    p[1] = gemv_prmt(odd, 0u, 0x2404u);
    p[2] = gemv_prmt(even, 0u, 0x3414u);
    p[3] = gemv_prmt(odd, 0u, 0x3414u);
}

// The lane's two E4M3 scale codes (c0 | c1 << 8) as binary16 pairs (s, s) with value e4m3 * 2^7
// (exact, at most 57344; the NaN codes 0x7F/0xFF give NaN). Each block runs it once per code to
// fill its scale table (ScaleTable); the passes look codes up there.
__device__ __forceinline__ void scale_pairs(gemv_u32 codes, gemv_u32& s0, gemv_u32& s1) {
    const gemv_u32 v = gemv_prmt(codes, 0u, 0x4140u);  // c0 in bits 0..7, c1 in bits 16..23
    const gemv_u32 magnitude = v & 0x007F007Fu;
    // Exponent and mantissa moved into binary16 place: the value is e4m3 * 2^-8, subnormal codes
    // (m * 2^-9) landing on binary16 subnormals.
    gemv_u32 h = (magnitude << 7) | ((v & 0x00800080u) << 8);
    h |= ((magnitude + 0x00010001u) & 0x00800080u) << 7;  // magnitude 0x7F: exponent 31, a NaN
    h = gemv_hmul2(h, kHalfPairTwoTo15);
    s0 = gemv_prmt(h, 0u, 0x1010u);
    s1 = gemv_prmt(h, 0u, 0x3232u);
}

// Every E4M3 code's binary16 pair (scale_pairs), in shared memory: a lookup is one shared load
// where decoding a code costs about five instructions, for each row of every pass. The cvt build
// declares it and never fills or reads it.
typedef GemvShared<gemv_u32, 256> ScaleTable;

// A row's two scales of a pass as word_weights multiplies by them. Table build: pair[h] is
// (s_h, s_h), e4m3 * 2^7 (two shared loads and their addresses per row and pass); cvt build:
// both are (s_0, s_1), the plain e4m3 values (one cvt), and each product takes its half as a
// broadcast operand (ptxas folds it into HMUL2's operand selector).
struct RowScales {
    gemv_u32 pair[2];
};

__device__ __forceinline__ RowScales row_scales(const ScaleTable& table, gemv_u32 codes) {
#ifdef GEMV_SCALES_BY_CVT
    (void)table;
    const gemv_u32 both = gemv_e4m3x2_to_f16x2(codes);
    return RowScales{{both, both}};
#else
    return RowScales{{table[codes & 0xFFu], table[codes >> 8]}};
#endif
}

// A binary16 pair times group h's scale (h = 0, 1), each product rounded once: exact here.
__device__ __forceinline__ gemv_u32 scale_pair(gemv_u32 pair, gemv_u32 scale, int h) {
#ifdef GEMV_SCALES_BY_CVT
    return h == 0 ? gemv_hmul2_by_lo(pair, scale) : gemv_hmul2_by_hi(pair, scale);
#else
    (void)h;
    return gemv_hmul2(pair, scale);
#endif
}

// A row's share of one pass for this lane: its two groups' 32 nibbles and two scale codes.
struct PassWeights {
    uint4 packed;
    gemv_u32 codes;
};

// How a block loads weights, chosen once from the buffers' alignment and K.
struct Loads {
    bool vector16;  // packed rows 16-byte aligned: one 128-bit load per row and pass
    bool vector8;   // packed rows 8-byte aligned: two 64-bit loads
    bool scales16;  // scale rows 2-byte aligned: the lane's two codes in one 16-bit load
};

// Where a warp's rows are read: the first row's packed and scale bytes at this lane's first group
// of the first pass, and each row's current pass from there (rows past N repeat row N - 1; the
// warp's rows are consecutive, so the units fit 32 bits). Advanced one pass at a time.
template <int ROWS>
struct RowCursor {
    const gemv_u8* packed;
    const gemv_u8* scales;
    // Each row's offset from the first in 8-byte units of packed (K/2 is a multiple of 8), which
    // is also its scale offset in bytes: both addresses are one wide multiply-add from it.
    gemv_u32 unit[ROWS];
    int group;              // this lane's first group of the pass
};

__device__ __forceinline__ uint2 load_group(const gemv_u8* p, bool vector) {
    if (vector) return __ldg(reinterpret_cast<const uint2*>(p));
    gemv_u32 w[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i / 4] |= (gemv_u32)__ldg(p + i) << (8 * (i % 4));
    return uint2{w[0], w[1]};
}

// Row r's share of the cursor's pass; groups past the row's end (the last, partial pass) are zero
// weights with scale code 0.
template <int ROWS>
__device__ __forceinline__ PassWeights load_pass(const RowCursor<ROWS>& rows, int r, int groups, const Loads& loads) {
    const gemv_u8* packed = rows.packed + (gemv_u64)rows.unit[r] * 8u;
    const gemv_u8* scales = rows.scales + (gemv_u64)rows.unit[r];
    PassWeights w;
    gemv_poison(w);  // every field is written below; under the emulator one left unwritten reads as NaN
    if (GEMV_ON_COMMON_PATH(rows.group + 1 < groups, true)) {
        if (GEMV_ON_COMMON_PATH(loads.vector16, true)) {
            w.packed = __ldg(reinterpret_cast<const uint4*>(packed));
        } else {
            const uint2 a = load_group(packed, loads.vector8);
            const uint2 b = load_group(packed + 8, loads.vector8);
            w.packed = uint4{a.x, a.y, b.x, b.y};
        }
        if (GEMV_ON_COMMON_PATH(loads.scales16, true)) {
            w.codes = __ldg(reinterpret_cast<const gemv_u16*>(scales));
        } else {
            w.codes = (gemv_u32)__ldg(scales) | ((gemv_u32)__ldg(scales + 1) << 8);
        }
    } else {
        w.packed = uint4{0u, 0u, 0u, 0u};
        w.codes = 0u;
        if (rows.group < groups) {
            const uint2 a = load_group(packed, loads.vector8);
            w.packed.x = a.x;
            w.packed.y = a.y;
            w.codes = __ldg(scales);
        }
    }
    return w;
}

// Loads the cursor's pass of every row into `w`, prefetches the pass after it into L2 (so two
// passes of weights are in flight per warp while one computes, at no register cost), and moves
// the cursor on.
template <int ROWS>
__device__ __forceinline__ void load_all(RowCursor<ROWS>& rows, int groups, const Loads& loads,
                                         PassWeights (&w)[ROWS]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = load_pass(rows, r, groups, loads);
    if (rows.group + kPartials < groups) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            gemv_prefetch_l2(rows.packed + (gemv_u64)rows.unit[r] * 8u + 8 * kPartials);
            gemv_prefetch_l2(rows.scales + (gemv_u64)rows.unit[r] + kPartials);
        }
    }
    // The units move, the bases stay: a 32-bit add per row where moving the two 64-bit bases
    // cost four instructions and let ptxas keep a 64-bit address per row (4 fewer per pass).
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rows.unit[r] += kPartials;
    rows.group += kPartials;
}

// Shared-memory order of the staged activations: each 8-k chunk [x0..x7] is stored as
// [x0 x4 x1 x5 x2 x6 x3 x7] (the pair order of e2m1_pairs), lane i's 32 k at kLaneStride floats.
// Thread tid stages chunk tid % 128 of token tid / 128 and of every second token after it.
__device__ __forceinline__ int staged_vector(int tid, int token) {
    static_assert(kTokenStride % 4 == 0 && kLaneStride % 4 == 0, "whole float4 slots");
    const int chunk = tid % kChunks;
    const int slot = (chunk / 4) * kLaneStride + (chunk % 4) * 8;
    // In float4s; the slot and the stride are multiples of 4 (a sum divided by 4 would cost a
    // signed division's three instructions).
    return token * (kTokenStride / 4) + slot / 4;
}

// Where this thread stages X, advanced one pass at a time. With HELD (kernels whose one slice holds
// every token) `x` is the chunk of token tid / 128 and the float4 is kept: a pass's staging costs
// one wide multiply-add per step. Otherwise (16 and 32 tokens, whose accumulators fill the
// registers) `x` is token 0's chunk and the rest is recomputed per slice.
struct Stager {
    const gemv_u16* x;
    int token;   // HELD: tid / 128
    int vector;  // HELD: staged_vector(tid, token)
    int steps;   // HELD: the steps of a pass with a token for this thread
};

template <bool HELD>
__device__ __forceinline__ Stager make_stager(const gemv_u16* x, int tid, int x_stride, int m) {
    constexpr int kTokensPerStep = kThreadsPerBlock / kChunks;
    Stager s;
    s.token = tid / kChunks;
    s.steps = m > s.token ? (m - s.token + kTokensPerStep - 1) / kTokensPerStep : 0;
    s.vector = staged_vector(tid, s.token);
    s.x = x + 8 * (tid % kChunks) + (HELD ? (gemv_u64)s.token * (gemv_u64)x_stride : 0u);
    return s;
}

// Stages one chunk (8 k of one token, from `p`) at float4 `vector` of `xs` as f32 times 2^S; k past
// K (a partial pass) is zero. The sm_89 build scales bf16 pairs (fma.rn.bf16x2, sm_80+: two
// products per instruction, exact, subnormals kept, infinity where x * 2^S overflows as in f32),
// the sm_75 build each f32.
template <int SLICE_TOKENS>
__device__ __forceinline__ void stage_chunk(GemvShared<float, SLICE_TOKENS * kTokenStride>& xs, const gemv_u16* p,
                                            bool x_aligned, bool chunk_in_k, int vector) {
    gemv_u32 w[4] = {0u, 0u, 0u, 0u};
    if (GEMV_ON_COMMON_PATH(chunk_in_k, true)) {
        if (GEMV_ON_COMMON_PATH(x_aligned, true)) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
            w[0] = v.x;
            w[1] = v.y;
            w[2] = v.z;
            w[3] = v.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = (gemv_u32)__ldg(p + 2 * i) | ((gemv_u32)__ldg(p + 2 * i + 1) << 16);
        }
    }
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#ifdef GEMV_SCALES_BY_CVT
        const gemv_u32 scaled = gemv_bf16x2_mul(w[i], kBf16PairXScale);
        v[2 * i] = __uint_as_float(scaled << 16);
        v[2 * i + 1] = __uint_as_float(scaled & 0xFFFF0000u);
#else
        v[2 * i] = __uint_as_float(w[i] << 16) * kXScale;
        v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u) * kXScale;
#endif
    }
    shared_store<float4>(xs, vector, float4{v[0], v[4], v[1], v[5]});
    shared_store<float4>(xs, vector + 1, float4{v[2], v[6], v[3], v[7]});
}

// Stages tokens t0 .. min(t0 + SLICE_TOKENS, m) of one pass into `xs` as f32 times 2^S: the
// block's 256 threads cover two tokens per step, each step a thread's chunk of one token; with
// HELD (see Stager) the steps (at most four) are unrolled, otherwise a loop.
template <int SLICE_TOKENS, bool HELD>
__device__ __forceinline__ void stage_slice(GemvShared<float, SLICE_TOKENS * kTokenStride>& xs, const Stager& s,
                                            int x_stride, bool x_aligned, bool chunk_in_k, int t0, int m) {
    constexpr int kTokensPerStep = kThreadsPerBlock / kChunks;
    constexpr int kSteps = (SLICE_TOKENS + kTokensPerStep - 1) / kTokensPerStep;
    if (HELD) {
#pragma unroll
        for (int step = 0; step < kSteps; ++step) {
            if (step >= s.steps) break;
            const gemv_u16* p = s.x + (long long)x_stride * (step * kTokensPerStep);
            const int vector = s.vector + step * kTokensPerStep * (kTokenStride / 4);
            stage_chunk<SLICE_TOKENS>(xs, p, x_aligned, chunk_in_k, vector);
        }
    } else {
        const int tokens = m - t0 < SLICE_TOKENS ? m - t0 : SLICE_TOKENS;
        const int tid = (int)threadIdx.x;
#pragma unroll 1
        for (int t = tid / kChunks; t < tokens; t += kTokensPerStep) {
            stage_chunk<SLICE_TOKENS>(xs, s.x + (gemv_u64)(t0 + t) * (gemv_u64)x_stride, x_aligned, chunk_in_k,
                                      staged_vector(tid, t));
        }
    }
}

// The 8 weights of one word of group h of a row as f32, e2m1 * e4m3 * 2^-S, in element order
// 0..7 (exact: f16 products of at most 6 significant bits).
__device__ __forceinline__ void word_weights(gemv_u32 q, gemv_u32 scale, int h, float (&wf)[8]) {
    gemv_u32 pairs[4];
    e2m1_pairs(q, pairs);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const gemv_u32 product = scale_pair(pairs[i], scale, h);
        wf[i] = gemv_half_lo(product);
        wf[i + 4] = gemv_half_hi(product);
    }
}

// The 8 activations of one word of token t, from the staged order [x0 x4 x1 x5 x2 x6 x3 x7].
template <int SLICE_TOKENS>
__device__ __forceinline__ void word_activations(const GemvShared<float, SLICE_TOKENS * kTokenStride>& xs, int t,
                                                 int lane_vector, int word, float (&xv)[8]) {
    // In float4s: token t's stride, the lane's 32 k, the word's two float4s.
    const int vector = t * (kTokenStride / 4) + lane_vector + 2 * word;
    const float4 a = shared_load<float4>(xs, vector);
    const float4 b = shared_load<float4>(xs, vector + 1);
    xv[0] = a.x;
    xv[1] = a.z;
    xv[2] = b.x;
    xv[3] = b.z;
    xv[4] = a.y;
    xv[5] = a.w;
    xv[6] = b.y;
    xv[7] = b.w;
}

__device__ __forceinline__ gemv_u32 word_of(const PassWeights& w, int h, int word) {
    return h == 0 ? (word == 0 ? w.packed.x : w.packed.y) : (word == 0 ? w.packed.z : w.packed.w);
}

// Fuses one staged slice (X times 2^S) into the accumulators of every row of the warp, with
// weights e2m1 * e4m3 * 2^-S. Each 8-element word is decoded once per row and its activations loaded once
// per token (two 128-bit shared loads), whichever of the two is fewer held in registers while
// the other is streamed; elements run in order j = 0..15 within a group, as the contract's
// chain requires.
template <int MAX_M, int ROWS, int SLICE_TOKENS, bool FULL>
__device__ __forceinline__ void compute_slice(const PassWeights (&w)[ROWS], const ScaleTable& table,
                                              const GemvShared<float, SLICE_TOKENS * kTokenStride>& xs, int t0,
                                              int m, int lane, float (&acc)[ROWS][2][MAX_M]) {
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
                        word_activations<SLICE_TOKENS>(xs, t, lane_vector, 2 * h + word, xv[t]);
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
                    word_activations<SLICE_TOKENS>(xs, t, lane_vector, 2 * h + word, xv);
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
                v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, give, d);
            }
            count = half;
        } else {
            v[0] = v[0] + __shfl_xor_sync(0xFFFFFFFFu, v[0], d);
            v[1] = v[1] + __shfl_xor_sync(0xFFFFFFFFu, v[1], d);
        }
    }
    return v[0] + v[1];
}

// Whether this lane stores the output it holds (one lane per output, live rows and tokens).
template <int MAX_M, int ROWS>
__device__ __forceinline__ bool stores(int lane, int m, int n, int row0) {
    const int o = lane / Tree<MAX_M, ROWS>::kLanesPerOutput;
    return lane % Tree<MAX_M, ROWS>::kLanesPerOutput == 0 && o < Tree<MAX_M, ROWS>::kOutputs && o % MAX_M < m &&
           row0 + o / MAX_M < n;
}

template <int MAX_M, int ROWS>
__device__ __forceinline__ void store(float total, gemv_u16* y, float global_scale, int y_stride, int lane, int row0) {
    const int o = lane / Tree<MAX_M, ROWS>::kLanesPerOutput;
    store_global(y + (gemv_u64)(o % MAX_M) * (gemv_u64)y_stride + (row0 + o / MAX_M),
                 gemv_f32_to_bf16(total * global_scale));
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
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) acc[r][h][t] = 0.0f;
    // Rows past N (the last warps of the last block) repeat row N - 1, the first row included.
    const int first = row0 < n ? row0 : n - 1;
    RowCursor<ROWS> rows;
    rows.group = 2 * lane;
    rows.packed = packed + (gemv_u64)first * (gemv_u64)(k / 2) + 8 * rows.group;
    rows.scales = scales + (gemv_u64)first * (gemv_u64)groups + rows.group;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + r < n ? row0 + r : n - 1;
        rows.unit[r] = (gemv_u32)(row - first) * (gemv_u32)(k / 16);
    }
    // This thread's staging, advanced one pass at a time.
    const int chunk = tid % kChunks;
    Stager stager = make_stager<Held<MAX_M, SLICE>::value>(x, tid, x_stride, m);
    // The scale table, one code per thread; the first pass's staging barrier orders it before
    // any lookup.
    GEMV_SHARED(gemv_u32, scale_table, 256);
    static_assert(kThreadsPerBlock == 256, "one thread per E4M3 code fills the scale table");
#ifndef GEMV_SCALES_BY_CVT
    {
        gemv_u32 pair, unused;
        scale_pairs((gemv_u32)tid, pair, unused);
        scale_table[tid] = pair;
    }
#endif
    // Two weight buffers alternate: the next pass's loads are in flight while the current pass
    // computes, and nothing is copied between them.
    PassWeights a[ROWS], b[ROWS];
    load_all(rows, groups, loads, a);
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

// E2M1 nibble -> f32, exactly: the magnitude bits at f32 bits 24..22 are the value times 2^-126
// (code 1 the subnormal 2^-127), so one exact multiply by 2^126 finishes it; bit 3 is the sign.
__device__ __forceinline__ float e2m1_f32(gemv_u32 nibble) {
    return __uint_as_float(((nibble & 7u) << 22) | ((nibble & 8u) << 28)) * 0x1p126f;
}

// E4M3 "fn" -> f32, exactly, with the same trick (subnormals land on f32 subnormals); 0x7F/0xFF
// are NaN.
__device__ __forceinline__ float e4m3_f32(gemv_u32 code) {
    const gemv_u32 magnitude = code & 0x7Fu;
    const gemv_u32 sign = (code & 0x80u) << 24;
    const float value = __uint_as_float((magnitude << 20) | sign) * 0x1p120f;
    return magnitude == 0x7Fu ? __uint_as_float(0x7FC00000u | sign) : value;
}

// The contract computed plainly, for the rare blocks where X staged times 2^S overflowed: the
// same lane mapping (lane i, partials 2i and 2i+1), weights decoded to f32 one by one, X read
// from global memory. No shared memory, no barrier; small in registers and code.
template <int MAX_M, int ROWS>
__device__ __noinline__ float gemv_rows_plain(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, int m,
                                              int n, int k, int x_stride, int lane, int row0) {
    const int groups = k / kGroup;
    float acc[ROWS][2][MAX_M];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) acc[r][h][t] = 0.0f;
    for (int pass = 0; pass * kPartials < groups; ++pass) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int g = pass * kPartials + 2 * lane + h;
            if (g >= groups) continue;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const gemv_u64 row = (gemv_u64)(row0 + r < n ? row0 + r : n - 1);
                const gemv_u8* codes = packed + row * (gemv_u64)(k / 2) + 8 * (gemv_u64)g;
                const float scale = e4m3_f32(__ldg(scales + row * (gemv_u64)groups + g));
#pragma unroll 1
                for (int t = 0; t < m && t < MAX_M; ++t) {
                    const gemv_u16* xs = x + (gemv_u64)t * (gemv_u64)x_stride + kGroup * (gemv_u64)g;
                    float sum = 0.0f;
#pragma unroll
                    for (int tt = 0; tt < MAX_M; ++tt) sum = tt == t ? acc[r][h][tt] : sum;
#pragma unroll
                    for (int j = 0; j < kGroup; ++j) {
                        const gemv_u32 byte = __ldg(codes + j / 2);
                        const float ws = e2m1_f32(j % 2 == 0 ? byte & 0xFu : byte >> 4) * scale;
                        sum = __fmaf_rn(ws, __uint_as_float((gemv_u32)__ldg(xs + j) << 16), sum);
                    }
#pragma unroll
                    for (int tt = 0; tt < MAX_M; ++tt) acc[r][h][tt] = tt == t ? sum : acc[r][h][tt];
                }
            }
        }
    }
    return reduce<MAX_M, ROWS>(acc, lane);
}

// Entry: reads the alignments once; the passes then branch on them uniformly.
template <int MAX_M, int ROWS, int SLICE>
__device__ __forceinline__ void gemv_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                           float global_scale, int m, int n, int k, int x_stride, int y_stride) {
    const int tid = (int)threadIdx.x;
    const int lane = tid % kWarp;
    const int row0 = ((int)blockIdx.x * (kThreadsPerBlock / kWarp) + tid / kWarp) * ROWS;
    const gemv_u64 packed_address = (gemv_u64)packed;
    Loads loads;
    loads.vector16 = (packed_address & 15u) == 0u && (k / 2) % 16 == 0;
    loads.vector8 = (packed_address & 7u) == 0u;
    loads.scales16 = (((gemv_u64)scales) & 1u) == 0u && (k / kGroup) % 2 == 0;
    // Every token row 16-byte aligned: the base, and a stride of whole 8-element vectors.
    const bool x_aligned = (((gemv_u64)x) & 15u) == 0u && x_stride % 8 == 0;
    // X staged times 2^S is exact unless some |x| >= 2^(128 - S) overflows it; then an output of the
    // block is infinite or NaN (the overflowed x meets a weight in every output that reads it).
    // Only then does the block run again on the plain path: the same bits, slower, on inputs no
    // model produces. Outputs that are infinite or NaN anyway take the same detour.
    float total = gemv_rows<MAX_M, ROWS, SLICE>(x, packed, scales, m, n, k, x_stride, x_aligned, loads, tid, lane, row0);
    const bool mine = stores<MAX_M, ROWS>(lane, m, n, row0);
    const bool finite = (__float_as_uint(total) & 0x7F800000u) != 0x7F800000u;
    const int suspect = __syncthreads_or(mine && !finite);
    if (GEMV_ON_COMMON_PATH(suspect, 0)) {
        if (tid == 0) gemv_note_fallback();
        total = gemv_rows_plain<MAX_M, ROWS>(x, packed, scales, m, n, k, x_stride, lane, row0);
    }
    if (mine) store<MAX_M, ROWS>(total, y, global_scale, y_stride, lane, row0);
}

#ifdef GEMV_SCALES_BY_CVT
}  // namespace scales_by_cvt
#endif
}  // namespace gemv

// The entry list, generated from gemv_core::KERNELS: name, MAX_M, rows per warp, blocks per SM
// the registers must allow.
#include "kernel_table.h"

#define GEMV_DEFINE_ENTRY(name, max_m, rows, min_blocks)                                                         \
    GEMV_KERNEL(GEMV_ENTRY_NAME(name), gemv::kThreadsPerBlock, min_blocks)                                      \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, float global_scale, int m, int n, int k, int x_stride, int y_stride) {            \
        gemv::gemv_entry<max_m, rows, gemv::SliceTokens<min_blocks>::value>(x, packed, scales, y, global_scale, m, n, \
                                                                               k, x_stride, y_stride);           \
    }

GEMV_KERNELS(GEMV_DEFINE_ENTRY)
