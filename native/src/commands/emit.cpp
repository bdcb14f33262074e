#include "commands/emit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "commands/generate.h"
#include "engine/sampling.h"
#include "wire/errors.h"

namespace lucerna {

const char * finish_name(Finish finish) {
    switch (finish) {
        case Finish::kEog: return "eog";
        case Finish::kStop: return "stop";
        case Finish::kCancelled: return "cancelled";
        case Finish::kNone:
        case Finish::kLength: return "length";
    }
    return "length";
}

TokenEmitter::TokenEmitter(Session & session, const GenerateRequest & req, std::function<bool()> cancelled)
    : session_(session), req_(req), cancelled_(std::move(cancelled)) {}

bool TokenEmitter::write_framed(const std::vector<int32_t> & values) {
    frame_.clear();
    frame_.push_back(req_.seq);
    frame_.push_back(static_cast<int32_t>(values.size()));
    frame_.insert(frame_.end(), values.begin(), values.end());
    return session_.stream.write(frame_);
}

bool TokenEmitter::end_framed() {
    return session_.stream.write(std::vector<int32_t>{req_.seq, kFrameEnd});
}

int32_t TokenEmitter::remaining() const { return req_.n_gen - n_out_; }

// The distribution reported is the model's own at this step: log-softmax of the raw
// logits the picker started from, before penalties, grammar, truncation (top_k, top_p,
// min_p) and temperature, as OpenAI and vLLM report it. Under greedy decoding the pick
// is its argmax. Computed in double, so the sum over a large vocabulary loses nothing.
void TokenEmitter::logprob_record(llama_token token, const float * logits) {
    const int32_t n_vocab = session_.engine.n_vocab;
    const auto k = static_cast<size_t>(req_.logprobs);
    const float max = *std::max_element(logits, logits + n_vocab);
    double sum = 0.0;
    for (int32_t id = 0; id < n_vocab; ++id) {
        sum += std::exp(static_cast<double>(logits[id]) - max);
    }
    const double log_z = static_cast<double>(max) + std::log(sum);
    // The K largest logits, ties to the lower id (greedy's own tie rule), kept sorted
    // by insertion: almost every logit is below the K-th and costs one compare.
    top_.clear();
    for (int32_t id = 0; id < n_vocab && k > 0; ++id) {
        const float logit = logits[id];
        if (top_.size() == k && logit <= top_.back().first) {
            continue;
        }
        auto at = std::find_if(top_.begin(), top_.end(), [logit](const auto & e) { return logit > e.first; });
        top_.insert(at, {logit, id});
        if (top_.size() > k) {
            top_.pop_back();
        }
    }
    auto bits = [log_z](float logit) {
        const auto lp = static_cast<float>(static_cast<double>(logit) - log_z);
        int32_t out = 0;
        std::memcpy(&out, &lp, sizeof out);
        return out;
    };
    record_.clear();
    record_.push_back(token);
    record_.push_back(bits(logits[token]));
    for (const auto & [logit, id] : top_) {
        record_.push_back(id);
        record_.push_back(bits(logit));
    }
}

void TokenEmitter::emit_prompt(llama_token token, const float * logits) {
    if (logits == nullptr) {
        throw ProtocolError(ErrorCode::kDecodeFailed, "no logits to take a prompt token's log-probability from");
    }
    logprob_record(token, logits);
    if (!(req_.seq >= 0 ? write_framed(record_) : session_.stream.write(record_))) {
        throw ProtocolError(ErrorCode::kIoFailed, "the stream fd is closed");
    }
}

bool TokenEmitter::reads_logits() const { return req_.logprobs >= 0; }

EmittedPick pick_and_emit(TokenPicker & picker, TokenEmitter & emitter, llama_context * ctx, int32_t row,
                          bool context_argmax, const std::function<const float *()> & logits_of) {
    const float * logits =
        picker.reads_logits(row, context_argmax) || emitter.reads_logits() ? logits_of() : nullptr;
    EmittedPick result;
    result.token = picker.pick_row(ctx, row, logits, context_argmax);
    result.more = emitter.emit(result.token, logits);
    return result;
}

bool TokenEmitter::emit(std::optional<llama_token> picked, const float * logits) {
    if (!picked) {
        finish_ = Finish::kStop;  // the grammar is complete
        return false;
    }
    const llama_token token = *picked;
    if (!req_.ignore_eos && llama_vocab_is_eog(session_.engine.vocab, token)) {
        finish_ = Finish::kEog;
        return false;
    }
    bool written = false;
    if (req_.logprobs >= 0) {
        if (logits == nullptr) {
            throw ProtocolError(ErrorCode::kDecodeFailed, "no logits to take log-probabilities from");
        }
        logprob_record(token, logits);
        written = req_.seq >= 0 ? write_framed(record_) : session_.stream.write(record_);
    } else {
        written = req_.seq >= 0 ? write_framed({token}) : session_.stream.write(token);
    }
    if (!written) {
        throw ProtocolError(ErrorCode::kIoFailed, "the stream fd is closed");
    }
    ++n_out_;
    ++session_.stats.tokens_generated;
    if (std::find(req_.stop.begin(), req_.stop.end(), token) != req_.stop.end()) {
        finish_ = Finish::kStop;
        return false;
    }
    if (n_out_ >= req_.n_gen) {
        finish_ = Finish::kLength;
        return false;
    }
    if (cancelled_()) {
        finish_ = Finish::kCancelled;
        return false;
    }
    return true;
}

}  // namespace lucerna
