// The SIMT emulator's runtime: fibers, deterministic scheduling, warp shuffles, block barriers,
// and the memory checker (docs/emulator.md). Blocks are independent and run on worker threads;
// inside a block every thread is a ucontext fiber, resumed round-robin in thread-index order.
// Fibers jump between their own stacks with _setjmp/_longjmp (no signal-mask syscalls); the
// fortified longjmp would reject that, so it is turned off for this file.
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

namespace emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;

enum class FiberState { Ready, Done, Faulted };

struct Fiber {
    ucontext_t context;  // only to enter the fiber's stack the first time
    jmp_buf env;         // where the fiber is suspended
    bool started = false;
    std::unique_ptr<char[]> stack;
    ThreadCoords coords;
    FiberState state = FiberState::Ready;
    unsigned shuffles_done = 0;  // shuffles this lane completed (its generation)
    unsigned barriers_done = 0;  // __syncthreads this thread completed
};

struct WarpState {
    unsigned value[2][32];
    unsigned mask[2][32];
    unsigned arrived[32];  // generation + 1 of the last shuffle each lane arrived at
};

struct Launch;

// One worker's block in flight.
struct BlockRun {
    Launch* launch = nullptr;
    std::vector<Fiber> fibers;
    std::vector<WarpState> warps;
    std::vector<unsigned> barrier_arrived;  // per thread: generation + 1 of its last barrier
    jmp_buf scheduler;
    Fiber* current = nullptr;
    unsigned long long events = 0;  // progress counter for deadlock detection
    std::string fault;
};

struct Launch {
    const EmuKernel* kernel;
    EmuArgs args;
    const EmuRegion* regions;
    int region_count;
    dim3 grid, block;
    std::atomic<unsigned> next_block{0};
    std::atomic<bool> failed{false};
    std::mutex error_lock;
    std::string error;
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

std::string where(const Fiber& f) {
    return format("block (%u,%u,%u) thread (%u,%u,%u)", f.coords.block_idx.x, f.coords.block_idx.y,
                  f.coords.block_idx.z, f.coords.thread_idx.x, f.coords.thread_idx.y, f.coords.thread_idx.z);
}

// Records the first fault of the block and leaves the fiber for good.
[[noreturn]] void fault(const std::string& message) {
    BlockRun* run = t_block;
    Fiber* fiber = run->current;
    if (run->fault.empty()) run->fault = where(*fiber) + ": " + message;
    fiber->state = FiberState::Faulted;
    _longjmp(run->scheduler, 1);  // a faulted fiber is never resumed
}

// Gives the scheduler a turn; returns when this fiber is resumed.
void yield() {
    BlockRun* run = t_block;
    if (!_setjmp(run->current->env)) _longjmp(run->scheduler, 1);
}

// A fiber runs the kernel once per block it is given, then parks until the next block.
void fiber_main() {
    for (;;) {
        BlockRun* run = t_block;
        const EmuArgs& a = run->launch->args;
        run->launch->kernel->entry(a.x, a.packed, a.scales, a.y, a.global_scale, a.m, a.n, a.k);
        run = t_block;
        run->current->state = FiberState::Done;
        run->events++;
        yield();
    }
}

// Resumes `f` until it yields, finishes or faults.
void resume(BlockRun& run, Fiber& f) {
    run.current = &f;
    if (_setjmp(run.scheduler)) return;
    if (f.started) _longjmp(f.env, 1);
    f.started = true;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
    setcontext(&f.context);
}

unsigned linear_tid(const ThreadCoords& c) {
    return c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z);
}

// Runs one block to completion; returns false (with run.fault set) on a fault or deadlock.
bool run_block(BlockRun& run, dim3 block_idx) {
    Launch& launch = *run.launch;
    const unsigned threads = launch.block.x * launch.block.y * launch.block.z;
    run.warps.assign((threads + 31) / 32, WarpState{});
    run.barrier_arrived.assign(threads, 0);
    run.events = 0;
    run.fault.clear();
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
        for (unsigned tid = 0; tid < threads; ++tid) {
            Fiber& f = run.fibers[tid];
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
            if (!launch->failed.exchange(true)) launch->error = run.fault;
            break;
        }
    }
    t_block = nullptr;
}

}  // namespace

const ThreadCoords& coords() {
    return t_block->current->coords;
}

unsigned lane_id() {
    return linear_tid(t_block->current->coords) % 32;
}

void check_access(const void* p, size_t size, size_t align, bool write) {
    const Launch& launch = *t_block->launch;
    const auto address = reinterpret_cast<uintptr_t>(p);
    const char* kind = write ? "write" : "read";
    for (int i = 0; i < launch.region_count; ++i) {
        const EmuRegion& r = launch.regions[i];
        const auto base = reinterpret_cast<uintptr_t>(r.base);
        if (address >= base && address < base + r.len) {
            const size_t offset = address - base;
            if (offset + size > r.len) {
                fault(format("out-of-bounds %s of %zu bytes at offset %zu of '%s' (%zu bytes)", kind, size, offset,
                             r.name, r.len));
            }
            if (write && !r.writable) {
                fault(format("%s of %zu bytes to read-only '%s' at offset %zu", kind, size, r.name, offset));
            }
            if (address % align != 0) {
                fault(format("misaligned %zu-byte %s at offset %zu of '%s' (address %% %zu = %zu)", size, kind, offset,
                             r.name, align, (size_t)(address % align)));
            }
            return;
        }
    }
    // Name the nearest region, to say how far off the access is.
    std::string nearest = "no buffer";
    uintptr_t best = UINTPTR_MAX;
    for (int i = 0; i < launch.region_count; ++i) {
        const EmuRegion& r = launch.regions[i];
        const auto base = reinterpret_cast<uintptr_t>(r.base);
        const uintptr_t end = base + r.len;
        const uintptr_t distance = address >= end ? address - end : base - address;
        if (distance < best) {
            best = distance;
            nearest = address >= end ? format("%zu bytes past the end of '%s' (%zu bytes)", (size_t)(address - end),
                                              r.name, r.len)
                                     : format("%zu bytes before '%s'", (size_t)(base - address), r.name);
        }
    }
    fault(format("out-of-bounds %s of %zu bytes: %s", kind, size, nearest.c_str()));
}

unsigned shuffle(unsigned mask, unsigned value, int src_lane, int width, const char* what) {
    BlockRun& run = *t_block;
    Fiber& self = *run.current;
    const unsigned tid = linear_tid(self.coords);
    const unsigned lane = tid % 32;
    const unsigned warp_base = tid - lane;
    WarpState& w = run.warps[tid / 32];
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) fault(format("%s: invalid width %d", what, width));
    if (!(mask & (1u << lane))) fault(format("%s: mask %#010x leaves out the calling lane %u", what, mask, lane));
    const unsigned generation = self.shuffles_done;
    const unsigned slot = generation & 1u;
    w.value[slot][lane] = value;
    w.mask[slot][lane] = mask;
    w.arrived[lane] = generation + 1;
    run.events++;
    for (;;) {
        bool all = true;
        for (unsigned l = 0; l < 32; ++l) {
            if (!(mask & (1u << l))) continue;
            const unsigned other = warp_base + l;
            if (other >= run.fibers.size()) fault(format("%s: mask %#010x names lane %u beyond the block", what, mask, l));
            const Fiber& f = run.fibers[other];
            if (w.arrived[l] < generation + 1) {
                all = false;
                if (f.state == FiberState::Done) {
                    fault(format("%s #%u: mask %#010x waits for lane %u, which exited", what, generation, mask, l));
                }
            }
        }
        if (all) break;
        yield();
    }
    for (unsigned l = 0; l < 32; ++l) {
        if ((mask & (1u << l)) && w.mask[slot][l] != mask) {
            fault(format("%s #%u: lane %u used mask %#010x but lane %u used %#010x", what, generation, lane, mask, l,
                         w.mask[slot][l]));
        }
    }
    // A lane that reached the same shuffle without being in the mask is a participating lane the
    // mask leaves out (it would have failed its own-mask check, unless its mask differs).
    const unsigned src = (unsigned)src_lane % 32;
    if (!(mask & (1u << src))) {
        fault(format("%s #%u: lane %u reads lane %u, which is not in mask %#010x", what, generation, lane, src, mask));
    }
    self.shuffles_done = generation + 1;
    return w.value[slot][src];
}

void sync_threads() {
    BlockRun& run = *t_block;
    Fiber& self = *run.current;
    const unsigned tid = linear_tid(self.coords);
    const unsigned generation = self.barriers_done;
    run.barrier_arrived[tid] = generation + 1;
    run.events++;
    for (;;) {
        bool all = true;
        for (size_t t = 0; t < run.fibers.size(); ++t) {
            if (run.barrier_arrived[t] >= generation + 1) continue;
            all = false;
            if (run.fibers[t].state == FiberState::Done) {
                fault(format("__syncthreads #%u is not reached by thread %zu, which exited (divergent barrier)",
                             generation, t));
            }
        }
        if (all) break;
        yield();
    }
    self.barriers_done = generation + 1;
}

}  // namespace emu

extern "C" int gemv_emu_launch(const EmuKernel* kernel, unsigned grid_x, unsigned block_x, const EmuArgs* args,
                               const EmuRegion* regions, int region_count, int workers, char* error,
                               size_t error_len) {
    auto report = [&](const std::string& message) {
        if (error && error_len) std::snprintf(error, error_len, "%s", message.c_str());
        return 1;
    };
    if (block_x == 0 || block_x > emu::kMaxThreadsPerBlock) return report(emu::format("invalid block size %u", block_x));
    if (grid_x == 0) return report("empty grid");
    emu::Launch launch;
    launch.kernel = kernel;
    launch.args = *args;
    launch.regions = regions;
    launch.region_count = region_count;
    launch.grid = dim3{grid_x, 1, 1};
    launch.block = dim3{block_x, 1, 1};
    const unsigned count = workers < 1 ? 1u : (unsigned)workers;
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < count && i < grid_x; ++i) pool.emplace_back(emu::worker, &launch);
    emu::worker(&launch);
    for (std::thread& t : pool) t.join();
    if (launch.failed.load()) return report(launch.error);
    return 0;
}
