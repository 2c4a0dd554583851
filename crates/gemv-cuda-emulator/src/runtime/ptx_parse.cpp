// Parses an inline-PTX template into a Program (ptx_program.h): `{ }` scopes with `.reg`
// declarations, `%N` operands, vectors `{a, b}`, memory operands `[a]` / `[a+imm]`, immediates;
// each instruction checked against the forms the executor implements (ptx_forms.cpp), with the
// widths of its registers. Anything else is an error naming what was not understood.
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "ptx_forms.h"

namespace emu {
namespace ptx {

namespace {

struct Token {
    enum Kind { Word, OperandRef, Number, Punct, End } kind;
    std::string text;
    unsigned long long number = 0;
};

class Lexer {
   public:
    explicit Lexer(const std::string& text) : s_(text) {}

    Token next() {
        while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_;
        if (i_ >= s_.size()) return {Token::End, ""};
        const char c = s_[i_];
        if (c == '%' && i_ + 1 < s_.size() && std::isdigit((unsigned char)s_[i_ + 1])) {
            size_t j = i_ + 1;
            while (j < s_.size() && std::isdigit((unsigned char)s_[j])) ++j;
            Token t{Token::OperandRef, s_.substr(i_, j - i_)};
            t.number = std::strtoull(s_.c_str() + i_ + 1, nullptr, 10);
            i_ = j;
            return t;
        }
        const bool negative = c == '-' && i_ + 1 < s_.size() && std::isdigit((unsigned char)s_[i_ + 1]);
        if (std::isdigit((unsigned char)c) || negative) {
            char* end = nullptr;
            const long long value = std::strtoll(s_.c_str() + i_, &end, 0);
            Token t{Token::Number, ""};
            t.number = (unsigned long long)value;
            if (c != '-') t.number = std::strtoull(s_.c_str() + i_, &end, 0);
            size_t j = (size_t)(end - s_.c_str());
            if (j < s_.size() && (s_[j] == 'U' || s_[j] == 'u')) ++j;
            t.text = s_.substr(i_, j - i_);
            i_ = j;
            return t;
        }
        if (std::isalpha((unsigned char)c) || c == '_' || c == '.' || c == '%' || c == '$') {
            size_t j = i_;
            std::string word;
            while (j < s_.size()) {
                const char d = s_[j];
                if (d == '%' && j + 1 < s_.size() && s_[j + 1] == '%') {
                    word += '%';
                    j += 2;
                } else if (d == ':' && j + 1 < s_.size() && s_[j + 1] == ':' && j > i_) {
                    word += "::";  // a state space or qualifier (`shared::cta`), not a label
                    j += 2;
                } else if (std::isalnum((unsigned char)d) || d == '_' || d == '.' || d == '$' ||
                           (d == '%' && j == i_)) {
                    word += d;
                    ++j;
                } else {
                    break;
                }
            }
            i_ = j;
            return {Token::Word, word};
        }
        ++i_;
        return {Token::Punct, std::string(1, c)};
    }

   private:
    const std::string& s_;
    size_t i_ = 0;
};

int constraint_bits(char letter) {
    switch (letter) {
        case 'h':
            return 16;
        case 'r':
        case 'f':
            return 32;
        case 'l':
        case 'd':
        case 'n':
            return 64;
        default:
            return 0;
    }
}

class Parser {
   public:
    Parser(const std::string& text, Program& program) : lexer_(text), program_(program) {}

    std::string run() {
        scopes_.emplace_back();
        while (true) {
            Token t = lexer_.next();
            if (t.kind == Token::End) break;
            if (t.kind == Token::Punct && t.text == "{") {
                scopes_.emplace_back();
            } else if (t.kind == Token::Punct && t.text == "}") {
                if (scopes_.size() == 1) return "a `}` closes no scope";
                scopes_.pop_back();
            } else if (t.kind == Token::Punct && t.text == ";") {
                continue;
            } else if (t.kind == Token::Word && t.text == ".reg") {
                if (std::string e = declaration(); !e.empty()) return e;
            } else if (t.kind == Token::Punct && t.text == "@") {
                return "predicated instructions are not supported by the executor";
            } else if (t.kind == Token::Word && t.text[0] != '.') {
                if (std::string e = instruction(t.text); !e.empty()) return e;
            } else {
                return "unexpected `" + t.text + "`";
            }
        }
        if (scopes_.size() != 1) return "a `{` scope is never closed";
        return "";
    }

   private:
    std::string declaration() {
        const Token type = lexer_.next();
        const int bits = register_bits(type.text);
        if (bits == 0) return "register type `" + type.text + "` is not supported by the executor";
        while (true) {
            const Token name = lexer_.next();
            if (name.kind != Token::Word || name.text[0] == '.') return "expected a register name after .reg";
            if (name.text.find('<') != std::string::npos) return "register arrays are not supported";
            if (program_.slots.size() >= (size_t)kMaxSlots) return "too many registers";
            Slot slot{SlotKind::Local, (unsigned char)bits};
            slot.writable = true;  // readable once written
            slot.name = name.text;
            scopes_.back().push_back({name.text, (int)program_.slots.size()});
            program_.slots.push_back(slot);
            const Token sep = lexer_.next();
            if (sep.text == ";") return "";
            if (sep.text != ",") return "expected `,` or `;` in a .reg declaration";
        }
    }

    // A register operand: %N, a declared local, or an immediate.
    std::string register_operand(const Token& t, int& slot) {
        if (t.kind == Token::OperandRef) {
            if (t.number >= (unsigned long long)program_.operand_count) return "operand " + t.text + " does not exist";
            slot = (int)t.number;
            return "";
        }
        if (t.kind == Token::Number) {
            if (program_.slots.size() >= (size_t)kMaxSlots) return "too many registers";
            Slot s{SlotKind::Immediate, 64};
            s.readable = true;
            s.value = t.number;
            s.name = t.text;
            slot = (int)program_.slots.size();
            program_.slots.push_back(s);
            return "";
        }
        if (t.kind == Token::Word) {
            for (size_t i = scopes_.size(); i-- > 0;) {
                for (const auto& [name, index] : scopes_[i]) {
                    if (name == t.text) {
                        slot = index;
                        return "";
                    }
                }
            }
            return "register `" + t.text + "` is not declared";
        }
        return "expected a register, found `" + t.text + "`";
    }

    std::string argument(Arg& arg, Token& t) {
        if (t.kind == Token::Punct && t.text == "{") {
            arg.kind = Arg::Vector;
            while (true) {
                int slot = -1;
                if (std::string e = register_operand(lexer_.next(), slot); !e.empty()) return e;
                arg.slots.push_back(slot);
                const Token sep = lexer_.next();
                if (sep.text == "}") break;
                if (sep.text != ",") return "expected `,` or `}` in a vector operand";
            }
        } else if (t.kind == Token::Punct && t.text == "[") {
            arg.kind = Arg::Memory;
            int slot = -1;
            if (std::string e = register_operand(lexer_.next(), slot); !e.empty()) return e;
            arg.slots.push_back(slot);
            Token sep = lexer_.next();
            if (sep.text == "+") {
                const Token offset = lexer_.next();
                if (offset.kind != Token::Number) return "expected a displacement after `+`";
                arg.offset = (long long)offset.number;
                sep = lexer_.next();
            }
            if (sep.text != "]") return "expected `]` closing a memory operand";
        } else {
            int slot = -1;
            if (std::string e = register_operand(t, slot); !e.empty()) return e;
            arg.slots.push_back(slot);
        }
        t = lexer_.next();
        return "";
    }

    // elect.sync d|p, membermask: d a 32-bit register or `_`, p a predicate.
    std::string elect(Instruction& in) {
        in.op = Op::ElectSync;
        in.text = "elect.sync";
        int lane = -1, predicate = -1, mask = -1;
        const Token d = lexer_.next();
        if (!(d.kind == Token::Word && d.text == "_")) {
            if (std::string e = register_operand(d, lane); !e.empty()) return e;
            if (bits(lane) != 32) return "the elected lane must be a 32-bit register or _";
        }
        if (lexer_.next().text != "|") return "expected `|` between the lane and the predicate";
        if (std::string e = register_operand(lexer_.next(), predicate); !e.empty()) return e;
        if (bits(predicate) != 1) return "the result must be a .pred register";
        if (lexer_.next().text != ",") return "expected `,` before the member mask";
        if (std::string e = register_operand(lexer_.next(), mask); !e.empty()) return e;
        const Slot& m = program_.slots[mask];
        if (m.kind != SlotKind::Immediate && m.constraint != 'n' && m.bits != 32) return "the member mask is 32 bits";
        if (lexer_.next().text != ";") return "`elect.sync` is not ended by `;`";
        in.args[in.arg_count++] = predicate;
        in.args[in.arg_count++] = mask;
        in.writes |= 1ull << predicate;
        in.reads |= 1ull << mask;
        if (lane >= 0) {
            in.args[in.arg_count++] = lane;
            in.writes |= 1ull << lane;
        }
        return "";
    }

    std::string instruction(const std::string& opcode) {
        if (opcode == "elect.sync") {
            Instruction in;
            if (std::string e = elect(in); !e.empty()) return "`elect.sync`: " + e;
            program_.code.push_back(in);
            return "";
        }
        std::vector<Arg> args;
        Token t = lexer_.next();
        while (!(t.kind == Token::Punct && t.text == ";")) {
            if (t.kind == Token::End) return "`" + opcode + "` is not ended by `;`";
            if (t.kind == Token::Punct && t.text == ":") return "labels and branches are not supported";
            Arg arg;
            if (std::string e = argument(arg, t); !e.empty()) return "`" + opcode + "`: " + e;
            args.push_back(arg);
            if (t.kind == Token::Punct && t.text == ",") t = lexer_.next();
        }
        Instruction in;
        in.text = opcode;
        if (std::string e = build_instruction(opcode, args, program_, in); !e.empty()) {
            return "`" + opcode + "`: " + e;
        }
        // Which arguments the instruction writes: the first (mma: the four of D; an unpacking mov:
        // the vector; a load: its destinations); prefetch writes none.
        int first_written = 0, written = 1;
        if (in.op == Op::MmaBf16) written = 4;
        if (in.op == Op::LdGlobalNc) written = in.arg_count - 1;
        if (in.op == Op::MovUnpack) first_written = 1, written = in.arg_count - 1;
        if (has_effects(in.op)) written = 0;
        for (int a = 0; a < in.arg_count; ++a) {
            const bool is_written = a >= first_written && a < first_written + written;
            (is_written ? in.writes : in.reads) |= 1ull << in.args[a];
        }
        program_.code.push_back(in);
        return "";
    }

    int bits(int slot) const { return program_.slots[slot].bits; }

    Lexer lexer_;
    Program& program_;
    std::vector<std::vector<std::pair<std::string, int>>> scopes_;
};

}  // namespace

std::string parse_program(const std::string& text, const std::vector<std::string>& constraints, int outputs,
                          Program& program) {
    program.operand_count = (int)constraints.size();
    program.output_count = outputs;
    for (size_t i = 0; i < constraints.size(); ++i) {
        const std::string& c = constraints[i];
        char letter = 0;
        for (char ch : c)
            if (std::isalpha((unsigned char)ch)) letter = ch;
        const int width = constraint_bits(letter);
        if (width == 0) return "operand %" + std::to_string(i) + ": constraint \"" + c + "\" is not supported";
        const bool is_output = (int)i < outputs;
        if (is_output != (c.find('=') != std::string::npos || c.find('+') != std::string::npos)) {
            return "operand %" + std::to_string(i) + ": constraint \"" + c + "\" does not match its section";
        }
        Slot slot{SlotKind::Operand, (unsigned char)width};
        slot.operand = (int)i;
        slot.constraint = letter;
        slot.readable = !is_output || c.find('+') != std::string::npos;
        slot.writable = is_output;
        slot.name = "%" + std::to_string(i);
        program.slots.push_back(slot);
    }
    if (std::string e = Parser(text, program).run(); !e.empty()) return e;
    unsigned long long written = 0;
    for (const Instruction& in : program.code) {
        for (size_t s = 0; s < program.slots.size(); ++s) {
            const Slot& slot = program.slots[s];
            if ((in.reads >> s & 1ull) && !slot.readable && !(written >> s & 1ull)) {
                const char* what = slot.kind == SlotKind::Operand ? "output operand " : "register ";
                return "`" + in.text + "`: reads " + what + slot.name + " before writing it";
            }
        }
        for (size_t s = 0; s < program.slots.size(); ++s) {
            if (!(in.writes >> s & 1ull)) continue;
            if (!program.slots[s].writable) {
                return "`" + in.text + "`: writes input operand " + program.slots[s].name +
                       ", which the compiler assumes unchanged";
            }
            written |= 1ull << s;
        }
    }
    for (int i = 0; i < outputs; ++i) {
        if (!program.slots[i].readable && !(written >> i & 1ull)) {
            return "output operand %" + std::to_string(i) + " is never written";
        }
    }
    for (size_t s = 0; s < program.slots.size(); ++s) {
        if (program.slots[s].kind == SlotKind::Immediate) program.immediates.push_back((int)s);
        program.masks[s] = program.slots[s].bits >= 64 ? ~0ull : (1ull << program.slots[s].bits) - 1ull;
    }
    return "";
}

}  // namespace ptx
}  // namespace emu
