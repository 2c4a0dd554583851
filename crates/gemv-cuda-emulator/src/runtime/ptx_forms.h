// The instruction forms the PTX executor implements, for the parser (ptx_parse.cpp): an
// instruction's parsed operands checked against its opcode's form, with register widths.
#pragma once

#include <string>
#include <vector>

#include "ptx_program.h"

namespace emu {
namespace ptx {

// An instruction's operand as parsed: registers (one, or a vector's), or a memory reference.
struct Arg {
    enum Kind { Register, Vector, Memory } kind = Register;
    std::vector<int> slots;
    long long offset = 0;
};

// The width of a register type (`.b32`, `.f16x2`, `.pred`, ...), 0 for one the executor does not
// know.
int register_bits(const std::string& type);

// Checks `args` against the form of `opcode` and fills `in` (its op, arguments, sizes); returns
// an error, empty on success.
std::string build_instruction(const std::string& opcode, const std::vector<Arg>& args, const Program& program,
                              Instruction& in);

}  // namespace ptx
}  // namespace emu
