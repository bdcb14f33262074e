// The oracle proposer (PROTOCOL.md 5.9, `--draft-oracle`): a benchmark instrument, never
// a serving feature. It proposes from recorded greedy transcripts of the target itself,
// corrupted on a fixed schedule, so that the verify machinery can be measured at a
// chosen acceptance length without a trained draft. Only a daemon flag reaches it.
//
// Transcripts: a token file (raw int32 LE) of one or more sequences, each a prompt
// followed by the target's greedy continuation, separated by -1. A generation follows
// the transcript its prompt is a prefix of (the longest such prompt match); without
// one, or once the committed tokens leave the transcript, every proposal is wrong.
// The file is read again at the start of a generation when its size or modification
// time changed, so a benchmark can refine the transcript without restarting the daemon.
//
// The schedule, for a target mean acceptance length A (committed tokens per verify
// step, 1 <= A <= block): step s (counted from 0 within one generation) proposes
//     m_s = floor((s + 1) * (A - 1)) - floor(s * (A - 1))
// transcript tokens that the target accepts, then one wrong token (the transcript's
// token + 1 mod n_vocab) at proposal m_s, then transcript tokens again (never reached:
// verification stops at the first mismatch). Over S steps the accepted counts sum to
// floor(S * (A - 1)), so the mean acceptance length is A to within 1/S, deterministic
// and with no random generator. m_s is capped by the proposals the step may make
// (the block, or fewer near n_gen), which can only lower the measured length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/token_tree.h"
#include "wire/errors.h"

namespace lucerna {

class OracleProposer {
public:
    // Throws bad_flag when the file is missing, empty or not a token file.
    OracleProposer(const std::string & path, double accept, int32_t n_vocab);

    // A generation starts from `prompt`: pick its transcript, restart the schedule.
    void begin(const std::vector<int32_t> & prompt);

    // Proposals for the `n_draft` positions after `committed` (every committed token,
    // the not-yet-decoded last one included).
    void propose(const std::vector<int32_t> & committed, int32_t n_draft, std::vector<int32_t> & out);
    // The same step for a tree verify (engine/token_tree.h): `width` candidates for each
    // position, the transcript's token first except at the step's scheduled miss, where it
    // is at `rank` (--oracle-rank; 0: not among them, the first candidate is then the
    // chain's wrong token).
    void propose_candidates(const std::vector<int32_t> & committed, int32_t n_draft, int32_t width, int32_t rank,
                            std::vector<std::vector<TreeCandidate>> & out);

    double accept() const { return accept_; }
    size_t n_transcripts() const { return transcripts_.size(); }

private:
    // (Re)reads the file; throws ProtocolError with `code`.
    void read_transcripts(ErrorCode code);

    std::string path_;
    int64_t stamp_size_ = -1;
    int64_t stamp_mtime_ns_ = -1;
    std::vector<std::vector<int32_t>> transcripts_;
    double accept_;
    int32_t n_vocab_;
    const std::vector<int32_t> * current_ = nullptr;  // null: no transcript, or left it
    size_t checked_ = 0;  // committed tokens already compared with *current_
    int64_t step_ = 0;
    std::vector<std::vector<TreeCandidate>> candidates_;  // propose()'s scratch
};

}  // namespace lucerna
