// vocab <path>: the piece table (PROTOCOL.md 5.2) as a msgpack map, so the front end
// can turn ids into text incrementally without a round trip per token.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands/handlers.h"
#include "wire/fd_io.h"
#include "wire/msgpack_writer.h"

namespace lucerna {
namespace {

std::string token_piece(const llama_vocab * vocab, llama_token id) {
    std::string piece(32, '\0');
    int32_t n = llama_token_to_piece(vocab, id, piece.data(), static_cast<int32_t>(piece.size()), 0, /*special =*/true);
    if (n < 0) {
        piece.resize(static_cast<size_t>(-n));
        n = llama_token_to_piece(vocab, id, piece.data(), static_cast<int32_t>(piece.size()), 0, true);
    }
    piece.resize(static_cast<size_t>(std::max(n, 0)));
    return piece;
}

std::string piece_table(const llama_vocab * vocab, int32_t n_vocab) {
    MsgpackWriter out;
    out.map_header(7);
    out.str("n_vocab");
    out.integer(n_vocab);

    out.str("pieces");
    out.array_header(static_cast<uint32_t>(n_vocab));
    for (llama_token id = 0; id < n_vocab; ++id) {
        out.bin(token_piece(vocab, id));
    }

    out.str("attrs");
    out.array_header(static_cast<uint32_t>(n_vocab));
    for (llama_token id = 0; id < n_vocab; ++id) {
        out.integer(static_cast<int64_t>(llama_vocab_get_attr(vocab, id)));
    }

    std::vector<llama_token> eog;
    for (llama_token id = 0; id < n_vocab; ++id) {
        if (llama_vocab_is_eog(vocab, id)) {
            eog.push_back(id);
        }
    }
    out.str("eog");
    out.array_header(static_cast<uint32_t>(eog.size()));
    for (const llama_token id : eog) {
        out.integer(id);
    }

    out.str("bos");
    out.integer(llama_vocab_bos(vocab));
    out.str("eos");
    out.integer(llama_vocab_eos(vocab));
    out.str("add_bos");
    out.boolean(llama_vocab_get_add_bos(vocab));
    return out.bytes();
}

}  // namespace

std::string handle_vocab(Session & session, const CommandLine & cmd) {
    static const char * kUsage = "vocab <path>";
    cmd.expect_positional(1, kUsage);
    cmd.check_options({}, kUsage);
    const std::string & path = cmd.positional[0];
    if (!write_file_atomically(path, piece_table(session.engine.vocab, session.engine.n_vocab))) {
        throw ProtocolError(ErrorCode::kIoFailed, "cannot write the piece table to " + path);
    }
    return OkReply("vocab").add("n", session.engine.n_vocab).add("path", path).line();
}

}  // namespace lucerna
