"""Target ``trt``: TensorRT-native standard ops (LayerNormalization, RMSNormalization, Gelu,
RotaryEmbedding, ...) plus our plugin ops in domain ``onnx_fuse`` (FusedAttention).

TensorRT's ONNX parser maps an unknown node to a plugin by op type = plugin name plus the
``plugin_version`` and ``plugin_namespace`` attributes. The rules write them; the post-fusion
fixup ``PluginAttributesPass`` makes sure every ``onnx_fuse`` node carries them (a user rule may
forget) and that the ``onnx_fuse`` opset is imported. CPU checks run these nodes in ONNX Runtime
through onnx_fuse.reference.ort_ops.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.plugin_ids import PLUGIN_DOMAIN, PLUGIN_DOMAIN_VERSION, PLUGIN_NAMESPACE, PLUGIN_VERSIONS
from onnx_fuse.targets.onnx import FUSION_OPSET
# registers the readers hook of the paged-KV lowering (rules/attention/paged_trt.yaml, O4)
from onnx_fuse.targets import trt_paged_kv  # noqa: F401

NAME = "trt"
DOMAINS = {"": FUSION_OPSET, PLUGIN_DOMAIN: PLUGIN_DOMAIN_VERSION}


class PluginAttributesPass(FusePass):
    """Give every onnx_fuse node ``plugin_version``/``plugin_namespace`` and import the domain."""

    name = "trt-plugin-attributes"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.domain != PLUGIN_DOMAIN:
                continue
            if "plugin_version" not in node.attributes:
                node.attributes["plugin_version"] = ir.AttrString(
                    "plugin_version", PLUGIN_VERSIONS.get(node.op_type, "1"))
                self.stats["plugin_version"] += 1
                modified = True
            if "plugin_namespace" not in node.attributes:
                node.attributes["plugin_namespace"] = ir.AttrString("plugin_namespace", PLUGIN_NAMESPACE)
                self.stats["plugin_namespace"] += 1
                modified = True
            if PLUGIN_DOMAIN not in model.opset_imports:
                model.opset_imports[PLUGIN_DOMAIN] = DOMAINS[PLUGIN_DOMAIN]
                modified = True
        return ir.passes.PassResult(model, modified)


def pre_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    return []  # the opset is raised on demand by the fusion pass (targets/onnx.py)


def post_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    if level < 2:
        return []
    from onnx_fuse.passes.gather_block_quantized import LowerGatherBlockQuantizedPass
    from onnx_fuse.passes.matmul_nbits import LowerMatMulNBitsPass
    from onnx_fuse.targets.trt_quantized import TrtQuantizedOpsNotePass

    # ORT's int4 MatMulNBits as int4 DequantizeLinear + MatMul, which TensorRT parses, and its
    # quantized embedding GatherBlockQuantized as an int8 Gather + Cast + Mul; then the
    # quantized ops it cannot parse are named in the report
    from onnx_fuse.passes.quantized_attention import QuantizedAttentionNotePass

    return [PluginAttributesPass(), LowerMatMulNBitsPass("trt"), LowerGatherBlockQuantizedPass("trt"),
            TrtQuantizedOpsNotePass(),
            *((QuantizedAttentionNotePass(),) if level >= 3 else ())]
