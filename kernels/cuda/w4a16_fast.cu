// W4A16 batched GEMV on tensor cores: the fast family (sm_80 and newer).
//
// Y[t][n] = bf16(((sum_k w[n][k] * 2^-7 * x[t][k]) * 2^7) * global_scale), with the products
// and sums of each 16 x 8 x 16 tile done by mma.sync (bf16 in, f32 accumulate). Its numeric
// contract is its own (docs/numerics.md): every decoded weight is exact, the tensor core's
// summation order is the hardware's, so the result is bounded against the f64 reference rather
// than bit-equal to the exact family; and it is batch-invariant: token t's bits do not depend on
// M, on the tier or on the other tokens.
//
// Design (docs/kernels.md):
// - A block of 8 warps computes 16 weight rows (the mma's M) for up to 8 (m8) or 16 (m16) tokens
//   (the mma's N, one or two 8-column tiles). Its warps split K: warp w takes the 128-k chunks
//   w, w + 8, w + 16, ... in order, so the split depends on K alone, never on M.
// - Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes of row g and of row g + 8 per chunk (k
//   32t .. 32t + 31 of the chunk: two whole groups) and its token's 32 activations. The mma's k
//   slots are a permutation of those k, the same for A and B, so no weight or activation moves
//   between lanes: slot pair (2t, 2t+1) of step j is the lane's k (4j, 4j + 1), slot pair
//   (2t + 8, 2t + 9) its k (4j + 2, 4j + 3). The activations' registers are B as loaded.
// - Weights are decoded into bf16 pairs by bit placement (e2m1 * 2^-126; code 1 a bf16
//   subnormal) and one bf16x2 multiply by the group's scale times 2^119: the product,
//   e2m1 * e4m3 * 2^-7, has at most 6 significant bits and is exact. The scales come from a
//   table of all 256 codes each block fills once in shared memory.
// - The next chunk is loaded while one computes, and the one after it is prefetched into L2.
// - The block adds its 8 warps' partial tiles through shared memory in warp order 0..7, then
//   scales and rounds each output once.
// - A grouped launch (a routed mixture-of-experts layer, gemv_routing.cuh) runs the same tile
//   (fast_tile) over an expert's pairs, 8 or 16 at a time, each pair's token one column.
//
// Layout (ModelOpt NVFP4): packed[n][K/2], even k in the low nibble; scales[n][K/16] E4M3.
#include "gemv_portable.cuh"
#include "gemv_routing.cuh"

namespace gemv_fast {
// The build for programmatic dependent launch in its own (inline) namespace, so that the
// emulator links both builds into one library.
#ifdef GEMV_DEPENDENT_LAUNCH
inline namespace dependent_launch {
#endif

constexpr int kWarp = 32;
constexpr int kWarps = 8;
// Threads per block; every launcher uses this (crates/gemv-cuda/src/launch.rs).
constexpr int kThreadsPerBlock = kWarps * kWarp;
constexpr int kTileRows = 16;        // weight rows per block: the mma's M
constexpr int kTileTokens = 8;       // tokens per mma: its N
constexpr int kChunkK = 128;         // k per warp step: 4 lanes x 32
constexpr int kLaneK = kChunkK / 4;  // a lane's k per step: two groups
constexpr float kOutputScale = 128.0f;              // 2^7: undoes the weights' 2^-7
constexpr gemv_u32 kBf16PairTwoTo120 = 0x7B807B80u;  // bf16 (2^120, 2^120)
constexpr gemv_u32 kBf16PairTwoTo119 = 0x7B007B00u;  // bf16 (2^119, 2^119)
static_assert(kTileRows == 2 * kWarps, "the launcher's rows per warp (2) times its warps is the tile");

// The common path `cargo xtask sass` counts (GEMV_ON_COMMON_PATH, gemv_portable.cuh): 16-byte
// aligned buffers, whole chunks, every token live.

// Two E4M3 codes (c0 | c1 << 8) as a bf16 pair of value e4m3 * 2^119 (exact: at most 4
// significant bits, at most 448 * 2^119; the NaN codes 0x7F / 0xFF give NaN). Each block runs it
// once per code to fill its scale table; the loop looks codes up there.
__device__ __forceinline__ gemv_u32 scale_pair(gemv_u32 codes) {
    const gemv_u32 v = gemv_prmt(codes, 0u, 0x4140u);  // c0 in bits 0..7, c1 in bits 16..23
    const gemv_u32 magnitude = v & 0x007F007Fu;
    // Exponent and mantissa moved into bf16 place: e4m3 * 2^-120, subnormal codes (m * 2^-9)
    // landing on bf16 subnormals; magnitude 0x7F gets an all-ones exponent (NaN).
    gemv_u32 h = (magnitude << 4) | ((v & 0x00800080u) << 8);
    h |= ((magnitude + 0x00010001u) & 0x00800080u) * 0xFFu;
    h = gemv_bf16x2_mul(h, kBf16PairTwoTo120);
    return gemv_bf16x2_mul(h, kBf16PairTwoTo119);
}

// The 8 nibbles of a word (element i in bits 4i..4i+3) as bf16 pairs of value e2m1 * 2^-126:
// p[b] = (n_2b, n_2b+1), low half first: byte b's two k, the order the activations come in. A
// byte permute puts n_2b at bits 0..3 and n_2b+1 at bits 16..19 of a word that is zero elsewhere
// (selector nibble 8: the sign of a byte of `low`, always 0); times 0x1040 that puts each
// magnitude at bits 6..8 of its half and a copy of its sign at bit 15, and the mask keeps those.
__device__ __forceinline__ void e2m1_pairs(gemv_u32 q, gemv_u32 (&p)[4]) {
    const gemv_u32 low = q & 0x0F0F0F0Fu;          // n_2b in byte b
    const gemv_u32 high = (q >> 4) & 0x0F0F0F0Fu;  // n_2b+1 in byte b
#pragma unroll
    for (int b = 0; b < 4; ++b) p[b] = (gemv_prmt(low, high, 0x8480u + 0x101u * b) * 0x1040u) & 0x81C081C0u;
}

// How a block loads, chosen once from the buffers' alignment and K.
struct Loads {
    bool packed16;  // 16-byte weight loads (base 16-aligned, K/2 a multiple of 16)
    bool packed8;   // else 8-byte loads (base 8-aligned); else bytes
    bool scales2;   // the lane's two codes of a row in one 16-bit load
    bool x16;       // 16-byte activation loads (base 16-aligned)
};

// One lane's share of a chunk: 16 bytes of each of its two rows, their scale codes, and the 32
// activations of each of its tokens. k past K is zero weight, code 0 and zero activation.
template <int TILES>
struct Chunk {
    uint4 packed[2];
    gemv_u32 codes[2];
    uint4 x[TILES][4];
};

__device__ __forceinline__ uint2 load8(const gemv_u8* p, const Loads& loads) {
    if (loads.packed8) return __ldg(reinterpret_cast<const uint2*>(p));
    gemv_u32 w[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i / 4] |= (gemv_u32)__ldg(p + i) << (8 * (i % 4));
    return uint2{w[0], w[1]};
}

__device__ __forceinline__ uint4 load_x8(const gemv_u16* p, const Loads& loads) {
    if (GEMV_ON_COMMON_PATH(loads.x16, true)) return __ldg(reinterpret_cast<const uint4*>(p));
    gemv_u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (gemv_u32)__ldg(p + 2 * i) | ((gemv_u32)__ldg(p + 2 * i + 1) << 16);
    return uint4{w[0], w[1], w[2], w[3]};
}

// Loads this lane's share of the chunk whose lane k starts at `k0` (k0 + 32 <= K: whole; k0 + 16
// == K: the first group only; k0 >= K: nothing). `rows[r]` are the lane's two rows' packed
// bytes at k 0, `codes[r]` their scale codes; `xs[i]` its tokens' activations at k 0, or null
// for a token past M. On the common path every address is one base plus the lane's 32-k unit
// times a vector size (one IMAD.WIDE each).
template <int TILES>
__device__ __forceinline__ Chunk<TILES> load_chunk(const gemv_u8* const (&rows)[2], const gemv_u8* const (&codes)[2],
                                                   const gemv_u16* const (&xs)[TILES], gemv_u32 k0, int k,
                                                   const Loads& loads) {
    Chunk<TILES> c;
    gemv_poison(c);  // every field is written below; under the emulator one left unwritten reads as NaN
    const int valid = k - (int)k0;
    const gemv_u32 unit = k0 / kLaneK;  // 16 packed bytes, 2 codes and 32 activations per unit
    if (GEMV_ON_COMMON_PATH(valid >= kLaneK, true)) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (GEMV_ON_COMMON_PATH(loads.packed16, true)) {
                c.packed[r] = __ldg(reinterpret_cast<const uint4*>(rows[r]) + unit);
            } else {
                const gemv_u8* p = rows[r] + k0 / 2;
                const uint2 a = load8(p, loads);
                const uint2 b = load8(p + 8, loads);
                c.packed[r] = uint4{a.x, a.y, b.x, b.y};
            }
            if (GEMV_ON_COMMON_PATH(loads.scales2, true)) {
                c.codes[r] = __ldg(reinterpret_cast<const gemv_u16*>(codes[r]) + unit);
            } else {
                const gemv_u8* s = codes[r] + k0 / 16;
                c.codes[r] = (gemv_u32)__ldg(s) | ((gemv_u32)__ldg(s + 1) << 8);
            }
        }
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
            if (GEMV_ON_COMMON_PATH(xs[i] == nullptr, false)) {
#pragma unroll
                for (int w = 0; w < 4; ++w) c.x[i][w] = uint4{0u, 0u, 0u, 0u};
            } else if (GEMV_ON_COMMON_PATH(loads.x16, true)) {
                const uint4* p = reinterpret_cast<const uint4*>(xs[i]) + 4 * unit;
#pragma unroll
                for (int w = 0; w < 4; ++w) c.x[i][w] = __ldg(p + w);
            } else {
#pragma unroll
                for (int w = 0; w < 4; ++w) c.x[i][w] = load_x8(xs[i] + k0 + 8 * w, loads);
            }
        }
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            c.packed[r] = uint4{0u, 0u, 0u, 0u};
            c.codes[r] = 0u;
            if (valid > 0) {
                const uint2 a = load8(rows[r] + k0 / 2, loads);
                c.packed[r].x = a.x;
                c.packed[r].y = a.y;
                c.codes[r] = __ldg(codes[r] + k0 / 16);
            }
        }
#pragma unroll
        for (int i = 0; i < TILES; ++i) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                c.x[i][w] = valid > 8 * w && xs[i] != nullptr ? load_x8(xs[i] + k0 + 8 * w, loads)
                                                              : uint4{0u, 0u, 0u, 0u};
            }
        }
    }
    return c;
}

// Planted faults, for the emulator's tests only (crates/gemv-cuda-emulator/tests/emulator_fast_family.rs).
enum Fault {
    kNone,
    kWrongFragment,     // A's registers of rows g + 8 and of k 2t + 8 swapped: gate 10 must fail
    kOrderDependsOnM,   // the warps' partials added in reverse order when M > 8: gate 11 must fail
};

// The chunk's 8 mma steps into every tile's accumulators.
// `table[c]` is code c's scale as a bf16 pair (both halves equal, scale_pair).
template <int TILES, int FAULT, class Table>
__device__ __forceinline__ void compute_chunk(const Chunk<TILES>& c, const Table& table, float (&acc)[TILES][4]) {
    // scales[r][h]: row g + 8r, group 2t + h of the chunk.
    const gemv_u32 scales[2][2] = {{table[c.codes[0] & 0xFFu], table[c.codes[0] >> 8]},
                                   {table[c.codes[1] & 0xFFu], table[c.codes[1] >> 8]}};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        gemv_u32 weights[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint4& q = c.packed[r];
            e2m1_pairs(w == 0 ? q.x : w == 1 ? q.y : w == 2 ? q.z : q.w, weights[r]);
#pragma unroll
            for (int p = 0; p < 4; ++p) weights[r][p] = gemv_bf16x2_mul(weights[r][p], scales[r][w / 2]);
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int p = 2 * half;
            const bool swap = FAULT == kWrongFragment;
            const gemv_u32 a[4] = {weights[0][p], swap ? weights[0][p + 1] : weights[1][p],
                                   swap ? weights[1][p] : weights[0][p + 1], weights[1][p + 1]};
#pragma unroll
            for (int i = 0; i < TILES; ++i) {
                const uint4& v = c.x[i][w];
                const gemv_u32 b[2] = {half == 0 ? v.x : v.z, half == 0 ? v.y : v.w};
                gemv_mma_bf16_16816(acc[i], a, b, acc[i]);
            }
        }
    }
}

// Asks L2 for the packed weights of this lane's rows in the chunk whose lane k starts at `k0`
// (the scale codes, 1/9 of the bytes, share lines with the current chunk's): with the next chunk
// in registers, two chunks per warp are in flight while one computes. Past K it asks for the row's
// first bytes instead, which exist: no branch in the loop.
__device__ __forceinline__ void prefetch_chunk(const gemv_u8* const (&rows)[2], gemv_u32 k0, int k) {
    const gemv_u32 offset = ((int)k0 < k ? k0 : 0u) / 2u;
    gemv_prefetch_l2(rows[0] + offset);
    gemv_prefetch_l2(rows[1] + offset);
}

// Every E4M3 code's scale pair, decoded once per block into `table` (a lookup in the loop costs
// one shared load where the decode costs about seven instructions per code).
template <class Table>
__device__ __forceinline__ void fill_scale_table(Table& table, int tid) {
    static_assert(kThreadsPerBlock == 256, "one thread per E4M3 code fills the scale table");
    table[tid] = scale_pair((gemv_u32)tid | ((gemv_u32)tid << 8));
    __syncthreads();
}

// One block's rows row0 .. row0 + 15 of one matrix for its tokens 0 .. m - 1 (m <= 8 * TILES), X
// and Y rows where `token_rows` puts them (x16: every token row 16-byte aligned), the scale
// table filled. Ends with the block's partials read: a caller that runs it again first waits at a
// barrier.
template <int TILES, int FAULT, class TokenRows, class Table>
__device__ __forceinline__ void fast_tile(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                          bool y_f32, float global_scale, int m, int n, int k,
                                          const TokenRows& token_rows, bool x16, const Table& scale_table, int row0) {
    const int tid = (int)threadIdx.x;
    const int warp = tid / kWarp;
    const int lane = tid % kWarp;
    const int g = lane / 4;
    const int t = lane % 4;
    Loads loads;
    loads.packed16 = (((gemv_u64)packed) & 15u) == 0u && (k / 2) % 16 == 0;
    loads.packed8 = (((gemv_u64)packed) & 7u) == 0u;
    loads.scales2 = (((gemv_u64)scales) & 1u) == 0u && (k / 16) % 2 == 0;
    loads.x16 = x16;
    const int groups = k / 16;
    // The lane's rows (past N: row N - 1, loaded and never stored) and tokens (past M: none).
    const gemv_u8* rows[2];
    const gemv_u8* codes[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + 8 * r < n ? row0 + g + 8 * r : n - 1;
        rows[r] = packed + (gemv_u64)row * (gemv_u64)(k / 2);
        codes[r] = scales + (gemv_u64)row * (gemv_u64)groups;
    }
    const gemv_u16* xs[TILES];
#pragma unroll
    for (int i = 0; i < TILES; ++i) {
        const int token = g + kTileTokens * i;
        xs[i] = token < m ? token_rows.x_row(x, token) : nullptr;
    }
    float acc[TILES][4];
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    // Chunks warp, warp + 8, ...; the next chunk's loads are in flight while one computes.
    const gemv_u32 step = kWarps * kChunkK;
    gemv_u32 k0 = (gemv_u32)(warp * kChunkK + kLaneK * t);  // this lane's first k of the chunk
    const int k_lane = k + kLaneK * t;  // k0 + step < k_lane: the warp's next chunk starts before K
#ifdef GEMV_DEPENDENT_LAUNCH
    // The first two chunks' weights head for L2 while the previous kernel finishes.
    prefetch_chunk(rows, k0, k);
    prefetch_chunk(rows, k0 + step, k);
#endif
    GEMV_AWAIT_INPUTS();
    if (warp * kChunkK < k) {
        Chunk<TILES> a = load_chunk<TILES>(rows, codes, xs, k0, k, loads);
        for (;;) {
            const bool more = (int)(k0 + step) < k_lane;
            Chunk<TILES> b;
            if (more) b = load_chunk<TILES>(rows, codes, xs, k0 + step, k, loads);
            prefetch_chunk(rows, k0 + 2 * step, k);
            compute_chunk<TILES, FAULT>(a, scale_table, acc);
            if (!more) break;
            k0 += step;
            const bool again = (int)(k0 + step) < k_lane;
            if (again) a = load_chunk<TILES>(rows, codes, xs, k0 + step, k, loads);
            prefetch_chunk(rows, k0 + 2 * step, k);
            compute_chunk<TILES, FAULT>(b, scale_table, acc);
            if (!again) break;
            k0 += step;
        }
    }
    // The 8 warps' partial tiles, added in warp order: [warp][tile][element][lane].
    GEMV_SHARED(float, partials, kWarps * TILES * 4 * kWarp);
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) partials[((warp * TILES + i) * 4 + e) * kWarp + lane] = acc[i][e];
    __syncthreads();
    // Thread tid writes row tid % 16 of token tid / 16.
    const int r = tid % kTileRows;
    const int token = tid / kTileRows;
    if (token >= kTileTokens * TILES) return;
    const int tile = token / kTileTokens;
    const int column = token % kTileTokens;
    const int source_lane = (r % 8) * 4 + column / 2;
    const int element = (r >= 8 ? 2 : 0) + column % 2;
    const bool reversed = FAULT == kOrderDependsOnM && m > kTileTokens;
    float total = partials[(((reversed ? kWarps - 1 : 0) * TILES + tile) * 4 + element) * kWarp + source_lane];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) {
        const int w = reversed ? kWarps - 1 - i : i;
        total = __fadd_rn(total, partials[((w * TILES + tile) * 4 + element) * kWarp + source_lane]);
    }
    if (token < m && row0 + r < n) {
        gemv_routing::store_output(y, y_f32, token_rows, token, row0 + r,
                                   __fmul_rn(__fmul_rn(total, kOutputScale), global_scale));
    }
}

// A single launch's block: rows 16 b .. 16 b + 15 for tokens 0 .. m - 1 (m <= 8 * TILES).
template <int TILES, int FAULT>
__device__ __forceinline__ void fast_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                           float global_scale, int m, int n, int k, int x_stride, int y_stride,
                                           int y_f32) {
    GEMV_ALLOW_DEPENDENTS();
    GEMV_SHARED(gemv_u32, scale_table, 256);
    fill_scale_table(scale_table, (int)threadIdx.x);
    const bool x16 = (((gemv_u64)x) & 15u) == 0u && x_stride % 8 == 0;  // every token row 16-byte aligned
    fast_tile<TILES, FAULT>(x, packed, scales, y, y_f32 != 0, global_scale, m, n, k,
                            gemv_routing::StridedRows{x_stride, y_stride}, x16, scale_table,
                            (int)blockIdx.x * kTileRows);
}

// A grouped launch's block (gemv_routing.cuh): 16 rows of one expert for a chunk of up to 8 * TILES
// of the pairs routed to it. Each pair's token sits in one column of the tile, whose bits depend on
// that column's activations alone: every output is the expert's single launch's, bit for bit.
template <int TILES>
__device__ __forceinline__ void fast_grouped_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales,
                                                   gemv_u16* y, const float* global_scales, int per_expert_scales,
                                                   const gemv_u32* routing, int experts, int pairs, int top_k, int n,
                                                   int k) {
    // The routing says which weights to read, so nothing is read before the previous kernel ends.
    GEMV_ALLOW_DEPENDENTS();
    GEMV_AWAIT_INPUTS();
    const int tid = (int)threadIdx.x;
    const int row_blocks = (n + kTileRows - 1) / kTileRows;
    const int pair = (int)blockIdx.x / row_blocks;
    const int row0 = ((int)blockIdx.x % row_blocks) * kTileRows;
    GEMV_SHARED(int, tokens, gemv_routing::kMaxChunk);
    GEMV_SHARED(int, pair_rows, gemv_routing::kMaxChunk);
    gemv_u32 expert;
    const int m = gemv_routing::route_block<kThreadsPerBlock, kTileTokens * TILES>(
        routing, experts, pairs, top_k, pair, y, n, row0, kTileRows, tokens, pair_rows, tid, expert);
    if (m == 0) return;
    GEMV_SHARED(gemv_u32, scale_table, 256);
    fill_scale_table(scale_table, tid);
    const gemv_u64 matrix = (gemv_u64)expert * (gemv_u64)n * (gemv_u64)k;
    const float global_scale = __ldg(global_scales + (per_expert_scales ? expert : 0u));
    const bool x16 = (((gemv_u64)x) & 15u) == 0u && k % 8 == 0;
    fast_tile<TILES, kNone>(x, packed + matrix / 2, scales + matrix / 16, y, false, global_scale, m, n, k,
                            gemv_routing::GatheredRows{&tokens, &pair_rows, k, n}, x16, scale_table, row0);
}

#ifdef GEMV_DEPENDENT_LAUNCH
}  // namespace dependent_launch
#endif
}  // namespace gemv_fast

// The entry list, generated from gemv_core::KERNELS: name, tiles of 8 tokens, rows per warp,
// blocks per SM the registers must allow.
#include "kernel_table.h"

#define GEMV_DEFINE_FAST_ENTRY(name, tiles, rows, min_blocks)                                                    \
    GEMV_KERNEL(GEMV_ENTRY_NAME(name), gemv_fast::kThreadsPerBlock, min_blocks)                                  \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, float global_scale, int m, int n, int k, int x_stride, int y_stride,             \
     int y_f32) {                                                                                                \
        gemv_fast::fast_entry<tiles, gemv_fast::kNone>(x, packed, scales, y, global_scale, m, n, k, x_stride,     \
                                                       y_stride, y_f32);                                         \
    }

GEMV_FAST_KERNELS(GEMV_DEFINE_FAST_ENTRY)

// The grouped entries (a routed mixture-of-experts layer), from gemv_core::GROUPED_KERNELS: name,
// tiles of 8 tokens, rows per warp, blocks per SM the registers must allow.
#define GEMV_DEFINE_FAST_GROUPED_ENTRY(name, tiles, rows, min_blocks)                                            \
    GEMV_KERNEL(GEMV_ENTRY_NAME(name), gemv_fast::kThreadsPerBlock, min_blocks)                                  \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, const float* __restrict__ global_scales, int per_expert_scales,                   \
     const gemv_u32* __restrict__ routing, int experts, int pairs, int top_k, int n, int k) {                   \
        gemv_fast::fast_grouped_entry<tiles>(x, packed, scales, y, global_scales, per_expert_scales, routing,     \
                                             experts, pairs, top_k, n, k);                                       \
    }

GEMV_FAST_GROUPED_KERNELS(GEMV_DEFINE_FAST_GROUPED_ENTRY)
