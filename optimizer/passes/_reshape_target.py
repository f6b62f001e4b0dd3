"""A Reshape target computed from shapes with one entry not constant: that entry as -1, a constant.

onnxscript 0.6's dynamo export of ViT reshapes the patch embedding's Conv output [B, 32, 4, 4] by
``Concat(Shape(pixel_values)[:1], [32], [16])``: the batch is read from the pixels, not from the Conv
output, so no folding applies and the Shape read and the Concat stay in the optimized graph. onnxscript
0.7's optimizer writes ``[-1, 32, 16]`` instead, and so does this: where every other entry is a
positive constant, the one computed entry is what the element count leaves, whatever it reads, so the
-1 is exact wherever the original runs (it must then hold numel / 512). The target may also be a Shape read
whole (``Reshape(y, Shape(x))``, a GroupNorm's way back to x's dims): x's inferred static dims are its constant
entries, the one dynamic dim the computed one, as onnxscript 0.7 writes it. Literal 0s are refused (a copy
under allowzero = 0, an empty dim under allowzero = 1, where a -1 beside it is invalid), and so is a
target that already has a -1 (two computed entries cannot both be solved). Targets with several
entries read from shapes (the head splits ``[B, S, -1, D]``) stay as they are: proving each entry
equal to the input's dim would turn them into copies (0), which changes the head views the layout
and attention rules match (docs/holdout.md, "Shape facts (session 14)").
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._shape_values import _attr, constant_tensor, shape_read_dims


def solved_target(node: ir.Node) -> np.ndarray | None:
    """The constant target (int64, -1 for the one computed entry) equal in effect to ``node``'s
    computed one, or None (see the module docstring)."""
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    target = node.inputs[1]
    if target is None or constant_tensor(target) is not None or _attr(node, "allowzero", 0) not in (0, 1):
        return None
    parts = _entries(target)
    if parts is None or parts.count(None) != 1 or not all(e is None or e > 0 for e in parts):
        return None
    return np.array([-1 if e is None else e for e in parts], dtype=np.int64)


def _entries(target: ir.Value) -> list[int | None] | None:
    """The target's entries: an int where constant, None for an entry computed at run time (a
    Concat of 1-D pieces, each a constant or one computed int); None when not read so."""
    if target.shape is not None and len(target.shape) != 1:
        return None
    node = target.producer()
    if node is not None and node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
        # x's dims: an int where inferred static, None where not (a GroupNorm's Reshape(norm, Shape(x)) back to
        # x [batch, C, H, W] becomes [-1, C, H, W])
        return shape_read_dims(node, names="none")
    if node is None or node.op_type != "Concat" or node.domain not in ("", "ai.onnx"):
        return None
    out: list[int | None] = []
    for piece in node.inputs:
        if piece is None:
            return None
        t = constant_tensor(piece)
        if t is not None:
            if not t.dtype.is_integer() or len(t.shape) != 1:
                return None
            out += [int(x) for x in t.numpy().reshape(-1)]
        elif piece.shape is not None and list(piece.shape) == [1]:
            out.append(None)
        else:
            return None
    return out
