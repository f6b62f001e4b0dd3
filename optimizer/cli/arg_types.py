"""argparse types for flags whose bad values would otherwise fail deep inside the work."""

from __future__ import annotations

import argparse
import math


def _int_at_least(text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be <= {high}, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """--seed: numpy's generators take no negative seed."""
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    """A count of at least one."""
    return _int_at_least(text, 1)


#: demo --layers: 64 build and verify in seconds; 100000 ran for minutes before anything printed
MAX_DEMO_LAYERS = 64


def demo_layers(text: str) -> int:
    return _int_at_least(text, 1, MAX_DEMO_LAYERS)


def tolerance(text: str) -> float:
    """--rtol / --atol: a finite number >= 0 (a negative one failed or passed every element
    silently; NaN fails every comparison, inf passes every one)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value
