// A TCP peer that vanished (its host down, the link cut) noticed within a bound: the
// ggml RPC connections between a target and its ds4 shard carry no keep-alive of their
// own, and a blocked read on a dead connection would otherwise wait until TCP gives up
// (many minutes). With keep-alive probes every second and TCP_USER_TIMEOUT, the kernel
// fails the connection after `timeout_ms` without an answer from the peer's kernel; a
// peer that is busy computing still acknowledges, so a long step is not cut short.
#pragma once

#include <string>
#include <vector>

namespace lucerna {

// This process's open file descriptors, read from /proc/self/fd: the engine opens its
// RPC sockets itself and does not hand them out, so this is how we find them.
std::vector<int> own_open_fds();

// Sets the options on one socket; false if the kernel refused one.
bool detect_dead_peer(int fd, int timeout_ms);

// Every TCP socket of this process connected to one of `endpoints` ("HOST:PORT", IPv4
// literals or names): the engine's RPC client connections, found through
// /proc/self/fd since the engine does not hand them out. Returns how many were set.
int detect_dead_rpc_peers(const std::vector<std::string> & endpoints, int timeout_ms);

}  // namespace lucerna
