#include "wire/msgpack_writer.h"

#include <algorithm>
#include <cstring>

namespace lucerna {
namespace {

// Bytes a value needs in msgpack's sized forms: 1, 2, 4 or 8.
int unsigned_width(uint64_t v) {
    return v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffULL ? 4 : 8;
}

// Same for a negative value in two's complement.
int negative_width(int64_t v) {
    return v >= INT8_MIN ? 1 : v >= INT16_MIN ? 2 : v >= INT32_MIN ? 4 : 8;
}

}  // namespace

void MsgpackWriter::be(uint64_t v, int n_bytes) {
    for (int i = n_bytes - 1; i >= 0; --i) {
        u8(static_cast<uint8_t>((v >> (8 * i)) & 0xff));
    }
}

// Within one family (map16/32, str8/16/32, uint8..64, int8..64, ...) the spec numbers
// the sized forms consecutively in width order, so the marker follows from the
// family's narrowest form. `be` keeps the low `width` bytes, which for a negative
// value is its two's complement at that width.
void MsgpackWriter::sized(uint8_t narrowest_marker, int narrowest_width, int width, uint64_t v) {
    width = std::max(width, narrowest_width);
    uint8_t marker = narrowest_marker;
    for (int w = narrowest_width; w < width; w *= 2) {
        ++marker;
    }
    u8(marker);
    be(v, width);
}

void MsgpackWriter::map_header(uint32_t n_pairs) {
    if (n_pairs < 16) {
        u8(static_cast<uint8_t>(0x80 | n_pairs));  // fixmap
    } else {
        sized(0xde, 2, unsigned_width(n_pairs), n_pairs);  // map16, map32
    }
}

void MsgpackWriter::array_header(uint32_t n_items) {
    if (n_items < 16) {
        u8(static_cast<uint8_t>(0x90 | n_items));  // fixarray
    } else {
        sized(0xdc, 2, unsigned_width(n_items), n_items);  // array16, array32
    }
}

void MsgpackWriter::str(std::string_view text) {
    const auto n = static_cast<uint32_t>(text.size());
    if (n < 32) {
        u8(static_cast<uint8_t>(0xa0 | n));  // fixstr
    } else {
        sized(0xd9, 1, unsigned_width(n), n);  // str8, str16, str32
    }
    out_.append(text);
}

void MsgpackWriter::bin(std::string_view bytes) {
    const auto n = static_cast<uint32_t>(bytes.size());
    sized(0xc4, 1, unsigned_width(n), n);  // bin8, bin16, bin32
    out_.append(bytes);
}

void MsgpackWriter::integer(int64_t value) {
    if (value >= 0) {
        const auto v = static_cast<uint64_t>(value);
        if (v < 128) {
            u8(static_cast<uint8_t>(v));  // positive fixint
        } else {
            sized(0xcc, 1, unsigned_width(v), v);  // uint8 .. uint64
        }
    } else if (value >= -32) {
        u8(static_cast<uint8_t>(static_cast<int8_t>(value)));  // negative fixint
    } else {
        sized(0xd0, 1, negative_width(value), static_cast<uint64_t>(value));  // int8 .. int64
    }
}

void MsgpackWriter::boolean(bool value) { u8(value ? 0xc3 : 0xc2); }

void MsgpackWriter::real(double value) {
    uint64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(value), "IEEE 754 double expected");
    std::memcpy(&bits, &value, sizeof(bits));
    u8(0xcb);
    be(bits, 8);
}

}  // namespace lucerna
