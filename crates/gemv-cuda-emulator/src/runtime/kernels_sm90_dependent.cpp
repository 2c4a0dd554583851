// The exact family's build for programmatic dependent launch (module w4a16_gemv's
// w4a16_gemv_sm90_dependent: the sm_89 build's kernels, X read only after griddepcontrol.wait)
// for the host, its entries named NAME_sm90_dependent so that they link next to the others.
#define GEMV_SCALES_BY_CVT
#define GEMV_DEPENDENT_LAUNCH
#define GEMV_ENTRY_SUFFIX _sm90_dependent
#include "emulator.h"

#include <w4a16_gemv.cu>

#define GEMV_EMU_DEPENDENT_ENTRY(name, ...) \
    {#name "_sm90_dependent", &name##_sm90_dependent, emu_launch_bound_##name##_sm90_dependent, nullptr},
#define GEMV_EMU_DEPENDENT_GROUPED_ENTRY(name, ...) \
    {#name "_sm90_dependent", nullptr, emu_launch_bound_##name##_sm90_dependent, &name##_sm90_dependent},
extern const EmuKernel kSm90DependentKernels[] = {GEMV_KERNELS(GEMV_EMU_DEPENDENT_ENTRY)
                                                      GEMV_GROUPED_KERNELS(GEMV_EMU_DEPENDENT_GROUPED_ENTRY)};
extern const size_t kSm90DependentKernelCount = sizeof(kSm90DependentKernels) / sizeof(kSm90DependentKernels[0]);
