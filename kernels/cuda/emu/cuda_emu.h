// The CUDA surface the kernels use, for g++: compile a .cu as C++ with -DGEMV_EMULATOR and
// the kernels run on the CPU under the SIMT emulator in runtime.cpp (docs/emulator.md).
//
// Each CUDA thread is a fiber; a warp's lanes and a block's threads are scheduled round-robin,
// deterministically. Shuffles and __syncthreads are the only points where a fiber waits. Global
// memory goes through __ldg / store_global, which check every access against the launch's
// buffers (a CPU memcheck) and check the alignment of vector loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct dim3 {
    unsigned x, y, z;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};

namespace emu {

// Per-fiber coordinates, set by the scheduler before a fiber runs.
struct ThreadCoords {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadCoords& coords();

// Checks [p, p + size) against the launch's regions; reports and never returns on a fault.
void check_access(const void* p, size_t size, size_t align, bool write);

unsigned shuffle(unsigned mask, unsigned value, int src_lane, int width, const char* what);
void sync_threads();
unsigned lane_id();

}  // namespace emu

#define threadIdx (emu::coords().thread_idx)
#define blockIdx (emu::coords().block_idx)
#define blockDim (emu::coords().block_dim)
#define gridDim (emu::coords().grid_dim)

inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

template <class T>
inline T __ldg(const T* p) {
    emu::check_access(p, sizeof(T), alignof(T), false);
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <class T>
inline void store_global(T* p, T v) {
    emu::check_access(p, sizeof(T), alignof(T), true);
    std::memcpy(p, &v, sizeof v);
}

inline void __syncthreads() {
    emu::sync_threads();
}

template <class T>
inline T emu_shuffle_as(unsigned mask, T value, int src, int width, const char* what) {
    static_assert(sizeof(T) == 4, "the emulator shuffles 32-bit values");
    unsigned bits;
    std::memcpy(&bits, &value, 4);
    bits = emu::shuffle(mask, bits, src, width, what);
    T out;
    std::memcpy(&out, &bits, 4);
    return out;
}

template <class T>
inline T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
    const int lane = (int)emu::lane_id();
    const int base = lane - lane % width;
    return emu_shuffle_as(mask, value, base + src_lane % width, width, "__shfl_sync");
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = (int)emu::lane_id();
    const int base = lane - lane % width;
    const int src = lane % width + (int)delta < width ? lane + (int)delta : lane;  // out of range: own value
    (void)base;
    return emu_shuffle_as(mask, value, src, width, "__shfl_down_sync");
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = (int)emu::lane_id();
    const int src = lane % width >= (int)delta ? lane - (int)delta : lane;
    return emu_shuffle_as(mask, value, src, width, "__shfl_up_sync");
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    const int lane = (int)emu::lane_id();
    const int src = (lane ^ lane_mask) < ((lane / width) + 1) * width ? (lane ^ lane_mask) : lane;
    return emu_shuffle_as(mask, value, src, width, "__shfl_xor_sync");
}
