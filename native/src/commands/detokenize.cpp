// detokenize <ids> [special=0|1]
#include <algorithm>
#include <limits>
#include <vector>

#include "commands/handlers.h"
#include "wire/token_refs.h"

namespace lucerna {

std::string handle_detokenize(Session & session, const CommandLine & cmd) {
    static const char * kUsage = "detokenize <ids:...|path> [special=0|1]";
    cmd.expect_positional(1, kUsage);
    cmd.check_options({"special"}, kUsage);
    const auto * special = cmd.option("special");
    const bool render_special = special ? parse_bool01("special", *special) : false;

    const std::vector<int32_t> ids = read_token_ref(cmd.positional[0]);
    check_token_ids(ids, session.engine.n_vocab);

    // The engine takes counts and the buffer size as int32_t; past that they would wrap.
    constexpr size_t kMaxIds = (static_cast<size_t>(std::numeric_limits<int32_t>::max()) - 16) / 8;
    if (ids.size() > kMaxIds) {
        throw ProtocolError(ErrorCode::kBadArgs, std::to_string(ids.size()) + " ids; detokenize takes at most " +
                                                     std::to_string(kMaxIds));
    }
    std::string text(ids.size() * 8 + 16, '\0');
    int32_t n = llama_detokenize(session.engine.vocab, ids.data(), static_cast<int32_t>(ids.size()), text.data(),
                                 static_cast<int32_t>(text.size()), /*remove_special =*/false, render_special);
    if (n < 0) {
        text.resize(static_cast<size_t>(-n));
        n = llama_detokenize(session.engine.vocab, ids.data(), static_cast<int32_t>(ids.size()), text.data(),
                             static_cast<int32_t>(text.size()), false, render_special);
    }
    text.resize(static_cast<size_t>(std::max(n, 0)));
    return OkReply("detokenize").add("text", text).line();
}

}  // namespace lucerna
