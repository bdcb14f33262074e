// compress <ids> <keep_x1000> [lookahead=N] [chunk=N] [pool=N] [segment=N]
//
// Scores the prompt with the drafter's attention (engine/attention_scores.h), keeps the
// best chunks (select_kept_tokens) and writes the kept ids to the stream in order.
#include "commands/compress.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>

#include "commands/handlers.h"
#include "engine/attention_scores.h"
#include "engine/log.h"
#include "wire/token_refs.h"

namespace lucerna {
namespace {

const char * const kUsage =
    "compress <ids:...|path> <keep_x1000 1..1000> [lookahead=N] [chunk=N] [pool=N] [segment=N]";

// The final micro-batch holds every lookahead query; beyond this it stops being a
// "look ahead" and the scoring context's batch grows with it.
constexpr int64_t kMaxLookahead = 1024;

struct CompressRequest {
    std::vector<int32_t> prompt;
    int32_t lookahead = 8;
    int32_t segment = 0;  // 0: the whole prompt in one pass
    ChunkSelection selection;
};

// Validation order as for generate: arguments, token source, empty prompt, token
// range, context size.
CompressRequest parse_request(const Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, kUsage);
    cmd.check_options({"lookahead", "chunk", "pool", "segment"}, kUsage);
    CompressRequest req;
    constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
    req.selection.keep_x1000 = static_cast<int32_t>(parse_int("keep_x1000", cmd.positional[1], 1, 1000));
    for (const auto & [key, value] : cmd.options) {
        if (key == "lookahead") {
            req.lookahead = static_cast<int32_t>(parse_int("lookahead", value, 1, kMaxLookahead));
        } else if (key == "chunk") {
            req.selection.chunk = static_cast<int32_t>(parse_int("chunk", value, 1, kI32Max));
        } else if (key == "pool") {
            req.selection.pool = static_cast<int32_t>(parse_int("pool", value, 1, kI32Max));
        } else if (key == "segment") {
            req.segment = static_cast<int32_t>(parse_int("segment", value, 0, kI32Max));
        }
    }
    req.prompt = read_token_ref(cmd.positional[0]);
    if (req.prompt.empty()) {
        throw ProtocolError(ErrorCode::kEmptyPrompt, "compress needs at least one prompt token");
    }
    check_token_ids(req.prompt, session.engine.n_vocab);
    if (static_cast<int64_t>(req.prompt.size()) > session.engine.n_ctx_seq) {
        throw ProtocolError(ErrorCode::kContextOverflow, "n_prompt=" + std::to_string(req.prompt.size()) +
                                                             " exceeds " + session.engine.ctx_limit());
    }
    return req;
}

// Centred sliding-window maximum (window [j - pool/2, j + (pool-1)/2]) in O(n) with a
// monotonic deque, so a 128K-token prompt with a wide pool costs nothing noticeable.
std::vector<float> max_pool(const std::vector<float> & scores, int32_t pool) {
    const auto n = static_cast<int64_t>(scores.size());
    const int64_t left = pool / 2;
    const int64_t right = (pool - 1) / 2;
    std::vector<float> pooled(scores.size());
    std::deque<int64_t> window;  // indices, scores decreasing front to back
    int64_t next = 0;            // next index to enter the window
    for (int64_t j = 0; j < n; ++j) {
        for (; next < n && next <= j + right; ++next) {
            while (!window.empty() && scores[static_cast<size_t>(window.back())] <= scores[static_cast<size_t>(next)]) {
                window.pop_back();
            }
            window.push_back(next);
        }
        while (window.front() < j - left) {
            window.pop_front();
        }
        pooled[static_cast<size_t>(j)] = scores[static_cast<size_t>(window.front())];
    }
    return pooled;
}

}  // namespace

std::vector<int32_t> select_kept_tokens(const std::vector<float> & scores, const ChunkSelection & selection) {
    const auto n = static_cast<int64_t>(scores.size());
    if (n == 0) {
        return {};
    }
    const int64_t chunk = selection.chunk;
    const int64_t n_chunks = (n + chunk - 1) / chunk;
    const std::vector<float> pooled = max_pool(scores, selection.pool);

    std::vector<double> chunk_score(static_cast<size_t>(n_chunks), 0.0);
    for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t begin = c * chunk;
        const int64_t end = std::min(n, begin + chunk);
        double sum = 0.0;
        for (int64_t j = begin; j < end; ++j) {
            sum += pooled[static_cast<size_t>(j)];
        }
        chunk_score[static_cast<size_t>(c)] = sum / static_cast<double>(end - begin);
    }

    int64_t n_keep = (n_chunks * selection.keep_x1000 + 999) / 1000;
    n_keep = std::clamp<int64_t>(n_keep, std::min<int64_t>(2, n_chunks), n_chunks);
    std::vector<bool> kept(static_cast<size_t>(n_chunks), false);
    kept.front() = true;
    kept.back() = true;
    std::vector<int64_t> order;
    for (int64_t c = 1; c + 1 < n_chunks; ++c) {
        order.push_back(c);
    }
    std::stable_sort(order.begin(), order.end(), [&chunk_score](int64_t a, int64_t b) {
        return chunk_score[static_cast<size_t>(a)] > chunk_score[static_cast<size_t>(b)];
    });
    const int64_t n_forced = n_chunks == 1 ? 1 : 2;
    for (int64_t i = 0; i < n_keep - n_forced && i < static_cast<int64_t>(order.size()); ++i) {
        kept[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
    }

    std::vector<int32_t> tokens;
    for (int64_t c = 0; c < n_chunks; ++c) {
        if (!kept[static_cast<size_t>(c)]) {
            continue;
        }
        for (int64_t j = c * chunk; j < std::min(n, (c + 1) * chunk); ++j) {
            tokens.push_back(static_cast<int32_t>(j));
        }
    }
    return tokens;
}

std::string handle_compress(Session & session, const CommandLine & cmd) {
    const auto started = std::chrono::steady_clock::now();
    const CompressRequest req = parse_request(session, cmd);
    const AttentionScores scores =
        score_prompt_attention(session.engine.model.get(), req.prompt, req.lookahead, req.segment,
                               session.opts.n_threads);
    const std::vector<int32_t> kept = select_kept_tokens(scores.per_token, req.selection);

    std::vector<int32_t> ids;
    ids.reserve(kept.size());
    for (const int32_t j : kept) {
        ids.push_back(req.prompt[static_cast<size_t>(j)]);
    }
    if (!session.stream.write(ids)) {
        throw ProtocolError(ErrorCode::kIoFailed, "the stream fd is closed");
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    log_line("compress: %zu -> %zu tokens in %.1f ms (%d layers scored, %d queries, %d segments, %s prefill)",
             req.prompt.size(), ids.size(), ms, scores.layers_used, scores.n_query, scores.n_segments,
             scores.flash_prefill ? "flash-attention" : "plain");
    return OkReply("compress")
        .add("n_in", static_cast<int64_t>(req.prompt.size()))
        .add("n_out", static_cast<int64_t>(ids.size()))
        .add_ms("ms", ms)
        .line();
}

}  // namespace lucerna
