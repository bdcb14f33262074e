#include "engine/speculative.h"

#include <memory>
#include <utility>

#include "engine/log.h"

namespace lucerna {

Speculator::Speculator(const DaemonOptions & opts, int32_t n_vocab) : opts_(opts) {
    if (!opts.oracle_path.empty()) {
        oracle_ = std::make_unique<OracleProposer>(opts.oracle_path, opts.oracle_accept, n_vocab);
        log_line("draft oracle: %zu transcript(s) from %s, aiming at acceptance length %.2f (benchmarks only)",
                 oracle_->n_transcripts(), opts.oracle_path.c_str(), opts.oracle_accept);
    }
    if (!opts.draft_path.empty()) {
        draft_ = DflashDraft::load(opts);
        draft_model_bytes_ = draft_->model_bytes();
    }
}

const char * Speculator::kind() const {
    if (!opts_.draft_path.empty()) {
        return oracle_ ? "dflash+oracle" : "dflash";
    }
    return oracle_ ? "oracle" : "";
}

const char * Speculator::draft_state() const {
    if (opts_.draft_path.empty()) {
        return "absent";
    }
    return draft_ ? "ready" : "parked";
}

void Speculator::park_draft() { draft_.reset(); }

void Speculator::unpark_draft(llama_context * target, bool target_has_sequence) {
    if (opts_.draft_path.empty() || draft_) {
        return;
    }
    std::unique_ptr<DflashDraft> loaded = DflashDraft::load(opts_);  // throws: stay parked
    if (target != nullptr) {
        loaded->attach(target, opts_, block_size());
        if (target_has_sequence) {
            loaded->mark_incomplete();
        }
    }
    draft_ = std::move(loaded);
}

void Speculator::detach() {
    if (draft_) {
        draft_->detach();
    }
}

void Speculator::attach(llama_context * target) {
    if (draft_) {
        draft_->attach(target, opts_, block_size());
    }
}

}  // namespace lucerna
