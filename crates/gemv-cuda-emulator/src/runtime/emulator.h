// The C interface between the emulator and Rust (src/ffi.rs).
#pragma once

#include <cstddef>

#include "gemv_portable.cuh"

extern "C" {

// The gemv kernel signature every registered entry point has.
typedef void (*EmuEntry)(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                         float global_scale, int m, int n, int k, int x_stride, int y_stride, int y_f32);

// The grouped kernels' signature (a routed mixture-of-experts layer).
typedef void (*EmuGroupedEntry)(const gemv_u16* x, const gemv_u8* packed, const gemv_u8* scales, gemv_u16* y,
                                const float* global_scales, int per_expert_scales, const gemv_u32* routing,
                                int experts, int pairs, int top_k, int n, int k);

// An entry point: `entry` for the gemv signature, or `grouped_entry` (and a null `entry`) for
// the grouped one.
struct EmuKernel {
    const char* name;
    EmuEntry entry;
    unsigned max_threads;  // the launch bound declared with GEMV_KERNEL
    EmuGroupedEntry grouped_entry;
};

struct EmuArgs {
    const gemv_u16* x;
    const gemv_u8* packed;
    const gemv_u8* scales;
    gemv_u16* y;
    float global_scale;
    int m, n, k;
    int x_stride, y_stride;  // elements between rows of X and of Y
    int y_f32;               // Y's elements are f32 (else bf16)
    // A grouped launch's own arguments (unused by the gemv signature): one or E global scales,
    // the routing's u32 expert ids, E, M x top_k and top-k.
    const float* global_scales;
    int per_expert_scales;
    const gemv_u32* routing;
    int experts, pairs, top_k;
};

// A buffer the launch may touch; anything else is out of bounds.
struct EmuRegion {
    const char* name;
    const void* base;
    size_t len;
    int writable;
};

// The widths a launch accesses global memory by: 1, 2, 4, 8 and 16 bytes.
#define EMU_ACCESS_WIDTHS 5
// The launch regions whose accesses are counted: a gemv launch's x, packed, scales and y.
#define EMU_COUNTED_REGIONS 4

// What a launch did besides its results, for tests that check how a kernel got them.
struct EmuCounts {
    // Blocks that took their kernel's fallback path (gemv_note_fallback).
    unsigned long long fallback_blocks;
    // Loads (__ldg, prefetches excluded) and stores of each region, by width (1 << w bytes).
    unsigned long long loads[EMU_COUNTED_REGIONS][EMU_ACCESS_WIDTHS];
    unsigned long long stores[EMU_COUNTED_REGIONS][EMU_ACCESS_WIDTHS];
};

// The kernel named `name` (production and test kernels), or null.
const EmuKernel* gemv_emu_find(const char* name);

// The kernel's launch bound (most threads per block).
unsigned gemv_emu_launch_bound(const EmuKernel* kernel);

// Runs grid_x blocks of block_x threads, the threads of a block scheduled in thread-index order
// (or its reverse when `reversed`; with a non-zero `seed`, blocks and each round of threads in
// orders drawn from it; `dependent`: a programmatic dependent launch, X and a grouped launch's
// routing read and Y written only after griddepcontrol.wait; `grid_ends` > 0: only the first and
// last `grid_ends` blocks run, the others are skipped); 0 on success, with what it counted in
// `*counts` where that is not null, else 1 with a message in `error`.
int gemv_emu_launch(const EmuKernel* kernel, unsigned grid_x, unsigned block_x, const EmuArgs* args,
                    const EmuRegion* regions, int region_count, int workers, int reversed, unsigned long long seed,
                    int dependent, unsigned grid_ends, EmuCounts* counts, char* error, size_t error_len);
}
