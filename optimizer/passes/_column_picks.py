"""Column picks of a projection's output (passes/qkv_columns.py): a value reached from Y [*lead, N] through
views and picks is ``Transpose(Reshape(Y[..., cols], lead + cols.shape), perm)``; ``step`` says what a
Reshape, Transpose, Squeeze / Unsqueeze, Gather, GatherND, Slice or Split with constant parameters makes
of it (each op run on the array of column indices)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import const_ints, raw_axes
from onnx_fuse.passes._dim_lengths import TO_END
from onnx_fuse.passes._dim_products import dim_text, reshape_out_dims, slice_range
from onnx_fuse.passes._infra import attr_value
from onnx_fuse.passes._transpose_region import perm_of
from onnx_fuse.passes.constant_folding import constant_tensor


class Refused(Exception):
    """The region is not a set of column picks (the pass leaves the projection alone)."""


class ColumnState:
    """A region value as Transpose(Reshape(Y[..., cols], lead + cols.shape), perm)."""

    def __init__(self, cols: np.ndarray, perm: list[int], lead: int) -> None:
        self.cols, self.perm, self.lead = cols, perm, lead

    @property
    def rank(self) -> int:
        return len(self.perm)

    def trailing(self, axis: int, rank: int) -> int:
        """The cols axis behind the value's ``axis`` (normalized); refuses the lead axes."""
        if not -rank <= axis < rank or rank != self.rank:
            raise Refused("axis out of range")
        pa = self.perm[axis % rank]
        if pa < self.lead:
            raise Refused("a pick on a lead axis")
        return pa - self.lead

    def take(self, axis: int, index, keep: bool) -> ColumnState:
        """Entries ``index`` (a list, or an int when not ``keep``) of the value's ``axis``."""
        t = self.trailing(axis, self.rank)
        pa = t + self.lead
        cols = np.take(self.cols, index, axis=t)
        if keep:
            return ColumnState(cols, list(self.perm), self.lead)
        perm = [x - (x > pa) for j, x in enumerate(self.perm) if j != axis % self.rank]
        return ColumnState(cols, perm, self.lead)


def step(node: ir.Node, s: ColumnState, lead: list):
    """[(output, state)] of a view / pick node reading ``s`` as input 0; None for any other node; raises
    Refused where the node cannot be followed (a pick on a lead axis)."""
    op, ins, outs = node.op_type, list(node.inputs), list(node.outputs)
    r = s.rank
    if op == "Transpose":
        p = perm_of(node)
        if p is None or sorted(p) != list(range(r)):
            return None
        return [(outs[0], ColumnState(s.cols, [s.perm[j] for j in p], s.lead))]
    if op == "Reshape":
        if s.perm != list(range(r)) or len(ins) < 2:
            return None
        got = reshape_out_dims(outs[0], in_dims=[dim_text(d) for d in lead] + list(s.cols.shape))
        if got is None or len(got) < len(lead) or got[:len(lead)] != lead:
            return None
        tail = got[len(lead):]
        if any(a for _, a in tail) or int(np.prod([c for c, _ in tail])) != s.cols.size:
            return None
        shape = [c for c, _ in tail]
        return [(outs[0], ColumnState(s.cols.reshape(shape), list(range(len(lead) + len(shape))), s.lead))]
    if op == "Gather":
        index = constant_tensor(ins[1]) if len(ins) == 2 else None
        if index is None or not index.dtype.is_integer() or len(index.shape) > 1:
            return None
        axis = int(attr_value(node, "axis", 0))
        d = s.cols.shape[s.trailing(axis, r)]
        ix = index.numpy().astype(np.int64)
        if ((ix < -d) | (ix >= d)).any():
            return None
        ix = ix % d
        return [(outs[0], s.take(axis, int(ix) if ix.ndim == 0 else list(ix), keep=ix.ndim == 1))]
    if op == "GatherND":
        index = constant_tensor(ins[1]) if len(ins) == 2 else None
        if index is None or attr_value(node, "batch_dims", 0) != 0 or len(index.shape) not in (1, 2) \
                or index.shape[-1] != 1:
            return None
        ix = index.numpy().astype(np.int64)[..., 0]   # = Gather over axis 0 by these
        d = s.cols.shape[s.trailing(0, r)]
        if ((ix < -d) | (ix >= d)).any():
            return None
        ix = ix % d
        return [(outs[0], s.take(0, int(ix) if ix.ndim == 0 else list(ix), keep=ix.ndim == 1))]
    if op == "Slice":
        starts, ends = (const_ints(ins[k]) if len(ins) > k else None for k in (1, 2))
        axes = const_ints(ins[3]) if len(ins) > 3 and ins[3] is not None else None
        steps = const_ints(ins[4]) if len(ins) > 4 and ins[4] is not None else None
        if starts is None or ends is None or len(starts) != len(ends) \
                or (len(ins) > 3 and ins[3] is not None and axes is None) \
                or (len(ins) > 4 and ins[4] is not None and steps is None):
            return None
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        if len(axes) != len(starts) or len(steps) != len(starts) or 0 in steps:
            return None
        out = s
        for a, b0, e0, st in zip(axes, starts, ends, steps):
            if st == 1 and b0 == 0 and e0 >= TO_END:
                continue   # the whole axis: a Slice without axes cuts every axis, the lead ones too
            d = out.cols.shape[out.trailing(a, r)]
            out = out.take(a, list(slice_range(b0, e0, st, d)), keep=True)
        return [(outs[0], out)]
    if op == "Split":
        axis = int(attr_value(node, "axis", 0))
        d = s.cols.shape[s.trailing(axis, r)]
        if len(ins) > 1 and ins[1] is not None:
            sizes = const_ints(ins[1])
        elif node.attributes.get("split") is not None:
            sizes = [int(x) for x in node.attributes["split"].value]
        else:
            k = int(attr_value(node, "num_outputs", len(outs)))
            if k != len(outs) or k < 1:
                return None
            part = -(-d // k)
            sizes = [min(part, d - i * part) for i in range(k)]
        if sizes is None or len(sizes) != len(outs) or sum(sizes) != d or min(sizes) < 0:
            return None
        res, start = [], 0
        for o, size in zip(outs, sizes):
            res.append((o, s.take(axis, list(range(start, start + size)), keep=True)))
            start += size
        return res
    if op in ("Squeeze", "Unsqueeze"):
        axes = raw_axes(node)
        if axes is None:
            return None
        if op == "Squeeze":
            out = s
            for a in sorted({a % r for a in axes if -r <= a < r}, reverse=True):
                if out.cols.shape[out.trailing(a, out.rank)] != 1:
                    return None
                out = out.take(a, 0, keep=False)
            return None if len(set(a % r for a in axes)) != len(axes) else [(outs[0], out)]
        r2 = r + len(axes)
        if any(not -r2 <= a < r2 for a in axes) or len({a % r2 for a in axes}) != len(axes):
            return None
        new = {a % r2 for a in axes}
        cols, perm, rest = s.cols, [], iter(s.perm)
        for j in range(r2):
            if j in new:
                cols = cols[..., None]
                perm.append(s.lead + cols.ndim - 1)
            else:
                perm.append(next(rest))
        return [(outs[0], ColumnState(cols, perm, s.lead))]
    return None
