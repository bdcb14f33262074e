// The process's resident memory, for `stats` (PROTOCOL.md 5.3) and the ds4 shard's
// growth check (engine/rpc_server.cpp), and giving freed heap back to the system.
#pragma once

#include <cstdint>

namespace lucerna {

// VmRSS from /proc/self/status in kB; -1 if unavailable.
int64_t resident_set_kb();

// Returns the heap's free pages to the system (glibc's malloc_trim; a no-op elsewhere).
// After a model, a context or a vocabulary's load scratch is freed, the allocator keeps
// their smaller host allocations: tens of MB that a parked daemon no longer uses.
void return_free_heap();

}  // namespace lucerna
