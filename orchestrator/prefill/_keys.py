"""The ``[models.prefill]`` keys and their ``--prefill-*`` flags, each declared once.

``parse_prefill_table`` validates through these declarations, ``add_prefill_arguments``
adds their flags (help with the declared default), ``PrefillOverrides`` checks a flag's
value against the same bounds, and ``PrefillSettings``/``CompressOptions`` take their
defaults from them. The drafter's ``n_ctx``, ``threads`` and ``n_gpu_layers`` are the
model's declarations (``orchestrator.settings``) with the drafter's words.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from orchestrator.settings import N_CTX, N_GPU_LAYERS, THREADS, Setting

__all__ = ["DRAFTER_DEFAULT", "MODES", "UPSTREAM_KEY_ENV", "Mode", "PrefillKeys"]

Mode = Literal["off", "auto", "always"]
MODES: tuple[Mode, ...] = ("off", "auto", "always")
UPSTREAM_KEY_ENV = "LUCERNA_UPSTREAM_KEY"
DRAFTER_DEFAULT = "default"
"""The drafter word that names the embedded gemma3-270m."""


class PrefillKeys:
    """One ``[models.prefill]`` table."""

    MODE = Setting("mode", str, f"use one of {', '.join(MODES)}", default="auto",
                   shown="auto, with any --prefill-* flag", choices=MODES, noun="mode",
                   flag="--prefill-compression", dest="prefill_compression",
                   help="off, auto (prompts of at least --prefill-threshold tokens) or always")
    DRAFTER = Setting(
        "drafter", str, 'point it at a GGUF file (relative to the config file), or write '
        '"default" for the embedded gemma3-270m', shown="the embedded gemma3-270m",
        flag="--prefill-drafter", dest="prefill_drafter",
        flag_fix='give a GGUF file, or "default" for the embedded gemma3-270m',
        help="drafter GGUF (qwen3, qwen35, gemma3 or llama), or 'default'")
    THRESHOLD = Setting("threshold", int, "give a prompt length in tokens, e.g. 32000",
                        default=32000, low=0, flag="--prefill-threshold",
                        dest="prefill_threshold",
                        help="auto mode: compress prompts of at least this many tokens")
    KEEP = Setting("keep", float, "give a ratio in (0, 1], e.g. keep = 0.05", default=0.05,
                   low=0.001, high=1, flag="--prefill-keep", dest="prefill_keep",
                   flag_fix="give a ratio in (0, 1] such as 0.05",
                   help="share of the prompt kept, in (0, 1]")
    CURVE = Setting("curve", str, 'write points "TOKENS:RATIO ...", lengths increasing, ratios '
                    'in (0, 1], e.g. "2048:0.5 8192:0.2 32768:0.1"', shown="a flat --prefill-keep",
                    flag="--prefill-curve", dest="prefill_curve",
                    help='keep ratio per prompt length, "T:R T:R ...", linear in between')
    PARK_TARGET = Setting(
        "park_target", bool, "write park_target = true to park the target while the drafter "
        "scores (drafter and target on one device that cannot hold both)", default=False,
        shown="keep both loaded", flag="--prefill-park", dest="prefill_park",
        help="park the target while the drafter scores, then restore it (for a drafter and "
        "target sharing a device that cannot hold both)")
    N_CTX = replace(N_CTX, fix="give the drafter's context in tokens, e.g. 131072",
                    default=None, shown="the model's --n-ctx", flag="--prefill-n-ctx",
                    dest="prefill_n_ctx",
                    help="the drafter's context: the longest prompt it can score")
    THREADS = replace(THREADS, flag=None)
    N_GPU_LAYERS = replace(N_GPU_LAYERS, fix="give the drafter layers to offload (-1: all)",
                           flag=None)
    LOOKAHEAD = Setting("lookahead", int, "give a query count, e.g. 8", default=8, low=1,
                        high=1024)
    CHUNK = Setting("chunk", int, "give a chunk size in tokens, e.g. 32", default=32, low=1)
    POOL = Setting("pool", int, "give a pooling width in tokens, e.g. 13", default=13, low=1)
    # Longer prompts are scored a segment at a time, so scoring stays linear in the
    # prompt's length (PROTOCOL.md 5.7; docs/benchmarks.md, "PFlash": 128K on the H200).
    SEGMENT = Setting("segment", int, "give a segment length in tokens, e.g. 8192, or 0 to "
                      "score every prompt in one pass", default=8192, low=0)
    UPSTREAM = Setting("upstream", str, 'give a base URL such as "http://gpu-box:8080/v1"',
                       shown="none, compress here", flag="--prefill-upstream",
                       dest="prefill_upstream", metavar="URL",
                       help="proxy mode: compress locally (the model is the drafter), "
                       "forward to this OpenAI-compatible base URL")
    UPSTREAM_KEY = Setting("upstream_key", str, "write the upstream's API key as a string",
                           shown=f"${UPSTREAM_KEY_ENV}", flag="--prefill-upstream-key",
                           dest="prefill_upstream_key", metavar="KEY",
                           help="the upstream's bearer key")
    UPSTREAM_MODEL = Setting("upstream_model", str, "write the model name the upstream serves",
                             shown="the name the client used", flag="--prefill-upstream-model",
                             dest="prefill_upstream_model", metavar="NAME",
                             help="model name sent upstream")
