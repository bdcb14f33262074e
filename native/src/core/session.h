// What a command handler works with: the loaded model, the stream, the counters.
#pragma once

#include <cstdint>

#include "core/args.h"
#include "core/cancel.h"
#include "core/engine.h"
#include "core/roles.h"
#include "core/stream.h"

namespace lucerna {

struct Stats {
    uint64_t requests = 0;  // generate commands that ran (including cancelled ones)
    uint64_t tokens_prompt = 0;
    uint64_t tokens_generated = 0;
};

struct Session {
    const RoleInfo & role;
    const DaemonOptions & opts;
    LoadedModel & engine;
    TokenStream & stream;
    CancelState & cancel;
    Stats stats;
};

}  // namespace lucerna
