// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: X
// staged into shared memory times 2^S in the order the decoded weight pairs need, and read back.

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
        v[2 * i] = __fmul_rn(__uint_as_float(w[i] << 16), kXScale);
        v[2 * i + 1] = __fmul_rn(__uint_as_float(w[i] & 0xFFFF0000u), kXScale);
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
