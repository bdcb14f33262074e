"""The ``lucerna serve --prefill-*`` flags (argparse only; validation is PrefillOverrides')."""

from __future__ import annotations

import argparse
import os

from orchestrator.prefill._settings import MODES, PrefillOverrides

__all__ = ["UPSTREAM_KEY_ENV", "add_prefill_arguments", "prefill_overrides"]

UPSTREAM_KEY_ENV = "LUCERNA_UPSTREAM_KEY"


def add_prefill_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "PFlash speculative prefill",
        "a small drafter compresses long prompts before the target prefills them; each flag "
        "applies to every model and overrides its [models.prefill] table")
    group.add_argument("--prefill-compression", choices=MODES,
                       help="off, auto (prompts of at least --prefill-threshold tokens) or "
                       "always (default with any --prefill-* flag: auto)")
    group.add_argument("--prefill-threshold", type=int,
                       help="auto mode: compress prompts of at least this many tokens "
                       "(default 32000)")
    group.add_argument("--prefill-keep", type=float,
                       help="share of the prompt kept, in (0, 1] (default 0.05)")
    group.add_argument("--prefill-curve",
                       help='keep ratio per prompt length, "T:R T:R ...", linear in between, '
                       'e.g. "2048:0.5 8192:0.2 32768:0.1"')
    group.add_argument("--prefill-drafter",
                       help="drafter GGUF (qwen3, qwen35, gemma3 or llama), or 'default' "
                       "(the embedded gemma3-270m, the default)")
    group.add_argument("--prefill-n-ctx", type=int,
                       help="the drafter's context: the longest prompt it can score (default: "
                       "the model's --n-ctx)")
    group.add_argument("--prefill-park", dest="prefill_park", action="store_true", default=None,
                       help="park the target while the drafter scores, then restore it (for a "
                       "drafter and target sharing a device that cannot hold both)")
    group.add_argument("--no-prefill-park", dest="prefill_park", action="store_false",
                       help="keep both loaded (the default)")
    group.add_argument("--prefill-upstream", metavar="URL",
                       help="proxy mode: compress locally (the model is the drafter), forward "
                       "to this OpenAI-compatible base URL, e.g. http://gpu-box:8080/v1")
    group.add_argument("--prefill-upstream-key", metavar="KEY",
                       help=f"the upstream's bearer key (or ${UPSTREAM_KEY_ENV})")
    group.add_argument("--prefill-upstream-model", metavar="NAME",
                       help="model name sent upstream (default: the name the client used)")


def prefill_overrides(args: argparse.Namespace) -> PrefillOverrides:
    # Taken out of the environment: the daemons must not inherit it.
    env_key = os.environ.pop(UPSTREAM_KEY_ENV, "").strip() or None
    return PrefillOverrides(
        mode=args.prefill_compression,
        threshold=args.prefill_threshold,
        keep=args.prefill_keep,
        curve=args.prefill_curve,
        drafter=args.prefill_drafter,
        park_target=args.prefill_park,
        n_ctx=args.prefill_n_ctx,
        upstream=args.prefill_upstream,
        upstream_key=args.prefill_upstream_key,
        upstream_model=args.prefill_upstream_model,
        upstream_key_env=env_key,
    )
