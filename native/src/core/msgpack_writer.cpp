#include "core/msgpack_writer.h"

namespace lucerna {

void MsgpackWriter::be(uint64_t v, int n_bytes) {
    for (int i = n_bytes - 1; i >= 0; --i) {
        u8(static_cast<uint8_t>((v >> (8 * i)) & 0xff));
    }
}

void MsgpackWriter::map_header(uint32_t n_pairs) {
    if (n_pairs < 16) {
        u8(static_cast<uint8_t>(0x80 | n_pairs));  // fixmap
    } else if (n_pairs <= 0xffff) {
        u8(0xde);
        be(n_pairs, 2);
    } else {
        u8(0xdf);
        be(n_pairs, 4);
    }
}

void MsgpackWriter::array_header(uint32_t n_items) {
    if (n_items < 16) {
        u8(static_cast<uint8_t>(0x90 | n_items));  // fixarray
    } else if (n_items <= 0xffff) {
        u8(0xdc);
        be(n_items, 2);
    } else {
        u8(0xdd);
        be(n_items, 4);
    }
}

void MsgpackWriter::str(std::string_view text) {
    const auto n = static_cast<uint32_t>(text.size());
    if (n < 32) {
        u8(static_cast<uint8_t>(0xa0 | n));  // fixstr
    } else if (n <= 0xff) {
        u8(0xd9);
        be(n, 1);
    } else if (n <= 0xffff) {
        u8(0xda);
        be(n, 2);
    } else {
        u8(0xdb);
        be(n, 4);
    }
    out_.append(text);
}

void MsgpackWriter::bin(std::string_view bytes) {
    const auto n = static_cast<uint32_t>(bytes.size());
    if (n <= 0xff) {
        u8(0xc4);
        be(n, 1);
    } else if (n <= 0xffff) {
        u8(0xc5);
        be(n, 2);
    } else {
        u8(0xc6);
        be(n, 4);
    }
    out_.append(bytes);
}

void MsgpackWriter::integer(int64_t value) {
    if (value >= 0) {
        const auto v = static_cast<uint64_t>(value);
        if (v < 128) {
            u8(static_cast<uint8_t>(v));  // positive fixint
        } else if (v <= 0xff) {
            u8(0xcc);
            be(v, 1);
        } else if (v <= 0xffff) {
            u8(0xcd);
            be(v, 2);
        } else if (v <= 0xffffffffULL) {
            u8(0xce);
            be(v, 4);
        } else {
            u8(0xcf);
            be(v, 8);
        }
        return;
    }
    if (value >= -32) {
        u8(static_cast<uint8_t>(static_cast<int8_t>(value)));  // negative fixint
    } else if (value >= -128) {
        u8(0xd0);
        be(static_cast<uint8_t>(static_cast<int8_t>(value)), 1);
    } else if (value >= -32768) {
        u8(0xd1);
        be(static_cast<uint16_t>(static_cast<int16_t>(value)), 2);
    } else if (value >= INT32_MIN) {
        u8(0xd2);
        be(static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
    } else {
        u8(0xd3);
        be(static_cast<uint64_t>(value), 8);
    }
}

void MsgpackWriter::boolean(bool value) { u8(value ? 0xc3 : 0xc2); }

}  // namespace lucerna
