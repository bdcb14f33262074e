#include "daemon/daemon.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "commands/command_table.h"
#include "daemon/args.h"
#include "daemon/batch_scheduler.h"
#include "daemon/command_queue.h"
#include "daemon/keepalive.h"
#include "daemon/placement_flags.h"
#include "daemon/session.h"
#include "daemon/signals.h"
#include "engine/engine.h"
#include "engine/gguf_probe.h"
#include "engine/log.h"
#include "engine/resident_set.h"
#include "engine/rpc_server.h"
#include "engine/snapshot_files.h"
#include "engine/speculative.h"
#include "engine/state_memory.h"
#include "wire/constants.h"
#include "wire/errors.h"
#include "wire/wire.h"

#ifndef LUCERNA_ENGINE_NAME
#define LUCERNA_ENGINE_NAME "unknown"
#endif
#ifndef LUCERNA_VERSION
#define LUCERNA_VERSION "0.0.0"
#endif

namespace lucerna {
namespace {

// How long no command may come before an idle daemon makes a spare state block. Making
// one takes as long as the new block it saves a later state (a page-locked 160 MB block:
// 50-130 ms on the H200), so it waits for a pause: the front end sends a request's
// commands back to back (a displaced conversation's snapshot, then the generate), and a
// spare made between them would only move that cost onto the same request.
constexpr std::chrono::milliseconds kQuietBeforeSpare{50};

// The private copy of the original stdout. fd 1 itself is pointed at stderr, so a
// stray printf anywhere in the process (engine included) can never corrupt the
// protocol channel.
int take_protocol_fd() {
    const int fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd >= 0) {
        ::dup2(STDERR_FILENO, STDOUT_FILENO);
    }
    return fd;
}

// Speculative decoding (PROTOCOL.md 5.9): the draft and the oracle are the qwen35 role's,
// prompt lookup any target's. Resolves the block size (the draft's dflash.block_size
// unless --draft-block-size says otherwise; 16 for the oracle or lookup alone) and the oracle's target, so that everything after startup can rely on
// opts.draft_block_size. Throws bad_flag, or what reading the draft's header throws.
void resolve_speculation(Role role, const std::string & arch, DaemonOptions & opts) {
    if (!opts.speculative()) {
        return;
    }
    const bool drafted = !opts.draft_path.empty() || !opts.oracle_path.empty();
    if (drafted && role != Role::kQwen35) {
        throw ProtocolError(ErrorCode::kBadFlag, "--draft and --draft-oracle are served by the qwen35 role");
    }
    if (!role_info(role).generates) {
        throw ProtocolError(ErrorCode::kBadFlag, "--lookup is for a target role (qwen35, laguna)");
    }
    static const char * const kDraftTargets[] = {"qwen35", "qwen35moe", "qwen3", "llama"};
    if (!opts.draft_path.empty() &&
        std::find(std::begin(kDraftTargets), std::end(kDraftTargets), arch) == std::end(kDraftTargets)) {
        // The draft reads target layer inputs, which these architectures capture.
        throw ProtocolError(ErrorCode::kBadFlag, "--draft needs a qwen35, qwen35moe, qwen3 or llama target; " +
                                                     opts.model_path + " is " + arch);
    }
    if (opts.draft_block_size == 0) {
        opts.draft_block_size = opts.draft_path.empty() ? 16 : DflashDraft::read_block_size(opts.draft_path);
    }
    if (opts.draft_block_size < 2) {
        throw ProtocolError(ErrorCode::kBadFlag, "the draft's block size " + std::to_string(opts.draft_block_size) +
                                                     " proposes nothing; pass --draft-block-size=N (N >= 2)");
    }
    if (opts.oracle_accept == 0.0) {
        opts.oracle_accept = opts.draft_block_size;  // uncorrupted: every proposal right
    }
    if (opts.oracle_accept > opts.draft_block_size) {
        throw ProtocolError(ErrorCode::kBadFlag, "--oracle-accept=" + std::to_string(opts.oracle_accept) +
                                                     " is more than the block commits (" +
                                                     std::to_string(opts.draft_block_size) + ")");
    }
}

int fail_startup(LineWriter & out, const ProtocolError & error) {
    out.write_line(err_line(error.code(), error.what()));
    log_line("%s: %s", error_code_name(error.code()), error.what());
    return startup_exit_code(error.code());
}

std::string ready_line(const RoleInfo & role, const LoadedModel & engine, const Speculator & spec,
                       const std::string & identity) {
    const llama_vocab * vocab = engine.vocab;
    std::string caps;
    for (const auto & c : capabilities(role)) {
        caps += (caps.empty() ? "" : ",") + c;
    }
    std::string line = "ready";
    auto add = [&line](const char * key, const std::string & value) {
        line += ' ';
        line += key;
        line += '=';
        line += percent_encode(value);
    };
    add("protocol", std::to_string(kProtocolVersion));
    if (engine.n_parallel > 1) {
        // With one sequence the line stays protocol 1's, byte for byte (protocol 2 forms
        // are accepted there too, with seq=0).
        add("protocols", kProtocolVersions);
        add("parallel", std::to_string(engine.n_parallel));
    }
    add("role", role.name);
    add("arch", engine.arch);
    add("vocab", std::to_string(engine.n_vocab));
    add("n_ctx", std::to_string(engine.n_ctx));
    add("n_ctx_train", std::to_string(engine.n_ctx_train));
    add("bos", std::to_string(llama_vocab_bos(vocab)));
    add("eos", std::to_string(llama_vocab_eos(vocab)));
    add("add_bos", llama_vocab_get_add_bos(vocab) ? "1" : "0");
    add("backend", engine.backend);
    add("engine", LUCERNA_ENGINE_NAME);
    add("version", LUCERNA_VERSION);
    add("capabilities", caps);
    if (engine.deterministic) {
        add("deterministic", "1");
    }
    if (role.generates && !engine.context) {  // --parked=on
        add("parked", "1");
    }
    if (!identity.empty()) {
        add("state_id", state_id(identity));
    }
    if (spec.configured()) {
        add("spec", spec.kind());
        add("draft_block", std::to_string(spec.block_size()));
        if (spec.tree_budget() > 0) {
            add("draft_tree", std::to_string(spec.tree_budget()));
            add("draft_tree_branches", std::to_string(spec.tree_branches()));
        }
        if (spec.lookup() != DaemonOptions::Lookup::kOff) {
            add("lookup", spec.lookup() == DaemonOptions::Lookup::kOn ? "on" : "opt-in");
        }
    }
    return line;
}

class Dispatcher {
public:
    explicit Dispatcher(Session & session) : session_(session) {}

    // Returns the reply line ("" for a blank line, which gets none); sets `quit`.
    std::string run(const QueuedCommand & queued, bool & quit) {
        std::string reply = dispatch(queued, quit);
        if (!queued.names_seq) {
            // After the command's -1: a cancel read from now on finds nothing to stop.
            // (A protocol 2 generation finishes in the scheduler, batch_scheduler.cpp.)
            session_.cancel.finished(queued.generate_seq);
        } else if (reply.rfind("ok ", 0) != 0) {
            session_.cancel.finished(queued.generate_seq, queued.lane);  // refused: never ran
        }
        return reply;
    }

private:
    // A stream command owes its single -1 even when it is refused before it runs.
    void terminate_refused(const CommandInfo * command) {
        if (command != nullptr && command->stream && session_.stream.available()) {
            session_.stream.begin();
            session_.stream.terminate();
        }
    }

    std::string dispatch(const QueuedCommand & queued, bool & quit) {
        const std::string name = first_word(queued.line);
        const CommandInfo * command = find_command(name);
        if (queued.too_long) {
            // Only the first word survived.
            terminate_refused(command);
            return err_line(ErrorCode::kLineTooLong, "the command line is longer than --max-line=" +
                                                         std::to_string(session_.opts.max_line) +
                                                         " bytes; it was discarded");
        }
        if (name.empty()) {
            return {};
        }
        if (command == nullptr) {
            return err_line(ErrorCode::kUnknownCommand, name + " is not a command of " + session_.role.binary +
                                                            "; see capabilities in the ready line");
        }
        if (!serves(*command, session_.role)) {
            terminate_refused(command);
            return err_line(ErrorCode::kUnsupported, unsupported_detail(*command, session_.role));
        }
        // A stream command in its protocol 2 form (seq=S) frames its own records and ends
        // them with its own end record (PROTOCOL.md 9.2), or writes nothing when refused.
        const bool framed = command->stream && queued.names_seq;
        if (command->stream && !session_.stream.available()) {
            return err_line(ErrorCode::kNoStreamFd,
                            name + " writes to the stream fd; start the daemon with --stream-fd=N");
        }
        if (command->stream && !framed) {
            session_.stream.begin();
        }
        std::string reply;
        try {
            if (session_.parked && command->needs_weights) {
                throw ProtocolError(ErrorCode::kParked, "the target is parked; send unpark first");
            }
            const CommandLine cmd = parse_command_line(queued.line);
            CommandCall call{session_, cmd, queued};
            reply = command->handler(call);
            quit = call.quit;
        } catch (const ProtocolError & error) {
            reply = err_line(error.code(), error.what());
        } catch (const std::exception & error) {
            reply = err_line(ErrorCode::kDecodeFailed, std::string("engine error: ") + error.what());
        }
        if (command->stream && !framed) {
            session_.stream.terminate();  // exactly one -1, success or error
        }
        return reply;
    }

    Session & session_;
};

}  // namespace

int run_daemon(Role role, int argc, char ** argv) {
    const RoleInfo & info = role_info(role);
    set_log_prefix(info.binary);
    std::signal(SIGPIPE, SIG_IGN);  // a vanished reader shows up as EPIPE, handled per write
    if (!follow_parent_death()) {
        log_line("the parent process is already gone; exiting");
        return 0;
    }

    const int protocol_fd = take_protocol_fd();
    if (protocol_fd < 0) {
        log_line("stdout is not open; nothing to talk to");
        return 2;
    }
    LineWriter out(protocol_fd);
    install_engine_log();

    DaemonOptions opts;
    std::string arch;
    try {
        opts = parse_daemon_args(argc, argv);
        check_placement_flags(role, opts.placement);
        if (opts.parked && !info.generates) {
            throw ProtocolError(ErrorCode::kBadFlag, std::string("--parked=on: ") + info.binary +
                                                         " holds weights only and cannot park");
        }
        arch = read_gguf_architecture(opts.model_path);
        if (std::find(info.archs.begin(), info.archs.end(), arch) == info.archs.end()) {
            throw ProtocolError(ErrorCode::kWrongArch, std::string(info.binary) + " serves " + joined_archs(info) +
                                                           "; " + opts.model_path + " is " + arch);
        }
        resolve_speculation(role, arch, opts);
    } catch (const ProtocolError & error) {
        return fail_startup(out, error);
    }
    // Before loading, which takes long; destroyed after the command loop and the engine
    // and before `out`.
    const KeepAlive keepalive(out, opts.one_channel ? opts.keepalive_ms : 0);

    BackendGuard backend;
    LoadedModel engine;
    // After the engine: the draft's context must go before the target's (its ctx_other).
    std::unique_ptr<Speculator> spec;
    try {
        // Started parked: the vocabulary alone, as `park target` leaves it (commands/park.cpp).
        engine = load_model(opts, arch, /*with_context =*/info.generates && !opts.parked);
        if (opts.parked) {
            return_free_heap();  // the vocabulary's load scratch, as park leaves it
        }
        spec = std::make_unique<Speculator>(opts, engine.n_vocab);
        if (engine.context) {
            spec->attach(engine.context.get());
        }
    } catch (const ProtocolError & error) {
        return fail_startup(out, error);
    }
    std::string identity;  // started parked: computed by the first unpark (commands/park.cpp)
    if (engine.context) {
        try {
            identity = state_identity(opts, engine.backend, engine.n_ctx);
        } catch (const ProtocolError & error) {
            return fail_startup(out, error);
        }
    }
    // The ds4 shard's device server; declared after the backend so it stops first.
    std::unique_ptr<RpcServer> rpc;
    if (role == Role::kDs4Shard) {
        try {
            rpc = RpcServer::start(opts.placement.rpc_listen.value_or(PlacementOptions::kDefaultRpcListen),
                                   shard_device(), opts.n_threads, opts.placement.rpc_timeout_ms);
        } catch (const ProtocolError & error) {
            return fail_startup(out, error);
        }
    }
    // From the ready line on, SIGTERM/SIGINT end the command loop (a running generation
    // finishing with its -1 and reply) instead of the process; while loading they keep
    // their default action, which is the prompt exit a supervisor wants then.
    ShutdownSignals signals;
    if (!out.write_line(ready_line(info, engine, *spec, identity) + (rpc ? rpc->ready_fields() : ""))) {
        return 0;  // nobody is listening
    }
    log_line("ready: %s (%s, %s, n_ctx=%d)", opts.model_path.c_str(), arch.c_str(), engine.backend.c_str(),
             engine.n_ctx);

    TokenStream stream = opts.one_channel ? TokenStream(out) : TokenStream(opts.stream_fd);
    CancelState cancel;
    Session session(info, opts, engine, stream, cancel, *spec);
    session.parked = opts.parked;
    session.state_identity = identity;
    Dispatcher dispatcher(session);
    BatchScheduler scheduler(session);
    session.scheduler = &scheduler;
    CommandQueue queue(STDIN_FILENO, cancel, static_cast<size_t>(opts.max_line), signals.fd());
    // One step of the running protocol 2 generations; false once stdout is gone.
    auto step = [&] {
        for (const std::string & line : scheduler.step()) {
            if (!out.write_line(line)) {
                return false;
            }
        }
        return true;
    };
    bool open = true;
    while (open) {
        QueuedCommand queued;
        if (scheduler.busy()) {
            // Commands read meanwhile are answered between steps; one that has to wait
            // (WhileRunning) holds back itself and every command after it until the
            // running generations have ended, so stdout keeps command order.
            if (!queue.try_pop(queued)) {
                open = step();
                continue;
            }
            while (open && scheduler.busy() && !runs_alongside(queued)) {
                open = step();
            }
            if (!open) {
                break;
            }
        } else if (!queue.pop_within(kQuietBeforeSpare, queued)) {
            // Idle: memory for the next state that would take a new block is made now
            // rather than on a request's way to its first token (engine/state_memory.h).
            make_spare_state_block();
            queued = queue.pop();
        }
        if (queued.eof) {
            break;
        }
        bool quit = false;
        const std::string reply = dispatcher.run(queued, quit);
        if (!reply.empty() && !out.write_line(reply)) {
            break;  // stdout is gone: the client died
        }
        if (quit) {
            break;
        }
    }
    session.scheduler = nullptr;
    return 0;
}

}  // namespace lucerna
