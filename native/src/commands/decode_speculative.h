// The speculative decode loop of `generate` and `restore` (PROTOCOL.md 5.9): a proposer
// (prompt lookup, the DFlash draft, or the benchmark-only oracle) guesses the next
// tokens, the target checks them all in one decode, and the longest agreeing prefix is
// committed. The proposers are engine/speculative.h's Speculator and engine/lookup.h.
//
// One step, with `last` the picked token the target has not decoded yet, at position n:
//   1. propose d1..dk (k <= block - 1, and no more than the request may still write):
//      prompt lookup first when the request runs it, the draft when lookup found no
//      match, the oracle in place of either; k may be 0 (nothing to propose);
//   2. decode [last, d1..dk] at n..n+k in one batch with logits for every row;
//   3. pick from row 0, 1, ... with the request's own TokenPicker, exactly as the
//      autoregressive loop picks from each step's logits; each pick is written at once;
//      continue to row i+1 only while the pick at row i equals d(i+1);
//   4. keep positions n..n+i (rows whose tokens are now committed) and roll the rest
//      back: llama_memory_seq_rm, which drops the KV cells and, for the hybrid qwen35
//      target, points the Gated DeltaNet and conv state at the copy the engine kept for
//      position n+i (n_rs_seq, see engine/engine.cpp); the pick at row i is the new `last`.
//   5. the draft ingests the target's captured features for n..n+i.
//
// Why it is lossless. Every committed token is one pick of the picker, in order, from
// target logits conditioned on exactly the committed prefix: greedy picks the argmax
// the autoregressive loop would pick, and sampling draws once per committed token from
// the same chain (penalties, top-k/p, min-p, temperature, grammar) with the same seeded
// generator, so the output distribution is the target's, and a seed reproduces the run.
// (This is verification by resampling. For a draft that proposes one token per position,
// as a greedy draft does, it accepts a proposal with probability p_target(d), the same
// as rejection sampling with a one-hot draft distribution would.) The proposals only
// decide how many positions one target decode covers. Numerically, a row of a verify
// batch is computed in a batch of another size than an autoregressive step (CPU matmul
// and the chunked Gated DeltaNet kernel round differently), so logits agree to float
// rounding, not bit for bit; the tests check that the tokens agree.
#pragma once

#include "engine/speculative.h"

namespace lucerna {

struct Session;
class TokenEmitter;
class TokenPicker;
class Batch;

// Decodes from the live sequence (prompt prefilled, its logits current) until the
// emitter says stop, speculatively with the proposers `choice` names. Adds this
// request's counters to `counters`. With none, every step decodes the last token alone,
// as autoregressive decoding does (no verify steps counted), while an attached draft
// still ingests each committed position so that its cache stays complete for the
// requests after.
void decode_speculative(Session & session, TokenPicker & picker, TokenEmitter & emitter, Batch & batch,
                        SpecCounters & counters, const SpecChoice & choice);

}  // namespace lucerna
