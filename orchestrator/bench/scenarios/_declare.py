"""What a scenario declares: its arms, phases, comparisons, sizing and requests.

A scenario is data plus two small functions (its arms and its rounds); the harness
(``orchestrator.bench.scenario_run``) starts the arms, salts and sends the rounds,
and checks and reports the outcome the same way for every scenario.

- An ``Arm`` is one server configuration: ours (``lucerna serve``), the peer
  (``llama-server``, pristine or patched, chosen at run time), or our daemon driven
  directly (only where a benchmark-only daemon flag has no ``serve`` equivalent: the
  oracle proposer). Its ``flags`` are those beyond the settings every arm shares
  (model, context, threads, GPU layers, ``--parallel``: ``servers.ServerSettings``),
  and its ``why`` says why these are the flags a user would pick.
- A ``Phase`` is ``cold`` (every prompt new to every server) or ``warm`` (a prompt the
  server has seen, so its cache is expected to serve it).
- A round is the requests sent at once to one arm (one request at concurrency 1, N at
  N); every arm gets the same rounds, each with its own salts, in alternating order.
- A ``Comparison`` names the candidate arm, the baseline arm (or several: the best of
  them), the metric, and the phases where the ratio means something.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.bench.client import Api
from orchestrator.bench.prompts import Prompt

__all__ = [
    "COLD",
    "WARM",
    "Arm",
    "BenchRequest",
    "Comparison",
    "Metric",
    "Options",
    "Phase",
    "Round",
    "SaltFor",
    "Scenario",
    "Side",
    "Sizing",
]

Side = Literal["lucerna", "peer", "daemon"]
Metric = Literal["decode_tps", "ttft_s", "aggregate_tps", "e2e_s", "ttft_sum_s"]
SaltFor = Callable[[str], str]
"""The arm's salt for a request key (``salt.SaltBook``)."""


@dataclass(frozen=True)
class Phase:
    name: str
    expects_cache: bool
    """Warm: the cache is expected to serve these prompts (the harness checks it did)."""
    what: str


COLD = Phase("cold", False, "every prompt new to every server: a salt no server has seen "
             "opens it, so nothing past the fixed head (BOS, the chat template's opening) "
             "can come from a cache")
WARM = Phase("warm", True, "each arm's own cold prompts again: both caches are expected to "
             "serve them, and both report what they served")


@dataclass(frozen=True)
class Arm:
    label: str
    """``ours...``, ``peer...`` (renamed after the peer built at run time:
    ``llama-server...`` or ``llama-server-patched...``) or ``daemon...``."""
    side: Side
    flags: tuple[str, ...] = ()
    """Flags beyond the shared settings, as the side's command line takes them."""
    why: str = ""
    body: tuple[tuple[str, Any], ...] = ()
    """Fields every request to this arm carries besides the prompt."""
    oracle_accept: float | None = None
    """``daemon`` arms: the oracle proposer's target acceptance length (PROTOCOL.md 5.9);
    its transcripts are the arm's own prompts decoded greedily first."""
    optional: bool = False
    """Runs only when ``--arms`` names it (or says ``all``)."""


@dataclass(frozen=True)
class Comparison:
    candidate: str
    baseline: tuple[str, ...]
    """One arm, or several: then the one with the best median of ``metric``."""
    metric: Metric
    what: str
    phases: tuple[str, ...] = ("cold",)
    """Phase names; ``all``: the requests of every phase together."""
    levels: tuple[int, ...] | None = None
    """The concurrency levels it applies at; None: every level."""


@dataclass(frozen=True)
class Sizing:
    n_ctx: int
    """Each request's context (both servers hold ``n_ctx * parallel`` in one pool)."""
    parallel: int


@dataclass(frozen=True)
class BenchRequest:
    key: str
    """The same on every arm (``r1.p2``, ``L8.r1.s3``, ``c1.t4``): the pair's identity."""
    phase: str
    level: int
    repeat: int
    prompt: Prompt
    max_tokens: int


Round = tuple[BenchRequest, ...]


@dataclass(frozen=True)
class Options:
    """What the command line chose; a scenario fills what is None with its defaults."""

    model: Path
    draft: Path | None = None
    drafter: str | None = None
    max_tokens: int | None = None
    repeats: int = 3
    prompts: int | None = None
    """Distinct prompts per repeat (None: the scenario's)."""
    levels: tuple[int, ...] | None = None
    scale: float = 1.0
    """Workload size: long-context prompt tokens and edit-file lines are multiplied by it
    (CPU runs scale down)."""
    acceptances: tuple[float, ...] | None = None
    ngram_types: tuple[str, ...] | None = None
    draft_block: int | None = None
    """The draft's block size (read from its GGUF by the harness)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    version: int
    """Raised whenever the workload, the phases or an arm's flags change: figures of
    different versions are not compared."""
    measures: str
    workload: str
    api: Api
    phases: Callable[[Options], tuple[Phase, ...]]
    """The phases, in the order their rounds come (long-context has one per size)."""
    levels: tuple[int, ...]
    max_tokens: int
    arms: Callable[[Options], tuple[Arm, ...]]
    rounds: Callable[[Options, SaltFor], list[Round]]
    """Every round of the run, in order, salted for one arm."""
    probe: Callable[[str], Prompt]
    """A short prompt of the rounds' shape (API, first message's role) opened by the
    given salt: two of them, sent first to each arm, warm it up and measure the head."""
    sizing: Callable[[Options], Sizing]
    comparisons: Callable[[Options], tuple[Comparison, ...]]
    cache_scenario: bool = False
    """The cache is what it measures: ratios stand where the two caches served
    differently (the agent's later turns), outside the cold phase."""
    needs: str = "any GGUF (--model)"
    notes: tuple[str, ...] = field(default_factory=tuple)
