#include "core/command_queue.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <utility>

#include "core/wire.h"

namespace lucerna {

CommandQueue::CommandQueue(int input_fd, CancelState & cancel) : input_fd_(input_fd), cancel_(cancel) {
    int fds[2];
    if (::pipe(fds) != 0) {
        throw std::runtime_error("cannot create the reader wake-up pipe");
    }
    wake_read_ = fds[0];
    wake_write_ = fds[1];
    reader_ = std::thread([this] { read_loop(); });
}

CommandQueue::~CommandQueue() {
    const char byte = 1;
    while (::write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
    }
    if (reader_.joinable()) {
        reader_.join();
    }
    ::close(wake_read_);
    ::close(wake_write_);
}

QueuedCommand CommandQueue::pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !queue_.empty(); });
    QueuedCommand command = std::move(queue_.front());
    queue_.pop_front();
    return command;
}

void CommandQueue::push(QueuedCommand command) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(command));
    }
    ready_.notify_one();
}

void CommandQueue::on_line(std::string line) {
    if (!line.empty() && line.back() == '\r') {
        line.pop_back();
    }
    QueuedCommand command;
    const std::string word = first_word(line);
    if (word == "generate") {
        command.generate_seq = cancel_.note_generate();
    } else if (word == "cancel") {
        command.cancel_running = cancel_.note_cancel();
    }
    command.line = std::move(line);
    push(std::move(command));
}

void CommandQueue::read_loop() {
    std::string pending;
    char buffer[65536];
    while (true) {
        pollfd fds[2] = {{input_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
        const int ready = ::poll(fds, 2, -1);
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (fds[1].revents != 0) {
            return;  // shutting down: the main thread no longer pops
        }
        if (fds[0].revents == 0) {
            continue;
        }
        const ssize_t n = ::read(input_fd_, buffer, sizeof(buffer));
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        pending.append(buffer, static_cast<size_t>(n));
        size_t start = 0;
        for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
            on_line(pending.substr(start, nl - start));
            start = nl + 1;
        }
        pending.erase(0, start);
    }
    // EOF (or a read error): a final unterminated line still counts, then EOF.
    if (!pending.empty()) {
        on_line(std::move(pending));
    }
    QueuedCommand eof;
    eof.eof = true;
    push(std::move(eof));
}

}  // namespace lucerna
