// The fast family (module w4a16_fast) for the host, with the emulator's two planted faults in
// its tile (crates/gemv-cuda-emulator/tests/emulator_fast_family.rs), and their list of entry
// points.
#include "emulator.h"

#include <w4a16_fast.cu>

#define EMU_FAST_ARGS                                                                                              \
    const gemv_u16 *x, const gemv_u8 *packed, const gemv_u8 *scales, gemv_u16 *y, float global_scale, int m, int n, \
        int k, int x_stride, int y_stride, int y_f32

// The m16 kernel with a planted wrong fragment index (rows g + 8 and k 2t + 8 swapped in A): the
// fast gates must fail it.
GEMV_KERNEL(emu_test_fast_wrong_fragment, gemv_fast::kThreadsPerBlock, 1)(EMU_FAST_ARGS) {
    gemv_fast::fast_entry<2, gemv_fast::kWrongFragment>(x, packed, scales, y, global_scale, m, n, k, x_stride, y_stride, y_f32);
}

// The m16 kernel whose warp partials are added in reverse order when M > 8: a token's bits then
// depend on M, which gate 11's batch invariance must catch.
GEMV_KERNEL(emu_test_fast_order_depends_on_m, gemv_fast::kThreadsPerBlock, 1)(EMU_FAST_ARGS) {
    gemv_fast::fast_entry<2, gemv_fast::kOrderDependsOnM>(x, packed, scales, y, global_scale, m, n, k, x_stride, y_stride, y_f32);
}

#define GEMV_EMU_FAST_ENTRY(name, ...) {#name, &name, emu_launch_bound_##name, nullptr},
#define GEMV_EMU_FAST_GROUPED_ENTRY(name, ...) {#name, nullptr, emu_launch_bound_##name, &name},
extern const EmuKernel kFastKernels[] = {GEMV_FAST_KERNELS(GEMV_EMU_FAST_ENTRY)
                                             GEMV_FAST_GROUPED_KERNELS(GEMV_EMU_FAST_GROUPED_ENTRY)
                                                 GEMV_EMU_FAST_ENTRY(emu_test_fast_wrong_fragment)
                                                     GEMV_EMU_FAST_ENTRY(emu_test_fast_order_depends_on_m)};
extern const size_t kFastKernelCount = sizeof(kFastKernels) / sizeof(kFastKernels[0]);
