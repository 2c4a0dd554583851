// The emulator's executor for the kernels' inline PTX. Under the emulator build every
// `asm(...)` statement of a kernel source is rewritten (this crate's build/asm_rewrite.rs) into a
// static Statement holding the template and constraints as written, and a call of execute() with
// the statement's C++ bindings, so what runs here is the text the GPU runs, not a C++ stand-in.
//
// A Statement parses its template once (scopes, `.reg` declarations, `%N` operands, vectors,
// memory operands, immediates) into a small program; an instruction, type or modifier the
// executor does not know, a register it cannot resolve, or an operand whose constraint does not
// fit the instruction makes the statement's error, reported as a fault naming file, line and
// text when the statement executes (and listed by gemv_emu_check_asm, which parses them all).
// So is what a GPU would leave undefined: an output never written, an output or register read
// before it is written, a write to an input operand (found by the parser: templates are
// straight-line code), bindings whose C++ types do not fit their constraints, and two outputs
// bound to one object (found when the statement executes).
#pragma once

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>

namespace emu {
namespace ptx {

// One operand's C++ binding: an input's bits, or where an output goes.
struct Operand {
    void* target = nullptr;        // outputs and in-outs: the bound object
    unsigned long long bits = 0;   // inputs and in-outs: its value
    unsigned char size = 0;        // bytes of the bound object
    bool is_float = false;         // a float or double binding
    bool is_pointer = false;       // a pointer binding (an address)
};

// The bits of a binding, zero-extended (read in a register of the binding's own width: a
// partial memcpy into the 64-bit field would stall the load that follows it).
template <class T>
unsigned long long bits_of(const T& value) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "an asm operand is 8, 16, 32 or 64 bits");
    if constexpr (sizeof(T) == 8) {
        unsigned long long u;
        std::memcpy(&u, &value, 8);
        return u;
    } else if constexpr (sizeof(T) == 4) {
        unsigned u;
        std::memcpy(&u, &value, 4);
        return u;
    } else if constexpr (sizeof(T) == 2) {
        unsigned short u;
        std::memcpy(&u, &value, 2);
        return u;
    } else {
        unsigned char u;
        std::memcpy(&u, &value, 1);
        return u;
    }
}

template <class T>
Operand bind(const T& value, void* target) {
    Operand o;
    o.bits = bits_of(value);
    o.target = target;
    o.size = (unsigned char)sizeof(T);
    o.is_float = std::is_floating_point<T>::value;
    o.is_pointer = std::is_pointer<T>::value;
    return o;
}
template <class T>
Operand input(const T& value) {
    return bind(value, nullptr);
}
template <class T>
Operand output(T& object) {
    Operand o = bind(object, &object);
    o.bits = 0;  // an output's prior value is not an input
    return o;
}
template <class T>
Operand inout(T& object) {
    return bind(object, &object);
}

struct Program;

class Statement {
   public:
    // `constraints`: the operands' constraints joined by commas, outputs (`=`/`+`) first.
    Statement(const char* file, int line, const char* text, const char* constraints, int outputs);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    // Runs the statement on `operands` (count of them, plus a terminator the caller may pass).
    void execute(Operand* operands, int count) const;
    // Why the statement cannot run (empty when it parsed).
    const std::string& error() const { return error_; }

   private:
    std::string where_;  // "file:line: `text`", for messages
    std::string error_;
    Program* program_ = nullptr;
    mutable std::atomic<bool> bindings_checked_{false};
    int memo_id_ = -1;  // this statement's table of remembered results (ptx_exec.cpp), or -1
};

}  // namespace ptx
}  // namespace emu
