// The CUDA surface the kernels use, for g++: compile a .cu as C++ with -DGEMV_EMULATOR and
// the kernels run on the CPU under the SIMT emulator of this folder (docs/emulator.md).
//
// Each CUDA thread is a fiber; a block's threads are scheduled round-robin in a fixed order
// (forward or reversed thread index), deterministically. Shuffles and __syncthreads are the only
// points where a fiber waits. Every global access goes through __ldg / store_global and every
// shared access through GemvShared, and each is checked (docs/emulator.md lists the checks).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ptx_exec.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
// Kernels declare their bound with GEMV_KERNEL(name, max_threads), which the emulator records;
// a bare __launch_bounds__ would be silently unchecked here, so it does not compile.
#define __launch_bounds__(...) GEMV_USE_GEMV_KERNEL_TO_DECLARE_LAUNCH_BOUNDS
// Shared memory is declared with GEMV_SHARED so that every access is checked.
#define __shared__ GEMV_USE_GEMV_SHARED_TO_DECLARE_SHARED_MEMORY

// (Two levels, so that a name built by GEMV_ENTRY_NAME is expanded before it is pasted.)
#define GEMV_KERNEL(name, max_threads, min_blocks) GEMV_KERNEL_(name, max_threads, min_blocks)
#define GEMV_KERNEL_(name, max_threads, min_blocks)             \
    constexpr unsigned emu_launch_bound_##name = (max_threads); \
    extern "C" void name

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

// How a kernel touches global memory: a load through the read-only data path (__ldg, which must
// not see a writable region), a store, or an L2 prefetch (checked like a load, not counted).
enum class Access { Load, Store, Prefetch };
// Checks [p, p + size) against the launch's regions and counts loads and stores by width;
// reports and never returns on a fault.
void check_access(const void* p, size_t size, size_t align, Access access);

enum class ShuffleKind { Index, Up, Down, Xor, Mma, Elect };
// The value of `value` in the lane the shuffle selects; checks mask, kind and width agreement.
unsigned shuffle(ShuffleKind kind, unsigned mask, unsigned value, int lane_arg, int width);
void sync_threads();
// The words one lane contributes to an mma.sync.m16n8k16 (A: 4 registers, B: 2).
constexpr unsigned kMmaWords = 6;
// The warp-collective half of mma.sync: every lane of the warp must call it (a full mask, like
// `.aligned`), none may be calling a shuffle instead; returns every lane's words.
void mma_exchange(const unsigned (&mine)[kMmaWords], unsigned (&all)[32][kMmaWords]);
// elect.sync: every lane of `mask` (which must hold the caller) meets, as in a shuffle; returns
// the elected lane, the lowest of the mask.
unsigned elect_sync(unsigned mask);
// A barrier that also returns whether any thread of the block passed a non-zero predicate.
int sync_threads_or(int predicate);
unsigned lane_id();

// Counts one block of the launch that took its kernel's fallback path.
void note_fallback();

// A primitive used in a way the emulator does not model: reported as a fault.
[[noreturn]] void unsupported(const char* what);
// A test kernel's own check failed (the emulator's tests only): reported as a fault.
[[noreturn]] void test_failure(const char* what);

// Shared memory: the block's allocation for the declaration `tag` (created, poisoned, on the
// first execution in a block), and the check of one access to it.
struct SharedHandle {
    unsigned char* base;
    unsigned decl;
    bool tracked;  // the block's accesses are race- and initialisation-checked (shared_check)
};
SharedHandle shared_alloc(const void* tag, const char* name, size_t bytes, size_t count);
// The shared address (as __cvta_generic_to_shared gives it: an offset in the block's shared
// window) of `p`, a byte of a shared array.
unsigned shared_address_of(const unsigned char* p);

// cp.async and its groups (async_copies.cpp), for the PTX executor: a copy of `bytes` (4, 8 or
// 16) from global `src` (of which `src_bytes` are read, the rest zeroed) to the shared address
// `dst`, in flight until a wait completes it; the destination reads as poison meanwhile, and in
// a tracked block any access to it is a fault. commit closes the thread's uncommitted copies
// into a group; wait completes all but the `pending` most recent groups (and no uncommitted
// copy).
void async_copy(unsigned dst, const void* src, unsigned bytes, unsigned src_bytes);
void async_commit();
void async_wait(unsigned long long pending);

// mbarriers and cp.async.bulk (mbarriers.cpp), for the PTX executor: init, arrive (with the
// transaction bytes the phase also waits for; returns the phase as its state), try_wait on a
// phase parity (false after giving the block's other threads a turn), and a bulk copy that
// lands, completing its bytes on the mbarrier, when a thread waits on it.
void mbarrier_init(unsigned address, unsigned count);
unsigned long long mbarrier_arrive(unsigned address, unsigned long long expect_tx);
bool mbarrier_try_wait_parity(unsigned address, unsigned parity);
// fence.proxy.async: the calling thread's mbarrier inits become visible to bulk copies.
void fence_proxy_async();
void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned address);

// Grid dependencies and global atomics (grid.cpp), for the PTX executor. In a launch made as a
// programmatic dependent of the previous kernel, X and a grouped launch's routing (its outputs)
// may be read and Y (which it may still read) written only after the thread's
// griddepcontrol.wait; launch_dependents changes nothing here. atomic_add adds `value` to the
// 4-byte word at `p` of a writable launch buffer and returns the word before.
void grid_dependency_wait();
unsigned atomic_add(void* p, unsigned value);
// Faults on an access out of bounds and, in a tracked block, on a race or an uninitialised read.
// GemvShared calls it only where it has something to find: an index out of bounds, or any
// access of a tracked block, so the common access stays inline (docs/emulator.md).
void shared_check(unsigned decl, long long element, size_t element_size, size_t count, size_t vector_size,
                  bool write);

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

// Fused multiply-add with one rounding, as on the GPU (g++ does not contract a + b * c). A NaN
// result is the GPU's one f32 NaN, 0x7FFFFFFF, with no payload: x86 gives 0xFFC00000 for an
// invalid operation and passes an input NaN's payload on, whose bit 0 is clear in every NaN
// the kernels can make, so a test of NaN bits that works only there would pass here.
inline float __fmaf_rn(float a, float b, float c) {
    const float r = std::fma(a, b, c);
    return r != r ? __uint_as_float(0x7FFFFFFFu) : r;
}
// f32 add and multiply, round to nearest, with the GPU's one NaN as __fmaf_rn. The kernels do
// every f32 add and multiply through these (a plain + or * would run as x86 arithmetic here).
inline float __fadd_rn(float a, float b) {
    const float r = a + b;
    return r != r ? __uint_as_float(0x7FFFFFFFu) : r;
}
inline float __fmul_rn(float a, float b) {
    const float r = a * b;
    return r != r ? __uint_as_float(0x7FFFFFFFu) : r;
}

template <class T>
inline T __ldg(const T* p) {
    emu::check_access(p, sizeof(T), alignof(T), emu::Access::Load);
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

template <class T>
inline void store_global(T* p, typename gemv_identity<T>::type v) {
    emu::check_access(p, sizeof(T), alignof(T), emu::Access::Store);
    std::memcpy(p, &v, sizeof v);
}

inline void __syncthreads() {
    emu::sync_threads();
}

// Fills a local with all-ones bytes (NaN in every float format the kernels use): a field left
// unwritten then poisons the results it reaches (see gemv_portable.cuh).
template <class T>
inline void gemv_poison(T& value) {
    std::memset(static_cast<void*>(&value), 0xFF, sizeof(T));
}

// One block left the fast path: counted per launch (the calling thread is the block's thread 0).
inline void gemv_note_fallback() {
    emu::note_fallback();
}

inline int __syncthreads_or(int predicate) {
    return emu::sync_threads_or(predicate);
}

// ---- The inline-PTX primitives' C++ oracles --------------------------------------------------
//
// The kernels' asm statements run on the PTX executor (ptx_exec.h); these C++ functions compute
// what each wrapper of gemv_portable.cuh must return, and the emulator's tests hold the executor
// to them (emu_test_asm_oracle in test_kernels.cu). They never stand in for the asm.

namespace emu {
namespace oracle {
// prmt.b32 in its default mode: result byte i is byte (nibble i & 7) of {a, b}, or, where the
// selector nibble has bit 3 set, that byte's sign bit replicated (0x00 or 0xFF).
inline gemv_u32 prmt(gemv_u32 a, gemv_u32 b, gemv_u32 selector) {
    const gemv_u64 bytes = (gemv_u64)a | ((gemv_u64)b << 32);
    gemv_u32 d = 0;
    for (int i = 0; i < 4; ++i) {
        const gemv_u32 nibble = (selector >> (4 * i)) & 0xFu;
        gemv_u32 byte = (gemv_u32)((bytes >> (8 * (nibble & 7u))) & 0xFFu);
        if (nibble & 8u) byte = (byte & 0x80u) ? 0xFFu : 0x00u;
        d |= byte << (8 * i);
    }
    return d;
}
}  // namespace oracle

// IEEE binary16 bits to f32, exactly (subnormals, infinities and NaN included).
inline float half_to_float_slow(gemv_u32 h) {
    const gemv_u32 sign = (h & 0x8000u) << 16;
    const gemv_u32 exponent = (h >> 10) & 0x1Fu;
    const gemv_u32 mantissa = h & 0x3FFu;
    float magnitude;
    if (exponent == 0) {
        magnitude = (float)mantissa * 0x1p-24f;  // exact: at most 10 bits
    } else if (exponent == 31) {
        magnitude = mantissa ? __uint_as_float(0x7FC00000u) : __uint_as_float(0x7F800000u);
    } else {
        magnitude = __uint_as_float(((exponent + 112u) << 23) | (mantissa << 13));
    }
    return __uint_as_float(__float_as_uint(magnitude) | sign);
}

// The same through a table of all 65,536 values (built once; the kernels convert per weight).
inline float half_to_float(gemv_u32 h) {
    static const float* const table = [] {
        float* values = new float[65536];
        for (gemv_u32 i = 0; i < 65536; ++i) values[i] = half_to_float_slow(i);
        return values;
    }();
    return table[h & 0xFFFFu];
}

// f32 to IEEE binary16 bits, round to nearest even; NaN becomes the canonical 0x7FFF as the GPU
// writes it.
inline gemv_u32 float_to_half(float f) {
    const gemv_u32 x = __float_as_uint(f);
    const gemv_u32 sign = (x >> 16) & 0x8000u;
    const gemv_u32 ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return 0x7FFFu;
    if (ax >= 0x477FF000u) return sign | 0x7C00u;  // 65520 and above round to infinity
    if (ax < 0x38800000u) {                        // below 2^-14: an f16 subnormal or zero
        return sign | (gemv_u32)std::nearbyint(__uint_as_float(ax) * 0x1p24f);
    }
    gemv_u32 h = ((((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3FFu));
    const gemv_u32 rest = ax & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return sign | h;
}

// mul.rn.f16x2: the product of two f16 values is exact in f32 (at most 22 significant bits), so
// rounding it once to f16 is the correctly rounded f16 product.
namespace oracle {
inline gemv_u32 hmul2(gemv_u32 a, gemv_u32 b) {
    const gemv_u32 lo = emu::float_to_half(emu::half_to_float(a & 0xFFFFu) * emu::half_to_float(b & 0xFFFFu));
    const gemv_u32 hi = emu::float_to_half(emu::half_to_float(a >> 16) * emu::half_to_float(b >> 16));
    return lo | (hi << 16);
}
}  // namespace oracle

// An E4M3 "fn" code (bias 7, subnormals m * 2^-9, 0x7F/0xFF NaN) as binary16, exactly.
inline gemv_u32 e4m3_to_half(gemv_u32 code) {
    const gemv_u32 magnitude = code & 0x7Fu;
    if (magnitude == 0x7Fu) return 0x7FFFu;
    const gemv_u32 exponent = magnitude >> 3;
    const gemv_u32 mantissa = magnitude & 7u;
    // Normal codes: (1 + m/8) * 2^(e - 7), built as f32 bits rather than by std::ldexp, a library
    // call per row and pass.
    const float value =
        exponent == 0 ? (float)mantissa * 0x1p-9f : __uint_as_float(((exponent + 120u) << 23) | (mantissa << 20));
    return ((code & 0x80u) << 8) | emu::float_to_half(value);
}

namespace oracle {
// cvt.rn.f16x2.e4m3x2 on the low 16 bits: the low code to the low half.
inline gemv_u32 e4m3x2_to_f16x2(gemv_u32 codes) {
    return emu::e4m3_to_half(codes & 0xFFu) | (emu::e4m3_to_half((codes >> 8) & 0xFFu) << 16);
}

inline gemv_u32 hmul2_by_lo(gemv_u32 a, gemv_u32 b) {
    return hmul2(a, (b & 0xFFFFu) * 0x10001u);
}
inline gemv_u32 hmul2_by_hi(gemv_u32 a, gemv_u32 b) {
    return hmul2(a, (b >> 16) * 0x10001u);
}

// cvt.f32.f16, exact; a NaN becomes the GPU's one f32 NaN.
inline float half_lo(gemv_u32 pair) {
    const float f = emu::half_to_float(pair & 0xFFFFu);
    return f != f ? __uint_as_float(0x7FFFFFFFu) : f;
}
inline float half_hi(gemv_u32 pair) {
    const float f = emu::half_to_float(pair >> 16);
    return f != f ? __uint_as_float(0x7FFFFFFFu) : f;
}
}  // namespace oracle


// bf16 bits to f32 (exact: a bf16 is the high half of an f32).
inline float bf16_to_float(gemv_u32 b) {
    return __uint_as_float((b & 0xFFFFu) << 16);
}

// A finite double to bf16 bits, round to nearest even, subnormals kept (spacing 2^-133), past
// the largest finite value to infinity; NaN becomes the canonical 0x7FFF.
inline gemv_u32 double_to_bf16(double v) {
    if (std::isnan(v)) return 0x7FFFu;
    const gemv_u32 sign = std::signbit(v) ? 0x8000u : 0u;
    const double a = std::fabs(v);
    if (std::isinf(a)) return sign | 0x7F80u;
    int exponent = 0;
    std::frexp(a, &exponent);  // a = f * 2^exponent, f in [0.5, 1)
    const int ulp = (exponent - 1 < -126 ? -126 : exponent - 1) - 7;
    const double rounded = std::ldexp(std::nearbyint(std::ldexp(a, -ulp)), ulp);  // exact in double
    if (rounded >= 0x1p128) return sign | 0x7F80u;
    return sign | (__float_as_uint((float)rounded) >> 16);  // exact: at most 8 significant bits
}

namespace oracle {
// fma.rn.bf16x2 with a -0.0 addend: two bf16 products, each rounded to nearest even once
// (subnormals kept; a NaN result is the canonical 0x7FFF).
inline gemv_u32 bf16x2_mul(gemv_u32 a, gemv_u32 b) {
    const double lo = (double)emu::bf16_to_float(a) * (double)emu::bf16_to_float(b);        // exact
    const double hi = (double)emu::bf16_to_float(a >> 16) * (double)emu::bf16_to_float(b >> 16);  // exact
    return emu::double_to_bf16(lo) | (emu::double_to_bf16(hi) << 16);
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D = A x B + C, with the fragment layouts of
// the PTX ISA (g = lane / 4, t = lane % 4): A register 0 holds row g, k 2t and 2t+1 (low half
// first), register 1 row g+8, register 2 row g, k 2t+8 and 2t+9, register 3 row g+8, k 2t+8 and
// 2t+9; B register 0 holds k 2t and 2t+1 of column g, register 1 k 2t+8 and 2t+9; C and D hold
// row g (elements 0, 1) and row g+8 (elements 2, 3), columns 2t and 2t+1.
//
// The accumulation model (docs/emulator.md): each output starts from its C element and adds the
// 16 products in k order 0..15, each by one fused multiply-add (one rounding per step). A tensor
// core may sum in another order and round differently; the fast family's bound allows for any.
inline void mma_bf16_16816(float (&d)[4], const gemv_u32 (&a)[4], const gemv_u32 (&b)[2], const float (&c)[4]) {
    const unsigned mine[emu::kMmaWords] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    unsigned all[32][emu::kMmaWords];
    emu::mma_exchange(mine, all);
    const unsigned lane = emu::lane_id();
    const unsigned g = lane / 4, t = lane % 4;
    auto a_at = [&](unsigned row, unsigned k) {
        const unsigned word = all[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1u : 0u) + (k >= 8 ? 2u : 0u)];
        return emu::bf16_to_float(k % 2 == 0 ? word : word >> 16);
    };
    auto b_at = [&](unsigned k, unsigned column) {
        const unsigned word = all[column * 4 + (k % 8) / 2][4 + (k >= 8 ? 1u : 0u)];
        return emu::bf16_to_float(k % 2 == 0 ? word : word >> 16);
    };
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned row = g + (e >= 2 ? 8u : 0u);
        const unsigned column = 2 * t + e % 2;
        float sum = c[e];
        for (unsigned k = 0; k < 16; ++k) sum = __fmaf_rn(a_at(row, k), b_at(k, column), sum);
        d[e] = sum;
    }
}
}  // namespace oracle
}  // namespace emu

// ---- Shared memory --------------------------------------------------------------------------

template <class T, int N>
class GemvShared {
   public:
    // One element, read or written through the checker.
    class Ref {
       public:
        Ref(GemvShared* array, long long index) : array_(array), index_(index) {}
        operator T() const { return array_->read(index_); }
        Ref& operator=(T value) {
            array_->write(index_, value);
            return *this;
        }
        Ref& operator=(const Ref& other) { return *this = static_cast<T>(other); }
        Ref& operator+=(T value) { return *this = static_cast<T>(*this) + value; }

       private:
        GemvShared* array_;
        long long index_;
    };

    GemvShared(const void* tag, const char* name) {
        const emu::SharedHandle handle = emu::shared_alloc(tag, name, sizeof(T) * (size_t)N, (size_t)N);
        base_ = handle.base;
        decl_ = handle.decl;
        tracked_ = handle.tracked;
    }
    Ref operator[](long long index) { return Ref(this, index); }
    T operator[](long long index) const { return read(index); }
    // The shared address of element `index` (for cp.async and other PTX that names shared memory).
    unsigned address(long long index) const {
        check(index, sizeof(T), false, false);
        return emu::shared_address_of(base_ + (size_t)index * sizeof(T));
    }

    T read(long long index) const {
        check(index, sizeof(T), false);
        T v;
        std::memcpy(&v, base_ + (size_t)index * sizeof(T), sizeof v);
        return v;
    }
    void write(long long index, T value) {
        check(index, sizeof(T), true);
        std::memcpy(base_ + (size_t)index * sizeof(T), &value, sizeof value);
    }
    // The index-th V-sized vector (V a whole number of elements).
    template <class V>
    V load_vector(long long index) const {
        static_assert(sizeof(V) % sizeof(T) == 0, "a shared vector is a whole number of elements");
        check(index * (long long)(sizeof(V) / sizeof(T)), sizeof(V), false);
        V v;
        std::memcpy(&v, base_ + (size_t)index * sizeof(V), sizeof v);
        return v;
    }
    template <class V>
    void store_vector(long long index, V value) {
        static_assert(sizeof(V) % sizeof(T) == 0, "a shared vector is a whole number of elements");
        check(index * (long long)(sizeof(V) / sizeof(T)), sizeof(V), true);
        std::memcpy(base_ + (size_t)index * sizeof(V), &value, sizeof value);
    }

   private:
    // An access of `bytes` from element `element` (`access`: false for taking an address, which is
    // only bounds-checked).
    void check(long long element, size_t bytes, bool write, bool access = true) const {
        const bool in_bounds = element >= 0 && (unsigned long long)element + bytes / sizeof(T) <= (unsigned long long)N;
        if ((tracked_ && access) || !in_bounds) emu::shared_check(decl_, element, sizeof(T), (size_t)N, bytes, write);
    }

    unsigned char* base_;
    unsigned decl_;
    bool tracked_;
};

#define GEMV_SHARED(T, name, count)                     \
    static const char emu_shared_tag_##name = 0;        \
    GemvShared<T, (count)> name(&emu_shared_tag_##name, #name)

template <class T, int N>
inline gemv_u32 gemv_shared_address(const GemvShared<T, N>& array, int index) {
    return array.address(index);
}

// A generic address as a global one: the same bits, as on the GPU for device memory.
inline size_t __cvta_generic_to_global(const void* p) {
    return (size_t)p;
}

template <class V, class T, int N>
inline V shared_load(const GemvShared<T, N>& array, int index) {
    return array.template load_vector<V>(index);
}

template <class V, class T, int N>
inline void shared_store(GemvShared<T, N>& array, int index, V value) {
    array.template store_vector<V>(index, value);
}

// ---- Warp shuffles ----------------------------------------------------------------------------

template <class T>
inline T emu_shuffle_as(emu::ShuffleKind kind, unsigned mask, T value, int lane_arg, int width) {
    static_assert(sizeof(T) == 4, "the emulator shuffles 32-bit values");
    unsigned bits;
    std::memcpy(&bits, &value, 4);
    bits = emu::shuffle(kind, mask, bits, lane_arg, width);
    T out;
    std::memcpy(&out, &bits, 4);
    return out;
}

template <class T>
inline T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
    return emu_shuffle_as(emu::ShuffleKind::Index, mask, value, src_lane, width);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    return emu_shuffle_as(emu::ShuffleKind::Up, mask, value, (int)delta, width);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    return emu_shuffle_as(emu::ShuffleKind::Down, mask, value, (int)delta, width);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    return emu_shuffle_as(emu::ShuffleKind::Xor, mask, value, lane_mask, width);
}
