// Compiles the exact family's kernels (module w4a16_gemv) for the host and finds any kernel by
// name among every unit's list. The fast family, the sm_89 build and the emulator's test kernels
// are units of their own, so that a change to one source recompiles only its unit (a cache such
// as ccache then reuses the others).
#include "emulator.h"

#include <cstring>

// Angle brackets: the build's copies, their inline PTX rewritten into executor calls, come first
// on the include path; a quoted include would find this folder's own test sources first.
#include <w4a16_gemv.cu>

namespace {

#define GEMV_EMU_ENTRY(name, ...) {#name, &name, emu_launch_bound_##name, nullptr},
#define GEMV_EMU_GROUPED_ENTRY(name, ...) {#name, nullptr, emu_launch_bound_##name, &name},
const EmuKernel kKernels[] = {GEMV_KERNELS(GEMV_EMU_ENTRY) GEMV_GROUPED_KERNELS(GEMV_EMU_GROUPED_ENTRY)};

}  // namespace

// kernels_sm89.cpp: the exact family's sm_89 build, its entries named with the suffix _sm89.
extern const EmuKernel kSm89Kernels[];
extern const size_t kSm89KernelCount;
// kernels_sm90_dependent.cpp: the exact family's build for programmatic dependent launch.
extern const EmuKernel kSm90DependentKernels[];
extern const size_t kSm90DependentKernelCount;
// kernels_fast.cpp: the fast family (module w4a16_fast).
extern const EmuKernel kFastKernels[];
extern const size_t kFastKernelCount;
// kernels_fast_sm90_dependent.cpp: the fast family's build for programmatic dependent launch.
extern const EmuKernel kFastSm90DependentKernels[];
extern const size_t kFastSm90DependentKernelCount;
// kernels_tests.cpp: the emulator's own test kernels.
extern const EmuKernel kTestKernels[];
extern const size_t kTestKernelCount;

extern "C" const EmuKernel* gemv_emu_find(const char* name) {
    const struct {
        const EmuKernel* kernels;
        size_t count;
    } lists[] = {{kKernels, sizeof(kKernels) / sizeof(kKernels[0])},
                 {kSm89Kernels, kSm89KernelCount},
                 {kSm90DependentKernels, kSm90DependentKernelCount},
                 {kFastKernels, kFastKernelCount},
                 {kFastSm90DependentKernels, kFastSm90DependentKernelCount},
                 {kTestKernels, kTestKernelCount}};
    for (const auto& list : lists) {
        for (size_t i = 0; i < list.count; ++i) {
            if (std::strcmp(list.kernels[i].name, name) == 0) return &list.kernels[i];
        }
    }
    return nullptr;
}
