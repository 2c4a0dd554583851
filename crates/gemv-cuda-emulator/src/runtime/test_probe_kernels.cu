// The memory microbenchmarks' kernels (kernels/cuda/probes/memory_probes.cuh) under the emulator:
// their checksums, their ring's synchronisation and their dependent-launch order, proven before a
// GPU times them (crates/gemv-cuda-emulator/tests/emulator_faults/probes.rs). Compiled only into the
// emulator; the weights (packed) are read from their first 16-byte aligned byte.
#include "probes/memory_probes.cuh"

namespace emu_probe_test {
// packed from its first 16-byte aligned byte, as vectors; `count` gets how many whole ones follow,
// less `short_by` (so the last tile of a probe is partial).
__device__ __forceinline__ const uint4* aligned(const gemv_u8* packed, gemv_u64 bytes, gemv_u64 short_by,
                                                 gemv_u64& count) {
    const gemv_u64 skip = (16u - ((gemv_u64)packed & 15u)) & 15u;
    count = (bytes - skip) / 16 - short_by;
    return reinterpret_cast<const uint4*>(packed + skip);
}
// Lane 0 of each warp writes the warp's fold as two halves at y[first + 2w], y[first + 2w + 1].
__device__ __forceinline__ void store_fold(gemv_u16* y, int first, gemv_u32 fold) {
    const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (threadIdx.x % 32 == 0) {
        store_global(y + first + 2 * warp, (gemv_u16)(fold & 0xFFFFu));
        store_global(y + first + 2 * warp + 1, (gemv_u16)(fold >> 16));
    }
}
constexpr int kRingStage = 2048;
}  // namespace emu_probe_test

// Every word of the weights but the last three vectors, folded by a grid-stride stream.
template <bool HINTED>
__device__ __forceinline__ void emu_probe_stream(const gemv_u8* packed, gemv_u16* y, int n, int k) {
    gemv_u64 vectors = 0;
    const uint4* data = emu_probe_test::aligned(packed, (gemv_u64)n * (k / 2), 3, vectors);
    emu_probe_test::store_fold(y, 0, gemv_probe::warp_xor(gemv_probe::stream_fold<4, HINTED>(data, vectors)));
}
GEMV_KERNEL(emu_probe_stream_ldg, 1024, 1)(EMU_ARGS) {
    emu_probe_stream<false>(packed, y, n, k);
}
GEMV_KERNEL(emu_probe_stream_hinted, 1024, 1)(EMU_ARGS) {
    emu_probe_stream<true>(packed, y, n, k);
}

// Every whole 2 KB stage of the weights, folded through a two-stage bulk-copy ring with two
// consumer warps (96 threads a block).
GEMV_KERNEL(emu_probe_ring, 96, 1)(EMU_ARGS) {
    gemv_u64 vectors = 0;
    const uint4* data = emu_probe_test::aligned(packed, (gemv_u64)n * (k / 2), 0, vectors);
    const gemv_u64 stages = vectors * 16 / emu_probe_test::kRingStage;
    const gemv_u32 fold = gemv_probe::ring_fold<emu_probe_test::kRingStage, 2, 2>(
        reinterpret_cast<const gemv_u8*>(data), stages);
    emu_probe_test::store_fold(y, 0, gemv_probe::warp_xor(fold));
}

// One chain step: y[0] = x[0] + 1, the warps' folds of the weights from y[2] on.
GEMV_KERNEL(emu_probe_chain, 1024, 1)(EMU_ARGS) {
    gemv_u64 vectors = 0;
    const uint4* data = emu_probe_test::aligned(packed, (gemv_u64)n * (k / 2), 0, vectors);
    const gemv_u32 fold = gemv_probe::chain_fold<2>(data, vectors, x, y);
    emu_probe_test::store_fold(y, 2, fold);
}

// y[0] = where n hops along X's links (x[i]: the next index) from index 0 end.
GEMV_KERNEL(emu_probe_chase, 32, 1)(EMU_ARGS) {
    if (threadIdx.x == 0 && blockIdx.x == 0) store_global(y, gemv_probe::chase(x, n));
}

#define GEMV_PROBE_TEST_KERNELS(X)     \
    X(emu_probe_stream_ldg, 1, 1)      \
    X(emu_probe_stream_hinted, 1, 1)   \
    X(emu_probe_ring, 1, 1)            \
    X(emu_probe_chain, 1, 1)           \
    X(emu_probe_chase, 1, 1)
