#include "engine/draft.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/candidate_sampler.h"
#include "engine/gguf_probe.h"
#include "engine/log.h"
#include "ggml-cpp.h"
#include "gguf.h"
#include "wire/errors.h"
// The engine's staging API: DFlash's target-layer capture, ctx_other and the
// embedding-batch path live only there.
#include "llama-ext.h"

namespace lucerna {
namespace {

bool quiet_progress(float /*progress*/, void * /*user_data*/) { return true; }

std::string meta_string(const llama_model * model, const char * key) {
    char value[64] = {0};
    return llama_model_meta_val_str(model, key, value, sizeof(value)) >= 0 ? std::string(value) : std::string();
}

// Positions of one batch entry. The draft of an M-RoPE target ropes on the temporal
// section only, but an embedding row still carries the four position rows the engine
// expects of it (the text convention: the position three times, then 0).
void set_pos(llama_batch_ext * batch, int32_t idx, llama_pos pos) {
    const llama_pos rows[4] = {pos, pos, pos, 0};
    llama_batch_ext_set_pos(batch, idx, rows);
}

// LUCERNA_TRACE_DRAFT=1 logs every block's proposals (sequence, position, ids): what a
// person needs to see why acceptance is low, and what the tests compare between a
// sequence drafted alone and beside others.
bool trace_proposals() {
    static const bool on = [] {
        const char * value = std::getenv("LUCERNA_TRACE_DRAFT");
        return value != nullptr && std::strcmp(value, "1") == 0;
    }();
    return on;
}

void process_or_throw(llama_context * ctx, llama_batch_ext * batch, const char * what) {
    const int32_t rc = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch);
    if (rc != 0) {
        throw ProtocolError(ErrorCode::kDecodeFailed,
                            std::string("the draft failed ") + what + " (code " + std::to_string(rc) + ")");
    }
}

}  // namespace

int32_t DflashDraft::read_block_size(const std::string & path) {
    const std::string arch = read_gguf_architecture(path);
    if (arch != "dflash") {
        throw ProtocolError(ErrorCode::kWrongArch, "--draft wants a DFlash draft (architecture dflash); " + path +
                                                       " is " + arch);
    }
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    const gguf_context_ptr ctx(gguf_init_from_file(path.c_str(), params));
    const int64_t key = ctx ? gguf_find_key(ctx.get(), "dflash.block_size") : -1;
    if (key < 0) {
        return 16;  // what common/speculative.cpp assumes for a draft without the key
    }
    switch (gguf_get_kv_type(ctx.get(), key)) {
        case GGUF_TYPE_UINT32: return static_cast<int32_t>(gguf_get_val_u32(ctx.get(), key));
        case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx.get(), key);
        default: return 16;
    }
}

std::unique_ptr<DflashDraft> DflashDraft::load(const DaemonOptions & opts) {
    read_block_size(opts.draft_path);  // checks the file and its architecture first
    std::unique_ptr<DflashDraft> draft(new DflashDraft());
    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = opts.n_gpu_layers;
    mparams.progress_callback = quiet_progress;
    draft->model_.reset(llama_model_load_from_file(opts.draft_path.c_str(), mparams));
    if (!draft->model_) {
        throw ProtocolError(ErrorCode::kLoadFailed, "the engine could not load the draft " + opts.draft_path +
                                                        " (set LUCERNA_LOG=info for its log)");
    }
    const llama_model * model = draft->model_.get();
    // DFlash2 (a selector lattice instead of logits) and the DeepSeek-V4 DSpark backbone
    // need other block layouts and readouts than the one proposer here implements.
    if (llama_model_dflash_selector_top_k(model) > 0 || !meta_string(model, "dflash.has_confidence_head").empty()) {
        throw ProtocolError(ErrorCode::kLoadFailed,
                            opts.draft_path + " is a DFlash2/DSpark draft; only DFlash (v1) drafts are supported");
    }
    const int32_t * ids = llama_model_target_layer_ids(model);
    draft->layer_ids_.assign(ids, ids + llama_model_target_layer_ids_n(model));
    draft->mask_token_ = llama_vocab_mask(llama_model_get_vocab(model));
    draft->causal_ = meta_string(model, "dflash.attention.causal") == "true";
    if (draft->layer_ids_.empty() || draft->mask_token_ < 0) {
        throw ProtocolError(ErrorCode::kLoadFailed,
                            opts.draft_path + " has no target_layers or no mask token; not a usable DFlash draft");
    }
    return draft;
}

DflashDraft::~DflashDraft() { detach(); }

void DflashDraft::attach(llama_context * target, const DaemonOptions & opts, int32_t block_size) {
    detach();
    const llama_model * target_model = llama_get_model(target);
    n_embd_target_ = llama_model_n_embd(target_model);
    const int32_t n_layer_target = llama_model_n_layer(target_model);
    if (llama_model_n_embd(model_.get()) != n_embd_target_) {
        throw ProtocolError(ErrorCode::kContextFailed,
                            "the draft's hidden size " + std::to_string(llama_model_n_embd(model_.get())) +
                                " is not the target's " + std::to_string(n_embd_target_));
    }
    if (llama_vocab_n_tokens(llama_model_get_vocab(model_.get())) !=
        llama_vocab_n_tokens(llama_model_get_vocab(target_model))) {
        throw ProtocolError(ErrorCode::kContextFailed, "the draft's vocabulary is not the target's");
    }
    for (const int32_t lid : layer_ids_) {
        // Layer inputs: index n_layer is the input of the final norm, the last valid one.
        if (lid < 0 || lid > n_layer_target) {
            throw ProtocolError(ErrorCode::kContextFailed, "the draft reads target layer " + std::to_string(lid) +
                                                               "; the target has " + std::to_string(n_layer_target));
        }
    }
    for (const int32_t lid : layer_ids_) {
        llama_set_embeddings_layer_inp(target, static_cast<uint32_t>(lid), true);
    }

    const auto n_seq = static_cast<uint32_t>(std::max(1, opts.parallel));
    llama_context_params cparams = llama_context_default_params();
    // Committed positions plus one block past them per sequence, for the noise blocks.
    // One pool for all sequences, as the target's (engine.cpp): a sequence may hold
    // every position the target's pool has room for.
    cparams.n_ctx = llama_n_ctx(target) + n_seq * static_cast<uint32_t>(block_size);
    // One ingest is at most a prefill chunk beside a verified block per sequence; the
    // noise blocks are a block per sequence. Each stays one engine batch.
    cparams.n_batch = static_cast<uint32_t>(std::max(std::min<int32_t>(opts.chunk, llama_n_ctx(target)), block_size));
    if (n_seq > 1) {
        cparams.n_batch += n_seq * static_cast<uint32_t>(block_size);
    }
    cparams.n_ubatch = cparams.n_batch;
    cparams.n_seq_max = n_seq;
    cparams.kv_unified = true;
    cparams.flash_attn_type = static_cast<llama_flash_attn_type>(opts.flash_attn);
    cparams.n_threads = opts.n_threads;
    cparams.n_threads_batch = opts.n_threads;
    cparams.no_perf = true;
    cparams.ctx_other = target;
    std::vector<llama_sampler_seq_config> device_samplers(n_seq);
    samplers_.clear();
    for (uint32_t seq = 0; seq < n_seq; ++seq) {
        // A tree verify ranks each position's top candidates by probability
        // (engine/candidate_sampler.h); a chain step takes each position's argmax.
        if (opts.draft_tree > 0) {
            samplers_.emplace_back(make_candidate_sampler_chain(opts.draft_tree_branches));
        } else {
            samplers_.emplace_back(llama_sampler_chain_init(llama_sampler_chain_default_params()));
            llama_sampler_chain_add(samplers_.back().get(), llama_sampler_init_greedy());
        }
        device_samplers[seq] = {static_cast<llama_seq_id>(seq), samplers_.back().get()};
    }
    cparams.samplers = device_samplers.data();
    cparams.n_samplers = n_seq;
    cparams.n_outputs_max_per_seq = static_cast<uint32_t>(block_size);  // one pick per proposal
    context_.reset(llama_init_from_model(model_.get(), cparams));
    if (!context_) {
        // A backend that cannot sample: the logits rows on the host instead.
        samplers_.clear();
        cparams.samplers = nullptr;
        cparams.n_samplers = 0;
        cparams.n_outputs_max_per_seq = 0;
        context_.reset(llama_init_from_model(model_.get(), cparams));
    }
    if (!context_) {
        throw ProtocolError(ErrorCode::kContextFailed, "the engine could not create the draft's context");
    }
    // What common/speculative.cpp sets for a DFlash (v1) draft: masked nextn outputs,
    // and non-causal attention inside the block unless the draft was trained causal.
    llama_set_embeddings_nextn(context_.get(), true, /*masked =*/true);
    llama_set_causal_attn(context_.get(), causal_);
    batch_.reset(llama_batch_ext_init(context_.get()));
    complete_.assign(n_seq, true);
}

void DflashDraft::detach() {
    batch_.reset();
    context_.reset();
    samplers_.clear();
}

void DflashDraft::ingest(llama_context * target, const std::vector<CommittedRows> & rows) {
    const auto n_layers = static_cast<int32_t>(layer_ids_.size());
    const int64_t row_floats = static_cast<int64_t>(n_layers) * n_embd_target_;
    const auto n_batch = static_cast<int32_t>(llama_n_batch(context_.get()));
    std::vector<const float *> layers(static_cast<size_t>(n_layers));
    for (int32_t k = 0; k < n_layers; ++k) {
        layers[static_cast<size_t>(k)] = llama_get_embeddings_layer_inp(target, static_cast<uint32_t>(layer_ids_[k]));
        if (layers[static_cast<size_t>(k)] == nullptr) {
            throw ProtocolError(ErrorCode::kDecodeFailed,
                                "the target did not capture layer " + std::to_string(layer_ids_[k]));
        }
    }
    // The draft wants, per position, the extract layers' rows side by side. Rows of
    // every span go into one batch until it is full.
    features_.resize(static_cast<size_t>(n_batch * row_floats));
    struct Entry {
        int64_t target_row;
        llama_pos pos;
        llama_seq_id seq;
    };
    std::vector<Entry> entries;
    entries.reserve(static_cast<size_t>(n_batch));
    auto flush = [&] {
        if (entries.empty()) {
            return;
        }
        llama_batch_ext_clear(batch_.get());
        for (size_t i = 0; i < entries.size(); ++i) {
            float * features = features_.data() + static_cast<int64_t>(i) * row_floats;
            for (int32_t k = 0; k < n_layers; ++k) {
                std::memcpy(features + static_cast<int64_t>(k) * n_embd_target_,
                            layers[static_cast<size_t>(k)] + entries[i].target_row * n_embd_target_,
                            static_cast<size_t>(n_embd_target_) * sizeof(float));
            }
            const llama_embd row = {features, 1, static_cast<size_t>(row_floats)};
            const int32_t idx = llama_batch_ext_add_embd(batch_.get(), entries[i].seq, row);
            set_pos(batch_.get(), idx, entries[i].pos);
        }
        process_or_throw(context_.get(), batch_.get(), "to ingest target features");
        entries.clear();
    };
    for (const CommittedRows & span : rows) {
        for (int32_t i = 0; i < span.n_rows; ++i) {
            entries.push_back({static_cast<int64_t>(span.first_row) + i, span.pos0 + i, span.seq});
            if (static_cast<int32_t>(entries.size()) == n_batch) {
                flush();
            }
        }
    }
    flush();
    // The decode may still run on the device; waiting here charges it to the draft's
    // time (stats draft_ms) instead of to whatever synchronises next.
    llama_synchronize(context_.get());
}

void DflashDraft::propose(const std::vector<Block> & blocks) {
    llama_batch_ext_clear(batch_.get());
    std::vector<int32_t> first_idx;
    first_idx.reserve(blocks.size());
    for (const Block & block : blocks) {
        block.out->clear();
        for (int32_t i = 0; i <= block.n_draft; ++i) {
            const int32_t idx = llama_batch_ext_add_token(batch_.get(), block.seq, i == 0 ? block.last : mask_token_);
            set_pos(batch_.get(), idx, block.pos + i);
            // The draft's graph computes a logits row for every token of the batch, in
            // batch order, and the engine hands out its first n_outputs rows, whichever
            // tokens asked: so every token is an output, as common/speculative.cpp
            // makes them, and batch index i reads row i. (With the anchor left out, the
            // rows handed out were shifted: one row per block.)
            llama_batch_ext_set_output_logits(batch_.get(), idx, true);
            if (i == 0) {
                first_idx.push_back(idx);
            }
        }
    }
    if (first_idx.empty()) {
        return;
    }
    process_or_throw(context_.get(), batch_.get(), "to denoise a block");
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model_.get()));
    for (size_t b = 0; b < blocks.size(); ++b) {
        const Block & block = blocks[b];
        // Each mask position's row is the proposal for that position (the anchor's row
        // proposes nothing), as common/speculative.cpp reads a DFlash (v1) block.
        if (block.candidates != nullptr) {
            block.candidates->resize(static_cast<size_t>(block.n_draft));
        }
        for (int32_t i = 1; i <= block.n_draft; ++i) {
            const int32_t idx = first_idx[b] + i;
            if (block.candidates != nullptr) {
                auto & here = (*block.candidates)[static_cast<size_t>(i - 1)];
                if (samplers_.empty() || !sampled_candidates(context_.get(), idx, here)) {
                    const float * logits = llama_get_logits_ith(context_.get(), idx);
                    if (logits == nullptr) {
                        throw ProtocolError(ErrorCode::kDecodeFailed, "the draft produced no proposal");
                    }
                    top_candidates(logits, n_vocab, block.width, here);
                }
                block.out->push_back(here[0].token);
                continue;
            }
            llama_token token = !samplers_.empty() ? llama_get_sampled_token_ith(context_.get(), idx) : LLAMA_TOKEN_NULL;
            if (token == LLAMA_TOKEN_NULL) {
                const float * logits = llama_get_logits_ith(context_.get(), idx);
                if (logits == nullptr) {
                    throw ProtocolError(ErrorCode::kDecodeFailed, "the draft produced no proposal");
                }
                token = static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
            }
            block.out->push_back(token);
        }
        if (trace_proposals()) {
            std::string ids;
            for (const llama_token token : *block.out) {
                ids += (ids.empty() ? "" : ",") + std::to_string(token);
            }
            log_line("draft seq=%d pos=%d proposals=%s", block.seq, block.pos, ids.c_str());
        }
        // The block's own K/V went into the cache with it; the verified positions' real
        // features replace them.
        llama_memory_seq_rm(llama_get_memory(context_.get()), block.seq, block.pos, -1);
    }
}

void DflashDraft::clear(llama_seq_id seq) {
    if (context_) {
        llama_memory_seq_rm(llama_get_memory(context_.get()), seq, -1, -1);
        complete_[static_cast<size_t>(seq)] = true;
    }
}

void DflashDraft::clear() {
    if (context_) {
        llama_memory_clear(llama_get_memory(context_.get()), /*data =*/false);
    }
    complete_.assign(complete_.size(), true);
}

void DflashDraft::truncate(int32_t n_tokens, llama_seq_id seq) {
    if (context_) {
        llama_memory_seq_rm(llama_get_memory(context_.get()), seq, n_tokens, -1);
    }
}

void DflashDraft::share(llama_seq_id from, llama_seq_id to, int32_t n_tokens) {
    if (!context_) {
        return;
    }
    llama_memory_t memory = llama_get_memory(context_.get());
    llama_memory_seq_rm(memory, to, -1, -1);
    llama_memory_seq_cp(memory, from, to, 0, n_tokens);
    complete_[static_cast<size_t>(to)] = complete_[static_cast<size_t>(from)];
}

bool DflashDraft::complete(llama_seq_id seq) const {
    return static_cast<size_t>(seq) >= complete_.size() || complete_[static_cast<size_t>(seq)];
}

void DflashDraft::mark_incomplete() { complete_.assign(complete_.size(), false); }

std::vector<uint8_t> DflashDraft::save_state(llama_seq_id seq) const {
    std::vector<uint8_t> state;
    if (!context_ || !complete(seq)) {
        return state;
    }
    state.resize(llama_state_seq_get_size(context_.get(), seq));
    if (state.empty() || llama_state_seq_get_data(context_.get(), state.data(), state.size(), seq) != state.size()) {
        state.clear();
    }
    return state;
}

bool DflashDraft::load_state(const std::vector<uint8_t> & state, llama_seq_id seq) {
    clear(seq);
    if (state.empty() || llama_state_seq_set_data(context_.get(), state.data(), state.size(), seq) == 0) {
        clear(seq);
        complete_[static_cast<size_t>(seq)] = false;
        return false;
    }
    return true;
}

uint64_t DflashDraft::model_bytes() const { return model_ ? llama_model_size(model_.get()) : 0; }

}  // namespace lucerna
