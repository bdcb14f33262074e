// Reading general.architecture from a GGUF header without loading any weights, so a
// daemon refuses a model it does not serve before spending time (and VRAM) on it.
#pragma once

#include <cstdint>
#include <string>

namespace lucerna {

// Throws ProtocolError: model_not_found if the path is missing, load_failed if the
// file is not a readable GGUF or has no general.architecture.
std::string read_gguf_architecture(const std::string & path);

// <arch>.context_length from the header, 0 when absent: for a vocabulary-only load,
// where the engine reads no hyperparameters.
int32_t read_gguf_context_length(const std::string & path, const std::string & arch);

}  // namespace lucerna
