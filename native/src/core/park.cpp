// park [target|draft|all] | unpark [target|draft|all]
//
// Parking swaps the target model for a vocabulary-only load of the same GGUF
// (llama_model_params.vocab_only): tokenize, detokenize and vocab keep answering from
// it, while freeing the full model unmaps the file (CPU) or frees device memory (GPU).
// Unparking loads the model and a fresh context exactly as startup did (load_model with
// the same options), so generation afterwards is the same as before the park. There is
// no draft model yet: draft=absent, and parking it is a no-op.
#include "core/park.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/commands.h"
#include "core/errors.h"
#include "core/process_stats.h"

namespace lucerna {
namespace {

enum class Which { kTarget, kDraft, kAll };

Which parse_which(const CommandLine & cmd, const char * usage) {
    if (cmd.positional.size() > 1) {
        throw ProtocolError(ErrorCode::kBadArgs, std::string("usage: ") + usage);
    }
    cmd.check_options({}, usage);
    if (cmd.positional.empty() || cmd.positional[0] == "all") {
        return Which::kAll;
    }
    if (cmd.positional[0] == "target") {
        return Which::kTarget;
    }
    if (cmd.positional[0] == "draft") {
        return Which::kDraft;
    }
    throw ProtocolError(ErrorCode::kBadArgs, std::string("usage: ") + usage);
}

std::string reply(const char * command, const Session & session) {
    return OkReply(command)
        .add("target", session.parked ? "parked" : "ready")
        .add("draft", "absent")
        .add("rss_kb", resident_set_kb())
        .line();
}

void park_target(Session & session) {
    LoadedModel & engine = session.engine;
    // Load the tokenizer first: if that fails, nothing has changed yet.
    LoadedModel vocab_only = load_model(session.opts, engine.arch, /*with_context =*/false);
    // Context before model before placement: the order LoadedModel's members are
    // destroyed in, which the engine's pointers into each other require.
    engine.context.reset();
    engine.model.reset();
    engine.placement.reset();
    engine.model = std::move(vocab_only.model);
    engine.vocab = llama_model_get_vocab(engine.model.get());
    session.live.clear();
    session.parked = true;
#if defined(__GLIBC__)
    // The model's and context's smaller host allocations come back to the heap, not the
    // system; without this a parked daemon keeps tens of MB it no longer uses.
    malloc_trim(0);
#endif
}

void unpark_target(Session & session) {
    LoadedModel & engine = session.engine;
    LoadedModel loaded = load_model(session.opts, engine.arch, /*with_context =*/true);  // throws: stay parked
    engine.context.reset();
    engine.model.reset();
    engine.placement.reset();
    engine = std::move(loaded);
    session.live.clear();
    session.parked = false;
}

}  // namespace

bool needs_weights(const std::string & command) {
    return command == "generate" || command == "restore" || command == "snapshot" || command == "compress";
}

std::string handle_park(Session & session, const CommandLine & cmd) {
    const Which which = parse_which(cmd, "park [target|draft|all]");
    if (which != Which::kDraft && !session.parked) {
        park_target(session);
    }
    return reply("park", session);
}

std::string handle_unpark(Session & session, const CommandLine & cmd) {
    const Which which = parse_which(cmd, "unpark [target|draft|all]");
    if (which != Which::kDraft && session.parked) {
        unpark_target(session);
    }
    return reply("unpark", session);
}

}  // namespace lucerna
