"""``decode``: one stream, cold then warm: decode rate and time to first token.

Each repeat sends ``--prompts`` code prompts (the ``code`` set: a signature and a
docstring, ~150 tokens; the model writes the body), one at a time, to each arm in turn:
cold first (salted, new to every server), then the same prompts again, warm (each arm
its own, so both caches hold them). Both servers run one slot (``--parallel 1``, the
same on both), their prompt caches on as their users run them.
"""

from __future__ import annotations

from orchestrator.bench.scenarios._common import (
    PEER_DEFAULTS,
    code_rounds,
    completion_probe,
    fixed,
)
from orchestrator.bench.scenarios._declare import (
    COLD,
    WARM,
    Arm,
    Comparison,
    Options,
    Scenario,
    Sizing,
)

__all__ = ["DECODE"]


def _arms(options: Options) -> tuple[Arm, ...]:
    return (
        Arm("ours", "lucerna", (), "lucerna serve as a user starts it, one slot"),
        Arm("peer", "peer", (), f"{PEER_DEFAULTS}; no speculation, as ours: the scenario "
            "is plain decoding"),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    return (
        Comparison("ours", ("peer",), "decode_tps", "single-stream decode", ("cold", "warm")),
        Comparison("ours", ("peer",), "ttft_s", "time to first token", ("cold", "warm")),
    )


DECODE = Scenario(
    name="decode",
    version=1,
    measures="single-stream decode rate and time to first token, cold and warm",
    workload="code prompts (~150 tokens), completions API, greedy, one at a time; cold, "
             "then the same prompts warm",
    api="completions",
    phases=fixed(COLD, WARM),
    levels=(1,),
    max_tokens=128,
    arms=_arms,
    rounds=lambda options, salt: code_rounds(options, salt, prompts=5, max_tokens=128,
                                             warm=True),
    probe=completion_probe,
    sizing=lambda options: Sizing(n_ctx=2048, parallel=1),
    comparisons=_comparisons,
)
