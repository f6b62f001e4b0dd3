"""``paired_columns(v)``: whether v's last axis provably holds every value twice in a row.

Interleaved RoPE multiplies by repeat_interleave'd tables (column 2j equals column 2j + 1), and
RotaryEmbedding-23 interleaved takes the half-width table v[..., ::2]. Proven by _columns.py's walk
(as _half_columns.py proves rotate-half's tables); this module gives the pairs' own steps. Constant
tables are checked on their values; computed ones (Flux builds cos / sin from the position ids at run time, one
repeat_interleave per id axis, concatenated) are proven on their structure, for every input:

- the repeat: Reshape(Expand | Tile (Unsqueeze(h, last axis)) to 2 on that axis) or
  Reshape(Concat(u, u, axis=-1)), the Reshape (or a Flatten: TorchScript's repeat_interleave of a
  2-D table is Unsqueeze, Tile, Flatten(axis=1)) merging the last two axes back;
- Concat on the last axis of parts that are each paired and of even width;
- elementwise ops of paired operands, or of operands constant along the last axis (width 1):
  Cast, Neg, Cos, Sin, Identity, Mul, Add, Sub, Div;
- ops that leave the last axis alone: Unsqueeze / Squeeze / Slice / Gather / Expand / Transpose
  on other axes, and a Reshape keeping the last dim (EfficientLoFTR's [B, h, w, D] grid table viewed
  as [B, h*w, D] rows).
Nothing here fails: unprovable is False.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._consts import ctx_axes, ctx_ints
from onnx_fuse.rewrite._columns import BINARY, Column, dims, flat, last_kept, prove_columns


def paired_columns(ctx, v: ir.Value) -> bool:
    return prove_columns(ctx, v, _PAIRS)


def _equal_pairs(arr: np.ndarray) -> bool:
    return arr.ndim > 0 and arr.shape[-1] % 2 == 0 and arr.shape[-1] > 0 and \
        bool(np.array_equal(arr[..., 0::2], arr[..., 1::2]))


def _even_width(v: ir.Value) -> bool:
    d = dims(v)
    return bool(d) and isinstance(d[-1], int) and d[-1] % 2 == 0 and d[-1] > 0


def _known_rank(v: ir.Value) -> bool:
    return bool(dims(v))


def _step(ctx, node: ir.Node, v: ir.Value, sub) -> bool | None:
    """The ops that make pairs, or keep them in their own way; None for the walk's (Squeeze / Slice /
    Gather / Transpose that keep the last dim as inference has it)."""
    op, ins, out = node.op_type, list(node.inputs), dims(v)
    rank = len(out)
    if op in BINARY:   # each operand constant along the last axis (width 1) or paired; one paired
        return len(ins) == 2 and all(flat(i) or sub(i) for i in ins) and any(sub(i) for i in ins)
    if op == "Concat":
        axis = node.attributes.get("axis")
        return axis is not None and axis.as_int() % rank == rank - 1 and all(
            _even_width(i) and sub(i) for i in ins)
    if op in ("Reshape", "Flatten"):  # _repeat checks the output is the input's last two axes merged
        if _repeat(ctx, ins[0], out):
            return True
        return None if op == "Reshape" else False   # the walk reads a Reshape keeping the last dim
    if op == "Unsqueeze":
        return last_kept(ctx_axes(ctx, node), rank) and sub(ins[0])
    if op not in ("Squeeze", "Slice", "Gather", "Expand", "Transpose"):
        return False
    src = dims(ins[0])
    if src is None or not src or src[-1] != out[-1]:
        return False
    if op == "Expand":   # the last dim already equals the output's (no broadcast on it)
        return sub(ins[0])
    if op == "Transpose" and len(src) != rank:
        return False
    if op == "Slice" and (len(ins) <= 3 or ins[3] is None):
        return False   # no axes: all of them, the last too
    return None


_PAIRS = Column(_equal_pairs, _step, gate=_known_rank)


def _repeat(ctx, u: ir.Value | None, out: list) -> bool:
    """u [..., n, 2] is a pair of copies on its last axis, and the Reshape merges its last two axes."""
    src = dims(u)
    if src is None or len(src) != len(out) + 1 or src[-1] != 2 or src[:-2] != out[:-1]:
        return False
    if not (isinstance(src[-2], int) and out[-1] == 2 * src[-2]):
        return False
    node = u.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    ins = list(node.inputs)
    if node.op_type == "Concat":  # stack([h, h], -1)
        axis = node.attributes.get("axis")
        return len(ins) == 2 and ins[0] is ins[1] and axis is not None and axis.as_int() % len(src) == len(src) - 1
    if node.op_type in ("Expand", "Tile"):  # a new axis of 1 broadcast (or tiled) to 2
        if node.op_type == "Tile" and (ctx_ints(ctx, ins[1]) or [0])[-1] != 2:
            return False
        one = dims(ins[0])
        return one is not None and len(one) == len(src) and one[-1] == 1
    return False
