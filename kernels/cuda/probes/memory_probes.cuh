// The memory microbenchmarks' kernels: what the streaming model (docs/kernels.md) needs measured
// on a GPU, written once for nvcc (the device pack's memory_probes.cu times them) and for the
// emulator (whose tests prove their results and their synchronisation). Not product kernels:
// each reads a buffer and folds it into a checksum the host can recompute, so a probe that skips
// or repeats bytes is caught, on the emulator and on the GPU.
//
// - stream_fold<LOADS, HINTED>: a persistent grid-stride read; each thread issues LOADS
//   independent 16-byte loads (coalesced across the block) before it uses any of them, so a
//   resident warp keeps 512 * LOADS bytes in flight. HINTED reads through gemv_load_stream16
//   (no L1 allocation), else through __ldg.
// - ring_fold<STAGE, DEPTH, CONSUMERS>: one producer lane streams STAGE-byte slices into a ring of
//   DEPTH shared-memory stages with bulk copies on mbarriers (sm_90); CONSUMERS warps fold each
//   stage and hand it back through an "empty" mbarrier. Up to DEPTH * STAGE bytes in flight per
//   block.
// - chain_fold: one step of a chain of dependent launches (programmatic dependent launch): folds
//   its weights before griddepcontrol.wait, then reads the previous step's word and writes its own.
// - chase: a single thread following a chain of indices (loaded latency, one load at a time).
#pragma once

#include "gemv_portable.cuh"

namespace gemv_probe {

constexpr int kWarp = 32;

__device__ __forceinline__ gemv_u32 fold_words(gemv_u32 acc, const uint4& v) {
    return acc ^ v.x ^ v.y ^ v.z ^ v.w;
}

// The XOR of `value` over the warp (every lane gets it).
__device__ __forceinline__ gemv_u32 warp_xor(gemv_u32 value) {
#pragma unroll
    for (int d = 16; d >= 1; d /= 2) value ^= __shfl_xor_sync(0xFFFFFFFFu, value, d);
    return value;
}

// The XOR of every 32-bit word of data[0, vectors), spread over the grid: tile t (LOADS * blockDim
// vectors) belongs to block t % gridDim; its thread i reads vectors i, i + blockDim, ... of it.
// Returns this thread's share.
template <int LOADS, bool HINTED>
__device__ __forceinline__ gemv_u32 stream_fold(const uint4* data, gemv_u64 vectors) {
    const gemv_u64 tile_vectors = (gemv_u64)LOADS * blockDim.x;
    gemv_u32 acc = 0;
    for (gemv_u64 tile = blockIdx.x; tile * tile_vectors < vectors; tile += gridDim.x) {
        const gemv_u64 first = tile * tile_vectors + threadIdx.x;
        uint4 v[LOADS];
        if (first + (LOADS - 1) * (gemv_u64)blockDim.x < vectors) {
            // A whole tile: every load issued before the first use.
#pragma unroll
            for (int l = 0; l < LOADS; ++l) {
                const uint4* p = data + first + (gemv_u64)l * blockDim.x;
                v[l] = HINTED ? gemv_load_stream16(p) : __ldg(p);
            }
        } else {
#pragma unroll
            for (int l = 0; l < LOADS; ++l) {
                const gemv_u64 i = first + (gemv_u64)l * blockDim.x;
                v[l] = i < vectors ? __ldg(data + i) : uint4{0u, 0u, 0u, 0u};
            }
        }
#pragma unroll
        for (int l = 0; l < LOADS; ++l) acc = fold_words(acc, v[l]);
    }
    return acc;
}

// The XOR of every word of `stages` slices of STAGE bytes from `data` (16-byte aligned), slice s
// read by block s % gridDim through its ring; blockDim = (CONSUMERS + 1) * 32, the last warp the
// producer. Returns this thread's share (0 in the producer warp).
template <int STAGE, int DEPTH, int CONSUMERS>
__device__ __forceinline__ gemv_u32 ring_fold(const gemv_u8* data, gemv_u64 stages) {
    static_assert(STAGE % (16 * kWarp * CONSUMERS) == 0, "a stage splits into whole vectors per consumer");
    constexpr int kVectors = STAGE / 16;
    GEMV_SHARED(uint4, ring, DEPTH * kVectors);
    GEMV_SHARED(gemv_u64, barriers, 2 * DEPTH);  // full[d], then empty[d]
    const int warp = (int)threadIdx.x / kWarp;
    if (threadIdx.x == 0) {
        for (int d = 0; d < DEPTH; ++d) {
            gemv_mbarrier_init(gemv_shared_address(barriers, d), 1);
            // Every consumer thread releases the stage it has read.
            gemv_mbarrier_init(gemv_shared_address(barriers, DEPTH + d), kWarp * CONSUMERS);
        }
        gemv_fence_proxy_async();
    }
    __syncthreads();
    gemv_u32 acc = 0;
    if (warp == CONSUMERS) {
        if (gemv_elect_one()) {
            int j = 0;
            for (gemv_u64 s = blockIdx.x; s < stages; s += gridDim.x, ++j) {
                const int slot = j % DEPTH;
                // Round r of a slot waits for the consumers' release of round r - 1.
                if (j >= DEPTH) gemv_mbarrier_wait_parity(gemv_shared_address(barriers, DEPTH + slot), (j / DEPTH - 1) & 1);
                const gemv_u32 full = gemv_shared_address(barriers, slot);
                gemv_mbarrier_arrive_expect_tx(full, STAGE);
                gemv_bulk_copy(gemv_shared_address(ring, slot * kVectors), data + s * STAGE, STAGE, full);
            }
        }
        return 0;
    }
    int j = 0;
    for (gemv_u64 s = blockIdx.x; s < stages; s += gridDim.x, ++j) {
        const int slot = j % DEPTH;
        gemv_mbarrier_wait_parity(gemv_shared_address(barriers, slot), (j / DEPTH) & 1);
#pragma unroll
        for (int i = (int)threadIdx.x; i < kVectors; i += kWarp * CONSUMERS) {
            acc = fold_words(acc, shared_load<uint4>(ring, slot * kVectors + i));
        }
        gemv_mbarrier_arrive(gemv_shared_address(barriers, DEPTH + slot));
    }
    return acc;
}

// One step of a dependent chain: returns the warp's fold of `weights` (read before the previous
// step has ended, every lane gets it); after griddepcontrol.wait, block 0's first thread writes the
// previous step's counter plus one (`in` is the previous step's `out`), so a chain of S steps ends
// at its start plus S only if every step read its predecessor's result. launch_dependents lets the
// next step start streaming its own weights at once.
template <int LOADS, class T>
__device__ __forceinline__ gemv_u32 chain_fold(const uint4* weights, gemv_u64 vectors, const T* in, T* out) {
    gemv_launch_dependents();
    const gemv_u32 fold = warp_xor(stream_fold<LOADS, true>(weights, vectors));
    gemv_grid_dependency_wait();
    if (blockIdx.x == 0 && threadIdx.x == 0) store_global(out, (T)(__ldg(in) + 1u));
    return fold;
}

// Follows `hops` links from index 0 (next[i] is the index of the next link) and returns where it
// stopped.
template <class T>
__device__ __forceinline__ T chase(const T* next, int hops) {
    T at = 0;
    for (int h = 0; h < hops; ++h) at = __ldg(next + at);
    return at;
}

}  // namespace gemv_probe
