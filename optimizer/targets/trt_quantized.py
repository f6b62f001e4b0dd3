"""What the trt target cannot make of a quantized model: a report note, never a silent output.

TensorRT runs quantized models only in explicit-quantization form: QuantizeLinear / DequantizeLinear
with int8 / int4 / fp8 values and zero points of zero (its ONNX parser's operator table). ONNX
Runtime's dynamic quantization (DynamicQuantizeLinear + MatMulInteger), the QOperator form
(QLinearMatMul, com.microsoft QLinearAdd / QGemm ...), uint8 or asymmetric Q/DQ, and the int4
MatMulNBits that passes/matmul_nbits.py could not lower have no TensorRT importer, and no exact
rewrite into what it runs (dynamic activation scales, nonzero zero points). They stay as they are
(the model still runs in ONNX Runtime and verifies there); this pass names them in the report, with
what to do instead.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass

_NO_IMPORTER = frozenset({"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearMatMul",
                          "QLinearConv"})


def _nonzero_or_uint8(node: ir.Node) -> bool:
    """A Q / DQ TensorRT refuses: uint8 values or a zero point that is not all zeros."""
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    if zp is None:
        return False   # no zero point: int8 (Q) / the input's type (DQ), zero
    if zp.dtype == ir.DataType.UINT8:
        return True
    value = zp.const_value
    return value is None or bool(np.any(value.numpy().astype(np.float64) != 0))


class TrtQuantizedOpsNotePass(FusePass):
    """Counts the quantized ops TensorRT cannot run and says so in ``stats_reason`` (module docstring)."""

    name = "trt-quantized-ops"

    def __init__(self) -> None:
        super().__init__()
        self.stats_reason = ""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        found: collections.Counter[str] = collections.Counter()
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.domain == "com.microsoft" and (node.op_type.startswith(("QLinear", "Q", "Dynamic", "MatMulInteger"))
                                                    or node.op_type == "MatMulNBits"):
                found[f"com.microsoft::{node.op_type}"] += 1
            elif node.domain in ("", "ai.onnx") and node.op_type in _NO_IMPORTER:
                found[node.op_type] += 1
            elif node.domain in ("", "ai.onnx") and node.op_type in ("QuantizeLinear", "DequantizeLinear") \
                    and _nonzero_or_uint8(node):
                found[f"{node.op_type} (uint8 or nonzero zero point)"] += 1
        self.stats_reason = ""
        if found:
            self.stats_reason = (
                "TensorRT has no importer for " + ", ".join(f"{n} {op}" for op, n in sorted(found.items())) +
                ": kept for ONNX Runtime; for TensorRT quantize statically in QDQ form with int8 weights and "
                "activations and zero points of 0 (symmetric), or int4 weight-only with symmetric blocks")
            self.stats.update(found)
        return ir.passes.PassResult(model, False)
