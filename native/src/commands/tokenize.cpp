// tokenize <text> [special=0|1] [add_bos=0|1]   (stream command)
#include <limits>
#include <vector>

#include "commands/handlers.h"
#include "wire/token_refs.h"

namespace lucerna {
namespace {

std::vector<llama_token> tokenize_text(const llama_vocab * vocab, const std::string & text, bool add_bos,
                                       bool parse_special) {
    // The engine takes the length as an int32_t: a longer text (a file, or an inline
    // value under --max-line up to 4 GiB) would wrap to a negative length.
    if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()) - 2) {
        throw ProtocolError(ErrorCode::kBadArgs, "the text has " + std::to_string(text.size()) +
                                                     " bytes; the engine tokenizes at most 2^31 - 3");
    }
    // BOS is added here rather than by llama_tokenize(add_special), so that add_bos=1
    // adds it even for a vocabulary whose own add_bos is false, and add_bos=0 never does.
    std::vector<llama_token> tokens(text.size() + 2);
    int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                               static_cast<int32_t>(tokens.size()), /*add_special =*/false, parse_special);
    if (n < 0) {
        tokens.resize(static_cast<size_t>(-n));
        n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), tokens.data(),
                           static_cast<int32_t>(tokens.size()), false, parse_special);
    }
    if (n < 0) {
        throw ProtocolError(ErrorCode::kBadArgs, "the text is too long to tokenize");
    }
    tokens.resize(static_cast<size_t>(n));
    const llama_token bos = llama_vocab_bos(vocab);
    if (add_bos && bos != LLAMA_TOKEN_NULL) {
        tokens.insert(tokens.begin(), bos);
    }
    return tokens;
}

}  // namespace

std::string handle_tokenize(Session & session, const CommandLine & cmd) {
    static const char * kUsage = "tokenize <text:...|path> [special=0|1] [add_bos=0|1]";
    cmd.expect_positional(1, kUsage);
    cmd.check_options({"special", "add_bos"}, kUsage);
    const auto * special = cmd.option("special");
    const auto * add_bos = cmd.option("add_bos");
    const bool parse_special = special ? parse_bool01("special", *special) : true;
    const bool with_bos = add_bos ? parse_bool01("add_bos", *add_bos) : llama_vocab_get_add_bos(session.engine.vocab);

    const std::string text = read_text_ref(cmd.positional[0]);
    const auto tokens = tokenize_text(session.engine.vocab, text, with_bos, parse_special);
    if (!session.stream.write(std::vector<int32_t>(tokens.begin(), tokens.end()))) {
        throw ProtocolError(ErrorCode::kIoFailed, "the stream fd is closed");
    }
    return OkReply("tokenize").add("n", static_cast<int64_t>(tokens.size())).line();
}

}  // namespace lucerna
