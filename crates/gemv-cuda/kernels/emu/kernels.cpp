// Compiles the production kernels and the emulator's test kernels for the host, and lists them.
#include "emulator.h"

#include <cstring>

#include "../w4a16_fast.cu"
#include "../w4a16_gemv.cu"
#include "test_kernels.cu"

namespace {

#define GEMV_EMU_ENTRY(name, ...) {#name, &name, emu_launch_bound_##name},
const EmuKernel kKernels[] = {GEMV_KERNELS(GEMV_EMU_ENTRY) GEMV_FAST_KERNELS(GEMV_EMU_ENTRY)
                                  GEMV_TEST_KERNELS(GEMV_EMU_ENTRY)};

}  // namespace

extern "C" const EmuKernel* gemv_emu_find(const char* name) {
    for (const EmuKernel& kernel : kKernels) {
        if (std::strcmp(kernel.name, name) == 0) return &kernel;
    }
    return nullptr;
}
