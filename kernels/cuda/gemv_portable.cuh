// What the kernels need from the platform, for nvcc and for the host emulator (g++).
//
// - GEMV_KERNEL(name, max_threads): declares an `extern "C"` entry point with its launch bound
//   (nvcc: __launch_bounds__; the emulator records the bound and refuses a launch over it).
// - Global memory: loads through __ldg (read-only data: never memory the launch writes), stores
//   through store_global. On the GPU they are plain accesses; under the emulator they are
//   bounds-, alignment- and permission-checked against the launch's buffers.
// - Shared memory: GEMV_SHARED(T, name, count) declares a block-shared array; `name[i]` reads and
//   writes elements, shared_load<V>(name, i) / shared_store<V>(name, i, v) move the i-th V-sized
//   vector. The emulator bounds-checks every access, poisons the array at every block start,
//   refuses reads of elements not yet written in the block, and reports two threads touching
//   the same byte (at least one writing) with no __syncthreads between them.
#pragma once

typedef unsigned char gemv_u8;
typedef unsigned short gemv_u16;
typedef unsigned int gemv_u32;
typedef unsigned long long gemv_u64;

// Keeps a parameter out of template argument deduction (store_global's value takes the pointer's
// type, whatever expression computes it).
template <class T>
struct gemv_identity {
    typedef T type;
};

#ifdef GEMV_EMULATOR
#include "emu/cuda_emu.h"
#else
#define GEMV_KERNEL(name, max_threads) extern "C" __global__ void __launch_bounds__(max_threads) name

template <class T>
__device__ __forceinline__ void store_global(T* p, typename gemv_identity<T>::type v) {
    *p = v;
}

template <class T, int N>
struct GemvShared {
    alignas(16) T data[N];
    __device__ __forceinline__ T& operator[](int i) { return data[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return data[i]; }
};

#define GEMV_SHARED(T, name, count) __shared__ GemvShared<T, (count)> name

template <class V, class T, int N>
__device__ __forceinline__ V shared_load(const GemvShared<T, N>& array, int index) {
    return reinterpret_cast<const V*>(array.data)[index];
}

template <class V, class T, int N>
__device__ __forceinline__ void shared_store(GemvShared<T, N>& array, int index, V value) {
    reinterpret_cast<V*>(array.data)[index] = value;
}
#endif
