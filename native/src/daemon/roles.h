// The four daemon roles (PROTOCOL.md section 1): which GGUF architectures each one
// serves and which commands it answers.
#pragma once

#include <string>
#include <vector>

namespace lucerna {

enum class Role { kQwen35, kLaguna, kPflash, kDs4Shard };

struct RoleInfo {
    const char * name;    // "qwen35": the role= value of the ready line
    const char * binary;  // "lucerna-qwen35"
    std::vector<std::string> archs;
    // Generating roles hold a llama_context and answer generate/tokenize/...; the
    // DeepSeek-V4 expert shard holds no weights of its own: it serves its device over
    // ggml RPC and the target daemon places tensors there (PROTOCOL.md 5.8).
    bool generates;
};

const RoleInfo & role_info(Role role);

// Comma-separated archs, for messages: "qwen35,qwen35moe,qwen3,gemma3,llama".
std::string joined_archs(const RoleInfo & info);

}  // namespace lucerna
