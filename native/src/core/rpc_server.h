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

#include "ggml-backend.h"

namespace lucerna {

class RpcServer {
public:
    // Starts serving `device` on `endpoint` ("HOST:PORT", HOST an IPv4 address) and
    // returns once the server's socket is listening. Throws ProtocolError(rpc_failed)
    // when it cannot listen (address in use, not an address of this host, ...).
    static std::unique_ptr<RpcServer> start(const std::string & endpoint, ggml_backend_dev_t device, int n_threads);

    // Stops the server (see stop()); if it does not stop, the process exits 0 here:
    // the only caller is the shard's shutdown, after its `ok quit` went out.
    ~RpcServer();
    RpcServer(const RpcServer &) = delete;
    RpcServer & operator=(const RpcServer &) = delete;

    // " rpc=HOST:PORT device=NAME", the ready line's tail.
    std::string ready_fields() const;

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
    };

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
