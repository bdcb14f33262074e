// The ds4 shard's device server (PROTOCOL.md 5.8): the engine's own ggml RPC server
// (ggml_backend_rpc_start_server) serving this host's device to one target daemon.
//
// The engine's server is a blocking accept loop with no stop call, so it runs on its
// own thread, and stopping it goes through the sockets it owns: shutting down its
// listening socket makes accept() fail, which ends the loop, and shutting down a
// connected client's socket ends that client's session first. shutdown() never closes
// a descriptor, so the engine still closes each one exactly once itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ggml-backend.h"

namespace lucerna {

class RpcServer {
public:
    // Starts serving `device` on `endpoint` ("HOST:PORT", HOST an IPv4 address) and
    // returns once the server's socket is listening. Throws ProtocolError(rpc_failed)
    // when it cannot listen (address in use, not an address of this host, ...).
    // Connections from clients that vanish are dropped after `dead_peer_ms`
    // (engine/dead_peer.h), so that a client cut off mid-step does not hold the server,
    // which serves one client at a time, forever.
    static std::unique_ptr<RpcServer> start(const std::string & endpoint, ggml_backend_dev_t device, int n_threads,
                                            int dead_peer_ms);

    // Stops the server (see stop()); if it does not stop, the process exits 0 here:
    // the only caller is the shard's shutdown, after its `ok quit` went out.
    ~RpcServer();
    RpcServer(const RpcServer &) = delete;
    RpcServer & operator=(const RpcServer &) = delete;

    // " rpc=HOST:PORT device=NAME", the ready line's tail.
    std::string ready_fields() const;

    // The shard's `stats` fields for where weights live (PROTOCOL.md 5.3, 5.8): what the
    // running server's clients hold on this host. The engine's server keeps its buffers
    // to itself (no count, no allocation hook), so this is measured as growth since the
    // server started listening: bytes_host is the growth of the resident set, and
    // bytes_device the drop in the served device's free memory as the engine reports it
    // (what a client sees over RPC), 0 for a host device. One buft_<name>_bytes names the
    // served device's buffer type with its share. Both include the server's own working
    // memory (compute buffers, receive buffers), and a device shared with other
    // processes counts their allocations too. Empty when no server runs (every role but
    // the shard); one server per process.
    static std::vector<std::pair<std::string, uint64_t>> held_stats_fields();

    // Stops accepting, ends a connected client's session and joins the server thread.
    // Returns false if the thread is still running after `grace`.
    bool stop(std::chrono::milliseconds grace);

private:
    // Shared with the server thread, which outlives this object if it cannot be stopped.
    struct State {
        std::string endpoint;
        ggml_backend_dev_t device = nullptr;
        std::mutex mutex;
        std::condition_variable done;
        bool finished = false;  // the engine's server function returned
        // Baselines of held_stats_fields(), taken once the server listens.
        int64_t rss_kb_at_listen = 0;
        size_t device_free_at_listen = 0;
    };

    // The server whose clients held_stats_fields() reports on. Set and cleared on the
    // main thread, which is also the one that answers `stats`.
    static std::shared_ptr<State> & listening();

    RpcServer(std::shared_ptr<State> state, int port) : state_(std::move(state)), port_(port) {}
    void wait_listening();
    bool finished_within(std::chrono::milliseconds timeout);

    std::shared_ptr<State> state_;
    int port_;
    std::thread thread_;
};

// The device a shard serves: the first local GPU, else the CPU.
ggml_backend_dev_t shard_device();

}  // namespace lucerna
