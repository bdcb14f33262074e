"""The daemon's stdout: the ready line, ``ok`` and ``err`` replies (PROTOCOL.md 2, 3, 5, 6)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import protocol
from protocol import (
    CompressSummary,
    ErrorCode,
    ErrReply,
    FinishReason,
    GenerateSummary,
    MalformedLineError,
    ModelState,
    OkReply,
    ParkState,
    ProtocolVersionError,
    ReadyInfo,
    SlotList,
    SnapshotInfo,
    parse_reply_line,
    parse_startup_line,
)

DOC = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()

READY = (
    "ready protocol=1 role=qwen35 arch=gemma3 vocab=262144 n_ctx=4096 n_ctx_train=32768"
    " bos=2 eos=1 add_bos=1 backend=cpu engine=llama-cpp-python-0.3.36 version=0.1.0"
    " capabilities=generate,tokenize,detokenize,vocab,stats,quit"
)
WRONG_ARCH = (
    "err wrong_arch lucerna-qwen35 serves qwen35,qwen35moe,qwen3,gemma3,llama;"
    " /tmp/m.gguf is laguna"
)


def _section(number: str) -> str:
    start = DOC.index(f"\n## {number}.")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end >= 0 else None]


# --- error codes -------------------------------------------------------------------------


def test_error_codes_are_exactly_the_table_of_section_6() -> None:
    documented = re.findall(r"^\| `([a-z_]+)` \|", _section("6"), flags=re.MULTILINE)
    assert documented == [code.value for code in ErrorCode]


def test_startup_codes_carry_the_exit_codes_of_section_2() -> None:
    table = _section("2")
    for status, codes in re.findall(r"^\| (\d) \| .*?\(([^)]*)\) \|$", table, flags=re.MULTILINE):
        for code in re.findall(r"`([a-z_]+)`", codes):
            assert ErrorCode(code).exit_code == int(status)
            assert ErrorCode(code).is_startup
    assert ErrorCode.BAD_ARGS.exit_code is None
    assert not ErrorCode.BAD_ARGS.is_startup


# --- the ready line ----------------------------------------------------------------------


def test_ready_line_of_section_2() -> None:
    assert READY in DOC
    info = parse_startup_line(READY + "\n")
    assert info == ReadyInfo(
        protocol=1,
        role="qwen35",
        arch="gemma3",
        n_vocab=262144,
        n_ctx=4096,
        n_ctx_train=32768,
        bos=2,
        eos=1,
        add_bos=True,
        backend="cpu",
        engine="llama-cpp-python-0.3.36",
        version="0.1.0",
        capabilities=frozenset({"generate", "tokenize", "detokenize", "vocab", "stats", "quit"}),
        fields=dict(word.split("=", 1) for word in READY.split()[1:]),
    )
    assert info.encode() == (READY + "\n").encode()


def test_ready_line_keeps_unknown_keys_in_any_order() -> None:
    words = READY.split()
    line = " ".join([words[0], "gpu=H200%20NVL", *reversed(words[1:]), "future=1"])
    info = parse_startup_line(line.encode())
    assert isinstance(info, ReadyInfo)
    assert info.fields["gpu"] == "H200 NVL"
    assert info.fields["future"] == "1"
    assert info.n_vocab == 262144
    again = parse_startup_line(info.encode())
    assert again == info


def test_ready_line_reads_n_vocab_too_and_bos_minus_one() -> None:
    line = READY.replace("vocab=", "n_vocab=").replace("bos=2", "bos=-1")
    info = parse_startup_line(line.replace("add_bos=1", "add_bos=0"))
    assert isinstance(info, ReadyInfo)
    assert (info.n_vocab, info.bos, info.add_bos) == (262144, -1, False)


def test_ready_line_with_no_capabilities() -> None:
    info = parse_startup_line(READY.replace("capabilities=generate", "capabilities=,generate"))
    assert isinstance(info, ReadyInfo) and "generate" in info.capabilities
    empty = parse_startup_line(re.sub(r"capabilities=\S*", "capabilities=", READY))
    assert isinstance(empty, ReadyInfo) and empty.capabilities == frozenset()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (READY.replace("ready", "READY"), "expected a 'ready' or 'err' line"),
        ("", "expected a 'ready' or 'err' line"),
        ("ok quit", "expected a 'ready' or 'err' line"),
        (READY.replace(" n_ctx=4096", ""), "lacks n_ctx="),
        (READY.replace(" vocab=262144", ""), "lacks vocab="),
        (READY.replace(" capabilities=", " caps="), "lacks capabilities="),
        (READY.replace("n_ctx=4096", "n_ctx=4k"), "not an integer"),
        (READY.replace("add_bos=1", "add_bos=yes"), "add_bos"),
        (READY + " protocol=1", "given twice"),
        (READY + " stray", "expected key=value"),
        (READY.replace(" ... ", " ") + " ...", "expected key=value"),
    ],
)
def test_malformed_ready_lines(line: str, reason: str) -> None:
    with pytest.raises(MalformedLineError, match=re.escape(reason)):
        parse_startup_line(line)


def test_other_protocol_versions_are_refused() -> None:
    with pytest.raises(ProtocolVersionError) as info:
        parse_startup_line("ready protocol=2 whatever=1")
    assert (info.value.version, info.value.supported) == (2, 1)
    assert isinstance(info.value, protocol.ProtocolError)


def test_startup_error_line_of_section_2() -> None:
    assert WRONG_ARCH in DOC
    reply = parse_startup_line(WRONG_ARCH + "\n")
    assert isinstance(reply, ErrReply)
    assert reply.code == "wrong_arch"
    assert reply.error_code is ErrorCode.WRONG_ARCH
    assert reply.detail == WRONG_ARCH.split(" ", 2)[2]
    assert reply.error_code.exit_code == 3
    assert reply.encode() == (WRONG_ARCH + "\n").encode()


# --- ok replies --------------------------------------------------------------------------


def test_ok_reply_fields_are_decoded() -> None:
    reply = parse_reply_line(b"ok detokenize text=Hello%20world\r\n")
    assert reply == OkReply("detokenize", {"text": "Hello world"})
    assert parse_reply_line("ok quit") == OkReply("quit", {})
    assert parse_reply_line("ok  stats   n_ctx=4096  ") == OkReply("stats", {"n_ctx": "4096"})


def test_ok_reply_with_partial_utf8_keeps_the_exact_bytes() -> None:
    reply = parse_reply_line("ok detokenize text=a%E2%82")
    assert isinstance(reply, OkReply)
    assert reply.fields["text"] == "a\ufffd"
    assert reply.field_bytes("text") == b"a\xe2\x82"
    built = OkReply("detokenize", {"text": "é"})
    assert built.field_bytes("text") == "é".encode()
    with pytest.raises(KeyError):
        built.field_bytes("missing")


def test_ok_reply_line_that_is_not_utf8_is_read_with_replacement() -> None:
    reply = parse_reply_line(b"ok vocab n=3 path=/tmp/\xff")
    assert isinstance(reply, OkReply)
    assert reply.fields["path"] == "/tmp/\ufffd"


def test_ok_reply_typed_fields() -> None:
    reply = parse_reply_line("ok stats n_ctx=4096 rss_kb=12 ms=1.5 bad=x")
    assert isinstance(reply, OkReply)
    assert reply.int_field("n_ctx") == 4096
    assert reply.float_field("ms") == 1.5
    assert reply.float_field("rss_kb") == 12.0
    with pytest.raises(MalformedLineError, match="not an integer"):
        reply.int_field("bad")
    with pytest.raises(MalformedLineError, match="not a number"):
        reply.float_field("bad")
    with pytest.raises(MalformedLineError, match="lacks missing="):
        reply.int_field("missing")


@pytest.mark.parametrize(
    "line",
    [
        "ok",
        "ok n=3",
        "ok stats extra",
        "ok stats a=1 a=2",
        "ok stats =1",
        "ok stats a=100%",
        "okay quit",
        "ready x=1",
    ],
)
def test_malformed_replies(line: str) -> None:
    with pytest.raises(MalformedLineError):
        parse_reply_line(line)


# --- err replies -------------------------------------------------------------------------


def test_err_reply_keeps_unknown_codes_and_free_text() -> None:
    reply = parse_reply_line("err   shiny_new_code   detail with  two spaces = % ok\n")
    assert reply == ErrReply("shiny_new_code", "detail with  two spaces = % ok")
    assert isinstance(reply, ErrReply)
    assert reply.error_code is None
    assert parse_reply_line("err bad_args") == ErrReply("bad_args", "")
    assert ErrReply("bad_args").encode() == b"err bad_args\n"


@pytest.mark.parametrize("line", ["err", "err   ", "err\r\n"])
def test_err_without_code(line: str) -> None:
    with pytest.raises(MalformedLineError, match="without a code"):
        parse_reply_line(line)


@pytest.mark.parametrize(
    "reply",
    [
        ErrReply("", "x"),
        ErrReply("two words", "x"),
        ErrReply("code", "a\nb"),
        ErrReply("code", "a\rb"),
        ErrReply("code", "\ud800"),
    ],
)
def test_err_encode_refuses_unreadable_lines(reply: ErrReply) -> None:
    with pytest.raises(ValueError):
        reply.encode()


_keys = st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True)
_words = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)


@given(_words, st.dictionaries(_keys, st.text(), max_size=6))
def test_ok_reply_round_trips(command: str, fields: dict[str, str]) -> None:
    reply = OkReply(command, fields)
    assert parse_reply_line(reply.encode()) == reply


@given(
    _words,
    st.text(st.characters(codec="utf-8", exclude_characters="\n\r")).map(lambda d: d.lstrip(" ")),
)
def test_err_reply_round_trips(code: str, detail: str) -> None:
    reply = ErrReply(code, detail)
    assert parse_reply_line(reply.encode()) == reply


# --- generate summary --------------------------------------------------------------------


def test_generate_summary() -> None:
    reply = parse_reply_line(
        "ok generate n_prompt=3 n_gen=4 finish=length prefill_ms=9.1 decode_ms=66.0"
    )
    assert isinstance(reply, OkReply)
    summary = GenerateSummary.from_reply(reply)
    assert summary == GenerateSummary(3, 4, FinishReason.LENGTH, 9.1, 66.0)
    assert summary.finish == "length"
    assert GenerateSummary.from_reply(summary.to_reply()) == summary
    assert parse_reply_line(summary.to_reply().encode()) == summary.to_reply()


def test_generate_summary_of_a_speculative_request() -> None:
    reply = parse_reply_line(
        "ok generate n_prompt=3 n_gen=9 finish=length prefill_ms=1.0 decode_ms=8.0 spec=lookup "
        "draft_steps=2 draft_proposed=15 draft_accepted=7 draft_ms=0.0"
    )
    assert isinstance(reply, OkReply)
    summary = GenerateSummary.from_reply(reply)
    assert (summary.spec, summary.draft_accepted, summary.acceptance_length) == ("lookup", 7, 4.5)
    assert summary.tree_steps is None
    assert GenerateSummary.from_reply(summary.to_reply()) == summary


def test_generate_summary_of_tree_verify_steps() -> None:
    line = ("ok generate n_prompt=3 n_gen=9 finish=length prefill_ms=1.0 decode_ms=8.0 "
            "spec=dflash draft_steps=2 draft_proposed=44 draft_accepted=7 draft_ms=3.0 "
            "tree_steps=1")
    reply = parse_reply_line(line)
    assert isinstance(reply, OkReply)
    summary = GenerateSummary.from_reply(reply)
    assert (summary.spec, summary.draft_steps, summary.tree_steps) == ("dflash", 2, 1)
    assert summary.to_reply().encode() == f"{line}\n".encode()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("ok tokenize n=3", "expected an 'ok generate' or 'ok restore' reply"),
        (
            "ok restore n_prompt=8 n_gen=3 finish=length prefill_ms=1 decode_ms=1",
            "lacks n_reused=",
        ),
        (
            "ok generate n_prompt=8 n_gen=3 finish=length prefill_ms=1 decode_ms=1 snap_slot=0",
            "snap_slot= and snap_pos= go together",
        ),
        (
            "ok generate n_prompt=8 n_gen=3 finish=length prefill_ms=1 decode_ms=1"
            " snap_slot=0 snap_pos=x",
            "not an integer",
        ),
        ("ok generate n_prompt=3 n_gen=4 prefill_ms=1 decode_ms=1", "lacks finish="),
        ("ok generate n_prompt=3 n_gen=4 finish=done prefill_ms=1 decode_ms=1", "finish="),
        ("ok generate n_prompt=3 finish=eog prefill_ms=1 decode_ms=1", "lacks n_gen="),
        ("ok generate n_prompt=3 n_gen=x finish=eog prefill_ms=1 decode_ms=1", "not an integer"),
        ("ok generate n_prompt=3 n_gen=1 finish=eog prefill_ms=fast decode_ms=1", "not a number"),
    ],
)
def test_generate_summary_refuses(line: str, reason: str) -> None:
    reply = parse_reply_line(line)
    assert isinstance(reply, OkReply)
    with pytest.raises(MalformedLineError, match=re.escape(reason)):
        GenerateSummary.from_reply(reply)


_counts = st.integers(0, 2**31)


@given(
    st.builds(
        GenerateSummary,
        _counts,
        _counts,
        st.sampled_from(FinishReason),
        st.floats(0, 1e9),
        st.floats(0, 1e9),
        n_reused=st.none() | _counts,
    ),
    st.none() | st.tuples(_counts, _counts),
)
def test_generate_summary_round_trips(
    summary: GenerateSummary, snap: tuple[int, int] | None
) -> None:
    if snap is not None:
        summary = dataclasses.replace(summary, snap_slot=snap[0], snap_pos=snap[1])
    reply = parse_reply_line(summary.to_reply().encode())
    assert isinstance(reply, OkReply)
    assert reply.command == summary.command
    assert GenerateSummary.from_reply(reply) == summary


def test_restore_summary_of_section_5_5() -> None:
    line = "ok restore n_prompt=8 n_reused=4 n_gen=3 finish=length prefill_ms=2.9 decode_ms=40.3"
    assert line in DOC
    reply = parse_reply_line(line)
    assert isinstance(reply, OkReply)
    summary = GenerateSummary.from_reply(reply)
    assert summary == GenerateSummary(8, 3, FinishReason.LENGTH, 2.9, 40.3, n_reused=4)
    assert summary.command == "restore"
    assert summary.to_reply().encode() == (line + "\n").encode()


def test_generate_summary_with_a_snapshot() -> None:
    line = (
        "ok generate n_prompt=8 n_gen=3 finish=length prefill_ms=5.2 decode_ms=40.1"
        " snap_slot=0 snap_pos=4"
    )
    assert line in DOC
    reply = parse_reply_line(line)
    assert isinstance(reply, OkReply)
    summary = GenerateSummary.from_reply(reply)
    assert (summary.command, summary.n_reused, summary.snap_slot, summary.snap_pos) == (
        "generate",
        None,
        0,
        4,
    )
    assert summary.to_reply().encode() == (line + "\n").encode()


# --- snapshots, park, compress -----------------------------------------------------------


def _ok(line: str) -> OkReply:
    reply = parse_reply_line(line)
    assert isinstance(reply, OkReply)
    return reply


def test_snapshot_info() -> None:
    info = SnapshotInfo.from_reply(_ok("ok snapshot slot=1 n_tokens=10 bytes=262144 future=x"))
    assert info == SnapshotInfo(slot=1, n_tokens=10, host_bytes=262144)


@pytest.mark.parametrize(
    ("line", "slots", "host_bytes"),
    [
        ("ok list_slots slots=0:4 bytes=131072", {0: 4}, 131072),
        ("ok list_slots slots=0:118,5:4096 bytes=9", {0: 118, 5: 4096}, 9),
        ("ok list_slots slots=5:1,0:2 bytes=9", {0: 2, 5: 1}, 9),  # read in slot order
        ("ok list_slots slots= bytes=0", {}, 0),
    ],
)
def test_slot_list(line: str, slots: dict[int, int], host_bytes: int) -> None:
    listed = SlotList.from_reply(_ok(line))
    assert listed == SlotList(slots, host_bytes)
    assert list(listed.slots) == sorted(slots)


def test_park_state() -> None:
    parked = ParkState.from_reply(_ok("ok park target=parked draft=absent rss_kb=60212"))
    assert parked == ParkState(ModelState.PARKED, ModelState.ABSENT, 60212)
    ready = ParkState.from_reply(_ok("ok unpark target=ready draft=absent rss_kb=412540"))
    assert (ready.target, ready.draft) == ("ready", "absent")


def test_compress_summary() -> None:
    summary = CompressSummary.from_reply(_ok("ok compress n_in=8192 n_out=832 ms=912.4"))
    assert summary == CompressSummary(8192, 832, 912.4)


@pytest.mark.parametrize(
    ("read", "line", "reason"),
    [
        (SnapshotInfo.from_reply, "ok restore slot=1",
         "expected an 'ok snapshot' or 'ok load_slot' reply"),
        (SnapshotInfo.from_reply, "ok snapshot slot=1 n_tokens=2", "lacks bytes="),
        (SlotList.from_reply, "ok list_slots bytes=0", "lacks slots="),
        (SlotList.from_reply, "ok list_slots slots=0 bytes=0", "not a new slot:n_tokens pair"),
        (SlotList.from_reply, "ok list_slots slots=0:1, bytes=0", "not a new slot:n_tokens"),
        (SlotList.from_reply, "ok list_slots slots=0:1,0:2 bytes=0", "not a new slot:n_tokens"),
        (SlotList.from_reply, "ok list_slots slots=-1:2 bytes=0", "not a new slot:n_tokens"),
        (SlotList.from_reply, "ok list_slots slots= bytes=many", "not an integer"),
        (ParkState.from_reply, "ok stats target=parked", "expected an 'ok park' or 'ok unpark'"),
        (ParkState.from_reply, "ok park target=gone draft=absent rss_kb=1", "target='gone'"),
        (ParkState.from_reply, "ok park target=ready rss_kb=1", "lacks draft="),
        (CompressSummary.from_reply, "ok compress n_in=1 n_out=1", "lacks ms="),
        (CompressSummary.from_reply, "ok generate n_in=1 n_out=1 ms=1", "'ok compress'"),
    ],
)
def test_summaries_refuse(read: Any, line: str, reason: str) -> None:
    with pytest.raises(MalformedLineError, match=re.escape(reason)):
        read(_ok(line))


def test_ready_lines_list_capabilities_in_the_order_of_section_5() -> None:
    table = _section("5")
    rows = dict(re.findall(r"^\| (`[^|]*`) \| `([a-z_,]+)` \|$", table, flags=re.MULTILINE))
    assert list(rows) == ["`qwen35`, `laguna`", "`ds4_shard`"]
    for capabilities in rows.values():
        info = parse_startup_line(re.sub(r"capabilities=\S*", "capabilities=", READY))
        assert isinstance(info, ReadyInfo)
        shuffled = dataclasses.replace(info, capabilities=frozenset(capabilities.split(",")))
        assert f"capabilities={capabilities}\n".encode() in shuffled.encode()
