#include "engine/gguf_probe.h"

#include <filesystem>
#include <system_error>

#include "ggml-cpp.h"
#include "gguf.h"
#include "wire/errors.h"

namespace lucerna {

std::string read_gguf_architecture(const std::string & path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw ProtocolError(ErrorCode::kModelNotFound, "model file " + path + " does not exist");
    }
    if (!std::filesystem::is_regular_file(path, ec)) {
        throw ProtocolError(ErrorCode::kLoadFailed, path + " is not a regular file");
    }
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    const gguf_context_ptr ctx(gguf_init_from_file(path.c_str(), params));
    if (!ctx) {
        throw ProtocolError(ErrorCode::kLoadFailed, path + " is not a readable GGUF file");
    }
    const int64_t key = gguf_find_key(ctx.get(), "general.architecture");
    if (key < 0 || gguf_get_kv_type(ctx.get(), key) != GGUF_TYPE_STRING) {
        throw ProtocolError(ErrorCode::kLoadFailed, path + " has no general.architecture");
    }
    return gguf_get_val_str(ctx.get(), key);
}

int32_t read_gguf_context_length(const std::string & path, const std::string & arch) {
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    const gguf_context_ptr ctx(gguf_init_from_file(path.c_str(), params));
    if (!ctx) {
        return 0;
    }
    const int64_t key = gguf_find_key(ctx.get(), (arch + ".context_length").c_str());
    if (key < 0) {
        return 0;
    }
    switch (gguf_get_kv_type(ctx.get(), key)) {
        case GGUF_TYPE_UINT32: return static_cast<int32_t>(gguf_get_val_u32(ctx.get(), key));
        case GGUF_TYPE_INT32: return gguf_get_val_i32(ctx.get(), key);
        case GGUF_TYPE_UINT64: return static_cast<int32_t>(gguf_get_val_u64(ctx.get(), key));
        default: return 0;
    }
}

}  // namespace lucerna
