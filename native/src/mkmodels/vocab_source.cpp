#include "mkmodels/vocab_source.h"

#include <stdexcept>
#include <vector>

#include "gguf.h"

namespace lucerna::mkmodels {

gguf_context_ptr open_gguf_metadata(const std::string & path) {
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    gguf_context_ptr ctx(gguf_init_from_file(path.c_str(), params));
    if (!ctx) {
        throw std::runtime_error("cannot read GGUF metadata from " + path);
    }
    return ctx;
}

void copy_kv(gguf_context * dst, const gguf_context * src, int64_t key_id) {
    const char * key = gguf_get_key(src, key_id);
    switch (gguf_get_kv_type(src, key_id)) {
        case GGUF_TYPE_UINT8:   gguf_set_val_u8(dst, key, gguf_get_val_u8(src, key_id)); break;
        case GGUF_TYPE_INT8:    gguf_set_val_i8(dst, key, gguf_get_val_i8(src, key_id)); break;
        case GGUF_TYPE_UINT16:  gguf_set_val_u16(dst, key, gguf_get_val_u16(src, key_id)); break;
        case GGUF_TYPE_INT16:   gguf_set_val_i16(dst, key, gguf_get_val_i16(src, key_id)); break;
        case GGUF_TYPE_UINT32:  gguf_set_val_u32(dst, key, gguf_get_val_u32(src, key_id)); break;
        case GGUF_TYPE_INT32:   gguf_set_val_i32(dst, key, gguf_get_val_i32(src, key_id)); break;
        case GGUF_TYPE_FLOAT32: gguf_set_val_f32(dst, key, gguf_get_val_f32(src, key_id)); break;
        case GGUF_TYPE_UINT64:  gguf_set_val_u64(dst, key, gguf_get_val_u64(src, key_id)); break;
        case GGUF_TYPE_INT64:   gguf_set_val_i64(dst, key, gguf_get_val_i64(src, key_id)); break;
        case GGUF_TYPE_FLOAT64: gguf_set_val_f64(dst, key, gguf_get_val_f64(src, key_id)); break;
        case GGUF_TYPE_BOOL:    gguf_set_val_bool(dst, key, gguf_get_val_bool(src, key_id)); break;
        case GGUF_TYPE_STRING:  gguf_set_val_str(dst, key, gguf_get_val_str(src, key_id)); break;
        case GGUF_TYPE_ARRAY: {
            const gguf_type elem = gguf_get_arr_type(src, key_id);
            const size_t n = gguf_get_arr_n(src, key_id);
            if (elem == GGUF_TYPE_STRING) {
                std::vector<const char *> items(n);
                for (size_t i = 0; i < n; ++i) {
                    items[i] = gguf_get_arr_str(src, key_id, i);
                }
                gguf_set_arr_str(dst, key, items.data(), n);
            } else if (elem == GGUF_TYPE_ARRAY) {
                throw std::runtime_error(std::string("nested GGUF arrays are not supported: ") + key);
            } else {
                gguf_set_arr_data(dst, key, elem, gguf_get_arr_data(src, key_id), n);
            }
            break;
        }
        default:
            throw std::runtime_error(std::string("unsupported GGUF value type for key ") + key);
    }
}

void copy_kvs_with_prefix(gguf_context * dst, const gguf_context * src, const std::string & prefix) {
    const int64_t n = gguf_get_n_kv(src);
    for (int64_t i = 0; i < n; ++i) {
        const std::string key = gguf_get_key(src, i);
        if (key.compare(0, prefix.size(), prefix) == 0) {
            copy_kv(dst, src, i);
        }
    }
}

void copy_missing_kvs(gguf_context * dst, const gguf_context * src) {
    const int64_t n = gguf_get_n_kv(src);
    for (int64_t i = 0; i < n; ++i) {
        if (gguf_find_key(dst, gguf_get_key(src, i)) < 0) {
            copy_kv(dst, src, i);
        }
    }
}

}  // namespace lucerna::mkmodels
