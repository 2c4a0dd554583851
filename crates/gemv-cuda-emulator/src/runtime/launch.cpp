// Launches: blocks handed out to worker threads in order, each worker running its blocks one at a
// time as fibers; the C interface Rust calls (emulator.h).
#include <cstdarg>
#include <cstdio>
#include <thread>

#include "block_run.h"

namespace emu {

std::string format(const char* fmt, ...) {
    char buffer[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buffer, sizeof buffer, fmt, args);
    va_end(args);
    return buffer;
}

namespace {

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
        const unsigned started = launch->next_block.fetch_add(1);
        if (started >= blocks) break;
        // The started-th block to run: itself, or its image under the seed's permutation.
        const unsigned b = launch->seed ? Permutation(blocks, launch->seed).at(started) : started;
        if (launch->grid_ends && b >= launch->grid_ends && blocks - b > launch->grid_ends) continue;
        const dim3 block_idx{b % launch->grid.x, (b / launch->grid.x) % launch->grid.y,
                             b / (launch->grid.x * launch->grid.y)};
        if (!run_block(run, block_idx)) {
            std::lock_guard<std::mutex> guard(launch->error_lock);
            if (started < launch->error_block) {
                launch->error_block = started;
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

void unsupported(const char* what) {
    fault("unsupported by the emulator: %s", what);
}

void test_failure(const char* what) {
    fault("test kernel check failed: %s", what);
}

}  // namespace emu

extern "C" unsigned gemv_emu_launch_bound(const EmuKernel* kernel) {
    return kernel->max_threads;
}

extern "C" int gemv_emu_launch(const EmuKernel* kernel, unsigned grid_x, unsigned block_x, const EmuArgs* args,
                               const EmuRegion* regions, int region_count, int workers, int reversed,
                               unsigned long long seed, int dependent, unsigned grid_ends, EmuCounts* counts,
                               char* error, size_t error_len) {
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
    launch.seed = seed;
    launch.dependent = dependent != 0;
    launch.grid_ends = grid_ends;
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
