// generate <ids> <n_gen> [temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] [freq_pen=F]
//          [pres_pen=P] [rep_window=N] [seed=S] [stop=ID,ID,...] [ignore_eos=0|1]
//
// Clears the sequence, prefills the prompt in chunks of n_batch, then decodes one
// token at a time, writing each sampled token to the stream as soon as it exists.
#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/commands.h"
#include "core/token_refs.h"

namespace lucerna {
namespace {

const char * const kUsage =
    "generate <ids:...|path> <n_gen> [temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] [freq_pen=F] "
    "[pres_pen=P] [rep_window=N] [seed=S] [stop=ID,...] [ignore_eos=0|1]";

struct SamplingParams {
    float temp = 0.0f;  // 0: greedy argmax, every other knob unused
    int32_t top_k = 0;  // 0: off
    float top_p = 1.0f;
    float min_p = 0.0f;
    float rep_pen = 1.0f;
    float freq_pen = 0.0f;
    float pres_pen = 0.0f;
    int32_t rep_window = 64;
    uint32_t seed = 0;
};

struct GenerateRequest {
    std::vector<int32_t> prompt;
    int32_t n_gen = 0;
    SamplingParams sampling;
    std::vector<int32_t> stop;
    bool ignore_eos = false;
};

enum class Finish { kEog, kLength, kStop, kCancelled };

const char * finish_name(Finish finish) {
    switch (finish) {
        case Finish::kEog: return "eog";
        case Finish::kLength: return "length";
        case Finish::kStop: return "stop";
        case Finish::kCancelled: return "cancelled";
    }
    return "length";
}

float parse_unit(const char * key, const std::string & value) {
    const double v = parse_float(key, value);
    if (v > 1.0 || v < 0.0) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string(key) + "=" + value + " must be in [0, 1]");
    }
    return static_cast<float>(v);
}

// The engine reads LLAMA_DEFAULT_SEED (0xFFFFFFFF) as "seed from the clock"; every seed
// we are given must be deterministic, so that one value is replaced by its neighbour.
uint32_t deterministic_seed(uint32_t seed) { return seed == LLAMA_DEFAULT_SEED ? LLAMA_DEFAULT_SEED - 1 : seed; }

// Validation order: arguments, token source, empty prompt, token range, context size.
GenerateRequest parse_request(const Session & session, const CommandLine & cmd) {
    cmd.expect_positional(2, kUsage);
    cmd.check_options({"temp", "top_k", "top_p", "min_p", "rep_pen", "freq_pen", "pres_pen", "rep_window", "seed",
                       "stop", "ignore_eos"},
                      kUsage);
    GenerateRequest req;
    req.n_gen = static_cast<int32_t>(parse_int("n_gen", cmd.positional[1], 1, std::numeric_limits<int32_t>::max()));
    SamplingParams & sp = req.sampling;
    sp.seed = session.opts.seed;
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
        }
    }

    req.prompt = read_token_ref(cmd.positional[0]);
    if (req.prompt.empty()) {
        throw ProtocolError(ErrorCode::kEmptyPrompt, "generate needs at least one prompt token");
    }
    check_token_ids(req.prompt, session.engine.n_vocab);
    check_token_ids(req.stop, session.engine.n_vocab);
    const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.n_gen;
    if (needed > session.engine.n_ctx) {
        throw ProtocolError(ErrorCode::kContextOverflow,
                            "n_prompt=" + std::to_string(req.prompt.size()) + " + n_gen=" + std::to_string(req.n_gen) +
                                " exceeds n_ctx=" + std::to_string(session.engine.n_ctx));
    }
    return req;
}

// penalties -> top_k -> top_p -> min_p -> temperature -> draw(seed); each stage only
// when it does something, so the chain is the same as the protocol's.
llama_sampler_ptr make_sampler(const SamplingParams & sp, int32_t n_vocab) {
    llama_sampler_ptr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    if (sp.rep_pen != 1.0f || sp.freq_pen != 0.0f || sp.pres_pen != 0.0f) {
        llama_sampler_chain_add(
            chain.get(), llama_sampler_init_penalties(n_vocab, sp.rep_window, sp.rep_pen, sp.freq_pen, sp.pres_pen));
    }
    if (sp.top_k > 0) {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(sp.top_k));
    }
    if (sp.top_p < 1.0f) {  // top_p=0 keeps the single most likely token
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(sp.top_p, 1));
    }
    if (sp.min_p > 0.0f) {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(sp.min_p, 1));
    }
    llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(sp.temp));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_dist(deterministic_seed(sp.seed)));
    return chain;
}

// Greedy: the first index of the largest logit, so ties resolve the same everywhere.
llama_token argmax_token(llama_context * ctx, int32_t n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    return static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
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

}  // namespace

std::string handle_generate(Session & session, const CommandLine & cmd, uint64_t generate_seq) {
    const GenerateRequest req = parse_request(session, cmd);
    LoadedModel & engine = session.engine;
    llama_context * ctx = engine.context.get();
    const auto n_prompt = static_cast<int32_t>(req.prompt.size());
    const bool greedy = req.sampling.temp <= 0.0f;
    llama_sampler_ptr sampler = greedy ? nullptr : make_sampler(req.sampling, engine.n_vocab);

    ++session.stats.requests;
    session.stats.tokens_prompt += static_cast<uint64_t>(n_prompt);
    auto cancelled = [&] { return session.cancel.cancelled(generate_seq); };

    int32_t n_out = 0;
    Finish finish = Finish::kLength;
    double prefill_ms = 0.0;
    const auto t_prefill = std::chrono::steady_clock::now();

    llama_memory_clear(llama_get_memory(ctx), /*data =*/true);
    const auto n_batch = static_cast<int32_t>(llama_n_batch(ctx));
    Batch batch(std::max(n_batch, 1));
    for (int32_t start = 0; start < n_prompt && !cancelled(); start += batch.capacity()) {
        batch.clear();
        const int32_t end = std::min(n_prompt, start + batch.capacity());
        for (int32_t i = start; i < end; ++i) {
            batch.add(req.prompt[static_cast<size_t>(i)], i, /*want_logits =*/i == n_prompt - 1);
        }
        decode_or_throw(ctx, batch, "prefill");
    }
    if (sampler) {
        // Penalties look back over the prompt too, as they would over earlier turns.
        const int32_t from = std::max(0, n_prompt - req.sampling.rep_window);
        for (int32_t i = from; i < n_prompt; ++i) {
            llama_sampler_accept(sampler.get(), req.prompt[static_cast<size_t>(i)]);
        }
    }
    prefill_ms = elapsed_ms(t_prefill);

    const auto t_decode = std::chrono::steady_clock::now();
    if (cancelled()) {
        finish = Finish::kCancelled;
    } else {
        while (true) {
            const llama_token token =
                sampler ? llama_sampler_sample(sampler.get(), ctx, -1) : argmax_token(ctx, engine.n_vocab);
            if (!req.ignore_eos && llama_vocab_is_eog(engine.vocab, token)) {
                finish = Finish::kEog;
                break;
            }
            if (!session.stream.write(token)) {
                throw ProtocolError(ErrorCode::kIoFailed, "the stream fd is closed");
            }
            ++n_out;
            ++session.stats.tokens_generated;
            if (std::find(req.stop.begin(), req.stop.end(), token) != req.stop.end()) {
                finish = Finish::kStop;
                break;
            }
            if (n_out >= req.n_gen) {
                finish = Finish::kLength;
                break;
            }
            if (cancelled()) {
                finish = Finish::kCancelled;
                break;
            }
            batch.clear();
            batch.add(token, n_prompt + n_out - 1, /*want_logits =*/true);
            decode_or_throw(ctx, batch, "decode");
        }
    }
    return OkReply("generate")
        .add("n_prompt", n_prompt)
        .add("n_gen", n_out)
        .add("finish", finish_name(finish))
        .add_ms("prefill_ms", prefill_ms)
        .add_ms("decode_ms", elapsed_ms(t_decode))
        .line();
}

}  // namespace lucerna
