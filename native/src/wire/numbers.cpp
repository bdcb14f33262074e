#include "wire/numbers.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace lucerna {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Advances `i` past a run of digits; returns how many there were.
size_t skip_digits(std::string_view text, size_t & i) {
    const size_t from = i;
    while (i < text.size() && is_digit(text[i])) {
        ++i;
    }
    return i - from;
}

bool is_decimal(std::string_view text) {
    size_t i = 0;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
        ++i;
    }
    size_t digits = skip_digits(text, i);
    if (i < text.size() && text[i] == '.') {
        ++i;
        digits += skip_digits(text, i);
    }
    if (digits == 0) {
        return false;  // "", "-", "." and ".e5" have no mantissa
    }
    if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        ++i;
        if (i < text.size() && (text[i] == '+' || text[i] == '-')) {
            ++i;
        }
        if (skip_digits(text, i) == 0) {
            return false;
        }
    }
    return i == text.size();
}

}  // namespace

std::optional<int64_t> parse_integer(std::string_view text, PlusSign plus) {
    size_t i = 0;
    if (plus == PlusSign::kAllowed && !text.empty() && text[0] == '+') {
        i = 1;  // from_chars takes '-' but never '+'
    }
    const std::string_view number = text.substr(i);
    const size_t digits_from = !number.empty() && number[0] == '-' ? 1 : 0;
    size_t end = digits_from;
    if (skip_digits(number, end) == 0 || end != number.size()) {
        return std::nullopt;
    }
    int64_t value = 0;
    const auto result = std::from_chars(number.data(), number.data() + number.size(), value);
    if (result.ec != std::errc() || result.ptr != number.data() + number.size()) {
        return std::nullopt;  // out of int64's range
    }
    return value;
}

std::optional<double> parse_decimal(std::string_view text) {
    if (!is_decimal(text)) {
        return std::nullopt;
    }
    const std::string copy(text);  // strtod needs the NUL
    errno = 0;
    const double value = std::strtod(copy.c_str(), nullptr);
    if (errno == ERANGE || !std::isfinite(value)) {
        return std::nullopt;
    }
    return value;
}

}  // namespace lucerna
