// Parses every inline-PTX statement of the kernel sources (the build's asm_statements.inc), so a
// statement the executor cannot run is found even where no test executes it.
#include <cstdio>
#include <string>

#include "emulator.h"
#include "ptx_exec.h"

extern "C" int gemv_emu_check_asm(char* error, size_t error_len) {
    int count = 0;
    std::string errors;
#define GEMV_ASM_STATEMENT(file, line, text, constraints, outputs)                    \
    {                                                                                 \
        const emu::ptx::Statement statement(file, line, text, constraints, outputs); \
        ++count;                                                                      \
        if (!statement.error().empty()) {                                             \
            errors += std::string(file) + ":" + std::to_string(line) + ": " + statement.error() + "\n"; \
        }                                                                             \
    }
#include "asm_statements.inc"
#undef GEMV_ASM_STATEMENT
    if (errors.empty()) return count;
    std::snprintf(error, error_len, "%s", errors.c_str());
    return -1;
}
