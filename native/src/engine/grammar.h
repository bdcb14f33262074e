// The `grammar=` option (PROTOCOL.md 5.1): GBNF text turned into the engine's grammar
// sampler, and the test for a grammar that has nothing left to match.
#pragma once

#include <string>

#include "llama-cpp.h"
#include "llama.h"

namespace lucerna {

// The engine's grammar sampler for `text` with start symbol "root". Throws bad_grammar
// when the text does not parse (the engine logs where to stderr).
llama_sampler_ptr make_grammar_sampler(const llama_vocab * vocab, const std::string & text);

// The GBNF the engine's own converter (common/json-schema-to-grammar) writes for a JSON
// schema given as JSON text. Throws bad_grammar when the text is not JSON or the
// converter refuses the schema.
std::string grammar_from_json_schema(const std::string & schema_text);

// After the grammar sampler has masked `candidates`: true when no token survives but
// end-of-generation ones, i.e. the grammar is complete.
bool grammar_is_complete(const llama_vocab * vocab, const llama_token_data_array & candidates);

}  // namespace lucerna
