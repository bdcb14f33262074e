#include <vector>

#include "commands/handlers.h"
#include "engine/placement.h"
#include "engine/prefix_reuse.h"
#include "engine/resident_set.h"
#include "engine/rpc_server.h"
#include "engine/state_memory.h"
#include "wire/fd_io.h"
#include "wire/msgpack_writer.h"

namespace lucerna {
namespace {

// One `stats` field: an integer, or a decimal (rates, uptime) written with one decimal
// on the reply line and as a float64 in the msgpack map.
struct StatField {
    std::string key;
    int64_t integer = 0;
    double real = 0.0;
    bool is_real = false;
};

std::vector<StatField> stat_fields(const Session & session) {
    const Stats & st = session.stats;
    auto i = [](const char * key, int64_t v) { return StatField{key, v, 0.0, false}; };
    auto r = [](const char * key, double v) { return StatField{key, 0, v, true}; };
    const StateMemoryStats memory = state_memory_stats();
    const llama_context * ctx = session.engine.context.get();
    const double uptime_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - session.started).count();
    std::vector<StatField> fields = {
        i("n_ctx", session.engine.n_ctx),
        i("n_vocab", session.engine.n_vocab),
        i("requests", static_cast<int64_t>(st.requests)),
        i("tokens_prompt", static_cast<int64_t>(st.tokens_prompt)),
        i("tokens_generated", static_cast<int64_t>(st.tokens_generated)),
        i("forwards", ctx ? static_cast<int64_t>(llama_n_forwards(ctx)) : 0),
        i("graphs_reused", ctx ? static_cast<int64_t>(llama_perf_context(ctx).n_reused) : 0),
        i("cancelled", static_cast<int64_t>(st.cancelled)),
        i("preempted", static_cast<int64_t>(st.preempted)),
        i("shared_prefixes", static_cast<int64_t>(st.shared_prefixes)),
        i("checkpoint_bytes", static_cast<int64_t>(checkpoint_bytes(session.lanes))),
        i("checkpoints_dropped", static_cast<int64_t>(st.checkpoints_dropped)),
        i("rss_kb", resident_set_kb()),
        r("uptime_s", uptime_s),
        i("parked", session.parked ? 1 : 0),
        i("slots_used", static_cast<int64_t>(session.snapshots.used())),
        i("slots_bytes", static_cast<int64_t>(session.snapshots.bytes())),
        r("last_prefill_tok_s", st.last_prefill_tok_s),
        r("last_decode_tok_s", st.last_decode_tok_s),
        i("model_bytes", static_cast<int64_t>(session.model_bytes)),
        // Speculative decoding (PROTOCOL.md 5.9); zeros when the daemon does not speculate.
        i("draft_steps", static_cast<int64_t>(session.spec.totals.steps)),
        i("draft_proposed", static_cast<int64_t>(session.spec.totals.proposed)),
        i("draft_accepted", static_cast<int64_t>(session.spec.totals.accepted)),
        r("acceptance_length", session.spec.totals.acceptance_length()),
        r("draft_ms", session.spec.totals.draft_ms),
        i("draft_model_bytes", static_cast<int64_t>(session.spec.draft_model_bytes())),
        // Host memory for states (engine/state_memory.h).
        i("state_kept_bytes", static_cast<int64_t>(memory.kept_bytes)),
        i("states_reused", static_cast<int64_t>(memory.reused)),
        i("states_page_locked", static_cast<int64_t>(memory.page_locked)),
    };
    // Where the weights live: bytes_host, bytes_device, buft_<name>_bytes; a daemon's
    // own (engine/placement.h), or on the ds4 shard, which has no context, what its RPC
    // clients hold there (engine/rpc_server.h).
    for (const auto & [key, bytes] : ctx ? weight_stats_fields(ctx) : RpcServer::held_stats_fields()) {
        fields.push_back(StatField{key, static_cast<int64_t>(bytes), 0.0, false});
    }
    return fields;
}

}  // namespace

std::string handle_stats(Session & session, const CommandLine & cmd) {
    cmd.expect_positional(0, "stats [path=<path>]");
    cmd.check_options({"path"}, "stats [path=<path>]");
    const std::vector<StatField> fields = stat_fields(session);
    OkReply reply("stats");
    const std::string * path = cmd.option("path");
    if (path != nullptr) {
        MsgpackWriter out;
        out.map_header(static_cast<uint32_t>(fields.size()));
        for (const auto & field : fields) {
            out.str(field.key);
            if (field.is_real) {
                out.real(field.real);
            } else {
                out.integer(field.integer);
            }
        }
        if (!write_file_atomically(*path, out.bytes())) {
            throw ProtocolError(ErrorCode::kIoFailed, "cannot write the stats to " + *path);
        }
        reply.add("path", *path);
    }
    for (const auto & field : fields) {
        if (field.is_real) {
            reply.add_ms(field.key, field.real);  // one decimal, like the timings
        } else {
            reply.add(field.key, field.integer);
        }
    }
    return reply.line();
}

}  // namespace lucerna
