"""How much of a prompt PFlash keeps, as a function of the prompt's length."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["KeepRatioCurve"]


@dataclass(frozen=True)
class KeepRatioCurve:
    """A keep ratio per prompt length: ``T:R`` points, linear in between, flat outside.

    ``KeepRatioCurve.parse("2048:0.5 8192:0.2 32768:0.1")`` keeps half of a 2K-token
    prompt, 35 % of a 5K one, a fifth at 8K, a tenth from 32K on, and half of anything
    shorter than 2K. A single ratio (``"0.05"``) is the flat curve. Lengths are in the
    tokens of the model that serves the prompt (the target's, before compression).
    """

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a keep-ratio curve needs at least one point")
        lengths = [t for t, _ in self.points]
        if any(t < 0 for t in lengths) or lengths != sorted(set(lengths)):
            raise ValueError(f"curve lengths must be distinct, >= 0 and increasing, got {lengths}")
        for _, ratio in self.points:
            if not 0.0 < ratio <= 1.0:
                raise ValueError(f"keep ratios must be in (0, 1], got {ratio:g}")

    @classmethod
    def flat(cls, ratio: float) -> KeepRatioCurve:
        return cls(((0, float(ratio)),))

    @classmethod
    def parse(cls, text: str) -> KeepRatioCurve:
        """``"T:R T:R ..."`` (spaces or commas between points), or one bare ratio ``"R"``.

        Raises ValueError naming the offending point.
        """
        words = text.replace(",", " ").split()
        if len(words) == 1 and ":" not in words[0]:
            try:
                return cls.flat(float(words[0]))
            except ValueError:
                raise ValueError(f"{words[0]!r} is not a keep ratio in (0, 1]") from None
        points: list[tuple[int, float]] = []
        for word in words:
            length, sep, ratio = word.partition(":")
            try:
                if not sep:
                    raise ValueError
                points.append((int(length), float(ratio)))
            except ValueError:
                raise ValueError(f"{word!r} is not a TOKENS:RATIO point such as 8192:0.2"
                                 ) from None
        return cls(tuple(points))

    def ratio(self, n_tokens: int) -> float:
        """The keep ratio for a prompt of ``n_tokens``, interpolated linearly."""
        lengths = [t for t, _ in self.points]
        i = bisect.bisect_right(lengths, n_tokens)
        if i == 0:
            return self.points[0][1]
        if i == len(self.points):
            return self.points[-1][1]
        (t0, r0), (t1, r1) = self.points[i - 1], self.points[i]
        return r0 + (r1 - r0) * (n_tokens - t0) / (t1 - t0)

    def keep_x1000(self, n_tokens: int) -> int:
        """The ratio as ``compress`` takes it (PROTOCOL.md 5.7): thousandths, 1..1000."""
        return min(1000, max(1, round(self.ratio(n_tokens) * 1000)))

    def __str__(self) -> str:
        if len(self.points) == 1 and self.points[0][0] == 0:
            return f"{self.points[0][1]:g}"
        return " ".join(f"{t}:{r:g}" for t, r in self.points)
