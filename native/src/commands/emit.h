// What happens to each token a generation picks (PROTOCOL.md 5.1), shared by the
// autoregressive loop and the speculative one (commands/decode_speculative.h), so both
// stop on the same rules in the same order: grammar complete, end of generation, stop
// ids, n_gen, cancel.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/session.h"
#include "llama.h"

namespace lucerna {

struct GenerateRequest;
class TokenPicker;

enum class Finish { kNone, kEog, kLength, kStop, kCancelled };

const char * finish_name(Finish finish);

// The length word of the record that ends a sequence's output (PROTOCOL.md 9.2).
constexpr int32_t kFrameEnd = -1;

class TokenEmitter {
public:
    TokenEmitter(Session & session, const GenerateRequest & req, std::function<bool()> cancelled);

    // Takes the picker's choice (nullopt: the grammar is complete) and the logits it
    // was picked from. Writes it to the stream unless it ends the generation unwritten
    // (EOG, complete grammar), followed, with logprobs=K, by its log-probability and the
    // K most likely tokens' (PROTOCOL.md 5.1). Returns true while generation goes on;
    // then finish() says why it stopped. Throws io_failed.
    bool emit(std::optional<llama_token> picked, const float * logits);

    // Protocol 2 (PROTOCOL.md 9.2): writes the record that ends this sequence's output,
    // `[seq, -1]`. Returns false if the reader is gone.
    bool end_framed();

    // prompt_logprobs: writes the record of prompt token `token` from the logits of the
    // position before it (PROTOCOL.md 5.1). It is no output: n_out() does not count it.
    // Throws io_failed.
    void emit_prompt(llama_token token, const float * logits);

    // Whether emit() reads the logits it is given: for log-probabilities.
    bool reads_logits() const;

    // Ends the generation before any pick (a cancel that came during prefill).
    void cancel() { finish_ = Finish::kCancelled; }
    bool cancelled() const { return cancelled_(); }

    Finish finish() const { return finish_; }
    int32_t n_out() const { return n_out_; }
    // Tokens the request may still write.
    int32_t remaining() const;

private:
    // Protocol 2: `[seq, len, values...]`, one record written at once.
    bool write_framed(const std::vector<int32_t> & values);
    // [token, logprob bits, (id, logprob bits) x K] for logprobs=K.
    void logprob_record(llama_token token, const float * logits);

    Session & session_;
    const GenerateRequest & req_;
    std::function<bool()> cancelled_;
    int32_t n_out_ = 0;
    Finish finish_ = Finish::kNone;
    std::vector<int32_t> record_;
    std::vector<int32_t> frame_;
    std::vector<std::pair<float, llama_token>> top_;
};

// What pick_and_emit did: the pick (nullopt: the grammar is complete), and whether the
// generation goes on (TokenEmitter::emit).
struct EmittedPick {
    std::optional<llama_token> token;
    bool more = false;
};

// Picks the token for output row `row` of the context's last decode
// (TokenPicker::pick_row) and emits it. `logits_of` gives that row's logits (the
// engine's, or a sequence's copy); it is called only where the pick or its record reads
// them. A greedy pick from the graph's argmax with no log-probabilities reads none, and
// the engine then never copies that row to the host (engine patch 0212: a step of 8
// sequences copied 7.9 MB of logits nothing read).
EmittedPick pick_and_emit(TokenPicker & picker, TokenEmitter & emitter, llama_context * ctx, int32_t row,
                          bool context_argmax, const std::function<const float *()> & logits_of);

}  // namespace lucerna
