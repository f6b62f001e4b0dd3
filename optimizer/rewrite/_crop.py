"""How many cached tokens a cropped cache keeps: the expression function ``crop_length(kept, past)``
of rule checks (docs/rules.md), decided on values.

A sliding layer that keeps only its window (transformers 5's DynamicSlidingWindowLayer) reads
``kept = Slice(past, start, end, axes=[2])``: the last n tokens of the past. n is the Slice's own
constant start (-n, end past every length) whatever the declared shape says: the dynamo exporter
declares kept as [.., n, ..], the TorchScript one leaves it to shape inference, which cannot fix
it (Slice(past, -n) of a dynamic past has min(n, P) tokens). A start or end computed from shapes
(``Shape(past)[2] - n``) is run for several past lengths P (the mask probe's cut-out,
_mask_probe.py) and must keep the same last n tokens at each P >= n, the lengths the cropped
export runs at (its mask is [S, n + S]). Anything else raises EvalFailure with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_fuse.rewrite._expr import EvalFailure

_BIG_END = (1 << 31) - 1   # a Slice end at least this is "to the end" (exporters write INT64_MAX)
_AXIS = 2                  # the sequence axis of a [B, Hkv, P, D] past


def _int_list(v: ir.Value | None) -> list[int] | None:
    from onnx_fuse.rewrite._mask_probe import _const

    c = _const(v) if v is not None else None
    return None if c is None else [int(x) for x in np.asarray(c).reshape(-1)]


def crop_length(ctx: Any, kept: Any, past: Any) -> int:
    """n when ``kept`` is ``past``'s last n positions on axis 2 (a Slice of it), 0 when it is
    ``past`` itself; raises EvalFailure with the reason otherwise."""
    for v, what in ((kept, "cropped past"), (past, "past")):
        if not isinstance(v, ir.Value):
            raise EvalFailure(f"crop_length() needs the {what} as a graph value")
    if kept is past:
        return 0
    node = kept.producer()
    if node is None or node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or node.inputs[0] is not past:
        raise EvalFailure(f"{kept.name!r} is not a Slice of {past.name!r}")
    rank = len(past.shape) if past.shape is not None else 4
    arg = [node.inputs[i] if i < len(node.inputs) else None for i in range(1, 5)]
    axes, steps = _int_list(arg[2]), _int_list(arg[3])
    if axes not in ([_AXIS], [_AXIS - rank]) or (arg[3] is not None and steps != [1]):
        raise EvalFailure(f"the Slice of {past.name!r} is not a step-1 slice of axis {_AXIS} alone "
                          f"(axes {axes}, steps {steps})")
    starts, ends = _int_list(arg[0]), _int_list(arg[1])
    if starts is not None and ends is not None:
        if len(starts) != 1 or starts[0] >= 0 or len(ends) != 1 or ends[0] < _BIG_END:
            raise EvalFailure(f"the Slice of {past.name!r} is not its last positions on axis {_AXIS} "
                              f"(starts {starts}, ends {ends})")
        n = -starts[0]
    else:
        n = _probed_length(ctx, node, past)
    declared = kept.shape.dims[_AXIS] if kept.shape is not None and len(kept.shape) == rank else None
    if isinstance(declared, int) and declared != n:
        raise EvalFailure(f"the Slice of {past.name!r} keeps its last {n} positions but is declared {declared} long")
    return n


def _probed_length(ctx: Any, node: ir.Node, past: ir.Value) -> int:
    """The count of last tokens a Slice with computed starts / ends keeps, the same at every past
    length probed (from that count up past every integer constant of the cones)."""
    from onnx_fuse.rewrite import _mask_probe as mp

    pd = past.shape.dims[_AXIS] if past.shape is not None and len(past.shape) == 4 else None
    if pd is None or isinstance(pd, int) or not getattr(pd, "value", None):
        raise EvalFailure(f"the Slice of {past.name!r} has computed bounds and the past's length is not a "
                          "named dynamic dim (the probe varies it)")
    opset = getattr(getattr(ctx, "facts", None), "opset", None) or 18
    bounds = [node.inputs[1], node.inputs[2]]
    cones = []
    for v in bounds:
        if v is None or v.dtype is None or not v.dtype.is_integer():
            raise EvalFailure(f"the Slice of {past.name!r} has bounds of unknown type")
        try:
            cones.append(None if _int_list(v) is not None else mp._cone(v))
        except EvalFailure as exc:
            raise EvalFailure(f"the Slice of {past.name!r}: its bounds are not computed from shapes "
                              f"alone ({exc})") from None
    consts = sorted({c for cone in cones if cone for c in mp._int_constants(cone[0])})
    far = mp._far_length(consts)

    def kept_at(p: int) -> tuple[int, int]:
        vals = []
        for v, cone in zip(bounds, cones):
            if cone is None:
                vals.append(_int_list(v)[0])
                continue
            arr, why = mp._run_probe(cone[0], cone[1], v, p, 1, {pd.value: p}, opset)
            if why is not None or arr is None or arr.size != 1:
                raise EvalFailure(f"the Slice of {past.name!r}: its bounds did not evaluate at {p} cached "
                                  f"tokens ({why or list(np.shape(arr))})")
            vals.append(int(np.asarray(arr).reshape(-1)[0]))
        start, end = (min(max(x + p if x < 0 else x, 0), p) for x in vals)
        return start, end

    start, end = kept_at(far)
    n = end - start
    if end != far or n < 1:
        raise EvalFailure(f"the Slice of {past.name!r} keeps positions {start}..{end - 1} of {far}, not its last ones")
    for p in mp._boundary_lengths(consts, n, far):
        if kept_at(p) != (p - n, p):
            s, e = kept_at(p)
            raise EvalFailure(f"the Slice of {past.name!r} keeps its last {n} positions of {far} but "
                              f"positions {s}..{e - 1} of {p}: not a fixed crop")
    return n
