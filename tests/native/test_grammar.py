"""grammar= (PROTOCOL.md 5.1): the engine's GBNF sampler constrains greedy and sampled
decoding, ends generation when the grammar is complete, and a bad grammar is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest

ONE_THREAD = "--threads=1"  # see test_snapshots.py


def text_ref(text: str) -> str:
    return "text:" + quote(text, safe="")


@pytest.fixture(scope="module")
def gemma1(spawn_for_module: Any, native: Any, default_model: Path) -> Any:
    daemon = spawn_for_module(native.binary("qwen35"), default_model, "--n-ctx=512", ONE_THREAD)
    daemon.ready()
    return daemon


@pytest.fixture(scope="module")
def prompt(gemma1: Any) -> str:
    tokens, _ = gemma1.stream_command("tokenize " + text_ref("The answer, as a number:"))
    return "ids:" + ",".join(map(str, tokens))


def generated_text(daemon: Any, tokens: list[int]) -> str:
    if not tokens:
        return ""
    reply = daemon.command("detokenize ids:" + ",".join(map(str, tokens)))
    return unquote(daemon.ok(reply, "detokenize")["text"])


@pytest.mark.parametrize(
    "sampling", ["", " temp=0.9 seed=3", " temp=1.5 top_k=5 rep_pen=1.3 seed=9"]
)
def test_grammar_constrains_and_completes(gemma1: Any, prompt: str, sampling: str) -> None:
    tokens, reply = gemma1.stream_command(
        f"generate {prompt} 30 grammar={text_ref('root ::= [0-9]{6}')}{sampling}"
    )
    fields = gemma1.ok(reply, "generate")
    assert re.fullmatch(r"[0-9]{6}", generated_text(gemma1, tokens))
    # Complete: nothing but end-of-generation could follow, so it stops by itself.
    assert fields["finish"] == "stop" and int(fields["n_gen"]) == len(tokens) <= 6


def test_greedy_under_a_grammar_is_the_best_allowed_token(gemma1: Any, prompt: str) -> None:
    free, _ = gemma1.stream_command(f"generate {prompt} 1 ignore_eos=1")
    # A grammar that allows the text greedy picks anyway: the argmax is still allowed, so
    # it is still chosen, and then the grammar is complete.
    allowed = generated_text(gemma1, free)
    literal = allowed.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    constrained, reply = gemma1.stream_command(
        f"generate {prompt} 5 grammar={text_ref('root ::= ' + chr(34) + literal + chr(34))}"
    )
    assert constrained == free
    assert gemma1.ok(reply, "generate")["finish"] == "stop"


def test_alternatives_and_length_limits(gemma1: Any, prompt: str) -> None:
    yes_no = text_ref('root ::= " yes" | " no"')
    tokens, reply = gemma1.stream_command(f"generate {prompt} 10 grammar={yes_no}")
    assert generated_text(gemma1, tokens) in (" yes", " no")
    assert gemma1.ok(reply, "generate")["finish"] == "stop"
    # An open-ended grammar runs to n_gen.
    tokens, reply = gemma1.stream_command(
        f"generate {prompt} 4 ignore_eos=1 grammar={text_ref('root ::= [a-z ]+')}"
    )
    assert gemma1.ok(reply, "generate")["finish"] == "length" and len(tokens) == 4
    assert re.fullmatch(r"[a-z ]+", generated_text(gemma1, tokens))
    # A stop token still stops first.
    digits, _ = gemma1.stream_command(
        f"generate {prompt} 10 grammar={text_ref('root ::= [0-9]{6}')}"
    )
    stopped, reply = gemma1.stream_command(
        f"generate {prompt} 10 grammar={text_ref('root ::= [0-9]{6}')} stop={digits[1]}"
    )
    assert gemma1.ok(reply, "generate")["finish"] == "stop"
    assert stopped == digits[: digits.index(digits[1]) + 1]


def test_a_complete_grammar_stops_even_where_the_model_would_end(gemma1: Any) -> None:
    # The base model closes a strikethrough with "</s>", an end-of-generation token
    # (test_generate.py). Under a grammar that is already complete, that is finish=stop.
    strike, _ = gemma1.stream_command(
        "tokenize " + text_ref("This is <s>wrong</s> right, and <s>bad")
    )
    strike_ids = "ids:" + ",".join(map(str, strike))
    _, reply = gemma1.stream_command(f"generate {strike_ids} 5")
    assert gemma1.ok(reply, "generate")["finish"] == "eog"
    tokens, reply = gemma1.stream_command(
        f"generate {strike_ids} 5 grammar={text_ref('root ::= ' + chr(34) * 2)}"
    )
    assert tokens == [] and gemma1.ok(reply, "generate")["finish"] == "stop"
    # Where the grammar could go on, the model's end stays an end.
    tokens, reply = gemma1.stream_command(
        f"generate {strike_ids} 5 grammar={text_ref('root ::= [a-z]*')}"
    )
    assert tokens == [] and gemma1.ok(reply, "generate")["finish"] == "eog"


def test_grammar_from_a_file_and_with_restore(gemma1: Any, prompt: str, tmp_path: Path) -> None:
    path = tmp_path / "json.gbnf"
    path.write_text('root ::= "{" ws "\\"n\\":" ws [1-9] [0-9]? ws "}"\nws ::= [ ]?\n')
    tokens, reply = gemma1.stream_command(
        f"generate {prompt} 40 grammar={path} temp=0.9 seed=4 snap=2:0"
    )
    text = generated_text(gemma1, tokens)
    assert re.fullmatch(r'\{ ?"n": ?[1-9][0-9]? ?\}', text), text
    assert gemma1.ok(reply, "generate")["finish"] == "stop"
    restored, _ = gemma1.stream_command(f"restore 0 {prompt} 40 grammar={path} temp=0.9 seed=4")
    assert restored == tokens


@pytest.mark.parametrize(
    ("grammar", "code"),
    [
        (text_ref("root ::= ("), "bad_grammar"),  # does not parse
        (text_ref("start ::= [0-9]"), "bad_grammar"),  # no root rule
        (text_ref("root ::= digit"), "bad_grammar"),  # undefined rule
        (text_ref("root ::= root [0-9]"), "bad_grammar"),  # left recursion
        (text_ref("root ::= [0-9]{99999}"), "bad_grammar"),  # past the engine's repetition limit
        (text_ref("   "), "bad_grammar"),  # empty
        ("text:", "bad_grammar"),
        (text_ref("root ::= " + "(" * 100000 + '"x"' + ")" * 100000), "bad_grammar"),  # too deep
        ("/nonexistent/grammar.gbnf", "bad_text_file"),
        ("text:%FF", "bad_args"),  # not UTF-8
    ],
)
def test_bad_grammars(gemma1: Any, prompt: str, grammar: str, code: str) -> None:
    values, reply = gemma1.stream_command(f"generate {prompt} 4 grammar={grammar}")
    assert values == [] and gemma1.err(reply) == code, reply
    assert gemma1.stream_is_empty()
    # Still serving, the grammar-free path unchanged.
    tokens, _ = gemma1.stream_command(f"generate {prompt} 2 ignore_eos=1")
    assert len(tokens) == 2
