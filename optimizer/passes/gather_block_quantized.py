"""ONNX Runtime's block-quantized embedding lookup as standard ops, for the onnx and trt targets.

``com.microsoft::GatherBlockQuantized`` (onnxruntime-genai's int4 builds of models with a tied
embedding, Gemma: the LM head's MatMulNBits weight read again as the token table) gathers rows of a
block-quantized [V, K] table and dequantizes them: out = (q - zp) * scale per block of
``block_size`` along K. Only ORT runs it. Rewritten as what it computes:

    Gather(T, ids) -> Cast -> * Unsqueeze(Gather(scales, ids), -1) -> Reshape [..., K]

with T the constant [V, blocks, block_size] int8 table holding q - zp (in [-15, 15] for 4 bits: the
zero points are folded in, so there is no zero-point tensor and no uint8, which TensorRT refuses).
Exact: q - zp is an integer every float type holds, and the one product per element rounds as the
contrib kernel's does. The table stays integer (one byte a value, twice the packed 4-bit bytes,
a quarter of float32); a standard Gather cannot read 4-bit types, so the nibbles are unpacked.

Taken: gather_axis 0, quantize_axis the last of a 2-D table, constant data / scales / zero points,
4 bits (uint8 packed two a byte, low nibble first, zero point 8 when absent; or int4 / uint4 data)
or 8 bits where every q - zp fits int8. Anything else stays, with the reason in the report.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, reroute
from onnx_fuse.passes.matmul_nbits import _const, _nibbles, initializer, kept_reason


def _unpacked(raw: np.ndarray, dtype: ir.DataType, bits: int, count: int) -> np.ndarray | None:
    """The [rows, count] integer values of a [rows, *] quantized tensor (None: unknown layout)."""
    if dtype == ir.DataType.UINT8 and bits == 4:
        vals = _nibbles(raw.reshape(raw.shape[0], -1), count)
    elif dtype in (ir.DataType.UINT8, ir.DataType.INT8) and bits == 8:
        vals = raw.reshape(raw.shape[0], -1)[:, :count]
    elif dtype in (ir.DataType.UINT4, ir.DataType.INT4) and bits == 4:
        vals = raw.reshape(raw.shape[0], -1)[:, :count]
    else:
        return None
    return vals.astype(np.int16) if vals.shape[1] == count else None


class LowerGatherBlockQuantizedPass(FusePass):
    """com.microsoft::GatherBlockQuantized -> Gather + Cast + Mul (module docstring)."""

    name = "lower-gather-block-quantized"

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.stats_reason = ""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.stats_reason = ""
        kept: dict[str, int] = {}
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type != "GatherBlockQuantized" or node.domain != "com.microsoft":
                    continue
                why = self._rewrite(graph, node)
                if why:
                    kept[why] = kept.get(why, 0) + 1
                else:
                    modified = True
        if kept:
            self.stats_reason = kept_reason("GatherBlockQuantized", kept, self.target)
        return ir.passes.PassResult(model, modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> str | None:
        """Lower one node; the reason it stays, or None when rewritten."""
        ins = list(node.inputs) + [None] * (4 - len(node.inputs))
        data, ids, scales, zps = ins[:4]
        bits, bs = int(attr_value(node, "bits", 4)), int(attr_value(node, "block_size", 128))
        gax, qax = int(attr_value(node, "gather_axis", 0)), int(attr_value(node, "quantize_axis", 1))
        raw, sc = _const(data), _const(scales)
        if raw is None or sc is None or ids is None or data.dtype is None:
            return "a non-constant table or scales"
        if sc.ndim != 2 or gax != 0 or qax not in (1, -1) or raw.ndim != 2 or bs <= 0:
            return "an axis other than gather 0 / quantize the last of a 2-D table"
        rank = ids.shape.rank() if ids.shape is not None else None
        if rank is None:
            return "indices of unknown rank"
        rows, blocks = sc.shape
        packed = data.dtype == ir.DataType.UINT8 and bits == 4
        width = raw.shape[1] * (2 if packed else 1)   # K: the unpacked row length
        if raw.shape[0] != rows or -(-width // bs) != blocks:
            return "an unexpected table or scale layout"
        q = _unpacked(raw, data.dtype, bits, width)
        if q is None:
            return f"bits={bits} over {data.dtype}"
        if zps is None:   # the default zero point: the middle of an unsigned range, 0 of a signed one
            unsigned = data.dtype in (ir.DataType.UINT8, ir.DataType.UINT4)
            zp = np.full((rows, blocks), (1 << (bits - 1)) if unsigned else 0, np.int16)
        else:
            zraw = _const(zps)
            zp = None if zraw is None or zps.dtype is None else _unpacked(zraw, zps.dtype, bits, blocks)
            if zp is None:
                return "non-constant or float zero points"
        pad = blocks * bs - width
        q = np.pad(q, ((0, 0), (0, pad))).reshape(rows, blocks, bs) - zp[:, :, None]
        if q.min(initial=0) < -128 or q.max(initial=0) > 127:
            return "values minus zero points outside int8"
        stem = node.name or node.outputs[0].name or "gather_block_quantized"
        out = node.outputs[0]
        new: list[ir.Node] = []

        def emit(op, inputs, tag, attrs=(), out_type=None):
            v = ir.Value(name=f"{stem}_{tag}", type=out_type)
            new.append(ir.Node("", op, inputs, attributes=list(attrs), outputs=[v], name=f"{stem}_{tag}"))
            return v

        table = initializer(graph, f"{stem}_table", q.astype(np.int8))
        dtype = scales.dtype
        rowsq = emit("Gather", [table, ids], "rows", [ir.AttrInt64("axis", 0)])              # [..., blocks, bs] int8
        vals = emit("Cast", [rowsq], "float", [ir.AttrInt64("to", dtype.value)], ir.TensorType(dtype))
        srow = emit("Gather", [scales, ids], "row_scales", [ir.AttrInt64("axis", 0)])       # [..., blocks]
        last = initializer(graph, f"{stem}_last", np.array([-1], np.int64))
        deq = emit("Mul", [vals, emit("Unsqueeze", [srow, last], "scales_col")], "deq")
        view = initializer(graph, f"{stem}_view", np.array([0] * rank + [-1], np.int64))
        y = emit("Reshape", [deq, view], "flat")                                             # [..., blocks * bs]
        if pad:
            starts = initializer(graph, f"{stem}_start", np.array([0], np.int64))
            ends = initializer(graph, f"{stem}_end", np.array([width], np.int64))
            y = emit("Slice", [y, starts, ends, last], "crop")
        y.type, y.shape = out.type, out.shape
        graph.insert_before(node, new)
        reroute(out, y)
        graph.remove(node, safe=True)
        self.stats["GatherBlockQuantized"] += 1
        return None
