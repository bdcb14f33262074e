// generate <ids> <n_gen> [temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] [freq_pen=F]
//          [pres_pen=P] [rep_window=N] [seed=S] [stop=ID,ID,...] [ignore_eos=0|1]
//          [grammar=<text>] [json_schema=<text>] [snap=L:S] [reuse=0|1] [marks=L,...]
//          [logprobs=K] [prompt_logprobs=0|1] [lookup=0|1]
//
// Starts from the longest prefix of the prompt whose state the daemon holds (or, with
// reuse=0, from an empty sequence), prefills the rest in chunks, then decodes one token
// at a time, writing each sampled token to the stream as soon as it exists. `restore`
// (snapshots.cpp) runs the same path from a named snapshot.
//
// Chunks end at absolute positions that are multiples of the chunk size (--chunk), at an
// inline snapshot's position, at every mark and at the end of the prompt. On CPU the engine's logits
// depend on how a prefill is split into batches (measured on gemma3 and on the qwen35
// hybrid: different last-position logits for one batch versus two), so this alignment
// is what lets a restore from an aligned snapshot reproduce an uninterrupted run.
#include "commands/generate.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "commands/decode_speculative.h"
#include "commands/emit.h"
#include "commands/handlers.h"
#include "daemon/batch_scheduler.h"
#include "engine/grammar.h"
#include "engine/prefix_reuse.h"
#include "wire/constants.h"
#include "wire/token_refs.h"

namespace lucerna {
namespace {

const char * const kUsage =
    "generate <ids:...|path> <n_gen> [temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] [freq_pen=F] "
    "[pres_pen=P] [rep_window=N] [seed=S] [stop=ID,...] [ignore_eos=0|1] [grammar=<text>] [json_schema=<text>] [snap=L:S] "
    "[reuse=0|1] [marks=L,...] [logprobs=K] [prompt_logprobs=0|1] [lookup=0|1] [seq=S]";

// Besides the marks and the prompt's end, a checkpoint every this many chunks of a
// long prefill, so that a prompt diverging inside a long stretch nobody marked still
// reuses most of it. Sparse: each is a copy of the whole recurrent state (150 MB for
// the 27B target), taken while the first token waits.
constexpr int64_t kCheckpointEveryChunks = 8;

float parse_unit(const char * key, const std::string & value) {
    const double v = parse_float(key, value);
    if (v > 1.0 || v < 0.0) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string(key) + "=" + value + " must be in [0, 1]");
    }
    return static_cast<float>(v);
}

// snap=L:S. L is range-checked against the prompt once it is read; a bad S is bad_slot.
void parse_snap(const Session & session, const std::string & value, GenerateRequest & req) {
    const size_t colon = value.find(':');
    if (colon == std::string::npos) {
        throw ProtocolError(ErrorCode::kBadArgs, "snap=" + value + " must be L:S (prompt position, slot)");
    }
    req.snap_pos = static_cast<int32_t>(
        parse_int("snap position", value.substr(0, colon), 1, std::numeric_limits<int32_t>::max()));
    req.snap_slot = session.snapshots.parse_slot(value.substr(colon + 1));
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

void decode_or_throw(llama_context * ctx, const Batch & batch, const char * what) {
    const int32_t rc = llama_decode(ctx, batch.get());
    if (rc != 0) {
        throw ProtocolError(ErrorCode::kDecodeFailed, std::string("llama_decode failed during ") + what +
                                                          " (code " + std::to_string(rc) + ")");
    }
}

double tokens_per_second(uint64_t n, double ms) { return ms > 0.0 ? static_cast<double>(n) * 1000.0 / ms : 0.0; }

}  // namespace

int32_t parse_seq(const Session & session, const std::string & value) {
    const int32_t n = session.engine.n_parallel;
    try {
        return static_cast<int32_t>(parse_int("seq", value, 0, n - 1));
    } catch (const ProtocolError &) {
        throw ProtocolError(ErrorCode::kBadSeq, "seq=" + value + " is not a sequence of this daemon (0.." +
                                                    std::to_string(n - 1) + ", --parallel=" + std::to_string(n) + ")");
    }
}

int32_t prefill_chunk_end(const GenerateRequest & req, int32_t pos, int64_t n_chunk) {
    const auto n_prompt = static_cast<int32_t>(req.prompt.size());
    auto end = static_cast<int32_t>(std::min<int64_t>(n_prompt, (pos / n_chunk + 1) * n_chunk));
    if (req.snap_pos > pos && req.snap_pos < end) {
        end = req.snap_pos;
    }
    const auto next_mark = std::upper_bound(req.marks.begin(), req.marks.end(), pos);
    if (next_mark != req.marks.end() && *next_mark < end) {
        end = *next_mark;
    }
    return end;
}

bool is_mark(const GenerateRequest & req, int32_t pos) {
    return std::binary_search(req.marks.begin(), req.marks.end(), pos);
}

std::string summary_line(const char * command, const GenerationSummary & summary, const GenerateRequest & req) {
    OkReply reply(command);
    reply.add("n_prompt", summary.n_prompt);
    if (summary.restored) {
        reply.add("n_reused", summary.n_reused);
    } else {
        reply.add("n_cached", summary.n_reused);  // PROTOCOL.md 5.10
        if (summary.cache_slot >= 0) {
            reply.add("cache_slot", summary.cache_slot);
        }
    }
    reply.add("n_gen", summary.n_gen).add("finish", summary.finish).add_ms("prefill_ms", summary.prefill_ms).add_ms(
        "decode_ms", summary.decode_ms);
    if (summary.snapped) {
        reply.add("snap_slot", req.snap_slot).add("snap_pos", req.snap_pos);
    }
    if (summary.spec != nullptr) {
        reply.add("spec", summary.choice.name())
            .add("draft_steps", summary.spec->steps)
            .add("draft_proposed", summary.spec->proposed)
            .add("draft_accepted", summary.spec->accepted)
            .add_ms("draft_ms", summary.spec->draft_ms);
        if (summary.choice.tree) {
            reply.add("tree_steps", summary.spec->tree_steps);
        }
    }
    return reply.line();
}

GenerateRequest parse_generate_request(const Session & session, const CommandLine & cmd, const std::string & ids,
                                       const std::string & n_gen, const char * usage) {
    const bool is_generate = cmd.name == "generate";
    std::vector<std::string_view> keys = {"temp", "top_k", "top_p", "min_p", "rep_pen", "freq_pen", "pres_pen",
                                     "rep_window", "seed", "stop", "ignore_eos", "grammar", "json_schema", "snap",
                                          "logprobs", "seq", "lookup"};
    if (is_generate) {
        keys.insert(keys.end(), {"reuse", "marks", "prompt_logprobs"});
    }
    cmd.check_options(keys, usage);
    GenerateRequest req;
    SamplingParams & sp = req.sampling;
    sp.seed = session.opts.seed;
    const std::string * grammar_ref = nullptr;
    const std::string * json_schema_ref = nullptr;
    for (const auto & [key, value] : cmd.options) {
        if (key == "temp") {
            const double t = parse_float("temp", value);
            if (t < 0.0) {
                throw ProtocolError(ErrorCode::kBadArgs, "temp=" + value + " must be >= 0");
            }
            sp.temp = static_cast<float>(t);
        } else if (key == "top_k") {
            sp.top_k = static_cast<int32_t>(parse_int("top_k", value, 0, std::numeric_limits<int32_t>::max()));
        } else if (key == "top_p") {
            sp.top_p = parse_unit("top_p", value);
        } else if (key == "min_p") {
            sp.min_p = parse_unit("min_p", value);
        } else if (key == "rep_pen") {
            const double r = parse_float("rep_pen", value);
            if (r <= 0.0) {
                throw ProtocolError(ErrorCode::kBadArgs, "rep_pen=" + value + " must be > 0");
            }
            sp.rep_pen = static_cast<float>(r);
        } else if (key == "freq_pen") {
            sp.freq_pen = static_cast<float>(parse_float("freq_pen", value));
        } else if (key == "pres_pen") {
            sp.pres_pen = static_cast<float>(parse_float("pres_pen", value));
        } else if (key == "rep_window") {
            sp.rep_window =
                static_cast<int32_t>(parse_int("rep_window", value, 0, std::numeric_limits<int32_t>::max()));
        } else if (key == "seed") {
            sp.seed = static_cast<uint32_t>(parse_int("seed", value, 0, std::numeric_limits<uint32_t>::max()));
        } else if (key == "stop") {
            req.stop = parse_id_list(value, "stop");
        } else if (key == "ignore_eos") {
            req.ignore_eos = parse_bool01("ignore_eos", value);
        } else if (key == "grammar") {
            grammar_ref = &value;
        } else if (key == "json_schema") {
            json_schema_ref = &value;
        } else if (key == "snap") {
            parse_snap(session, value, req);
        } else if (key == "reuse") {
            req.reuse = parse_bool01("reuse", value);
        } else if (key == "marks") {
            req.marks = parse_id_list(value, "marks");
        } else if (key == "logprobs") {
            req.logprobs = static_cast<int32_t>(parse_int("logprobs", value, 0, kMaxLogprobs));
        } else if (key == "seq") {
            req.seq = parse_seq(session, value);
        } else if (key == "prompt_logprobs") {
            req.prompt_logprobs = parse_bool01("prompt_logprobs", value);
        } else if (key == "lookup") {
            req.lookup = parse_bool01("lookup", value) ? 1 : 0;
        }
    }
    if (req.lookup == 1 && session.opts.lookup == DaemonOptions::Lookup::kOff) {
        // Its context has no room for a verify block (nor, on a hybrid, the recurrent
        // copies a rollback needs).
        throw ProtocolError(ErrorCode::kUnsupported,
                            "lookup=1 needs a daemon started with --lookup=opt-in or --lookup=on");
    }
    if (req.prompt_logprobs && req.logprobs < 0) {
        throw ProtocolError(ErrorCode::kBadArgs,
                            "prompt_logprobs=1 needs logprobs=K (the alternatives each record carries)");
    }
    // Scoring a prompt alone (an evaluation harness's loglikelihood) generates nothing.
    req.n_gen = static_cast<int32_t>(
        parse_int("n_gen", n_gen, req.prompt_logprobs ? 0 : 1, std::numeric_limits<int32_t>::max()));
    req.reuse = req.reuse && is_generate;

    req.prompt = read_token_ref(ids);
    if (req.prompt.empty()) {
        throw ProtocolError(ErrorCode::kEmptyPrompt, std::string(cmd.name) + " needs at least one prompt token");
    }
    check_token_ids(req.prompt, session.engine.n_vocab);
    check_token_ids(req.stop, session.engine.n_vocab);
    const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.n_gen;
    if (needed > session.engine.n_ctx_seq) {
        throw ProtocolError(ErrorCode::kContextOverflow,
                            "n_prompt=" + std::to_string(req.prompt.size()) + " + n_gen=" + std::to_string(req.n_gen) +
                                " exceeds " + session.engine.ctx_limit());
    }
    if (req.snap_pos > static_cast<int64_t>(req.prompt.size())) {
        throw ProtocolError(ErrorCode::kBadArgs, "snap=" + std::to_string(req.snap_pos) + ":" +
                                                     std::to_string(req.snap_slot) + " is past the prompt (n_prompt=" +
                                                     std::to_string(req.prompt.size()) + ")");
    }
    for (size_t i = 0; i < req.marks.size(); ++i) {
        const int32_t mark = req.marks[i];
        if (mark < 1 || mark > static_cast<int64_t>(req.prompt.size()) || (i > 0 && mark <= req.marks[i - 1])) {
            throw ProtocolError(ErrorCode::kBadArgs, "marks must ascend strictly within 1..n_prompt=" +
                                                         std::to_string(req.prompt.size()));
        }
    }
    if (grammar_ref != nullptr && json_schema_ref != nullptr) {
        throw ProtocolError(ErrorCode::kBadArgs, "grammar and json_schema exclude each other");
    }
    if (grammar_ref != nullptr) {
        req.grammar = make_grammar_sampler(session.engine.vocab, read_text_ref(*grammar_ref));
    } else if (json_schema_ref != nullptr) {
        req.grammar = make_grammar_sampler(session.engine.vocab,
                                           grammar_from_json_schema(read_text_ref(*json_schema_ref)));
    }
    return req;
}

std::string run_generation(Session & session, const GenerateRequest & req, uint64_t generate_seq,
                           const char * command, const Snapshot * from) {
    LoadedModel & engine = session.engine;
    llama_context * ctx = engine.context.get();
    LiveSequence & live = session.live;
    Speculator & spec = session.spec;
    DflashDraft * draft = spec.attached_draft();
    const auto n_prompt = static_cast<int32_t>(req.prompt.size());
    if (from && req.snap_pos != 0 && req.snap_pos < static_cast<int32_t>(from->tokens.size())) {
        throw ProtocolError(ErrorCode::kBadArgs, "snap=" + std::to_string(req.snap_pos) + ":" +
                                                     std::to_string(req.snap_slot) +
                                                     " is inside the restored prefix (n_reused=" +
                                                     std::to_string(from->tokens.size()) + ")");
    }
    TokenPicker picker(req.sampling, engine.vocab, req.grammar.get());

    ++session.stats.requests;
    auto cancelled = [&] { return session.cancel.cancelled(generate_seq, req.seq); };
    TokenEmitter emitter(session, req, cancelled);
    SpecCounters spec_counters;
    const bool speculative = spec.active();
    const SpecChoice choice = spec.choose(req.lookup, /*propose =*/req.logprobs < 0);

    bool snapped = false;
    const auto t_prefill = std::chrono::steady_clock::now();
    double prefill_ms = 0.0;
    // Prefill chunks are --chunk tokens (the engine batch may be larger: a speculative
    // daemon sizes it for a verify block, engine/engine.cpp).
    const auto n_chunk = static_cast<int64_t>(std::max(1, engine.n_chunk));
    Batch batch(static_cast<int32_t>(std::max<int64_t>(n_chunk, session.opts.verify_rows())));
    auto snapshot_here = [&] {
        session.snapshots.put(req.snap_slot, capture_snapshot(ctx, live, engine.n_vocab, draft));
        snapped = true;
    };
    ReusedPrefix reused;
    try {
        if (from) {
            load_snapshot(ctx, *from, live, draft);  // `from` may be replaced by snapshot_here below
            reused = {ReusedPrefix::Source::kSlot, static_cast<int32_t>(from->tokens.size()), -1};
        } else if (req.reuse && !req.prompt_logprobs) {
            // A snap caps the reuse short of its position, so that the snapshot is taken
            // after a decode, with logits (a cut back to it would have none).
            const int32_t limit = req.snap_pos != 0 ? req.snap_pos - 1 : n_prompt;
            reused = reuse_prefix(ctx, live, session.snapshots, req.prompt, limit, draft);
        } else {
            clear_sequence(ctx, 0);
            live.clear();
            if (draft != nullptr) {
                draft->clear(0);
            }
        }
        const int32_t n_reused = reused.n_tokens;
        if (req.snap_pos != 0 && req.snap_pos == n_reused) {
            snapshot_here();
        }
        for (int32_t pos = n_reused; pos < n_prompt && !cancelled();) {
            const int32_t end = prefill_chunk_end(req, pos, n_chunk);
            batch.clear();
            for (int32_t i = pos; i < end; ++i) {
                // Every chunk outputs its last position, so the live sequence always has
                // logits to snapshot; an uninterrupted run does the same, so this does not
                // break exactness. prompt_logprobs asks for every position's: the state
                // the chunk leaves is the same, only more rows leave the LM head.
                batch.add(req.prompt[static_cast<size_t>(i)], i,
                          /*want_logits =*/req.prompt_logprobs || i == end - 1);
            }
            decode_or_throw(ctx, batch, "prefill");
            if (req.prompt_logprobs) {
                // Row i - pos predicts the token at i + 1; the last prompt position's row
                // predicts the first generated token, which is the decode's business.
                for (int32_t i = pos; i < end && i + 1 < n_prompt; ++i) {
                    emitter.emit_prompt(req.prompt[static_cast<size_t>(i) + 1], llama_get_logits_ith(ctx, i - pos));
                }
            }
            live.decoded(req.prompt.data() + pos, static_cast<size_t>(end - pos));
            if (draft != nullptr) {
                // The draft sees every prompt position's target features before it drafts.
                const auto t_ingest = std::chrono::steady_clock::now();
                draft->ingest(ctx, 0, end - pos, pos);
                spec_counters.draft_ms += elapsed_ms(t_ingest);
            }
            session.stats.tokens_prompt += static_cast<uint64_t>(end - pos);
            pos = end;
            if (pos % n_chunk == 0 || is_mark(req, pos)) {
                canonicalize_window_cells(ctx);  // where a restore from here would start
            }
            if (req.reuse && (is_mark(req, pos) || pos == n_prompt || pos % (kCheckpointEveryChunks * n_chunk) == 0)) {
                capture_checkpoint(ctx, live, engine.n_vocab);
                session.stats.checkpoints_dropped +=
                    bound_checkpoints(session.lanes, session.opts.checkpoint_bytes, live);
            }
            if (pos == req.snap_pos) {
                snapshot_here();
            }
        }
        picker.accept_prompt(req.prompt);
        if (speculative && spec.oracle() != nullptr) {
            spec.oracle()->begin(req.prompt);
        }
        // On a GPU the last chunk may still be running: wait for it, so that prefill_ms
        // holds all of the prefill and decode_ms (and decode tok/s) none of it.
        llama_synchronize(ctx);
        prefill_ms = elapsed_ms(t_prefill);

        const auto t_decode = std::chrono::steady_clock::now();
        if (cancelled()) {
            emitter.cancel();
        } else if (req.n_gen == 0) {
            // prompt_logprobs with n_gen=0: the prompt's records were all there was to write.
        } else if (speculative) {
            // A request for logprobs is decoded without proposals (one target row per step,
            // exactly the autoregressive arithmetic), so its values do not depend on
            // whether the daemon has a draft: verify rows round differently from a
            // single-token decode (PROTOCOL.md 5.9) until the engine's kernels are
            // batch-invariant (issue 21).
            decode_speculative(session, picker, emitter, batch, spec_counters, choice);
        } else {
            while (true) {
                const EmittedPick picked = pick_and_emit(picker, emitter, ctx, live.context_row(),
                                                         session.engine.output_argmax,
                                                         [&] { return live.last_logits(ctx); });
                if (!picked.more) {
                    break;
                }
                const llama_token token = *picked.token;
                batch.clear();
                batch.add(token, live.size(), /*want_logits =*/true);
                decode_or_throw(ctx, batch, "decode");
                // Its logits are output row 0, so a greedy pick reads the graph's argmax
                // there (pick_and_emit) and no row is copied to the host.
                live.decoded(&token, 1, /*logits_row =*/0);
            }
        }
        const double decode_ms = elapsed_ms(t_decode);
        const Finish finish = emitter.finish();
        if (finish == Finish::kCancelled) {
            ++session.stats.cancelled;
        }
        session.stats.last_prefill_tok_s = tokens_per_second(static_cast<uint64_t>(n_prompt - n_reused), prefill_ms);
        session.stats.tokens_reused += static_cast<uint64_t>(n_reused);
        session.stats.last_decode_tok_s = tokens_per_second(static_cast<uint64_t>(emitter.n_out()), decode_ms);
        spec.totals.add(spec_counters);

        GenerationSummary summary;
        summary.n_prompt = n_prompt;
        summary.restored = from != nullptr;
        summary.n_reused = n_reused;
        summary.cache_slot = reused.source == ReusedPrefix::Source::kSlot && !from ? reused.slot : -1;
        summary.n_gen = emitter.n_out();
        summary.finish = finish_name(finish);
        summary.prefill_ms = prefill_ms;
        summary.decode_ms = decode_ms;
        summary.snapped = snapped;
        summary.spec = speculative ? &spec_counters : nullptr;
        summary.choice = choice;
        return summary_line(command, summary, req);
    } catch (...) {
        // A failed decode leaves the sequence in a state we no longer know: start over.
        clear_sequence(ctx, 0);
        live.clear();
        if (draft != nullptr) {
            draft->clear(0);
        }
        throw;
    }
}

std::string start_on_lane(Session & session, GenerateRequest req, uint64_t generate_seq, const char * command,
                          std::shared_ptr<const Snapshot> from) {
    const int32_t seq = req.seq;
    if (session.scheduler == nullptr) {
        throw ProtocolError(ErrorCode::kUnsupported, std::string(command) + " seq= needs the daemon's command loop");
    }
    if (session.scheduler->lane_busy(seq)) {
        throw ProtocolError(ErrorCode::kSeqBusy, "sequence " + std::to_string(seq) +
                                                     " is still generating; wait for its done line or cancel it");
    }
    session.scheduler->admit(std::move(req), generate_seq, command, std::move(from));
    return OkReply(command).add("seq", seq).line();
}

std::string handle_generate(Session & session, const CommandLine & cmd, uint64_t generate_seq) {
    cmd.expect_positional(2, kUsage);
    GenerateRequest req = parse_generate_request(session, cmd, cmd.positional[0], cmd.positional[1], kUsage);
    if (req.seq >= 0) {
        return start_on_lane(session, std::move(req), generate_seq, "generate", nullptr);
    }
    return run_generation(session, req, generate_seq, "generate", nullptr);
}

}  // namespace lucerna
