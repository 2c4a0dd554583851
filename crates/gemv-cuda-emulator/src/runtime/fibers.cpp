// Fibers: every CUDA thread of a block is one, resumed round-robin in thread-index order (or its
// reverse) until the block ends, faults or deadlocks. Fibers jump between their own stacks (no
// signal-mask syscalls; see JumpBuffer); the fortified longjmp would reject that, so it is turned
// off for this file. Under AddressSanitizer every switch is announced to it.
#undef _FORTIFY_SOURCE
#include <cstdarg>
#include <cstdio>

#include "block_run.h"

#ifdef EMU_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {

__thread BlockRun* t_block = nullptr;

namespace {

// Jumps to `buffer`. Out of line: a function must not longjmp to a buffer it setjmp'd itself.
[[noreturn]] __attribute__((noinline)) void jump(JumpBuffer& buffer) {
    EMU_LONGJMP(buffer);
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

}  // namespace

// printf-style: the message is built in a buffer on this stack and copied into the BlockRun
// (heap), so the jump out of the fiber abandons no object that owns memory. Callers must not hold
// any (no std::string locals on a path that faults).
void fault(const char* fmt, ...) {
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

void yield() {
    BlockRun* run = t_block;
    Fiber* fiber = run->current;
    if (!EMU_SETJMP(fiber->env)) switch_to_scheduler(run, fiber, false);
    arrived_in_fiber(t_block, t_block->current);
}

namespace {

// A fiber runs the kernel once per block it is given, then parks until the next block.
void fiber_main() {
    arrived_in_fiber(t_block, t_block->current);
    for (;;) {
        BlockRun* run = t_block;
        const EmuArgs& a = run->launch->args;
        const EmuKernel* kernel = run->launch->kernel;
        if (kernel->grouped_entry) {
            kernel->grouped_entry(a.x, a.packed, a.scales, a.y, a.global_scales, a.per_expert_scales, a.routing,
                                  a.experts, a.pairs, a.top_k, a.n, a.k);
        } else {
            kernel->entry(a.x, a.packed, a.scales, a.y, a.global_scale, a.m, a.n, a.k, a.x_stride, a.y_stride, a.y_f32);
        }
        async_copies_at_exit();
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

}  // namespace

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
    run.mbarriers.clear();
    for (unsigned tid = 0; tid < threads; ++tid) {
        Fiber& f = run.fibers[tid];
        f.state = FiberState::Ready;
        f.shuffles_done = 0;
        f.barriers_done = 0;
        f.async_copies.clear();
        f.async_groups = 0;
        f.mbarrier_arrivals = 0;
        f.grid_dependency_waited = false;
        f.waiting_mbarrier = -1;
        f.coords.thread_idx = dim3{tid % launch.block.x, (tid / launch.block.x) % launch.block.y,
                                   tid / (launch.block.x * launch.block.y)};
        f.coords.block_idx = block_idx;
        f.coords.block_dim = launch.block;
        f.coords.grid_dim = launch.grid;
    }
    run.order_state = launch.seed ^ ((unsigned long long)block_idx.x * 0xD1B54A32D192ED03ull);
    for (;;) {
        bool any_live = false;
        const unsigned long long before = run.events;
        // A seeded launch draws a fresh order of the threads for every round; the others keep theirs.
        if (launch.seed) run.order_state = Permutation::mix(run.order_state);
        const Permutation round(launch.seed ? threads : 1, run.order_state);
        for (unsigned i = 0; i < threads; ++i) {
            const unsigned t = launch.seed ? round.at(i) : launch.reversed ? threads - 1 - i : i;
            Fiber& f = run.fibers[t];
            if (f.state != FiberState::Ready) continue;
            any_live = true;
            resume(run, f);
            if (f.state == FiberState::Faulted) return false;
        }
        if (!any_live) {
            bulk_copies_at_block_end(run);
            if (run.fault.empty()) return true;
            run.fault = format("block (%u,%u,%u): ", block_idx.x, block_idx.y, block_idx.z) + run.fault;
            return false;
        }
        if (run.events == before) {
            // Nobody arrived anywhere new in a full pass: every live thread waits for one that
            // never comes.
            // Each run of consecutive threads of one warp that wait for the same thing, once.
            std::string waiting;
            auto waits_for = [&](const Fiber& f) {
                return f.waiting_mbarrier >= 0 ? mbarrier_wait_description(run, f)
                                               : format("shuffle #%u, barrier #%u", f.shuffles_done, f.barriers_done);
            };
            for (unsigned tid = 0; tid < threads && waiting.size() < 1000;) {
                if (run.fibers[tid].state != FiberState::Ready) {
                    ++tid;
                    continue;
                }
                const std::string what = waits_for(run.fibers[tid]);
                unsigned last = tid;
                while (last + 1 < threads && (last + 1) / 32 == tid / 32 &&
                       run.fibers[last + 1].state == FiberState::Ready && waits_for(run.fibers[last + 1]) == what) {
                    ++last;
                }
                waiting += last == tid ? format(" t%u (warp %u): ", tid, tid / 32)
                                       : format(" t%u-%u (warp %u): ", tid, last, tid / 32);
                waiting += what + ";";
                tid = last + 1;
            }
            run.fault = format("block (%u,%u,%u): deadlock: no thread can proceed; waiting:", block_idx.x,
                               block_idx.y, block_idx.z) +
                        waiting;
            return false;
        }
    }
}

}  // namespace emu
