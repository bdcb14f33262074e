#include "engine/oracle.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "wire/errors.h"
#include "wire/token_refs.h"

namespace lucerna {

namespace {

// (size, modification time in ns) of a file; (-1, -1) when it cannot be statted.
std::pair<int64_t, int64_t> file_stamp(const std::string & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return {-1, -1};
    }
    return {static_cast<int64_t>(st.st_size),
            static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

}  // namespace

OracleProposer::OracleProposer(const std::string & path, double accept, int32_t n_vocab)
    : path_(path), accept_(accept), n_vocab_(n_vocab) {
    read_transcripts(ErrorCode::kBadFlag);
}

void OracleProposer::read_transcripts(ErrorCode code) {
    const auto [size, mtime] = file_stamp(path_);
    std::vector<int32_t> ids;
    try {
        ids = read_token_ref(path_);
    } catch (const ProtocolError & error) {
        throw ProtocolError(code, std::string("--draft-oracle: ") + error.what());
    }
    std::vector<std::vector<int32_t>> transcripts;
    std::vector<int32_t> current;
    for (const int32_t id : ids) {
        if (id == -1) {
            if (!current.empty()) {
                transcripts.push_back(std::move(current));
            }
            current.clear();
        } else if (id < 0 || id >= n_vocab_) {
            throw ProtocolError(code, "--draft-oracle: token " + std::to_string(id) + " in " + path_ +
                                          " is outside the vocabulary");
        } else {
            current.push_back(id);
        }
    }
    if (!current.empty()) {
        transcripts.push_back(std::move(current));
    }
    if (transcripts.empty()) {
        throw ProtocolError(code, "--draft-oracle: " + path_ + " holds no transcript");
    }
    transcripts_ = std::move(transcripts);
    stamp_size_ = size;
    stamp_mtime_ns_ = mtime;
}

void OracleProposer::begin(const std::vector<int32_t> & prompt) {
    current_ = nullptr;
    const auto [size, mtime] = file_stamp(path_);
    if (size != stamp_size_ || mtime != stamp_mtime_ns_) {
        // A bad new file fails this request (decode_failed) and keeps the old transcripts.
        read_transcripts(ErrorCode::kDecodeFailed);
    }
    size_t best = 0;
    for (const auto & transcript : transcripts_) {
        const bool prefix = prompt.size() <= transcript.size() &&
                            std::equal(prompt.begin(), prompt.end(), transcript.begin());
        if (prefix && (current_ == nullptr || transcript.size() > best)) {
            current_ = &transcript;
            best = transcript.size();
        }
    }
    checked_ = prompt.size();
    step_ = 0;
}

void OracleProposer::propose(const std::vector<int32_t> & committed, int32_t n_draft, std::vector<int32_t> & out) {
    propose_candidates(committed, n_draft, 1, 0, candidates_);
    out.resize(candidates_.size());
    for (size_t j = 0; j < candidates_.size(); ++j) {
        out[j] = candidates_[j][0].token;
    }
}

void OracleProposer::propose_candidates(const std::vector<int32_t> & committed, int32_t n_draft, int32_t width,
                                        int32_t rank, std::vector<std::vector<TreeCandidate>> & out) {
    out.assign(static_cast<size_t>(n_draft), {});
    // Still on the transcript? Only the tokens committed since the last step need a look.
    if (current_ != nullptr) {
        if (committed.size() > current_->size() ||
            !std::equal(committed.begin() + static_cast<std::ptrdiff_t>(std::min(checked_, committed.size())),
                        committed.end(), current_->begin() + static_cast<std::ptrdiff_t>(
                                                                 std::min(checked_, committed.size())))) {
            current_ = nullptr;
        }
        checked_ = committed.size();
    }
    const double a = accept_ - 1.0;
    const auto correct = static_cast<int32_t>(std::floor(static_cast<double>(step_ + 1) * a) -
                                              std::floor(static_cast<double>(step_) * a));
    ++step_;
    for (int32_t j = 0; j < n_draft; ++j) {
        auto & here = out[static_cast<size_t>(j)];
        const size_t at = committed.size() + static_cast<size_t>(j);
        if (current_ == nullptr || at >= current_->size()) {
            here.push_back({0, 0.0f});  // nothing to copy: a proposal like any other
            continue;
        }
        // The transcript's token is at rank 0, except at the scheduled miss, where it is
        // at `rank` (0: not among the candidates). The probabilities are a draft's that
        // is sure where it is right and unsure where it is wrong: rank 0 has 0.9 and rank
        // i 0.1 * 2^-i, except at the miss, where rank i has 2^-(i + 1). So a tree spends
        // its branches at the miss, as it would on a real draft's doubts.
        const int32_t truth = (*current_)[at];
        const bool miss = j == correct;
        const int32_t truth_rank = miss ? (rank > 0 ? rank : width) : 0;
        for (int32_t i = 0, wrong = 1; i < width; ++i) {
            const int32_t token = i == truth_rank ? truth : (truth + wrong++) % n_vocab_;
            const double p = miss ? std::ldexp(1.0, -(i + 1)) : i == 0 ? 0.9 : 0.1 * std::ldexp(1.0, -i);
            here.push_back({token, static_cast<float>(std::log(p))});
        }
    }
}

}  // namespace lucerna
