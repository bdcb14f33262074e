"""Pieces several scenarios share: the prompt rounds over the code set, the warm-up."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.bench.prompts import Prompt, code_prompts
from orchestrator.bench.salt import salted
from orchestrator.bench.scenarios._declare import (
    COLD,
    WARM,
    BenchRequest,
    Options,
    Phase,
    Round,
    SaltFor,
)

__all__ = ["PEER_DEFAULTS", "code_rounds", "completion_probe", "fixed"]

PEER_DEFAULTS = ("its defaults with the shared settings: prompt cache on (its cache_prompt "
                 "and --cache-ram 8 GiB defaults), --parallel equal to ours")


def fixed(*phases: Phase) -> Callable[[Options], tuple[Phase, ...]]:
    """``Scenario.phases`` for a scenario whose phases do not depend on the options."""
    return lambda options: phases


def completion_probe(salt: str) -> Prompt:
    return salted(Prompt("warm-up", "Write one sentence about the sea.\n"), salt)


def code_rounds(options: Options, salt: SaltFor, *, prompts: int, max_tokens: int,
                warm: bool) -> list[Round]:
    """``prompts`` code prompts per repeat, one per round, each salted by its key; with
    ``warm``, each repeat's prompts once more, salted alike (so each arm has seen them)."""
    code = code_prompts()
    tokens = options.max_tokens or max_tokens
    count = options.prompts or prompts
    rounds: list[Round] = []
    for repeat in range(1, options.repeats + 1):
        keys = [(f"r{repeat}.p{i}", code[i % len(code)]) for i in range(count)]
        for phase in ((COLD, WARM) if warm else (COLD,)):
            rounds += [(BenchRequest(key, phase.name, 1, repeat, salted(prompt, salt(key)),
                                     tokens),) for key, prompt in keys]
    return rounds
