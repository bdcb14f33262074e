// The process's resident memory, for `stats` (PROTOCOL.md 5.3) and the ds4 shard's
// growth check (engine/rpc_server.cpp).
#pragma once

#include <cstdint>

namespace lucerna {

// VmRSS from /proc/self/status in kB; -1 if unavailable.
int64_t resident_set_kb();

}  // namespace lucerna
