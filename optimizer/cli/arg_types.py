"""argparse types for flags whose bad values would otherwise fail deep inside the work."""

from __future__ import annotations

import argparse


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """--seed: numpy's generators take no negative seed."""
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    """--layers: a count of at least one."""
    return _int_at_least(text, 1)
