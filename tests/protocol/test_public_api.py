"""The public surface of protocol/: exactly what __init__ exports, and nothing that does I/O."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import protocol
from protocol import errors

PACKAGE = Path(protocol.__file__).parent

# Names other packages code against (the contract of the brief); keep them exactly.
CONTRACT = {
    "PROTOCOL_VERSION",
    "ErrorCode",
    "InlineIds",
    "TokenFile",
    "InlineText",
    "TextFile",
    "Generate",
    "Tokenize",
    "Detokenize",
    "Vocab",
    "Stats",
    "Quit",
    "Cancel",
    "SamplingParams",
    "ReadyInfo",
    "OkReply",
    "ErrReply",
    "GenerateSummary",
    "parse_startup_line",
    "parse_reply_line",
    "TokenStreamReader",
    "encode_token_bytes",
    "decode_token_bytes",
    "write_token_file",
    "read_token_file",
    "encode_value",
    "decode_value",
    "PieceTable",
    "ProtocolError",
    "MalformedLineError",
    "StreamFramingError",
    # Version 1 final: snapshots, park, compress (PROTOCOL.md 5.5-5.7).
    "Snapshot",
    "Restore",
    "FreeSnapshot",
    "ListSlots",
    "Park",
    "Unpark",
    "Compress",
    "SnapshotInfo",
    "SlotList",
    "ParkState",
    "CompressSummary",
    # Prefix reuse and snapshot files (PROTOCOL.md 5.10).
    "SaveSlot",
    "LoadSlot",
    # Logprobs and embeddings (PROTOCOL.md 5.1, 5.11).
    "MAX_LOGPROBS",
    "LogprobStreamReader",
    "TokenLogprobs",
    "Embed",
    "EmbedSummary",
    # Protocol 2: several sequences at once (PROTOCOL.md 9).
    "PROTOCOL_VERSIONS",
    "MAX_PARALLEL",
    "RECORD_END",
    "FramedStreamReader",
    "SeqRecord",
    "SeqEnd",
    "DoneLine",
    "parse_done_line",
    "parse_daemon_line",
    "encode_seq_record",
    "encode_seq_end",
    # One channel: stream bytes and replies on stdout (PROTOCOL.md 10).
    "CHANNEL_STREAM_WORD",
    "CHANNEL_ALIVE_LINE",
    "ChannelReader",
    "ChannelLine",
    "ChannelStream",
    "ChannelAlive",
    "ChannelUnit",
    "ChannelFramingError",
    "encode_stream_frame",
    "encode_alive",
}

ADDITIONS = {
    "STREAM_END",
    "Command",
    "CommandError",
    "CommandLine",
    "FinishReason",
    "IdsRef",
    "ModelState",
    "ParkScope",
    "PieceTableError",
    "ProtocolVersionError",
    "TextRef",
    "TokenAttr",
    "TokenFileError",
    "decode_value_bytes",
    "encode_line",
    "parse_command",
    "parse_command_line",
}


def test_all_is_exactly_the_public_api() -> None:
    assert len(protocol.__all__) == len(set(protocol.__all__))
    assert set(protocol.__all__) == CONTRACT | ADDITIONS


def test_every_public_name_is_in_all() -> None:
    public = {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(protocol.__all__)


def test_all_names_resolve() -> None:
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None


def test_protocol_version_is_one() -> None:
    assert protocol.PROTOCOL_VERSION == 1
    assert protocol.STREAM_END == -1


def test_every_error_is_a_protocol_error_and_drawn_in_the_docstring() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    assert {cls.__name__ for cls in classes} == set(errors.__all__)
    for cls in classes:
        assert issubclass(cls, protocol.ProtocolError)
        assert cls.__name__ in (errors.__doc__ or "")
        if cls is not protocol.ProtocolError:
            assert getattr(protocol, cls.__name__) is cls


def test_package_stays_sans_io() -> None:
    """No trio, no processes, no sockets: protocol/ is bytes and lines only."""
    forbidden = {"trio", "subprocess", "socket", "asyncio", "anyio", "selectors", "threading"}
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert not roots & forbidden, f"{path.name} imports {roots & forbidden}"


def test_only_the_file_helpers_open_files() -> None:
    allowed = {"_tokens.py", "_pieces.py"}
    for path in PACKAGE.glob("*.py"):
        if path.name in allowed:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        calls = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "open" not in calls, f"{path.name} opens files"
