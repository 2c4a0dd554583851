// The fast family's build for programmatic dependent launch (module w4a16_fast's
// w4a16_fast_sm90_dependent: X read only after griddepcontrol.wait) for the host, its entries
// named NAME_sm90_dependent so that they link next to the others.
#define GEMV_DEPENDENT_LAUNCH
#define GEMV_ENTRY_SUFFIX _sm90_dependent
#include "emulator.h"

#include <w4a16_fast.cu>

#define GEMV_EMU_FAST_DEPENDENT_ENTRY(name, ...) \
    {#name "_sm90_dependent", &name##_sm90_dependent, emu_launch_bound_##name##_sm90_dependent, nullptr},
#define GEMV_EMU_FAST_DEPENDENT_GROUPED_ENTRY(name, ...) \
    {#name "_sm90_dependent", nullptr, emu_launch_bound_##name##_sm90_dependent, &name##_sm90_dependent},
extern const EmuKernel kFastSm90DependentKernels[] = {GEMV_FAST_KERNELS(GEMV_EMU_FAST_DEPENDENT_ENTRY)
                                                          GEMV_FAST_GROUPED_KERNELS(GEMV_EMU_FAST_DEPENDENT_GROUPED_ENTRY)};
extern const size_t kFastSm90DependentKernelCount =
    sizeof(kFastSm90DependentKernels) / sizeof(kFastSm90DependentKernels[0]);
