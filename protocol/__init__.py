"""The Lucerna daemon protocol, sans I/O.

Everything here works on ``str`` and ``bytes``: encoding commands (and reading a
command line the way a daemon does, ``parse_command``, for scripts and test doubles),
parsing the ready line and replies, framing the token stream, the token file and piece
table formats.
It never imports trio or subprocess; the only I/O is reading and writing a token file
or piece table at a path you give. ``PROTOCOL.md`` next to this file is the contract.
"""

from __future__ import annotations

from ._codes import (
    MAX_LOGPROBS,
    MAX_PARALLEL,
    PROTOCOL_VERSION,
    PROTOCOL_VERSIONS,
    RECORD_END,
    STREAM_END,
    ErrorCode,
    FinishReason,
    ModelState,
    TokenAttr,
)
from ._commands import (
    Cancel,
    Compress,
    Detokenize,
    Embed,
    Park,
    ParkScope,
    Quit,
    Stats,
    Tokenize,
    Unpark,
    Vocab,
)
from ._framing import (
    DoneLine,
    FramedStreamReader,
    SeqEnd,
    SeqRecord,
    encode_seq_end,
    encode_seq_record,
    parse_daemon_line,
    parse_done_line,
)
from ._lines import CommandLine, encode_line, parse_command_line
from ._parse import Command, parse_command
from ._percent import decode_value, decode_value_bytes, encode_value
from ._pieces import PieceTable
from ._refs import IdsRef, InlineIds, InlineText, TextFile, TextRef, TokenFile
from ._replies import (
    ErrReply,
    OkReply,
    ReadyInfo,
    parse_reply_line,
    parse_startup_line,
)
from ._sampling import SamplingParams
from ._sequence import (
    FreeSnapshot,
    Generate,
    ListSlots,
    LoadSlot,
    Restore,
    SaveSlot,
    Snapshot,
)
from ._stream import LogprobStreamReader, TokenLogprobs, TokenStreamReader
from ._summaries import (
    CompressSummary,
    EmbedSummary,
    GenerateSummary,
    ParkState,
    SlotList,
    SnapshotInfo,
)
from ._tokens import decode_token_bytes, encode_token_bytes, read_token_file, write_token_file
from .errors import (
    CommandError,
    MalformedLineError,
    PieceTableError,
    ProtocolError,
    ProtocolVersionError,
    StreamFramingError,
    TokenFileError,
)

__all__ = [
    "MAX_LOGPROBS",
    "MAX_PARALLEL",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSIONS",
    "RECORD_END",
    "STREAM_END",
    "Cancel",
    "Command",
    "CommandError",
    "CommandLine",
    "Compress",
    "CompressSummary",
    "Detokenize",
    "DoneLine",
    "Embed",
    "EmbedSummary",
    "ErrReply",
    "ErrorCode",
    "FinishReason",
    "FramedStreamReader",
    "FreeSnapshot",
    "Generate",
    "GenerateSummary",
    "IdsRef",
    "InlineIds",
    "InlineText",
    "ListSlots",
    "LoadSlot",
    "LogprobStreamReader",
    "MalformedLineError",
    "ModelState",
    "OkReply",
    "Park",
    "ParkScope",
    "ParkState",
    "PieceTable",
    "PieceTableError",
    "ProtocolError",
    "ProtocolVersionError",
    "Quit",
    "ReadyInfo",
    "Restore",
    "SaveSlot",
    "SamplingParams",
    "SeqEnd",
    "SeqRecord",
    "SlotList",
    "Snapshot",
    "SnapshotInfo",
    "Stats",
    "StreamFramingError",
    "TextFile",
    "TextRef",
    "TokenAttr",
    "TokenFile",
    "TokenFileError",
    "TokenLogprobs",
    "TokenStreamReader",
    "Tokenize",
    "Unpark",
    "Vocab",
    "decode_token_bytes",
    "decode_value",
    "decode_value_bytes",
    "encode_line",
    "encode_seq_end",
    "encode_seq_record",
    "encode_token_bytes",
    "encode_value",
    "parse_command",
    "parse_command_line",
    "parse_daemon_line",
    "parse_done_line",
    "parse_reply_line",
    "parse_startup_line",
    "read_token_file",
    "write_token_file",
]
