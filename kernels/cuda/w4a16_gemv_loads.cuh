// Part of w4a16_gemv.cu (the exact family), included inside its namespace where it stood: how a
// warp's weights are loaded, a pass ahead, at the widths the buffers' alignment allows.

// A row's share of one pass for this lane: its two groups' 32 nibbles and two scale codes.
struct PassWeights {
    uint4 packed;
    gemv_u32 codes;
};

// How a block loads weights, chosen once from the buffers' alignment and K.
struct Loads {
    bool vector16;  // packed rows 16-byte aligned: one 128-bit load per row and pass
    bool vector8;   // packed rows 8-byte aligned: two 64-bit loads
    bool scales16;  // scale rows 2-byte aligned: the lane's two codes in one 16-bit load
};

// Where a warp's rows are read: the first row's packed and scale bytes at this lane's first group
// of the first pass, and each row's current pass from there (rows past N repeat row N - 1; the
// warp's rows are consecutive, so the units fit 32 bits). Advanced one pass at a time.
template <int ROWS>
struct RowCursor {
    const gemv_u8* packed;
    const gemv_u8* scales;
    // Each row's offset from the first in 8-byte units of packed (K/2 is a multiple of 8), which
    // is also its scale offset in bytes: both addresses are one wide multiply-add from it.
    gemv_u32 unit[ROWS];
    int group;              // this lane's first group of the pass
};

__device__ __forceinline__ uint2 load_group(const gemv_u8* p, bool vector) {
    if (vector) return __ldg(reinterpret_cast<const uint2*>(p));
    gemv_u32 w[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i / 4] |= (gemv_u32)__ldg(p + i) << (8 * (i % 4));
    return uint2{w[0], w[1]};
}

// Row r's share of the cursor's pass; groups past the row's end (the last, partial pass) are zero
// weights with scale code 0. STREAM reads the 16-byte weights without allocating L1 lines (the ring
// pipeline, whose blocks read each weight once and re-read X from shared memory).
template <int ROWS, bool STREAM = false>
__device__ __forceinline__ PassWeights load_pass(const RowCursor<ROWS>& rows, int r, int groups, const Loads& loads) {
    const gemv_u8* packed = rows.packed + (gemv_u64)rows.unit[r] * 8u;
    const gemv_u8* scales = rows.scales + (gemv_u64)rows.unit[r];
    PassWeights w;
    gemv_poison(w);  // every field is written below; under the emulator one left unwritten reads as NaN
    if (GEMV_ON_COMMON_PATH(rows.group + 1 < groups, true)) {
        if (GEMV_ON_COMMON_PATH(loads.vector16, true)) {
            w.packed = STREAM ? gemv_load_stream16(packed) : __ldg(reinterpret_cast<const uint4*>(packed));
        } else {
            const uint2 a = load_group(packed, loads.vector8);
            const uint2 b = load_group(packed + 8, loads.vector8);
            w.packed = uint4{a.x, a.y, b.x, b.y};
        }
        if (GEMV_ON_COMMON_PATH(loads.scales16, true)) {
            w.codes = __ldg(reinterpret_cast<const gemv_u16*>(scales));
        } else {
            w.codes = (gemv_u32)__ldg(scales) | ((gemv_u32)__ldg(scales + 1) << 8);
        }
    } else {
        w.packed = uint4{0u, 0u, 0u, 0u};
        w.codes = 0u;
        if (rows.group < groups) {
            const uint2 a = load_group(packed, loads.vector8);
            w.packed.x = a.x;
            w.packed.y = a.y;
            w.codes = __ldg(scales);
        }
    }
    return w;
}

// Moves the cursor to the next pass. The units move, the bases stay: a 32-bit add per row where
// moving the two 64-bit bases cost four instructions and let ptxas keep a 64-bit address per row
// (4 fewer per pass).
template <int ROWS>
__device__ __forceinline__ void next_pass(RowCursor<ROWS>& rows) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) rows.unit[r] += kPartials;
    rows.group += kPartials;
}

// Loads the cursor's pass of every row into `w`, prefetches the pass after it into L2 (so two
// passes of weights are in flight per warp while one computes, at no register cost), and moves
// the cursor on.
template <int ROWS>
__device__ __forceinline__ void load_all(RowCursor<ROWS>& rows, int groups, const Loads& loads,
                                         PassWeights (&w)[ROWS]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = load_pass(rows, r, groups, loads);
    if (rows.group + kPartials < groups) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            gemv_prefetch_l2(rows.packed + (gemv_u64)rows.unit[r] * 8u + 8 * kPartials);
            gemv_prefetch_l2(rows.scales + (gemv_u64)rows.unit[r] + kPartials);
        }
    }
    next_pass(rows);
}

// Loads the cursor's pass of every row into `w` with streaming loads and moves the cursor on: the
// ring pipeline's step, which keeps several passes in flight in registers and prefetches nothing.
template <int ROWS>
__device__ __forceinline__ void load_ring_slot(RowCursor<ROWS>& rows, int groups, const Loads& loads,
                                               PassWeights (&w)[ROWS]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = load_pass<ROWS, true>(rows, r, groups, loads);
    next_pass(rows);
}
