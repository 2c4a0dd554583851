// Planted faults, each next to a control that must pass: the emulator's own tests
// (crates/gemv-cuda-emulator/tests/emulator_faults.rs). Compiled only into the emulator. Every kernel has
// the gemv signature; most ignore the arguments they do not need.
#include "gemv_portable.cuh"

#define EMU_ARGS                                                                                                   \
    const gemv_u16 *x, const gemv_u8 *packed, const gemv_u8 *scales, gemv_u16 *y, float global_scale, int m, int n, \
        int k, int x_stride, int y_stride, int y_f32

namespace emu_test {
constexpr unsigned kFull = 0xFFFFFFFFu;
__device__ __forceinline__ unsigned lane() { return threadIdx.x % 32; }
__device__ __forceinline__ unsigned global_thread() { return blockIdx.x * blockDim.x + threadIdx.x; }
// Writes one value per thread to y (when y has room).
__device__ __forceinline__ void out(gemv_u16* y, int m, int n, unsigned value) {
    const unsigned i = global_thread();
    if (i < (unsigned)(m * n)) store_global(y + i, (gemv_u16)value);
}
}  // namespace emu_test

// ---- Tensor-core primitives -------------------------------------------------------------------

// y[2i], y[2i+1] = bf16x2 product of (x[i], x[i]) and (x[j], x[j]), j = (7i + 3) mod count.
GEMV_KERNEL(emu_test_bf16x2_mul, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    const unsigned count = (unsigned)(m * k);
    if (i >= count || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 a = __ldg(x + i);
    const gemv_u32 b = __ldg(x + (7 * i + 3) % count);
    const gemv_u32 product = gemv_bf16x2_mul(a | (a << 16), b | (b << 16));
    store_global(y + 2 * i, (gemv_u16)(product & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(product >> 16));
}

// One m16n8k16 per warp: A (16 x 16, row-major) is x[0..256), B (16 x 8, k-major: B[k][c] at
// x[256 + 8k + c]) and C (16 x 8 f32 from the bf16 x[384 + 8r + c]) are gathered into the PTX
// fragments; D is written as f32 bit halves: y[2 (8r + c)] low, y[2 (8r + c) + 1] high. Warp w
// reads from x + 512 w and writes y + 256 w.
GEMV_KERNEL(emu_test_mma, 1024, 1)(EMU_ARGS) {
    const unsigned warp = threadIdx.x / 32;
    const unsigned lane = emu_test::lane();
    const unsigned g = lane / 4, t = lane % 4;
    const gemv_u16* base = x + 512 * warp;
    auto a_at = [&](unsigned r, unsigned c) { return (gemv_u32)__ldg(base + 16 * r + c); };
    auto b_at = [&](unsigned kk, unsigned c) { return (gemv_u32)__ldg(base + 256 + 8 * kk + c); };
    const gemv_u32 a[4] = {a_at(g, 2 * t) | a_at(g, 2 * t + 1) << 16, a_at(g + 8, 2 * t) | a_at(g + 8, 2 * t + 1) << 16,
                           a_at(g, 2 * t + 8) | a_at(g, 2 * t + 9) << 16,
                           a_at(g + 8, 2 * t + 8) | a_at(g + 8, 2 * t + 9) << 16};
    const gemv_u32 b[2] = {b_at(2 * t, g) | b_at(2 * t + 1, g) << 16, b_at(2 * t + 8, g) | b_at(2 * t + 9, g) << 16};
    float c[4];
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned r = g + (e >= 2 ? 8u : 0u), col = 2 * t + e % 2;
        c[e] = __uint_as_float((gemv_u32)__ldg(base + 384 + 8 * r + col) << 16);
    }
    float d[4];
    gemv_mma_bf16_16816(d, a, b, c);
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned r = g + (e >= 2 ? 8u : 0u), col = 2 * t + e % 2;
        const gemv_u32 bits = __float_as_uint(d[e]);
        store_global(y + 256 * warp + 2 * (8 * r + col), (gemv_u16)(bits & 0xFFFFu));
        store_global(y + 256 * warp + 2 * (8 * r + col) + 1, (gemv_u16)(bits >> 16));
    }
}

// Lanes 16..31 shuffle while lanes 0..15 issue an mma: not the same warp instruction.
GEMV_KERNEL(emu_test_mma_divergent, 1024, 1)(EMU_ARGS) {
    const gemv_u32 a[4] = {0u, 0u, 0u, 0u};
    const gemv_u32 b[2] = {0u, 0u};
    const float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (emu_test::lane() < 16) {
        gemv_mma_bf16_16816(d, a, b, c);
    } else {
        d[0] = __shfl_xor_sync(emu_test::kFull, 1.0f, 1);
    }
    emu_test::out(y, m, n, (unsigned)d[0]);
}

// ---- Global memory --------------------------------------------------------------------------

// Lane 0 of every warp writes one element past the end of y (m * n elements).
GEMV_KERNEL(emu_test_write_past_end, 1024, 1)(EMU_ARGS) {
    if (threadIdx.x % 32 == 0) store_global(y + (gemv_u64)m * (gemv_u64)n, (gemv_u16)1);
}

// Reads one byte before the packed buffer.
GEMV_KERNEL(emu_test_read_before_start, 1024, 1)(EMU_ARGS) {
    const gemv_u8 v = __ldg(packed - 1);
    if (threadIdx.x == 0) store_global(y, (gemv_u16)v);
}

// Writes into x, an input.
GEMV_KERNEL(emu_test_write_read_only, 1024, 1)(EMU_ARGS) {
    if (threadIdx.x == 3) store_global(const_cast<gemv_u16*>(x) + 1, (gemv_u16)7);
}

// Reads y, which the launch writes, through the read-only data path.
GEMV_KERNEL(emu_test_ldg_writable, 1024, 1)(EMU_ARGS) {
    const gemv_u16 v = __ldg(y + threadIdx.x % 4);
    emu_test::out(y, m, n, v);
}

// Control: every thread copies an element of x into y through __ldg (must pass).
GEMV_KERNEL(emu_test_copy_x, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    if (i < (unsigned)(m * k) && i < (unsigned)(m * n)) store_global(y + i, __ldg(x + i));
}

// A misaligned 16-byte vector load from x + 1 element.
GEMV_KERNEL(emu_test_misaligned_vector, 1024, 1)(EMU_ARGS) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + 1));
    if (threadIdx.x == 0) store_global(y, (gemv_u16)v.x);
}

// ---- Barriers -------------------------------------------------------------------------------

// Only the first half of the block reaches the barrier; the second half exits.
GEMV_KERNEL(emu_test_divergent_syncthreads, 1024, 1)(EMU_ARGS) {
    if (threadIdx.x < blockDim.x / 2) __syncthreads();
    if (threadIdx.x == 0) store_global(y, (gemv_u16)0);
}

// Lane 5 waits at a barrier while the rest of its warp waits for it at a shuffle.
GEMV_KERNEL(emu_test_deadlock, 1024, 1)(EMU_ARGS) {
    float v = (float)threadIdx.x;
    if (emu_test::lane() == 5) {
        __syncthreads();
    } else {
        v = __shfl_xor_sync(emu_test::kFull, v, 1);
    }
    emu_test::out(y, m, n, (unsigned)v);
}

// ---- Shuffles -------------------------------------------------------------------------------

// Control: a full-warp butterfly sum (must pass; every lane ends with the warp's sum).
GEMV_KERNEL(emu_test_warp_sum, 1024, 1)(EMU_ARGS) {
    unsigned v = emu_test::lane();
    for (int d = 16; d >= 1; d /= 2) v += __shfl_xor_sync(emu_test::kFull, v, d);
    emu_test::out(y, m, n, v);
}

// Every lane shuffles, but the mask names only the low 16 lanes.
GEMV_KERNEL(emu_test_mask_excludes_caller, 1024, 1)(EMU_ARGS) {
    const float v = __shfl_xor_sync(0x0000FFFFu, (float)threadIdx.x, 0);
    emu_test::out(y, m, n, (unsigned)v);
}

// Lanes 0..15 shift down by one with a 16-lane mask: lane 15 reads lane 16, outside the mask.
GEMV_KERNEL(emu_test_reads_outside_mask, 1024, 1)(EMU_ARGS) {
    float v = (float)threadIdx.x;
    if (emu_test::lane() < 16) v = __shfl_down_sync(0x0000FFFFu, v, 1);
    emu_test::out(y, m, n, (unsigned)v);
}

// Control: the same with width 16, so lane 15 keeps its own value (must pass).
GEMV_KERNEL(emu_test_half_warp_down, 1024, 1)(EMU_ARGS) {
    float v = (float)threadIdx.x;
    if (emu_test::lane() < 16) v = __shfl_down_sync(0x0000FFFFu, v, 1, 16);
    emu_test::out(y, m, n, (unsigned)v);
}

// Lane 0 exits; the others shuffle with a full mask.
GEMV_KERNEL(emu_test_exited_lane, 1024, 1)(EMU_ARGS) {
    if (emu_test::lane() == 0) return;
    const float v = __shfl_xor_sync(emu_test::kFull, (float)threadIdx.x, 1);
    emu_test::out(y, m, n, (unsigned)v);
}

// Half a warp calls __shfl_xor_sync, the other half __shfl_down_sync, both with a full mask.
GEMV_KERNEL(emu_test_shuffle_kind_mismatch, 1024, 1)(EMU_ARGS) {
    float v = (float)threadIdx.x;
    if (emu_test::lane() < 16) {
        v = __shfl_xor_sync(emu_test::kFull, v, 1);
    } else {
        v = __shfl_down_sync(emu_test::kFull, v, 1);
    }
    emu_test::out(y, m, n, (unsigned)v);
}

// The same shuffle with width 16 in one half of the warp and 32 in the other.
GEMV_KERNEL(emu_test_shuffle_width_mismatch, 1024, 1)(EMU_ARGS) {
    const float v = __shfl_xor_sync(emu_test::kFull, (float)threadIdx.x, 1, emu_test::lane() < 16 ? 16 : 32);
    emu_test::out(y, m, n, (unsigned)v);
}

// ---- Launch bounds --------------------------------------------------------------------------

// Declared for at most 64 threads per block.
GEMV_KERNEL(emu_test_bounded_64, 64, 1)(EMU_ARGS) {
    emu_test::out(y, m, n, threadIdx.x);
}

// ---- Shared memory --------------------------------------------------------------------------

// Control: a block-wide exchange through shared memory and a barrier (must pass).
GEMV_KERNEL(emu_test_shared_exchange, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(gemv_u16, values, 1024);
    values[threadIdx.x] = (gemv_u16)(threadIdx.x + blockIdx.x);
    __syncthreads();
    const gemv_u16 partner = values[blockDim.x - 1 - threadIdx.x];
    emu_test::out(y, m, n, partner);
}

// The same exchange without the barrier: reading a neighbour's slot races with its write.
GEMV_KERNEL(emu_test_shared_race, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(gemv_u16, values, 1024);
    values[threadIdx.x] = (gemv_u16)threadIdx.x;
    const gemv_u16 left = threadIdx.x > 0 ? (gemv_u16)values[threadIdx.x - 1] : (gemv_u16)0;
    emu_test::out(y, m, n, left);
}

// Each thread stores one float4 (elements 4t..4t+3) and reads element 4(t - 1) + 2, the third
// element of its left neighbour's vector, with no barrier: a race on an element inside a vector,
// not its first. Its control (emu_test_shared_vectors) has the barrier.
GEMV_KERNEL(emu_test_shared_vector_race, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 4 * 1024);
    shared_store<float4>(values, threadIdx.x, float4{1.0f, 2.0f, 3.0f, (float)threadIdx.x});
    const unsigned at = threadIdx.x > 0 ? 4 * (threadIdx.x - 1) + 2 : 2;
    emu_test::out(y, m, n, (unsigned)(float)values[at]);
}

// Every thread writes the same slot with no barrier between the writes.
GEMV_KERNEL(emu_test_shared_write_race, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, slot, 1);
    slot[0] = (float)threadIdx.x;
    __syncthreads();
    emu_test::out(y, m, n, (unsigned)(float)slot[0]);
}

// Reads a slot no thread of the block has written (on a GPU: whatever an earlier block left).
GEMV_KERNEL(emu_test_shared_uninitialised, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 64);
    if (threadIdx.x == 0 && blockIdx.x > 0) values[1] = 1.0f;
    __syncthreads();
    emu_test::out(y, m, n, (unsigned)(float)values[1]);
}

// One element past a 32-element shared array (with a block of more than 32 threads).
GEMV_KERNEL(emu_test_shared_out_of_bounds, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 32);
    values[threadIdx.x] = 1.0f;
    emu_test::out(y, m, n, 0);
}

// A float4 read one vector past a 32-element shared array by thread 3 of block 3 only: the race
// checker tracks the first two blocks of a launch, the bounds are checked in every block. A grid
// of three blocks is the control.
GEMV_KERNEL(emu_test_shared_out_of_bounds_in_block_3, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 32);
    if (threadIdx.x < 8) shared_store<float4>(values, threadIdx.x, float4{1.0f, 2.0f, 3.0f, 4.0f});
    __syncthreads();
    const unsigned vector = threadIdx.x % 8 + (blockIdx.x == 3 && threadIdx.x == 3 ? 8 : 0);
    const float4 v = shared_load<float4>(values, vector);
    emu_test::out(y, m, n, (unsigned)(v.x + v.w));
}

// More static shared memory than a block may have (48 KiB + 4 bytes).
GEMV_KERNEL(emu_test_shared_too_large, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 12 * 1024 + 1);
    values[threadIdx.x] = 1.0f;
    emu_test::out(y, m, n, 0);
}

// Control: vector stores and loads in shared memory, with the barrier (must pass).
GEMV_KERNEL(emu_test_shared_vectors, 1024, 1)(EMU_ARGS) {
    GEMV_SHARED(float, values, 1024);
    if (threadIdx.x < 256) shared_store<float4>(values, threadIdx.x, float4{1.0f, 2.0f, 3.0f, (float)threadIdx.x});
    __syncthreads();
    const float4 v = shared_load<float4>(values, (threadIdx.x + 1) % 256);
    emu_test::out(y, m, n, (unsigned)(v.x + v.y + v.z + v.w));
}

// ---- Local arrays (caught by the sanitized build only) -----------------------------------------

// Fills a thread's local array of 4 with 0, 1, .., count - 1 and writes their sum to y[0]. A count
// past 4 writes past the array: the emulator cannot see it (a thread's locals are host stack), g++'s
// UndefinedBehaviorSanitizer can. The count is a kernel argument, so no compiler can drop the
// write at compile time.
__device__ __noinline__ void emu_test_fill_local(gemv_u16* y, int count) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < count; ++i) acc[i] = (float)i;
    const float sum = acc[0] + acc[1] + acc[2] + acc[3];
    if (emu_test::global_thread() == 0) store_global(y, (gemv_u16)sum);
}

// Control: count = k / 8 = 4 with the tests' K = 32, every write inside the array (must pass).
GEMV_KERNEL(emu_test_local_array_filled, 1024, 1)(EMU_ARGS) { emu_test_fill_local(y, k / 8); }

// One past the array: count = k / 8 + 1, the kernel mutants' `t < MAX_M` to `t <= MAX_M`.
GEMV_KERNEL(emu_test_local_array_one_past, 1024, 1)(EMU_ARGS) { emu_test_fill_local(y, k / 8 + 1); }

// ---- Bit and half-precision primitives -----------------------------------------------------

// y[2i], y[2i+1] = the low / high half of hmul2((x[i], x[i]), (x[j], x[j])), j = (7 i + 3) % (m k):
// binary16 products of every pair of inputs the test chooses.
GEMV_KERNEL(emu_test_hmul2, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    const unsigned count = (unsigned)(m * k);
    if (i >= count || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 a = __ldg(x + i);
    const gemv_u32 b = __ldg(x + (7 * i + 3) % count);
    const gemv_u32 product = gemv_hmul2(a | (a << 16), b | (b << 16));
    store_global(y + 2 * i, (gemv_u16)(product & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(product >> 16));
}

// y[2i] = the low half of hmul2_by_lo((x[i], c), (x[j], d)), y[2i+1] = the high half of
// hmul2_by_hi((c, x[i]), (d, x[j])), j as above and c, d other inputs: both are x[i] * x[j], the
// other halves ignored.
GEMV_KERNEL(emu_test_hmul2_broadcast, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    const unsigned count = (unsigned)(m * k);
    if (i >= count || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 a = __ldg(x + i);
    const gemv_u32 b = __ldg(x + (7 * i + 3) % count);
    const gemv_u32 c = __ldg(x + (i + 1) % count);
    const gemv_u32 d = __ldg(x + (i + 5) % count);
    store_global(y + 2 * i, (gemv_u16)(gemv_hmul2_by_lo(a | (c << 16), b | (d << 16)) & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(gemv_hmul2_by_hi(c | (a << 16), d | (b << 16)) >> 16));
}

// y[2i], y[2i+1] = the low / high half of cvt.rn.f16x2.e4m3x2 of x[i] (its two bytes).
GEMV_KERNEL(emu_test_e4m3x2_to_f16x2, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    if (i >= (unsigned)(m * k) || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 pair = gemv_e4m3x2_to_f16x2((gemv_u32)__ldg(x + i) | 0xABCD0000u);  // high bits ignored
    store_global(y + 2 * i, (gemv_u16)(pair & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(pair >> 16));
}

// y[2i], y[2i+1] = the low / high 16 bits of the f32 that cvt.f32.f16 gives for x[i].
GEMV_KERNEL(emu_test_half_to_float, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    if (i >= (unsigned)(m * k) || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 bits = __float_as_uint(gemv_half_hi((gemv_u32)__ldg(x + i) << 16));
    store_global(y + 2 * i, (gemv_u16)(bits & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(bits >> 16));
}

// y[6i..6i+6) = __fmaf_rn(a, b, c), __fadd_rn(a, b), __fmul_rn(a, b) as f32 bits, low half first;
// a, b and c the f32s whose halves are x[6i..6i+6), low half first.
GEMV_KERNEL(emu_test_f32_arithmetic, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    if (6 * i + 5 >= (unsigned)(m * k) || 6 * i + 5 >= (unsigned)(m * n)) return;
    float v[3];
    for (int j = 0; j < 3; ++j) {
        v[j] = __uint_as_float((gemv_u32)__ldg(x + 6 * i + 2 * j) | ((gemv_u32)__ldg(x + 6 * i + 2 * j + 1) << 16));
    }
    const float results[3] = {__fmaf_rn(v[0], v[1], v[2]), __fadd_rn(v[0], v[1]), __fmul_rn(v[0], v[1])};
    for (int j = 0; j < 3; ++j) {
        const gemv_u32 bits = __float_as_uint(results[j]);
        store_global(y + 6 * i + 2 * j, (gemv_u16)(bits & 0xFFFFu));
        store_global(y + 6 * i + 2 * j + 1, (gemv_u16)(bits >> 16));
    }
}

// y[2i], y[2i+1] = prmt(a, b, selector) for a, b and a selector (any nibbles: sign replication
// included) drawn from x.
GEMV_KERNEL(emu_test_prmt, 1024, 1)(EMU_ARGS) {
    const unsigned i = emu_test::global_thread();
    const unsigned count = (unsigned)(m * k);
    if (i + 5 >= count || 2 * i + 1 >= (unsigned)(m * n)) return;
    const gemv_u32 a = (gemv_u32)__ldg(x + i) | ((gemv_u32)__ldg(x + i + 1) << 16);
    const gemv_u32 b = (gemv_u32)__ldg(x + i + 2) | ((gemv_u32)__ldg(x + i + 3) << 16);
    const gemv_u32 selector = (gemv_u32)__ldg(x + i + 4);
    const gemv_u32 d = gemv_prmt(a, b, selector);
    store_global(y + 2 * i, (gemv_u16)(d & 0xFFFFu));
    store_global(y + 2 * i + 1, (gemv_u16)(d >> 16));
}

// A prefetch one byte past the packed weights.
GEMV_KERNEL(emu_test_prefetch_past_end, 1024, 1)(EMU_ARGS) {
    gemv_prefetch_l2(packed + (gemv_u64)n * (gemv_u64)(k / 2));
    emu_test::out(y, m, n, 0);
}

// Control: a prefetch inside the packed weights (must pass).
GEMV_KERNEL(emu_test_prefetch_inside, 1024, 1)(EMU_ARGS) {
    gemv_prefetch_l2(packed + threadIdx.x % 16);
    emu_test::out(y, m, n, 0);
}

// ---- Streaming loads ---------------------------------------------------------------------------

// Thread i reads the 16 bytes of X from `skip` + 8i elements (`skip` the first 16-byte aligned
// element, or one past it for the misaligned fault) with gemv_load_stream16 and one 4-byte word of
// them with a scalar ld.global.nc, and writes the eight elements to y[8i..8i+8] and the word's
// low half to y[8T + i] (T the threads); from y when FROM_Y (the read-only path on a written
// region).
template <bool MISALIGNED, bool FROM_Y>
__device__ __forceinline__ void stream_load(const gemv_u16* x, gemv_u16* y, int m, int n, int k) {
    const unsigned i = emu_test::global_thread();
    const unsigned threads = gridDim.x * blockDim.x;
    const gemv_u64 address = (gemv_u64)x;
    const unsigned skip = (unsigned)(((16u - (address & 15u)) & 15u) / 2u) + (MISALIGNED ? 2u : 0u);
    if (skip + 8 * (i + 1) > (unsigned)(m * k) || 8 * threads + i >= (unsigned)(m * n)) return;
    const gemv_u16* from = FROM_Y ? y : x + skip + 8 * i;
    const uint4 v = gemv_load_stream16(from);
    gemv_u32 word;
    asm volatile("ld.global.nc.L1::evict_first.L2::128B.u32 %0, [%1+4];" : "=r"(word) : "l"(from));
    const gemv_u32 words[4] = {v.x, v.y, v.z, v.w};
    for (int w = 0; w < 4; ++w) {
        store_global(y + 8 * i + 2 * w, (gemv_u16)(words[w] & 0xFFFFu));
        store_global(y + 8 * i + 2 * w + 1, (gemv_u16)(words[w] >> 16));
    }
    store_global(y + 8 * threads + i, (gemv_u16)(word & 0xFFFFu));
}
GEMV_KERNEL(emu_test_stream_load, 1024, 1)(EMU_ARGS) {
    stream_load<false, false>(x, y, m, n, k);
}
GEMV_KERNEL(emu_test_stream_load_misaligned, 1024, 1)(EMU_ARGS) {
    stream_load<true, false>(x, y, m, n, k);
}
GEMV_KERNEL(emu_test_stream_load_writable, 1024, 1)(EMU_ARGS) {
    stream_load<false, true>(x, y, m, n, k);
}

#define GEMV_TEST_KERNELS(X)                   \
    X(emu_test_write_past_end, 1, 1)           \
    X(emu_test_read_before_start, 1, 1)        \
    X(emu_test_write_read_only, 1, 1)          \
    X(emu_test_ldg_writable, 1, 1)             \
    X(emu_test_copy_x, 1, 1)                   \
    X(emu_test_misaligned_vector, 1, 1)        \
    X(emu_test_divergent_syncthreads, 1, 1)    \
    X(emu_test_deadlock, 1, 1)                 \
    X(emu_test_warp_sum, 1, 1)                 \
    X(emu_test_mask_excludes_caller, 1, 1)     \
    X(emu_test_reads_outside_mask, 1, 1)       \
    X(emu_test_half_warp_down, 1, 1)           \
    X(emu_test_exited_lane, 1, 1)              \
    X(emu_test_shuffle_kind_mismatch, 1, 1)    \
    X(emu_test_shuffle_width_mismatch, 1, 1)   \
    X(emu_test_bounded_64, 1, 1)               \
    X(emu_test_shared_exchange, 1, 1)          \
    X(emu_test_shared_race, 1, 1)              \
    X(emu_test_shared_vector_race, 1, 1)       \
    X(emu_test_shared_write_race, 1, 1)        \
    X(emu_test_shared_uninitialised, 1, 1)     \
    X(emu_test_shared_out_of_bounds, 1, 1)     \
    X(emu_test_shared_out_of_bounds_in_block_3, 1, 1) \
    X(emu_test_shared_too_large, 1, 1)         \
    X(emu_test_shared_vectors, 1, 1)           \
    X(emu_test_local_array_filled, 1, 1)       \
    X(emu_test_local_array_one_past, 1, 1)     \
    X(emu_test_hmul2, 1, 1)                    \
    X(emu_test_hmul2_broadcast, 1, 1)          \
    X(emu_test_e4m3x2_to_f16x2, 1, 1)          \
    X(emu_test_bf16x2_mul, 1, 1)               \
    X(emu_test_mma, 1, 1)                      \
    X(emu_test_mma_divergent, 1, 1)            \
    X(emu_test_half_to_float, 1, 1)            \
    X(emu_test_f32_arithmetic, 1, 1)           \
    X(emu_test_prmt, 1, 1)                     \
    X(emu_test_prefetch_past_end, 1, 1)        \
    X(emu_test_prefetch_inside, 1, 1)          \
    X(emu_test_stream_load, 1, 1)              \
    X(emu_test_stream_load_misaligned, 1, 1)   \
    X(emu_test_stream_load_writable, 1, 1)
