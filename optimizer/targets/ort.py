"""Target ``ort``: ONNX Runtime's com.microsoft contrib ops (MultiHeadAttention,
GroupQueryAttention, SkipLayerNormalization, SkipSimplifiedLayerNormalization, BiasGelu, FastGelu,
QuickGelu, RotaryEmbedding) plus standard ops, for ONNX Runtime 1.32.

Facts: the contrib domain and its opset, and the default-domain opset raised before fusion
(standalone RMSNorm has no contrib form that the ONNX checker accepts, so it becomes
RMSNormalization-23, which ORT 1.32 runs on the CPU).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.targets.onnx import FUSION_OPSET, UpgradeOpsetPass

NAME = "ort"
CONTRIB_DOMAIN = "com.microsoft"
DOMAINS = {"": FUSION_OPSET, CONTRIB_DOMAIN: 1}


def pre_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    return [UpgradeOpsetPass(FUSION_OPSET)] if level >= 2 else []


def post_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    return []
