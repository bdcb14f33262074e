// park [target|draft|all] | unpark [target|draft|all]
//
// Parking swaps the target model for a vocabulary-only load of the same GGUF
// (llama_model_params.vocab_only): tokenize, detokenize and vocab keep answering from
// it, while freeing the full model unmaps the file (CPU) or frees device memory (GPU).
// Unparking loads the model and a fresh context exactly as startup did (load_model with
// the same options), so generation afterwards is the same as before the park.
//
// The DFlash draft (PROTOCOL.md 5.9) parks on its own: `park draft` frees its weights and
// context, and generation goes on autoregressively (or with the oracle alone) with the
// same tokens. Its context reads the target's embeddings and head through the target's
// context, so it goes whenever the target's context goes and is recreated over the new
// one on `unpark target`; its weights stay loaded (draft=ready) while only the target is
// parked. Without a draft, draft=absent and parking it is a no-op.
#include "commands/handlers.h"

#include "engine/resident_set.h"
#include "engine/snapshot_files.h"
#include "engine/state_memory.h"
#include "wire/errors.h"

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
        .add("draft", session.spec.draft_state())
        .add("rss_kb", resident_set_kb())
        .line();
}

void park_target(Session & session) {
    LoadedModel & engine = session.engine;
    // Load the tokenizer first: if that fails, nothing has changed yet.
    LoadedModel vocab_only = load_model(session.opts, engine.arch, /*with_context =*/false);
    // The draft's context points at the target's (ctx_other): it goes first. Then
    // context before model before placement: the order LoadedModel's members are
    // destroyed in, which the engine's pointers into each other require.
    session.spec.detach();
    engine.context.reset();
    engine.model.reset();
    engine.placement.reset();
    engine.model = std::move(vocab_only.model);
    engine.vocab = llama_model_get_vocab(engine.model.get());
    session.clear_lanes();
    drop_kept_state_blocks();  // unpark reserves them again (engine/prefix_reuse.h)
    session.parked = true;
    return_free_heap();
}

void unpark_target(Session & session) {
    LoadedModel & engine = session.engine;
    LoadedModel loaded = load_model(session.opts, engine.arch, /*with_context =*/true);  // throws: stay parked
    // A daemon started parked (--parked=on) learns the n_ctx its context gets, and so
    // its state's identity, only now.
    std::string identity = session.state_identity.empty()
                               ? state_identity(session.opts, loaded.backend, loaded.n_ctx)
                               : session.state_identity;
    engine.context.reset();
    engine.model.reset();
    engine.placement.reset();
    engine = std::move(loaded);
    session.state_identity = std::move(identity);
    session.clear_lanes();
    session.parked = false;
    session.spec.attach(engine.context.get());
}

}  // namespace

std::string handle_park(Session & session, const CommandLine & cmd) {
    const Which which = parse_which(cmd, "park [target|draft|all]");
    if (which != Which::kTarget) {
        session.spec.park_draft();
        return_free_heap();
    }
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
    if (which != Which::kTarget) {
        // Attached at once when the target is ready, else when it is unparked.
        session.spec.unpark_draft(session.parked ? nullptr : session.engine.context.get(), !session.live.empty());
    }
    return reply("unpark", session);
}

}  // namespace lucerna
