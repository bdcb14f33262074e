"""What the prefix cache gives a model served with several sequences: a measurement.

    python -m orchestrator.bench.prefix_cache_parallel --model PATH [--threads N] [--out FILE]

starts ``lucerna serve`` on the GGUF three times (the prefix cache on, its defaults) and
replays the ``agent`` conversation (orchestrator/bench/agent.py: a coding agent's eight
turns, each the previous request plus a reply and a tool result):

1. one conversation with ``--parallel 1``, then with ``--parallel 4``: each turn's time
   to first token and wall time, and the conversation's total;
2. four conversations at once with ``--parallel 4`` (the cache on, then ``--cache-ram
   0``): the same system prompt, each its own task (a session line before it), turns in
   order; each turn's time to first token and cached tokens, per conversation.

Greedy, ``max_tokens`` 16 per turn (the figures are about the prompt). The markdown
tables go to stdout, everything to ``--out``. (``lucerna bench --set agent`` replays one
conversation at a time only; this adds the concurrent case.)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from orchestrator.bench.agent import AGENT_N_CTX, agent_conversation

__all__ = ["main"]

MAX_TOKENS = 16
CONCURRENT = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _server(model: str, parallel: int, threads: int, *extra: str) -> Iterator[str]:
    """``lucerna serve`` on ``model``; yields its base URL once healthy."""
    port = _free_port()
    log_path = Path(tempfile.mkstemp(prefix="lucerna-pcbench-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port),
             "--model", model, "--model-name", "m", "--n-ctx", str(AGENT_N_CTX),
             "--threads", str(threads), "--parallel", str(parallel), *extra],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 600
            while True:
                if process.poll() is not None:
                    raise SystemExit(f"server exited {process.returncode}; log: {log_path}")
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"server not healthy after 600 s; log: {log_path}")
                time.sleep(0.5)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=60)


def _turn(url: str, messages: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """One streamed chat request: TTFT, wall time, prompt and cached tokens."""
    body = {"model": "m", "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": role, "content": text} for role, text in messages]}
    start = time.perf_counter()
    ttft = None
    usage: dict[str, Any] = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=900) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c.get("delta", {}).get("content")
                                    for c in chunk.get("choices", [])):
                ttft = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    wall = time.perf_counter() - start
    return {"ttft_s": ttft if ttft is not None else wall, "wall_s": wall,
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")}


def _conversation(session: int | None) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The agent conversation; with ``session``, its task starts with a session line (so
    conversations share the system prompt and nothing after it)."""
    turns = agent_conversation(1)
    if session is None:
        return turns
    return tuple(tuple((role, f"Session {session}.\n{text}") if i == 1 else (role, text)
                       for i, (role, text) in enumerate(turn)) for turn in turns)


def _converse(url: str, session: int | None) -> list[dict[str, Any]]:
    return [_turn(url, turn) for turn in _conversation(session)]


def _at_once(url: str, sessions: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    results: dict[int, list[dict[str, Any]]] = {}

    def run(session: int) -> None:
        results[session] = _converse(url, session)

    threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(results) != len(sessions):
        raise SystemExit("a conversation failed; see the traceback above")
    return results


def measure(model: str, threads: int) -> dict[str, Any]:
    result: dict[str, Any] = {"model": model, "threads": threads, "max_tokens": MAX_TOKENS}
    for parallel in (1, CONCURRENT):
        with _server(model, parallel, threads) as url:
            _turn(url, (("user", "Name three colours of the rainbow."),))  # warm-up
            result[f"one_conversation_parallel_{parallel}"] = _converse(url, None)
    for label, extra in (("cache_on", ()), ("cache_off", ("--cache-ram", "0"))):
        with _server(model, CONCURRENT, threads, *extra) as url:
            _turn(url, (("user", "Name three colours of the rainbow."),))
            result[f"concurrent_{label}"] = _at_once(url, range(1, CONCURRENT + 1))
    return result


def tables(result: dict[str, Any]) -> str:
    one = [result[f"one_conversation_parallel_{p}"] for p in (1, CONCURRENT)]
    lines = ["| turn | prompt | cached p1 | TTFT p1 (s) | cached p4 | TTFT p4 (s) |",
             "|---|---|---|---|---|---|"]
    for t, (a, b) in enumerate(zip(*one, strict=True), 1):
        lines.append(f"| {t} | {a['prompt_tokens']} | {a['cached_tokens']} | {a['ttft_s']:.2f} "
                     f"| {b['cached_tokens']} | {b['ttft_s']:.2f} |")
    totals = [sum(r["wall_s"] for r in runs) for runs in one]
    lines.append(f"| total wall | | | {totals[0]:.2f} | | {totals[1]:.2f} |")
    lines += ["", "| turn | TTFT cache on, mean (max) s | cached, min | "
              "TTFT cache off, mean (max) s |", "|---|---|---|---|"]
    on, off = result["concurrent_cache_on"], result["concurrent_cache_off"]
    for t in range(len(next(iter(on.values())))):
        a = [runs[t]["ttft_s"] for runs in on.values()]
        b = [runs[t]["ttft_s"] for runs in off.values()]
        cached = min(runs[t]["cached_tokens"] or 0 for runs in on.values())
        lines.append(f"| {t + 1} | {statistics.mean(a):.2f} ({max(a):.2f}) | {cached} "
                     f"| {statistics.mean(b):.2f} ({max(b):.2f}) |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.bench.prefix_cache_parallel",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", required=True, help="GGUF file ('default' for gemma3-270m)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.model, args.threads)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    print(tables(result))


if __name__ == "__main__":
    main()
