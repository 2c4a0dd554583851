// A parsed inline-PTX statement (ptx_parse.cpp builds it, ptx_exec.cpp runs it): every
// register, operand and immediate is a slot of one small register file; instructions name
// slots.
#pragma once

#include <string>
#include <vector>

namespace emu {
namespace ptx {

// Slots and arguments per statement and instruction; a template that needs more is an error.
constexpr int kMaxSlots = 64;
constexpr int kMaxArgs = 14;

enum class SlotKind : unsigned char { Operand, Local, Immediate };

struct Slot {
    Slot(SlotKind kind_, unsigned char bits_) : kind(kind_), bits(bits_) {}
    SlotKind kind;
    unsigned char bits;      // register width: 16, 32 or 64
    int operand = -1;        // SlotKind::Operand: its %N
    char constraint = 0;     // SlotKind::Operand: its letter (h, r, l, f, d, n)
    bool readable = false;   // an input or in-out operand, or an immediate
    bool writable = false;   // an output or in-out operand, or a local
    unsigned long long value = 0;  // SlotKind::Immediate
    std::string name;        // for messages
};

enum class Op : unsigned char {
    Mov,             // mov.bN d, a
    MovPack,         // mov.bN d, {a, b, ...}: a in the low bits
    MovUnpack,       // mov.bN {a, b, ...}, s
    CvtInteger,      // cvt.{u,s}N.{u,s}M: truncation or extension
    CvtF32F16,       // cvt.f32.f16: exact
    CvtF16x2E4m3x2,  // cvt.rn.f16x2.e4m3x2: two E4M3 codes to two binary16, exact
    Prmt,            // prmt.b32, default mode
    MulF16x2,        // mul.rn.f16x2
    FmaBf16x2,       // fma.rn.bf16x2
    MmaBf16,         // mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
    PrefetchL2,      // prefetch.global.L2 [a]
    CpAsync,         // cp.async.{ca,cg}.shared.global [d], [s], size{, src_size}
    CpAsyncCommit,   // cp.async.commit_group
    CpAsyncWait,     // cp.async.wait_group n
    CpAsyncWaitAll,  // cp.async.wait_all
    Selp,            // selp.{b,u,s}32 d, a, b, p
    MbarrierInit,    // mbarrier.init.shared::cta.b64 [a], count
    MbarrierArrive,  // mbarrier.arrive{.expect_tx}.shared::cta.b64 state, [a]{, tx}
    MbarrierTryWait, // mbarrier.try_wait.parity.shared::cta.b64 p, [a], parity
    BulkCopy,        // cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [d], [s], n, [a]
    FenceProxyAsync, // fence.proxy.async.shared::cta
    GridDepWait,     // griddepcontrol.wait
    GridDepLaunch,   // griddepcontrol.launch_dependents
    AtomAdd,         // atom.global.add.u32 d, [a], b
    RedAdd,          // red.global.add.u32 [a], b
    ElectSync,       // elect.sync d|p, mask (d may be _): args p, mask{, d}
    LdGlobalNc,      // ld.global.nc{.L1::..}{.L2::..B}{.v2,.v4}.{b,u,s,f}32 d|{d, ..}, [a+offset]
};

// Whether an instruction touches memory or other threads' state (never remembered, and writes
// no register).
inline bool has_effects(Op op) {
    return op == Op::PrefetchL2 || op == Op::CpAsync || op == Op::CpAsyncCommit || op == Op::CpAsyncWait ||
           op == Op::CpAsyncWaitAll || op == Op::MbarrierInit || op == Op::BulkCopy || op == Op::FenceProxyAsync ||
           op == Op::GridDepWait || op == Op::GridDepLaunch || op == Op::RedAdd;
}
// Whether an instruction touches memory or other threads' state but writes its first operand
// (never remembered).
inline bool has_effects_and_result(Op op) {
    return op == Op::MbarrierArrive || op == Op::MbarrierTryWait || op == Op::AtomAdd || op == Op::ElectSync;
}

struct Instruction {
    Op op;
    int args[kMaxArgs];
    int arg_count = 0;
    // CvtInteger: destination and source widths and signedness.
    int to_bits = 0, from_bits = 0;
    bool from_signed = false;
    int part_bits = 0;     // MovPack / MovUnpack: the width of each vector element
    long long offset = 0;  // PrefetchL2, CpAsync, LdGlobalNc: the (first) address's displacement
    long long source_offset = 0;  // CpAsync: the global address's displacement
    unsigned copy_bytes = 0;      // CpAsync: cp-size; LdGlobalNc: the bytes loaded
    unsigned long long reads = 0, writes = 0;  // slots read and written, as bit masks
    std::string text;      // the instruction as written, for messages
};

struct Program {
    std::vector<Slot> slots;
    std::vector<Instruction> code;
    int operand_count = 0;
    int output_count = 0;
    // The immediates' slots (the only slots with a value before the statement runs), and each
    // slot's width as a mask.
    std::vector<int> immediates;
    unsigned long long masks[kMaxSlots] = {};
};

// Parses `text` (with `%=` already meaning this statement's number) for operands with these
// constraints; returns an error message, empty on success. The template is straight-line code, so
// what a GPU would leave undefined is found here, once, rather than on every execution: an
// output never written, an output or register read before it is written, a write to an input.
std::string parse_program(const std::string& text, const std::vector<std::string>& constraints, int outputs,
                          Program& program);

}  // namespace ptx
}  // namespace emu
