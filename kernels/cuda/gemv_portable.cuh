// What the kernels need from the platform, for nvcc and for the host emulator (g++).
//
// Every global-memory access in a kernel goes through __ldg (loads) or store_global (stores):
// on the GPU they are plain accesses; under the emulator they are bounds- and alignment-checked
// against the launch's buffers.
#pragma once

typedef unsigned char gemv_u8;
typedef unsigned short gemv_u16;
typedef unsigned int gemv_u32;
typedef unsigned long long gemv_u64;

#ifdef GEMV_EMULATOR
#include "emu/cuda_emu.h"
#else
template <class T>
__device__ __forceinline__ void store_global(T* p, T v) {
    *p = v;
}
#endif
