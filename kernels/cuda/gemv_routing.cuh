// Where a launch's tokens read X and write Y, and which (token, slot) pairs a block of a grouped
// launch (a routed mixture-of-experts layer) computes: shared by both families' kernels.
//
// Pair p = t * top_k + s is slot s of token t: X row t, Y row p, expert routing[p]. Block b of a
// grouped grid computes one row block of pair b / row_blocks's expert for a chunk of the pairs
// routed to it (as many as the kernel is wide): the block of the chunk's first pair does the work,
// the blocks of its other pairs return at once, so each touched expert's weights are streamed once
// per chunk of its pairs, and an expert's chunks run side by side in blocks of their own. A pair
// whose id is past the experts reads no weights; its Y row is NaN.
#pragma once

#include "gemv_portable.cuh"

namespace gemv_routing {

// The widest grouped kernel's chunk of pairs: the shared-memory lists' length.
constexpr int kMaxChunk = 16;
using PairList = GemvShared<int, kMaxChunk>;

// A single launch's token t: rows of its own X and Y, `t * stride` elements in.
struct StridedRows {
    // How many of the ring pipeline's X staging steps (stage_segment) are unrolled together, their
    // loads in flight at once: all of a segment's.
    enum : int { kStagingStepsAtOnce = 1 << 30 };
    int x_stride;
    int y_stride;
    __device__ __forceinline__ const gemv_u16* x_row(const gemv_u16* x, int t) const {
        return x + (gemv_u64)t * (gemv_u64)x_stride;
    }
    __device__ __forceinline__ gemv_u16* y_row(gemv_u16* y, int t) const {
        return y + (gemv_u64)t * (gemv_u64)y_stride;
    }
};

// Token t of a grouped block's chunk is the chunk's pair t: X row tokens[t] (K apart), Y row
// pairs[t] (N apart).
struct GatheredRows {
    // Each staging step looks its token's X row up in shared memory and holds the 64-bit address:
    // two steps unrolled together keep the grouped ring kernels at two blocks per SM within 128
    // registers.
    enum : int { kStagingStepsAtOnce = 2 };
    const PairList* tokens;
    const PairList* pairs;
    int x_stride;
    int y_stride;
    __device__ __forceinline__ const gemv_u16* x_row(const gemv_u16* x, int t) const {
        return x + (gemv_u64)(*tokens)[t] * (gemv_u64)x_stride;
    }
    __device__ __forceinline__ gemv_u16* y_row(gemv_u16* y, int t) const {
        return y + (gemv_u64)(*pairs)[t] * (gemv_u64)y_stride;
    }
};

// Stores output (token t, row `row`) of a launch whose Y `rows` lays out: `value`, the f32 its bf16
// result rounds, as Y's format says: bf16 (`y_f32` false: the contract's rounding) or f32
// (gemv_f32_y). Row strides count elements, so an f32 Y's element sits at the same index as a bf16
// Y's.
template <class Rows>
__device__ __forceinline__ void store_output(gemv_u16* y, bool y_f32, const Rows& rows, int t, int row, float value) {
    if (y_f32) {
        store_global(reinterpret_cast<float*>(y) + ((rows.y_row(y, t) - y) + row), gemv_f32_y(value));
    } else {
        store_global(rows.y_row(y, t) + row, gemv_f32_to_bf16(value));
    }
}

// Which pairs block `pair`'s row block [first_row, first_row + rows) of N computes, for a block of
// THREADS threads and a kernel CHUNK pairs wide: returns how many (at most CHUNK), listed
// ascending in `tokens` (their X rows) and `pair_rows` (their Y rows), with their expert in
// `expert`; or 0 where the block has nothing to do: its id is past the experts (its rows of Y row
// `pair` are written NaN here) or the pair does not start a chunk of its expert's pairs. Every
// thread gets the same answer (a uniform exit: the only barriers are in here).
template <int THREADS, int CHUNK>
__device__ __forceinline__ int route_block(const gemv_u32* routing, int experts, int pairs, int top_k, int pair,
                                           gemv_u16* y, int n, int first_row, int rows, PairList& tokens,
                                           PairList& pair_rows, int tid, gemv_u32& expert) {
    static_assert(CHUNK <= kMaxChunk, "a chunk's pairs fit the lists");
    expert = __ldg(routing + pair);
    if (expert >= (gemv_u32)experts) {
        for (int r = tid; r < rows; r += THREADS) {
            if (first_row + r < n) store_global(y + (gemv_u64)pair * (gemv_u64)n + (first_row + r), (gemv_u16)0x7FC0u);
        }
        return 0;
    }
    constexpr int kLanes = 32;
    constexpr int kWarps = THREADS / kLanes;
    GEMV_SHARED(int, warp_counts, kWarps);
    const int lane = tid % kLanes;
    const int warp = tid / kLanes;
    // The pair's rank among its expert's pairs (how many come before it), summed over the block.
    int rank = 0;
    for (int q = tid; q < pair; q += THREADS) rank += __ldg(routing + q) == expert ? 1 : 0;
#pragma unroll
    for (int d = kLanes / 2; d >= 1; d /= 2) rank += __shfl_xor_sync(0xFFFFFFFFu, rank, d);
    if (lane == 0) warp_counts[warp] = rank;
    __syncthreads();
    rank = 0;
    for (int w = 0; w < kWarps; ++w) rank += warp_counts[w];
    // The totals are read before the listing rewrites them.
    __syncthreads();
    // Only the first pair of each chunk computes: the expert's chunks run in blocks of their own,
    // side by side.
    if (rank % CHUNK != 0) return 0;
    // The chunk's pairs from this one on, ascending, THREADS pairs a round, thread tid looking at
    // pair first + tid: its place is the count of the expert's pairs before it, those of earlier
    // rounds (count), of the earlier warps (their totals, through shared memory) and of the
    // earlier lanes of its warp (a scan by shuffles). Every thread runs every round.
    int count = 0;
    for (int first = pair; first < pairs && count < CHUNK; first += THREADS) {
        const int q = first + tid;
        const bool match = q < pairs && __ldg(routing + q) == expert;
        // The warp's matches up to this lane, this one included.
        int up_to = match ? 1 : 0;
#pragma unroll
        for (int d = 1; d < kLanes; d *= 2) {
            const int below = __shfl_up_sync(0xFFFFFFFFu, up_to, d);
            if (lane >= d) up_to += below;
        }
        if (lane == kLanes - 1) warp_counts[warp] = up_to;
        __syncthreads();
        int place = count + up_to - 1;
        for (int w = 0; w < warp; ++w) place += warp_counts[w];
        if (match && place < CHUNK) {
            tokens[place] = q / top_k;
            pair_rows[place] = q;
        }
        for (int w = 0; w < kWarps; ++w) count += warp_counts[w];
        // The list complete before any thread reads it, the totals read before the next round.
        __syncthreads();
    }
    return count < CHUNK ? count : CHUNK;
}

}  // namespace gemv_routing
