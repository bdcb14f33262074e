"""Constants of the wire format: version, stream end, error codes, finish reasons, states."""

from __future__ import annotations

import enum

PROTOCOL_VERSION = 1
"""The ``protocol=`` value of the ready line this package speaks."""

PROTOCOL_VERSIONS = frozenset({1, 2})
"""Every version this package speaks: 1, one command at a time, and 2, several
sequences at once (section 9). A daemon lists its own in the ready line's ``protocols=``."""

MAX_PARALLEL = 64
"""The most sequences a daemon runs at once (``--parallel``), so ``seq`` is below it."""

RECORD_END = -1
"""Protocol 2: the length word of the record that ends a sequence's output (section 9.2)."""

STREAM_END = -1
"""The int32 value that ends the output of every stream command on the stream fd."""

MAX_LOGPROBS = 20
"""The most alternatives ``generate ... logprobs=K`` may ask for (section 5.1)."""


class ErrorCode(enum.StrEnum):
    """Every ``err <code>`` of PROTOCOL.md section 6.

    Replies keep the code as a plain string (:attr:`protocol.ErrReply.code`) so that a
    code added by a newer daemon survives; this enum is the closed set we know.
    """

    BAD_FLAG = "bad_flag"
    MODEL_NOT_FOUND = "model_not_found"
    WRONG_ARCH = "wrong_arch"
    LOAD_FAILED = "load_failed"
    CONTEXT_FAILED = "context_failed"
    UNKNOWN_COMMAND = "unknown_command"
    BAD_ARGS = "bad_args"
    BAD_TOKEN_FILE = "bad_token_file"
    BAD_TEXT_FILE = "bad_text_file"
    EMPTY_PROMPT = "empty_prompt"
    BAD_TOKEN = "bad_token"
    CONTEXT_OVERFLOW = "context_overflow"
    NO_STREAM_FD = "no_stream_fd"
    DECODE_FAILED = "decode_failed"
    IO_FAILED = "io_failed"
    UNSUPPORTED = "unsupported"
    LINE_TOO_LONG = "line_too_long"
    BAD_GRAMMAR = "bad_grammar"
    BAD_SLOT = "bad_slot"
    EMPTY_SLOT = "empty_slot"
    EMPTY_SEQUENCE = "empty_sequence"
    SNAPSHOT_MISMATCH = "snapshot_mismatch"
    SNAPSHOT_FAILED = "snapshot_failed"
    BAD_SNAPSHOT_FILE = "bad_snapshot_file"
    PARKED = "parked"
    RPC_FAILED = "rpc_failed"
    BAD_SEQ = "bad_seq"
    SEQ_BUSY = "seq_busy"

    @property
    def is_startup(self) -> bool:
        """True for the codes a daemon prints instead of its ready line."""
        return self in _EXIT_CODES

    @property
    def exit_code(self) -> int | None:
        """The process exit status that goes with a startup code (section 2), else None."""
        return _EXIT_CODES.get(self)


_EXIT_CODES: dict[ErrorCode, int] = {
    ErrorCode.BAD_FLAG: 2,
    ErrorCode.MODEL_NOT_FOUND: 3,
    ErrorCode.WRONG_ARCH: 3,
    ErrorCode.LOAD_FAILED: 3,
    ErrorCode.CONTEXT_FAILED: 4,
    ErrorCode.RPC_FAILED: 5,
}


class FinishReason(enum.StrEnum):
    """Why a ``generate`` stopped: the ``finish=`` field of its reply (section 5.1)."""

    EOG = "eog"
    LENGTH = "length"
    STOP = "stop"
    CANCELLED = "cancelled"


class ModelState(enum.StrEnum):
    """Where a model of a daemon stands: the ``target=``/``draft=`` fields of ``park`` (5.6)."""

    PARKED = "parked"
    READY = "ready"
    ABSENT = "absent"


class TokenAttr(enum.IntFlag):
    """The engine's ``llama_token_attr`` bits, as carried in a piece table's ``attrs``."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9
