#include "wire/token_refs.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>

#include "wire/errors.h"
#include "wire/numbers.h"
#include "wire/wire.h"

namespace lucerna {
namespace {

bool starts_with(const std::string & text, const char * prefix) { return text.rfind(prefix, 0) == 0; }

// Every token and text file a command reads comes through here, so this is where a
// decoded path meets the OS: one holding a NUL would open a shorter path (wire.h).
// Throws `error` naming `what` for that path and for a file it cannot read.
std::string read_file(const std::string & path, ErrorCode error, const char * what) {
    c_string_value(path, error, std::string(what) + " path");
    std::error_code ec;
    std::string out;
    if (std::filesystem::is_regular_file(path, ec)) {  // not missing, a directory, or unstatable
        std::ifstream file(path, std::ios::binary);
        if (file) {
            out.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
            if (!file.bad()) {
                return out;
            }
        }
    }
    throw ProtocolError(error, std::string("cannot read ") + what + " " + path);
}

}  // namespace

std::vector<int32_t> parse_id_list(const std::string & text, const char * what) {
    std::vector<int32_t> ids;
    if (text.empty()) {
        return ids;
    }
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        // int32 integers of the number grammar (wire/numbers.h), no '+': section 4.
        const std::optional<int64_t> value = parse_integer(item);
        if (!value || *value < std::numeric_limits<int32_t>::min() || *value > std::numeric_limits<int32_t>::max()) {
            throw ProtocolError(ErrorCode::kBadArgs, std::string(what) + ": '" + item + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(*value));
        if (comma == std::string::npos) {
            break;
        }
        start = comma + 1;
    }
    return ids;
}

std::vector<int32_t> read_token_ref(const std::string & ref) {
    if (starts_with(ref, "ids:")) {
        return parse_id_list(ref.substr(4), "ids");
    }
    const std::string bytes = read_file(ref, ErrorCode::kBadTokenFile, "token file");
    if (bytes.size() % 4 != 0) {
        throw ProtocolError(ErrorCode::kBadTokenFile, "token file " + ref + " has " + std::to_string(bytes.size()) +
                                                          " bytes, not a multiple of 4");
    }
    std::vector<int32_t> ids(bytes.size() / 4);
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto * b = reinterpret_cast<const unsigned char *>(bytes.data() + 4 * i);
        const uint32_t u = uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
        ids[i] = static_cast<int32_t>(u);
    }
    return ids;
}

std::string read_text_ref(const std::string & ref) {
    if (starts_with(ref, "text:")) {
        return ref.substr(5);
    }
    return read_file(ref, ErrorCode::kBadTextFile, "text file");
}

void check_token_ids(const std::vector<int32_t> & ids, int32_t n_vocab) {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            throw ProtocolError(ErrorCode::kBadToken, "token " + std::to_string(ids[i]) + " at index " +
                                                          std::to_string(i) + " is outside [0, " +
                                                          std::to_string(n_vocab) + ")");
        }
    }
}

}  // namespace lucerna
