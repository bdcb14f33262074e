"""tokenize, detokenize and the vocab piece table (PROTOCOL.md 5, 5.2), percent-encoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import msgpack


def ids(tokens: list[int]) -> str:
    return "ids:" + ",".join(map(str, tokens))


def test_tokenize_detokenize_round_trip(gemma: Any) -> None:
    tokens, reply = gemma.stream_command("tokenize text:Hello%20world")
    assert tokens == [2, 9259, 1902]  # <bos> Hello ▁world, as in PROTOCOL.md section 8
    assert gemma.ok(reply, "tokenize") == {"n": "3"}
    assert gemma.stream_is_empty()
    assert gemma.command("detokenize ids:9259,1902") == "ok detokenize text=Hello%20world"
    # BOS is a control token: hidden by default, rendered with special=1.
    assert gemma.command(f"detokenize {ids(tokens)}") == "ok detokenize text=Hello%20world"
    assert (
        gemma.command(f"detokenize {ids(tokens)} special=1")
        == "ok detokenize text=<bos>Hello%20world"
    )


def test_tokenize_options(gemma: Any) -> None:
    assert gemma.stream_command("tokenize text:Hello%20world add_bos=0")[0] == [9259, 1902]
    special, _ = gemma.stream_command("tokenize text:<start_of_turn>user add_bos=0")
    assert special[0] == 105  # parsed as the control token (the default)
    plain, _ = gemma.stream_command("tokenize text:<start_of_turn>user add_bos=0 special=0")
    assert 105 not in plain and len(plain) > len(special)
    empty, reply = gemma.stream_command("tokenize text: add_bos=0")
    assert empty == [] and gemma.ok(reply, "tokenize") == {"n": "0"}


def test_awkward_text_survives_percent_encoding(gemma: Any) -> None:
    text = "a=b  100% of\tthé naïve 日本語 🙂\nend"
    tokens, _ = gemma.stream_command("tokenize text:" + quote(text, safe="") + " add_bos=0")
    reply = gemma.command(f"detokenize {ids(tokens)}")
    encoded = gemma.ok(reply, "detokenize")["text"]
    assert " " not in encoded and "=" not in encoded
    assert unquote(encoded) == text


def test_text_and_token_files(gemma: Any, tmp_path: Path) -> None:
    text_file = tmp_path / "prompt.txt"
    text_file.write_text("Hello world")
    tokens, _ = gemma.stream_command(f"tokenize {text_file}")
    assert tokens == [2, 9259, 1902]
    token_file = tmp_path / "ids.bin"
    token_file.write_bytes(b"".join(t.to_bytes(4, "little") for t in [9259, 1902]))
    assert gemma.command(f"detokenize {token_file}") == "ok detokenize text=Hello%20world"


def test_vocab_piece_table(gemma: Any, tmp_path: Path) -> None:
    path = tmp_path / "pieces table.msgpack"  # a space, so the path travels percent-encoded
    reply = gemma.command("vocab " + quote(str(path), safe="/"))
    assert gemma.ok(reply, "vocab") == {"n": "262144", "path": quote(str(path), safe="/")}
    table = msgpack.unpackb(path.read_bytes())
    assert set(table) == {"n_vocab", "pieces", "attrs", "eog", "bos", "eos", "add_bos"}
    assert table["n_vocab"] == 262144
    assert len(table["pieces"]) == len(table["attrs"]) == 262144
    assert all(isinstance(piece, bytes) for piece in table["pieces"])
    assert (table["bos"], table["eos"], table["add_bos"]) == (2, 1, True)
    assert {1, 106}.issubset(table["eog"])
    assert table["pieces"][2] == b"<bos>" and table["attrs"][2] & 8  # control
    assert table["pieces"][9259] == b"Hello" and table["attrs"][9259] & 4  # normal

    text = "Hello world, this is Lucerna! Ünïcödé and emoji 🙂 split across byte tokens."
    tokens, _ = gemma.stream_command("tokenize text:" + quote(text, safe="") + " add_bos=0")
    assert b"".join(table["pieces"][t] for t in tokens).decode() == text


def test_vocab_of_a_test_model(
    spawn: Any, native: Any, test_models: dict[str, Path], tmp_path: Path
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen35"], "--n-ctx=256")
    ready = daemon.ready()
    assert ready["add_bos"] == "0" and ready["eos"] == "151643"
    path = tmp_path / "qwen.msgpack"
    daemon.ok(daemon.command(f"vocab {path}"), "vocab")
    table = msgpack.unpackb(path.read_bytes())
    assert table["n_vocab"] == 151936 and table["add_bos"] is False
    assert {151643, 151645}.issubset(table["eog"])
    text = "Hello world, 你好世界"
    tokens, _ = daemon.stream_command("tokenize text:" + quote(text, safe=""))
    assert b"".join(table["pieces"][t] for t in tokens).decode() == text
    assert daemon.quit() == 0
