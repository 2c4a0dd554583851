// The SIMT emulator's runtime: fibers, deterministic scheduling, warp shuffles, block barriers,
// checked shared memory and the global memory checker (docs/emulator.md). Blocks are independent
// and run on worker threads; inside a block every thread is a fiber, resumed round-robin in
// thread-index order (or its reverse). Fibers jump between their own stacks (no signal-mask
// syscalls; see JumpBuffer); the fortified longjmp would reject that, so it is turned off for
// this file. Under AddressSanitizer every switch is announced to it.
#undef _FORTIFY_SOURCE
#include "emulator.h"

#include <setjmp.h>
#include <ucontext.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN_FIBERS 1
#endif

namespace emu {
namespace {

// A fiber switch saves and restores only what the jump needs: GCC's (and clang's)
// __builtin_setjmp / __builtin_longjmp keep the frame, the stack pointer and the resume address,
// the compiler spilling the callee-saved registers around the setjmp, where glibc's _longjmp
// also demangles pointers and walks the thread's cancellation cleanups on every switch (gates 1,
// 3, 5 and 6 on sm_89, 2-core machine: 6.2-7.0 s of CPU against 6.9-7.6 with glibc's pair). Under
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

// Jumps to `buffer`. Out of line: a function must not longjmp to a buffer it setjmp'd itself.
[[noreturn]] __attribute__((noinline)) void jump(JumpBuffer& buffer) {
    EMU_LONGJMP(buffer);
}

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

struct Fiber {
    ucontext_t context;  // only to enter the fiber's stack the first time
    JumpBuffer env;      // where the fiber is suspended
    bool started = false;
    std::unique_ptr<char[]> stack;
    ThreadCoords coords;
    FiberState state = FiberState::Ready;
    unsigned shuffles_done = 0;  // shuffles this lane completed (its generation)
    unsigned barriers_done = 0;  // __syncthreads this thread completed
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
    bool tracking = false;  // this block's shared accesses are race-checked
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
    std::atomic<unsigned> next_block{0};
    std::atomic<bool> failed{false};
    std::atomic<unsigned long long> fallback_blocks{0};  // gemv_note_fallback calls
    EmuCounts counts{};                                  // every worker's loads and stores, under error_lock
    std::mutex error_lock;
    std::string error;
    // The lowest block whose fault is in `error`: blocks start in order and a started block runs
    // to its end, so with several workers the report is still that of the first faulting block.
    unsigned error_block = ~0u;
};

thread_local BlockRun* t_block = nullptr;

std::string format(const char* fmt, ...) {
    char buffer[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buffer, sizeof buffer, fmt, args);
    va_end(args);
    return buffer;
}

unsigned linear_tid(const ThreadCoords& c) {
    return c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z);
}

// ---- Stack switches (announced to AddressSanitizer when it is on) ----------------------------

// Leaves the current fiber for the scheduler. `forever`: the fiber will not be resumed.
[[noreturn]] void switch_to_scheduler(BlockRun* run, Fiber* fiber, bool forever) {
#ifdef EMU_ASAN_FIBERS
    __sanitizer_start_switch_fiber(forever ? nullptr : &fiber->asan_fake_stack, run->scheduler_stack,
                                   run->scheduler_stack_size);
#else
    (void)fiber;
    (void)forever;
#endif
    jump(run->scheduler);
}

// Called on a fiber's stack right after it was entered or resumed.
void arrived_in_fiber(BlockRun* run, Fiber* fiber) {
#ifdef EMU_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fiber->asan_fake_stack, &run->scheduler_stack, &run->scheduler_stack_size);
#else
    (void)run;
    (void)fiber;
#endif
}

// Records the first fault of the block and leaves the fiber for good. printf-style: the message
// is built in a buffer on this stack and copied into the BlockRun (heap), so the jump out of the
// fiber abandons no object that owns memory. Callers must not hold any (no std::string locals on
// a path that faults).
[[noreturn]] __attribute__((format(printf, 1, 2))) void fault(const char* fmt, ...) {
    BlockRun* run = t_block;
    Fiber* fiber = run->current;
    if (run->fault.empty()) {
        char message[640];
        const ThreadCoords& c = fiber->coords;
        const int used = std::snprintf(message, sizeof message, "block (%u,%u,%u) thread (%u,%u,%u): ", c.block_idx.x,
                                       c.block_idx.y, c.block_idx.z, c.thread_idx.x, c.thread_idx.y, c.thread_idx.z);
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(message + used, sizeof message - (size_t)used, fmt, args);
        va_end(args);
        run->fault = message;
    }
    fiber->state = FiberState::Faulted;
    switch_to_scheduler(run, fiber, true);  // a faulted fiber is never resumed
}

// Gives the scheduler a turn; returns when this fiber is resumed.
void yield() {
    BlockRun* run = t_block;
    Fiber* fiber = run->current;
    if (!EMU_SETJMP(fiber->env)) switch_to_scheduler(run, fiber, false);
    arrived_in_fiber(t_block, t_block->current);
}

// A fiber runs the kernel once per block it is given, then parks until the next block.
void fiber_main() {
    arrived_in_fiber(t_block, t_block->current);
    for (;;) {
        BlockRun* run = t_block;
        const EmuArgs& a = run->launch->args;
        run->launch->kernel->entry(a.x, a.packed, a.scales, a.y, a.global_scale, a.m, a.n, a.k, a.x_stride, a.y_stride);
        run = t_block;
        run->current->state = FiberState::Done;
        run->done++;
        run->events++;
        yield();
    }
}

// Resumes `f` until it yields, finishes or faults.
void resume(BlockRun& run, Fiber& f) {
    run.current = &f;
    if (EMU_SETJMP(run.scheduler)) {
#ifdef EMU_ASAN_FIBERS
        __sanitizer_finish_switch_fiber(run.scheduler_fake_stack, nullptr, nullptr);
#endif
        return;
    }
#ifdef EMU_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&run.scheduler_fake_stack, f.stack.get(), kStackBytes);
#endif
    if (f.started) jump(f.env);
    f.started = true;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
    setcontext(&f.context);
}

// Runs one block to completion; returns false (with run.fault set) on a fault or deadlock.
bool run_block(BlockRun& run, dim3 block_idx) {
    Launch& launch = *run.launch;
    const unsigned threads = launch.block.x * launch.block.y * launch.block.z;
    run.warps.assign((threads + 31) / 32, WarpState{});
    run.barrier_arrived.assign(threads, 0);
    run.barrier_or.clear();
    run.barrier_count.clear();
    run.done = 0;
    run.tracking = block_idx.x + launch.grid.x * (block_idx.y + launch.grid.y * block_idx.z) < kTrackedBlocks;
    run.events = 0;
    run.fault.clear();
    // Every block declares its shared arrays afresh; shared_alloc poisons them.
    run.shared.clear();
    run.shared_used = 0;
    for (unsigned tid = 0; tid < threads; ++tid) {
        Fiber& f = run.fibers[tid];
        f.state = FiberState::Ready;
        f.shuffles_done = 0;
        f.barriers_done = 0;
        f.coords.thread_idx = dim3{tid % launch.block.x, (tid / launch.block.x) % launch.block.y,
                                   tid / (launch.block.x * launch.block.y)};
        f.coords.block_idx = block_idx;
        f.coords.block_dim = launch.block;
        f.coords.grid_dim = launch.grid;
    }
    for (;;) {
        bool any_live = false;
        const unsigned long long before = run.events;
        for (unsigned i = 0; i < threads; ++i) {
            Fiber& f = run.fibers[launch.reversed ? threads - 1 - i : i];
            if (f.state != FiberState::Ready) continue;
            any_live = true;
            resume(run, f);
            if (f.state == FiberState::Faulted) return false;
        }
        if (!any_live) return true;
        if (run.events == before) {
            // Nobody arrived anywhere new in a full pass: every live thread waits for one that
            // never comes.
            std::string waiting;
            for (unsigned tid = 0; tid < threads && waiting.size() < 300; ++tid) {
                const Fiber& f = run.fibers[tid];
                if (f.state == FiberState::Ready) {
                    waiting += format(" t%u(shuffle #%u, barrier #%u)", tid, f.shuffles_done, f.barriers_done);
                }
            }
            run.fault = format("block (%u,%u,%u): deadlock: no thread can proceed; waiting:", block_idx.x,
                               block_idx.y, block_idx.z) +
                        waiting;
            return false;
        }
    }
}

void worker(Launch* launch) {
    BlockRun run;
    run.launch = launch;
    const unsigned threads = launch->block.x * launch->block.y * launch->block.z;
    run.fibers.resize(threads);
    for (Fiber& f : run.fibers) f.stack.reset(new char[kStackBytes]);
    t_block = &run;
    const unsigned blocks = launch->grid.x * launch->grid.y * launch->grid.z;
    for (;;) {
        if (launch->failed.load()) break;
        const unsigned b = launch->next_block.fetch_add(1);
        if (b >= blocks) break;
        const dim3 block_idx{b % launch->grid.x, (b / launch->grid.x) % launch->grid.y,
                             b / (launch->grid.x * launch->grid.y)};
        if (!run_block(run, block_idx)) {
            std::lock_guard<std::mutex> guard(launch->error_lock);
            if (b < launch->error_block) {
                launch->error_block = b;
                launch->error = run.fault;
            }
            launch->failed.store(true);
            break;
        }
    }
    {
        std::lock_guard<std::mutex> guard(launch->error_lock);
        for (int r = 0; r < EMU_COUNTED_REGIONS; ++r) {
            for (int w = 0; w < EMU_ACCESS_WIDTHS; ++w) {
                launch->counts.loads[r][w] += run.loads[r][w];
                launch->counts.stores[r][w] += run.stores[r][w];
            }
        }
    }
    t_block = nullptr;
}

const char* shuffle_name(ShuffleKind kind) {
    switch (kind) {
        case ShuffleKind::Index:
            return "__shfl_sync";
        case ShuffleKind::Up:
            return "__shfl_up_sync";
        case ShuffleKind::Down:
            return "__shfl_down_sync";
        case ShuffleKind::Xor:
            return "__shfl_xor_sync";
        case ShuffleKind::Mma:
            return "mma.sync";
    }
    return "shuffle";
}

}  // namespace

const ThreadCoords& coords() {
    return t_block->current->coords;
}

void note_fallback() {
    t_block->launch->fallback_blocks.fetch_add(1);
}

unsigned lane_id() {
    return linear_tid(t_block->current->coords) % 32;
}

// The EmuCounts width slot of an access of `size` bytes (log2 of a power of two up to 16), or
// -1 for a width it does not count. Runs on every access: no loop.
int width_slot(size_t size) {
    if (size == 0 || (size & (size - 1)) != 0 || size >= (size_t{1} << EMU_ACCESS_WIDTHS)) return -1;
    return __builtin_ctzll(size);
}

void check_access(const void* p, size_t size, size_t align, Access access) {
    BlockRun& run = *t_block;
    const Launch& launch = *run.launch;
    const auto address = reinterpret_cast<uintptr_t>(p);
    const bool write = access == Access::Store;
    const bool via_ldg = access != Access::Store;
    const char* kind = write ? "write" : "read";
    for (int i = 0; i < launch.region_count; ++i) {
        const EmuRegion& r = launch.regions[i];
        const auto base = reinterpret_cast<uintptr_t>(r.base);
        if (address >= base && address < base + r.len) {
            const size_t offset = address - base;
            if (offset + size > r.len) {
                fault("out-of-bounds %s of %zu bytes at offset %zu of '%s' (%zu bytes)", kind, size, offset,
                             r.name, r.len);
            }
            if (write && !r.writable) {
                fault("%s of %zu bytes to read-only '%s' at offset %zu", kind, size, r.name, offset);
            }
            if (via_ldg && r.writable) {
                fault("__ldg of %zu bytes from writable '%s' at offset %zu: the read-only data path may "
                             "return stale data for memory the launch writes",
                             size, r.name, offset);
            }
            if (address % align != 0) {
                fault("misaligned %zu-byte %s at offset %zu of '%s' (address %% %zu = %zu)", size, kind, offset,
                             r.name, align, (size_t)(address % align));
            }
            const int w = width_slot(size);
            if (i < EMU_COUNTED_REGIONS && w >= 0 && access != Access::Prefetch) {
                (write ? run.stores : run.loads)[i][w]++;
            }
            return;
        }
    }
    // Name the nearest region, to say how far off the access is (in a plain buffer: see fault).
    char nearest[256] = "no buffer";
    uintptr_t best = UINTPTR_MAX;
    for (int i = 0; i < launch.region_count; ++i) {
        const EmuRegion& r = launch.regions[i];
        const auto base = reinterpret_cast<uintptr_t>(r.base);
        const uintptr_t end = base + r.len;
        const uintptr_t distance = address >= end ? address - end : base - address;
        if (distance < best) {
            best = distance;
            if (address >= end) {
                std::snprintf(nearest, sizeof nearest, "%zu bytes past the end of '%s' (%zu bytes)",
                              (size_t)(address - end), r.name, r.len);
            } else {
                std::snprintf(nearest, sizeof nearest, "%zu bytes before '%s'", (size_t)(base - address), r.name);
            }
        }
    }
    fault("out-of-bounds %s of %zu bytes: %s", kind, size, nearest);
}

namespace {

// A lane the mask waits for has exited: the shuffle can never complete.
void missing_lane(BlockRun& run, const WarpState& w, unsigned warp_base, unsigned mask, unsigned generation,
                  const char* what) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask & (1u << l)) || warp_base + l >= run.fibers.size()) continue;
        if (w.arrived[l] < generation + 1 && run.fibers[warp_base + l].state == FiberState::Done) {
            fault("%s #%u: mask %#010x waits for lane %u, which exited", what, generation, mask, l);
        }
    }
}

// Every lane the mask names must execute the same shuffle: same mask, kind and width.
void validate_shuffle(const WarpState& w, unsigned slot, unsigned lane, unsigned mask, ShuffleKind kind, int width,
                      unsigned generation, const char* what) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask & (1u << l))) continue;
        if (w.mask[slot][l] != mask) {
            fault("%s #%u: lane %u used mask %#010x but lane %u used %#010x", what, generation, lane, mask, l,
                  w.mask[slot][l]);
        }
        if (w.kind[slot][l] != kind) {
            fault("%s #%u: lane %u called %s but lane %u called %s in the same shuffle", what, generation, lane, what,
                  l, shuffle_name(w.kind[slot][l]));
        }
        if (w.width[slot][l] != width) {
            fault("%s #%u: lane %u used width %d but lane %u used width %d", what, generation, lane, width, l,
                  w.width[slot][l]);
        }
    }
}

}  // namespace

unsigned shuffle(ShuffleKind kind, unsigned mask, unsigned value, int lane_arg, int width) {
    BlockRun& run = *t_block;
    Fiber& self = *run.current;
    const char* what = shuffle_name(kind);
    const unsigned tid = linear_tid(self.coords);
    const unsigned lane = tid % 32;
    const unsigned warp_base = tid - lane;
    WarpState& w = run.warps[tid / 32];
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fault("%s: invalid width %d", what, width);
    if (!(mask & (1u << lane))) fault("%s: mask %#010x leaves out the calling lane %u", what, mask, lane);
    const unsigned generation = self.shuffles_done;
    const unsigned slot = generation & 1u;
    w.value[slot][lane] = value;
    w.mask[slot][lane] = mask;
    w.kind[slot][lane] = kind;
    w.width[slot][lane] = width;
    w.arrived[lane] = generation + 1;
    run.events++;
    if (mask == 0xFFFFFFFFu) {
        // Every lane of the warp takes part: count arrivals at this generation.
        if (warp_base + 32 > run.fibers.size()) fault("%s: mask %#010x names lanes beyond the block", what, mask);
        if (w.slot_generation[slot] != generation + 1) {
            w.slot_generation[slot] = generation + 1;
            w.count[slot] = 0;
        }
        if (++w.count[slot] == 32) validate_shuffle(w, slot, lane, mask, kind, width, generation, what);
        while (w.count[slot] < 32) {
            if (run.done > 0) missing_lane(run, w, warp_base, mask, generation, what);
            yield();
        }
    } else {
        for (;;) {
            bool all = true;
            for (unsigned l = 0; l < 32; ++l) {
                if (!(mask & (1u << l))) continue;
                const unsigned other = warp_base + l;
                if (other >= run.fibers.size()) fault("%s: mask %#010x names lane %u beyond the block", what, mask, l);
                if (w.arrived[l] < generation + 1) all = false;
            }
            if (all) break;
            missing_lane(run, w, warp_base, mask, generation, what);
            yield();
        }
        validate_shuffle(w, slot, lane, mask, kind, width, generation, what);
    }
    const unsigned segment = lane & ~(unsigned)(width - 1);
    unsigned src = lane;
    switch (kind) {
        case ShuffleKind::Index:
            src = segment + ((unsigned)lane_arg & (unsigned)(width - 1));
            break;
        case ShuffleKind::Up:
            src = lane - segment >= (unsigned)lane_arg ? lane - (unsigned)lane_arg : lane;
            break;
        case ShuffleKind::Down:
            src = lane - segment + (unsigned)lane_arg < (unsigned)width ? lane + (unsigned)lane_arg : lane;
            break;
        case ShuffleKind::Xor: {
            const unsigned partner = lane ^ (unsigned)lane_arg;
            src = partner < segment + (unsigned)width ? partner : lane;
            break;
        }
        case ShuffleKind::Mma:
            break;
    }
    if (src >= 32 || !(mask & (1u << src))) {
        fault("%s #%u: lane %u reads lane %u, which is not in mask %#010x", what, generation, lane, src, mask);
    }
    self.shuffles_done = generation + 1;
    return w.value[slot][src];
}

// An mma is a full-warp shuffle of kind Mma (same arrival, agreement and exit checks) whose
// operands travel in the slot's payload: a lane reads them right after the exchange completes,
// before any lane can reuse the slot (two generations later).
void mma_exchange(const unsigned (&mine)[kMmaWords], unsigned (&all)[32][kMmaWords]) {
    BlockRun& run = *t_block;
    Fiber& self = *run.current;
    const unsigned tid = linear_tid(self.coords);
    WarpState& w = run.warps[tid / 32];
    const unsigned slot = self.shuffles_done & 1u;
    std::memcpy(w.payload[slot][tid % 32], mine, sizeof mine);
    (void)shuffle(ShuffleKind::Mma, 0xFFFFFFFFu, 0u, 0, 32);
    std::memcpy(all, w.payload[slot], sizeof all);
}

void unsupported(const char* what) {
    fault("unsupported by the emulator: %s", what);
}

int sync_threads_or(int predicate) {
    BlockRun& run = *t_block;
    const unsigned generation = run.current->barriers_done;
    if (run.barrier_or.size() <= generation) run.barrier_or.resize(generation + 1, 0);
    if (predicate) run.barrier_or[generation] = 1;
    sync_threads();
    // Every thread has arrived at barrier `generation`: the OR of their predicates is complete.
    return run.barrier_or[generation];
}

void sync_threads() {
    BlockRun& run = *t_block;
    Fiber& self = *run.current;
    const unsigned tid = linear_tid(self.coords);
    const unsigned generation = self.barriers_done;
    const unsigned threads = (unsigned)run.fibers.size();
    run.barrier_arrived[tid] = generation + 1;
    if (run.barrier_count.size() <= generation) run.barrier_count.resize(generation + 1, 0);
    ++run.barrier_count[generation];
    run.events++;
    while (run.barrier_count[generation] < threads) {
        // Before the barrier completes, no thread that arrived at it can have exited: if the
        // arrived and the exited threads are everyone, an exited one never came.
        if (run.barrier_count[generation] + run.done >= threads) {
            for (size_t t = 0; t < run.fibers.size(); ++t) {
                if (run.barrier_arrived[t] < generation + 1 && run.fibers[t].state == FiberState::Done) {
                    fault("__syncthreads #%u is not reached by thread %zu, which exited (divergent barrier)",
                          generation, t);
                }
            }
        }
        yield();
    }
    self.barriers_done = generation + 1;
}

SharedHandle shared_alloc(const void* tag, const char* name, size_t bytes, size_t count) {
    BlockRun& run = *t_block;
    for (unsigned i = 0; i < run.shared.size(); ++i) {
        if (run.shared[i].tag == tag) return SharedHandle{run.arena.get() + run.shared[i].offset, i, run.tracking};
    }
    const size_t offset = (run.shared_used + 15) & ~(size_t)15;
    if (offset + bytes > kMaxSharedBytes) {
        fault("shared array '%s' of %zu bytes brings the block to %zu bytes of shared memory, over the "
                     "%zu-byte static limit",
                     name, bytes, offset + bytes, kMaxSharedBytes);
    }
    // Poisoned and unwritten: a read before a write in this block is an error, and never sees
    // what an earlier block left there.
    std::memset(run.arena.get() + offset, kSharedPoison, bytes);
    std::fill(run.shadow.begin() + (long)offset, run.shadow.begin() + (long)(offset + bytes), Shadow{});
    run.shared.push_back(SharedDecl{tag, name, offset, bytes, count});
    run.shared_used = offset + bytes;
    return SharedHandle{run.arena.get() + offset, (unsigned)(run.shared.size() - 1), run.tracking};
}

void shared_check(unsigned decl, long long element, size_t element_size, size_t count, size_t vector_size,
                  bool write) {
    BlockRun& run = *t_block;
    const SharedDecl& d = run.shared[decl];
    const char* kind = write ? "write" : "read";
    const size_t elements = vector_size / element_size;
    if (element < 0 || (unsigned long long)element + elements > count) {
        fault("out-of-bounds shared %s of %zu bytes at element %lld of '%s' (%zu elements)", kind, vector_size,
                     element, d.name, count);
    }
    // Vectors are addressed by vector index from a 16-byte aligned array (as on the GPU, where
    // GemvShared is alignas(16)), so a vector access is always aligned to its size.
    const size_t first = (size_t)element * element_size;
    if (!run.tracking) return;
    Fiber& self = *run.current;
    const unsigned short tid = (unsigned short)linear_tid(self.coords);
    const unsigned epoch = self.barriers_done + 1;
    // One shadow per element (its first byte's): every access to a GemvShared<T, N> covers whole
    // elements of T, so an element's bytes are always touched together and per-byte tracking
    // would find nothing more (it cost four times the iterations for f32 and u32 arrays).
    for (size_t b = first; b < first + vector_size; b += element_size) {
        Shadow& s = run.shadow[d.offset + b];
        const long long at = (long long)(b / element_size);
        auto race = [&](unsigned other, const char* other_did, const char* self_did) {
            fault("shared-memory race on '%s' element %lld: thread %u %s it and thread %u %s it with no "
                         "__syncthreads between them",
                         d.name, at, other, other_did, (unsigned)tid, self_did);
        };
        if (write) {
            if (s.write_epoch == epoch && s.writer != tid) race(s.writer, "wrote", "wrote");
            if (s.read_epoch == epoch && s.reader != tid) race(s.reader, "read", "wrote");
            if (s.read_epoch == epoch && s.two_readers && s.second_reader != tid) race(s.second_reader, "read", "wrote");
            s.writer = tid;
            s.write_epoch = epoch;
        } else {
            if (s.write_epoch == 0) {
                fault("shared read of '%s' element %lld, which no thread of this block has written "
                             "(uninitialised shared memory)",
                             d.name, at);
            }
            if (s.write_epoch == epoch && s.writer != tid) race(s.writer, "wrote", "read");
            if (s.read_epoch != epoch) {
                s.reader = tid;
                s.read_epoch = epoch;
                s.two_readers = false;
            } else if (s.reader != tid && !s.two_readers) {
                s.second_reader = tid;
                s.two_readers = true;
            }
        }
    }
}

}  // namespace emu

extern "C" unsigned gemv_emu_launch_bound(const EmuKernel* kernel) {
    return kernel->max_threads;
}

extern "C" int gemv_emu_launch(const EmuKernel* kernel, unsigned grid_x, unsigned block_x, const EmuArgs* args,
                               const EmuRegion* regions, int region_count, int workers, int reversed,
                               EmuCounts* counts, char* error, size_t error_len) {
    auto report = [&](const std::string& message) {
        if (error && error_len) std::snprintf(error, error_len, "%s", message.c_str());
        return 1;
    };
    if (block_x == 0 || block_x > emu::kMaxThreadsPerBlock) return report(emu::format("invalid block size %u", block_x));
    if (block_x > kernel->max_threads) {
        return report(emu::format("a block of %u threads exceeds the kernel's launch bound of %u threads "
                                  "(__launch_bounds__): the GPU refuses this launch",
                                  block_x, kernel->max_threads));
    }
    if (grid_x == 0) return report("empty grid");
    emu::Launch launch;
    launch.kernel = kernel;
    launch.args = *args;
    launch.regions = regions;
    launch.region_count = region_count;
    launch.grid = dim3{grid_x, 1, 1};
    launch.block = dim3{block_x, 1, 1};
    launch.reversed = reversed != 0;
    const unsigned count = workers < 1 ? 1u : (unsigned)workers;
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < count && i < grid_x; ++i) pool.emplace_back(emu::worker, &launch);
    emu::worker(&launch);
    for (std::thread& t : pool) t.join();
    if (launch.failed.load()) return report(launch.error);
    if (counts) {
        *counts = launch.counts;
        counts->fallback_blocks = launch.fallback_blocks.load();
    }
    return 0;
}
