// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: the
// grouped launch of a routed mixture-of-experts layer, on the ring pipeline.
//
// Pair p = t * top_k + s is slot s of token t: X row t, Y row p, expert routing[p]. Block b of the
// grid computes one row block of pair b / row_blocks's expert for every pair routed to it: the
// block of the expert's first pair does the work, the blocks of its later pairs return at once, so
// each touched expert's weights are streamed once per launch however many pairs chose it. Its
// pairs, ascending, are listed in shared memory and computed MAX_M at a time by gemv_warp_rows, X
// and Y rows gathered through GatheredRows: the same arithmetic as a single launch, so each output
// has the contract's bits. A pair whose id is past the experts reads no weights; its Y row is NaN.

// The most pairs (M x top_k) one grouped launch may carry: the shared-memory lists' length
// (gemv_cuda checks it before launching).
constexpr int kMaxGroupedPairs = 1024;

// Token t of a block's chunk is the block's pair first + t: X row tokens[first + t] (K apart), Y
// row pairs[first + t] (N apart).
struct GatheredRows {
    const GemvShared<int, kMaxGroupedPairs>* tokens;
    const GemvShared<int, kMaxGroupedPairs>* pairs;
    int first;
    int x_stride;
    int y_stride;
    __device__ __forceinline__ const gemv_u16* x_row(const gemv_u16* x, int t) const {
        return x + (gemv_u64)(*tokens)[first + t] * (gemv_u64)x_stride;
    }
    __device__ __forceinline__ gemv_u16* y_row(gemv_u16* y, int t) const {
        return y + (gemv_u64)(*pairs)[first + t] * (gemv_u64)y_stride;
    }
};

// Writes NaN to this block's rows of Y row `pair` (an expert id past the experts).
__device__ __forceinline__ void poison_pair(gemv_u16* y, int n, int pair, int first_row, int rows, int tid) {
    for (int r = tid; r < rows; r += kThreadsPerBlock) {
        if (first_row + r < n) store_global(y + (gemv_u64)pair * (gemv_u64)n + (first_row + r), (gemv_u16)0x7FC0u);
    }
}

template <int MAX_M, int ROWS, int SLICE, int DEPTH>
__device__ __forceinline__ void grouped_entry(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales,
                                              gemv_u16* y, const float* global_scales, int per_expert_scales,
                                              const gemv_u32* routing, int experts, int pairs, int top_k, int n,
                                              int k) {
    static_assert(DEPTH >= 2, "grouped launches run the ring pipeline");
    constexpr int kWarps = kThreadsPerBlock / kWarp;
    const int tid = (int)threadIdx.x;
    const int lane = tid % kWarp;
    const int warp = tid / kWarp;
    const int row_blocks = (n + kWarps * ROWS - 1) / (kWarps * ROWS);
    const int pair = (int)blockIdx.x / row_blocks;
    const int block_row = ((int)blockIdx.x % row_blocks) * kWarps * ROWS;
    const gemv_u32 expert = __ldg(routing + pair);
    if (expert >= (gemv_u32)experts) {
        poison_pair(y, n, pair, block_row, kWarps * ROWS, tid);
        return;
    }
    // Only the expert's first pair computes (a uniform exit: no barrier has been taken yet).
    bool earlier = false;
    for (int q = tid; q < pair; q += kThreadsPerBlock) earlier = earlier || __ldg(routing + q) == expert;
    if (__syncthreads_or(earlier)) return;
    // The expert's pairs from this one on, ascending: pair q's place is the count of earlier ones.
    GEMV_SHARED(int, tokens, kMaxGroupedPairs);
    GEMV_SHARED(int, pair_rows, kMaxGroupedPairs);
    int count = 0;
    for (int q = pair; q < pairs; ++q) count += __ldg(routing + q) == expert ? 1 : 0;
    for (int q = pair + tid; q < pairs; q += kThreadsPerBlock) {
        if (__ldg(routing + q) != expert) continue;
        int place = 0;
        for (int r = pair; r < q; ++r) place += __ldg(routing + r) == expert ? 1 : 0;
        tokens[place] = q / top_k;
        pair_rows[place] = q;
    }
    __syncthreads();
    const gemv_u64 matrix = (gemv_u64)expert * (gemv_u64)n * (gemv_u64)k;
    const gemv_u8* expert_packed = packed + matrix / 2;
    const gemv_u8* expert_scales = scales + matrix / kGroup;
    const float global_scale = __ldg(global_scales + (per_expert_scales ? expert : 0u));
    Loads loads;
    loads.vector16 = (((gemv_u64)expert_packed) & 15u) == 0u && (k / 2) % 16 == 0;
    loads.vector8 = (((gemv_u64)expert_packed) & 7u) == 0u;
    loads.scales16 = (((gemv_u64)expert_scales) & 1u) == 0u && (k / kGroup) % 2 == 0;
    const bool x_aligned = (((gemv_u64)x) & 15u) == 0u && k % 8 == 0;
    const int row0 = block_row + warp * ROWS;
    for (int first = 0; first < count; first += MAX_M) {
        const int m = count - first < MAX_M ? count - first : MAX_M;
        const GatheredRows token_rows{&tokens, &pair_rows, first, k, n};
        gemv_warp_rows<MAX_M, ROWS, SLICE, DEPTH>(x, expert_packed, expert_scales, y, global_scale, m, n, k, token_rows,
                                                  x_aligned, loads, tid, lane, row0, true);
    }
}
