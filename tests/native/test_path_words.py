"""Path words (PROTOCOL.md 3, 4, 6): whatever bytes are percent-encoded into a path, a
daemon acts on exactly the file those bytes name, or refuses. A NUL byte names no file:
the OS reads paths as C strings, which end at the NUL, so a daemon that let one through
would act on a shorter path (the classic truncation) and report success.

The property test plants, next to each random path, a decoy at the path cut at its
first NUL, with contents that would give a different answer, so acting on the wrong
file cannot pass for acting on the right one."""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import decode_value_bytes, encode_value

ONE_THREAD = "--threads=1"
HELLO, WORLD = 9707, 1879  # qwen3 test-model ids
REAL_IDS, DECOY_IDS = [HELLO, WORLD], [HELLO, WORLD, WORLD]  # both extend slot 0's [HELLO]
REAL_TEXT, DECOY_TEXT = b"Hello", b"world world"
GOOD_GRAMMAR, BAD_GRAMMAR = b"root ::= [a-z]+", b"root ::= ("
GOOD_SCHEMA, BAD_SCHEMA = b'{"type": "string"}', b"{"
READ_REFUSALS = {"token": {"bad_args", "bad_token_file"}, "text": {"bad_args", "bad_text_file"}}
WRITE_REFUSALS = {"bad_args", "io_failed"}


def ids_bytes(ids: list[int]) -> bytes:
    return b"".join(i.to_bytes(4, "little", signed=True) for i in ids)


def tree(root: bytes) -> set[bytes]:
    """Every file and directory under ``root``."""
    entries: set[bytes] = set()
    for parent, dirs, files in os.walk(root):
        entries.update(os.path.join(parent, name) for name in (*dirs, *files))
    return entries


def plant(path: bytes, contents: bytes) -> bool:
    """Write ``contents`` at ``path`` if a file can exist there; True if one does."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except ValueError:  # a NUL: no file has this name
        return False
    except OSError as error:  # a missing directory, a directory, a name too long
        assert error.errno in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG)
        return False
    with os.fdopen(fd, "wb") as file:
        file.write(contents)
    return True


def decoy_of(path: bytes) -> bytes | None:
    """The path a NUL-truncating daemon would use instead."""
    return path[: path.index(b"\0")] if b"\0" in path else None


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class PathCheck:
    """One daemon, one fresh directory per example."""

    def __init__(self, daemon: Any, root: Path) -> None:
        self.daemon = daemon
        self.root = root
        self.counter = itertools.count()
        _, reply = daemon.stream_command(f"generate ids:{HELLO} 1")
        daemon.ok(reply, "generate")
        daemon.ok(daemon.command("snapshot 0"), "snapshot")  # slot 0 holds [HELLO]
        self.real_text = self.tokens(f"tokenize text:{encode_value(REAL_TEXT)}")
        self.real_detok = daemon.ok(daemon.command(f"detokenize ids:{HELLO},{WORLD}"), "detokenize")

    def tokens(self, line: str) -> list[int]:
        values: list[int]
        values, reply = self.daemon.stream_command(line)
        self.daemon.ok(reply, "tokenize")
        return values

    def run(self, name: bytes) -> None:
        folder = os.fsencode(self.root / f"ex{next(self.counter)}")
        os.mkdir(folder)
        path = folder + b"/" + name
        word = encode_value(path)
        self.reads(path, word)
        self.write(folder, path, f"vocab {word}", "vocab")
        self.write(folder, path, f"stats path={word}", "stats")

    def place(self, path: bytes, real: bytes, decoy: bytes) -> bool:
        """Plant the real file and its decoy; True when the daemon must act on the real one."""
        decoy_path = decoy_of(path)
        if decoy_path is not None:
            plant(decoy_path, decoy)
        return plant(path, real) and is_utf8(path)

    def reads(self, path: bytes, word: str) -> None:
        d = self.daemon
        cases: list[tuple[str, bytes, bytes, str]] = [
            (f"detokenize {word}", ids_bytes(REAL_IDS), ids_bytes(DECOY_IDS), "token"),
            (f"generate {word} 1", ids_bytes(REAL_IDS), ids_bytes(DECOY_IDS), "token"),
            (f"restore 0 {word} 1", ids_bytes(REAL_IDS), ids_bytes(DECOY_IDS), "token"),
            (f"tokenize {word}", REAL_TEXT, DECOY_TEXT, "text"),
            (f"generate ids:{HELLO} 1 grammar={word}", GOOD_GRAMMAR, BAD_GRAMMAR, "text"),
            (f"generate ids:{HELLO} 1 json_schema={word}", GOOD_SCHEMA, BAD_SCHEMA, "text"),
        ]
        for line, real, decoy, kind in cases:
            acts = self.place(path, real, decoy)
            command = line.split(" ", 1)[0]
            if command == "detokenize":
                reply, values = d.command(line), None
            else:
                values, reply = d.stream_command(line)
            context = f"{line!r} (path {path!r}, exists={acts})"
            if not acts:
                assert d.err(reply) in READ_REFUSALS[kind], context
                assert not values, context
            elif command == "detokenize":
                assert d.ok(reply, "detokenize") == self.real_detok, context
            elif command == "tokenize":
                d.ok(reply, "tokenize")
                assert values == self.real_text, context
            elif kind == "token":
                assert d.ok(reply, command)["n_prompt"] == str(len(REAL_IDS)), context
            else:
                d.ok(reply, command)

    def write(self, folder: bytes, path: bytes, line: str, command: str) -> None:
        d = self.daemon
        for entry in tree(folder):  # the reads' files go: a write must add exactly one
            if not os.path.isdir(entry):
                os.remove(entry)
        before = tree(folder)
        reply = d.command(line)
        after = tree(folder)
        context = f"{line!r} (path {path!r})"
        if reply.startswith("ok "):
            fields = d.ok(reply, command)
            assert decode_value_bytes(fields["path"]) == path, context
            new = after - before
            assert len(new) == 1 and os.path.samefile(new.pop(), path), (context, after - before)
        else:
            assert d.err(reply) in WRITE_REFUSALS, context
            assert after == before, (context, after - before)
            # Refused: then no file can be there (or its name is not UTF-8, section 3).
            assert not (plant(path, b"") and is_utf8(path)), context


def names() -> st.SearchStrategy[bytes]:
    """Random names under one directory, NUL-laced and path-like ones over-represented;
    never a '..' component, so nothing is written outside the test's directory."""
    any_bytes = st.binary(min_size=1, max_size=24)
    with_nul = st.builds(lambda a, b: a + b"\0" + b, st.binary(max_size=12), st.binary(max_size=12))
    text = st.text(min_size=1, max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass"))
    fixed = st.sampled_from([
        b"\0", b"nul\0", b"a=b.bin\0junk", b"t.txt\0", b"\0.bin", b".", b"/", b"./x", b"a/b",
        b"x/", b"ids:1", b"text:x", b"%00", b"a%00b", b"sp ace", b"\n", b"\xff\xfe", b"\xc3\xa9",
    ])  # fmt: skip
    return st.one_of(any_bytes, with_nul, text, fixed).filter(lambda n: b".." not in n.split(b"/"))


@pytest.fixture
def qwen(spawn: Any, native: Any, test_models: dict[str, Path]) -> Iterator[Any]:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=64", ONE_THREAD)
    daemon.ready()
    yield daemon


def test_a_path_word_names_exactly_its_bytes_or_is_refused(qwen: Any, tmp_path: Path) -> None:
    check = PathCheck(qwen, tmp_path)

    # The daemon lives for the whole run: hypothesis drives it through an inner function
    # (a function-scoped fixture per example would start a daemon per example).
    @settings(max_examples=120, deadline=None, database=None)
    @given(names())
    def property_holds(name: bytes) -> None:
        check.run(name)

    property_holds()
    assert qwen.quit() == 0


def test_the_reported_truncations_are_refused(qwen: Any, tmp_path: Path) -> None:
    """The cases of issue 19, each with a decoy at the truncated path."""
    d = qwen
    base = str(tmp_path)
    (tmp_path / "a=b.bin").write_bytes(ids_bytes(DECOY_IDS))
    (tmp_path / "t_enc.txt").write_bytes(DECOY_TEXT)
    (tmp_path / "g.gbnf").write_bytes(GOOD_GRAMMAR)
    cases = {
        f"vocab {base}/nulv%00.msgpack": "bad_args",
        f"stats path={base}/nuls%00.msgpack": "bad_args",
        f"detokenize {base}/a%3Db.bin%00junk": "bad_args",
        f"tokenize {base}/t_enc.txt%00junk": "bad_args",
        f"generate ids:{HELLO} 1 grammar={base}/g.gbnf%00": "bad_args",
        # A word that starts with text: keeps its NUL (inline text may hold one), so
        # given where a path goes it is refused where the path is opened.
        "generate text:a%00b 1": "bad_token_file",
        "detokenize text:a%00b": "bad_token_file",
    }
    for line, code in cases.items():
        if line.split(" ", 1)[0] in ("generate", "tokenize"):
            values, reply = d.stream_command(line)
            assert values == [], line
        else:
            reply = d.command(line)
        assert d.err(reply) == code, (line, reply)
        assert "NUL" in reply, reply
    values, reply = d.stream_command(f"generate {base}/a%3Db.bin%00junk 5")
    assert values == [] and d.err(reply) == "bad_args", reply
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a=b.bin", "g.gbnf", "t_enc.txt"]
    assert d.quit() == 0


def test_a_nul_inside_inline_text_is_data_except_for_a_c_string(qwen: Any) -> None:
    d = qwen
    # tokenize takes inline text with its length: the NUL is tokenized, not an end.
    with_nul, reply = d.stream_command("tokenize text:a%00b special=0 add_bos=0")
    d.ok(reply, "tokenize")
    plain, _ = d.stream_command("tokenize text:a special=0 add_bos=0")
    assert len(with_nul) > len(plain)
    # The grammar parser reads a C string: a grammar that goes on after a NUL is refused
    # instead of being parsed up to it (root ::= "a" alone would parse).
    grammar = "text:root%20::=%20%22a%22%00junk"
    values, reply = d.stream_command(f"generate ids:{HELLO} 1 grammar={grammar}")
    assert values == [] and d.err(reply) == "bad_grammar" and "NUL" in reply, reply
    # Elsewhere a NUL is refused whatever the value: numbers, ids, slots, keywords.
    for line in (
        f"generate ids:{HELLO} 1%00", f"generate ids:{HELLO}%00 1", "restore 0%00 ids:1 1",
        f"generate ids:{HELLO} 1 seed=1%00", f"generate ids:{HELLO} 1 stop=1%00",
    ):  # fmt: skip
        values, reply = d.stream_command(line)
        assert values == [] and d.err(reply) == "bad_args", (line, reply)
    assert d.err(d.command("park target%00")) == "bad_args"
    assert d.quit() == 0
