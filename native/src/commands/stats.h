// Facts about this process for `stats` (PROTOCOL.md 5.3).
#pragma once

#include <cstdint>

namespace lucerna {

// VmRSS from /proc/self/status in kB; -1 if unavailable.
int64_t resident_set_kb();

}  // namespace lucerna
