// The C interface between the emulator and Rust (crates/gemv-cuda/src/emulator/ffi.rs).
#pragma once

#include <cstddef>

#include "../gemv_portable.cuh"

extern "C" {

// The gemv kernel signature every registered entry point has.
typedef void (*EmuEntry)(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                         float global_scale, int m, int n, int k, int x_stride, int y_stride);

struct EmuKernel {
    const char* name;
    EmuEntry entry;
    unsigned max_threads;  // the launch bound declared with GEMV_KERNEL
};

struct EmuArgs {
    const gemv_u16* x;
    const gemv_u8* packed;
    const gemv_u8* scales;
    gemv_u16* y;
    float global_scale;
    int m, n, k;
    int x_stride, y_stride;  // elements between rows of X and of Y
};

// A buffer the launch may touch; anything else is out of bounds.
struct EmuRegion {
    const char* name;
    const void* base;
    size_t len;
    int writable;
};

// The kernel named `name` (production and test kernels), or null.
const EmuKernel* gemv_emu_find(const char* name);

// The kernel's launch bound (most threads per block).
unsigned gemv_emu_launch_bound(const EmuKernel* kernel);

// Runs grid_x blocks of block_x threads, the threads of a block scheduled in thread-index order
// (or its reverse when `reversed`); 0 on success, with the number of blocks that took their
// kernel's fallback path (gemv_note_fallback) in `*fallback_blocks` where it is not null, else 1
// with a message in `error`.
int gemv_emu_launch(const EmuKernel* kernel, unsigned grid_x, unsigned block_x, const EmuArgs* args,
                    const EmuRegion* regions, int region_count, int workers, int reversed,
                    unsigned long long* fallback_blocks, char* error, size_t error_len);
}
