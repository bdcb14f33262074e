#include "daemon/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <csignal>
#include <stdexcept>

namespace lucerna {
namespace {

// The write end for the handler. A plain int read by a signal handler: it is set before
// the handlers are installed and cleared after they are removed.
volatile sig_atomic_t g_signal_write_fd = -1;

// The parent at process start, read before anything else can take time.
const pid_t g_parent_at_start = ::getppid();

struct sigaction g_previous_term;
struct sigaction g_previous_int;

extern "C" void on_shutdown_signal(int /*signo*/) {
    const int saved_errno = errno;  // write() may clobber it under the interrupted code
    const int fd = g_signal_write_fd;
    if (fd >= 0) {
        const char byte = 1;
        // A full pipe already holds a pending wake-up: dropping this byte loses nothing.
        [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);
    }
    errno = saved_errno;
}

}  // namespace

bool follow_parent_death() {
    if (::getppid() != g_parent_at_start) {
        return false;
    }
    std::thread([] {
        // A quarter second is far below any shutdown budget and costs nothing.
        while (::getppid() == g_parent_at_start) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        if (g_signal_write_fd < 0) {
            ::_exit(0);  // still loading: nothing to finish or flush for anyone
        }
        on_shutdown_signal(SIGTERM);
    }).detach();
    return true;
}

ShutdownSignals::ShutdownSignals() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        throw std::runtime_error("cannot create the signal pipe");
    }
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    g_signal_write_fd = write_fd_;
    struct sigaction action = {};
    action.sa_handler = on_shutdown_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // other threads' blocking calls carry on; the reader polls the pipe
    ::sigaction(SIGTERM, &action, &g_previous_term);
    ::sigaction(SIGINT, &action, &g_previous_int);
}

ShutdownSignals::~ShutdownSignals() {
    ::sigaction(SIGTERM, &g_previous_term, nullptr);
    ::sigaction(SIGINT, &g_previous_int, nullptr);
    g_signal_write_fd = -1;
    ::close(read_fd_);
    ::close(write_fd_);
}

}  // namespace lucerna
