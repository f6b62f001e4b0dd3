"""Lower bounds of sizes, from what a Conv refuses (passes/_dim_source.py's naming sweep sets them).

ONNX Runtime refuses a Conv whose padded input is shorter than its dilated kernel ("Invalid input
shape"; pools accept it), so wherever a model with a Conv runs, ``L + pads >= span`` on each spatial
axis and the output ``floor((L + pads - span) / s) + 1`` is at least 1. The names given to computed
lengths (``floor_div``) already hold only there (passes/_dim_lengths.py ``window_length``).

A bound on an atom lifts to every size built from it: sizes are monotone in their atoms (products
with positive coefficients, sums, ``floor((x + c) / s)`` with s > 0), so a size is at least its value
with each atom at its bound (0 where none is known: a size is never negative). Swin's patch Conv
(kernel 4, stride 4) gives ``height >= 4``, so its window grid padded to a multiple of 4,
``4*((height)//4+3)//4``, is at least 4, and the mask's cut ``[:-4]`` of it holds ``n - 4`` entries, not
``max(n - 4, 0)`` (passes/_dim_lengths.py ``minus``, ``at_least``).
"""

from __future__ import annotations

from contextlib import contextmanager

from onnx_fuse.passes._dim_products import Dim, parse_floor, parse_mod_neg, to_dim

#: {atom: least value} during one naming sweep (``bounds_in``); empty outside one, so nothing is
#: assumed where no graph stated it
_BOUNDS: dict[str, int] = {}
_SEP = " + "


@contextmanager
def bounds_in(bounds: dict[str, int]):
    """Use ``bounds`` (atom -> least value) for ``lower`` within the block."""
    global _BOUNDS
    saved, _BOUNDS = _BOUNDS, dict(bounds)
    try:
        yield
    finally:
        _BOUNDS = saved


def lower(d: Dim | None) -> int:
    """The least value size ``d`` takes wherever the graph runs (0 where nothing bounds it)."""
    if d is None or d[0] < 0:
        return 0
    coef, atoms = d
    out = coef
    for a in atoms:
        out *= _lower_atom(a)
    return out


def _lower_atom(atom: str) -> int:
    text = atom.strip()
    got = 0
    if _SEP in text:
        parts = [to_dim(p) for p in text.split(_SEP)]
        got = sum(lower(p) for p in parts) if all(p is not None for p in parts) else 0
    elif (fl := parse_floor(text)) is not None:
        inner = to_dim(fl[0])
        got = (lower(inner) + fl[1]) // fl[2] if inner is not None and inner != (1, (text,)) else 0
    elif parse_mod_neg((1, (text,))) is not None:
        got = 0
    return max(got, _BOUNDS.get(text, 0), 0)


def raise_bound(bounds: dict[str, int], d: Dim | None, least: int) -> None:
    """Record that size ``d`` is at least ``least``, where ``d`` is one atom times a positive int
    (``c * a >= least`` gives ``a >= ceil(least / c)``); other sizes are left unbounded."""
    if d is None or len(d[1]) != 1 or d[0] <= 0 or least <= 0:
        return
    atom, need = d[1][0].strip(), -(-least // d[0])
    bounds[atom] = max(bounds.get(atom, 0), need)
