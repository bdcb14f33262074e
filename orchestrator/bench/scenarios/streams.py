"""``streams``: 1, 4, 8 and 16 concurrent cold streams: aggregate rate and TTFT.

At each level N, each repeat is one round of N requests sent at once, N different code
prompts each salted for its level, repeat and server, so no request finds another's
prefix. Both servers hold ``--parallel`` equal to the highest level, in one unified KV
pool (llama-server ``--kv-unified``), their prompt caches on.
"""

from __future__ import annotations

from orchestrator.bench.prompts import code_prompts
from orchestrator.bench.salt import salted
from orchestrator.bench.scenarios._common import PEER_DEFAULTS, completion_probe, fixed
from orchestrator.bench.scenarios._declare import (
    COLD,
    Arm,
    BenchRequest,
    Comparison,
    Options,
    Round,
    SaltFor,
    Scenario,
    Sizing,
)

__all__ = ["STREAMS"]

LEVELS = (1, 4, 8, 16)
MAX_TOKENS = 128


def _levels(options: Options) -> tuple[int, ...]:
    return options.levels or LEVELS


def _rounds(options: Options, salt: SaltFor) -> list[Round]:
    code = code_prompts()
    tokens = options.max_tokens or MAX_TOKENS
    rounds: list[Round] = []
    for level in _levels(options):
        for repeat in range(1, options.repeats + 1):
            keys = [f"L{level}.r{repeat}.s{i}" for i in range(level)]
            rounds.append(tuple(
                BenchRequest(key, COLD.name, level, repeat,
                             salted(code[(repeat + i) % len(code)], salt(key)), tokens)
                for i, key in enumerate(keys)))
    return rounds


def _arms(options: Options) -> tuple[Arm, ...]:
    top = max(_levels(options))
    return (
        Arm("ours", "lucerna", (), f"lucerna serve with --parallel {top}, the highest level"),
        Arm("peer", "peer", (), f"{PEER_DEFAULTS} ({top}), one unified KV pool as ours "
            "(--kv-unified): its slots share the pool as our sequences do"),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    return (
        Comparison("ours", ("peer",), "aggregate_tps", "aggregate decode at N streams"),
        Comparison("ours", ("peer",), "ttft_s", "time to first token at N streams"),
        Comparison("ours", ("peer",), "decode_tps", "each stream's decode rate"),
    )


STREAMS = Scenario(
    name="streams",
    version=1,
    measures="aggregate decode and TTFT at 1, 4, 8 and 16 concurrent cold streams",
    workload="rounds of N different code prompts sent at once, completions API, greedy; "
             "every prompt cold",
    api="completions",
    phases=fixed(COLD),
    levels=LEVELS,
    max_tokens=MAX_TOKENS,
    arms=_arms,
    rounds=_rounds,
    probe=completion_probe,
    sizing=lambda options: Sizing(n_ctx=2048, parallel=max(_levels(options))),
    comparisons=_comparisons,
)
