#include "daemon/batch_scheduler.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "wire/errors.h"
#include "wire/wire.h"

namespace lucerna {
namespace {

// As generate.cpp: besides marks and the prompt's end, a checkpoint every this many
// chunks of a long prefill.
constexpr int64_t kCheckpointEveryChunks = 8;

double ms_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

struct BatchScheduler::Running {
    GenerateRequest req;
    uint64_t generate_seq = 0;
    const char * command = "generate";
    std::shared_ptr<const Snapshot> from;  // restore: the slot it starts from
    std::unique_ptr<TokenPicker> picker;
    std::unique_ptr<TokenEmitter> emitter;
    ReusedPrefix reused;
    int32_t pos = 0;             // next prompt position to prefill
    int32_t chunk_end = 0;       // end of the chunk in this step's batch
    bool decoding = false;       // the prompt is in; tokens are being picked
    bool ended = false;          // finished or failed this step
    bool snapped = false;
    llama_token pending = 0;     // the token this step decodes
    int32_t row = -1;            // its (or its chunk's last) batch index; -1: not in this step
    std::chrono::steady_clock::time_point t_admit;
    std::chrono::steady_clock::time_point t_decode;
    double prefill_ms = 0.0;

    int32_t lane() const { return req.seq; }
    int32_t n_prompt() const { return static_cast<int32_t>(req.prompt.size()); }
};

BatchScheduler::BatchScheduler(Session & session)
    : session_(session), batch_(std::max(1, session.engine.n_chunk) + std::max(1, session.opts.parallel)) {}

BatchScheduler::~BatchScheduler() = default;

bool BatchScheduler::lane_busy(int32_t lane) const {
    return std::any_of(running_.begin(), running_.end(), [lane](const auto & r) { return r->lane() == lane; });
}

void BatchScheduler::admit(GenerateRequest req, uint64_t generate_seq, const char * command,
                           std::shared_ptr<const Snapshot> from) {
    auto r = std::make_unique<Running>();
    r->req = std::move(req);
    r->generate_seq = generate_seq;
    r->command = command;
    r->from = std::move(from);
    r->t_admit = std::chrono::steady_clock::now();
    const int32_t lane = r->lane();
    Running * raw = r.get();
    r->emitter = std::make_unique<TokenEmitter>(session_, r->req, [this, raw] {
        return session_.cancel.cancelled(raw->generate_seq, raw->lane());
    });
    if (session_.spec.active()) {
        running_.push_back(std::move(r));  // runs whole in its step (run_speculative)
        return;
    }
    llama_context * ctx = session_.engine.context.get();
    LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
    const GenerateRequest & q = r->req;
    if (r->from) {
        if (q.snap_pos != 0 && q.snap_pos < static_cast<int32_t>(r->from->tokens.size())) {
            throw ProtocolError(ErrorCode::kBadArgs, "snap=" + std::to_string(q.snap_pos) + ":" +
                                                         std::to_string(q.snap_slot) +
                                                         " is inside the restored prefix (n_reused=" +
                                                         std::to_string(r->from->tokens.size()) + ")");
        }
        load_snapshot(ctx, *r->from, live, nullptr, lane);
        r->reused = {ReusedPrefix::Source::kSlot, static_cast<int32_t>(r->from->tokens.size()), -1};
    } else if (q.reuse) {
        const int32_t limit = q.snap_pos != 0 ? q.snap_pos - 1 : r->n_prompt();
        r->reused = reuse_prefix(ctx, live, session_.snapshots, q.prompt, limit, nullptr, lane);
    } else {
        clear_sequence(ctx, lane);
        live.clear();
    }
    r->pos = r->reused.n_tokens;
    r->picker = std::make_unique<TokenPicker>(q.sampling, session_.engine.vocab, q.grammar.get());
    if (q.snap_pos != 0 && q.snap_pos == r->pos) {
        session_.snapshots.put(q.snap_slot, capture_snapshot(ctx, live, session_.engine.n_vocab, nullptr, lane));
        r->snapped = true;
    }
    ++session_.stats.requests;
    session_.stats.tokens_reused += static_cast<uint64_t>(r->pos);
    if (r->pos == r->n_prompt()) {
        finish_prefill(*r);
    }
    running_.push_back(std::move(r));
}

void BatchScheduler::finish_prefill(Running & r) {
    r.picker->accept_prompt(r.req.prompt);
    r.decoding = true;
    r.prefill_ms = ms_since(r.t_admit);
    r.t_decode = std::chrono::steady_clock::now();
    session_.stats.last_prefill_tok_s =
        r.prefill_ms > 0.0 ? (r.n_prompt() - r.reused.n_tokens) * 1000.0 / r.prefill_ms : 0.0;
}

std::string BatchScheduler::finish(Running & r) {
    const Finish finish = r.emitter->finish();
    if (finish == Finish::kCancelled) {
        ++session_.stats.cancelled;
    }
    const double decode_ms = r.decoding ? ms_since(r.t_decode) : 0.0;
    if (decode_ms > 0.0) {
        session_.stats.last_decode_tok_s = r.emitter->n_out() * 1000.0 / decode_ms;
    }
    if (!r.decoding) {
        r.prefill_ms = ms_since(r.t_admit);  // cancelled before its prompt was in
    }
    GenerationSummary summary;
    summary.n_prompt = r.n_prompt();
    summary.restored = r.from != nullptr;
    summary.n_reused = r.reused.n_tokens;
    summary.cache_slot = r.reused.source == ReusedPrefix::Source::kSlot && !r.from ? r.reused.slot : -1;
    summary.n_gen = r.emitter->n_out();
    summary.finish = finish_name(finish);
    summary.prefill_ms = r.prefill_ms;
    summary.decode_ms = decode_ms;
    summary.snapped = r.snapped;
    const std::string line = summary_line(r.command, summary, r.req);
    // Keep the lane's last logits: the next step's decode overwrites the engine's.
    session_.lanes[static_cast<size_t>(r.lane())].keep_logits(session_.engine.context.get(), session_.engine.n_vocab);
    r.ended = true;
    if (!r.emitter->end_framed()) {
        return "done " + std::to_string(r.lane()) + " " + err_line(ErrorCode::kIoFailed, "the stream fd is closed");
    }
    return "done " + std::to_string(r.lane()) + " " + line;
}

std::string BatchScheduler::fail(Running & r, ErrorCode code, const std::string & detail) {
    // The sequence is in a state we no longer know: start it over.
    if (session_.engine.context) {
        clear_sequence(session_.engine.context.get(), r.lane());
    }
    session_.lanes[static_cast<size_t>(r.lane())].clear();
    r.ended = true;
    r.emitter->end_framed();
    return "done " + std::to_string(r.lane()) + " " + err_line(code, detail);
}

std::string BatchScheduler::run_speculative(Running & r) {
    std::string line;
    try {
        line = run_generation(session_, r.req, r.generate_seq, r.command, r.from.get());
    } catch (const ProtocolError & error) {
        r.ended = true;
        r.emitter->end_framed();
        return "done " + std::to_string(r.lane()) + " " + err_line(error.code(), error.what());
    } catch (const std::exception & error) {
        r.ended = true;
        r.emitter->end_framed();
        return "done " + std::to_string(r.lane()) + " " +
               err_line(ErrorCode::kDecodeFailed, std::string("engine error: ") + error.what());
    }
    r.ended = true;
    if (!r.emitter->end_framed()) {
        return "done " + std::to_string(r.lane()) + " " + err_line(ErrorCode::kIoFailed, "the stream fd is closed");
    }
    return "done " + std::to_string(r.lane()) + " " + line;
}

std::vector<std::string> BatchScheduler::step() {
    std::vector<std::string> done;
    auto reap = [&] {
        for (const auto & r : running_) {
            if (r->ended) {
                session_.cancel.finished(r->generate_seq, r->lane());
            }
        }
        running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto & r) { return r->ended; }),
                       running_.end());
    };
    if (running_.empty()) {
        return done;
    }
    if (session_.spec.active()) {
        done.push_back(run_speculative(*running_.front()));
        reap();
        return done;
    }
    LoadedModel & engine = session_.engine;
    llama_context * ctx = engine.context.get();
    const auto n_chunk = static_cast<int64_t>(std::max(1, engine.n_chunk));
    batch_.clear();

    // Every decoding sequence picks its next token from its own logits.
    for (const auto & r : running_) {
        r->row = -1;
        if (!r->decoding) {
            continue;
        }
        LiveSequence & live = session_.lanes[static_cast<size_t>(r->lane())];
        try {
            const float * logits = live.last_logits(ctx);
            const std::optional<llama_token> picked = r->picker->pick(logits);
            if (!r->emitter->emit(picked, logits)) {
                done.push_back(finish(*r));
                continue;
            }
            r->pending = *picked;
            r->row = batch_.size();
            batch_.add(r->pending, live.size(), /*want_logits =*/true, r->lane());
        } catch (const ProtocolError & error) {
            done.push_back(fail(*r, error.code(), error.what()));
        }
    }
    // Then prompt chunks, oldest first, within one chunk's worth of tokens.
    int64_t budget = n_chunk;
    for (const auto & r : running_) {
        if (r->decoding || r->ended) {
            continue;
        }
        if (r->emitter->cancelled()) {
            r->emitter->cancel();
            done.push_back(finish(*r));
            continue;
        }
        const int32_t end = prefill_chunk_end(r->req, r->pos, n_chunk);
        if (end - r->pos > budget) {
            break;  // first come, first served: later prompts wait for the next step
        }
        for (int32_t i = r->pos; i < end; ++i) {
            // As in a solo run, every chunk outputs its last position (generate.cpp).
            batch_.add(r->req.prompt[static_cast<size_t>(i)], i, /*want_logits =*/i == end - 1, r->lane());
        }
        r->chunk_end = end;
        r->row = batch_.size() - 1;
        budget -= end - r->pos;
    }
    if (batch_.size() > 0) {
        // Lanes outside this step keep their logits (the decode overwrites the engine's).
        for (size_t lane = 0; lane < session_.lanes.size(); ++lane) {
            const bool stepping = std::any_of(running_.begin(), running_.end(), [lane](const auto & r) {
                return r->row >= 0 && r->lane() == static_cast<int32_t>(lane);
            });
            if (!stepping) {
                session_.lanes[lane].keep_logits(ctx, engine.n_vocab);
            }
        }
        const int32_t rc = llama_decode(ctx, batch_.get());
        for (const auto & r : running_) {
            if (r->row < 0 || r->ended) {
                continue;
            }
            if (rc != 0) {
                done.push_back(fail(*r, ErrorCode::kDecodeFailed,
                                    "llama_decode failed during a batched step (code " + std::to_string(rc) + ")"));
                continue;
            }
            const int32_t lane = r->lane();
            LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
            if (r->decoding) {
                live.decoded(&r->pending, 1, r->row);
                continue;
            }
            try {
                const int32_t pos = r->pos;
                const int32_t end = r->chunk_end;
                live.decoded(r->req.prompt.data() + pos, static_cast<size_t>(end - pos), r->row);
                session_.stats.tokens_prompt += static_cast<uint64_t>(end - pos);
                r->pos = end;
                if (end % n_chunk == 0 || is_mark(r->req, end)) {
                    canonicalize_window_cells(ctx, lane);
                }
                if (r->req.reuse &&
                    (is_mark(r->req, end) || end == r->n_prompt() || end % (kCheckpointEveryChunks * n_chunk) == 0)) {
                    capture_checkpoint(ctx, live, engine.n_vocab, lane);
                }
                if (end == r->req.snap_pos) {
                    session_.snapshots.put(r->req.snap_slot, capture_snapshot(ctx, live, engine.n_vocab, nullptr, lane));
                    r->snapped = true;
                }
                if (end == r->n_prompt()) {
                    finish_prefill(*r);
                }
            } catch (const ProtocolError & error) {
                done.push_back(fail(*r, error.code(), error.what()));
            }
        }
    }
    reap();
    return done;
}

}  // namespace lucerna
