"""``lucerna bench``: streaming benchmarks of OpenAI-compatible endpoints.

Benchmarks are not tests: CI runs one tiny case to show the harness works, and
the figures live in docs/benchmarks.md. What the package offers:

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
