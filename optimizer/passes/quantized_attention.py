"""Attention whose scores or probabilities are quantized: a report note, not a fusion.

A static QDQ quantizer that quantizes activations of every MatMul (onnxruntime.quantization's
quantize_static on all ops, ModelOpt's BMM quantization for TensorRT's int8 / fp8 MHA) puts a
QuantizeLinear -> DequantizeLinear pair on QK^T's output, on the masked scores and on the softmax
probabilities that PV reads. No attention op (Attention-23, com.microsoft MultiHeadAttention /
GroupQueryAttention, our plugins) quantizes inside, and dropping the pairs is not a rewrite of the
same function: on hold-out 15's qdq_u8 files it moved the outputs by 0.005 (gpt2), 0.027 (bert) and
0.049 (llama), 1-12% of their range (docs/holdout.md, "Tenth sweep, part B"). So these attentions
stay as the quantizer wrote them (TensorRT fuses that Q/DQ pattern into its own quantized MHA), and
this pass says so in the report, with what to quantize instead for a fused float attention.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, is_default_op

#: Ops a quantizer leaves between the score / probability Q/DQ pairs and the Softmax (the mask's
#: Add, HF's NaN guard Where(IsNaN(p), 0, p), a Cast of a float32 island).
_THROUGH = ("Add", "Where", "Cast", "Mul", "Div", "Sub")


def _quantized_near(value: ir.Value, forward: bool, depth: int = 3) -> bool:
    """A Q (forward: a reader) or DQ (backward: the producer) within ``depth`` pass-through ops."""
    if depth < 0:
        return False
    if forward:
        for user, _ in value.uses():
            if is_default_op(user, "QuantizeLinear"):
                return True
            if is_default_op(user, *_THROUGH) and _quantized_near(user.outputs[0], True, depth - 1):
                return True
        return False
    node = value.producer()
    if node is None:
        return False
    if is_default_op(node, "DequantizeLinear"):
        return True
    return is_default_op(node, *_THROUGH) and _quantized_near(node.inputs[0], False, depth - 1)


class QuantizedAttentionNotePass(FusePass):
    """Counts the Softmax left with quantized scores or probabilities; notes it (module docstring)."""

    name = "quantized-attention"

    def __init__(self) -> None:
        super().__init__()
        self.stats_reason = ""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.stats_reason = ""
        count = sum(1 for n in ir.traversal.RecursiveGraphIterator(model.graph)
                    if is_default_op(n, "Softmax") and n.inputs[0] is not None
                    and (_quantized_near(n.outputs[0], True) or _quantized_near(n.inputs[0], False)))
        if count:
            self.stats["softmax with quantized scores or probabilities"] = count
            self.stats_reason = (
                f"{count} Softmax with quantized scores or probabilities (Q/DQ inside attention) left "
                "unfused: no attention op quantizes inside, and dropping the Q/DQ changes the numbers "
                "(TensorRT fuses this Q/DQ attention itself). For a fused float attention, quantize "
                "the projections only (exclude the MatMuls without a constant weight)")
        return ir.passes.PassResult(model, False)
