// embed <ids> <path> [lengths=N,...] [pooling=mean|last]
//
// Pooled hidden states of the served model (PROTOCOL.md 5.11): each input is decoded
// on its own from an empty sequence with the engine's embeddings output on, and the
// final-norm hidden states of its positions are pooled (mean, or the last position)
// into one float32 row of `dim` values, written to <path> as an n x dim matrix.
//
// The context has one sequence, the live one that generation and the prefix cache
// reuse (5.10). An input needs a sequence of its own, so `embed` clears the live
// sequence (its checkpoints and the draft's cache too) explicitly before the first
// input and after the last: the next `generate` starts from a slot or from nothing,
// never from state an embedding left. Snapshot slots are not touched.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "commands/handlers.h"
#include "wire/fd_io.h"
#include "wire/token_refs.h"

namespace lucerna {
namespace {

const char * const kUsage = "embed <ids:...|path> <path> [lengths=N,...] [pooling=mean|last]";

// Positions per engine decode. Every position outputs its hidden state, and the engine
// keeps a logits row (n_vocab floats) beside it, so the decode is kept small enough
// that a 262k vocabulary costs tens of megabytes, not a chunk's worth of rows.
constexpr int32_t kEmbedBatch = 64;

void clear_sequence(Session & session) {
    llama_memory_clear(llama_get_memory(session.engine.context.get()), /*data =*/true);
    session.clear_lanes();
    if (session.spec.draft() != nullptr && session.spec.draft()->attached()) {
        session.spec.draft()->clear();
    }
}

// Sets the context's embeddings output for as long as it lives, whatever is thrown.
class EmbeddingsOn {
public:
    explicit EmbeddingsOn(llama_context * ctx) : ctx_(ctx) { llama_set_embeddings(ctx_, true); }
    ~EmbeddingsOn() { llama_set_embeddings(ctx_, false); }
    EmbeddingsOn(const EmbeddingsOn &) = delete;
    EmbeddingsOn & operator=(const EmbeddingsOn &) = delete;

private:
    llama_context * ctx_;
};

}  // namespace

std::string handle_embed(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, kUsage);
    cmd.check_options({"lengths", "pooling"}, kUsage);
    bool last = false;
    std::vector<int32_t> lengths;
    bool has_lengths = false;
    for (const auto & [key, value] : cmd.options) {
        if (key == "lengths") {
            lengths = parse_id_list(value, "lengths");
            has_lengths = true;
        } else if (key == "pooling") {
            if (value != "mean" && value != "last") {
                throw ProtocolError(ErrorCode::kBadArgs, "pooling=" + value + " must be mean or last");
            }
            last = value == "last";
        }
    }
    const std::vector<int32_t> ids = read_token_ref(cmd.positional[0]);
    const std::string & path = c_string_value(cmd.positional[1], ErrorCode::kBadArgs, "embed path");
    if (!has_lengths) {
        lengths = {static_cast<int32_t>(ids.size())};
    }
    int64_t total = 0;
    for (const int32_t n : lengths) {
        if (n <= 0) {
            throw ProtocolError(ErrorCode::kEmptyPrompt, "embed needs at least one token per input");
        }
        if (n > session.engine.n_ctx_seq) {
            throw ProtocolError(ErrorCode::kContextOverflow, "an input of " + std::to_string(n) +
                                                                 " tokens exceeds " + session.engine.ctx_limit());
        }
        total += n;
    }
    if (lengths.empty() || total != static_cast<int64_t>(ids.size())) {
        throw ProtocolError(ErrorCode::kBadArgs, "lengths must be positive and add up to the " +
                                                     std::to_string(ids.size()) + " ids given");
    }
    check_token_ids(ids, session.engine.n_vocab);

    llama_context * ctx = session.engine.context.get();
    const int32_t dim = llama_model_n_embd_out(session.engine.model.get());
    const int32_t n_batch = std::max(1, std::min(kEmbedBatch, session.engine.n_chunk));
    const auto t_start = std::chrono::steady_clock::now();
    std::vector<float> out;
    out.reserve(lengths.size() * static_cast<size_t>(dim));
    Batch batch(n_batch);
    clear_sequence(session);
    try {
        EmbeddingsOn embeddings(ctx);
        size_t at = 0;
        for (const int32_t n : lengths) {
            llama_memory_clear(llama_get_memory(ctx), /*data =*/true);
            std::vector<double> pooled(static_cast<size_t>(dim), 0.0);
            for (int32_t pos = 0; pos < n; pos += n_batch) {
                const int32_t end = std::min(n, pos + n_batch);
                batch.clear();
                for (int32_t i = pos; i < end; ++i) {
                    // Last pooling needs only the final position's state.
                    batch.add(ids[at + static_cast<size_t>(i)], i, /*want_logits =*/!last || i == n - 1);
                }
                const int32_t rc = llama_decode(ctx, batch.get());
                if (rc != 0) {
                    throw ProtocolError(ErrorCode::kDecodeFailed,
                                        "llama_decode failed during embed (code " + std::to_string(rc) + ")");
                }
                for (int32_t i = pos; i < end; ++i) {
                    if (last && i != n - 1) {
                        continue;
                    }
                    const float * row = llama_get_embeddings_ith(ctx, i - pos);
                    if (row == nullptr) {
                        throw ProtocolError(ErrorCode::kDecodeFailed, "the engine gave no hidden state");
                    }
                    for (int32_t d = 0; d < dim; ++d) {
                        pooled[static_cast<size_t>(d)] += row[d];
                    }
                }
            }
            const double scale = last ? 1.0 : 1.0 / n;
            for (const double v : pooled) {
                out.push_back(static_cast<float>(v * scale));
            }
            at += static_cast<size_t>(n);
        }
    } catch (...) {
        clear_sequence(session);
        throw;
    }
    clear_sequence(session);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
    std::string bytes(out.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), out.data(), bytes.size());  // little-endian hosts only, as the stream
    if (!write_file_atomically(path, bytes)) {
        throw ProtocolError(ErrorCode::kIoFailed, "cannot write the embeddings to " + path);
    }
    return OkReply("embed")
        .add("n", static_cast<int64_t>(lengths.size()))
        .add("dim", dim)
        .add("n_tokens", static_cast<int64_t>(ids.size()))
        .add_ms("ms", ms)
        .line();
}

}  // namespace lucerna
