"""``lucerna bench``: benchmark scenarios, and streaming benchmarks of any endpoint.

Benchmarks are not tests: CI runs every scenario with tiny limits to show the harness
works (tests/orchestrator/test_bench_smoke.py), and the figures live in
docs/benchmarks.md. The scenarios (``lucerna bench <scenario>``):

- ``scenarios``: the named, versioned declarations (decode, streams, agent, edit,
  long-context, speculative): workload, phases, each arm's flags and why;
- ``scenario_run``: one run end to end; ``arms``: the servers and daemons it starts;
  ``salt`` and ``head``: what keeps a cold prompt cold; ``schedule``: alternating
  rounds; ``fairness``: the cold invariant and when a ratio stands; ``outcome``: spreads
  and ratios; ``record``: the JSON document (its format); ``scenario_report``: markdown;
  ``machine``: machine, card, commit; ``scenario_cli``: the flags and ``--list``;
- ``edit_prompts``: the edit workload's files, stored as data.

The ad hoc modes (``--url``, ``--model`` with ``--against``) and their pieces:

- ``prompts``: the fixed prompt sets (``code``, ``long-4k`` .. ``long-128k``, ``agent``);
- ``agent``: the ``agent`` set's replayed coding-agent conversation;
- ``client``: one streaming request, timed (TTFT, ITLs, decode tok/s, usage, cached tokens);
- ``stats``: percentiles and the per-request and per-case figures;
- ``runner``: cases x repeats x concurrency over one or more targets;
- ``probe``: /health latency and server memory, sampled from another process;
- ``report``: the JSON document and markdown tables with ratios;
- ``turns``: per-turn figures of a conversation (TTFT, cached tokens, sums);
- ``servers`` / ``direct``: the self-contained mode's targets;
- ``restart``: Lucerna's disk tier across a restart (``--disk-restart``);
- ``cli``: the ``lucerna bench`` subcommand.
"""

from orchestrator.bench.client import Endpoint, stream_request
from orchestrator.bench.prompts import SET_NAMES, Prompt, PromptSet, long_context_prompt, prompt_set
from orchestrator.bench.report import bench_document, markdown_tables
from orchestrator.bench.runner import BenchPlan, CaseRun, HttpDriver, run_bench
from orchestrator.bench.stats import RequestTiming, Summary, percentile, summarize

__all__ = [
    "SET_NAMES",
    "BenchPlan",
    "CaseRun",
    "Endpoint",
    "HttpDriver",
    "Prompt",
    "PromptSet",
    "RequestTiming",
    "Summary",
    "bench_document",
    "long_context_prompt",
    "markdown_tables",
    "percentile",
    "prompt_set",
    "run_bench",
    "stream_request",
    "summarize",
]
