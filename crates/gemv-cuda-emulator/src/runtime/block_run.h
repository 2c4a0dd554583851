// The emulator's state of a launch and of the block each worker runs, shared by the runtime's
// files: fibers.cpp (stack switches, faults, one block's scheduling), launch.cpp (workers and the C
// interface), warp.cpp (shuffles, mma, barriers) and memory_checks.cpp (global bounds, shared
// races). Not seen by the kernels, which know only cuda_emu.h.
#pragma once

#include <setjmp.h>
#include <ucontext.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulator.h"  // first: its gemv_portable.cuh defines the types cuda_emu.h uses

#include "cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN_FIBERS 1
#endif

namespace emu {

// A fiber switch saves and restores only what the jump needs: GCC's (and clang's)
// __builtin_setjmp / __builtin_longjmp keep the frame, the stack pointer and the resume address,
// the compiler spilling the callee-saved registers around the setjmp, where glibc's _longjmp
// also demangles pointers and walks the thread's cancellation cleanups on every switch
// (docs/emulator.md has the measured difference). Under
// AddressSanitizer the glibc pair stays: its interceptor unpoisons the frames a jump abandons;
// so it does off x86-64, where not every compiler has the builtins.
#if defined(__x86_64__) && !defined(EMU_ASAN_FIBERS)
typedef void* JumpBuffer[5];
#define EMU_SETJMP(buffer) __builtin_setjmp(buffer)
#define EMU_LONGJMP(buffer) __builtin_longjmp(buffer, 1)
#else
typedef jmp_buf JumpBuffer;
#define EMU_SETJMP(buffer) _setjmp(buffer)
#define EMU_LONGJMP(buffer) _longjmp(buffer, 1)
#endif

constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;
// The most static shared memory a block may declare (CUDA's limit for __shared__ arrays).
constexpr size_t kMaxSharedBytes = 48 * 1024;
// Blocks of every launch whose shared memory is race- and initialisation-checked, byte by byte
// (every block is bounds-checked). All blocks run the same code, so structural races show in the
// first ones; checking every block of a large launch would cost minutes.
constexpr unsigned kTrackedBlocks = 2;
constexpr unsigned char kSharedPoison = 0xFF;  // NaN as f32 and as bf16 pairs: loud if read

enum class FiberState { Ready, Done, Faulted };

// One cp.async a thread issued and no cp.async.wait_group has completed yet.
struct AsyncCopy {
    unsigned dst;                // shared address (offset in the block's arena)
    const unsigned char* src;    // global source
    unsigned bytes;              // cp-size
    unsigned src_bytes;          // bytes read from src; the rest of the destination is zeroed
    unsigned group;              // the commit group it belongs to (committed groups before its issue)
};

struct Fiber {
    ucontext_t context;  // only to enter the fiber's stack the first time
    JumpBuffer env;      // where the fiber is suspended
    bool started = false;
    std::unique_ptr<char[]> stack;
    ThreadCoords coords;
    FiberState state = FiberState::Ready;
    unsigned shuffles_done = 0;  // shuffles this lane completed (its generation)
    unsigned barriers_done = 0;  // __syncthreads this thread completed
    std::vector<AsyncCopy> async_copies;  // in flight, in issue order
    unsigned async_groups = 0;            // cp.async.commit_group executed
    unsigned mbarrier_arrivals = 0;       // mbarrier arrives executed (releases of what it read)
    int waiting_mbarrier = -1;            // the mbarrier (index in BlockRun::mbarriers) it spins on
    bool grid_dependency_waited = false;  // griddepcontrol.wait executed
    unsigned waiting_parity = 0;
    void* asan_fake_stack = nullptr;
};

struct WarpState {
    unsigned value[2][32];
    unsigned mask[2][32];
    ShuffleKind kind[2][32];
    int width[2][32];
    unsigned payload[2][32][kMmaWords];  // mma.sync operands, per slot and lane
    unsigned arrived[32];  // generation + 1 of the last shuffle each lane arrived at
    // Full-mask shuffles (the kernels' only kind) complete by counting instead of scanning the
    // lanes on every resume: lanes arrived at the slot's generation, and whether the last lane to
    // arrive found every lane in agreement.
    unsigned slot_generation[2];
    unsigned count[2];
};

// What the race checker knows of one shared element (kept at the element's first byte): the last
// writer and up to two readers, each with the barrier epoch (completed __syncthreads + 1) of the
// access; 0 = none.
struct Shadow {
    unsigned write_epoch = 0;
    unsigned read_epoch = 0;
    unsigned short writer = 0;
    unsigned short reader = 0;
    unsigned short second_reader = 0;
    bool two_readers = false;
    bool in_flight = false;  // a cp.async of `writer` targets it and has not completed
    // mbarrier arrives each reader had executed when it read (see bulk copies, mbarriers.cpp).
    unsigned reader_arrivals = 0;
    unsigned second_reader_arrivals = 0;
};

// The write epoch of data a bulk copy landed: made visible by its mbarrier's phase, not by a
// __syncthreads, so it races with no epoch.
constexpr unsigned kAsyncProxyEpoch = 0xFFFFFFFEu;

// One cp.async.bulk in flight: it lands when a thread waits on its mbarrier.
struct BulkCopy {
    unsigned dst;
    const unsigned char* src;
    unsigned bytes;
    unsigned short issuer;
};

// An mbarrier object of the block (at a shared address).
struct Mbarrier {
    unsigned address;
    unsigned count;         // arrivals per phase
    unsigned pending;       // arrivals still missing in the current phase
    long long tx;           // transaction bytes still expected in the current phase
    unsigned phase = 0;     // phases completed
    std::vector<BulkCopy> copies;
    unsigned short initializer = 0;  // the thread whose mbarrier.init made it
    bool fenced = false;    // that thread's fence.proxy.async has followed the init
};

struct SharedDecl {
    const void* tag;
    const char* name;
    size_t offset;
    size_t bytes;
    size_t count;
};

struct Launch;

// One worker's block in flight.
struct BlockRun {
    Launch* launch = nullptr;
    std::vector<Fiber> fibers;
    std::vector<WarpState> warps;
    std::vector<unsigned> barrier_arrived;  // per thread: generation + 1 of its last barrier
    std::vector<unsigned char> barrier_or;  // per barrier generation: any __syncthreads_or predicate
    std::vector<unsigned> barrier_count;    // per barrier generation: threads arrived
    unsigned done = 0;                      // threads that exited
    JumpBuffer scheduler;
    Fiber* current = nullptr;
    unsigned long long events = 0;  // progress counter for deadlock detection
    std::string fault;
    // Loads and stores of the worker's blocks so far, by region and width (see EmuCounts); added
    // to the launch's when the worker ends, so the hot path touches no shared counter.
    unsigned long long loads[EMU_COUNTED_REGIONS][EMU_ACCESS_WIDTHS] = {};
    unsigned long long stores[EMU_COUNTED_REGIONS][EMU_ACCESS_WIDTHS] = {};
    // Shared memory of the block: declarations in order, the arena and its shadow.
    std::vector<SharedDecl> shared;
    size_t shared_used = 0;
    std::unique_ptr<unsigned char[]> arena{new unsigned char[kMaxSharedBytes]};
    std::vector<Shadow> shadow = std::vector<Shadow>(kMaxSharedBytes);
    std::vector<Mbarrier> mbarriers;
    bool tracking = false;  // this block's shared accesses are race-checked
    unsigned long long order_state = 0;  // seeded orders: the state each round's order is drawn from
    const void* scheduler_stack = nullptr;
    size_t scheduler_stack_size = 0;
    void* scheduler_fake_stack = nullptr;
};

struct Launch {
    const EmuKernel* kernel;
    EmuArgs args;
    const EmuRegion* regions;
    int region_count;
    dim3 grid, block;
    bool reversed;
    unsigned long long seed = 0;  // non-zero: block and thread orders drawn from it
    bool dependent = false;       // a programmatic dependent launch (see grid_dependency_wait)
    unsigned grid_ends = 0;       // non-zero: only blocks this close to either end of the grid run
    std::atomic<unsigned> next_block{0};
    std::atomic<bool> failed{false};
    std::atomic<unsigned long long> fallback_blocks{0};  // gemv_note_fallback calls
    EmuCounts counts{};                                  // every worker's loads and stores, under error_lock
    std::mutex error_lock;
    std::string error;
    // The lowest block (in start order) whose fault is in `error`: blocks start in order and a
    // started block runs to its end, so with several workers the report is still that of the
    // first faulting block.
    unsigned error_block = ~0u;
};

// A permutation of 0..n - 1 drawn from a seed: i -> (a i + c) mod n with a coprime to n. Cheap
// to evaluate at any i, so a launch of millions of blocks needs no table.
class Permutation {
   public:
    Permutation(unsigned n, unsigned long long seed) : n_(n) {
        const unsigned long long h = mix(seed);
        a_ = n_ <= 1 ? 1 : 1 + (h % (n_ - 1));
        while (gcd(a_, n_) != 1) a_ = a_ % (n_ - 1) + 1;
        c_ = n_ == 0 ? 0 : (mix(h) % n_);
    }
    unsigned at(unsigned i) const { return (unsigned)(((unsigned long long)a_ * i + c_) % n_); }
    static unsigned long long mix(unsigned long long x) {
        x += 0x9E3779B97F4A7C15ull;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        return x ^ (x >> 31);
    }

   private:
    static unsigned long long gcd(unsigned long long a, unsigned long long b) { return b == 0 ? a : gcd(b, a % b); }
    unsigned n_;
    unsigned long long a_ = 1, c_ = 0;
};

// The block the calling worker thread runs (a plain TLS pointer: no initialisation wrapper on the
// hot path of every checked access).
extern __thread BlockRun* t_block;

// printf into a std::string (not on a path that may fault: see fault).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

inline unsigned linear_tid(const ThreadCoords& c) {
    return c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z);
}

// Records the first fault of the block and leaves the calling fiber for good (fibers.cpp).
[[noreturn]] __attribute__((format(printf, 1, 2))) void fault(const char* fmt, ...);

// Gives the scheduler a turn; returns when the calling fiber is resumed.
void yield();

// The shared array holding [offset, offset + bytes) of the arena, or a fault naming `what`.
const SharedDecl& shared_decl_at(unsigned offset, size_t bytes, const char* what);

// Calls visit(array, element index, shadow) for each element of the shared array that
// [address, address + bytes) touches, in a tracked block (an asynchronous copy's destination).
template <class Visit>
void for_each_element_shadow(unsigned address, unsigned bytes, const char* what, Visit&& visit) {
    BlockRun& run = *t_block;
    if (!run.tracking) return;
    const SharedDecl& d = shared_decl_at(address, bytes, what);
    const size_t element = d.bytes / d.count;
    const size_t first = (address - d.offset) / element, last = (address + bytes - 1 - d.offset) / element;
    for (size_t e = first; e <= last; ++e) visit(d, e, run.shadow[d.offset + e * element]);
}

// Faults where the calling thread ends with cp.async copies in flight (async_copies.cpp).
void async_copies_at_exit();
// Faults where the block ends with bulk copies that never landed (mbarriers.cpp).
void bulk_copies_at_block_end(BlockRun& run);
// What a thread spinning on an mbarrier waits for, for the deadlock report.
std::string mbarrier_wait_description(const BlockRun& run, const Fiber& f);

// Runs one block to completion; returns false (with run.fault set) on a fault or deadlock.
bool run_block(BlockRun& run, dim3 block_idx);

}  // namespace emu
