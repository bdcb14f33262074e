#include "engine/speculative.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "engine/log.h"

namespace lucerna {

Speculator::Speculator(const DaemonOptions & opts, int32_t n_vocab) : opts_(opts) {
    if (!opts.oracle_path.empty()) {
        for (int32_t seq = 0; seq < std::max(1, opts.parallel); ++seq) {
            oracles_.push_back(std::make_unique<OracleProposer>(opts.oracle_path, opts.oracle_accept, n_vocab));
        }
        log_line("draft oracle: %zu transcript(s) from %s, aiming at acceptance length %.2f (benchmarks only)",
                 oracles_[0]->n_transcripts(), opts.oracle_path.c_str(), opts.oracle_accept);
    }
    if (!opts.draft_path.empty()) {
        draft_ = DflashDraft::load(opts);
        draft_model_bytes_ = draft_->model_bytes();
    }
}

namespace {

std::string joined(bool dflash, bool oracle, bool lookup) {
    std::string name;
    for (const auto & [on, part] : {std::pair{dflash, "dflash"}, std::pair{oracle, "oracle"}, std::pair{lookup, "lookup"}}) {
        if (on) {
            name += (name.empty() ? "" : "+") + std::string(part);
        }
    }
    return name;
}

}  // namespace

std::string SpecChoice::name() const {
    const std::string name = joined(draft, oracle, lookup);
    return name.empty() ? "none" : name;
}

std::string Speculator::kind() const {
    return joined(!opts_.draft_path.empty(), !oracles_.empty(), opts_.lookup != DaemonOptions::Lookup::kOff);
}

SpecChoice Speculator::choose(int32_t lookup, bool propose) const {
    SpecChoice choice;
    if (!propose) {
        return choice;
    }
    choice.draft = draft_ && draft_->attached();
    choice.oracle = !oracles_.empty();
    choice.lookup = lookup == 1 || (lookup == -1 && opts_.lookup == DaemonOptions::Lookup::kOn);
    choice.tree = opts_.draft_tree > 0 && (choice.draft || choice.oracle);
    return choice;
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
