"""What both bench command lines share: the progress line and a list-of-integers type."""

from __future__ import annotations

import argparse
import sys

__all__ = ["int_list", "progress"]


def progress(message: str) -> None:
    print(f"lucerna bench: {message}", file=sys.stderr, flush=True)


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}"
                                         ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values
