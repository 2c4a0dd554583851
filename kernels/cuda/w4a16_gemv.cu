// W4A16 batched GEMV: Y[t][n] = bf16(global_scale * sum_k dequant(W)[n][k] * X[t][k]).
//
// The exact numeric contract (docs/numerics.md): 64 partial sums per output; partial l visits
// groups l, l+64, ... in order, doing a = fma(e2m1 * e4m3, x, a) term by term (explicitly fused,
// __fmaf_rn, so the emulator computes what the GPU computes); a fixed tree (d = 32, 16, ..., 1)
// adds them; one multiply by the global scale, one bf16 rounding.
//
// Mapping: one warp per weight row (two for the register-tiled rt2 variant). Lane i owns partials
// i and i + 32, so the tree's d = 32 step is an in-lane add and d = 16..1 are warp shuffles (a
// transposing tree, see gemv_rows): no shared memory, no block barrier. Each iteration a warp
// streams 64 consecutive groups (512 contiguous packed bytes, 64 scale bytes) of its row:
// coalesced weight streaming. The
// activations for a group are loaded once per lane and reused for every row the warp computes.
//
// Layout (ModelOpt NVFP4): packed[n][K/2], even k in the low nibble; scales[n][K/16] E4M3.
// Alignment: a group's 8 packed bytes start at a multiple of 8 from the packed base, and a
// group's 16 activations at a multiple of 32 bytes from the X base; vector loads are used only
// when the base pointers are aligned (checked at run time), so K % 32 != 0 and arbitrary buffer
// offsets are safe.
#include "gemv_portable.cuh"

namespace gemv {

constexpr int kWarp = 32;
constexpr int kGroup = 16;
constexpr int kPartials = 64;
// Threads per block; every launcher uses this (crates/gemv-cuda/src/launch.rs).
constexpr int kThreadsPerBlock = 128;

// E2M1 nibble -> f32, exactly, branch-free. The magnitude bits e1 e0 m go to f32 bits 24..22:
// that is the E2M1 value times 2^-126 (a normal number for e >= 1, the subnormal 2^-127 for code
// 1), so one exact multiply by 2^126 finishes it; bit 3 becomes the sign. (Exact because nvcc
// keeps subnormals unless --use_fast_math; the emulator's host does too.)
__device__ __forceinline__ float decode_e2m1(gemv_u32 nibble) {
    const gemv_u32 bits = ((nibble & 7u) << 22) | ((nibble & 8u) << 28);
    return __uint_as_float(bits) * 0x1p126f;
}

// E4M3 "fn" -> f32, exactly, with the same trick: the 7 magnitude bits at f32 bits 26..20 are
// the value times 2^-120 (subnormals m * 2^-9 land on f32 subnormals), times 2^120. 0x7F/0xFF
// are NaN.
__device__ __forceinline__ float decode_e4m3(gemv_u32 code) {
    const gemv_u32 magnitude = code & 0x7Fu;
    const gemv_u32 sign = (code & 0x80u) << 24;
    const float value = __uint_as_float((magnitude << 20) | sign) * 0x1p120f;
    return magnitude == 0x7Fu ? __uint_as_float(0x7FC00000u | sign) : value;
}

// f32 -> bf16 bits, round to nearest even; every NaN becomes 0x7FC0.
__device__ __forceinline__ gemv_u16 f32_to_bf16(float value) {
    const gemv_u32 bits = __float_as_uint(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (gemv_u16)0x7FC0u;
    return (gemv_u16)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float bf16_to_f32(gemv_u32 bits) {
    return __uint_as_float(bits << 16);
}

// The 8 packed bytes of group g of a row (16 nibbles), as two 32-bit words.
template <bool ALIGNED>
__device__ __forceinline__ void load_group_codes(const gemv_u8* row, int g, gemv_u32& lo, gemv_u32& hi) {
    const gemv_u8* p = row + 8 * (gemv_u64)g;
    if (ALIGNED) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
        lo = v.x;
        hi = v.y;
    } else {
        lo = hi = 0u;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            lo |= (gemv_u32)__ldg(p + b) << (8 * b);
            hi |= (gemv_u32)__ldg(p + 4 + b) << (8 * b);
        }
    }
}

// The 16 activations of group g of one X row, widened to f32.
template <bool ALIGNED>
__device__ __forceinline__ void load_group_x(const gemv_u16* row, int g, float (&xs)[kGroup]) {
    const gemv_u16* p = row + kGroup * (gemv_u64)g;
    if (ALIGNED) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(p + 8));
        const gemv_u32 words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            xs[2 * i] = bf16_to_f32(words[i] & 0xFFFFu);
            xs[2 * i + 1] = bf16_to_f32(words[i] >> 16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) xs[j] = bf16_to_f32(__ldg(p + j));
    }
}

// One warp computes ROWS consecutive weight rows for every t < m (m <= MAX_M). ALIGNED: the
// packed base is 8-byte and the X base 16-byte aligned, so groups load as uint2 / 2 x uint4.
template <int MAX_M, int ROWS, bool ALIGNED>
__device__ __forceinline__ void gemv_rows(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                          float global_scale, int m, int n, int k, int lane, int row0) {
    const int groups = k / kGroup;

    // acc[r][h][t]: row row0 + r, partial lane + 32 h, activation row t.
    float acc[ROWS][2][MAX_M];
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) acc[r][h][t] = 0.0f;

    for (int base = 0; base < groups; base += kPartials) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int g = base + kWarp * h + lane;
            if (g >= groups) continue;
            float ws[ROWS][kGroup];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const int row = row0 + r < n ? row0 + r : row0;  // a tail row reloads row0 and is never stored
                const gemv_u8* row_packed = packed + (gemv_u64)row * (gemv_u64)(k / 2);
                gemv_u32 lo, hi;
                load_group_codes<ALIGNED>(row_packed, g, lo, hi);
                const float scale = decode_e4m3(__ldg(scales + (gemv_u64)row * (gemv_u64)groups + g));
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    ws[r][j] = decode_e2m1(lo >> (4 * j)) * scale;
                    ws[r][8 + j] = decode_e2m1(hi >> (4 * j)) * scale;
                }
            }
#pragma unroll
            for (int t = 0; t < MAX_M; ++t) {
                if (t >= m) continue;
                float xs[kGroup];
                load_group_x<ALIGNED>(x + (gemv_u64)t * (gemv_u64)k, g, xs);
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    float a = acc[r][h][t];
#pragma unroll
                    for (int j = 0; j < kGroup; ++j) a = __fmaf_rn(ws[r][j], xs[j], a);  // the contract: fused
                    acc[r][h][t] = a;
                }
            }
        }
    }

    // Tree reduction across the warp, for all MAX_M rows at once. After the in-lane d = 32 step a
    // lane holds partial `lane` of P values (P = MAX_M rounded up to a power of two; the padding
    // is zero and never stored). At each step d the lane pair (l, l ^ d) splits its values: the
    // lower lane keeps the low half, the upper lane the high half, and each receives the
    // partner's copy of the half it keeps, so one shuffle moves two values. The sum formed,
    // a[p] + a[p + d] (or a[p + d] + a[p] on the upper lane: IEEE addition is commutative bit for
    // bit), is exactly the contract's tree step. Once one value is left, both lanes of a pair add
    // the same two operands. ~P shuffles instead of 5 P; at the end lane l holds row
    // t = l / (32 / P), replicated on the 32 / P lanes of its group.
    constexpr int P = MAX_M <= 1 ? 1 : MAX_M <= 2 ? 2 : MAX_M <= 4 ? 4 : MAX_M <= 8 ? 8 : MAX_M <= 16 ? 16 : 32;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float v[P];
#pragma unroll
        for (int t = 0; t < P; ++t) v[t] = t < MAX_M ? acc[r][0][t] + acc[r][1][t] : 0.0f;  // d = 32
        int count = P;
#pragma unroll
        for (int d = 16; d >= 1; d /= 2) {
            const bool upper = (lane & d) != 0;
            if (count > 1) {
                const int half = count / 2;
#pragma unroll
                for (int i = 0; i < P / 2; ++i) {
                    if (i >= half) break;
                    const float keep = upper ? v[half + i] : v[i];
                    const float give = upper ? v[i] : v[half + i];
                    v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, give, d);
                }
                count = half;
            } else {
                v[0] = v[0] + __shfl_xor_sync(0xFFFFFFFFu, v[0], d);
            }
        }
        constexpr int kLanesPerRow = kWarp / P;
        const int t = lane / kLanesPerRow;
        if (lane % kLanesPerRow == 0 && t < m && row0 + r < n) {
            store_global(y + (gemv_u64)t * (gemv_u64)n + (row0 + r), f32_to_bf16(v[0] * global_scale));
        }
    }
}

// Entry: picks the aligned or the byte-wise specialisation once (a uniform branch), so the hot
// loop carries no alignment tests.
template <int MAX_M, int ROWS>
__device__ __forceinline__ void gemv_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                           float global_scale, int m, int n, int k) {
    const int lane = (int)(threadIdx.x % kWarp);
    const int warp = (int)(threadIdx.x / kWarp);
    const int warps_per_block = (int)(blockDim.x / kWarp);
    const int row0 = ((int)blockIdx.x * warps_per_block + warp) * ROWS;
    if (row0 >= n) return;  // warp-uniform
    const bool aligned = (((gemv_u64)packed) & 7u) == 0u && (((gemv_u64)x) & 15u) == 0u;
    if (aligned) {
        gemv_rows<MAX_M, ROWS, true>(x, packed, scales, y, global_scale, m, n, k, lane, row0);
    } else {
        gemv_rows<MAX_M, ROWS, false>(x, packed, scales, y, global_scale, m, n, k, lane, row0);
    }
}

}  // namespace gemv

// name, MAX_M, rows per warp. The registry order of gemv_core::KERNELS.
#define GEMV_KERNELS(X)              \
    X(w4a16_gemv, 1, 1)              \
    X(w4a16_gemv_batch2, 2, 1)       \
    X(w4a16_gemv_batch3, 3, 1)       \
    X(w4a16_gemv_batch4, 4, 1)       \
    X(w4a16_gemv_batch5, 5, 1)       \
    X(w4a16_gemv_batch6, 6, 1)       \
    X(w4a16_gemv_batch7, 7, 1)       \
    X(w4a16_gemv_batch8, 8, 1)       \
    X(w4a16_gemv_batch8_rt2, 8, 2)   \
    X(w4a16_gemv_batch16, 16, 1)     \
    X(w4a16_gemv_batch32, 32, 1)

#define GEMV_DEFINE_ENTRY(name, max_m, rows)                                                                     \
    GEMV_KERNEL(name, gemv::kThreadsPerBlock)                                                                    \
    (const gemv_u16* __restrict__ x, const gemv_u8* __restrict__ packed, const gemv_u8* __restrict__ scales,     \
     gemv_u16* __restrict__ y, float global_scale, int m, int n, int k) {                                        \
        gemv::gemv_entry<max_m, rows>(x, packed, scales, y, global_scale, m, n, k);                              \
    }

GEMV_KERNELS(GEMV_DEFINE_ENTRY)
