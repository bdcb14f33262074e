"""``agent``: a coding agent's conversation with tools, replayed turn by turn.

The ``agent`` prompt set's conversation (orchestrator/bench/agent.py: a 4K-token system
prompt of rules and JSON tool schemas, then eight turns of replies with tool calls and
tool results, each request the whole history so far, 4K to 8K tokens) goes to each arm
through the chat API, one turn at a time, the arms alternating turn by turn. Each repeat
is a new conversation: its system prompt opens with a salt of the arm's own, so turn 1
is cold on every server and each later turn extends only that arm's previous one.

This is a cache scenario: what each server keeps between turns is the measurement, so
the later turns' ratios stand where the two caches served different amounts (both
report their cached tokens); turn 1 is held to the cold invariant as anywhere.
"""

from __future__ import annotations

from orchestrator.bench.agent import AGENT_N_CTX, AGENT_TURNS, agent_conversation
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.salt import salted
from orchestrator.bench.scenarios._common import PEER_DEFAULTS, fixed
from orchestrator.bench.scenarios._declare import (
    COLD,
    WARM,
    Arm,
    BenchRequest,
    Comparison,
    Options,
    Round,
    SaltFor,
    Scenario,
    Sizing,
)

__all__ = ["AGENT"]

MAX_TOKENS = 32


def _rounds(options: Options, salt: SaltFor) -> list[Round]:
    turns = options.prompts or AGENT_TURNS
    tokens = options.max_tokens or MAX_TOKENS
    rounds: list[Round] = []
    for repeat in range(1, options.repeats + 1):
        conversation_salt = salt(f"c{repeat}")
        for turn, messages in enumerate(agent_conversation(repeat)[:turns], 1):
            prompt = salted(Prompt(f"c{repeat}.t{turn}", "", messages), conversation_salt)
            phase = COLD if turn == 1 else WARM
            rounds.append((BenchRequest(f"c{repeat}.t{turn}", phase.name, 1, repeat, prompt,
                                        tokens),))
    return rounds


def _probe(salt: str) -> Prompt:
    # The rounds' shape: a system message first.
    return salted(Prompt("warm-up", "", (("system", "You answer in one line."),
                                         ("user", "Name three colours of the rainbow."))),
                  salt)


def _arms(options: Options) -> tuple[Arm, ...]:
    return (
        Arm("ours", "lucerna", (), "lucerna serve as a user starts it: its prefix cache on "
            "(RAM tier), one slot"),
        Arm("peer", "peer", (), f"{PEER_DEFAULTS}: its prompt cache keeps each slot's "
            "conversation, and --cache-ram the ones it moved out"),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    return (
        Comparison("ours", ("peer",), "ttft_sum_s", "sum of TTFTs over the conversation",
                   ("all",)),
        Comparison("ours", ("peer",), "ttft_sum_s", "sum of TTFTs of turns 2 on", ("warm",)),
        Comparison("ours", ("peer",), "ttft_s", "TTFT per turn", ("cold", "warm")),
    )


AGENT = Scenario(
    name="agent",
    version=1,
    measures="time to first token over a replayed multi-turn agent conversation with tools",
    workload=f"the agent set: {AGENT_TURNS} turns from 4K to 8K tokens (gemma3 count), chat "
             "API, each turn the previous one plus a reply and a tool result; turn 1 cold, "
             "later turns warm",
    api="chat",
    phases=fixed(COLD, WARM),
    levels=(1,),
    max_tokens=MAX_TOKENS,
    arms=_arms,
    rounds=_rounds,
    probe=_probe,
    sizing=lambda options: Sizing(n_ctx=AGENT_N_CTX, parallel=1),
    comparisons=_comparisons,
    cache_scenario=True,
)
