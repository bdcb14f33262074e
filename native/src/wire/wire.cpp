#include "wire/wire.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "wire/constants.h"
#include "wire/fd_io.h"
#include "wire/numbers.h"

namespace lucerna {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool is_option_key(std::string_view key) {
    return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
}

std::vector<std::string_view> split_words(std::string_view line) {
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] == ' ') {
            ++i;
        }
        const size_t start = i;
        while (i < line.size() && line[i] != ' ') {
            ++i;
        }
        if (i > start) {
            words.push_back(line.substr(start, i - start));
        }
    }
    return words;
}

std::string decode_or_throw(std::string_view word) {
    auto decoded = percent_decode(word);
    if (!decoded) {
        throw ProtocolError(ErrorCode::kBadArgs, "bad percent-encoding in '" + std::string(word) + "'");
    }
    if (!is_valid_utf8(*decoded)) {
        throw ProtocolError(ErrorCode::kBadArgs, "'" + std::string(word) + "' is not UTF-8 once decoded");
    }
    // A NUL (%00) is data only inside inline text (`text:`, PROTOCOL.md section 4), which
    // reaches the engine with its length. Every other value, a path above all, ends up
    // as a C string somewhere and would be cut short at the NUL, so it is refused here,
    // for every command at once. Inline text that is used as a C string after all (a
    // grammar) or a `text:` word given where a path goes is checked where the C string
    // is made (c_string_value).
    if (decoded->rfind("text:", 0) != 0) {
        c_string_value(*decoded, ErrorCode::kBadArgs, "value");
    }
    return *decoded;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
    size_t i = 0;
    while (i < bytes.size()) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        size_t extra = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            extra = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            extra = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + extra >= bytes.size()) {  // truncated sequence
            return false;
        }
        for (size_t k = 1; k <= extra; ++k) {
            const auto cc = static_cast<unsigned char>(bytes[i + k]);
            if ((cc & 0xc0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (cc & 0x3f);
        }
        // Overlong forms, surrogates and values beyond U+10FFFF are not UTF-8.
        static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
        if (cp < kMin[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return false;
        }
        i += extra + 1;
    }
    return true;
}

std::optional<std::string> percent_decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out.push_back(text[i]);
            continue;
        }
        if (i + 2 >= text.size()) {  // needs two hex digits after '%'
            return std::nullopt;
        }
        const int hi = hex_value(text[i + 1]);
        const int lo = hex_value(text[i + 2]);
        if (hi < 0 || lo < 0) {
            return std::nullopt;
        }
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return out;
}

std::string percent_encode(std::string_view bytes) {
    static const char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(bytes.size());
    for (const char ch : bytes) {
        const auto c = static_cast<unsigned char>(ch);
        if (c <= 0x20 || c >= 0x7f || c == '%' || c == '=') {
            out.push_back('%');
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 0xf]);
        } else {
            out.push_back(static_cast<char>(c));
        }
    }
    return out;
}

void CommandLine::expect_positional(size_t n, const char * usage) const {
    if (positional.size() != n) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string("usage: ") + usage);
    }
}

void CommandLine::check_options(const std::vector<std::string_view> & known, const char * usage) const {
    for (size_t i = 0; i < options.size(); ++i) {
        const std::string & key = options[i].first;
        if (std::find(known.begin(), known.end(), key) == known.end()) {
            throw ProtocolError(ErrorCode::kBadArgs, "unknown option " + key + "; usage: " + usage);
        }
        for (size_t j = 0; j < i; ++j) {
            if (options[j].first == key) {
                throw ProtocolError(ErrorCode::kBadArgs, "option " + key + " given twice");
            }
        }
    }
}

const std::string * CommandLine::option(std::string_view key) const {
    for (const auto & [k, v] : options) {
        if (k == key) {
            return &v;
        }
    }
    return nullptr;
}

CommandLine parse_command_line(std::string_view line) {
    const auto words = split_words(line);
    CommandLine cmd;
    if (words.empty()) {
        return cmd;
    }
    cmd.name = std::string(words[0]);
    for (size_t i = 1; i < words.size(); ++i) {
        const std::string_view word = words[i];
        const size_t eq = word.find('=');
        if (eq != std::string_view::npos && is_option_key(word.substr(0, eq))) {
            cmd.options.emplace_back(std::string(word.substr(0, eq)), decode_or_throw(word.substr(eq + 1)));
        } else if (!cmd.options.empty()) {
            throw ProtocolError(ErrorCode::kBadArgs,
                                "positional argument '" + std::string(word) + "' after key=value options");
        } else {
            cmd.positional.push_back(decode_or_throw(word));
        }
    }
    return cmd;
}

std::string first_word(std::string_view line) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) {
        return {};
    }
    const size_t end = line.find(' ', start);
    return std::string(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

const std::string & c_string_value(const std::string & value, ErrorCode error, std::string_view what) {
    const size_t nul = value.find('\0');
    if (nul != std::string::npos) {
        // The detail quotes the value re-encoded, so the NUL shows as %00 where it was.
        throw ProtocolError(error, std::string(what) + " '" + percent_encode(value) + "' holds a NUL byte at offset " +
                                       std::to_string(nul) + " and would be cut short there");
    }
    return value;
}

int64_t parse_int(std::string_view key, const std::string & value, int64_t min, int64_t max) {
    const std::optional<int64_t> parsed = parse_integer(value);  // no '+' (PlusSign::kRefused)
    if (!parsed || *parsed < min || *parsed > max) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string(key) + "=" + value + " is not an integer in [" +
                                                     std::to_string(min) + ", " + std::to_string(max) + "]");
    }
    return *parsed;
}

double parse_float(std::string_view key, const std::string & value) {
    const std::optional<double> parsed = parse_decimal(value);
    if (!parsed) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string(key) + "=" + value + " is not a finite number");
    }
    return *parsed;
}

bool parse_bool01(std::string_view key, const std::string & value) {
    if (value == "0" || value == "1") {
        return value == "1";
    }
    throw ProtocolError(ErrorCode::kBadArgs, std::string(key) + "=" + value + " must be 0 or 1");
}

OkReply::OkReply(std::string_view command) : line_("ok ") { line_.append(command); }

OkReply & OkReply::add(std::string_view key, std::string_view value) {
    line_.push_back(' ');
    line_.append(key);
    line_.push_back('=');
    line_.append(percent_encode(value));
    return *this;
}

OkReply & OkReply::add(std::string_view key, int64_t value) { return add(key, std::to_string(value)); }

OkReply & OkReply::add_ms(std::string_view key, double milliseconds) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.1f", milliseconds);
    return add(key, std::string_view(buffer));
}

std::string err_line(ErrorCode code, std::string_view detail) {
    // Details often quote what the client sent, which may be any bytes: cap the echo and
    // keep the reply one line of UTF-8 (control bytes and, in a detail that is not UTF-8,
    // every non-ASCII byte become %XX).
    constexpr size_t kMaxDetail = 400;
    const bool truncated = detail.size() > kMaxDetail;
    detail = detail.substr(0, kMaxDetail);
    const bool utf8 = is_valid_utf8(detail);
    static const char kHex[] = "0123456789ABCDEF";
    std::string line = "err ";
    line.append(error_code_name(code));
    line.push_back(' ');
    for (const char ch : detail) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\n' || c == '\r') {
            line.push_back(' ');
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) {
            line.push_back('%');
            line.push_back(kHex[c >> 4]);
            line.push_back(kHex[c & 0xf]);
        } else {
            line.push_back(ch);
        }
    }
    if (truncated) {
        line.append("...");
    }
    return line;
}

bool LineWriter::write_line(const std::string & line) {
    std::string data = line;
    data.push_back('\n');
    const std::lock_guard<std::mutex> lock(mutex_);
    return write_all(fd_, data.data(), data.size());
}

bool LineWriter::write_stream_frame(const unsigned char * data, size_t size) {
    std::string frame = std::string(kChannelStreamWord) + " " + std::to_string(size) + "\n";
    frame.append(reinterpret_cast<const char *>(data), size);
    const std::lock_guard<std::mutex> lock(mutex_);
    return write_all(fd_, frame.data(), frame.size());
}

bool LineWriter::write_keepalive() {
    return write_line(kChannelAliveLine);
}

}  // namespace lucerna
