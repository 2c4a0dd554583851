// The PTX executor's tests (crates/gemv-cuda/tests/emulator_faults/asm.rs): every inline-PTX
// wrapper of gemv_portable.cuh, run by the executor, against its C++ oracle (cuda_emu.h); and
// planted faults in asm statements, each of which the executor must report. Compiled only into
// the emulator, its asm rewritten like the kernels'.
#include <cstdio>

#include "gemv_portable.cuh"

namespace emu_asm_test {

// A reproducible 32-bit sequence per case (xorshift32 of a mixed seed).
__device__ __forceinline__ gemv_u32 draw(gemv_u32 seed) {
    gemv_u32 s = seed * 0x9E3779B9u + 0x7F4A7C15u;
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    s ^= s >> 11;
    return s * 0x2545F491u;
}

// Stops the launch with `what` and the case's input and both results.
[[noreturn]] inline void mismatch(const char* what, gemv_u32 a, gemv_u32 b, gemv_u32 c, gemv_u32 asm_bits,
                                  gemv_u32 oracle_bits) {
    static thread_local char message[200];
    std::snprintf(message, sizeof message, "%s(%#010x, %#010x, %#010x): asm %#010x, oracle %#010x", what, a, b, c,
                  asm_bits, oracle_bits);
    emu::test_failure(message);
}

__device__ __forceinline__ gemv_u32 f32_bits(float f) {
    return __float_as_uint(f);
}

}  // namespace emu_asm_test

// Wrapper m (0..7) against its oracle over `cases` inputs spread over the grid's threads: all
// 65,536 where the input fits in 16 bits, else 2^18 reproducible random ones. Faults on the first
// difference; y[thread] = cases the thread checked.
GEMV_KERNEL(emu_test_asm_oracle, 1024, 1)(EMU_ARGS) {
    using namespace emu_asm_test;
    const unsigned threads = gridDim.x * blockDim.x;
    const unsigned me = emu_test::global_thread();
    const bool exhaustive = m == 2 || m == 5 || m == 6;
    const unsigned cases = exhaustive ? 65536u : (1u << 18);
    unsigned checked = 0;
    for (unsigned i = me; i < cases; i += threads, ++checked) {
        const gemv_u32 a = exhaustive ? i | (draw(i) & 0xFFFF0000u) : draw(3 * i);
        const gemv_u32 b = draw(3 * i + 1), c = draw(3 * i + 2);
        switch (m) {
            case 0:
                if (gemv_prmt(a, b, c) != emu::oracle::prmt(a, b, c))
                    mismatch("gemv_prmt", a, b, c, gemv_prmt(a, b, c), emu::oracle::prmt(a, b, c));
                break;
            case 1:
                if (gemv_hmul2(a, b) != emu::oracle::hmul2(a, b))
                    mismatch("gemv_hmul2", a, b, 0, gemv_hmul2(a, b), emu::oracle::hmul2(a, b));
                break;
            case 2:
                if (gemv_e4m3x2_to_f16x2(a) != emu::oracle::e4m3x2_to_f16x2(a))
                    mismatch("gemv_e4m3x2_to_f16x2", a, 0, 0, gemv_e4m3x2_to_f16x2(a), emu::oracle::e4m3x2_to_f16x2(a));
                break;
            case 3:
                if (gemv_hmul2_by_lo(a, b) != emu::oracle::hmul2_by_lo(a, b))
                    mismatch("gemv_hmul2_by_lo", a, b, 0, gemv_hmul2_by_lo(a, b), emu::oracle::hmul2_by_lo(a, b));
                break;
            case 4:
                if (gemv_hmul2_by_hi(a, b) != emu::oracle::hmul2_by_hi(a, b))
                    mismatch("gemv_hmul2_by_hi", a, b, 0, gemv_hmul2_by_hi(a, b), emu::oracle::hmul2_by_hi(a, b));
                break;
            case 5:
                if (f32_bits(gemv_half_lo(a)) != f32_bits(emu::oracle::half_lo(a)))
                    mismatch("gemv_half_lo", a, 0, 0, f32_bits(gemv_half_lo(a)), f32_bits(emu::oracle::half_lo(a)));
                break;
            case 6: {
                const gemv_u32 high = (a << 16) | (a >> 16);  // the case's 16 bits in the high half
                if (f32_bits(gemv_half_hi(high)) != f32_bits(emu::oracle::half_hi(high)))
                    mismatch("gemv_half_hi", high, 0, 0, f32_bits(gemv_half_hi(high)),
                             f32_bits(emu::oracle::half_hi(high)));
                break;
            }
            case 7:
                if (gemv_bf16x2_mul(a, b) != emu::oracle::bf16x2_mul(a, b))
                    mismatch("gemv_bf16x2_mul", a, b, 0, gemv_bf16x2_mul(a, b), emu::oracle::bf16x2_mul(a, b));
                break;
            default:
                emu::test_failure("emu_test_asm_oracle: no wrapper with that number");
        }
    }
    if (me < (unsigned)n) store_global(y + me, (gemv_u16)checked);
}

// gemv_mma_bf16_16816 against its oracle: every warp, 64 rounds of random fragments (bf16 of any
// bits, NaN and infinities included, and C of any f32 bits). y[thread] = rounds checked.
GEMV_KERNEL(emu_test_asm_oracle_mma, 1024, 1)(EMU_ARGS) {
    using namespace emu_asm_test;
    const unsigned me = emu_test::global_thread();
    unsigned round = 0;
    for (; round < 64; ++round) {
        const gemv_u32 seed = 64 * me + round;
        const gemv_u32 a[4] = {draw(8 * seed), draw(8 * seed + 1), draw(8 * seed + 2), draw(8 * seed + 3)};
        const gemv_u32 b[2] = {draw(8 * seed + 4), draw(8 * seed + 5)};
        // Mostly finite accumulators, so most rounds compare real sums rather than NaNs.
        float c[4];
        for (int e = 0; e < 4; ++e) c[e] = __uint_as_float(draw(8 * seed + 6 + e) & 0xBFFFFFFFu);
        float by_asm[4], by_oracle[4];
        gemv_mma_bf16_16816(by_asm, a, b, c);
        emu::oracle::mma_bf16_16816(by_oracle, a, b, c);
        for (int e = 0; e < 4; ++e) {
            if (f32_bits(by_asm[e]) != f32_bits(by_oracle[e]))
                mismatch("gemv_mma_bf16_16816 (seed, element, -)", seed, (gemv_u32)e, 0, f32_bits(by_asm[e]),
                         f32_bits(by_oracle[e]));
        }
    }
    if (me < (unsigned)n) store_global(y + me, (gemv_u16)round);
}

// ---- Planted faults in asm statements: each must be reported ----------------------------------

// gemv_e4m3x2_to_f16x2 with the destination `%0` written as `%1`: the result lands in the input.
GEMV_KERNEL(emu_test_asm_writes_input, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 codes = __ldg(x + threadIdx.x % 32);
    asm("{ .reg .b16 c; cvt.u16.u32 c, %1; cvt.rn.f16x2.e4m3x2 %1, c; }" : "=r"(d) : "r"(codes));
    emu_test::out(y, m, n, d);
}

// gemv_mma_bf16_16816 with its output list binding d[1] where d[2] belongs.
GEMV_KERNEL(emu_test_asm_output_bound_twice, 1024, 1)(EMU_ARGS) {
    const gemv_u32 a[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
    const gemv_u32 b[2] = {0x3F803F80u, 0x3F803F80u};
    float d[4] = {0, 0, 0, 0};
    const float c[4] = {0, 0, 0, 0};
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[1]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
    emu_test::out(y, m, n, __float_as_uint(d[2]));
}

// An output the template never writes (the result goes to a scratch register instead of `%0`).
GEMV_KERNEL(emu_test_asm_output_never_written, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("{ .reg .b32 t; prmt.b32 t, %1, %1, 0x3210; }" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// An output operand read before the template writes it (`=r` is not `+r`).
GEMV_KERNEL(emu_test_asm_reads_output, 1024, 1)(EMU_ARGS) {
    gemv_u32 d = 0;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("prmt.b32 %0, %0, %1, 0x3210;" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// An instruction the executor does not implement (`add.u32`): an error naming the statement.
GEMV_KERNEL(emu_test_asm_unknown_instruction, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("add.u32 %0, %1, 1;" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// A modifier it does not implement (prmt's .f4e mode).
GEMV_KERNEL(emu_test_asm_unknown_modifier, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("prmt.b32.f4e %0, %1, %1, 1;" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// A float bound to an "r" operand.
GEMV_KERNEL(emu_test_asm_wrong_binding, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const float a = (float)__ldg(x + threadIdx.x % 32);
    asm("prmt.b32 %0, %1, %1, 0x3210;" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// A 16-bit register where the instruction needs 32 bits.
GEMV_KERNEL(emu_test_asm_wrong_width, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("{ .reg .b16 h; cvt.u16.u32 h, %1; mul.rn.f16x2 %0, h, %1; }" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// A local register read before it is written.
GEMV_KERNEL(emu_test_asm_uninitialised_register, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("{ .reg .b32 t; prmt.b32 %0, %1, t, 0x3210; }" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// A register of a scope that has closed.
GEMV_KERNEL(emu_test_asm_out_of_scope, 1024, 1)(EMU_ARGS) {
    gemv_u32 d;
    const gemv_u32 a = __ldg(x + threadIdx.x % 32);
    asm("{ .reg .b32 t; mov.b32 t, %1; } mov.b32 %0, t;" : "=r"(d) : "r"(a));
    emu_test::out(y, m, n, d);
}

// ---- cp.async ------------------------------------------------------------------------------

namespace emu_pipeline_test {
// FNV-1a over the four words of `v`.
__device__ __forceinline__ gemv_u32 fold(gemv_u32 hash, const uint4& v) {
    const gemv_u32 words[4] = {v.x, v.y, v.z, v.w};
    for (gemv_u32 w : words) hash = (hash ^ w) * 0x01000193u;
    return hash;
}
// y[2t], y[2t + 1] = the low and high halves of `hash`.
__device__ __forceinline__ void store_hash(gemv_u16* y, int t, gemv_u32 hash) {
    store_global(y + 2 * t, (gemv_u16)(hash & 0xFFFFu));
    store_global(y + 2 * t + 1, (gemv_u16)(hash >> 16));
}
}  // namespace emu_pipeline_test

namespace emu_async_test {

// The faults planted in `pipeline` (kNone: the correct pipeline).
enum Fault { kNone, kReadBeforeWait, kReuseBeforeBarrier, kNoBarrierAfterWait, kNeverWaited, kMisaligned };
constexpr int kThreads = 256;
constexpr int kStage = kThreads * 8;  // elements of X per stage: 16 bytes a thread

// Streams the first k - 5 elements of X through two shared stages with cp.async, one stage ahead
// (the last stage's tail zero-filled: a partial copy and empty ones). From every stage thread t
// reads the 16 bytes thread (7t + 3) % 256 copied; y[2t], y[2t + 1] = the low and high halves of
// an FNV-1a hash of the words it read. One block of 256 threads.
template <int FAULT>
__device__ __forceinline__ void pipeline(const gemv_u16* x, gemv_u16* y, int k) {
    GEMV_SHARED(uint4, stages, 2 * kThreads);
    const int tid = (int)threadIdx.x;
    const int count = k - 5;
    const int chunks = (count + kStage - 1) / kStage;
    auto issue = [&](int chunk) {
        const int first = chunk * kStage + 8 * tid;
        const int left = count - first;
        const gemv_u32 bytes = left >= 8 ? 16u : left > 0 ? 2u * (gemv_u32)left : 0u;
        const gemv_u32 dst = gemv_shared_address(stages, (chunk % 2) * kThreads + tid) + (FAULT == kMisaligned ? 4u : 0u);
        if (bytes == 16u) {
            gemv_cp_async16(dst, x + first);
        } else {
            gemv_cp_async16_partial(dst, left > 0 ? x + first : x, bytes);
        }
        gemv_cp_async_commit();
    };
    gemv_u32 hash = 0x811C9DC5u;
    issue(0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        if (chunk + 1 < chunks) {
            issue(chunk + 1);
            if (FAULT == kReadBeforeWait) {
                gemv_cp_async_wait<2>();
            } else {
                gemv_cp_async_wait<1>();
            }
        } else if (FAULT == kReadBeforeWait) {
            gemv_cp_async_wait<1>();
        } else {
            gemv_cp_async_wait<0>();
        }
        if (FAULT != kNoBarrierAfterWait) __syncthreads();
        hash = emu_pipeline_test::fold(hash, shared_load<uint4>(stages, (chunk % 2) * kThreads + (7 * tid + 3) % kThreads));
        if (FAULT != kReuseBeforeBarrier) __syncthreads();
    }
    if (FAULT == kNeverWaited) issue(chunks);
    emu_pipeline_test::store_hash(y, tid, hash);
}

}  // namespace emu_async_test

#define EMU_ASYNC_TEST(name, fault)                       \
    GEMV_KERNEL(name, 256, 1)(EMU_ARGS) {                 \
        emu_async_test::pipeline<emu_async_test::fault>(x, y, k); \
    }
EMU_ASYNC_TEST(emu_test_cp_async, kNone)
EMU_ASYNC_TEST(emu_test_cp_async_read_before_wait, kReadBeforeWait)
EMU_ASYNC_TEST(emu_test_cp_async_reuse_before_barrier, kReuseBeforeBarrier)
EMU_ASYNC_TEST(emu_test_cp_async_no_barrier_after_wait, kNoBarrierAfterWait)
EMU_ASYNC_TEST(emu_test_cp_async_never_waited, kNeverWaited)
EMU_ASYNC_TEST(emu_test_cp_async_misaligned, kMisaligned)

// ---- mbarriers and cp.async.bulk ----------------------------------------------------------------

namespace emu_bulk_test {

enum Fault { kNone, kNoWait, kWrongParity, kExpectTooMuch, kReuseBeforeBarrier, kNoInit, kNoBarrierAfterInit };
constexpr int kThreads = 128;
constexpr int kStageVectors = 128;         // 2 KB a stage
constexpr int kStage = kStageVectors * 8;  // elements of X per stage

// Streams X (K elements) through two shared stages with bulk copies that thread 0 issues on one
// mbarrier per stage, one stage ahead (the last stage partial); every thread waits on the
// stage's mbarrier (phase parity: the stage's use count mod 2) and reads the 16 bytes at vector
// (7t + 3) % 128 (zero past the stage's end); y[2t], y[2t + 1] = an FNV-1a hash of the words it
// read. One block of 128 threads.
template <int FAULT>
__device__ __forceinline__ void pipeline(const gemv_u16* x, gemv_u16* y, int k) {
    GEMV_SHARED(uint4, stages, 2 * kStageVectors);
    GEMV_SHARED(gemv_u64, full, 2);
    const int tid = (int)threadIdx.x;
    const int chunks = (k + kStage - 1) / kStage;
    if (tid == 0 && FAULT != kNoInit) {
        gemv_mbarrier_init(gemv_shared_address(full, 0), 1);
        gemv_mbarrier_init(gemv_shared_address(full, 1), 1);
        gemv_fence_proxy_async();
    }
    if (FAULT != kNoBarrierAfterInit) __syncthreads();
    auto vectors_in = [&](int chunk) {
        const int left = k - chunk * kStage;
        return (left >= kStage ? kStage : left) / 8;
    };
    auto issue = [&](int chunk) {
        if (tid != 0) return;
        const gemv_u32 bytes = 16u * (gemv_u32)vectors_in(chunk);
        const gemv_u32 mbarrier = gemv_shared_address(full, chunk % 2);
        gemv_mbarrier_arrive_expect_tx(mbarrier, bytes + (FAULT == kExpectTooMuch ? 16u : 0u));
        gemv_bulk_copy(gemv_shared_address(stages, (chunk % 2) * kStageVectors), x + chunk * kStage, bytes, mbarrier);
    };
    gemv_u32 hash = 0x811C9DC5u;
    issue(0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        if (chunk + 1 < chunks) issue(chunk + 1);
        const gemv_u32 parity = (gemv_u32)(chunk / 2) % 2u;
        const gemv_u32 mbarrier = gemv_shared_address(full, chunk % 2);
        if (FAULT == kWrongParity) {
            gemv_mbarrier_wait_parity(mbarrier, parity ^ 1u);
        } else if (FAULT != kNoWait) {
            gemv_mbarrier_wait_parity(mbarrier, parity);
        }
        const int j = (7 * tid + 3) % kStageVectors;
        uint4 v = {0u, 0u, 0u, 0u};
        if (j < vectors_in(chunk)) v = shared_load<uint4>(stages, (chunk % 2) * kStageVectors + j);
        hash = emu_pipeline_test::fold(hash, v);
        if (FAULT != kReuseBeforeBarrier) __syncthreads();
    }
    emu_pipeline_test::store_hash(y, tid, hash);
}

}  // namespace emu_bulk_test

#define EMU_BULK_TEST(name, fault)                                \
    GEMV_KERNEL(name, 128, 1)(EMU_ARGS) {                         \
        emu_bulk_test::pipeline<emu_bulk_test::fault>(x, y, k);   \
    }
EMU_BULK_TEST(emu_test_bulk, kNone)
EMU_BULK_TEST(emu_test_bulk_no_wait, kNoWait)
EMU_BULK_TEST(emu_test_bulk_wrong_parity, kWrongParity)
EMU_BULK_TEST(emu_test_bulk_expect_too_much, kExpectTooMuch)
EMU_BULK_TEST(emu_test_bulk_reuse_before_barrier, kReuseBeforeBarrier)
EMU_BULK_TEST(emu_test_bulk_no_init, kNoInit)
EMU_BULK_TEST(emu_test_bulk_no_barrier_after_init, kNoBarrierAfterInit)

#define GEMV_ASM_TEST_KERNELS(X)                    \
    X(emu_test_asm_oracle, 1, 1)                    \
    X(emu_test_asm_oracle_mma, 1, 1)                \
    X(emu_test_asm_writes_input, 1, 1)              \
    X(emu_test_asm_output_bound_twice, 1, 1)        \
    X(emu_test_asm_output_never_written, 1, 1)      \
    X(emu_test_asm_reads_output, 1, 1)              \
    X(emu_test_asm_unknown_instruction, 1, 1)       \
    X(emu_test_asm_unknown_modifier, 1, 1)          \
    X(emu_test_asm_wrong_binding, 1, 1)             \
    X(emu_test_asm_wrong_width, 1, 1)               \
    X(emu_test_asm_uninitialised_register, 1, 1)    \
    X(emu_test_asm_out_of_scope, 1, 1)              \
    X(emu_test_cp_async, 1, 1)                      \
    X(emu_test_cp_async_read_before_wait, 1, 1)     \
    X(emu_test_cp_async_reuse_before_barrier, 1, 1) \
    X(emu_test_cp_async_no_barrier_after_wait, 1, 1) \
    X(emu_test_cp_async_never_waited, 1, 1)         \
    X(emu_test_cp_async_misaligned, 1, 1)           \
    X(emu_test_bulk, 1, 1)                          \
    X(emu_test_bulk_no_wait, 1, 1)                  \
    X(emu_test_bulk_wrong_parity, 1, 1)             \
    X(emu_test_bulk_expect_too_much, 1, 1)          \
    X(emu_test_bulk_reuse_before_barrier, 1, 1)     \
    X(emu_test_bulk_no_init, 1, 1)                  \
    X(emu_test_bulk_no_barrier_after_init, 1, 1)
