// Planted faults: kernels the emulator must reject. Compiled only into the emulator.
#include "../gemv_portable.cuh"

// Lane 0 of every warp writes one element past the end of y (m * n elements).
extern "C" __global__ void emu_test_write_past_end(const gemv_u16*, const gemv_u8*, const gemv_u8*, gemv_u16* y,
                                                    float, int m, int n, int) {
    if (threadIdx.x % 32 == 0) store_global(y + (gemv_u64)m * (gemv_u64)n, (gemv_u16)1);
}

// Reads one byte before the packed buffer.
extern "C" __global__ void emu_test_read_before_start(const gemv_u16*, const gemv_u8* packed, const gemv_u8*,
                                                       gemv_u16* y, float, int, int, int) {
    const gemv_u8 v = __ldg(packed - 1);
    if (threadIdx.x == 0) store_global(y, (gemv_u16)v);
}

// Only the first half of the block reaches the barrier.
extern "C" __global__ void emu_test_divergent_syncthreads(const gemv_u16*, const gemv_u8*, const gemv_u8*, gemv_u16* y,
                                                           float, int, int, int) {
    if (threadIdx.x < blockDim.x / 2) __syncthreads();
    if (threadIdx.x == 0) store_global(y, (gemv_u16)0);
}

// Every lane shuffles, but the mask names only the low 16 lanes.
extern "C" __global__ void emu_test_partial_shuffle_mask(const gemv_u16*, const gemv_u8*, const gemv_u8*,
                                                          gemv_u16* y, float, int, int, int) {
    const float v = __shfl_down_sync(0x0000FFFFu, (float)threadIdx.x, 1);
    if (threadIdx.x == 0) store_global(y, (gemv_u16)v);
}

// A misaligned 16-byte vector load from x + 1 element.
extern "C" __global__ void emu_test_misaligned_vector(const gemv_u16* x, const gemv_u8*, const gemv_u8*, gemv_u16* y,
                                                       float, int, int, int) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + 1));
    if (threadIdx.x == 0) store_global(y, (gemv_u16)v.x);
}

// A correct block-wide exchange through shared memory and a barrier (must pass).
extern "C" __global__ void emu_test_shared_exchange(const gemv_u16*, const gemv_u8*, const gemv_u8*, gemv_u16* y,
                                                     float, int, int n, int) {
    __shared__ gemv_u16 values[1024];
    values[threadIdx.x] = (gemv_u16)(threadIdx.x + blockIdx.x);
    __syncthreads();
    const unsigned partner = blockDim.x - 1 - threadIdx.x;
    const unsigned out = blockIdx.x * blockDim.x + threadIdx.x;
    if (out < (unsigned)n) store_global(y + out, values[partner]);
}

#define GEMV_TEST_KERNELS(X)                \
    X(emu_test_write_past_end, 1, 1)        \
    X(emu_test_read_before_start, 1, 1)     \
    X(emu_test_divergent_syncthreads, 1, 1) \
    X(emu_test_partial_shuffle_mask, 1, 1)  \
    X(emu_test_misaligned_vector, 1, 1)     \
    X(emu_test_shared_exchange, 1, 1)
