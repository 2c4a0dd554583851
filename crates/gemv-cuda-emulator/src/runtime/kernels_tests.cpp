// The emulator's own test kernels for the host (planted faults, the inline-PTX executor's
// statements, asynchronous copies, the memory probes), and their list of entry points.
#include "emulator.h"

#include <test_kernels.cu>
#include <test_asm_kernels.cu>
#include <test_async_kernels.cu>
#include <test_probe_kernels.cu>

#define GEMV_EMU_TEST_ENTRY(name, ...) {#name, &name, emu_launch_bound_##name, nullptr},
extern const EmuKernel kTestKernels[] = {GEMV_TEST_KERNELS(GEMV_EMU_TEST_ENTRY) GEMV_ASM_TEST_KERNELS(GEMV_EMU_TEST_ENTRY)
                                             GEMV_ASYNC_TEST_KERNELS(GEMV_EMU_TEST_ENTRY)
                                                 GEMV_PROBE_TEST_KERNELS(GEMV_EMU_TEST_ENTRY)};
extern const size_t kTestKernelCount = sizeof(kTestKernels) / sizeof(kTestKernels[0]);
