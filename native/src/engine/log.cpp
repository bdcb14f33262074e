#include "engine/log.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "llama.h"

namespace lucerna {
namespace {

std::string g_prefix = "lucerna";
ggml_log_level g_threshold = GGML_LOG_LEVEL_WARN;
// GGML_LOG_LEVEL_CONT continues the previous message, so it inherits its fate.
ggml_log_level g_last_level = GGML_LOG_LEVEL_INFO;

ggml_log_level threshold_from_env() {
    const char * value = std::getenv("LUCERNA_LOG");
    if (value == nullptr) {
        return GGML_LOG_LEVEL_WARN;
    }
    if (std::strcmp(value, "debug") == 0) return GGML_LOG_LEVEL_DEBUG;
    if (std::strcmp(value, "info") == 0) return GGML_LOG_LEVEL_INFO;
    if (std::strcmp(value, "error") == 0) return GGML_LOG_LEVEL_ERROR;
    return GGML_LOG_LEVEL_WARN;
}

void engine_log(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (level == GGML_LOG_LEVEL_CONT) {
        level = g_last_level;
    } else {
        g_last_level = level;
    }
    if (level >= g_threshold) {
        std::fputs(text, stderr);
    }
}

}  // namespace

void install_engine_log() {
    g_threshold = threshold_from_env();
    llama_log_set(engine_log, nullptr);
}

void set_log_prefix(const char * prefix) { g_prefix = prefix; }

void log_line(const char * format, ...) {
    char buffer[2048];
    va_list args;
    va_start(args, format);
    std::vsnprintf(buffer, sizeof(buffer), format, args);
    va_end(args);
    std::fprintf(stderr, "%s: %s\n", g_prefix.c_str(), buffer);
}

}  // namespace lucerna
