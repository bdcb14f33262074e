"""``edit``: code repeated with a change: prompt lookup against the peer's n-gram proposers.

The edit workload (orchestrator/bench/edit_prompts.py: a file of this repository and
the request to write it back with one function renamed, the answer opened with the
file's first line) goes to each arm one request at a time, cold (salted), then the
same prompts warm. The answer repeats its context, so proposals from the context are
accepted for long runs: the case for our prompt lookup (``--lookup on``) and for
llama-server's n-gram speculation (``--spec-type ngram-*``).

The peer's arm is its best n-gram type: ``ngram-mod`` by the measurement in
peers-2026-12.md (CPU, SmolLM2, warm edit requests: ngram-mod 46.3 tok/s, ngram-map-k
~31, ngram-simple ~17, plain ~33-43). ``--ngram-types all`` (or ``--arms``) runs every
type; the comparison then takes the best of those that ran, so the claim never rests on
a type we picked for the peer. Our plain decoding runs too: lookup must not lose to it
where its proposals miss.
"""

from __future__ import annotations

from orchestrator.bench.edit_prompts import edit_prompt, edit_sources
from orchestrator.bench.prompts import Prompt
from orchestrator.bench.salt import salted
from orchestrator.bench.scenarios._common import PEER_DEFAULTS, completion_probe, fixed
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

__all__ = ["EDIT", "NGRAM_TYPES", "PEER_BEST_NGRAM"]

NGRAM_TYPES = ("ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-simple", "ngram-cache")
PEER_BEST_NGRAM = "ngram-mod"
MAX_TOKENS = 256


def _ngram_types(options: Options) -> tuple[str, ...]:
    return options.ngram_types or (PEER_BEST_NGRAM,)


def _rounds(options: Options, salt: SaltFor) -> list[Round]:
    sources = edit_sources()
    count = options.prompts or len(sources)
    tokens = options.max_tokens or MAX_TOKENS
    rounds: list[Round] = []
    for repeat in range(1, options.repeats + 1):
        keys = [(f"r{repeat}.e{i}", sources[i % len(sources)]) for i in range(count)]
        for phase in (COLD, WARM):
            for key, source in keys:
                prompt = salted(Prompt(key, edit_prompt(source, options.scale)), salt(key))
                rounds.append((BenchRequest(key, phase.name, 1, repeat, prompt, tokens),))
    return rounds


def _arms(options: Options) -> tuple[Arm, ...]:
    chosen = _ngram_types(options)
    peers = tuple(
        Arm(f"peer-{kind}", "peer", ("--spec-type", kind),
            f"{PEER_DEFAULTS}; n-gram speculation of type {kind} at its defaults"
            + (" (its best on this workload, peers-2026-12.md)" if kind == PEER_BEST_NGRAM
               else ""),
            optional=kind not in chosen)
        for kind in NGRAM_TYPES)
    return (
        Arm("ours-lookup", "lucerna", ("--lookup", "on"), "prompt lookup on for every "
            "request (its default block of 16): our speculation from the context itself"),
        Arm("ours", "lucerna", (), "plain decoding: what lookup must not lose to"),
        *peers,
        Arm("peer", "peer", (), f"{PEER_DEFAULTS}; plain decoding", optional=True),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    peers = tuple(f"peer-{kind}" for kind in NGRAM_TYPES)
    return (
        Comparison("ours-lookup", peers, "decode_tps",
                   "prompt lookup against the peer's best n-gram type", ("cold", "warm")),
        Comparison("ours-lookup", ("ours",), "decode_tps",
                   "prompt lookup against our plain decoding", ("cold", "warm")),
        Comparison("ours-lookup", peers, "e2e_s", "whole request, the peer's best n-gram "
                   "type", ("cold", "warm")),
    )


EDIT = Scenario(
    name="edit",
    version=1,
    measures="decode rate on code repeated with a change: prompt lookup against the "
             "peer's n-gram speculation",
    workload="a 100-140-line Python file and 'write it back with one function renamed' "
             "(--scale cuts the file), completions API, greedy; cold, then the same "
             "prompts warm",
    api="completions",
    phases=fixed(COLD, WARM),
    levels=(1,),
    max_tokens=MAX_TOKENS,
    arms=_arms,
    rounds=_rounds,
    probe=completion_probe,
    sizing=lambda options: Sizing(n_ctx=4096, parallel=1),
    comparisons=_comparisons,
    notes=("--ngram-types all runs the peer's five n-gram types",),
)
