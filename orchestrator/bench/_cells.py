"""How the benchmark's markdown tables write a value: "-" for one that is missing."""

from __future__ import annotations

__all__ = ["count", "mib", "ms", "num", "share"]


def ms(value: float | None, digits: int = 1) -> str:
    """Seconds as milliseconds."""
    return "-" if value is None else f"{value * 1000:.{digits}f}"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f}"


def share(value: float | None) -> str:
    """A fraction as a percentage."""
    return "-" if value is None else f"{value * 100:.0f}"


def count(value: int | None) -> str:
    return "-" if value is None else str(value)
