// The memory checks: every global access against the launch's regions (bounds, read-only data,
// alignment, counted by width), and shared memory (bounds; in the first blocks of a launch,
// uninitialised reads and races between barriers).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "block_run.h"

namespace emu {

namespace {

// The EmuCounts width slot of an access of `size` bytes (log2 of a power of two up to 16), or
// -1 for a width it does not count. Runs on every access: no loop.
int width_slot(size_t size) {
    if (size == 0 || (size & (size - 1)) != 0 || size >= (size_t{1} << EMU_ACCESS_WIDTHS)) return -1;
    return __builtin_ctzll(size);
}

}  // namespace

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
            // Regions 0 and 3 are X and Y, 5 a grouped launch's routing: what a previous kernel
            // writes, and what it may still read.
            if (launch.dependent && (i == 0 || i == 3 || i == 5) && access != Access::Prefetch &&
                !run.current->grid_dependency_waited) {
                fault("%s of '%s' before griddepcontrol.wait: in a programmatic dependent launch the previous "
                      "kernel may still be %s it",
                      kind, r.name, write ? "reading" : "writing");
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

unsigned shared_address_of(const unsigned char* p) {
    return (unsigned)(p - t_block->arena.get());
}

const SharedDecl& shared_decl_at(unsigned offset, size_t bytes, const char* what) {
    for (const SharedDecl& d : t_block->shared) {
        if (offset >= d.offset && (size_t)offset + bytes <= d.offset + d.bytes) return d;
    }
    fault("%s: shared address %#x (%zu bytes) is not inside one shared array of this block", what, offset, bytes);
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
        if (s.in_flight) {
            fault("shared %s of '%s' element %lld by thread %u while thread %u's asynchronous copy into it is in "
                  "flight (no wait has completed it)",
                  kind, d.name, at, (unsigned)tid, (unsigned)s.writer);
        }
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
            if (s.reader == tid) {
                s.reader_arrivals = self.mbarrier_arrivals;
            } else if (s.two_readers && s.second_reader == tid) {
                s.second_reader_arrivals = self.mbarrier_arrivals;
            }
        }
    }
}

}  // namespace emu
