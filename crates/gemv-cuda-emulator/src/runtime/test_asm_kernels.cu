// The PTX executor's tests (crates/gemv-cuda-emulator/tests/emulator_faults/asm.rs): every inline-PTX
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

#define GEMV_ASM_TEST_KERNELS(X)                 \
    X(emu_test_asm_oracle, 1, 1)                 \
    X(emu_test_asm_oracle_mma, 1, 1)             \
    X(emu_test_asm_writes_input, 1, 1)           \
    X(emu_test_asm_output_bound_twice, 1, 1)     \
    X(emu_test_asm_output_never_written, 1, 1)   \
    X(emu_test_asm_reads_output, 1, 1)           \
    X(emu_test_asm_unknown_instruction, 1, 1)    \
    X(emu_test_asm_unknown_modifier, 1, 1)       \
    X(emu_test_asm_wrong_binding, 1, 1)          \
    X(emu_test_asm_wrong_width, 1, 1)            \
    X(emu_test_asm_uninitialised_register, 1, 1) \
    X(emu_test_asm_out_of_scope, 1, 1)
