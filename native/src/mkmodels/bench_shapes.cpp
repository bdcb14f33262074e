#include "mkmodels/bench_shapes.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include "ggml-cpp.h"
#include "gguf.h"
#include "llama-arch.h"
#include "llama-cpp.h"
#include "llama-ext.h"
#include "llama-model-saver.h"
#include "llama-model.h"
#include "mkmodels/cpu_engine.h"
#include "mkmodels/random_weights.h"
#include "mkmodels/vocab_source.h"

namespace lucerna::mkmodels {
namespace {

using u32 = uint32_t;

constexpr u32 kVocab = 248320;         // Qwen3.5/3.6 (151936 real tokens + padding rows)
constexpr u32 kEmbd = 5120;
constexpr u32 kFeedForward = 17408;
constexpr u32 kMaskToken = 248070;     // the published drafts' mask id, inside the padding
constexpr u32 kDraftLayers = 5;

struct Shape {
    const char * name;
    const char * description;
    llm_arch arch;
    const char * default_ftype;
    // Tensors the engine can create for this architecture but a converted checkpoint of
    // this shape does not have (matched on the name after "blk.N."): optional biases,
    // sinks and norms, and for the draft what it shares with its target. Leaving them in
    // would add work to every forward pass that the real model does not do.
    std::vector<std::string> absent;
};

const std::vector<Shape> & shapes() {
    static const std::vector<Shape> all = {
        {"qwen36-27b", "Qwen3.6-27B target shape (qwen35 arch, 64 layers, 5120 wide), random weights, Q4_K_M",
         LLM_ARCH_QWEN35, "q4_k_m", {"attn_q.bias", "attn_k.bias", "attn_v.bias"}},
        {"dflash-27b", "DFlash draft of the published 27B draft's shape (5 layers, block 16), random weights, Q8_0",
         LLM_ARCH_DFLASH, "q8_0",
         {"token_embd.weight", "output.weight", "attn_sinks.weight", "layer_output_scale.weight",
          "post_attention_norm.weight", "post_ffw_norm.weight", "rope_freqs.weight"}},
        {"qwen3-0.6b", "Qwen3-0.6B shape (qwen3 arch, 28 layers, 1024 wide, tied embeddings): the PFlash drafter, "
                       "random weights, Q8_0",
         LLM_ARCH_QWEN3, "q8_0", {"output.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias"}},
    };
    return all;
}

bool ends_with(const std::string & text, const std::string & suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether a tensor the engine created goes into the file.
bool present(const Shape & shape, const std::string & name) {
    // Per-tensor quantisation scales the engine adds to every matmul weight when it
    // builds a model without a file; converted checkpoints have none.
    if (ends_with(name, ".scale") || ends_with(name, ".input_scale")) {
        return false;
    }
    std::string local = name;
    if (name.rfind("blk.", 0) == 0) {
        local = name.substr(name.find('.', 4) + 1);
    }
    return std::find(shape.absent.begin(), shape.absent.end(), local) == shape.absent.end();
}

const Shape & shape_named(const std::string & name) {
    for (const auto & shape : shapes()) {
        if (name == shape.name) {
            return shape;
        }
    }
    throw std::runtime_error("unknown --shape '" + name + "' (see --list)");
}

llama_ftype ftype_named(const std::string & name) {
    if (name == "q4_k_m") return LLAMA_FTYPE_MOSTLY_Q4_K_M;
    if (name == "q8_0") return LLAMA_FTYPE_MOSTLY_Q8_0;
    if (name == "f16") return LLAMA_FTYPE_MOSTLY_F16;
    if (name == "bf16") return LLAMA_FTYPE_MOSTLY_BF16;
    throw std::runtime_error("unknown --ftype '" + name + "': use q4_k_m, q8_0, f16 or bf16");
}

// DFlash's helper for which target layers a draft reads (evenly spread from layer 1 to
// n - 3), plus one: GGUF target_layers name layer *inputs*, HF names layer outputs.
std::vector<u32> draft_target_layers(int32_t n_target_layers) {
    std::vector<u32> ids;
    const double start = 1.0;
    const double end = std::max(1.0, static_cast<double>(n_target_layers) - 3.0);
    for (u32 i = 0; i < kDraftLayers; ++i) {
        const double at = start + (end - start) * i / (kDraftLayers - 1);
        ids.push_back(std::min<u32>(static_cast<u32>(std::lround(at)) + 1, static_cast<u32>(n_target_layers)));
    }
    return ids;
}

void add_keys(llama_model_saver & ms, const Shape & shape, const ShapeOptions & opts) {
    ms.add_kv(LLM_KV_GENERAL_ARCHITECTURE, llm_arch_name(shape.arch));
    ms.add_kv(LLM_KV_GENERAL_NAME, (std::string("lucerna-bench-") + shape.name).c_str());
    ms.add_kv(LLM_KV_ATTENTION_LAYERNORM_RMS_EPS, 1e-6f);
    if (shape.arch == LLM_ARCH_QWEN3) {
        // Qwen3-0.6B's config.json: 28 layers, hidden 1024, intermediate 3072, 16 query /
        // 8 KV heads of 128, rope theta 1e6, tied embeddings. 131072 positions (the
        // checkpoint's 40960 with YaRN, which random weights do not need) for 128K runs.
        ms.add_kv(LLM_KV_CONTEXT_LENGTH, u32(131072));
        ms.add_kv(LLM_KV_EMBEDDING_LENGTH, u32(1024));
        ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, u32(3072));
        ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 1000000.0f);
        ms.add_kv(LLM_KV_BLOCK_COUNT, u32(28));
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT, u32(16));
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT_KV, u32(8));
        ms.add_kv(LLM_KV_ATTENTION_KEY_LENGTH, u32(128));
        ms.add_kv(LLM_KV_ATTENTION_VALUE_LENGTH, u32(128));
        return;
    }
    ms.add_kv(LLM_KV_CONTEXT_LENGTH, u32(262144));
    ms.add_kv(LLM_KV_EMBEDDING_LENGTH, kEmbd);
    ms.add_kv(LLM_KV_FEED_FORWARD_LENGTH, kFeedForward);
    ms.add_kv(LLM_KV_ROPE_FREQ_BASE, 10000000.0f);
    if (shape.arch == LLM_ARCH_QWEN35) {
        ms.add_kv(LLM_KV_BLOCK_COUNT, static_cast<u32>(opts.target_layers));
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT, u32(24));
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT_KV, u32(4));
        ms.add_kv(LLM_KV_ATTENTION_KEY_LENGTH, u32(256));
        ms.add_kv(LLM_KV_ATTENTION_VALUE_LENGTH, u32(256));
        ms.add_kv(LLM_KV_ROPE_DIMENSION_COUNT, u32(64));
        ms.add_kv(LLM_KV_ROPE_DIMENSION_SECTIONS, std::vector<u32>{11, 11, 10, 0});
        ms.add_kv(LLM_KV_FULL_ATTENTION_INTERVAL, u32(4));
        ms.add_kv(LLM_KV_SSM_CONV_KERNEL, u32(4));
        ms.add_kv(LLM_KV_SSM_STATE_SIZE, u32(128));
        ms.add_kv(LLM_KV_SSM_GROUP_COUNT, u32(16));   // key heads
        ms.add_kv(LLM_KV_SSM_TIME_STEP_RANK, u32(48));  // value heads
        ms.add_kv(LLM_KV_SSM_INNER_SIZE, u32(48 * 128));
    } else {
        ms.add_kv(LLM_KV_BLOCK_COUNT, kDraftLayers);
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT, u32(32));
        ms.add_kv(LLM_KV_ATTENTION_HEAD_COUNT_KV, u32(8));
        ms.add_kv(LLM_KV_ATTENTION_KEY_LENGTH, u32(128));
        ms.add_kv(LLM_KV_ATTENTION_VALUE_LENGTH, u32(128));
        ms.add_kv(LLM_KV_ROPE_DIMENSION_SECTIONS, std::vector<u32>{64, 0, 0, 0});
        ms.add_kv(LLM_KV_TARGET_LAYERS, draft_target_layers(opts.target_layers));
        ms.add_kv(LLM_KV_DFLASH_BLOCK_SIZE, u32(16));
        ms.add_kv(LLM_KV_TOKENIZER_MASK_ID, kMaskToken);
    }
}

// The engine's Qwen tokenizer, its token list padded to `n_vocab` with unused tokens.
void add_padded_tokenizer(gguf_context * meta, const std::string & vocab_dir, u32 n_vocab) {
    const gguf_context_ptr vocab = open_gguf_metadata(vocab_dir + "/ggml-vocab-qwen35.gguf");
    copy_kvs_with_prefix(meta, vocab.get(), "tokenizer.");
    const int64_t tokens_key = gguf_find_key(meta, "tokenizer.ggml.tokens");
    const int64_t types_key = gguf_find_key(meta, "tokenizer.ggml.token_type");
    const size_t n_real = gguf_get_arr_n(meta, tokens_key);
    std::vector<std::string> names;
    for (size_t i = 0; i < n_real; ++i) {
        names.emplace_back(gguf_get_arr_str(meta, tokens_key, i));
    }
    std::vector<int32_t> types(static_cast<const int32_t *>(gguf_get_arr_data(meta, types_key)),
                               static_cast<const int32_t *>(gguf_get_arr_data(meta, types_key)) + n_real);
    for (size_t i = n_real; i < n_vocab; ++i) {
        names.push_back("<|lucerna_pad_" + std::to_string(i) + "|>");
        types.push_back(LLAMA_TOKEN_TYPE_UNUSED);
    }
    std::vector<const char *> pointers;
    for (const auto & name : names) {
        pointers.push_back(name.c_str());
    }
    gguf_set_arr_str(meta, "tokenizer.ggml.tokens", pointers.data(), pointers.size());
    gguf_set_arr_data(meta, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), types.size());
}

void no_fill(ggml_tensor *, void *) {}

// Residual-branch scale of the 27B target. Every branch (attention, Gated DeltaNet, FFN)
// reads an RMS-normalised stream, and with the test models' init each layer added an
// update far larger than the token's embedding (rows of 1/sqrt(n_embd)), unlike a
// trained model, whose layers each add a small update to a stream its embedding starts.
// So: the branches' output projections (attn_output, ssm_out, ffn_down) get GPT-2's
// 1/sqrt(2 * n_layers) and the embedding rows unit values, and the whole stack adds
// about as much as the embedding holds (the stream's largest |x| 3.9 after layer 0, 4.7
// after layer 3 of the 4-layer cut). The LM head's successor term below needs that.
constexpr float kEmbeddingStddev = 1.0f;
// The LM head. Gaussian rows alone give logits of one std whose top two, out of 248320,
// lie about 0.2 std apart (an exponential spread: many far closer), while CUDA and the
// CPU round every matmul's activations differently (q8_1 against q8_K), and even two CPU
// roundings moved logits by a few percent of that std: near-ties every few tokens (issue
// 14 item 4), whatever the head's scale, since the difference scales with it. A trained
// model's top token stands clear of the rest. So each head row is kHeadNoise std of its
// own plus the embedding row of one token, scaled to give a logit near kSuccessorLogit
// when the final hidden state points that token's way: with the embedding dominating the stream, the token after t is mostly t's
// successor (a fixed shift of whole pieces, below), several nats above the rest, and the
// layers move every other logit by the context. Measured: git show
// 7a0c96e:docs/benchmarks.md, "Why CUDA and the CPU still parted with generator 2"; the
// CUDA parity it gives: docs/benchmarks.md, "Parity".
constexpr float kHeadNoise = 2.0f;
constexpr float kSuccessorLogit = 16.0f;
// Token t's successor is t - kSuccessorShift pieces (mod the whole pieces), so
// successive greedy ids are far apart; 611 is coprime with 1217, the vocabulary's whole
// pieces of 204 rows, so the walk visits them all.
constexpr int64_t kSuccessorShift = 611;

// How a bench-shape tensor is initialised: the test models' rule (weight_init_for),
// with the 27B target's residual and head scales above.
WeightInit bench_weight_init(const Shape & shape, const ggml_tensor & tensor, int32_t n_layers) {
    WeightInit init = weight_init_for(tensor);
    if (shape.arch != LLM_ARCH_QWEN35) {
        return init;
    }
    const std::string name = tensor.name;
    if (ends_with(name, ".attn_output.weight") || ends_with(name, ".ssm_out.weight") ||
        ends_with(name, ".ffn_down.weight")) {
        init.stddev *= static_cast<float>(1.0 / std::sqrt(2.0 * n_layers));
    } else if (name == "token_embd.weight") {
        init.stddev = kEmbeddingStddev;
    } else if (name == "output.weight") {
        init.stddev *= kHeadNoise;
    }
    return init;
}

// One unit of work: `n_rows` rows of a tensor starting at `row`.
struct Piece {
    const ggml_tensor * tensor;  // the probe's tensor: name, shape
    WeightInit init;
    ggml_type type;
    size_t file_offset;          // where row 0 of the tensor goes
    int64_t row;
    int64_t n_rows;
    size_t pool_entry = 0;       // with --piece-pool: which pooled piece holds its bytes
    // The 27B target's LM head: the embedding piece whose values this piece adds, times
    // mirror_scale (kSuccessorLogit above); none elsewhere.
    const ggml_tensor * mirror = nullptr;
    int64_t mirror_row = 0;
    float mirror_scale = 0.0f;
};

uint64_t splitmix64(uint64_t & state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Near-normal values, fast: each is the sum of four 16-bit uniforms (Irwin-Hall), centred
// and scaled to unit variance. Weights only need the right scale for activations to stay
// sane; these files are for timing, and 27 billion Box-Muller draws would take minutes.
void fill_random(float * out, int64_t n, uint64_t seed, float mean, float stddev) {
    uint64_t state = seed;
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) per unit of 1/65536
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(state);
        const float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
        out[i] = mean + stddev * (sum - 2.0f * 65535.5f) * kScale;
    }
}

// The bytes of one piece: random values at the tensor's init scale, in its stored type.
void encode_piece(const Piece & piece, uint64_t seed, std::vector<float> & values, std::vector<uint8_t> & bytes) {
    const int64_t n_per_row = piece.tensor->ne[0];
    const int64_t n = piece.n_rows * n_per_row;
    values.resize(static_cast<size_t>(n));
    const WeightInit & init = piece.init;
    // A piece's values depend on the tensor and its first row only, so the file is the
    // same whatever the thread count.
    const auto stream = [seed](const ggml_tensor * tensor, int64_t row) {
        return seed ^ fnv1a64(tensor->name) ^ (static_cast<uint64_t>(row) * 0x9e3779b97f4a7c15ULL);
    };
    fill_random(values.data(), n, stream(piece.tensor, piece.row), init.mean, init.stddev);
    if (piece.mirror != nullptr) {
        // The very values the mirrored embedding piece was written from.
        std::vector<float> mirrored(static_cast<size_t>(n));
        fill_random(mirrored.data(), n, stream(piece.mirror, piece.mirror_row), 0.0f, kEmbeddingStddev);
        for (int64_t i = 0; i < n; ++i) {
            values[i] += piece.mirror_scale * mirrored[i];
        }
    }
    const size_t row_size = ggml_row_size(piece.type, n_per_row);
    bytes.resize(row_size * static_cast<size_t>(piece.n_rows));
    switch (piece.type) {
        case GGML_TYPE_F32: std::memcpy(bytes.data(), values.data(), bytes.size()); break;
        case GGML_TYPE_F16:
            ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t *>(bytes.data()), n);
            break;
        case GGML_TYPE_BF16:
            ggml_fp32_to_bf16_row(values.data(), reinterpret_cast<ggml_bf16_t *>(bytes.data()), n);
            break;
        default:
            ggml_quantize_chunk(piece.type, values.data(), bytes.data(), 0, piece.n_rows, n_per_row, nullptr);
    }
}

void write_piece(int fd, const Piece & piece, const std::vector<uint8_t> & bytes) {
    const size_t row_size = ggml_row_size(piece.type, piece.tensor->ne[0]);
    const size_t at = piece.file_offset + static_cast<size_t>(piece.row) * row_size;
    for (size_t done = 0; done < bytes.size();) {
        const ssize_t wrote = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
        if (wrote <= 0) {
            throw std::runtime_error(std::string("write failed: ") + std::strerror(errno));
        }
        done += static_cast<size_t>(wrote);
    }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> bench_shapes() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto & shape : shapes()) {
        out.emplace_back(shape.name, shape.description);
    }
    return out;
}

std::string write_bench_shape(const ShapeOptions & opts) {
    const auto t0 = std::chrono::steady_clock::now();
    const Shape & shape = shape_named(opts.shape);
    const bool drafter = shape.arch == LLM_ARCH_QWEN3;
    if (opts.target_layers < 4 || opts.target_layers % 4 != 0) {
        throw std::runtime_error("--layers must be a multiple of 4 (every 4th layer is full attention)");
    }
    const llama_ftype ftype = ftype_named(opts.ftype.empty() ? shape.default_ftype : opts.ftype);

    gguf_context_ptr meta(gguf_init_empty());
    {
        llama_model_saver ms(shape.arch, meta.get());
        add_keys(ms, shape, opts);
    }
    // The drafter keeps Qwen3's own 151936-token vocabulary (PFlash round-trips text
    // between vocabularies); the 27B shapes pad it to Qwen3.5's 248320 rows.
    add_padded_tokenizer(meta.get(), opts.vocab_dir, drafter ? 0 : kVocab);

    // The engine creates every tensor the metadata implies, without memory for weights.
    llama_model_params mparams = cpu_model_params();
    mparams.no_alloc = true;
    uint64_t seed = opts.seed;
    const llama_model_ptr probe(llama_model_init_from_user(meta.get(), no_fill, &seed, mparams));
    if (!probe) {
        throw std::runtime_error("the engine refused the " + opts.shape + " metadata (run with --verbose)");
    }

    llama_model_saver saver(probe.get());
    saver.add_kv_from_model();
    copy_missing_kvs(saver.gguf_ctx, meta.get());
    gguf_set_val_u32(saver.gguf_ctx, "general.file_type", static_cast<u32>(ftype));

    // The tensors of a converted checkpoint of this shape, in name order.
    std::vector<std::pair<std::string, ggml_tensor *>> tensors;
    for (const auto & [name, tensor] : probe->tensors_by_name) {
        if (present(shape, name)) {
            tensors.emplace_back(name, tensor);
        }
    }
    std::sort(tensors.begin(), tensors.end(), [](const auto & a, const auto & b) { return a.first < b.first; });
    tensors.erase(std::unique(tensors.begin(), tensors.end(),
                              [](const auto & a, const auto & b) { return a.first == b.first; }),
                  tensors.end());

    // The engine's own type choice for the ftype (llama-quantize's recipe: Q6_K for the
    // output and half of attn_v / ffn_down under Q4_K_M, and so on).
    llama_model_quantize_params qparams = llama_model_quantize_default_params();
    qparams.ftype = ftype;
    quantize_state_impl * qs = llama_quant_init(probe.get(), &qparams);
    std::vector<ggml_tensor *> quantizable;
    for (const auto & entry : tensors) {
        if (llama_quant_tensor_allows_quantization(qs, entry.second)) {
            quantizable.push_back(entry.second);
        }
    }
    std::vector<ggml_type> types(quantizable.size());
    llama_quant_compute_types(qs, ftype, quantizable.data(), types.data(), quantizable.size());
    llama_quant_free(qs);

    uint64_t n_params = 0;
    for (const auto & [name, tensor] : tensors) {
        gguf_add_tensor(saver.gguf_ctx, tensor);
        n_params += static_cast<uint64_t>(ggml_nelements(tensor));
    }
    for (size_t i = 0; i < quantizable.size(); ++i) {
        gguf_set_tensor_type(saver.gguf_ctx, quantizable[i]->name, types[i]);
    }

    std::filesystem::create_directories(opts.out_dir);
    const std::string suffix = shape.arch == LLM_ARCH_QWEN35 && opts.target_layers != 64
                                   ? "-" + std::to_string(opts.target_layers) + "l"
                                   : (shape.arch == LLM_ARCH_DFLASH && opts.target_layers != 64
                                          ? "-for-" + std::to_string(opts.target_layers) + "l"
                                          : "");
    const std::string path = opts.out_dir + "/" + shape.name + suffix + ".gguf";
    const std::string tmp = path + ".partial";
    const size_t meta_size = gguf_get_meta_size(saver.gguf_ctx);
    std::vector<uint8_t> meta_bytes(meta_size);
    gguf_get_meta_data(saver.gguf_ctx, meta_bytes.data());

    std::vector<Piece> pieces;
    uint64_t total_bytes = meta_size;
    const auto embedding_entry = std::lower_bound(tensors.begin(), tensors.end(), std::string("token_embd.weight"),
                                                  [](const auto & entry, const std::string & key) {
                                                      return entry.first < key;
                                                  });
    const ggml_tensor * embedding = embedding_entry != tensors.end() && embedding_entry->first == "token_embd.weight"
                                        ? embedding_entry->second
                                        : nullptr;
    for (int64_t i = 0; i < gguf_get_n_tensors(saver.gguf_ctx); ++i) {
        const std::string name = gguf_get_tensor_name(saver.gguf_ctx, i);
        const ggml_tensor * tensor = std::lower_bound(tensors.begin(), tensors.end(), name,
                                                      [](const auto & entry, const std::string & key) {
                                                          return entry.first < key;
                                                      })->second;
        const ggml_type type = gguf_get_tensor_type(saver.gguf_ctx, i);
        const size_t offset = meta_size + gguf_get_tensor_offset(saver.gguf_ctx, i);
        const int64_t rows = ggml_nelements(tensor) / tensor->ne[0];
        const WeightInit init = bench_weight_init(shape, *tensor, opts.target_layers);
        // About a million values per piece: enough work per pwrite, small buffers.
        const int64_t per_piece = std::max<int64_t>(1, (int64_t{1} << 20) / tensor->ne[0]);
        for (int64_t row = 0; row < rows; row += per_piece) {
            pieces.push_back({tensor, init, type, offset, row, std::min(per_piece, rows - row)});
            if (name == "output.weight" && embedding != nullptr && embedding->ne[0] == tensor->ne[0] &&
                shape.arch == LLM_ARCH_QWEN35 && row + per_piece <= rows) {
                // Whole pieces only: the head's piece p carries embedding piece p + shift,
                // so row r of it is the successor of token r + shift * per_piece.
                const int64_t whole = rows / per_piece;
                Piece & piece = pieces.back();
                piece.mirror = embedding;
                piece.mirror_row = ((row / per_piece + kSuccessorShift) % whole) * per_piece;
                // logit = scale * e . h with |h| = sqrt(n_embd) and e . h near n_embd / sqrt(2)
                // (the stream half embedding, half the layers' updates).
                piece.mirror_scale = static_cast<float>(kSuccessorLogit * std::sqrt(2.0) / tensor->ne[0]);
            }
        }
        total_bytes = std::max<uint64_t>(total_bytes, offset + gguf_get_tensor_size(saver.gguf_ctx, i));
    }

    const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
    }
    if (::pwrite(fd, meta_bytes.data(), meta_bytes.size(), 0) != static_cast<ssize_t>(meta_bytes.size()) ||
        ::ftruncate(fd, static_cast<off_t>(total_bytes)) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    }
    std::fprintf(stderr, "mkmodels: %s: %zu tensors, %.2f B parameters, %.2f GB to write, %zu pieces\n", path.c_str(),
                 tensors.size(), static_cast<double>(n_params) / 1e9, static_cast<double>(total_bytes) / 1e9,
                 pieces.size());

    // With a piece pool, pieces of one kind (stored type, rows, row width, init) take
    // their bytes from `piece_pool` random pieces of that kind, encoded once: quantizing
    // 27 billion values is most of the three minutes a distinct-valued target takes, and
    // a forward pass costs the same whatever the weights' values are.
    std::vector<Piece> pooled;  // the pieces that are encoded: all of them without a pool
    if (opts.piece_pool > 0) {
        std::map<std::tuple<int, int64_t, int64_t, float, float, uint64_t, bool>, size_t> entries;
        for (auto & piece : pieces) {
            const WeightInit & init = piece.init;
            // The LM head and the embedding keep distinct rows: pooled head rows give
            // many ids the very same logit, so the top of a distribution is an exact
            // tie that CUDA and the CPU may break apart, and pooled embedding rows give
            // many tokens the same successor (kSuccessorShift above).
            const bool distinct = std::strcmp(piece.tensor->name, "output.weight") == 0 ||
                                  std::strcmp(piece.tensor->name, "token_embd.weight") == 0;
            const uint64_t variant = distinct ? static_cast<uint64_t>(piece.row)
                                              : (fnv1a64(piece.tensor->name) ^ static_cast<uint64_t>(piece.row) * 0x9e3779b97f4a7c15ULL) %
                                                    static_cast<uint64_t>(opts.piece_pool);
            const auto key = std::make_tuple(static_cast<int>(piece.type), piece.tensor->ne[0], piece.n_rows,
                                             init.mean, init.stddev, variant, distinct);
            const auto [it, added] = entries.emplace(key, pooled.size());
            if (added) {
                pooled.push_back(piece);
            }
            piece.pool_entry = it->second;
        }
        std::fprintf(stderr, "mkmodels: %s: %zu pieces drawn from %zu pooled ones\n", shape.name, pieces.size(),
                     pooled.size());
    }
    std::vector<std::vector<uint8_t>> pool_bytes(pooled.size());

    const int32_t n_threads = opts.threads > 0 ? opts.threads
                                               : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    std::mutex error_mutex;
    std::string error;
    // Runs `work(i)` for i in [0, n) on the threads; the first error stops the rest.
    auto in_parallel = [&](size_t n, const auto & work) {
        std::atomic<size_t> next{0};
        std::atomic<size_t> done{0};
        auto worker = [&] {
            std::vector<float> values;
            std::vector<uint8_t> bytes;
            for (size_t i = next++; i < n; i = next++) {
                try {
                    work(i, values, bytes);
                } catch (const std::exception & e) {
                    const std::lock_guard<std::mutex> lock(error_mutex);
                    error = e.what();
                    next = n;
                    return;
                }
                const size_t finished = ++done;
                if (finished % std::max<size_t>(1, n / 20) == 0) {
                    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    std::fprintf(stderr, "mkmodels: %s %3.0f%% (%.0f s)\n", shape.name,
                                 100.0 * static_cast<double>(finished) / static_cast<double>(n), secs);
                }
            }
        };
        std::vector<std::thread> threads;
        for (int32_t t = 0; t < n_threads; ++t) {
            threads.emplace_back(worker);
        }
        for (auto & thread : threads) {
            thread.join();
        }
    };
    in_parallel(pooled.size(), [&](size_t i, std::vector<float> & values, std::vector<uint8_t> &) {
        encode_piece(pooled[i], opts.seed, values, pool_bytes[i]);
    });
    if (error.empty()) {
        in_parallel(pieces.size(), [&](size_t i, std::vector<float> & values, std::vector<uint8_t> & bytes) {
            if (pooled.empty()) {
                encode_piece(pieces[i], opts.seed, values, bytes);
                write_piece(fd, pieces[i], bytes);
            } else {
                write_piece(fd, pieces[i], pool_bytes[pieces[i].pool_entry]);
            }
        });
    }
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!error.empty() || !synced) {
        throw std::runtime_error("writing " + tmp + " failed: " + (error.empty() ? "fsync" : error));
    }
    std::filesystem::rename(tmp, path);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "mkmodels: %s -> %s (%.2f GB, %.1f s on %d threads)\n", shape.name, path.c_str(),
                 static_cast<double>(total_bytes) / 1e9, secs, n_threads);
    return path;
}

}  // namespace lucerna::mkmodels
