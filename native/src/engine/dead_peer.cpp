#include "engine/dead_peer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <utility>

#include "engine/options.h"

namespace lucerna {
namespace {

// IPv4 address and port (network order) of each endpoint that resolves.
std::set<std::pair<uint32_t, uint16_t>> resolve(const std::vector<std::string> & endpoints) {
    std::set<std::pair<uint32_t, uint16_t>> peers;
    for (const auto & endpoint : endpoints) {
        std::string host;
        int port = 0;
        if (!split_endpoint(endpoint, host, port)) {
            continue;
        }
        addrinfo hints{};
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo * found = nullptr;
        if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) {
            continue;
        }
        for (addrinfo * ai = found; ai != nullptr; ai = ai->ai_next) {
            const auto * addr = reinterpret_cast<const sockaddr_in *>(ai->ai_addr);
            peers.insert({addr->sin_addr.s_addr, htons(static_cast<uint16_t>(port))});
        }
        ::freeaddrinfo(found);
    }
    return peers;
}

}  // namespace

std::vector<int> own_open_fds() {
    std::vector<int> fds;
    std::error_code ec;
    for (const auto & entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        char * end = nullptr;
        const long fd = std::strtol(entry.path().filename().c_str(), &end, 10);
        if (*end == '\0') {
            fds.push_back(static_cast<int>(fd));
        }
    }
    return fds;
}

bool detect_dead_peer(int fd, int timeout_ms) {
    const int on = 1;
    const int second = 1;
    // Probes each second once a second passed idle; the user timeout bounds both unacked
    // data and unanswered probes (Linux lets it override TCP_KEEPCNT).
    const int probes = std::max(1, timeout_ms / 1000);
    const auto user_timeout = static_cast<unsigned>(timeout_ms);
    return ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &second, sizeof(second)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &second, sizeof(second)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) == 0 &&
           ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) == 0;
}

int detect_dead_rpc_peers(const std::vector<std::string> & endpoints, int timeout_ms) {
    const auto peers = resolve(endpoints);
    int set = 0;
    for (const int fd : own_open_fds()) {
        sockaddr_in peer{};
        socklen_t len = sizeof(peer);
        if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &len) != 0 || peer.sin_family != AF_INET ||
            peers.count({peer.sin_addr.s_addr, peer.sin_port}) == 0) {
            continue;
        }
        set += detect_dead_peer(fd, timeout_ms) ? 1 : 0;
    }
    return set;
}

}  // namespace lucerna
