#include "engine/rpc_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/dead_peer.h"
#include "engine/log.h"
#include "engine/options.h"
#include "engine/placement.h"
#include "engine/resident_set.h"
#include "wire/errors.h"

namespace lucerna {
namespace {

using StartServerFn = void (*)(const char * endpoint, const char * cache_dir, size_t n_threads, size_t n_devices,
                               ggml_backend_dev_t * devices);

// Slow device initialisation (a GPU's first context) can take seconds; a server that
// is neither listening nor finished after this long is reported as failed.
constexpr auto kListenTimeout = std::chrono::seconds(60);

// The process's own IPv4 TCP sockets on local port `port`: the engine's listening
// socket (listening=true) or the connections it accepted (listening=false). Found
// through /proc/self/fd because the engine does not hand its descriptors out; no
// other part of a shard opens sockets, so the port identifies them.
std::vector<int> own_sockets_on_port(int port, bool listening) {
    std::vector<int> fds;
    for (const int fd : own_open_fds()) {
        int accepting = 0;
        socklen_t len = sizeof(accepting);
        if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0) {
            continue;  // not a socket (or already closed)
        }
        sockaddr_in addr{};
        socklen_t addr_len = sizeof(addr);
        if (::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &addr_len) != 0 || addr.sin_family != AF_INET ||
            ntohs(addr.sin_port) != port) {
            continue;
        }
        if ((accepting != 0) == listening) {
            fds.push_back(fd);
        }
    }
    return fds;
}

bool is_host_device(ggml_backend_dev_t device) {
    return ggml_backend_buft_is_host(ggml_backend_dev_buffer_type(device));
}

size_t device_free_bytes(ggml_backend_dev_t device) {
    size_t free = 0;
    size_t total = 0;
    ggml_backend_dev_memory(device, &free, &total);
    return free;
}

}  // namespace

std::unique_ptr<RpcServer> RpcServer::start(const std::string & endpoint, ggml_backend_dev_t device, int n_threads,
                                            int dead_peer_ms) {
    std::string host;
    int port = 0;
    in_addr parsed{};
    // The engine's transport reads the host with inet_addr: a dotted IPv4 address only.
    if (!split_endpoint(endpoint, host, port) || ::inet_pton(AF_INET, host.c_str(), &parsed) != 1) {
        throw ProtocolError(ErrorCode::kRpcFailed, "--rpc-listen=" + endpoint + " must be IPV4:PORT");
    }
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    auto start_server =
        reg == nullptr
            ? nullptr
            : reinterpret_cast<StartServerFn>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_start_server"));
    if (start_server == nullptr || device == nullptr) {
        throw ProtocolError(ErrorCode::kRpcFailed, "this engine build has no RPC server (GGML_RPC=OFF)");
    }

    auto state = std::make_shared<State>();
    state->endpoint = endpoint;
    state->device = device;
    std::unique_ptr<RpcServer> server(new RpcServer(state, port));
    server->thread_ = std::thread([state, start_server, n_threads] {
        ggml_backend_dev_t devices[] = {state->device};
        // Blocks for as long as the server runs; returns at once if it cannot listen.
        start_server(state->endpoint.c_str(), /*cache_dir =*/nullptr, static_cast<size_t>(n_threads), 1, devices);
        {
            std::lock_guard<std::mutex> lock(state->mutex);
            state->finished = true;
        }
        state->done.notify_all();
    });
    server->wait_listening();
    // Accepted connections inherit the listening socket's keep-alive and user timeout.
    for (const int fd : own_sockets_on_port(port, /*listening =*/true)) {
        detect_dead_peer(fd, dead_peer_ms);
    }
    // The server initialised its backend before it listened: a GPU's context and the
    // CPU backend's threads are in the baseline, and what grows from here is clients'.
    state->rss_kb_at_listen = resident_set_kb();
    if (!is_host_device(device)) {
        state->device_free_at_listen = device_free_bytes(device);
    }
    listening() = state;
    log_line("serving %s over ggml RPC on %s", ggml_backend_dev_name(device), endpoint.c_str());
    return server;
}

void RpcServer::wait_listening() {
    const auto deadline = std::chrono::steady_clock::now() + kListenTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (finished_within(std::chrono::milliseconds(10))) {
            thread_.join();
            throw ProtocolError(ErrorCode::kRpcFailed, "the RPC server could not listen on " + state_->endpoint +
                                                           " (port in use, or not an address of this host)");
        }
        if (!own_sockets_on_port(port_, /*listening =*/true).empty()) {
            return;
        }
    }
    if (!stop(std::chrono::seconds(1))) {
        thread_.detach();  // it only touches the shared state, which it co-owns
    }
    throw ProtocolError(ErrorCode::kRpcFailed, "the RPC server did not start listening on " + state_->endpoint);
}

bool RpcServer::finished_within(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->done.wait_for(lock, timeout, [this] { return state_->finished; });
}

bool RpcServer::stop(std::chrono::milliseconds grace) {
    const auto deadline = std::chrono::steady_clock::now() + grace;
    if (thread_.joinable()) {
        // The engine logs "Failed to accept client connection" as its loop ends: expected.
        log_line("stopping the RPC server on %s", state_->endpoint.c_str());
    }
    // Listener first, so no new session starts; then the sessions. Repeated until the
    // thread ends, in case a connection was being accepted while we looked.
    while (thread_.joinable()) {
        for (const int fd : own_sockets_on_port(port_, /*listening =*/true)) {
            ::shutdown(fd, SHUT_RDWR);
        }
        for (const int fd : own_sockets_on_port(port_, /*listening =*/false)) {
            ::shutdown(fd, SHUT_RDWR);
        }
        if (finished_within(std::chrono::milliseconds(50))) {
            thread_.join();
            return true;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
    }
    return true;
}

RpcServer::~RpcServer() {
    if (listening() == state_) {
        listening().reset();
    }
    if (!stop(std::chrono::seconds(5))) {
        // The engine's server is stuck in a call we cannot interrupt (a long graph
        // computation for a client). Its reply is out; end the process rather than hang.
        log_line("the RPC server on %s did not stop; exiting", state_->endpoint.c_str());
        std::fflush(nullptr);
        std::_Exit(0);
    }
}

std::string RpcServer::ready_fields() const {
    return " rpc=" + state_->endpoint + " device=" + ggml_backend_dev_name(state_->device);
}

std::shared_ptr<RpcServer::State> & RpcServer::listening() {
    static std::shared_ptr<State> state;
    return state;
}

std::vector<std::pair<std::string, uint64_t>> RpcServer::held_stats_fields() {
    const std::shared_ptr<State> state = listening();
    if (!state) {
        return {};
    }
    const int64_t rss_growth_kb = resident_set_kb() - state->rss_kb_at_listen;
    const uint64_t host_bytes = rss_growth_kb > 0 ? static_cast<uint64_t>(rss_growth_kb) * 1024 : 0;
    uint64_t device_bytes = 0;
    const bool host_device = is_host_device(state->device);
    if (!host_device) {
        const size_t free_now = device_free_bytes(state->device);
        device_bytes = state->device_free_at_listen > free_now ? state->device_free_at_listen - free_now : 0;
    }
    const char * buft_name = ggml_backend_buft_name(ggml_backend_dev_buffer_type(state->device));
    return {{"bytes_host", host_bytes},
            {"bytes_device", device_bytes},
            {stats_key(buft_name), host_device ? host_bytes : device_bytes}};
}

ggml_backend_dev_t shard_device() {
    ggml_backend_dev_t igpu = nullptr;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (std::strcmp(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)), "RPC") == 0) {
            continue;
        }
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU) {
            return dev;
        }
        if (type == GGML_BACKEND_DEVICE_TYPE_IGPU && igpu == nullptr) {
            igpu = dev;
        }
    }
    return igpu != nullptr ? igpu : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

}  // namespace lucerna
