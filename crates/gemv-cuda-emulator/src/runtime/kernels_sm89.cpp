// The exact family's sm_89 build (scales through cvt.rn.f16x2.e4m3x2, module w4a16_gemv_sm89)
// for the host, its entries named NAME_sm89 so that they link next to the sm_75 build's.
#define GEMV_SCALES_BY_CVT
#define GEMV_ENTRY_SUFFIX _sm89
#include "emulator.h"

#include "w4a16_gemv.cu"

#define GEMV_EMU_SM89_ENTRY(name, ...) {#name "_sm89", &name##_sm89, emu_launch_bound_##name##_sm89, nullptr},
#define GEMV_EMU_SM89_GROUPED_ENTRY(name, ...) {#name "_sm89", nullptr, emu_launch_bound_##name##_sm89, &name##_sm89},
extern const EmuKernel kSm89Kernels[] = {GEMV_KERNELS(GEMV_EMU_SM89_ENTRY)
                                             GEMV_GROUPED_KERNELS(GEMV_EMU_SM89_GROUPED_ENTRY)};
extern const size_t kSm89KernelCount = sizeof(kSm89Kernels) / sizeof(kSm89Kernels[0]);
