// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: the ring
// pipeline, the classic one's alternative for streaming at memory speed (docs/kernels.md).
//
// The classic pipeline stages X per pass (two block barriers a pass) and keeps one pass of weights
// ahead in registers, so the block's warps move in lockstep and the bytes in flight drain at every
// barrier. The ring pipeline keeps DEPTH passes of a warp's weights in registers (DEPTH - 1 in
// flight while one computes, streaming loads that allocate no L1 line) and stages X for a segment
// of several passes at once (two barriers a segment), so between barriers each warp streams at its
// own pace. The arithmetic, the lane mapping and the tree are the classic kernel's: the same bits.

// One segment of staged X: 8 token-passes (36 KB of shared memory at 4.5 KB each).
template <int MAX_M>
struct Segment {
    static constexpr int kPasses = MAX_M >= 8 ? 1 : 8 / MAX_M;
    static constexpr int kFloats = kPasses * MAX_M * kTokenStride;
};

// Stages one segment of X, times 2^S: SEG passes from k0 of the block's tokens (token t's row at
// rows.x_row(x, t)), pass s of token t at token slot s * MAX_M + t of `xs`. The block's 256 threads cover two (pass, token) slots per
// step, a thread one chunk of a slot; k past K is zero and tokens past m are left unwritten
// (compute_slice skips them).
template <int MAX_M, int SEG, class Rows>
__device__ __forceinline__ void stage_segment(GemvShared<float, SEG * MAX_M * kTokenStride>& xs, const gemv_u16* x,
                                              const Rows& token_rows, bool x_aligned, int k, int k0, int m, int tid) {
    constexpr int kSlots = SEG * MAX_M;
    constexpr int kSlotsPerStep = kThreadsPerBlock / kChunks;
    constexpr int kSteps = (kSlots + kSlotsPerStep - 1) / kSlotsPerStep;
    [[maybe_unused]] constexpr int kAtOnce = kSteps < Rows::kStagingStepsAtOnce ? kSteps : Rows::kStagingStepsAtOnce;
    const int k_chunk = k0 + 8 * (tid % kChunks);
#pragma unroll kAtOnce
    for (int step = 0; step < kSteps; ++step) {
        const int slot = tid / kChunks + kSlotsPerStep * step;
        if (slot >= kSlots) break;
        const int pass = slot / MAX_M;
        const int token = slot % MAX_M;
        if (token >= m) continue;
        const int at = k_chunk + pass * kPassK;
        stage_chunk<kSlots>(xs, token_rows.x_row(x, token) + at, x_aligned, at < k, staged_vector(tid, slot));
    }
}

// The ring's passes: pass p's weights are loaded DEPTH - 1 passes before p computes, into slot
// p % DEPTH of the ring (the loop is unrolled DEPTH times, so every slot index is a constant). FULL:
// m == MAX_M (no token guards). An inactive warp (no rows: see gemv_entry) only stages X and takes
// the barriers.
template <int MAX_M, int ROWS, int DEPTH, bool FULL, class Rows>
__device__ __forceinline__ void ring_passes(const gemv_u16* x, int m, int k, const Rows& token_rows, bool x_aligned,
                                            const Loads& loads, const ScaleTable& table,
                                            GemvShared<float, Segment<MAX_M>::kFloats>& xs, int tid, int lane,
                                            RowCursor<ROWS>& rows, float (&acc)[ROWS][2][MAX_M], bool active) {
    constexpr int kSegment = Segment<MAX_M>::kPasses;
    const int groups = k / kGroup;
    const int passes = (groups + kPartials - 1) / kPartials;
    PassWeights ring[DEPTH][ROWS];
#pragma unroll
    for (int d = 0; d + 1 < DEPTH; ++d) {
        if (active) load_ring_slot(rows, groups, loads, ring[d]);
    }
    GEMV_AWAIT_INPUTS();  // DEPTH - 1 passes of weights are in flight; X is staged from here on
    for (int base = 0; base < passes; base += DEPTH) {
#pragma unroll
        for (int d = 0; d < DEPTH; ++d) {
            const int pass = base + d;
            if (pass >= passes) break;
            const int slot = pass % kSegment;
            if (slot == 0) {
                __syncthreads();  // the previous segment's readers are done (the first: the scale table)
                stage_segment<MAX_M, kSegment>(xs, x, token_rows, x_aligned, k, pass * kPassK, m, tid);
                __syncthreads();
            }
            if (!active) continue;
            // Refill the slot the previous pass computed from; past the last pass it loads nothing.
            load_ring_slot(rows, groups, loads, ring[(d + DEPTH - 1) % DEPTH]);
            compute_slice<MAX_M, ROWS, MAX_M, FULL, kSegment * MAX_M>(ring[d], table, xs, 0, m, lane, acc,
                                                                      slot * MAX_M);
        }
    }
}

// The ring pipeline's counterpart of gemv_rows: the same arguments and result; an inactive warp
// returns zero and has loaded nothing.
template <int MAX_M, int ROWS, int DEPTH, class Rows>
__device__ __forceinline__ float gemv_rows_ring(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, int m,
                                                int n, int k, const Rows& token_rows, bool x_aligned, const Loads& loads,
                                                int tid, int lane, int row0, bool active) {
    static_assert(DEPTH >= 2, "a ring holds the pass that computes and at least one in flight");
    float acc[ROWS][2][MAX_M];
    zero_accumulators(acc);
    RowCursor<ROWS> rows = make_row_cursor<ROWS>(packed, scales, n, k, lane, row0);
    // The scale table; the first segment's staging barrier orders it before any lookup.
    GEMV_SHARED(gemv_u32, scale_table, 256);
    fill_scale_table(scale_table, tid);
    GEMV_SHARED(float, xs, Segment<MAX_M>::kFloats);
    // Every token live (always at MAX_M = 1) compiles without token guards.
    if (MAX_M == 1 || GEMV_ON_COMMON_PATH(m == MAX_M, true)) {
        ring_passes<MAX_M, ROWS, DEPTH, true>(x, m, k, token_rows, x_aligned, loads, scale_table, xs, tid, lane, rows, acc,
                                               active);
    } else {
        ring_passes<MAX_M, ROWS, DEPTH, false>(x, m, k, token_rows, x_aligned, loads, scale_table, xs, tid, lane, rows, acc,
                                                active);
    }
    return reduce<MAX_M, ROWS>(acc, lane);
}
