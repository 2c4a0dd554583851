// cp.async and its commit groups (sm_80 and newer), as the PTX executor runs them.
//
// A copy is in flight from its issue until a cp.async.wait_group completes its group; on a GPU
// its bytes land at any time in between, so the emulator makes that window visible: the
// destination holds poison while the copy is in flight, and in a tracked block every shared
// access to it is a fault naming the thread whose copy it is. Issuing is a write of the
// destination by the issuing thread (a race with another thread's read or write since the last
// __syncthreads); completing is another write by it, so other threads read the data only after a
// barrier that follows the wait. A thread that ends with copies in flight is a fault too: what
// they wrote would be undefined.
#include <cstring>

#include "block_run.h"

namespace emu {

namespace {

// Marks the destination's elements in flight (issue) or written (completion) in the shadow.
void shadow_copy(const AsyncCopy& copy, bool issue) {
    const Fiber& self = *t_block->current;
    const unsigned short tid = (unsigned short)linear_tid(self.coords);
    const unsigned epoch = self.barriers_done + 1;
    for_each_element_shadow(copy.dst, copy.bytes, "cp.async", [&](const SharedDecl& d, size_t e, Shadow& s) {
        if (issue) {
            if (s.in_flight) {
                fault("cp.async by thread %u into '%s' element %zu while thread %u's cp.async into it is in flight",
                      (unsigned)tid, d.name, e, (unsigned)s.writer);
            }
            auto race = [&](unsigned other, const char* other_did) {
                fault("shared-memory race on '%s' element %zu: thread %u %s it and thread %u's cp.async wrote it with "
                      "no __syncthreads between them",
                      d.name, e, other, other_did, (unsigned)tid);
            };
            if (s.write_epoch == epoch && s.writer != tid) race(s.writer, "wrote");
            if (s.read_epoch == epoch && s.reader != tid) race(s.reader, "read");
            if (s.read_epoch == epoch && s.two_readers && s.second_reader != tid) race(s.second_reader, "read");
        }
        s.in_flight = issue;
        s.writer = tid;
        s.write_epoch = epoch;
    });
}

void complete(const AsyncCopy& copy) {
    unsigned char* dst = t_block->arena.get() + copy.dst;
    if (copy.src_bytes > 0) std::memcpy(dst, copy.src, copy.src_bytes);
    std::memset(dst + copy.src_bytes, 0, copy.bytes - copy.src_bytes);
    shadow_copy(copy, false);
}

}  // namespace

void async_copy(unsigned dst, const void* src, unsigned bytes, unsigned src_bytes) {
    if (src_bytes > bytes) fault("cp.async: src-size %u is larger than the copy's %u bytes", src_bytes, bytes);
    if (dst % bytes != 0) fault("cp.async: shared address %#x is not aligned to the copy's %u bytes", dst, bytes);
    if (reinterpret_cast<uintptr_t>(src) % bytes != 0) {
        fault("cp.async: global address %p is not aligned to the copy's %u bytes", src, bytes);
    }
    // The source is read when the copy lands; its bounds are a property of the issue.
    if (src_bytes > 0) check_access(src, src_bytes, 1, Access::Load);
    shared_decl_at(dst, bytes, "cp.async");
    Fiber& self = *t_block->current;
    const AsyncCopy copy{dst, static_cast<const unsigned char*>(src), bytes, src_bytes, self.async_groups};
    shadow_copy(copy, true);
    std::memset(t_block->arena.get() + dst, kSharedPoison, bytes);
    self.async_copies.push_back(copy);
}

void async_commit() {
    t_block->current->async_groups++;
}

void async_wait(unsigned long long pending) {
    Fiber& self = *t_block->current;
    // Groups 0 .. async_groups - 1 are committed; all but the `pending` newest complete.
    const unsigned long long complete_below = pending >= self.async_groups ? 0 : self.async_groups - pending;
    size_t kept = 0;
    for (const AsyncCopy& copy : self.async_copies) {
        if (copy.group < complete_below) {
            complete(copy);
        } else {
            self.async_copies[kept++] = copy;
        }
    }
    self.async_copies.resize(kept);
}

void async_copies_at_exit() {
    const Fiber& self = *t_block->current;
    if (!self.async_copies.empty()) {
        fault("thread %u ended with %zu cp.async cop%s in flight (never completed by a cp.async.wait_group)",
              linear_tid(self.coords), self.async_copies.size(), self.async_copies.size() == 1 ? "y" : "ies");
    }
}

}  // namespace emu
