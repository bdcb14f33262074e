"""The one number grammar of the daemons (native/src/wire/numbers.h, PROTOCOL.md section 3),
through every kind of caller: option values, token ids, slots and startup flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemons.native import NativeBuild

# Decimals: an optional sign, digits with an optional point (or a point and digits), an
# optional exponent. Nothing strtod would take besides: hex, inf, nan, a bare point.
DECIMALS_ACCEPTED = ["0.5", "+0.5", ".5", "5.", "1e-1", "1E+0", "0", "2"]
DECIMALS_REFUSED = ["0x1p-1", "inf", "nan", "1e", "e1", ".", "+", "1.5.2", "1e999", "0.5f", ""]


@pytest.mark.parametrize("value", DECIMALS_ACCEPTED)
def test_decimal_option_values_accepted(gemma: Any, value: str) -> None:
    _, reply = gemma.stream_command(f"generate ids:2,3 1 temp={value} ignore_eos=1")
    assert gemma.ok(reply, "generate")["n_gen"] == "1", reply


@pytest.mark.parametrize("value", DECIMALS_REFUSED)
def test_decimal_option_values_refused(gemma: Any, value: str) -> None:
    _, reply = gemma.stream_command(f"generate ids:2,3 1 temp={value}")
    assert gemma.err(reply) == "bad_args", reply
    assert gemma.stream_is_empty()


# Integers in command values: an optional '-' and digits; no '+' (section 4's ids rule).
@pytest.mark.parametrize("value", ["0", "5", "007"])
def test_integer_option_values_accepted(gemma: Any, value: str) -> None:
    _, reply = gemma.stream_command(f"generate ids:2,3 1 top_k={value} ignore_eos=1")
    assert gemma.ok(reply, "generate")["n_gen"] == "1", reply


@pytest.mark.parametrize(
    "value", ["+5", "5.0", "1e1", "0x10", "-", "-1", "99999999999999999999", ""]
)
def test_integer_option_values_refused(gemma: Any, value: str) -> None:
    _, reply = gemma.stream_command(f"generate ids:2,3 1 top_k={value}")
    assert gemma.err(reply) == "bad_args", reply


@pytest.mark.parametrize(
    ("slot", "code"),
    [
        ("63", "empty_slot"),  # well-formed and in range: the slot is simply empty
        ("0063", "empty_slot"),
        ("64", "bad_slot"),  # --slots defaults to 64: 0 .. 63
        ("-1", "bad_slot"),
        ("+1", "bad_slot"),
        ("1e1", "bad_slot"),
        ("99999999999999999999", "bad_slot"),
    ],
)
def test_slot_numbers(gemma: Any, slot: str, code: str) -> None:
    assert gemma.err(gemma.command(f"free_snapshot {slot}")) == code


def test_flag_numbers_take_a_plus_sign(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path]
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], "--n-ctx=+512", stream=False)
    assert daemon.ready()["n_ctx"] == "512"
    assert daemon.quit() == 0


@pytest.mark.parametrize(
    "flag",
    ["--seed=0x10", "--seed=1e1", "--seed= 7", "--seed=4294967296", "--n-ctx=5.0",
     "--rpc-listen=127.0.0.1:0x50", "--rpc-listen=127.0.0.1: 80", "--experts-in-host=0x0.8p0",
     "--experts-in-host=nan"],
)
def test_flag_numbers_outside_the_grammar_are_bad_flags(
    spawn: Any, native: NativeBuild, test_models: dict[str, Path], flag: str
) -> None:
    daemon = spawn(native.binary("qwen35"), test_models["qwen3"], flag, stream=False)
    assert daemon.err(daemon.readline()) == "bad_flag"
    assert daemon.wait() == 2
