// Parses an inline-PTX template into a Program (ptx_program.h): `{ }` scopes with `.reg`
// declarations, `%N` operands, vectors `{a, b}`, memory operands `[a]` / `[a+imm]`, immediates;
// each instruction checked against the forms the executor implements, with the widths of its
// registers. Anything else is an error naming what was not understood.
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "ptx_program.h"

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

// An instruction's operand as parsed: registers (one, or a vector's), or a memory reference.
struct Arg {
    enum Kind { Register, Vector, Memory } kind = Register;
    std::vector<int> slots;
    long long offset = 0;
};

int register_bits(const std::string& type) {
    if (type == ".pred") return 1;
    static const char* const k16[] = {".b16", ".u16", ".s16", ".f16", ".bf16"};
    static const char* const k32[] = {".b32", ".u32", ".s32", ".f32", ".f16x2", ".bf16x2"};
    static const char* const k64[] = {".b64", ".u64", ".s64", ".f64"};
    for (const char* t : k16)
        if (type == t) return 16;
    for (const char* t : k32)
        if (type == t) return 32;
    for (const char* t : k64)
        if (type == t) return 64;
    return 0;
}

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
        if (std::string e = build(opcode, args, in); !e.empty()) return "`" + opcode + "`: " + e;
        // Which arguments the instruction writes: the first (mma: the four of D; an unpacking mov:
        // the vector); prefetch writes none.
        int first_written = 0, written = 1;
        if (in.op == Op::MmaBf16) written = 4;
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

    // Expects `arity` single registers of the given widths (0: any width); an immediate fits any.
    std::string registers(const std::vector<Arg>& args, std::initializer_list<int> widths, Instruction& in) {
        if (args.size() != widths.size()) return "takes " + std::to_string(widths.size()) + " operands";
        size_t i = 0;
        for (int width : widths) {
            const Arg& a = args[i++];
            if (a.kind != Arg::Register) return "operand " + std::to_string(i) + " must be a register";
            const int slot = a.slots[0];
            const Slot& s = program_.slots[slot];
            if (s.kind != SlotKind::Immediate && s.constraint != 'n' && width != 0 && s.bits != width) {
                return "operand " + std::to_string(i) + " (" + s.name + ") is " + std::to_string(s.bits) +
                       " bits, the instruction needs " + std::to_string(width);
            }
            if (i == 1 && s.kind == SlotKind::Immediate) return "the destination is an immediate";
            in.args[in.arg_count++] = slot;
        }
        return "";
    }

    std::string vector(const Arg& a, size_t count, int width, Instruction& in, const char* what) {
        if (a.kind != Arg::Vector || a.slots.size() != count) {
            return std::string(what) + " must be a vector of " + std::to_string(count) + " registers";
        }
        for (int slot : a.slots) {
            if (program_.slots[slot].kind != SlotKind::Immediate && bits(slot) != width) {
                return std::string(what) + ": register " + program_.slots[slot].name + " is not " +
                       std::to_string(width) + " bits";
            }
            in.args[in.arg_count++] = slot;
        }
        return "";
    }

    // A 32-bit shared address in brackets, with no displacement.
    std::string shared_address(const Arg& a, Instruction& in, const char* what) {
        if (a.kind != Arg::Memory || bits(a.slots[0]) != 32 || a.offset != 0) {
            return std::string(what) + " must be a 32-bit shared address in brackets";
        }
        in.args[in.arg_count++] = a.slots[0];
        return "";
    }

    // A 32-bit register or a constant.
    std::string count_operand(const Arg& a, Instruction& in, const char* what) {
        const Slot& s = program_.slots[a.slots[0]];
        if (a.kind != Arg::Register || (s.kind != SlotKind::Immediate && s.constraint != 'n' && s.bits != 32)) {
            return std::string(what) + " must be a 32-bit register or a constant";
        }
        in.args[in.arg_count++] = a.slots[0];
        return "";
    }

    std::string build(const std::string& opcode, const std::vector<Arg>& args, Instruction& in) {
        if (opcode == "prmt.b32") {
            in.op = Op::Prmt;
            return registers(args, {32, 32, 32, 32}, in);
        }
        if (opcode == "mul.rn.f16x2") {
            in.op = Op::MulF16x2;
            return registers(args, {32, 32, 32}, in);
        }
        if (opcode == "fma.rn.bf16x2") {
            in.op = Op::FmaBf16x2;
            return registers(args, {32, 32, 32, 32}, in);
        }
        if (opcode == "cvt.f32.f16") {
            in.op = Op::CvtF32F16;
            return registers(args, {32, 16}, in);
        }
        if (opcode == "cvt.rn.f16x2.e4m3x2") {
            in.op = Op::CvtF16x2E4m3x2;
            return registers(args, {32, 16}, in);
        }
        if (opcode == "prefetch.global.L2") {
            in.op = Op::PrefetchL2;
            if (args.size() != 1 || args[0].kind != Arg::Memory) return "takes one memory operand";
            if (bits(args[0].slots[0]) != 64) return "the address must be a 64-bit register";
            in.args[in.arg_count++] = args[0].slots[0];
            in.offset = args[0].offset;
            return "";
        }
        if (opcode == "cp.async.ca.shared.global" || opcode == "cp.async.cg.shared.global") {
            // cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}: dst a 32-bit shared
            // address, src a 64-bit global one; .cg copies 16 bytes only.
            in.op = Op::CpAsync;
            if (args.size() != 3 && args.size() != 4) return "takes [dst], [src], cp-size and an optional src-size";
            if (args[0].kind != Arg::Memory || bits(args[0].slots[0]) != 32) {
                return "the destination must be a 32-bit shared address in brackets";
            }
            if (args[1].kind != Arg::Memory || bits(args[1].slots[0]) != 64) {
                return "the source must be a 64-bit global address in brackets";
            }
            const Slot& size = program_.slots[args[2].slots[0]];
            if (args[2].kind != Arg::Register || size.kind != SlotKind::Immediate) return "cp-size must be a constant";
            const bool cg = opcode.rfind("cp.async.cg", 0) == 0;
            if (!(size.value == 16 || (!cg && (size.value == 4 || size.value == 8)))) {
                return std::string("cp-size ") + std::to_string(size.value) + " is not one of " +
                       (cg ? "16 (.cg)" : "4, 8, 16");
            }
            in.copy_bytes = (unsigned)size.value;
            in.args[in.arg_count++] = args[0].slots[0];
            in.args[in.arg_count++] = args[1].slots[0];
            in.offset = args[0].offset;
            in.source_offset = args[1].offset;
            if (args.size() == 4) {
                if (args[3].kind != Arg::Register) return "src-size must be a register or a constant";
                const Slot& s = program_.slots[args[3].slots[0]];
                if (s.kind != SlotKind::Immediate && s.bits != 32) return "src-size must be a 32-bit register";
                in.args[in.arg_count++] = args[3].slots[0];
            }
            return "";
        }
        if (opcode == "selp.b32" || opcode == "selp.u32" || opcode == "selp.s32") {
            in.op = Op::Selp;
            return registers(args, {32, 32, 32, 1}, in);
        }
        if (opcode == "fence.proxy.async.shared::cta") {
            in.op = Op::FenceProxyAsync;
            return args.empty() ? "" : "takes no operands";
        }
        if (opcode == "mbarrier.init.shared::cta.b64") {
            in.op = Op::MbarrierInit;
            if (args.size() != 2 || args[1].kind != Arg::Register) return "takes [address] and a count";
            if (std::string e = shared_address(args[0], in, "the mbarrier"); !e.empty()) return e;
            return count_operand(args[1], in, "the count");
        }
        if (opcode == "mbarrier.arrive.shared::cta.b64" || opcode == "mbarrier.arrive.expect_tx.shared::cta.b64") {
            in.op = Op::MbarrierArrive;
            const bool tx = opcode.find("expect_tx") != std::string::npos;
            if (args.size() != (tx ? 3u : 2u)) return tx ? "takes state, [address] and a byte count" : "takes state and [address]";
            if (args[0].kind != Arg::Register || bits(args[0].slots[0]) != 64) return "the state must be a 64-bit register";
            in.args[in.arg_count++] = args[0].slots[0];
            if (std::string e = shared_address(args[1], in, "the mbarrier"); !e.empty()) return e;
            return tx ? count_operand(args[2], in, "the byte count") : "";
        }
        if (opcode == "mbarrier.try_wait.parity.shared::cta.b64") {
            in.op = Op::MbarrierTryWait;
            if (args.size() != 3) return "takes a predicate, [address] and a parity";
            if (args[0].kind != Arg::Register || bits(args[0].slots[0]) != 1) return "the result must be a .pred register";
            in.args[in.arg_count++] = args[0].slots[0];
            if (std::string e = shared_address(args[1], in, "the mbarrier"); !e.empty()) return e;
            return count_operand(args[2], in, "the parity");
        }
        if (opcode == "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") {
            in.op = Op::BulkCopy;
            if (args.size() != 4) return "takes [dst], [src], a size and [mbarrier]";
            if (std::string e = shared_address(args[0], in, "the destination"); !e.empty()) return e;
            if (args[1].kind != Arg::Memory || bits(args[1].slots[0]) != 64 || args[1].offset != 0) {
                return "the source must be a 64-bit global address in brackets";
            }
            in.args[in.arg_count++] = args[1].slots[0];
            if (std::string e = count_operand(args[2], in, "the size"); !e.empty()) return e;
            return shared_address(args[3], in, "the mbarrier");
        }
        if (opcode == "griddepcontrol.wait" || opcode == "griddepcontrol.launch_dependents") {
            in.op = opcode == "griddepcontrol.wait" ? Op::GridDepWait : Op::GridDepLaunch;
            return args.empty() ? "" : "takes no operands";
        }
        if (opcode == "atom.global.add.u32" || opcode == "red.global.add.u32") {
            const bool atom = opcode[0] == 'a';
            in.op = atom ? Op::AtomAdd : Op::RedAdd;
            if (args.size() != (atom ? 3u : 2u)) return atom ? "takes d, [address] and a value" : "takes [address] and a value";
            if (atom) {
                if (args[0].kind != Arg::Register || bits(args[0].slots[0]) != 32) return "d must be a 32-bit register";
                in.args[in.arg_count++] = args[0].slots[0];
            }
            const Arg& address = args[atom ? 1 : 0];
            if (address.kind != Arg::Memory || bits(address.slots[0]) != 64 || address.offset != 0) {
                return "the address must be a 64-bit global address in brackets";
            }
            in.args[in.arg_count++] = address.slots[0];
            return count_operand(args[atom ? 2 : 1], in, "the value");
        }
        if (opcode == "cp.async.commit_group" || opcode == "cp.async.wait_all") {
            in.op = opcode == "cp.async.wait_all" ? Op::CpAsyncWaitAll : Op::CpAsyncCommit;
            return args.empty() ? "" : "takes no operands";
        }
        if (opcode == "cp.async.wait_group") {
            in.op = Op::CpAsyncWait;
            if (args.size() != 1 || args[0].kind != Arg::Register) return "takes one constant";
            const Slot& n = program_.slots[args[0].slots[0]];
            if (n.kind != SlotKind::Immediate && n.constraint != 'n') return "the group count must be a constant";
            in.args[in.arg_count++] = args[0].slots[0];
            return "";
        }
        if (opcode == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") {
            in.op = Op::MmaBf16;
            if (args.size() != 4) return "takes four vector operands";
            std::string e = vector(args[0], 4, 32, in, "D");
            if (e.empty()) e = vector(args[1], 4, 32, in, "A");
            if (e.empty()) e = vector(args[2], 2, 32, in, "B");
            if (e.empty()) e = vector(args[3], 4, 32, in, "C");
            return e;
        }
        if (opcode.rfind("mov.", 0) == 0) {
            const int width = register_bits(opcode.substr(3));
            if (width == 0) return "type not supported";
            if (args.size() != 2) return "takes two operands";
            if (args[0].kind == Arg::Vector || args[1].kind == Arg::Vector) {
                const bool unpack = args[0].kind == Arg::Vector;
                const Arg& vec = unpack ? args[0] : args[1];
                const Arg& whole = unpack ? args[1] : args[0];
                if (whole.kind != Arg::Register || bits(whole.slots[0]) != width) {
                    return "the packed operand must be a " + std::to_string(width) + "-bit register";
                }
                const int parts = (int)vec.slots.size();
                if (parts < 2 || width % parts != 0) return "cannot split " + std::to_string(width) + " bits that way";
                in.op = unpack ? Op::MovUnpack : Op::MovPack;
                in.part_bits = width / parts;
                in.args[in.arg_count++] = whole.slots[0];
                return vector(vec, (size_t)parts, width / parts, in, "the vector");
            }
            in.op = Op::Mov;
            return registers(args, {width, width}, in);
        }
        if (opcode.rfind("cvt.", 0) == 0) {
            // cvt.{u,s}N.{u,s}M between integers: truncation or extension.
            const std::string rest = opcode.substr(4);
            const size_t dot = rest.find('.');
            if (dot == std::string::npos) return "unknown conversion";
            const std::string to = "." + rest.substr(0, dot), from = rest.substr(dot);
            const bool integers = (to[1] == 'u' || to[1] == 's') && (from[1] == 'u' || from[1] == 's');
            if (!integers || register_bits(to) == 0 || register_bits(from) == 0) {
                return "conversion not supported by the executor";
            }
            in.op = Op::CvtInteger;
            in.to_bits = register_bits(to);
            in.from_bits = register_bits(from);
            in.from_signed = from[1] == 's';
            return registers(args, {in.to_bits, in.from_bits}, in);
        }
        return "instruction not supported by the executor";
    }

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
