// The instruction forms the PTX executor implements: for each opcode, the operands it takes and
// their widths, and what the executor needs to know of it. Anything else is an error.
#include "ptx_forms.h"

#include <algorithm>
#include <iterator>

namespace emu {
namespace ptx {

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

namespace {

class Forms {
   public:
    explicit Forms(const Program& program) : program_(program) {}

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

    // ld.global.nc{.L1::eviction}{.L2::prefetch}{.v2,.v4}.{b,u,s,f}32 d|{d, ..}, [a{+offset}]: the
    // read-only data path, 32-bit elements; the qualifiers are hints with no effect on the bits.
    std::string global_load(const std::string& opcode, const std::vector<Arg>& args, Instruction& in) {
        static const char* const kHints[] = {"L1::no_allocate", "L1::evict_first", "L1::evict_last",
                                             "L1::evict_normal", "L1::evict_unchanged", "L2::64B",
                                             "L2::128B", "L2::256B"};
        in.op = Op::LdGlobalNc;
        size_t count = 1;
        std::string type;
        size_t start = std::string("ld.global.nc.").size();
        while (start <= opcode.size()) {
            const size_t dot = opcode.find('.', start);
            const std::string part = opcode.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            start = dot == std::string::npos ? opcode.size() + 1 : dot + 1;
            if (!type.empty()) return "the type must come last";
            if (part == "v2" || part == "v4") {
                if (count != 1) return "two vector widths";
                count = part == "v2" ? 2 : 4;
            } else if (part == "b32" || part == "u32" || part == "s32" || part == "f32") {
                type = part;
            } else if (std::find(std::begin(kHints), std::end(kHints), part) == std::end(kHints)) {
                return "qualifier ." + part + " not supported by the executor";
            }
        }
        if (type.empty()) return "loads of 32-bit elements only";
        if (args.size() != 2) return "takes a destination and [address]";
        if (count == 1) {
            const Arg& d = args[0];
            if (d.kind != Arg::Register || program_.slots[d.slots[0]].kind == SlotKind::Immediate || bits(d.slots[0]) != 32) {
                return "the destination must be a 32-bit register";
            }
            in.args[in.arg_count++] = d.slots[0];
        } else if (std::string e = vector(args[0], count, 32, in, "the destination"); !e.empty()) {
            return e;
        }
        if (args[1].kind != Arg::Memory || bits(args[1].slots[0]) != 64) {
            return "the source must be a 64-bit global address in brackets";
        }
        in.args[in.arg_count++] = args[1].slots[0];
        in.offset = args[1].offset;
        in.copy_bytes = (unsigned)(4 * count);
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
        if (opcode.rfind("ld.global.nc.", 0) == 0) return global_load(opcode, args, in);
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

   private:
    const Program& program_;
};

}  // namespace

std::string build_instruction(const std::string& opcode, const std::vector<Arg>& args, const Program& program,
                              Instruction& in) {
    return Forms(program).build(opcode, args, in);
}

}  // namespace ptx
}  // namespace emu
