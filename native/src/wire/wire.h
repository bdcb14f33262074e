// The text side of the protocol (PROTOCOL.md section 3): command words, percent
// encoding, key=value options, and the reply lines written to the protocol fd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wire/errors.h"

namespace lucerna {

// RFC 3986 %XX decoding; nullopt on a truncated or non-hex escape.
std::optional<std::string> percent_decode(std::string_view text);

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view bytes);

// Encodes every byte that is not printable ASCII, plus space, '%' and '='.
std::string percent_encode(std::string_view bytes);

// One command line split into its parts. Words after the command are positional
// until the first `key=value` word (key: lowercase letters, digits, '_'); after that
// every word must be an option. All values are percent-decoded and must be UTF-8.
struct CommandLine {
    std::string name;
    std::vector<std::string> positional;
    std::vector<std::pair<std::string, std::string>> options;

    // Throws bad_args unless there are exactly `n` positional arguments.
    void expect_positional(size_t n, const char * usage) const;
    // Throws bad_args for an option not in `known` or given twice.
    void check_options(const std::vector<std::string_view> & known, const char * usage) const;
    const std::string * option(std::string_view key) const;
};

// Parses a line (trailing "\r" already removed). Throws ProtocolError(bad_args).
CommandLine parse_command_line(std::string_view line);

// The command word alone (leading spaces skipped, "" for a blank line), without
// decoding or validating the rest: the stdin reader uses it to spot generate/cancel as
// they arrive, and the dispatcher to reject unknown commands before a full parse.
std::string first_word(std::string_view line);

// A decoded value handed to an API that reads a C string: a file path (the OS), GBNF
// text (the engine's grammar parser). A C string ends at its first NUL byte, and %00
// decodes to one, so such a value would reach the API cut short and name something
// other than what was sent: "a.bin%00junk" would open a.bin (the classic path
// truncation). Returns the value unchanged, or throws ProtocolError(error) naming
// `what`; `error` is the caller's own (bad_token_file for a token file, bad_args for a
// file it writes, ...), since no file and no grammar can hold what was asked for.
const std::string & c_string_value(const std::string & value, ErrorCode error, std::string_view what);

// Option values in the number grammar of wire/numbers.h; they throw bad_args naming the
// key. parse_int takes integers without '+' in [min, max]; parse_float any finite
// decimal (callers check their own range).
int64_t parse_int(std::string_view key, const std::string & value, int64_t min, int64_t max);
double parse_float(std::string_view key, const std::string & value);
bool parse_bool01(std::string_view key, const std::string & value);

// Builds "ok <command> key=value ..."; values are percent-encoded as needed.
class OkReply {
public:
    explicit OkReply(std::string_view command);
    OkReply & add(std::string_view key, std::string_view value);
    OkReply & add(std::string_view key, const char * value) { return add(key, std::string_view(value)); }
    OkReply & add(std::string_view key, const std::string & value) { return add(key, std::string_view(value)); }
    OkReply & add(std::string_view key, int64_t value);
    OkReply & add(std::string_view key, int32_t value) { return add(key, static_cast<int64_t>(value)); }
    OkReply & add(std::string_view key, uint32_t value) { return add(key, static_cast<int64_t>(value)); }
    OkReply & add(std::string_view key, uint64_t value) { return add(key, static_cast<int64_t>(value)); }
    OkReply & add_ms(std::string_view key, double milliseconds);
    const std::string & line() const { return line_; }

private:
    std::string line_;
};

// "err <code> <detail>", the detail flattened to one line.
std::string err_line(ErrorCode code, std::string_view detail);

// Writes whole lines to the protocol fd (the process's original stdout). On one channel
// (--channel=stdout, PROTOCOL.md 10) it also carries the stream's bytes as frames and the
// keep-alive lines; one mutex keeps every line and frame whole, since the keep-alive
// thread writes while the command loop does.
class LineWriter {
public:
    explicit LineWriter(int fd) : fd_(fd) {}
    LineWriter(const LineWriter &) = delete;
    LineWriter & operator=(const LineWriter &) = delete;
    // Returns false if the peer is gone; the caller then shuts down.
    bool write_line(const std::string & line);
    // "@stream N\n" and the N bytes, in one write.
    bool write_stream_frame(const unsigned char * data, size_t size);
    bool write_keepalive();

private:
    int fd_;
    std::mutex mutex_;
};

}  // namespace lucerna
