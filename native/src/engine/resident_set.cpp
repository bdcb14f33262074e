#include "engine/resident_set.h"

#include <cstdlib>
#include <fstream>
#include <string>

namespace lucerna {

int64_t resident_set_kb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::strtoll(line.c_str() + 6, nullptr, 10);  // "VmRSS:   412332 kB"
        }
    }
    return -1;
}

}  // namespace lucerna
