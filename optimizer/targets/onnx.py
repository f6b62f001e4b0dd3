"""Target ``onnx``: standard ONNX ops only (LayerNormalization-17, Gelu-20, RMSNormalization-23,
RotaryEmbedding-23, Attention-23), which ONNX Runtime 1.32 CPU runs.

Facts: the default-domain opset the emitted ops need (23) and the pass that raises a model to it
before fusion (``UpgradeOpsetPass``, also used by the ort and trt targets). The rule packs gate
their opset-23 rules with ``opset: {min: 23}``; a model that cannot be converted keeps its opset
and simply gets fewer fusions.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.structure_check import (check_structure, restore_placeholders, skeleton_from_ir,
                                       skeleton_from_proto)

NAME = "onnx"
#: Default-domain opset the target's fused ops need.
FUSION_OPSET = 23
#: Opset imports the emitted ops need, by domain.
DOMAINS = {"": FUSION_OPSET}


def default_opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


class UpgradeOpsetPass(FusePass):
    """Raise the model's default-domain opset to ``target`` with onnx's version converter.

    Runs only where the model is older and every op converts; the converted graph replaces the
    old one in place (weights stay where they were: external tensors are not read). Models
    already at or above ``target``, or that fail to convert or to check, are left unchanged with
    the reason in ``stats_reason``.
    """

    name = "upgrade-opset"

    def __init__(self, target: int = FUSION_OPSET) -> None:
        super().__init__()
        self.target = target
        self.stats_reason = ""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.stats_reason = ""
        current = default_opset(model)
        if current is None or current >= self.target:
            return ir.passes.PassResult(model, False)
        try:
            # Weights travel as placeholders: converting never needs their bytes, and copying a
            # BERT-base worth of them through protobuf twice cost seconds.
            proto = skeleton_from_ir(model, placeholders=True)
            converted = onnx.version_converter.convert_version(proto, self.target)
            changed = _interface_change(proto, converted)
            if changed:
                raise ValueError(f"the conversion would change the model's interface: {changed}")
            _restore_value_info(proto, converted)
            check_structure(skeleton_from_proto(converted))
            new = ir.serde.deserialize_model(converted)
            restore_placeholders(new, model)
        except Exception as exc:  # the converter lacks an adapter, or its output is invalid
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.stats_reason = f"kept opset {current}: cannot convert to {self.target} ({first[:200]})"
            return ir.passes.PassResult(model, False)
        model.graph = new.graph
        model.functions.clear()
        model.functions.update(new.functions)
        self.stats[f"opset {current}->{self.target}"] += 1
        return ir.passes.PassResult(model, True)


def _interface_change(before: onnx.ModelProto, after: onnx.ModelProto) -> str:
    """'' when inputs and outputs keep names, dtypes and shapes; else what changed. Some adapters
    do change them (Scan-8 -> 9 drops the batch axis of every scan input): refuse those."""
    def sig(values):
        return [(v.name, v.type.SerializeToString()) for v in values]

    for kind, a, b in (("inputs", before.graph.input, after.graph.input),
                       ("outputs", before.graph.output, after.graph.output)):
        if sig(a) != sig(b):
            diff = next((x[0] for x, y in zip(sig(a), sig(b)) if x != y), "count")
            return f"{kind} differ ({diff})"
    return ""


def _restore_value_info(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    """Keep exactly the value_info the model had. The converter runs onnx shape inference and
    names every unknown dim (``unk__N``); those names would then pose as facts that the
    pipeline's own shape inference cannot improve, and it drops some exact shapes the exporter
    wrote (head counts behind Reshape(-1)). A value's type and shape do not depend on the opset."""
    produced = {o for n in after.graph.node for o in n.output}
    kept = [v for v in before.graph.value_info if v.name in produced]
    del after.graph.value_info[:]
    after.graph.value_info.extend(kept)


def pre_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    """Passes to run right before the rule packs (level >= 2)."""
    return [UpgradeOpsetPass(FUSION_OPSET)] if level >= 2 else []


def post_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    """Passes to run right after the rule packs: none for this target."""
    return []
