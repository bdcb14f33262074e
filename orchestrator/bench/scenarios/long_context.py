"""``long-context``: time to first token on long prompts: PFlash, full prefill, the peer.

One long prompt per size (the ``long-*`` sets' generator: a lighthouse keeper's log with
a needle fact and a question; 16K, 32K, 64K and 128K tokens), salted per arm and repeat,
through the chat API (PFlash compresses chats), 16 tokens out. Three arms: ours with
PFlash (the drafter scores the prompt and the target prefills the kept share), ours
with full prefill, and the peer's full prefill. ``--scale`` multiplies the sizes: a CPU
run at 1/32 measures 500 to 4,000 tokens, the shape of the curve, not the figures.
Each size is its own phase (``cold-16000`` ...), every request cold.
"""

from __future__ import annotations

import math

from orchestrator.bench.prompts import Prompt, long_context_prompt
from orchestrator.bench.salt import salted
from orchestrator.bench.scenarios._common import PEER_DEFAULTS
from orchestrator.bench.scenarios._declare import (
    Arm,
    BenchRequest,
    Comparison,
    Options,
    Phase,
    Round,
    SaltFor,
    Scenario,
    Sizing,
)

__all__ = ["LONG_CONTEXT"]

SIZES = (16_000, 32_000, 64_000, 128_000)
MAX_TOKENS = 16
PFLASH_KEEP = 0.05
# Below this many tokens the generator's fixed text is most of the prompt.
_SMALLEST = 200


def _sizes(options: Options) -> tuple[int, ...]:
    """The sizes times ``--scale``, at least ``_SMALLEST``, each once."""
    return tuple(sorted({max(_SMALLEST, round(size * options.scale)) for size in SIZES}))


def _phases(options: Options) -> tuple[Phase, ...]:
    return tuple(Phase(f"cold-{size}", False, f"a {size}-token prompt, new to every server")
                 for size in _sizes(options))


def _n_ctx(options: Options) -> int:
    # The generator lands within 3% of its target; room for that and the answer.
    return 256 * math.ceil((max(_sizes(options)) * 1.05 + MAX_TOKENS + 64) / 256)


def _rounds(options: Options, salt: SaltFor) -> list[Round]:
    tokens = options.max_tokens or MAX_TOKENS
    rounds: list[Round] = []
    for size, phase in zip(_sizes(options), _phases(options), strict=True):
        text = long_context_prompt(size)
        for repeat in range(1, options.repeats + 1):
            key = f"n{size}.r{repeat}"
            prompt = salted(Prompt(key, "", (("user", text),)), salt(key))
            rounds.append((BenchRequest(key, phase.name, 1, repeat, prompt, tokens),))
    return rounds


def _probe(salt: str) -> Prompt:
    return salted(Prompt("warm-up", "", (("user", "Name three colours of the rainbow."),)),
                  salt)


def _arms(options: Options) -> tuple[Arm, ...]:
    drafter = options.drafter or "default"
    pflash = ("--prefill-compression", "always", "--prefill-keep", f"{PFLASH_KEEP:g}",
              "--prefill-drafter", drafter, "--prefill-n-ctx", str(_n_ctx(options)))
    return (
        Arm("ours-pflash", "lucerna", pflash, f"PFlash on every prompt: the drafter "
            f"({drafter}) keeps {PFLASH_KEEP:.0%} of it, the target prefills that"),
        Arm("ours", "lucerna", (), "our full prefill: what PFlash is measured against"),
        Arm("peer", "peer", (), f"{PEER_DEFAULTS}; full prefill: llama-server has no "
            "prompt compression"),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    phases = tuple(p.name for p in _phases(options))
    return (
        Comparison("ours-pflash", ("peer",), "ttft_s", "PFlash against the peer's full "
                   "prefill", phases),
        Comparison("ours-pflash", ("ours",), "ttft_s", "PFlash against our full prefill",
                   phases),
        Comparison("ours", ("peer",), "ttft_s", "full prefill against the peer's", phases),
    )


LONG_CONTEXT = Scenario(
    name="long-context",
    version=1,
    measures="time to first token at 16K-128K tokens: PFlash against full prefill and the "
             "peer",
    workload="one long log-and-question prompt per size (x --scale), chat API, 16 tokens "
             "out, every prompt cold",
    api="chat",
    phases=_phases,
    levels=(1,),
    max_tokens=MAX_TOKENS,
    arms=_arms,
    rounds=_rounds,
    probe=_probe,
    sizing=lambda options: Sizing(n_ctx=_n_ctx(options), parallel=1),
    comparisons=_comparisons,
    notes=("--scale 0.03125 on CPU: 500 to 4,000 tokens",),
)
