// The one number grammar of the daemons (PROTOCOL.md section 3: "numbers are plain
// decimals"), for command values and startup flags alike:
//
//   integer  = [sign] digit+              sign = "-", or "+" where the caller allows it
//   decimal  = ["+" | "-"] mantissa [exponent]
//   mantissa = digit+ ["." digit*] | "." digit+
//   exponent = ("e" | "E") ["+" | "-"] digit+
//
// No spaces, hex, "inf" or "nan": the forms strtoll/strtod would otherwise take. A
// decimal must also be finite and representable as a double without overflow or
// underflow. Each caller states its accepted set on top of this (sign, range, error
// code), next to the call.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lucerna {

enum class PlusSign {
    kRefused,  // command values: `ids:+2` and `top_k=+5` are bad_args (section 4)
    kAllowed,  // startup flags, which have always taken `--seed=+1`
};

// nullopt when `text` is not an integer of the grammar or does not fit in int64.
std::optional<int64_t> parse_integer(std::string_view text, PlusSign plus = PlusSign::kRefused);

// nullopt when `text` is not a decimal of the grammar or not a finite double.
std::optional<double> parse_decimal(std::string_view text);

}  // namespace lucerna
