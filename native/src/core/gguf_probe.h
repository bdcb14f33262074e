// Reading general.architecture from a GGUF header without loading any weights, so a
// daemon refuses a model it does not serve before spending time (and VRAM) on it.
#pragma once

#include <string>

namespace lucerna {

// Throws ProtocolError: model_not_found if the path is missing, load_failed if the
// file is not a readable GGUF or has no general.architecture.
std::string read_gguf_architecture(const std::string & path);

}  // namespace lucerna
