"""``stats`` (PROTOCOL.md 5.3): the reply fields and the msgpack map of ``stats path=``."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgpack
import pytest

import protocol
from daemons.client import open_daemon
from daemons.roles import DaemonLaunch

Launcher = Callable[..., DaemonLaunch]
Greedy = Callable[..., Awaitable[list[int]]]

_DOC = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()
_LIST = _DOC.split("`ok stats` followed by at least:")[1].split("`stats path=")[0]
# Fixed key names only: the per-buffer-type `buft_<name>_bytes` family is not one key.
KEYS = [key for key in re.findall(r"`([a-z][a-z_]*)`", _LIST) if not key.endswith("_")]


def test_the_keys_are_those_of_section_5_3() -> None:
    assert KEYS == [
        "n_ctx",
        "n_vocab",
        "requests",
        "tokens_prompt",
        "tokens_generated",
        "forwards",
        "graphs_reused",
        "cancelled",
        "preempted",
        "shared_prefixes",
        "checkpoint_bytes",
        "checkpoints_dropped",
        "rss_kb",
        "uptime_s",
        "parked",
        "slots_used",
        "slots_bytes",
        "last_prefill_tok_s",
        "last_decode_tok_s",
        "model_bytes",
        "draft_steps",
        "draft_proposed",
        "draft_accepted",
        "acceptance_length",
        "draft_ms",
        "draft_model_bytes",
        "state_kept_bytes",
        "states_reused",
        "states_page_locked",
        "bytes_host",
        "bytes_device",
    ]


async def test_stats_count_generate_and_restore_and_write_msgpack(
    launch: Launcher, generating: tuple[str, str], greedy: Greedy, tmp_path: Path
) -> None:
    async with open_daemon(launch(*generating)) as daemon:
        prompt = await daemon.tokenize("Counting requests")
        generated = await greedy(daemon, prompt, 3)
        info = await daemon.snapshot(0)  # the prompt and generated[:2]
        generated += await greedy(daemon, prompt + generated[:2], 2, slot=0)

        path = tmp_path / "stats.msgpack"
        fields = await daemon.stats(path)
        assert fields.pop("path") == str(path)
        assert set(KEYS) <= set(fields)
        assert int(fields["requests"]) == 2
        assert int(fields["tokens_generated"]) == len(generated) == 5
        assert int(fields["slots_used"]) == 1
        assert int(fields["slots_bytes"]) == info.host_bytes
        assert int(fields["parked"]) == 0
        assert int(fields["model_bytes"]) > 0

        written = msgpack.unpackb(path.read_bytes())
        assert set(written) == set(fields)  # the same keys, as a map of numbers
        for key, value in written.items():
            assert isinstance(value, int | float) and not isinstance(value, bool), key
            if isinstance(value, int):
                assert int(fields[key]) == value, key
            else:  # the reply may print fewer digits
                assert float(fields[key]) == pytest.approx(value, rel=0.01, abs=0.1), key
