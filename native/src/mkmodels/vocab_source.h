// Copying GGUF key/values: the real tokenizers that ship with the engine
// (<src>/models/ggml-vocab-*.gguf) into a test model's metadata, and the keys the
// engine's model saver does not write back (chat template, DFlash target layers).
#pragma once

#include <string>

#include "ggml-cpp.h"

namespace lucerna::mkmodels {

// Opens a GGUF for its metadata only; throws std::runtime_error naming the path.
gguf_context_ptr open_gguf_metadata(const std::string & path);

// Copies the value of key `key_id` of `src` into `dst` under the same key.
void copy_kv(gguf_context * dst, const gguf_context * src, int64_t key_id);

// Copies every key of `src` that starts with `prefix` into `dst`.
void copy_kvs_with_prefix(gguf_context * dst, const gguf_context * src, const std::string & prefix);

// Copies every key of `src` that `dst` does not have yet.
void copy_missing_kvs(gguf_context * dst, const gguf_context * src);

}  // namespace lucerna::mkmodels
