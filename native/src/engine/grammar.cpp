#include "engine/grammar.h"

#include <cmath>
#include <cstddef>

#include "json-schema-to-grammar.h"
#include "json.h"
#include "wire/errors.h"
#include "wire/wire.h"

namespace lucerna {
namespace {

// The engine's GBNF parser recurses once per nested group, on our main thread's stack:
// a line of a million '(' would overflow it and take the daemon down. Real grammars
// nest a handful deep, so deeper ones are refused before the engine sees them.
constexpr int kMaxNesting = 256;

// Deepest group nesting, skipping quoted literals, character classes and comments,
// where brackets are just characters.
int nesting_depth(const std::string & text) {
    int depth = 0;
    int deepest = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            for (++i; i < text.size() && text[i] != close; ++i) {
                if (text[i] == '\\') {
                    ++i;  // an escaped character, quote and bracket included
                }
            }
        } else if (c == '#') {
            while (i < text.size() && text[i] != '\n') {
                ++i;
            }
        } else if (c == '(') {
            deepest = depth + 1 > deepest ? depth + 1 : deepest;
            ++depth;
        } else if (c == ')') {
            --depth;
        }
    }
    return deepest;
}

}  // namespace

llama_sampler_ptr make_grammar_sampler(const llama_vocab * vocab, const std::string & text) {
    // An empty string is the engine's "no grammar"; the protocol has no such grammar.
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        throw ProtocolError(ErrorCode::kBadGrammar, "the grammar is empty; it needs a root rule");
    }
    if (nesting_depth(text) > kMaxNesting) {
        throw ProtocolError(ErrorCode::kBadGrammar,
                            "the grammar nests groups more than " + std::to_string(kMaxNesting) + " deep");
    }
    // The engine parses a C string: text after a NUL (%00 in grammar=text:, or a NUL
    // byte in the file) would silently not be part of the grammar.
    c_string_value(text, ErrorCode::kBadGrammar, "grammar");
    llama_sampler_ptr sampler(llama_sampler_init_grammar(vocab, text.c_str(), "root"));
    if (!sampler) {
        throw ProtocolError(ErrorCode::kBadGrammar,
                            "the grammar does not parse as GBNF with a root rule (the engine's reason is on stderr)");
    }
    return sampler;
}

std::string grammar_from_json_schema(const std::string & schema_text) {
    try {
        return json_schema_to_grammar(common_json::parse(schema_text));
    } catch (const std::exception & e) {
        throw ProtocolError(ErrorCode::kBadGrammar, std::string("json_schema: ") + e.what());
    }
}

bool grammar_is_complete(const llama_vocab * vocab, const llama_token_data_array & candidates) {
    for (size_t i = 0; i < candidates.size; ++i) {
        const llama_token_data & c = candidates.data[i];
        // The grammar sampler rejects a token by setting its logit to -inf.
        if (c.logit != -INFINITY && !llama_vocab_is_eog(vocab, c.id)) {
            return false;
        }
    }
    return true;
}

}  // namespace lucerna
