// Grid-level primitives, as the PTX executor runs them: griddepcontrol.wait in a programmatic
// dependent launch (memory_checks.cpp refuses X reads and Y writes before it), and global
// atomics, which run as the host's own atomics: the workers run blocks concurrently, and with a
// seeded order blocks also start in an order drawn from the seed, so the arrival order at an
// atomic varies with the seed.
#include <cstdint>

#include "block_run.h"

namespace emu {

void grid_dependency_wait() {
    t_block->current->grid_dependency_waited = true;
}

unsigned atomic_add(void* p, unsigned value) {
    check_access(p, 4, 4, Access::Store);
    return __atomic_fetch_add(static_cast<unsigned*>(p), value, __ATOMIC_RELAXED);
}

}  // namespace emu
