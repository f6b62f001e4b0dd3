"""Target ``ort``: ONNX Runtime's com.microsoft contrib ops (MultiHeadAttention,
GroupQueryAttention, SkipLayerNormalization, SkipSimplifiedLayerNormalization, BiasGelu, FastGelu,
QuickGelu, RotaryEmbedding) plus standard ops, for ONNX Runtime 1.32.

Facts: the contrib domain and its opset. Standalone RMSNorm has no contrib form that the ONNX
checker accepts, so it becomes RMSNormalization-23 (ORT 1.32 runs it on the CPU); that is the
case where an ort-target model is raised to opset 23 (on demand: targets/onnx.py).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.targets.onnx import FUSION_OPSET

NAME = "ort"
CONTRIB_DOMAIN = "com.microsoft"
DOMAINS = {"": FUSION_OPSET, CONTRIB_DOMAIN: 1}


def pre_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    return []  # the opset is raised on demand by the fusion pass (targets/onnx.py)


def post_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    from onnx_fuse.passes.mha_joined_past import MhaJoinedPastPass
    from onnx_fuse.passes.mha_kv_heads import MhaHeadsFirstKvPass
    from onnx_fuse.passes.pack_matmul import PackSiblingMatMulsPass
    from onnx_fuse.passes.qdq_uint8 import Int8QdqToUint8Pass

    # q/k/v (gate/up) as one MatMul; MultiHeadAttention's past that is no cache joined to its 3-D k / v
    # (SD3's joint attention); its k / v left heads-first where merging them cost nodes; int8 activation
    # Q/DQ as uint8 at opset >= 21, where ORT refuses int8 (passes/qdq_uint8.py)
    from onnx_fuse.passes.quantized_attention import QuantizedAttentionNotePass

    return [PackSiblingMatMulsPass(), *((MhaJoinedPastPass(), MhaHeadsFirstKvPass(), QuantizedAttentionNotePass())
                                       if level >= 3 else ()),
            Int8QdqToUint8Pass()] if level >= 2 else []
