#include "engine/options.h"

#include <cstdint>
#include <optional>

#include "wire/numbers.h"

namespace lucerna {

bool split_endpoint(const std::string & endpoint, std::string & host, int & port) {
    const size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) {
        return false;
    }
    const std::string port_text = endpoint.substr(colon + 1);
    // A port in the flag number grammar (wire/numbers.h, '+' allowed), 1 to 65535.
    const std::optional<int64_t> parsed = parse_integer(port_text, PlusSign::kAllowed);
    if (!parsed || *parsed < 1 || *parsed > 65535) {
        return false;
    }
    host = endpoint.substr(0, colon);
    port = static_cast<int>(*parsed);
    return true;
}

}  // namespace lucerna
