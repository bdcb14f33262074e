#include "daemon/command_queue.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "commands/command_table.h"
#include "wire/errors.h"
#include "wire/wire.h"

namespace lucerna {
namespace {

// Finds the sequence a protocol 2 line names: its `seq=S` option, or for `cancel S` the
// positional. The reader needs it before the main thread runs the line, to number the
// generation on its lane (cancel.h); it reads the line with the handlers' own parsers,
// so both find the same lane. A line that does not parse still names a sequence when it
// holds a raw `seq=` word (the handler refuses it; lane -1).
void find_lane(const std::string & line, bool is_cancel, QueuedCommand & command) {
    const std::string * word = nullptr;
    try {
        const CommandLine cmd = parse_command_line(line);
        if (is_cancel) {
            if (!cmd.positional.empty()) {
                word = &cmd.positional[0];
            }
        } else {
            for (const auto & [key, value] : cmd.options) {
                if (key == "seq") {
                    word = &value;
                }
            }
        }
        if (word != nullptr) {
            command.names_seq = true;
            command.lane = static_cast<int32_t>(parse_int("seq", *word, 0, kMaxParallel - 1));
        }
    } catch (const ProtocolError &) {
        command.lane = -1;
        command.names_seq = command.names_seq || is_cancel || line.find(" seq=") != std::string::npos;
    }
}

}  // namespace

CommandQueue::CommandQueue(int input_fd, CancelState & cancel, size_t max_line, int signal_fd)
    : input_fd_(input_fd), max_line_(max_line), signal_fd_(signal_fd), cancel_(cancel) {
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

bool CommandQueue::try_pop(QueuedCommand & command) {
    return pop_within(std::chrono::milliseconds(0), command);
}

bool CommandQueue::pop_within(std::chrono::milliseconds wait, QueuedCommand & command) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, wait, [this] { return !queue_.empty(); })) {
        return false;
    }
    command = std::move(queue_.front());
    queue_.pop_front();
    return true;
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
    const CommandInfo * info = find_command(first_word(line));
    const OnRead on_read = info != nullptr ? info->on_read : OnRead::kNothing;
    if (on_read != OnRead::kNothing || (info != nullptr && info->while_running == WhileRunning::kSeqForm)) {
        find_lane(line, on_read == OnRead::kCancel, command);
    }
    if (on_read == OnRead::kNumberGeneration) {
        command.generate_seq = cancel_.note_generate(command.lane);
    } else if (on_read == OnRead::kCancel) {
        command.cancel_running = command.names_seq ? cancel_.note_cancel_lane(command.lane) : cancel_.note_cancel();
    }
    command.line = std::move(line);
    push(std::move(command));
}

void CommandQueue::on_too_long(const std::string & first_word) {
    QueuedCommand command;
    command.too_long = true;
    command.line = first_word;
    push(std::move(command));
}

void CommandQueue::on_shutdown_signal() {
    cancel_.note_cancel();  // the running generate (and any queued one) stops at its next step
    QueuedCommand eof;
    eof.eof = true;
    {
        // Commands read but not started are dropped: the process is going away.
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.clear();
        queue_.push_back(std::move(eof));
    }
    ready_.notify_one();
}

void CommandQueue::read_loop() {
    std::string pending;      // the line being read, never more than max_line_ bytes
    bool discarding = false;  // inside a line already known to be too long
    std::string long_word;    // that line's first word, so a stream command still gets its -1
    char buffer[65536];
    while (true) {
        pollfd fds[3] = {{input_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
        const int ready = ::poll(fds, signal_fd_ >= 0 ? 3 : 2, -1);
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        if (fds[1].revents != 0) {
            return;  // shutting down: the main thread no longer pops
        }
        if (signal_fd_ >= 0 && fds[2].revents != 0) {
            on_shutdown_signal();
            return;
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
        size_t start = 0;
        while (start < static_cast<size_t>(n)) {
            const auto * nl =
                static_cast<const char *>(std::memchr(buffer + start, '\n', static_cast<size_t>(n) - start));
            const size_t end = nl ? static_cast<size_t>(nl - buffer) : static_cast<size_t>(n);
            if (!discarding) {
                const size_t room = max_line_ - pending.size();
                pending.append(buffer + start, std::min(end - start, room));
                if (end - start > room) {
                    discarding = true;
                    long_word = first_word(pending);
                    std::string().swap(pending);  // give the memory back, not just the size
                }
            }
            if (nl == nullptr) {
                break;
            }
            if (discarding) {
                on_too_long(long_word);
                discarding = false;
            } else {
                on_line(std::move(pending));
                pending.clear();
            }
            start = end + 1;
        }
    }
    // EOF (or a read error): a final unterminated line still counts, then EOF.
    if (discarding) {
        on_too_long(long_word);
    } else if (!pending.empty()) {
        on_line(std::move(pending));
    }
    QueuedCommand eof;
    eof.eof = true;
    push(std::move(eof));
}

}  // namespace lucerna
