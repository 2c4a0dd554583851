// The emulator's tests of asynchronous and grid-level primitives
// (crates/gemv-cuda-emulator/tests/emulator_faults/async_copies.rs and grid.rs): cp.async pipelines,
// mbarriers with bulk copies, programmatic dependent launch and global atomics, each correct
// once and with planted faults the emulator must report. Compiled only into the emulator, its
// asm (the portable header's wrappers) rewritten like the kernels'.
#include "gemv_portable.cuh"

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

enum Fault {
    kNone,
    kNoWait,
    kWrongParity,
    kExpectTooMuch,
    kReuseBeforeBarrier,
    kNoInit,
    kNoBarrierAfterInit,
    kNoFence
};
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
        if (FAULT != kNoFence) gemv_fence_proxy_async();
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
EMU_BULK_TEST(emu_test_bulk_no_fence, kNoFence)

// ---- Grid dependencies and atomics --------------------------------------------------------------

namespace emu_grid_test {
enum Fault { kNone, kReadsXEarly, kWritesYEarly };

// Programmatic dependent launch: reads its weights, waits for the previous grid, then reads X and
// writes y[t] = x[t] + packed[t] (one block).
template <int FAULT>
__device__ __forceinline__ void dependent(const gemv_u16* x, const gemv_u8* packed, gemv_u16* y) {
    const unsigned t = threadIdx.x;
    const gemv_u32 weight = __ldg(packed + t);
    gemv_launch_dependents();
    gemv_u32 early = 0;
    if (FAULT == kReadsXEarly) early = __ldg(x + t) & 0u;
    if (FAULT == kWritesYEarly) store_global(y + t, (gemv_u16)0);
    gemv_grid_dependency_wait();
    store_global(y + t, (gemv_u16)(__ldg(x + t) + weight + early));
}
}  // namespace emu_grid_test

GEMV_KERNEL(emu_test_dependent, 256, 1)(EMU_ARGS) {
    emu_grid_test::dependent<emu_grid_test::kNone>(x, packed, y);
}
GEMV_KERNEL(emu_test_dependent_reads_x_early, 256, 1)(EMU_ARGS) {
    emu_grid_test::dependent<emu_grid_test::kReadsXEarly>(x, packed, y);
}
GEMV_KERNEL(emu_test_dependent_writes_y_early, 256, 1)(EMU_ARGS) {
    emu_grid_test::dependent<emu_grid_test::kWritesYEarly>(x, packed, y);
}

// A persistent grid's tickets: thread 0 of every block takes the next ticket from the counter in
// y[0..2) (as one u32) and writes its block index + 1 into slot 2 + 2 * ticket (as a u32); every
// thread also adds 1 to the counter in y[2 * (gridDim.x + 1)) with red.
GEMV_KERNEL(emu_test_tickets, 256, 1)(EMU_ARGS) {
    gemv_u32* words = reinterpret_cast<gemv_u32*>(y);
    if (threadIdx.x == 0) {
        const gemv_u32 ticket = gemv_atomic_add(words, 1u);
        store_global(words + 1 + ticket, blockIdx.x + 1u);
    }
    gemv_reduce_add(words + 1 + gridDim.x, 1u);
}

// y[warp] = 1 + the lane elect.sync chose in each warp (every lane counts itself in with red).
GEMV_KERNEL(emu_test_elect, 256, 1)(EMU_ARGS) {
    gemv_u32* words = reinterpret_cast<gemv_u32*>(y);
    if (gemv_elect_one()) store_global(words + threadIdx.x / 32, threadIdx.x % 32 + 1u);
    gemv_reduce_add(words + 8, 1u);
}

// elect.sync reached by half a warp.
GEMV_KERNEL(emu_test_elect_divergent, 256, 1)(EMU_ARGS) {
    if (threadIdx.x % 32 < 16) (void)gemv_elect_one();
}

// An atomic on read-only memory (X).
GEMV_KERNEL(emu_test_atomic_on_x, 256, 1)(EMU_ARGS) {
    gemv_atomic_add(reinterpret_cast<gemv_u32*>(const_cast<gemv_u16*>(x)), 1u);
}

#define GEMV_ASYNC_TEST_KERNELS(X)                   \
    X(emu_test_cp_async, 1, 1)                       \
    X(emu_test_cp_async_read_before_wait, 1, 1)      \
    X(emu_test_cp_async_reuse_before_barrier, 1, 1)  \
    X(emu_test_cp_async_no_barrier_after_wait, 1, 1) \
    X(emu_test_cp_async_never_waited, 1, 1)          \
    X(emu_test_cp_async_misaligned, 1, 1)            \
    X(emu_test_bulk, 1, 1)                           \
    X(emu_test_bulk_no_wait, 1, 1)                   \
    X(emu_test_bulk_wrong_parity, 1, 1)              \
    X(emu_test_bulk_expect_too_much, 1, 1)           \
    X(emu_test_bulk_reuse_before_barrier, 1, 1)      \
    X(emu_test_bulk_no_init, 1, 1)                   \
    X(emu_test_bulk_no_barrier_after_init, 1, 1)     \
    X(emu_test_bulk_no_fence, 1, 1)                  \
    X(emu_test_dependent, 1, 1)                      \
    X(emu_test_dependent_reads_x_early, 1, 1)        \
    X(emu_test_dependent_writes_y_early, 1, 1)       \
    X(emu_test_tickets, 1, 1)                        \
    X(emu_test_atomic_on_x, 1, 1)                    \
    X(emu_test_elect, 1, 1)                          \
    X(emu_test_elect_divergent, 1, 1)
