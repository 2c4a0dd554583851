// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: the
// grouped launch of a routed mixture-of-experts layer, on the ring pipeline.
//
// Which pairs a block computes is gemv_routing::route_block's: a row block of one expert for a
// chunk of up to MAX_M of the pairs routed to it, computed by gemv_warp_rows, X and Y rows
// gathered through GatheredRows: the same arithmetic as a single launch, so each output has the
// contract's bits.

template <int MAX_M, int ROWS, int SLICE, int DEPTH>
__device__ __forceinline__ void grouped_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales,
                                              gemv_u16* y, const float* global_scales, int per_expert_scales,
                                              const gemv_u32* routing, int experts, int pairs, int top_k, int n,
                                              int k) {
    static_assert(DEPTH >= 2, "grouped launches run the ring pipeline");
    // The routing says which weights to read, so nothing is read before the previous kernel ends.
    GEMV_ALLOW_DEPENDENTS();
    GEMV_AWAIT_INPUTS();
    constexpr int kWarps = kThreadsPerBlock / kWarp;
    const int tid = (int)threadIdx.x;
    const int lane = tid % kWarp;
    const int warp = tid / kWarp;
    const int row_blocks = (n + kWarps * ROWS - 1) / (kWarps * ROWS);
    const int pair = (int)blockIdx.x / row_blocks;
    const int block_row = ((int)blockIdx.x % row_blocks) * kWarps * ROWS;
    GEMV_SHARED(int, tokens, gemv_routing::kMaxChunk);
    GEMV_SHARED(int, pair_rows, gemv_routing::kMaxChunk);
    gemv_u32 expert;
    const int m = gemv_routing::route_block<kThreadsPerBlock, MAX_M>(routing, experts, pairs, top_k, pair, y, n,
                                                                     block_row, kWarps * ROWS, tokens, pair_rows, tid,
                                                                     expert);
    if (m == 0) return;
    const gemv_u64 matrix = (gemv_u64)expert * (gemv_u64)n * (gemv_u64)k;
    const gemv_u8* expert_packed = packed + matrix / 2;
    const gemv_u8* expert_scales = scales + matrix / kGroup;
    const float global_scale = __ldg(global_scales + (per_expert_scales ? expert : 0u));
    Loads loads;
    loads.vector16 = (((gemv_u64)expert_packed) & 15u) == 0u && (k / 2) % 16 == 0;
    loads.vector8 = (((gemv_u64)expert_packed) & 7u) == 0u;
    loads.scales16 = (((gemv_u64)expert_scales) & 1u) == 0u && (k / kGroup) % 2 == 0;
    const bool x_aligned = (((gemv_u64)x) & 15u) == 0u && k % 8 == 0;
    const GatheredRows token_rows{&tokens, &pair_rows, k, n};
    gemv_warp_rows<MAX_M, ROWS, SLICE, DEPTH>(x, expert_packed, expert_scales, y, false, global_scale, m, n, k,
                                              token_rows, x_aligned, loads, tid, lane, block_row + warp * ROWS, true);
}
