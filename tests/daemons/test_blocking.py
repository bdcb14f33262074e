"""The blocking client of the bin/ scripts, against a real daemon on the default model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemons.blocking import BlockingDaemon
from protocol import CommandError, ErrorCode, InlineText, Tokenize


def test_a_script_session(native: Any, default_model: Path) -> None:
    daemon = BlockingDaemon(native.binary("qwen35"), default_model, "--n-ctx=1024")
    try:
        assert daemon.ready["role"] == "qwen35" and int(daemon.ready["vocab"]) == 262144
        prompt, reply = daemon.stream_command("tokenize text:The%20capital%20of%20France")
        assert prompt and reply == f"ok tokenize n={len(prompt)}"
        # A typed command goes as it is; the same line, parsed, gives the same ids.
        assert daemon.stream_command(Tokenize(InlineText("The capital of France")))[0] == prompt
        tokens, fields = daemon.generate(prompt, 4)
        assert len(tokens) == 4 and fields["n_gen"] == "4"
        again, reply = daemon.stream_command(
            f"generate ids:{','.join(map(str, prompt))} 4 ignore_eos=1")
        assert again == tokens and reply.startswith("ok generate ")
        assert daemon.command("stats").startswith("ok stats ")
        # A stream command through command(): its values are read, so the next one is in step.
        assert daemon.command("tokenize text:hello").startswith("ok tokenize ")
        # Refusals that depend on the daemon come back as its err line, stream ended.
        values, reply = daemon.stream_command("generate ids:999999999 4")
        assert values == [] and reply.startswith("err bad_token ")
        # A line no daemon would take is refused before it is sent.
        with pytest.raises(CommandError) as bad:
            daemon.command("generate ids:1 0")
        assert bad.value.code == ErrorCode.BAD_ARGS
        assert daemon.command("detokenize ids:1").startswith("ok detokenize")
    finally:
        daemon.close()
    assert daemon.proc.returncode == 0
