"""The ``lucerna serve --prefill-*`` flags, added from the key declarations (``_keys``).

Argparse only; a value is validated by ``PrefillOverrides`` against the same declarations.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields

from orchestrator.prefill._keys import UPSTREAM_KEY_ENV, PrefillKeys
from orchestrator.prefill._settings import PrefillOverrides
from orchestrator.settings import add_flag

__all__ = ["UPSTREAM_KEY_ENV", "add_prefill_arguments", "prefill_overrides"]

_FLAGS = {setting.key: setting for setting in vars(PrefillKeys).values()
          if getattr(setting, "flag", None) is not None}
"""The keys that are flags, by the ``PrefillOverrides`` field each fills."""


def add_prefill_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "PFlash speculative prefill",
        "a small drafter compresses long prompts before the target prefills them; each flag "
        "applies to every model and overrides its [models.prefill] table")
    keys = PrefillKeys
    for setting in (keys.MODE, keys.THRESHOLD, keys.KEEP, keys.CURVE, keys.DRAFTER,
                    keys.N_CTX):
        add_flag(group, setting)
    add_flag(group, keys.PARK_TARGET, action="store_true")
    group.add_argument("--no-prefill-park", dest=keys.PARK_TARGET.dest, action="store_false",
                       help="keep both loaded (the default)")
    for setting in (keys.UPSTREAM, keys.UPSTREAM_KEY, keys.UPSTREAM_MODEL):
        add_flag(group, setting)


def prefill_overrides(args: argparse.Namespace) -> PrefillOverrides:
    # Taken out of the environment: the daemons must not inherit it.
    env_key = os.environ.pop(UPSTREAM_KEY_ENV, "").strip() or None
    given = {field.name: getattr(args, _FLAGS[field.name].dest or field.name)
             for field in fields(PrefillOverrides) if field.name in _FLAGS}
    return PrefillOverrides(**given, upstream_key_env=env_key)
