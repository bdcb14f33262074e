"""Values, lines and commands (PROTOCOL.md sections 3-5), as bytes."""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    Cancel,
    Command,
    CommandError,
    CommandLine,
    Compress,
    Detokenize,
    Embed,
    ErrorCode,
    FreeSnapshot,
    Generate,
    InlineIds,
    InlineText,
    ListSlots,
    LoadSlot,
    MalformedLineError,
    Park,
    Quit,
    Restore,
    SamplingParams,
    SaveSlot,
    Snapshot,
    Stats,
    TextFile,
    TokenFile,
    Tokenize,
    Unpark,
    Vocab,
    decode_value,
    decode_value_bytes,
    encode_line,
    encode_value,
    parse_command,
    parse_command_line,
)

WIRE_SAFE = set(string.printable[:94]) - {"%", "="}  # printable ASCII 0x21-0x7e, less % =

# --- percent-encoding -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("Hello world", "Hello%20world"),
        ("100%", "100%25"),
        ("a=b", "a%3Db"),
        ("é", "%C3%A9"),
        ("€", "%E2%82%AC"),
        ("line\nbreak\r", "line%0Abreak%0D"),
        ("tab\there", "tab%09here"),
        ("\x7f\x00", "%7F%00"),
        ("/tmp/a,b:c~d", "/tmp/a,b:c~d"),
        ("<start_of_turn>user", "<start_of_turn>user"),
        ("", ""),
    ],
)
def test_encode_value_examples(text: str, wire: str) -> None:
    assert encode_value(text) == wire
    assert decode_value(wire) == text


def test_encode_value_takes_raw_bytes() -> None:
    assert encode_value(b"\xe2\x82") == "%E2%82"
    assert encode_value(b"ok") == "ok"


def test_encode_value_refuses_text_without_utf8_form() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        encode_value("\ud800")


@pytest.mark.parametrize(
    ("wire", "text"),
    [
        ("plain", "plain"),
        ("%e2%82%ac", "€"),  # lowercase hex is fine
        ("héllo%20wörld", "héllo wörld"),  # raw UTF-8 stands for itself
    ],
)
def test_decode_value_reads_what_people_type(wire: str, text: str) -> None:
    assert decode_value(wire) == text


@pytest.mark.parametrize("wire", ["100%", "%zz", "a%4", "%%41", "%G0"])
def test_decode_value_refuses_bad_escapes(wire: str) -> None:
    with pytest.raises(ValueError, match="bad percent-escape"):
        decode_value(wire)
    with pytest.raises(ValueError, match="bad percent-escape"):
        decode_value_bytes(wire)


def test_decode_value_of_partial_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):
        decode_value("%E2%82")
    assert decode_value("%E2%82", errors="replace") == "\ufffd"
    assert decode_value_bytes("%E2%82") == b"\xe2\x82"


@given(st.text())
def test_percent_encoding_round_trips_text(text: str) -> None:
    wire = encode_value(text)
    assert set(wire) <= WIRE_SAFE | {"%"}
    assert decode_value(wire) == text


@given(st.binary())
def test_percent_encoding_round_trips_bytes(data: bytes) -> None:
    assert decode_value_bytes(encode_value(data)) == data


# --- the generic line form -----------------------------------------------------------


def test_encode_line() -> None:
    assert encode_line(["stats"]) == b"stats\n"
    assert encode_line(["vocab", "/tmp/my file"]) == b"vocab /tmp/my%20file\n"
    assert encode_line(["ok", "detokenize"], {"text": "a=b c"}) == b"ok detokenize text=a%3Db%20c\n"
    assert encode_line(["ok", "x"], {"empty": ""}) == b"ok x empty=\n"


@pytest.mark.parametrize(
    ("words", "options"),
    [
        ([], {}),
        ([""], {}),
        (["two words"], {}),
        (["a=b"], {}),
        (["cmd", ""], {}),
        (["cmd"], {"": "x"}),
        (["cmd"], {"bad key": "x"}),
        (["cmd"], {"k=v": "x"}),
        (["cmd"], {"Temp": "x"}),
        (["cmd"], {"a.b": "x"}),
    ],
)
def test_encode_line_refuses_what_cannot_be_read_back(
    words: list[str], options: dict[str, str]
) -> None:
    with pytest.raises(ValueError):
        encode_line(words, options)


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("stats", CommandLine("stats", (), {})),
        ("stats\n", CommandLine("stats", (), {})),
        ("stats\r\n", CommandLine("stats", (), {})),
        (b"stats\r\n", CommandLine("stats", (), {})),
        (
            "  generate   ids:1,2   16  temp=0.8   seed=7 ",
            CommandLine("generate", ("ids:1,2", "16"), {"temp": "0.8", "seed": "7"}),
        ),
        ("tokenize text:Hello%20world", CommandLine("tokenize", ("text:Hello world",), {})),
        ("vocab /tmp/a%3Db", CommandLine("vocab", ("/tmp/a=b",), {})),
        ("x k=", CommandLine("x", (), {"k": ""})),
        ("x k=a=b", CommandLine("x", (), {"k": "a=b"})),  # the first = splits
        # A word is an option only when what precedes its first = is a key.
        ("vocab /tmp/a=b", CommandLine("vocab", ("/tmp/a=b",), {})),
        ("x =1 Temp=2", CommandLine("x", ("=1", "Temp=2"), {})),
    ],
)
def test_parse_command_line(line: str | bytes, parsed: CommandLine) -> None:
    assert parse_command_line(line) == parsed
    command, args, options = parse_command_line(line)
    assert (command, args, options) == tuple(parsed)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("", "empty line"),
        ("   \r\n", "empty line"),
        ("generate 16 temp=1 ids:1", "after options"),
        ("generate ids:1 16 temp=1 temp=2", "given twice"),
        ("x k=1 =1", "after options"),
        ("x k=100%", "bad percent-escape"),
        ("x 100%", "bad percent-escape"),
        ("stats\nquit", "more than one line"),
        (b"tokenize text:\xff", "not UTF-8"),
        ("tokenize text:%FF", "not UTF-8"),
    ],
)
def test_parse_command_line_refuses(line: str | bytes, reason: str) -> None:
    with pytest.raises(MalformedLineError, match=reason) as info:
        parse_command_line(line)
    assert info.value.line == line


_keys = st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True)


@given(
    head=st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    args=st.lists(st.text(min_size=1), max_size=5),
    options=st.dictionaries(_keys, st.text(), max_size=5),
)
def test_line_encode_then_parse_round_trips(
    head: str, args: list[str], options: dict[str, str]
) -> None:
    line = encode_line([head, *args], options)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.isascii()
    assert parse_command_line(line) == CommandLine(head, tuple(args), options)


# --- commands --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (
            Generate(InlineIds((1, 2, 3)), 16, SamplingParams(temp=0.8, seed=7), stop=(106,)),
            b"generate ids:1,2,3 16 temp=0.8 seed=7 stop=106\n",
        ),
        (Generate(TokenFile("/tmp/p.bin"), 16), b"generate /tmp/p.bin 16\n"),
        (Generate(TokenFile(Path("/tmp/my p.bin")), 1), b"generate /tmp/my%20p.bin 1\n"),
        (
            Generate(InlineIds([5]), 2, stop=[1, 106], ignore_eos=True),  # type: ignore[arg-type]
            b"generate ids:5 2 stop=1,106 ignore_eos=1\n",
        ),
        (
            Generate(
                InlineIds((1,)),
                8,
                SamplingParams(
                    temp=0.7,
                    top_k=40,
                    top_p=0.95,
                    min_p=0.05,
                    rep_pen=1.1,
                    freq_pen=0.5,
                    pres_pen=-0.5,
                    rep_window=128,
                    seed=0,
                ),
            ),
            b"generate ids:1 8 temp=0.7 top_k=40 top_p=0.95 min_p=0.05 rep_pen=1.1"
            b" freq_pen=0.5 pres_pen=-0.5 rep_window=128 seed=0\n",
        ),
        (Tokenize(InlineText("Hello world")), b"tokenize text:Hello%20world\n"),
        (Tokenize(InlineText("")), b"tokenize text:\n"),
        (
            Tokenize(TextFile("/tmp/t.txt"), special=False, add_bos=True),
            b"tokenize /tmp/t.txt special=0 add_bos=1\n",
        ),
        (Tokenize(InlineText("a"), add_bos=False), b"tokenize text:a add_bos=0\n"),
        (Detokenize(InlineIds((9259, 1902))), b"detokenize ids:9259,1902\n"),
        (Detokenize(InlineIds(()), special=True), b"detokenize ids: special=1\n"),
        (Detokenize(TokenFile("/tmp/x.ids")), b"detokenize /tmp/x.ids\n"),
        (Vocab("/tmp/pieces.msgpack"), b"vocab /tmp/pieces.msgpack\n"),
        (Vocab(Path("/tmp/p q.msgpack")), b"vocab /tmp/p%20q.msgpack\n"),
        (Stats(), b"stats\n"),
        (Stats("/tmp/s.msgpack"), b"stats path=/tmp/s.msgpack\n"),
        (Stats(Path("/tmp/a=b")), b"stats path=/tmp/a%3Db\n"),
        (Quit(), b"quit\n"),
        (Cancel(), b"cancel\n"),
        (
            Generate(InlineIds((2, 9259, 1902, 563)), 3, snap=(4, 0)),
            b"generate ids:2,9259,1902,563 3 snap=4:0\n",
        ),
        (
            Generate(InlineIds((1,)), 8, grammar=InlineText('root ::= "yes" | "no"')),
            b'generate ids:1 8 grammar=text:root%20::%3D%20"yes"%20|%20"no"\n',
        ),
        (
            Generate(
                TokenFile("/tmp/p.bin"),
                8,
                stop=(7,),
                grammar=TextFile("/tmp/g.gbnf"),
                snap=(512, 3),
            ),
            b"generate /tmp/p.bin 8 stop=7 grammar=/tmp/g.gbnf snap=512:3\n",
        ),
        (Restore(0, InlineIds((2, 9259)), 3), b"restore 0 ids:2,9259 3\n"),
        (
            Generate(InlineIds((1, 2, 3, 4)), 2, reuse=False, marks=(2, 4)),
            b"generate ids:1,2,3,4 2 reuse=0 marks=2,4\n",
        ),
        (SaveSlot(3, "/tmp/s.lsnap"), b"save_slot 3 /tmp/s.lsnap\n"),
        (LoadSlot(0, "/tmp/a b.lsnap"), b"load_slot 0 /tmp/a%20b.lsnap\n"),
        (
            Restore(
                7,
                TokenFile("/tmp/p.bin"),
                64,
                SamplingParams(temp=0.8, seed=7),
                stop=(106,),
                ignore_eos=True,
                snap=(8, 1),
            ),
            b"restore 7 /tmp/p.bin 64 temp=0.8 seed=7 stop=106 ignore_eos=1 snap=8:1\n",
        ),
        (Snapshot(1), b"snapshot 1\n"),
        (FreeSnapshot(0), b"free_snapshot 0\n"),
        (ListSlots(), b"list_slots\n"),
        (Park(), b"park\n"),
        (Park("target"), b"park target\n"),
        (Unpark(), b"unpark\n"),
        (Unpark("draft"), b"unpark draft\n"),
        (
            Compress(TokenFile("/tmp/long_prompt.ids"), 100, lookahead=8, chunk=32),
            b"compress /tmp/long_prompt.ids 100 lookahead=8 chunk=32\n",
        ),
        (Compress(InlineIds((1, 2)), 1000, pool=5), b"compress ids:1,2 1000 pool=5\n"),
        (Compress(InlineIds((1,)), 50, segment=0), b"compress ids:1 50 segment=0\n"),
        (Compress(InlineIds((1,)), 50, segment=8192), b"compress ids:1 50 segment=8192\n"),
        (Generate(InlineIds((1, 2)), 4, logprobs=5), b"generate ids:1,2 4 logprobs=5\n"),
        (Generate(InlineIds((1,)), 4, logprobs=0), b"generate ids:1 4 logprobs=0\n"),
        (Restore(1, InlineIds((1,)), 4, logprobs=20), b"restore 1 ids:1 4 logprobs=20\n"),
        (
            Generate(InlineIds((1, 2)), 0, logprobs=2, prompt_logprobs=True),
            b"generate ids:1,2 0 logprobs=2 prompt_logprobs=1\n",
        ),
        (
            Generate(InlineIds((1, 2)), 3, logprobs=0, prompt_logprobs=True, reuse=False),
            b"generate ids:1,2 3 logprobs=0 reuse=0 prompt_logprobs=1\n",
        ),
        (Generate(InlineIds((1, 2)), 4, lookup=True), b"generate ids:1,2 4 lookup=1\n"),
        (Restore(1, InlineIds((1,)), 4, lookup=False), b"restore 1 ids:1 4 lookup=0\n"),
        (Embed(InlineIds((5, 6, 7)), "/tmp/e.f32"), b"embed ids:5,6,7 /tmp/e.f32\n"),
        (
            Embed(InlineIds((5, 6, 7)), "/tmp/e.f32", (1, 2), "last"),
            b"embed ids:5,6,7 /tmp/e.f32 lengths=1,2 pooling=last\n",
        ),
    ],
)
def test_command_encoding(command: Command, line: bytes) -> None:
    assert command.encode() == line
    assert parse_command(line) == command


def test_command_names_and_stream_flags() -> None:
    streams: dict[type, bool] = {Generate: True, Tokenize: True, Restore: True, Compress: True}
    classes: list[tuple[Any, str]] = [
        (Generate, "generate"),
        (Restore, "restore"),
        (Tokenize, "tokenize"),
        (Detokenize, "detokenize"),
        (Vocab, "vocab"),
        (Stats, "stats"),
        (Quit, "quit"),
        (Cancel, "cancel"),
        (Snapshot, "snapshot"),
        (FreeSnapshot, "free_snapshot"),
        (ListSlots, "list_slots"),
        (SaveSlot, "save_slot"),
        (LoadSlot, "load_slot"),
        (Park, "park"),
        (Unpark, "unpark"),
        (Compress, "compress"),
        (Embed, "embed"),
    ]
    assert {cls for cls, _ in classes} == set(get_args(Command))
    for cls, name in classes:
        assert cls.name == name
        assert cls.is_stream is streams.get(cls, False)
    assert Generate(InlineIds((1,)), 1).is_stream
    assert Restore(0, InlineIds((1,)), 1).is_stream
    assert not Cancel().is_stream


def test_generate_normalises_its_arguments() -> None:
    command = Generate(InlineIds([1, 2]), 4, None, stop=[7])  # type: ignore[arg-type]
    assert command.sampling == SamplingParams()
    assert command == Generate(InlineIds((1, 2)), 4, SamplingParams(), stop=(7,))
    assert command.stop == (7,)
    assert TokenFile(Path("/a/b")) == TokenFile("/a/b")
    assert TokenFile(Path("/a/b")).path == "/a/b"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Generate(InlineIds(()), 4), "at least one prompt token"),
        (lambda: Generate(InlineIds((1,)), 0), "n_gen"),
        (lambda: Generate(InlineIds((1,)), -3), "n_gen"),
        (lambda: Generate(InlineIds((1,)), 2**31), "n_gen"),
        (lambda: Generate(InlineIds((1,)), 1.5), "n_gen"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1,)), True), "n_gen"),
        (lambda: Generate((1, 2), 4), "prompt"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1,)), 4, stop=(-1,)), "stop token"),
        (lambda: Generate(InlineIds((1,)), 4, ignore_eos=1), "ignore_eos"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1,)), 4, sampling={"temp": 1}), "sampling"),  # type: ignore[arg-type]
        (lambda: InlineIds((-1,)), "token id"),
        (lambda: InlineIds((2**31,)), "token id"),
        (lambda: InlineIds((True,)), "token id"),
        (lambda: InlineIds(("1",)), "token id"),  # type: ignore[arg-type]
        (lambda: TokenFile(""), "empty"),
        (lambda: TokenFile("ids:1,2"), "./ids:1,2"),
        (lambda: TokenFile("a\0b"), "NUL"),
        (lambda: TextFile("text:hi"), "./text:hi"),
        (lambda: InlineText("\udc80"), "UTF-8"),
        (lambda: Tokenize("hello"), "text"),  # type: ignore[arg-type]
        (lambda: Tokenize(InlineText("a"), special=None), "special"),  # type: ignore[arg-type]
        (lambda: Detokenize(InlineText("a")), "ids"),  # type: ignore[arg-type]
        (lambda: Vocab(""), "vocab path"),
        (lambda: Stats(""), "stats path"),
        (lambda: Stats("a\0b"), "stats path"),
        (lambda: Generate(InlineIds((1,)), 4, grammar="root ::= x"), "grammar"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1, 2)), 4, snap=(0, 0)), "snap position"),
        (lambda: Generate(InlineIds((1, 2)), 4, snap=(3, 0)), "snap position must be in [1, 2]"),
        (lambda: Generate(InlineIds((1, 2)), 4, snap=(1, -1)), "slot"),
        (lambda: Generate(InlineIds((1, 2)), 4, snap=(1,)), "snap"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1, 2)), 4, snap=[1, 0]), "snap"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1, 2)), 0), "n_gen must be in [1"),
        (lambda: Generate(InlineIds((1, 2)), 0, logprobs=1), "n_gen must be in [1"),
        (lambda: Generate(InlineIds((1, 2)), 1, prompt_logprobs=True), "needs logprobs"),
        (lambda: Generate(InlineIds((1, 2)), 1, lookup=2), "lookup"),  # type: ignore[arg-type]
        (lambda: Generate(InlineIds((1, 2)), -1, logprobs=1, prompt_logprobs=True), "n_gen"),
        (lambda: Generate(InlineIds((1,)), 1, logprobs=1, prompt_logprobs=2),  # type: ignore[arg-type]
         "prompt_logprobs"),
        (lambda: Restore(-1, InlineIds((1,)), 4), "slot"),
        (lambda: Restore(2**31, InlineIds((1,)), 4), "slot"),
        (lambda: Restore(True, InlineIds((1,)), 4), "slot"),
        (lambda: Restore(0, InlineIds(()), 4), "restore needs at least one prompt token"),
        (lambda: Restore(0, InlineIds((1,)), 0), "n_gen"),
        (lambda: Restore(0, InlineText("a"), 1), "prompt"),  # type: ignore[arg-type]
        (lambda: Snapshot(-1), "slot"),
        (lambda: Snapshot("1"), "slot"),  # type: ignore[arg-type]
        (lambda: FreeSnapshot(1.0), "slot"),  # type: ignore[arg-type]
        (lambda: Park("everything"), "which"),  # type: ignore[arg-type]
        (lambda: Unpark(None), "which"),  # type: ignore[arg-type]
        (lambda: Compress(InlineIds(()), 10), "at least one prompt token"),
        (lambda: Compress(InlineIds((1,)), 0), "keep_x1000"),
        (lambda: Compress(InlineIds((1,)), 1001), "keep_x1000"),
        (lambda: Compress(InlineIds((1,)), 10, chunk=0), "chunk"),
        (lambda: Compress(InlineIds((1,)), 10, pool=2**31), "pool"),
        (lambda: Compress(InlineText("a"), 10), "ids"),  # type: ignore[arg-type]
    ],
)
def test_constructors_validate(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()  # type: ignore[operator]


def test_a_path_may_mention_the_prefixes_elsewhere() -> None:
    assert TokenFile("./ids:1").path == "./ids:1"
    assert parse_command(b"generate ./ids:1 4\n") == Generate(TokenFile("./ids:1"), 4)
    assert parse_command(b"tokenize text:ids:1\n") == Tokenize(InlineText("ids:1"))
    assert parse_command(b"tokenize ids:1\n") == Tokenize(TextFile("ids:1"))


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("frobnicate", ErrorCode.UNKNOWN_COMMAND),
        ("GENERATE ids:1 4", ErrorCode.UNKNOWN_COMMAND),
        ("", ErrorCode.UNKNOWN_COMMAND),
        ("generate ids: 4", ErrorCode.EMPTY_PROMPT),
        ("generate ids:1", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 5", ErrorCode.BAD_ARGS),
        ("generate ids:1 0", ErrorCode.BAD_ARGS),
        ("generate ids:1 -4", ErrorCode.BAD_ARGS),
        ("generate ids:1 four", ErrorCode.BAD_ARGS),
        ("generate ids:1 99999999999", ErrorCode.BAD_ARGS),
        ("generate ids:1 4.0", ErrorCode.BAD_ARGS),
        ("generate ids:1,,2 4", ErrorCode.BAD_ARGS),
        ("generate ids:1, 4", ErrorCode.BAD_ARGS),
        ("generate ids:1%2C%202 4", ErrorCode.BAD_ARGS),
        ("generate ids:99999999999 4", ErrorCode.BAD_ARGS),
        ("generate ids:x,-1 4", ErrorCode.BAD_ARGS),
        ("generate ids:-1 4", ErrorCode.BAD_TOKEN),
        ("generate ids:5,-2147483648 4", ErrorCode.BAD_TOKEN),
        ("generate ids:1 4 stop=-5", ErrorCode.BAD_TOKEN),
        ("generate ids:1 4 stop=99999999999", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 stop=a", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 Temp=1", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=hot", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=-1", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=inf", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=nan", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=1e999", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 top_k=1.5", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 top_p=1.5", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 seed=4294967296", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 ignore_eos=yes", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temperature=1", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 temp=1 temp=1", ErrorCode.BAD_ARGS),
        ("generate ids:1 temp=1 4", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 logprobs=21", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 logprobs=-1", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 logprobs=", ErrorCode.BAD_ARGS),
        ("restore 0 ids:1 4 logprobs=x", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 0", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 0 logprobs=1", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 prompt_logprobs=1", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 0 prompt_logprobs=0 logprobs=1", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 prompt_logprobs=2 logprobs=1", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 -1 prompt_logprobs=1 logprobs=1", ErrorCode.BAD_ARGS),
        ("restore 0 ids:1 0 prompt_logprobs=1 logprobs=1", ErrorCode.BAD_ARGS),
        ("embed ids:1", ErrorCode.BAD_ARGS),
        ("embed ids: /tmp/e", ErrorCode.EMPTY_PROMPT),
        ("embed ids:1,2 /tmp/e lengths=0,2", ErrorCode.EMPTY_PROMPT),
        ("embed ids:1,2 /tmp/e lengths=1", ErrorCode.BAD_ARGS),
        ("embed ids:1,2 /tmp/e lengths=", ErrorCode.BAD_ARGS),
        ("embed ids:1,2 /tmp/e lengths=a", ErrorCode.BAD_ARGS),
        ("embed ids:1,2 /tmp/e pooling=cls", ErrorCode.BAD_ARGS),
        ("embed ids:1,2 /tmp/e dim=3", ErrorCode.BAD_ARGS),
        ("embed ids:-1 /tmp/e", ErrorCode.BAD_TOKEN),
        ("embed ids:1 /tmp/e%00x", ErrorCode.BAD_ARGS),
        ("tokenize", ErrorCode.BAD_ARGS),
        ("tokenize text:a special=2", ErrorCode.BAD_ARGS),
        ("tokenize text:%FF", ErrorCode.BAD_ARGS),
        ("tokenize text:100%", ErrorCode.BAD_ARGS),
        ("detokenize ids:1 add_bos=1", ErrorCode.BAD_ARGS),
        ("vocab", ErrorCode.BAD_ARGS),
        ("vocab /a /b", ErrorCode.BAD_ARGS),
        ("stats now", ErrorCode.BAD_ARGS),
        ("quit k=v", ErrorCode.BAD_ARGS),
        ("cancel all", ErrorCode.BAD_ARGS),
        ("stats path=", ErrorCode.BAD_ARGS),
        ("stats verbose=1", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 snap=3:0", ErrorCode.BAD_ARGS),  # beyond the prompt
        ("generate ids:1,2 4 snap=0:0", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 snap=2", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 snap=x:0", ErrorCode.BAD_ARGS),
        ("generate ids:1,2 4 snap=2:x", ErrorCode.BAD_SLOT),
        ("generate ids:1,2 4 snap=2:-1", ErrorCode.BAD_SLOT),
        ("generate ids:1 4 grammar=", ErrorCode.BAD_ARGS),
        ("generate ids:1 4 grammar=text:%FF", ErrorCode.BAD_ARGS),
        ("restore 0 ids: 4", ErrorCode.EMPTY_PROMPT),
        ("restore x ids:1 4", ErrorCode.BAD_SLOT),
        ("restore -1 ids:1 4", ErrorCode.BAD_SLOT),
        ("restore 99999999999 ids:1 4", ErrorCode.BAD_SLOT),
        ("restore 0 ids:1", ErrorCode.BAD_ARGS),
        ("restore ids:1 4", ErrorCode.BAD_ARGS),
        ("restore 0 ids:1 0", ErrorCode.BAD_ARGS),
        ("restore 0 ids:-1 1", ErrorCode.BAD_TOKEN),
        ("restore 0 ids:1 1 stop=-2", ErrorCode.BAD_TOKEN),
        ("restore 0 ids:1 1 temp=hot", ErrorCode.BAD_ARGS),
        ("snapshot", ErrorCode.BAD_ARGS),
        ("snapshot 1 2", ErrorCode.BAD_ARGS),
        ("snapshot x", ErrorCode.BAD_SLOT),
        ("snapshot -3", ErrorCode.BAD_SLOT),
        ("snapshot 1.5", ErrorCode.BAD_SLOT),
        ("free_snapshot", ErrorCode.BAD_ARGS),
        ("free_snapshot one", ErrorCode.BAD_SLOT),
        ("list_slots 1", ErrorCode.BAD_ARGS),
        ("list_slots all=1", ErrorCode.BAD_ARGS),
        ("park everything", ErrorCode.BAD_ARGS),
        ("park target draft", ErrorCode.BAD_ARGS),
        ("park TARGET", ErrorCode.BAD_ARGS),
        ("unpark k=v", ErrorCode.BAD_ARGS),
        ("compress ids: 100", ErrorCode.EMPTY_PROMPT),
        ("compress ids:1", ErrorCode.BAD_ARGS),
        ("compress ids:1 0", ErrorCode.BAD_ARGS),
        ("compress ids:1 1001", ErrorCode.BAD_ARGS),
        ("compress ids:1 half", ErrorCode.BAD_ARGS),
        ("compress ids:1 50 chunk=0", ErrorCode.BAD_ARGS),
        ("compress ids:1 50 segment=-1", ErrorCode.BAD_ARGS),
        ("compress ids:1 50 pool=x", ErrorCode.BAD_ARGS),
        ("compress ids:1 50 window=4", ErrorCode.BAD_ARGS),
        ("compress ids:1,-2 50", ErrorCode.BAD_TOKEN),
    ],
)
def test_parse_command_refuses_with_the_daemons_code(line: str, code: ErrorCode) -> None:
    with pytest.raises(CommandError) as info:
        parse_command(line)
    assert info.value.code is code
    assert info.value.line == line
    assert str(info.value)


def test_parse_command_reads_exit_as_quit() -> None:
    assert parse_command("exit") == Quit()
    assert parse_command("quit\r\n") == Quit()
    assert Quit().encode() == b"quit\n"


def test_parse_command_reads_defaults_and_unbounded_snaps() -> None:
    assert parse_command("park all") == Park() == Park("all")
    assert parse_command("unpark target") == Unpark("target")
    assert parse_command("snapshot +3") == Snapshot(3)
    # The prompt's length is not known from a token file: only the daemon can bound L.
    assert parse_command("generate /tmp/p.bin 4 snap=100:2") == Generate(
        TokenFile("/tmp/p.bin"), 4, snap=(100, 2)
    )
    # A slot beyond --slots is the daemon's to refuse; the line itself is fine.
    assert parse_command("restore 99 ids:1 1") == Restore(99, InlineIds((1,)), 1)
    assert parse_command("compress ids:5 1000 lookahead=8") == Compress(
        InlineIds((5,)), 1000, lookahead=8
    )


def test_parse_command_reads_decimals_as_the_daemons_do() -> None:
    assert parse_command("generate ids:007,+8 +4 temp=1 stop=") == Generate(
        InlineIds((7, 8)), 4, SamplingParams(temp=1.0)
    )


# --- sampling --------------------------------------------------------------------------


def test_sampling_defaults_are_not_written() -> None:
    assert SamplingParams().to_options() == {}
    assert SamplingParams().is_greedy
    assert not SamplingParams(temp=0.1).is_greedy
    assert SamplingParams(temp=1, top_k=40).to_options() == {"temp": "1.0", "top_k": "40"}
    assert SamplingParams(rep_pen=1.0, rep_window=64).to_options() == {}
    assert SamplingParams(top_k=0).to_options() == {"top_k": "0"}  # explicit beats None


def test_sampling_normalises_numbers() -> None:
    params = SamplingParams(temp=1, top_p=1)
    assert isinstance(params.temp, float) and isinstance(params.top_p, float)
    assert params == SamplingParams(temp=1.0, top_p=1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temp": -0.1},
        {"temp": float("inf")},
        {"temp": float("nan")},
        {"temp": "0.8"},
        {"temp": True},
        {"top_k": -1},
        {"top_k": 1.0},
        {"top_p": 1.01},
        {"top_p": -0.1},
        {"min_p": 2.0},
        {"rep_pen": 0.0},
        {"rep_window": -1},
        {"seed": -1},
        {"seed": 2**32},
        {"freq_pen": float("-inf")},
    ],
)
def test_sampling_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_sampling_from_options_ignores_other_keys() -> None:
    assert SamplingParams.from_options({"temp": "0.5", "stop": "1"}) == SamplingParams(temp=0.5)
    assert SamplingParams.from_options({"seed": "4294967295"}).seed == 2**32 - 1
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams.from_options({"top_k": "4.0"})


_finite = st.floats(allow_nan=False, allow_infinity=False)
_unit = st.floats(min_value=0.0, max_value=1.0)

sampling_params = st.builds(
    SamplingParams,
    temp=st.floats(min_value=0.0, max_value=1e6),
    top_k=st.none() | st.integers(0, 10**6),
    top_p=st.none() | _unit,
    min_p=st.none() | _unit,
    rep_pen=st.floats(min_value=1e-6, max_value=1e6),
    freq_pen=_finite,
    pres_pen=_finite,
    rep_window=st.integers(0, 10**6),
    seed=st.none() | st.integers(0, 2**32 - 1),
)
_ids = st.integers(0, 2**31 - 1)
_counts = st.integers(1, 2**31 - 1)
_slots = st.integers(0, 2**31 - 1)
_paths = st.text(min_size=1).filter(lambda p: "\0" not in p)
_token_files = st.builds(TokenFile, _paths.filter(lambda p: not p.startswith("ids:")))
_prompts = st.one_of(
    st.builds(InlineIds, st.lists(_ids, min_size=1, max_size=20).map(tuple)), _token_files
)
_texts = st.one_of(
    st.builds(InlineText, st.text()),
    st.builds(TextFile, _paths.filter(lambda p: not p.startswith("text:"))),
)


@st.composite
def _decoding_commands(draw: st.DrawFn, cls: type[Generate | Restore]) -> Generate | Restore:
    """A generate or restore with every option, ``snap`` within the prompt when known."""
    prompt = draw(_prompts)
    n_prompt = len(prompt.ids) if isinstance(prompt, InlineIds) else 2**31 - 1
    arguments: dict[str, Any] = {
        "prompt": prompt,
        "n_gen": draw(_counts),
        "sampling": draw(st.none() | sampling_params),
        "stop": tuple(draw(st.lists(_ids, max_size=4))),
        "ignore_eos": draw(st.booleans()),
        "grammar": draw(st.none() | _texts),
        "snap": draw(st.none() | st.tuples(st.integers(1, n_prompt), _slots)),
        "logprobs": draw(st.none() | st.integers(0, 20)),
    }
    if cls is Restore:
        arguments["slot"] = draw(_slots)
    else:
        arguments["reuse"] = draw(st.booleans())
        arguments["marks"] = tuple(sorted(draw(st.sets(st.integers(1, n_prompt), max_size=4))))
        if arguments["logprobs"] is not None and draw(st.booleans()):
            arguments["prompt_logprobs"] = True
            arguments["n_gen"] = draw(st.integers(0, 3) | _counts)
    return cls(**arguments)


@st.composite
def _embed_commands(draw: st.DrawFn) -> Embed:
    """An embed of one or more inputs, inline or from a file."""
    if draw(st.booleans()):
        return Embed(draw(_token_files), draw(_paths), tuple(draw(st.lists(_counts, max_size=4))),
                     draw(st.sampled_from(["mean", "last"])))
    inputs = draw(st.lists(st.lists(_ids, min_size=1, max_size=5), min_size=1, max_size=4))
    lengths = tuple(len(i) for i in inputs) if draw(st.booleans()) else ()
    if not lengths:
        inputs = inputs[:1]
    return Embed(InlineIds(tuple(i for one in inputs for i in one)), draw(_paths), lengths,
                 draw(st.sampled_from(["mean", "last"])))


commands: st.SearchStrategy[Command] = st.one_of(
    _decoding_commands(Generate),
    _decoding_commands(Restore),
    st.builds(Tokenize, text=_texts, special=st.booleans(), add_bos=st.none() | st.booleans()),
    st.builds(
        Detokenize,
        ids=st.one_of(st.builds(InlineIds, st.lists(_ids, max_size=20).map(tuple)), _token_files),
        special=st.booleans(),
    ),
    st.builds(Vocab, _paths),
    st.builds(Stats, st.none() | _paths),
    st.just(Quit()),
    st.just(Cancel()),
    st.builds(Snapshot, _slots),
    st.builds(FreeSnapshot, _slots),
    st.just(ListSlots()),
    st.builds(SaveSlot, _slots, _paths),
    st.builds(LoadSlot, _slots, _paths),
    st.builds(Park, st.sampled_from(["all", "target", "draft"])),
    st.builds(Unpark, st.sampled_from(["all", "target", "draft"])),
    st.builds(
        Compress,
        _prompts,
        st.integers(1, 1000),
        lookahead=st.none() | _counts,
        chunk=st.none() | _counts,
        pool=st.none() | _counts,
        segment=st.none() | st.integers(0, 1 << 20),
    ),
    _embed_commands(),
)


@given(commands)
def test_command_encode_then_parse_round_trips(command: Command) -> None:
    line = command.encode()
    assert line.isascii() and line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.split(b" ", 1)[0].rstrip(b"\n") == command.name.encode()
    assert parse_command(line) == command
    assert parse_command(line.decode()) == command


@given(sampling_params)
def test_sampling_options_round_trip(params: SamplingParams) -> None:
    assert SamplingParams.from_options(params.to_options()) == params
