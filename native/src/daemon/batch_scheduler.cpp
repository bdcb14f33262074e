#include "daemon/batch_scheduler.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include "wire/errors.h"
#include "wire/wire.h"

namespace lucerna {
namespace {

// As generate.cpp: besides marks and the prompt's end, a checkpoint every this many
// chunks of a long prefill.
constexpr int64_t kCheckpointEveryChunks = 8;
// A preempted sequence resumes when the pool has room for its state, its next step and
// this many steps of every decoding sequence: without the headroom it would often be
// preempted again by the very next step, paying a snapshot round trip each time.
constexpr int64_t kResumeHeadroomSteps = 16;

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
    bool has_pending = false;    // `pending` was picked and written, not yet decoded
    bool in_step = false;        // it has tokens in this step's batch
    // Preempted (the pool ran short): its state is in host memory (`parked`; null when it
    // prefills again from its first token) and its lane empty until it resumes.
    bool preempted = false;
    std::unique_ptr<Snapshot> parked;
    int32_t row = -1;            // its (or its chunk's last) batch index
    int32_t first_row = -1;      // its chunk's first batch index (prompt_logprobs, the draft)
    int32_t kept = 0;            // rows of its verify block committed this step
    // prompt_logprobs: the prompt positions whose following token's record is written
    // (a generation preempted before its prompt had logits prefills again from 0, and a
    // record once written is never written twice).
    int32_t scored = 0;
    // Prompt lookup (PROTOCOL.md 9.5): the proposers this generation runs, its counters,
    // its back-off, and this step's proposals (verified in rows row + 1 .. row + k).
    SpecChoice choice;
    SpecCounters counters;
    LookupBudget lookup_budget;
    std::vector<llama_token> proposals;
    bool looked_up = false;
    int32_t room = 0;            // proposals this step may verify
    bool wants_draft = false;    // the batched draft runs for it this step
    // With the oracle too, the draft's output goes here and the oracle's is verified
    // (PROTOCOL.md 5.9: the oracle in place of the draft's output, its cost kept).
    std::vector<llama_token> replaced;
    std::chrono::steady_clock::time_point t_admit;
    std::chrono::steady_clock::time_point t_decode;
    double prefill_ms = 0.0;

    int32_t lane() const { return req.seq; }
    int32_t n_prompt() const { return static_cast<int32_t>(req.prompt.size()); }
};

BatchScheduler::BatchScheduler(Session & session)
    // A prefill chunk beside a row per decoding sequence, or its verify block (9.5).
    : session_(session),
      batch_(std::max(1, session.engine.n_chunk) +
             std::max(1, session.opts.parallel) * (session.opts.speculative() ? session.opts.draft_block_size : 1)) {}

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
    if (runs_whole()) {
        running_.push_back(std::move(r));  // runs whole in its step (run_speculative)
        return;
    }
    if (session_.spec.active()) {
        r->choice = session_.spec.choose(r->req.lookup, /*propose =*/r->req.logprobs < 0);
        if (r->choice.oracle) {
            session_.spec.oracle(lane)->begin(r->req.prompt);
        }
    }
    llama_context * ctx = session_.engine.context.get();
    LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
    DflashDraft * draft = session_.spec.attached_draft();
    const GenerateRequest & q = r->req;
    if (r->from) {
        if (q.snap_pos != 0 && q.snap_pos < static_cast<int32_t>(r->from->tokens.size())) {
            throw ProtocolError(ErrorCode::kBadArgs, "snap=" + std::to_string(q.snap_pos) + ":" +
                                                         std::to_string(q.snap_slot) +
                                                         " is inside the restored prefix (n_reused=" +
                                                         std::to_string(r->from->tokens.size()) + ")");
        }
        load_snapshot(ctx, *r->from, live, draft, lane);
        r->reused = {ReusedPrefix::Source::kSlot, static_cast<int32_t>(r->from->tokens.size()), -1};
    } else if (q.reuse && !q.prompt_logprobs) {
        // (prompt_logprobs needs every prompt position's logits: it prefills them all.)
        const int32_t limit = q.snap_pos != 0 ? q.snap_pos - 1 : r->n_prompt();
        r->reused = reuse_prefix(ctx, live, session_.snapshots, q.prompt, limit, draft, lane);
        share_from_other_lane(*r, limit);
    } else {
        clear_lane(lane);
    }
    r->pos = r->reused.n_tokens;
    r->picker = std::make_unique<TokenPicker>(q.sampling, session_.engine.vocab, q.grammar.get());
    if (q.snap_pos != 0 && q.snap_pos == r->pos) {
        session_.snapshots.put(q.snap_slot, capture_snapshot(ctx, live, session_.engine.n_vocab, draft, lane));
        r->snapped = true;
    }
    ++session_.stats.requests;
    session_.stats.tokens_reused += static_cast<uint64_t>(r->pos);
    if (r->pos == r->n_prompt()) {
        finish_prefill(*r);
    }
    running_.push_back(std::move(r));
}

void BatchScheduler::share_from_other_lane(Running & r, int32_t limit) {
    // With one KV stream per sequence (--kv-unified=off) cells cannot be shared: the
    // engine copies between streams only whole (llama_memory_seq_cp asserts "only
    // supported for full KV buffers" and aborts the daemon on a prefix).
    if (session_.engine.kv_split) {
        return;
    }
    llama_context * ctx = session_.engine.context.get();
    const llama_model * model = session_.engine.model.get();
    const int32_t lane = r.lane();
    ReusedPrefix best;
    int32_t from = -1;
    for (size_t other = 0; other < session_.lanes.size(); ++other) {
        if (static_cast<int32_t>(other) == lane) {
            continue;
        }
        const ReusedPrefix offer = prefix_offer(model, session_.lanes[other], r.req.prompt, limit);
        if (offer.n_tokens > best.n_tokens) {
            best = offer;
            from = static_cast<int32_t>(other);
        }
    }
    if (best.n_tokens <= r.reused.n_tokens) {
        return;  // its own sequence holds as much (or the others nothing)
    }
    share_prefix(ctx, session_.lanes[static_cast<size_t>(lane)], lane, session_.lanes[static_cast<size_t>(from)],
                 from, best);
    if (DflashDraft * draft = session_.spec.attached_draft()) {
        draft->share(from, lane, best.n_tokens);
    }
    r.reused = best;
    ++session_.stats.shared_prefixes;
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
    if (session_.spec.active()) {
        summary.spec = &r.counters;
        summary.choice = r.choice;
        session_.spec.totals.add(r.counters);
    }
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
        clear_lane(r.lane());
    }
    session_.lanes[static_cast<size_t>(r.lane())].clear();
    r.ended = true;
    r.emitter->end_framed();
    return "done " + std::to_string(r.lane()) + " " + err_line(code, detail);
}

bool BatchScheduler::runs_whole() {
    return session_.opts.parallel <= 1 && (session_.spec.oracle() != nullptr || session_.spec.attached_draft() != nullptr);
}

void BatchScheduler::clear_lane(int32_t lane) {
    clear_sequence(session_.engine.context.get(), lane);
    session_.lanes[static_cast<size_t>(lane)].clear();
    if (DflashDraft * draft = session_.spec.attached_draft()) {
        draft->clear(lane);
    }
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

void BatchScheduler::propose(Running & r) {
    r.proposals.clear();
    r.looked_up = false;
    r.wants_draft = false;
    // A step commits at most k + 1 tokens; never propose past what may be written.
    r.room = std::max(0, std::min(session_.spec.block_size() - 1, r.emitter->remaining() - 1));
    if (r.room == 0 || !r.choice.any()) {
        return;
    }
    std::vector<int32_t> context;
    if (r.choice.lookup || r.choice.oracle) {
        context = session_.lanes[static_cast<size_t>(r.lane())].tokens();
        context.push_back(r.pending);
    }
    if (r.choice.lookup && r.lookup_budget.propose_now()) {
        propose_from_context(context, r.room, session_.opts.lookup_min, r.proposals);
        r.looked_up = !r.proposals.empty();
    }
    // Lookup first; the draft where it found nothing, for every such sequence in one
    // draft batch (draft_proposals).
    r.wants_draft = !r.looked_up && r.choice.draft;
    if (r.choice.oracle) {
        // The benchmark's proposer replaces the others (as in the solo loop).
        session_.spec.oracle(r.lane())->propose(context, r.room, r.proposals);
        r.proposals.resize(std::min(r.proposals.size(), static_cast<size_t>(r.room)));
        r.looked_up = false;
    }
}

void BatchScheduler::draft_proposals() {
    DflashDraft * draft = session_.spec.attached_draft();
    if (draft == nullptr) {
        return;
    }
    std::vector<DflashDraft::Block> blocks;
    std::vector<Running *> drafted;
    for (const auto & r : running_) {
        if (r->in_step && r->wants_draft && !r->ended) {
            // Full blocks for every sequence (the room cuts them after): one shape of
            // draft batch whichever sequences end soon.
            blocks.push_back({r->lane(), r->pending, session_.lanes[static_cast<size_t>(r->lane())].size(),
                              session_.spec.block_size() - 1, r->choice.oracle ? &r->replaced : &r->proposals});
            drafted.push_back(r.get());
        }
    }
    if (blocks.empty()) {
        return;
    }
    const auto t_draft = std::chrono::steady_clock::now();
    draft->propose(blocks);
    // One draft batch served them all: each is charged its share of its time.
    const double share = ms_since(t_draft) / static_cast<double>(drafted.size());
    for (Running * r : drafted) {
        if (!r->choice.oracle) {
            r->proposals.resize(std::min(r->proposals.size(), static_cast<size_t>(r->room)));
        }
        r->counters.draft_ms += share;
    }
}

void BatchScheduler::ingest_committed(const std::vector<DflashDraft::CommittedRows> & rows,
                                      const std::vector<Running *> & owners, std::vector<std::string> & done) {
    DflashDraft * draft = session_.spec.attached_draft();
    if (draft == nullptr || rows.empty()) {
        return;
    }
    const auto t_ingest = std::chrono::steady_clock::now();
    try {
        draft->ingest(session_.engine.context.get(), rows);
    } catch (const ProtocolError & error) {
        // The draft no longer mirrors these sequences: each fails, and starts over.
        for (Running * r : owners) {
            if (!r->ended) {
                done.push_back(fail(*r, error.code(), error.what()));
            }
        }
        return;
    }
    const double share = ms_since(t_ingest) / static_cast<double>(owners.size());
    for (Running * r : owners) {
        r->counters.draft_ms += share;
    }
}

bool BatchScheduler::verify(Running & r) {
    llama_context * ctx = session_.engine.context.get();
    const int32_t lane = r.lane();
    LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
    const int32_t n = live.size();  // where `pending` went
    const auto k = static_cast<int32_t>(r.proposals.size());
    // Greedy without a grammar reads each row's argmax from the graph, as the solo
    // verify does (decode_speculative.cpp): the same rule on the same logits.
    // Row i holds the logits after the token at position n + i; its pick is committed,
    // and row i + 1 is only meaningful while that pick is the proposal there.
    int32_t i = 0;
    uint64_t accepted = 0;
    bool more = true;
    std::optional<llama_token> picked;
    while (true) {
        const int32_t row = r.row + i;
        const EmittedPick pick = pick_and_emit(*r.picker, *r.emitter, ctx, row, session_.engine.output_argmax,
                                               [&] { return llama_get_logits_ith(ctx, row); });
        picked = pick.token;
        more = pick.more;
        if (more && i < k && *picked == r.proposals[static_cast<size_t>(i)]) {
            ++accepted;
            ++i;
            continue;
        }
        break;
    }
    // Positions n .. n + i are committed; the rest of this sequence's block goes: its KV
    // cells, and on a hybrid model its recurrent state returns to the engine's copy for
    // position n + i (n_rs_seq), which the engine keeps per sequence.
    const int32_t kept = i + 1;
    if (kept < k + 1 && !llama_memory_seq_rm(llama_get_memory(ctx), lane, n + kept, -1)) {
        throw ProtocolError(ErrorCode::kDecodeFailed, "the engine could not roll sequence " + std::to_string(lane) +
                                                          " back to position " + std::to_string(n + kept));
    }
    std::vector<int32_t> kept_tokens;
    kept_tokens.reserve(static_cast<size_t>(kept));
    kept_tokens.push_back(r.pending);
    kept_tokens.insert(kept_tokens.end(), r.proposals.begin(), r.proposals.begin() + (kept - 1));
    live.decoded(kept_tokens.data(), kept_tokens.size(), r.row + i);
    r.kept = kept;
    if (r.looked_up) {
        r.lookup_budget.update(k, static_cast<int32_t>(accepted));
    }
    ++r.counters.steps;
    r.counters.proposed += static_cast<uint64_t>(k);
    r.counters.accepted += accepted;
    r.proposals.clear();
    if (!more) {
        r.has_pending = false;
        return false;
    }
    r.pending = *picked;  // picked and written: the next step decodes it
    r.has_pending = true;
    return true;
}

bool BatchScheduler::before_preempted(const Running & r) const {
    for (const auto & other : running_) {
        if (other.get() == &r) {
            return true;
        }
        if (other->preempted) {
            return false;
        }
    }
    return true;
}

int64_t BatchScheduler::cells_held() const {
    int64_t held = 0;
    for (const LiveSequence & lane : session_.lanes) {
        held += lane.size();
    }
    return held;
}

void BatchScheduler::preempt(Running & r) {
    llama_context * ctx = session_.engine.context.get();
    const int32_t lane = r.lane();
    LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
    if (!live.empty() && live.has_logits()) {
        r.parked = capture_snapshot(ctx, live, session_.engine.n_vocab, session_.spec.attached_draft(), lane);
    } else {
        // Nothing decoded yet, or cut back by prefix reuse and not decoded since (no
        // logits to snapshot): it prefills again from its first token, in the chunks a
        // solo run cuts.
        r.reused = {};
        r.pos = 0;
    }
    clear_lane(lane);
    r.preempted = true;
    r.in_step = false;
    ++session_.stats.preempted;
}

bool BatchScheduler::evict_idle_lane() {
    for (size_t lane = 0; lane < session_.lanes.size(); ++lane) {
        if (!lane_busy(static_cast<int32_t>(lane)) && !session_.lanes[lane].empty()) {
            clear_lane(static_cast<int32_t>(lane));
            return true;
        }
    }
    return false;
}

bool BatchScheduler::make_room(std::vector<std::string> & done) {
    // First what no generation needs: the state an idle sequence keeps for prefix reuse.
    if (evict_idle_lane()) {
        return true;
    }
    // Then the youngest generation that holds cells or wants some, never the oldest: it
    // always advances, so every preempted one gets its turn when the others end.
    std::vector<Running *> holders;
    for (const auto & r : running_) {
        if (!r->preempted && !r->ended &&
            (r->in_step || !session_.lanes[static_cast<size_t>(r->lane())].empty())) {
            holders.push_back(r.get());
        }
    }
    if (holders.size() < 2) {
        return false;
    }
    Running & victim = *holders.back();
    try {
        preempt(victim);
    } catch (const ProtocolError & error) {
        // Its state could not be copied out (host memory): it fails, which frees its cells.
        done.push_back(fail(victim, error.code(), error.what()));
    }
    return true;
}

void BatchScheduler::resume_preempted() {
    llama_context * ctx = session_.engine.context.get();
    const int64_t n_chunk = std::max(1, session_.engine.n_chunk);
    int64_t decoding = 0;
    for (const auto & r : running_) {
        decoding += !r->preempted && !r->ended && r->decoding ? 1 : 0;
    }
    for (const auto & r : running_) {
        if (!r->preempted || r->ended) {
            continue;
        }
        // Room for its state, its next step, and a few steps of the running ones, so that
        // it is not preempted again at once.
        const int64_t state = r->parked ? static_cast<int64_t>(r->parked->tokens.size()) : 0;
        const int64_t next = r->decoding ? 1 : std::min<int64_t>(n_chunk, r->n_prompt() - r->pos);
        const int64_t need = state + next + decoding * kResumeHeadroomSteps;
        while (session_.engine.n_ctx - cells_held() < need) {
            if (!evict_idle_lane()) {
                return;  // first come, first served: younger ones wait behind it
            }
        }
        LiveSequence & live = session_.lanes[static_cast<size_t>(r->lane())];
        if (r->parked) {
            try {
                load_snapshot(ctx, *r->parked, live, session_.spec.attached_draft(), r->lane());
            } catch (const ProtocolError &) {
                return;  // no room after all: it stays parked, the lane empty
            }
            r->parked.reset();
        } else {
            clear_lane(r->lane());
        }
        r->preempted = false;
        decoding += r->decoding ? 1 : 0;
    }
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
    if (runs_whole()) {
        done.push_back(run_speculative(*running_.front()));
        reap();
        return done;
    }
    LoadedModel & engine = session_.engine;
    llama_context * ctx = engine.context.get();
    const auto n_chunk = static_cast<int64_t>(std::max(1, engine.n_chunk));
    resume_preempted();

    // Every decoding sequence picks its next token from its own logits, unless it picked
    // one before it was preempted and has not decoded it yet.
    for (const auto & r : running_) {
        r->row = -1;
        r->in_step = false;
        if (r->preempted) {
            if (r->emitter->cancelled()) {
                r->emitter->cancel();
                r->parked.reset();
                done.push_back(finish(*r));
            }
            continue;
        }
        if (!r->decoding) {
            continue;
        }
        if (r->req.n_gen == 0) {
            done.push_back(finish(*r));  // prompt_logprobs with n_gen=0: nothing to generate
            continue;
        }
        if (!r->has_pending) {
            LiveSequence & live = session_.lanes[static_cast<size_t>(r->lane())];
            try {
                const EmittedPick picked =
                    pick_and_emit(*r->picker, *r->emitter, ctx, live.context_row(), session_.engine.output_argmax,
                                  [&] { return live.last_logits(ctx); });
                if (!picked.more) {
                    done.push_back(finish(*r));
                    continue;
                }
                r->pending = *picked.token;
                r->has_pending = true;
            } catch (const ProtocolError & error) {
                done.push_back(fail(*r, error.code(), error.what()));
                continue;
            }
        }
        r->in_step = true;
        propose(*r);
    }
    // Then prompt chunks, oldest first, within one chunk's worth of tokens; none for a
    // sequence that came after one still preempted.
    int64_t budget = n_chunk;
    for (const auto & r : running_) {
        if (r->decoding || r->ended || r->preempted) {
            continue;
        }
        if (r->emitter->cancelled()) {
            r->emitter->cancel();
            done.push_back(finish(*r));
            continue;
        }
        if (!before_preempted(*r)) {
            break;
        }
        const int32_t end = prefill_chunk_end(r->req, r->pos, n_chunk);
        if (end - r->pos > budget) {
            break;  // first come, first served: later prompts wait for the next step
        }
        r->chunk_end = end;
        r->in_step = true;
        budget -= end - r->pos;
    }
    try {
        draft_proposals();
    } catch (const ProtocolError & error) {
        for (const auto & r : running_) {
            if (r->in_step && r->wants_draft && !r->ended) {
                done.push_back(fail(*r, error.code(), error.what()));
            }
        }
    }
    // Lanes outside this step keep their logits (the decode overwrites the engine's);
    // a failed decode (no room in the pool) leaves the engine's outputs as they were.
    for (size_t lane = 0; lane < session_.lanes.size(); ++lane) {
        const bool stepping = std::any_of(running_.begin(), running_.end(), [lane](const auto & r) {
            return r->in_step && r->lane() == static_cast<int32_t>(lane);
        });
        if (!stepping) {
            session_.lanes[lane].keep_logits(ctx, engine.n_vocab);
        }
    }
    int32_t rc = 0;
    while (true) {
        batch_.clear();
        for (const auto & r : running_) {
            if (!r->in_step || r->ended) {
                continue;
            }
            if (r->decoding) {
                // Its pending token, then its proposals (a verify block, 5.9), every row
                // with logits.
                const int32_t n = session_.lanes[static_cast<size_t>(r->lane())].size();
                r->row = batch_.size();
                batch_.add(r->pending, n, /*want_logits =*/true, r->lane());
                for (size_t i = 0; i < r->proposals.size(); ++i) {
                    batch_.add(r->proposals[i], n + 1 + static_cast<int32_t>(i), /*want_logits =*/true, r->lane());
                }
                continue;
            }
            r->first_row = batch_.size();
            for (int32_t i = r->pos; i < r->chunk_end; ++i) {
                // As in a solo run, every chunk outputs its last position (generate.cpp),
                // and with prompt_logprobs every position.
                batch_.add(r->req.prompt[static_cast<size_t>(i)], i,
                           /*want_logits =*/r->req.prompt_logprobs || i == r->chunk_end - 1, r->lane());
            }
            r->row = batch_.size() - 1;
        }
        if (batch_.size() == 0) {
            break;
        }
        rc = llama_decode(ctx, batch_.get());
        if (rc != 1) {
            break;
        }
        // The pool has no room for this step: free some (make_room) and build it again.
        if (!make_room(done)) {
            break;
        }
    }
    // After the decode: first the decoding sequences pick and commit, then the draft
    // takes the features of every row that stays committed (one batch for all), then
    // the prefill chunks are booked: a snapshot taken there carries the draft's state
    // up to the chunk's end.
    std::vector<DflashDraft::CommittedRows> committed;
    std::vector<Running *> owners;
    for (const auto & r : running_) {
        if (!r->in_step || r->ended || batch_.size() == 0) {
            continue;
        }
        if (rc != 0) {
            done.push_back(fail(*r, ErrorCode::kDecodeFailed,
                                rc == 1 ? "the KV pool has no room even for the oldest sequence alone"
                                        : "llama_decode failed during a batched step (code " + std::to_string(rc) + ")"));
            continue;
        }
        const int32_t lane = r->lane();
        LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
        if (!r->decoding) {
            committed.push_back({r->first_row, r->chunk_end - r->pos, r->pos, lane});
            owners.push_back(r.get());
            continue;
        }
        const int32_t n = live.size();  // where `pending` went
        if (r->proposals.empty()) {
            live.decoded(&r->pending, 1, r->row);
            r->has_pending = false;
            committed.push_back({r->row, 1, n, lane});
            owners.push_back(r.get());
            continue;
        }
        try {
            const bool more = verify(*r);
            committed.push_back({r->row, r->kept, n, lane});
            owners.push_back(r.get());
            if (!more) {
                done.push_back(finish(*r));
            }
        } catch (const ProtocolError & error) {
            done.push_back(fail(*r, error.code(), error.what()));
        }
    }
    ingest_committed(committed, owners, done);
    for (const auto & r : running_) {
        if (!r->in_step || r->ended || batch_.size() == 0 || r->decoding) {
            continue;
        }
        const int32_t lane = r->lane();
        LiveSequence & live = session_.lanes[static_cast<size_t>(lane)];
        try {
            const int32_t pos = r->pos;
            const int32_t end = r->chunk_end;
            if (r->req.prompt_logprobs) {
                // Row i - pos predicts the token at i + 1; the last prompt position's row
                // predicts the first generated token, which the decode picks.
                for (int32_t i = std::max(pos, r->scored); i < end && i + 1 < r->n_prompt(); ++i) {
                    r->emitter->emit_prompt(r->req.prompt[static_cast<size_t>(i) + 1],
                                            llama_get_logits_ith(ctx, r->first_row + (i - pos)));
                }
                r->scored = std::max(r->scored, end);
            }
            live.decoded(r->req.prompt.data() + pos, static_cast<size_t>(end - pos), r->row);
            session_.stats.tokens_prompt += static_cast<uint64_t>(end - pos);
            r->pos = end;
            if (end % n_chunk == 0 || is_mark(r->req, end)) {
                canonicalize_window_cells(ctx, lane);
            }
            if (r->req.reuse &&
                (is_mark(r->req, end) || end == r->n_prompt() || end % (kCheckpointEveryChunks * n_chunk) == 0)) {
                capture_checkpoint(ctx, live, engine.n_vocab, lane);
                session_.stats.checkpoints_dropped +=
                    bound_checkpoints(session_.lanes, session_.opts.checkpoint_bytes, live);
            }
            if (end == r->req.snap_pos) {
                session_.snapshots.put(r->req.snap_slot, capture_snapshot(ctx, live, engine.n_vocab,
                                                                          session_.spec.attached_draft(), lane));
                r->snapped = true;
            }
            if (end == r->n_prompt()) {
                finish_prefill(*r);
            }
        } catch (const ProtocolError & error) {
            done.push_back(fail(*r, error.code(), error.what()));
        }
    }
    reap();
    return done;
}

}  // namespace lucerna
