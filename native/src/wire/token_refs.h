// Token and text references (PROTOCOL.md section 4): `ids:1,2,3` or a token file of
// raw int32 LE; `text:<encoded>` or a UTF-8 text file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lucerna {

// Throws bad_args (malformed ids:) or bad_token_file (missing, unreadable, size % 4,
// or a path holding a NUL byte, which names no file).
std::vector<int32_t> read_token_ref(const std::string & ref);

// Throws bad_text_file for a missing or unreadable file, or a path holding a NUL byte.
std::string read_text_ref(const std::string & ref);

// Throws bad_token naming the first id outside [0, n_vocab).
void check_token_ids(const std::vector<int32_t> & ids, int32_t n_vocab);

// Parses "1,2,3" (empty string: empty list); throws bad_args naming `what`.
std::vector<int32_t> parse_id_list(const std::string & text, const char * what);

}  // namespace lucerna
