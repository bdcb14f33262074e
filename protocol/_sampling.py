"""Sampling parameters of ``generate`` (PROTOCOL.md section 5.1).

The field names are the wire keys and the field defaults are the daemon's defaults, so
an option equal to its default is never written and a missing option reads as its
default. ``None`` means "leave it to the daemon": the filter is off (``top_k``,
``top_p``, ``min_p``) or the seed is the daemon's ``--seed``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._command_base import as_int

__all__ = ["SamplingParams"]

SEED_MAX = 2**32 - 1
"""Largest seed (uint32). Every seed is deterministic on the wire, 0xFFFFFFFF included,
although the engine itself reads that value as "pick a random seed"."""

_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INT = re.compile(r"[+-]?[0-9]+")

_FLOAT_FIELDS = frozenset({"temp", "top_p", "min_p", "rep_pen", "freq_pen", "pres_pen"})


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How ``generate`` picks tokens. Greedy (argmax) unless ``temp > 0``.

    With ``temp > 0`` the chain is penalties (``rep_pen``, ``freq_pen``, ``pres_pen`` over
    the last ``rep_window`` tokens) → ``top_k`` → ``top_p`` → ``min_p`` → temperature →
    a draw seeded by ``seed``.

    Raises:
        ValueError: a value out of its range (see each field).
    """

    temp: float = 0.0
    """Temperature, ``>= 0``; 0 is greedy."""
    top_k: int | None = None
    """Keep the k most likely tokens, ``>= 0``; 0 or None is off."""
    top_p: float | None = None
    """Nucleus mass in ``[0, 1]``; 1 or None is off."""
    min_p: float | None = None
    """Minimum probability relative to the top token, in ``[0, 1]``; 0 or None is off."""
    rep_pen: float = 1.0
    """Repetition penalty, ``> 0``; 1 is off."""
    freq_pen: float = 0.0
    """Frequency penalty; 0 is off."""
    pres_pen: float = 0.0
    """Presence penalty; 0 is off."""
    rep_window: int = 64
    """How many recent tokens the penalties look at, ``>= 0``."""
    seed: int | None = None
    """Seed of the draw in ``[0, 2**32 - 1]``; None is the daemon's ``--seed``."""

    def __post_init__(self) -> None:
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _as_float(name, value))
        for name in ("top_k", "rep_window", "seed"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, as_int(name, value))
        _check(self.temp >= 0, "temp must be >= 0", self.temp)
        _check(self.top_k is None or self.top_k >= 0, "top_k must be >= 0", self.top_k)
        _check(self.top_p is None or 0 <= self.top_p <= 1, "top_p must be in [0, 1]", self.top_p)
        _check(self.min_p is None or 0 <= self.min_p <= 1, "min_p must be in [0, 1]", self.min_p)
        _check(self.rep_pen > 0, "rep_pen must be > 0", self.rep_pen)
        _check(self.rep_window >= 0, "rep_window must be >= 0", self.rep_window)
        _check(
            self.seed is None or 0 <= self.seed <= SEED_MAX,
            f"seed must be in [0, {SEED_MAX}]",
            self.seed,
        )

    @property
    def is_greedy(self) -> bool:
        """True when ``generate`` takes the argmax (``temp == 0``)."""
        return self.temp == 0

    def to_options(self) -> dict[str, str]:
        """The non-default fields as wire options, in the order of PROTOCOL.md."""
        options: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                options[f.name] = repr(value)
        return options

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SamplingParams:
        """Read the sampling keys of ``options`` (decoded values); other keys are ignored.

        Raises:
            ValueError: a value that is not a number of the right kind, or out of range.
        """
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = options.get(f.name)
            if raw is None:
                continue
            if f.name in _FLOAT_FIELDS:
                if not _FLOAT.fullmatch(raw):
                    raise ValueError(f"{f.name} must be a decimal number, got {raw!r}")
                values[f.name] = float(raw)
            else:
                if not _INT.fullmatch(raw):
                    raise ValueError(f"{f.name} must be an integer, got {raw!r}")
                values[f.name] = int(raw)
        return cls(**values)


def _as_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, not {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _check(ok: bool, message: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{message}, got {value!r}")
