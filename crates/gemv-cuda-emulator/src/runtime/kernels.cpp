// Compiles the production kernels and the emulator's test kernels for the host, and lists them.
#include "emulator.h"

#include <cstring>

// Angle brackets: the build's copies, their inline PTX rewritten into executor calls, come first
// on the include path; a quoted include would find this folder's own test sources first.
#include <w4a16_fast.cu>
#include <w4a16_gemv.cu>
#include <test_kernels.cu>
#include <test_asm_kernels.cu>
#include <test_async_kernels.cu>
#include <test_probe_kernels.cu>

namespace {

#define GEMV_EMU_ENTRY(name, ...) {#name, &name, emu_launch_bound_##name, nullptr},
#define GEMV_EMU_GROUPED_ENTRY(name, ...) {#name, nullptr, emu_launch_bound_##name, &name},
const EmuKernel kKernels[] = {GEMV_KERNELS(GEMV_EMU_ENTRY) GEMV_GROUPED_KERNELS(GEMV_EMU_GROUPED_ENTRY) GEMV_FAST_KERNELS(GEMV_EMU_ENTRY)
                                  GEMV_FAST_GROUPED_KERNELS(GEMV_EMU_GROUPED_ENTRY)
                                  GEMV_TEST_KERNELS(GEMV_EMU_ENTRY) GEMV_ASM_TEST_KERNELS(GEMV_EMU_ENTRY)
                                      GEMV_ASYNC_TEST_KERNELS(GEMV_EMU_ENTRY) GEMV_PROBE_TEST_KERNELS(GEMV_EMU_ENTRY)};

}  // namespace

// kernels_sm89.cpp: the exact family's sm_89 build, its entries named with the suffix _sm89.
extern const EmuKernel kSm89Kernels[];
extern const size_t kSm89KernelCount;

extern "C" const EmuKernel* gemv_emu_find(const char* name) {
    for (const EmuKernel& kernel : kKernels) {
        if (std::strcmp(kernel.name, name) == 0) return &kernel;
    }
    for (size_t i = 0; i < kSm89KernelCount; ++i) {
        if (std::strcmp(kSm89Kernels[i].name, name) == 0) return &kSm89Kernels[i];
    }
    return nullptr;
}
