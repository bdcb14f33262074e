#include "core/daemon.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <exception>
#include <string>
#include <vector>

#include "core/args.h"
#include "core/command_queue.h"
#include "core/commands.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/gguf_probe.h"
#include "core/log.h"
#include "core/session.h"
#include "core/wire.h"

#ifndef LUCERNA_ENGINE_NAME
#define LUCERNA_ENGINE_NAME "unknown"
#endif
#ifndef LUCERNA_VERSION
#define LUCERNA_VERSION "0.0.0"
#endif

namespace lucerna {
namespace {

constexpr int kProtocolVersion = 1;

// Commands each kind of role answers, in the order of the ready line.
std::vector<std::string> capabilities(const RoleInfo & role) {
    if (role.generates) {
        return {"generate", "tokenize", "detokenize", "vocab", "stats", "cancel", "quit"};
    }
    return {"stats", "quit"};
}

bool is_stream_command(const std::string & name) { return name == "generate" || name == "tokenize"; }

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

int fail_startup(LineWriter & out, const ProtocolError & error) {
    out.write_line(err_line(error.code(), error.what()));
    log_line("%s: %s", error_code_name(error.code()), error.what());
    return startup_exit_code(error.code());
}

std::string ready_line(const RoleInfo & role, const LoadedModel & engine) {
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
    return line;
}

class Dispatcher {
public:
    explicit Dispatcher(Session & session) : session_(session), caps_(capabilities(session.role)) {}

    // Returns the reply line ("" for a blank line, which gets none); sets `quit`.
    std::string run(const QueuedCommand & queued, bool & quit) {
        std::string reply = dispatch(queued, quit);
        // After the command's -1: a cancel read from now on finds nothing to stop.
        session_.cancel.finished(queued.generate_seq);
        return reply;
    }

private:
    std::string dispatch(const QueuedCommand & queued, bool & quit) {
        const std::string name = first_word(queued.line);
        if (name.empty()) {
            return {};
        }
        const bool known = std::find(caps_.begin(), caps_.end(), name) != caps_.end() || name == "exit";
        if (!known) {
            return err_line(ErrorCode::kUnknownCommand, name + " is not a command of " + session_.role.binary +
                                                            "; see capabilities in the ready line");
        }
        if (name == "quit" || name == "exit") {
            try {
                const CommandLine cmd = parse_command_line(queued.line);
                cmd.expect_positional(0, name.c_str());
                cmd.check_options({}, name.c_str());
            } catch (const ProtocolError & error) {
                return err_line(error.code(), error.what());
            }
            quit = true;
            return OkReply("quit").line();
        }
        const bool stream = is_stream_command(name);
        if (stream && !session_.stream.available()) {
            return err_line(ErrorCode::kNoStreamFd,
                            name + " writes to the stream fd; start the daemon with --stream-fd=N");
        }
        if (stream) {
            session_.stream.begin();
        }
        std::string reply;
        try {
            reply = handle(name, parse_command_line(queued.line), queued);
        } catch (const ProtocolError & error) {
            reply = err_line(error.code(), error.what());
        } catch (const std::exception & error) {
            reply = err_line(ErrorCode::kDecodeFailed, std::string("engine error: ") + error.what());
        }
        if (stream) {
            session_.stream.terminate();  // exactly one -1, success or error
        }
        return reply;
    }

    std::string handle(const std::string & name, const CommandLine & cmd, const QueuedCommand & queued) {
        if (name == "generate") return handle_generate(session_, cmd, queued.generate_seq);
        if (name == "tokenize") return handle_tokenize(session_, cmd);
        if (name == "detokenize") return handle_detokenize(session_, cmd);
        if (name == "vocab") return handle_vocab(session_, cmd);
        if (name == "stats") return handle_stats(session_, cmd);
        if (name == "cancel") {
            cmd.expect_positional(0, "cancel");
            cmd.check_options({}, "cancel");
            return OkReply("cancel").add("running", queued.cancel_running ? "1" : "0").line();
        }
        throw ProtocolError(ErrorCode::kUnknownCommand, name + " is not a command");
    }

    Session & session_;
    std::vector<std::string> caps_;
};

}  // namespace

int run_daemon(Role role, int argc, char ** argv) {
    const RoleInfo & info = role_info(role);
    set_log_prefix(info.binary);
    std::signal(SIGPIPE, SIG_IGN);  // a vanished reader shows up as EPIPE, handled per write

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
        arch = read_gguf_architecture(opts.model_path);
        if (std::find(info.archs.begin(), info.archs.end(), arch) == info.archs.end()) {
            throw ProtocolError(ErrorCode::kWrongArch, std::string(info.binary) + " serves " + joined_archs(info) +
                                                           "; " + opts.model_path + " is " + arch);
        }
    } catch (const ProtocolError & error) {
        return fail_startup(out, error);
    }

    BackendGuard backend;
    LoadedModel engine;
    try {
        engine = load_model(opts, arch, /*with_context =*/info.generates);
    } catch (const ProtocolError & error) {
        return fail_startup(out, error);
    }
    if (!out.write_line(ready_line(info, engine))) {
        return 0;  // nobody is listening
    }
    log_line("ready: %s (%s, %s, n_ctx=%d)", opts.model_path.c_str(), arch.c_str(), engine.backend.c_str(),
             engine.n_ctx);

    TokenStream stream(opts.stream_fd);
    CancelState cancel;
    Session session{info, opts, engine, stream, cancel, {}};
    Dispatcher dispatcher(session);
    CommandQueue queue(STDIN_FILENO, cancel);
    while (true) {
        const QueuedCommand queued = queue.pop();
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
    return 0;
}

}  // namespace lucerna
