// Every inline-PTX primitive of kernels/cuda/gemv_portable.cuh in one kernel, so that `cargo xtask
// sass` assembles their text for sm_90 (the newest form each takes) whether or not a kernel
// calls them yet: the emulator executes this text, and ptxas must accept it as written.
#include "gemv_portable.cuh"

extern "C" __global__ void __launch_bounds__(128, 1)
    primitives_probe(const gemv_u16* x, const gemv_u8* codes, gemv_u32* y) {
    GEMV_SHARED(uint4, stages, 256);
    GEMV_SHARED(gemv_u64, full, 2);
    const unsigned t = threadIdx.x;
    const gemv_u32 mbarrier = gemv_shared_address(full, 0);
    if (t == 0) {
        gemv_mbarrier_init(mbarrier, 1);
        gemv_mbarrier_init(gemv_shared_address(full, 1), 2);
        gemv_fence_proxy_async();
    }
    __syncthreads();
    gemv_cp_async16(gemv_shared_address(stages, 128 + t), x + 8 * t);
    gemv_cp_async16_partial(gemv_shared_address(stages, t), x + 8 * t, 6);
    gemv_cp_async_commit();
    gemv_cp_async_wait<0>();
    __syncthreads();
    if (t == 0) {
        gemv_mbarrier_arrive_expect_tx(mbarrier, 2048);
        gemv_bulk_copy(gemv_shared_address(stages, 128), x, 2048, mbarrier);
    }
    gemv_mbarrier_wait_parity(mbarrier, 0);
    const uint4 s = gemv_load_stream16(x + 8 * t);
    uint4 v = shared_load<uint4>(stages, t);
    v.x ^= s.x;
    v.w ^= s.w;
    gemv_prefetch_l2(codes + 128 * t);
    gemv_u32 word = gemv_prmt(v.x, v.y, 0x5140u);
    word ^= gemv_hmul2(v.z, v.w) ^ gemv_hmul2_by_lo(v.x, v.y) ^ gemv_hmul2_by_hi(v.x, v.y);
    word ^= gemv_e4m3x2_to_f16x2(codes[t]) ^ gemv_bf16x2_mul(v.x, v.w);
    float d[4];
    const gemv_u32 a[4] = {v.x, v.y, v.z, v.w}, b[2] = {v.y, v.z};
    const float c[4] = {gemv_half_lo(v.x), gemv_half_hi(v.x), 0.0f, 0.0f};
    gemv_mma_bf16_16816(d, a, b, c);
    const gemv_u64 state = t == 1 ? gemv_mbarrier_arrive(gemv_shared_address(full, 1)) : 0;
    gemv_launch_dependents();
    gemv_grid_dependency_wait();
    if (gemv_elect_one()) gemv_reduce_add(y + 128, 1u);
    y[t] = word ^ __float_as_uint(d[0] + d[3]) ^ (gemv_u32)state ^ gemv_atomic_add(y + 129, 1u);
}
