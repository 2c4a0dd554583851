// What the kernels need from the platform, for nvcc and for the host emulator (g++).
//
// - GEMV_KERNEL(name, max_threads, min_blocks): declares an `extern "C"` entry point with its
//   launch bounds (nvcc: __launch_bounds__, which also caps registers so that min_blocks blocks
//   fit an SM; the emulator records max_threads and refuses a launch over it).
// - Global memory: loads through __ldg (read-only data: never memory the launch writes), stores
//   through store_global. On the GPU they are plain accesses; under the emulator they are
//   bounds-, alignment- and permission-checked against the launch's buffers.
// - Shared memory: GEMV_SHARED(T, name, count) declares a block-shared array; `name[i]` reads and
//   writes elements, shared_load<V>(name, i) / shared_store<V>(name, i, v) move the i-th V-sized
//   vector. The emulator bounds-checks every access, poisons the array at every block start,
//   refuses reads of elements not yet written in the block, and reports two threads touching
//   the same byte (at least one writing) with no __syncthreads between them.
// - Bit and half-precision primitives, with the PTX semantics the emulator reproduces exactly:
//   gemv_prmt (prmt.b32 in its default mode, sign replication included), gemv_hmul2
//   (mul.rn.f16x2: IEEE binary16, round to nearest even, subnormals kept, NaN results canonical),
//   gemv_half_lo/hi (cvt.f32.f16, exact), gemv_prefetch_l2 (prefetch.global.L2; the emulator
//   checks the address like a read), gemv_load_stream16 (16 bytes read once through the read-only
//   path without allocating in L1: ld.global.nc.L1::no_allocate.v4.u32; the emulator checks it
//   like __ldg), and __syncthreads_or.
// - Scales on sm_89 and newer (only the exact family's GEMV_SCALES_BY_CVT build uses them):
//   gemv_e4m3x2_to_f16x2 (cvt.rn.f16x2.e4m3x2: the E4M3 codes in bits 0..7 and 8..15 become the
//   low and high binary16, exactly; NaN codes give NaN) and gemv_hmul2_by_lo / _by_hi (mul.rn.f16x2
//   with the low / high half of the second operand in both lanes).
// - Asynchronous copies on sm_80 and newer: gemv_shared_address(array, i) (the shared address of
//   an element), gemv_cp_async16 / _partial, gemv_cp_async_commit, gemv_cp_async_wait<N>; on
//   sm_90 and newer, mbarriers (gemv_mbarrier_init / _arrive / _arrive_expect_tx /
//   _try_wait_parity / _wait_parity), gemv_bulk_copy and gemv_fence_proxy_async; programmatic
//   dependent launch (gemv_launch_dependents, gemv_grid_dependency_wait; the kernels call them
//   through GEMV_ALLOW_DEPENDENTS and GEMV_AWAIT_INPUTS, which only the GEMV_DEPENDENT_LAUNCH
//   builds compile in); gemv_elect_one; global atomics (gemv_atomic_add, gemv_reduce_add).
// - GEMV_ENTRY_NAME(name): an entry point's name. The emulator links both builds of the exact
//   family into one library and names the sm_89 build's entries with a suffix
//   (GEMV_ENTRY_SUFFIX); the GPU modules keep the plain names.
// - gemv_note_fallback(): nothing on the GPU; under the emulator it counts one block that left
//   its kernel's fast path for a slower one (the exact family's plain path), so a test can prove
//   the fast path serves ordinary inputs: a fault that pushes every block onto the fallback still
//   gives the right bits there.
// - gemv_poison(v): nothing on the GPU; under the emulator it fills the local `v` with all-ones
//   bytes (NaN as f32, bf16 and f16), so a field the code forgets to write before it is used
//   turns results into NaN, as a GPU register holding NaN would, instead of reading the benign
//   stack garbage g++ usually leaves there.
// - Tensor-core primitives (sm_80 and newer; only the fast family's module uses them):
//   gemv_bf16x2_mul (fma.rn.bf16x2 with a -0.0 addend: two bf16 products, each rounded once) and
//   gemv_mma_bf16_16816 (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32). The emulator runs
//   the mma as a warp collective with the PTX fragment layouts and one documented accumulation
//   order (docs/emulator.md).
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

#ifdef GEMV_ENTRY_SUFFIX
#define GEMV_PASTE_(a, b) a##b
#define GEMV_PASTE(a, b) GEMV_PASTE_(a, b)
#define GEMV_ENTRY_NAME(name) GEMV_PASTE(name, GEMV_ENTRY_SUFFIX)
#else
#define GEMV_ENTRY_NAME(name) name
#endif

#ifdef GEMV_EMULATOR
#include "cuda_emu.h"  // gemv-cuda's emulator, on the include path of its build
#else
#define GEMV_KERNEL(name, max_threads, min_blocks) \
    extern "C" __global__ void __launch_bounds__(max_threads, min_blocks) name

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

template <class T>
__device__ __forceinline__ void gemv_poison(T&) {}

__device__ __forceinline__ void gemv_note_fallback() {}

template <class V, class T, int N>
__device__ __forceinline__ V shared_load(const GemvShared<T, N>& array, int index) {
    return reinterpret_cast<const V*>(array.data)[index];
}

template <class V, class T, int N>
__device__ __forceinline__ void shared_store(GemvShared<T, N>& array, int index, V value) {
    reinterpret_cast<V*>(array.data)[index] = value;
}

template <class T, int N>
__device__ __forceinline__ gemv_u32 gemv_shared_address(const GemvShared<T, N>& array, int index) {
    return (gemv_u32)__cvta_generic_to_shared(array.data + index);
}
#endif

// ---- Inline-PTX primitives: the same text for nvcc and for the emulator, whose executor runs it.

// A hint to bring the cache line holding `p` into L2 (the memory it names must be a launch input).
__device__ __forceinline__ void gemv_prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// 16 bytes at `p` (16-byte aligned, memory the launch never writes) for data read once, such as
// weights streamed through: the read-only path, and no L1 line allocated (nothing the block
// re-reads is evicted by it). `volatile` keeps the loads in program order, so a batch of them is
// issued before the first use.
__device__ __forceinline__ uint4 gemv_load_stream16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(__cvta_generic_to_global(p)));
    return v;
}

// Asynchronous copies (sm_80 and newer): 16 bytes from global `src` to the shared address `dst`
// (gemv_shared_address), bypassing L1; `src_bytes` (0..16) of them read and the rest zeroed in
// the _partial form. A copy lands at an unknown time until gemv_cp_async_wait<N>() completes its
// group (all but the N most recent groups gemv_cp_async_commit() closed); other threads see it
// after a __syncthreads that follows the wait. The emulator poisons the destination and refuses
// any access to it while the copy is in flight.
__device__ __forceinline__ void gemv_cp_async16(gemv_u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(__cvta_generic_to_global(src))
                 : "memory");
}
__device__ __forceinline__ void gemv_cp_async16_partial(gemv_u32 dst, const void* src, gemv_u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(__cvta_generic_to_global(src)),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void gemv_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void gemv_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// mbarriers and bulk copies (sm_90 and newer). An mbarrier is an 8-byte element of a shared
// array (GEMV_SHARED(gemv_u64, ...)), named by its shared address; its phase completes when its
// count of arrivals and the transaction bytes announced by arrive_expect_tx have all come. A
// bulk copy moves `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to
// shared and completes them on the mbarrier; threads that see the phase complete
// (gemv_mbarrier_wait_parity with the phase's parity, 0 for its first phase) see the data.
// gemv_fence_proxy_async orders the initialising thread's writes before the copies use the
// mbarrier. The emulator poisons a bulk copy's destination until a thread waits on its
// mbarrier, and reports a phase that can never complete as a deadlock.
__device__ __forceinline__ void gemv_mbarrier_init(gemv_u32 mbarrier, gemv_u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mbarrier), "r"(count) : "memory");
}
__device__ __forceinline__ gemv_u64 gemv_mbarrier_arrive(gemv_u32 mbarrier) {
    gemv_u64 state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(mbarrier) : "memory");
    return state;
}
__device__ __forceinline__ gemv_u64 gemv_mbarrier_arrive_expect_tx(gemv_u32 mbarrier, gemv_u32 bytes) {
    gemv_u64 state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state)
                 : "r"(mbarrier), "r"(bytes)
                 : "memory");
    return state;
}
__device__ __forceinline__ bool gemv_mbarrier_try_wait_parity(gemv_u32 mbarrier, gemv_u32 parity) {
    gemv_u32 done;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(mbarrier), "r"(parity)
        : "memory");
    return done != 0;
}
__device__ __forceinline__ void gemv_mbarrier_wait_parity(gemv_u32 mbarrier, gemv_u32 parity) {
    while (!gemv_mbarrier_try_wait_parity(mbarrier, parity)) {
    }
}
__device__ __forceinline__ void gemv_bulk_copy(gemv_u32 dst, const void* src, gemv_u32 bytes, gemv_u32 mbarrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(mbarrier)
                 : "memory");
}
__device__ __forceinline__ void gemv_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Programmatic dependent launch (sm_90 and newer): gemv_launch_dependents lets the next kernel
// start its prologue; gemv_grid_dependency_wait waits until the previous kernel has finished and
// its writes are visible. A kernel launched as a dependent reads weights before the wait and X
// (and writes Y) only after it; the emulator refuses X reads and Y writes before it in such a
// launch. In a launch without the attribute both return at once.
__device__ __forceinline__ void gemv_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void gemv_grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// A kernel's side of programmatic dependent launch, compiled in only by the builds for it
// (GEMV_DEPENDENT_LAUNCH, sm_90 and newer): GEMV_ALLOW_DEPENDENTS() at the kernel's start lets
// the next kernel's blocks launch while this one runs (they stream their weights, then wait);
// GEMV_AWAIT_INPUTS() before the first read of anything a previous kernel may write (X, the
// routing) and the first write of what it may still read (Y). Weights, scales and global scales
// may be read before it. A thread may wait more than once: later waits return at once. Other
// builds compile both to nothing. Macros, not functions: the emulator links every build into one
// library, so code that differs between builds lives in each build's own namespace.
#ifdef GEMV_DEPENDENT_LAUNCH
#define GEMV_ALLOW_DEPENDENTS() gemv_launch_dependents()
#define GEMV_AWAIT_INPUTS() gemv_grid_dependency_wait()
#else
#define GEMV_ALLOW_DEPENDENTS() ((void)0)
#define GEMV_AWAIT_INPUTS() ((void)0)
#endif

// elect.sync (sm_90 and newer): true in exactly one lane of the full warp, the lowest, which
// every lane must reach (a warp collective, like a shuffle).
__device__ __forceinline__ bool gemv_elect_one() {
    gemv_u32 elected;
    asm volatile("{ .reg .pred p; elect.sync _|p, 0xFFFFFFFF; selp.u32 %0, 1, 0, p; }" : "=r"(elected));
    return elected != 0;
}

// Global atomics (tickets and counters of a persistent grid): gemv_atomic_add returns the word
// before the add, gemv_reduce_add returns nothing.
__device__ __forceinline__ gemv_u32 gemv_atomic_add(gemv_u32* p, gemv_u32 value) {
    gemv_u32 before;
    asm volatile("atom.global.add.u32 %0, [%1], %2;"
                 : "=r"(before)
                 : "l"(__cvta_generic_to_global(p)), "r"(value)
                 : "memory");
    return before;
}
__device__ __forceinline__ void gemv_reduce_add(gemv_u32* p, gemv_u32 value) {
    asm volatile("red.global.add.u32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(value) : "memory");
}

// Byte permute: result byte i = byte (selector >> 4i) & 7 of {a (bytes 0..3), b (bytes 4..7)}.
__device__ __forceinline__ gemv_u32 gemv_prmt(gemv_u32 a, gemv_u32 b, gemv_u32 selector) {
    gemv_u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

// Two binary16 products, each rounded to nearest even (subnormals kept).
__device__ __forceinline__ gemv_u32 gemv_hmul2(gemv_u32 a, gemv_u32 b) {
    gemv_u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// Two E4M3 codes (bits 0..7 and 8..15 of `codes`) as the binary16 pair (e4m3 lo, e4m3 hi). sm_89+.
__device__ __forceinline__ gemv_u32 gemv_e4m3x2_to_f16x2(gemv_u32 codes) {
    gemv_u32 d;
    asm("{ .reg .b16 c; cvt.u16.u32 c, %1; cvt.rn.f16x2.e4m3x2 %0, c; }" : "=r"(d) : "r"(codes));
    return d;
}

// a * (b.lo, b.lo) and a * (b.hi, b.hi), two binary16 products each rounded to nearest even.
__device__ __forceinline__ gemv_u32 gemv_hmul2_by_lo(gemv_u32 a, gemv_u32 b) {
    gemv_u32 d;
    asm("{ .reg .b16 lo, hi; .reg .b32 t; mov.b32 {lo, hi}, %2; mov.b32 t, {lo, lo}; mul.rn.f16x2 %0, %1, t; }"
        : "=r"(d)
        : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ gemv_u32 gemv_hmul2_by_hi(gemv_u32 a, gemv_u32 b) {
    gemv_u32 d;
    asm("{ .reg .b16 lo, hi; .reg .b32 t; mov.b32 {lo, hi}, %2; mov.b32 t, {hi, hi}; mul.rn.f16x2 %0, %1, t; }"
        : "=r"(d)
        : "r"(a), "r"(b));
    return d;
}

// The low / high binary16 of a pair as f32 (exact).
__device__ __forceinline__ float gemv_half_lo(gemv_u32 pair) {
    float f;
    asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(pair));
    return f;
}
__device__ __forceinline__ float gemv_half_hi(gemv_u32 pair) {
    float f;
    asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, hi; }" : "=f"(f) : "r"(pair));
    return f;
}

// Two bf16 products (a.lo * b.lo, a.hi * b.hi), each rounded to nearest even once. sm_80+.
__device__ __forceinline__ gemv_u32 gemv_bf16x2_mul(gemv_u32 a, gemv_u32 b) {
    gemv_u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// D = A x B + C on the tensor cores, one 16 x 8 x 16 tile per warp (PTX fragment layouts). sm_80+.
__device__ __forceinline__ void gemv_mma_bf16_16816(float (&d)[4], const gemv_u32 (&a)[4], const gemv_u32 (&b)[2],
                                                    const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

// `cargo xtask sass` compiles a kernel source a second time with GEMV_SASS_COMMON_PATH to count
// the instructions of its common path (aligned buffers, whole passes or chunks, every token
// live): the conditions that pick the other paths become constants there, so the hot loop holds
// only what that path executes. Shipped PTX never defines it.
#ifdef GEMV_SASS_COMMON_PATH
#define GEMV_ON_COMMON_PATH(condition, common) (common)
// The paths a constant condition rules out are unreachable there, on purpose (#128: "loop is not
// reachable").
#pragma nv_diag_suppress 128
#else
#define GEMV_ON_COMMON_PATH(condition, common) (condition)
#endif

// f32 -> bf16 bits, round to nearest even; every NaN becomes 0x7FC0.
__device__ __forceinline__ gemv_u16 gemv_f32_to_bf16(float value) {
    const gemv_u32 bits = __float_as_uint(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (gemv_u16)0x7FC0u;
    return (gemv_u16)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// f32 -> an f32 Y element: the value itself, every NaN as 0x7FC00000 (which rounds to bf16 0x7FC0).
__device__ __forceinline__ float gemv_f32_y(float value) {
    return (__float_as_uint(value) & 0x7FFFFFFFu) > 0x7F800000u ? __uint_as_float(0x7FC00000u) : value;
}
