#include "core/emit.h"

#include <algorithm>
#include <utility>

#include "core/errors.h"
#include "core/generate.h"

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

int32_t TokenEmitter::remaining() const { return req_.n_gen - n_out_; }

bool TokenEmitter::emit(std::optional<llama_token> picked) {
    if (!picked) {
        finish_ = Finish::kStop;  // the grammar is complete
        return false;
    }
    const llama_token token = *picked;
    if (!req_.ignore_eos && llama_vocab_is_eog(session_.engine.vocab, token)) {
        finish_ = Finish::kEog;
        return false;
    }
    if (!session_.stream.write(token)) {
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
