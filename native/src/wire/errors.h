// The error vocabulary of the daemon protocol (PROTOCOL.md section 6).
//
// Startup errors end the process with the exit code of section 2; command errors
// become one `err <code> <detail>` reply line and the daemon carries on.
#pragma once

#include <stdexcept>
#include <string>

namespace lucerna {

enum class ErrorCode {
    kBadFlag,
    kModelNotFound,
    kWrongArch,
    kLoadFailed,
    kContextFailed,
    kUnknownCommand,
    kBadArgs,
    kBadTokenFile,
    kBadTextFile,
    kEmptyPrompt,
    kBadToken,
    kContextOverflow,
    kNoStreamFd,
    kDecodeFailed,
    kIoFailed,
    kUnsupported,
    kRpcFailed,
    kLineTooLong,
    kBadGrammar,
    kBadSlot,
    kEmptySlot,
    kEmptySequence,
    kSnapshotMismatch,
    kSnapshotFailed,
    kBadSnapshotFile,
    kParked,
    kBadSeq,
    kSeqBusy,
};

// The wire name: "bad_flag", "context_overflow", ...
const char * error_code_name(ErrorCode code);

// Process exit code for a startup error (2 bad command line, 3 model, 4 context,
// 5 the ds4 shard's RPC server could not listen).
int startup_exit_code(ErrorCode code);

// Thrown by command handlers and startup steps; `detail` is for humans.
class ProtocolError : public std::runtime_error {
public:
    ProtocolError(ErrorCode code, const std::string & detail) : std::runtime_error(detail), code_(code) {}
    ErrorCode code() const { return code_; }

private:
    ErrorCode code_;
};

}  // namespace lucerna
