// Warp and block synchronisation: shuffles (every lane the mask names must arrive with the same
// mask, kind and width, and none may have exited), mma.sync as a shuffle carrying its operands,
// and __syncthreads (a barrier every thread of the block must reach).
#include <cstring>

#include "block_run.h"

namespace emu {

namespace {

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
        case ShuffleKind::Elect:
            return "elect.sync";
    }
    return "shuffle";
}

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
        case ShuffleKind::Elect:
            break;
    }
    if (src >= 32 || !(mask & (1u << src))) {
        fault("%s #%u: lane %u reads lane %u, which is not in mask %#010x", what, generation, lane, src, mask);
    }
    self.shuffles_done = generation + 1;
    return w.value[slot][src];
}

unsigned elect_sync(unsigned mask) {
    (void)shuffle(ShuffleKind::Elect, mask, 0u, 0, 32);
    return (unsigned)__builtin_ctz(mask);
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

}  // namespace emu
