// The numbers PROTOCOL.md states and clients build on, in one place on the native side.
// The Python side has its own copies (protocol/_codes.py, orchestrator's config keys,
// daemons/roles.py); tests/native/test_one_source.py checks every copy against the
// document, so a change here that is not made there fails the suite.
#pragma once

#include <cstdint>

namespace lucerna {

// The ready line's `protocol=` (the title of PROTOCOL.md, section 2): the version every
// line without seq= speaks, so that a client of version 1 keeps working.
constexpr int kProtocolVersion = 1;

// The ready line's `protocols=` with --parallel > 1: every version served (section 9).
constexpr const char * kProtocolVersions = "1,2";

// --parallel is `1..64` (section 1): sequences 0 .. 63 at most, so a sequence number is
// one or two digits on the wire.
constexpr int32_t kMaxParallel = 64;

// --draft-block-size is `2..64` (section 1). A verify step decodes the whole block in one
// engine micro-batch, and the recurrent state keeps one rollback copy per block position;
// 64 is far past any trained DFlash block (16) and keeps both bounded.
constexpr int32_t kMaxDraftBlock = 64;

// --draft-tree-branches is `1..16` (section 1): every branch of a tree verify step is a
// sequence of the engine context, with its own recurrent state and a rollback copy of it
// per block position, so the count sizes the context's memory.
constexpr int32_t kMaxTreeBranches = 16;

// generate ... logprobs=K takes K in `[0, 20]` (5.1; OpenAI's top_logprobs bound).
constexpr int32_t kMaxLogprobs = 20;

// --slots's default (section 1): snapshot slots 0 .. 63.
constexpr int32_t kDefaultSlots = 64;

// One channel (--channel=stdout, section 10): a stream frame is the line
// "@stream N" and then N raw bytes; "@alive" is a keep-alive line. No reply line
// starts with '@' (replies start with ready, ok, err or done), so a reader never
// confuses them.
constexpr const char * kChannelStreamWord = "@stream";
constexpr const char * kChannelAliveLine = "@alive";

// --keepalive-ms's default (section 1): a keep-alive each second on one channel.
constexpr int32_t kDefaultKeepaliveMs = 1000;

// --rpc-timeout-ms's default (section 1): an RPC peer's kernel silent this long (no
// acknowledgement, no answer to a keep-alive probe) means the peer or link is gone.
constexpr int32_t kDefaultRpcTimeoutMs = 10000;

}  // namespace lucerna
