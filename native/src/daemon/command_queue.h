// The stdin reader thread. It reads command lines into a queue the main thread pops
// one at a time, so that a `cancel` can take effect while a generate is running on
// the main thread (the reader acts on it the moment it arrives, see cancel.h).
//
// It also enforces --max-line without holding more than that many bytes of one line:
// a line that grows past the limit is dropped as it streams in and becomes a single
// `line_too_long` entry. And it watches the shutdown signal pipe (daemon/signals.h): a
// SIGTERM/SIGINT cancels every generate read so far and ends the queue like EOF.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/cancel.h"

namespace lucerna {

struct QueuedCommand {
    std::string line;           // without the trailing "\n" / "\r\n"
    bool eof = false;           // stdin closed (or failed), or a shutdown signal: same as quit
    bool too_long = false;      // the line exceeded --max-line; `line` holds its first word only
    uint64_t generate_seq = 0;  // for generate lines, see CancelState
    bool cancel_running = false;  // for cancel lines: the running= of the reply
    // Protocol 2 (PROTOCOL.md 9): the line names a sequence (`seq=S`, or `cancel S`);
    // `lane` is S when it is a valid decimal (else -1: the handler refuses it).
    bool names_seq = false;
    int32_t lane = -1;
};

class CommandQueue {
public:
    // `signal_fd` < 0: no shutdown signals to watch.
    CommandQueue(int input_fd, CancelState & cancel, size_t max_line, int signal_fd);
    // Wakes the reader (a self-pipe, so it never blocks in read()) and joins it.
    ~CommandQueue();
    CommandQueue(const CommandQueue &) = delete;
    CommandQueue & operator=(const CommandQueue &) = delete;

    // Blocks until a command (or EOF) is available.
    QueuedCommand pop();
    // The next command if one was read, without waiting.
    bool try_pop(QueuedCommand & command);
    // The next command if one is read within `wait`.
    bool pop_within(std::chrono::milliseconds wait, QueuedCommand & command);

private:
    void read_loop();
    void push(QueuedCommand command);
    void on_line(std::string line);
    void on_too_long(const std::string & first_word);
    void on_shutdown_signal();

    int input_fd_;
    size_t max_line_;
    int signal_fd_;
    int wake_read_ = -1;
    int wake_write_ = -1;
    CancelState & cancel_;
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<QueuedCommand> queue_;
    std::thread reader_;
};

}  // namespace lucerna
