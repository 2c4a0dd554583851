// mbarrier objects and cp.async.bulk (sm_90), as the PTX executor runs them.
//
// An mbarrier lives at a shared address (an 8-byte element of a shared array) and counts, per
// phase, arrivals and transaction bytes; its phase completes when both reach zero. A bulk copy
// is in flight from its issue until it lands, and it lands when a thread waits on its mbarrier
// (try_wait), as late as a GPU may let it: its destination holds poison meanwhile and, in a
// tracked block, any shared access to it is a fault. Landing completes its bytes on the
// mbarrier; the data is then visible to every thread that sees the phase complete. try_wait with
// the parity of a phase that has completed returns true at once (as on the GPU: a wrong parity
// reads a stage before its copy lands); either way the thread gives the others a turn, and when
// no thread of the block can move (every one spinning on a phase that cannot complete, or
// waiting for one that is), the block is reported as deadlocked, each thread with its warp and
// the mbarrier's count of missing arrivals and bytes. Operations on an mbarrier are shared
// accesses of its element: init a write, arrive and wait reads, so using it before a
// __syncthreads that follows its init is a race; and a bulk copy (the asynchronous proxy) may
// complete on it only after the initialising thread's fence.proxy.async.
#include <cstring>

#include "block_run.h"

namespace emu {

namespace {

unsigned short self_tid() {
    return (unsigned short)linear_tid(t_block->current->coords);
}

// The shadow access of the mbarrier's element (bounds, races, uninitialised use).
void touch(unsigned address, bool write) {
    BlockRun& run = *t_block;
    const SharedDecl& d = shared_decl_at(address, 8, "mbarrier");
    const size_t element = d.bytes / d.count;
    if (element != 8 || address % 8 != 0) {
        fault("mbarrier at shared address %#x: '%s' must be an array of 8-byte elements, the mbarrier one of them",
              address, d.name);
    }
    shared_check((unsigned)(&d - run.shared.data()), (long long)((address - d.offset) / 8), 8, d.count, 8, write);
}

Mbarrier& find(unsigned address, const char* what) {
    BlockRun& run = *t_block;
    for (Mbarrier& b : run.mbarriers) {
        if (b.address == address) return b;
    }
    fault("%s on shared address %#x, where no mbarrier.init has made an mbarrier", what, address);
}

void complete_phase_if_done(Mbarrier& b) {
    if (b.pending == 0 && b.tx == 0) {
        b.phase++;
        b.pending = b.count;
        t_block->events++;
    }
}

// Marks a bulk copy's destination in flight (issue) or landed, in a tracked block. A reader of
// the destination in this barrier interval that has not arrived on an mbarrier since it read
// may still be reading: refilling under it is a race.
void shadow_bulk(const BulkCopy& copy, bool issue) {
    const BlockRun& run = *t_block;
    const unsigned epoch = run.current->barriers_done + 1;
    for_each_element_shadow(copy.dst, copy.bytes, "cp.async.bulk", [&](const SharedDecl& d, size_t e, Shadow& s) {
        if (issue) {
            if (s.in_flight) {
                fault("cp.async.bulk by thread %u into '%s' element %zu while thread %u's copy into it is in flight",
                      (unsigned)copy.issuer, d.name, e, (unsigned)s.writer);
            }
            auto still_reading = [&](unsigned short reader, unsigned arrivals) {
                if (reader != copy.issuer && s.read_epoch == epoch && run.fibers[reader].mbarrier_arrivals == arrivals) {
                    fault("shared-memory race on '%s' element %zu: thread %u read it and thread %u's cp.async.bulk "
                          "refills it with no __syncthreads or mbarrier arrive of the reader between them",
                          d.name, e, (unsigned)reader, (unsigned)copy.issuer);
                }
            };
            still_reading(s.reader, s.reader_arrivals);
            if (s.two_readers) still_reading(s.second_reader, s.second_reader_arrivals);
            s.write_epoch = epoch;
        } else {
            s.write_epoch = kAsyncProxyEpoch;
        }
        s.in_flight = issue;
        s.writer = copy.issuer;
    });
}

void land(Mbarrier& b) {
    for (const BulkCopy& copy : b.copies) {
        std::memcpy(t_block->arena.get() + copy.dst, copy.src, copy.bytes);
        shadow_bulk(copy, false);
        b.tx -= copy.bytes;
    }
    if (!b.copies.empty()) t_block->events++;
    b.copies.clear();
    complete_phase_if_done(b);
}

}  // namespace

void mbarrier_init(unsigned address, unsigned count) {
    if (count == 0 || count > (1u << 20) - 1) fault("mbarrier.init: count %u is outside 1..2^20 - 1", count);
    touch(address, true);
    BlockRun& run = *t_block;
    std::memset(run.arena.get() + address, 0, 8);
    for (Mbarrier& b : run.mbarriers) {
        if (b.address == address) {
            if (!b.copies.empty()) fault("mbarrier.init at %#x while bulk copies on it are in flight", address);
            b = Mbarrier{address, count, count, 0, 0, {}, self_tid(), false};
            return;
        }
    }
    run.mbarriers.push_back(Mbarrier{address, count, count, 0, 0, {}, self_tid(), false});
}

void fence_proxy_async() {
    const unsigned short tid = self_tid();
    for (Mbarrier& b : t_block->mbarriers) {
        if (b.initializer == tid) b.fenced = true;
    }
}

unsigned long long mbarrier_arrive(unsigned address, unsigned long long expect_tx) {
    touch(address, false);
    Mbarrier& b = find(address, "mbarrier.arrive");
    if (b.pending == 0) fault("mbarrier.arrive at %#x: more arrivals than its count (%u)", address, b.count);
    const unsigned long long state = b.phase;
    b.tx += (long long)expect_tx;
    b.pending--;
    t_block->current->mbarrier_arrivals++;
    t_block->events++;
    complete_phase_if_done(b);
    return state;
}

bool mbarrier_try_wait_parity(unsigned address, unsigned parity) {
    touch(address, false);
    BlockRun& run = *t_block;
    Mbarrier& b = find(address, "mbarrier.try_wait");
    // Phase `parity` has completed when the current phase's parity differs from it; a wrong
    // parity can see it completed before the copies land.
    bool done = (b.phase & 1u) != (parity & 1u);
    if (!done) {
        land(b);
        done = (b.phase & 1u) != (parity & 1u);
    }
    Fiber& self = *run.current;
    if (done) {
        // Progress; the other threads run on meanwhile, as they do on a GPU, so a thread that
        // refills a stage without waiting for its readers meets them still reading it.
        run.events++;
        yield();
        return true;
    }
    self.waiting_mbarrier = (int)(&b - run.mbarriers.data());
    self.waiting_parity = parity & 1u;
    yield();
    // The block may have moved on: the waiting state is read again by the next try_wait.
    run.current->waiting_mbarrier = -1;
    return false;
}

void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned address) {
    if (bytes == 0 || bytes % 16 != 0) fault("cp.async.bulk: size %u is not a positive multiple of 16", bytes);
    if (dst % 16 != 0) fault("cp.async.bulk: shared address %#x is not 16-byte aligned", dst);
    if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fault("cp.async.bulk: global address %p is not 16-byte aligned", src);
    check_access(src, bytes, 16, Access::Load);
    shared_decl_at(dst, bytes, "cp.async.bulk");
    touch(address, false);
    Mbarrier& b = find(address, "cp.async.bulk");
    if (!b.fenced) {
        fault("cp.async.bulk completes on the mbarrier at %#x, whose mbarrier.init (by thread %u) no "
              "fence.proxy.async has made visible to the asynchronous proxy",
              address, (unsigned)b.initializer);
    }
    const BulkCopy copy{dst, static_cast<const unsigned char*>(src), bytes, self_tid()};
    shadow_bulk(copy, true);
    std::memset(t_block->arena.get() + dst, kSharedPoison, bytes);
    b.copies.push_back(copy);
}

void bulk_copies_at_block_end(BlockRun& run) {
    for (const Mbarrier& b : run.mbarriers) {
        if (!b.copies.empty() && run.fault.empty()) {
            run.fault = format("block ended with %zu cp.async.bulk cop%s on the mbarrier at %#x never waited for",
                               b.copies.size(), b.copies.size() == 1 ? "y" : "ies", b.address);
        }
    }
}

std::string mbarrier_wait_description(const BlockRun& run, const Fiber& f) {
    const Mbarrier& b = run.mbarriers[(size_t)f.waiting_mbarrier];
    return format("mbarrier at %#x, waiting for phase parity %u; phase %u missing %u of %u arrivals and %lld "
                  "transaction bytes",
                  b.address, f.waiting_parity, b.phase, b.pending, b.count, b.tx);
}

}  // namespace emu
