// Logging: everything goes to stderr, never stdout (stdout is the protocol channel).
#pragma once

namespace lucerna {

// Routes the engine's (llama + ggml) log through our filter to stderr. The threshold
// comes from LUCERNA_LOG (error, warn, info, debug; default warn) so a person chasing
// a load problem can see the whole engine log without a new flag.
void install_engine_log();

// The prefix of our own log lines, normally the executable name.
void set_log_prefix(const char * prefix);

// One line of our own, printf-style, newline added.
void log_line(const char * format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace lucerna
