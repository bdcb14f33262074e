#include "daemon/roles.h"

namespace lucerna {

const RoleInfo & role_info(Role role) {
    static const RoleInfo kQwen35 = {"qwen35", "lucerna-qwen35", {"qwen35", "qwen35moe", "qwen3", "gemma3", "llama"},
                                     true};
    static const RoleInfo kLaguna = {"laguna", "lucerna-laguna", {"laguna", "deepseek4"}, true};
    static const RoleInfo kPflash = {"pflash", "lucerna-pflash", {"qwen3", "qwen35", "gemma3", "llama"}, true};
    static const RoleInfo kDs4Shard = {"ds4_shard", "lucerna-ds4-shard", {"deepseek4"}, false};
    switch (role) {
        case Role::kQwen35: return kQwen35;
        case Role::kLaguna: return kLaguna;
        case Role::kPflash: return kPflash;
        case Role::kDs4Shard: return kDs4Shard;
    }
    return kQwen35;
}

std::string joined_archs(const RoleInfo & info) {
    std::string out;
    for (const auto & arch : info.archs) {
        out += (out.empty() ? "" : ",") + arch;
    }
    return out;
}

}  // namespace lucerna
