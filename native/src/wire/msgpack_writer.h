// The few msgpack encodings the piece table and `stats` need (map, str, array, bin, int,
// float64, bool), written by hand so the daemons need no msgpack library. Multi-byte lengths and
// integers are big-endian, as the msgpack spec requires.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lucerna {

class MsgpackWriter {
public:
    void map_header(uint32_t n_pairs);
    void array_header(uint32_t n_items);
    void str(std::string_view text);
    void bin(std::string_view bytes);
    void integer(int64_t value);
    void real(double value);  // float64, for `stats path=`
    void boolean(bool value);

    const std::string & bytes() const { return out_; }

private:
    void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
    void be(uint64_t v, int n_bytes);
    // Marker + big-endian value in the narrowest sized form of one family that is at
    // least `width` bytes wide.
    void sized(uint8_t narrowest_marker, int narrowest_width, int width, uint64_t v);

    std::string out_;
};

}  // namespace lucerna
