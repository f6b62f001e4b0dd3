"""ONNX Runtime's int4 weight-only MatMulNBits as standard ops, for the onnx and trt targets.

``com.microsoft::MatMulNBits`` (onnxruntime.quantization's MatMulNBitsQuantizer, onnxruntime-genai's
model builder) stores a [K, N] weight as 4-bit values in blocks of ``block_size`` along K, packed two
to a byte as B[N, blocks, block_size / 2], with a scale per block (scales[N, blocks]) and an optional
packed 4-bit zero point per block (8 when absent). Only ORT runs it. Written as what it computes,

    y = A @ DequantizeLinear(Wq, scales, zero_points, axis=0, block_size) (+ bias)

with Wq the [K, N] 4-bit weight (DequantizeLinear-21 blocked quantization), it stays compressed (the
4-bit values and scales are kept, never expanded to floats) and runs where standard ops run:

- onnx target: uint4 values with their uint4 zero points (exact);
- trt target: TensorRT's DequantizeLinear takes int4 with no zero point, so the weight is written as
  the signed int4 q - 8 (exact where every zero point is 8: symmetric quantization, or none stored).
  Other zero points (asymmetric blocks, the quantizer's default) add their share as a term of its
  own: (q - zp) s = (q - 8) s + (8 - zp) s, and the last part is constant within a block, so
  A @ W = A @ DQ(q - 8) + (A summed over each block of K) @ ((8 - zp) s), a [blocks, N] float
  matrix the size of the scales (Pad where the last block is partial, Reshape, ReduceSum, MatMul).

At trt the same split applies to a standard blocked DequantizeLinear of a uint4 weight with zero
points read only as MatMuls' B (MatMulNBitsQuantizer's QDQ form, which TensorRT refuses for its zero
points): int4 q - 8 without zero point, and the zero points' term after each MatMul.

Needs opset 21 (blocked DequantizeLinear, 4-bit types): a model below it is converted first
(``upgraded_copy``); one that does not convert, or whose user ceiling (``optimize(opset=N)``) is
below 21, keeps its MatMulNBits, with the reason. Not lowered
(left with the reason): bits other than 4, g_idx (act-order), float zero points, non-constant
weights, scales or zero points.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, reroute

_DQ_OPSET = 21


def _const(v: ir.Value | None) -> np.ndarray | None:
    if v is None or v.const_value is None or v.is_graph_input():
        return None
    return v.const_value.numpy()


def _nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    """Two 4-bit values per byte, low nibble first, along the last axis; the first ``count``."""
    packed = packed.astype(np.uint8)
    out = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return out[..., :count]


def initializer(graph: ir.Graph, name: str, arr: np.ndarray) -> ir.Value:
    """``arr`` as a new initializer of ``graph`` named ``name``, typed and shaped."""
    v = ir.Value(name=name, const_value=ir.Tensor(arr, name=name))
    v.type, v.shape = ir.TensorType(v.const_value.dtype), ir.Shape(list(arr.shape))
    graph.register_initializer(v)
    return v


def kept_reason(op: str, kept: dict[str, int], target: str) -> str:
    """The report's reason for contrib ops a lowering pass left (``kept``: reason -> count)."""
    runner = "TensorRT" if target == "trt" else "standard ONNX runtimes"
    return f"kept {op}, which {runner} cannot run: " + "; ".join(f"{n} with {why}" for why, n in kept.items())


class LowerMatMulNBitsPass(FusePass):
    """com.microsoft::MatMulNBits -> DequantizeLinear (blocked, 4-bit) + MatMul (module docstring)."""

    name = "lower-matmul-nbits"

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target
        self.stats_reason = ""
        self.max_opset = 23   # the user's opset ceiling (levels.build_stages sets it)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.stats_reason = ""
        modified = self._lower_nbits(model)
        if self.target == "trt":
            modified |= self._trt_zero_points(model)
        return ir.passes.PassResult(model, modified)

    def _trt_zero_points(self, model: ir.Model) -> bool:
        """The same zero-point split for a standard blocked DequantizeLinear of a uint4 weight with
        zero points (MatMulNBitsQuantizer's QDQ form) read only as MatMuls' B: TensorRT takes int4
        without zero point, so DQ(q - 8) plus the zero points' term per reader."""
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
                    continue
                x, scale, zpv = node.inputs[:3]
                q, sc, zp = _const(x), _const(scale), _const(zpv)
                bs, axis = int(attr_value(node, "block_size", 0)), int(attr_value(node, "axis", 1))
                if x is None or x.dtype != ir.DataType.UINT4 or q is None or sc is None or zp is None \
                        or q.ndim != 2 or axis not in (0, -2) or bs <= 0:
                    continue
                k, n = q.shape
                blocks = -(-k // bs)
                out = node.outputs[0]
                readers = [u.node for u in out.uses()]
                if out.is_graph_output() or sc.shape != (blocks, n) or zp.shape != (blocks, n) or not readers \
                        or any(r.op_type != "MatMul" or r.inputs[0] is out or r.inputs[0] is None
                               or r.inputs[0].shape is None or r.inputs[0].shape.rank() < 2 for r in readers):
                    continue
                zp8 = zp.astype(np.int16)
                shift = ((8.0 - zp8) * sc.astype(np.float64)).astype(sc.dtype) if np.any(zp8 != 8) else None
                stem = node.name or out.name or "dq_uint4"
                wq = initializer(graph, f"{stem}_int4", (q.astype(np.int16) - 8).astype(ml_dtypes.int4))
                w = ir.Value(name=f"{stem}_int4_w", type=out.type, shape=out.shape)
                graph.insert_before(node, ir.Node("", "DequantizeLinear", [wq, scale], outputs=[w], name=f"{stem}_int4",
                                                  attributes=[ir.AttrInt64("axis", 0), ir.AttrInt64("block_size", bs)]))
                for i, mm in enumerate(readers):
                    y_old = mm.outputs[0]
                    y = ir.Value(name=f"{stem}_mm{i}", type=y_old.type, shape=y_old.shape)
                    new = [ir.Node("", "MatMul", [mm.inputs[0], w], outputs=[y], name=f"{stem}_mm{i}")]
                    if shift is not None:
                        y = self._zero_point_term(graph, new, f"{stem}_{i}", mm.inputs[0], y, shift, k, bs, y_old)
                    graph.insert_before(mm, new)
                    reroute(y_old, y)
                    graph.remove(mm, safe=True)
                graph.remove(node, safe=True)
                self.stats["DequantizeLinear uint4 -> int4"] += 1
                modified = True
        return modified

    def _lower_nbits(self, model: ir.Model) -> bool:
        nodes = [(g, n) for g in model.graphs() for n in g
                 if n.op_type == "MatMulNBits" and n.domain == "com.microsoft"]
        if not nodes:
            return False
        modified = False
        from onnx_fuse.targets.onnx import _adopt, default_opset, upgraded_copy

        current = default_opset(model) or 0
        if current < _DQ_OPSET and self.max_opset < _DQ_OPSET:
            self.stats_reason = (f"kept {len(nodes)} MatMulNBits: the opset ceiling {self.max_opset} is below "
                                 f"{_DQ_OPSET} (blocked 4-bit DequantizeLinear)")
            return False
        if current < _DQ_OPSET:
            try:
                new = upgraded_copy(model, _DQ_OPSET)
            except Exception as exc:  # noqa: BLE001 -- the converter lacks an adapter: keep the ops
                text = str(exc).strip().splitlines()
                self.stats_reason = (f"kept {len(nodes)} MatMulNBits: opset {current} does not convert to "
                                     f"{_DQ_OPSET} ({(text[0] if text else type(exc).__name__)[:160]})")
                return False
            _adopt(model, new)
            self.stats[f"opset {current}->{_DQ_OPSET}"] += 1
            modified = True
            nodes = [(g, n) for g in model.graphs() for n in g
                     if n.op_type == "MatMulNBits" and n.domain == "com.microsoft"]
        kept: dict[str, int] = {}
        for graph, node in nodes:
            why = self._rewrite(graph, node)
            if why:
                kept[why] = kept.get(why, 0) + 1
            else:
                modified = True
        if kept:
            self.stats_reason = kept_reason("MatMulNBits", kept, self.target)
        return modified

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> str | None:
        """Lower one node; the reason it stays, or None when rewritten."""
        ins = list(node.inputs) + [None] * (6 - len(node.inputs))
        a, b, scales, zps, g_idx, bias = ins[:6]
        k, n = int(attr_value(node, "K", 0)), int(attr_value(node, "N", 0))
        bits, bs = int(attr_value(node, "bits", 4)), int(attr_value(node, "block_size", 0))
        if bits != 4:
            return f"bits={bits}"
        if g_idx is not None:
            return "g_idx (act-order)"
        qb, sc = _const(b), _const(scales)
        if qb is None or sc is None or a is None or k <= 0 or n <= 0 or bs <= 0:
            return "a non-constant weight or scale"
        blocks = -(-k // bs)
        if qb.size != n * blocks * bs // 2 or sc.size != n * blocks:
            return "an unexpected weight layout"
        q = _nibbles(qb.reshape(n, blocks * bs // 2), blocks * bs)[:, :k]          # [N, K]
        if zps is None:
            zp = np.full((n, blocks), 8, np.uint8)
        else:
            zraw = _const(zps)
            if zraw is None or zraw.dtype != np.uint8:
                return "non-constant or float zero points"
            zp = _nibbles(zraw.reshape(n, -1), blocks)                                  # [N, blocks]
            if zp.shape != (n, blocks):
                return "an unexpected zero-point layout"
        stem = node.name or node.outputs[0].name or "matmul_nbits"
        shift = None   # trt, zero points other than 8: ((8 - zp) * scale) per block and column
        if self.target == "trt":
            if np.any(zp != 8):
                rank = a.shape.rank() if a.shape is not None else None
                if rank is None or rank < 2:
                    return "zero points other than 8 and an input of unknown rank"
                shift = ((8.0 - zp.astype(np.float64)) * sc.reshape(n, blocks).astype(np.float64)).T
            wq, zero = (q.astype(np.int16) - 8).astype(ml_dtypes.int4).T, None
        else:
            wq, zero = q.astype(ml_dtypes.uint4).T, zp.astype(ml_dtypes.uint4).T
        inputs = [initializer(graph, f"{stem}_wq", np.ascontiguousarray(wq)),
                  initializer(graph, f"{stem}_scale", np.ascontiguousarray(sc.reshape(n, blocks).T))]
        if zero is not None:
            inputs.append(initializer(graph, f"{stem}_zp", np.ascontiguousarray(zero)))
        dtype = scales.dtype or a.dtype   # (A's may be unknown: TorchScript carries no value_info)
        w = ir.Value(name=f"{stem}_w", type=ir.TensorType(dtype), shape=ir.Shape([k, n]))
        new = [ir.Node("", "DequantizeLinear", inputs, outputs=[w], name=f"{stem}_dq",
                       attributes=[ir.AttrInt64("axis", 0), ir.AttrInt64("block_size", bs)])]
        out = node.outputs[0]
        y = ir.Value(name=f"{stem}_mm", type=out.type, shape=out.shape)
        new.append(ir.Node("", "MatMul", [a, w], outputs=[y], name=f"{stem}_mm"))
        if shift is not None:
            y = self._zero_point_term(graph, new, stem, a, y, shift.astype(sc.dtype), k, bs, out)
        if bias is not None:
            y2 = ir.Value(name=f"{stem}_bias", type=out.type, shape=out.shape)
            new.append(ir.Node("", "Add", [y, bias], outputs=[y2], name=f"{stem}_bias"))
            y = y2
        graph.insert_before(node, new)
        reroute(out, y)
        graph.remove(node, safe=True)
        self.stats["MatMulNBits"] += 1
        return None

    def _zero_point_term(self, graph: ir.Graph, new: list[ir.Node], stem: str, a: ir.Value, y: ir.Value,
                         shift: np.ndarray, k: int, bs: int, out: ir.Value) -> ir.Value:
        """y + (A summed over each block of K) @ shift: the zero points' share of A @ W, since
        (q - zp) s = (q - 8) s + (8 - zp) s and the second term is constant within a block."""
        rank, blocks = a.shape.rank(), shift.shape[0]

        def node(op, inputs, tag, attrs=()):
            v = ir.Value(name=f"{stem}_{tag}")
            new.append(ir.Node("", op, inputs, attributes=list(attrs), outputs=[v], name=f"{stem}_{tag}"))
            return v

        x = a
        if blocks * bs != k:   # the last block is partial: zeros make it whole
            pads = initializer(graph, f"{stem}_pads", np.array([0] * (2 * rank - 1) + [blocks * bs - k], np.int64))
            x = node("Pad", [x, pads], "pad")
        view = initializer(graph, f"{stem}_blocks", np.array([0] * (rank - 1) + [blocks, bs], np.int64))
        axes = initializer(graph, f"{stem}_axes", np.array([-1], np.int64))
        sums = node("ReduceSum", [node("Reshape", [x, view], "view"), axes], "sums",
                    [ir.AttrInt64("keepdims", 0)])                                      # [..., blocks]
        term = node("MatMul", [sums, initializer(graph, f"{stem}_zp_shift", np.ascontiguousarray(shift))], "zp_term")
        total = ir.Value(name=f"{stem}_zp", type=out.type, shape=out.shape)
        new.append(ir.Node("", "Add", [y, term], outputs=[total], name=f"{stem}_zp"))
        self.stats["zero-point term"] += 1
        return total
