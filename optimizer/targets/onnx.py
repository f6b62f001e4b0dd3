"""Target ``onnx``: standard ONNX ops only (LayerNormalization-17, Gelu-20, RMSNormalization-23,
RotaryEmbedding-23, Attention-23), which ONNX Runtime 1.32 CPU runs.

Facts: the default-domain opset the emitted ops need (23), the conversion that raises a model to
it (``upgraded_copy`` / ``UpgradeOpsetPass``) and the fusion pass of every target,
``OpsetOnDemandRewritePass``, which upgrades only when an emitted op needs it.

Opset policy (all targets): the rule packs gate their opset-23 rules with ``opset: {min: 23}``.
A model older than that is converted only when one of those rules then fires; a model on which
none fires keeps its own opset (the rules run on it as it is). A model that cannot be converted
keeps its opset, and the canonical attention ops take the plain-ops lowering of
rules/attention/lower_plain.yaml (opset max 22) instead of Attention-23. Nothing is ever converted
down. The user may lower the ceiling (``optimize(opset=N)``, ``--opset N``): the model is then
raised on demand to N at most, and rules gated above N never fire.
"""

from __future__ import annotations

import collections

import onnx
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass
from onnx_fuse.rewrite import RewritePass
from onnx_fuse.rewrite._rewriter import CanonicalLeftover
from onnx_fuse.structure_check import (check_structure, restore_placeholders, skeleton_from_ir,
                                       skeleton_from_proto)

NAME = "onnx"
#: Default-domain opset the target's fused ops need.
FUSION_OPSET = 23
#: Opset imports the emitted ops need, by domain.
DOMAINS = {"": FUSION_OPSET}


def default_opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def upgraded_copy(model: ir.Model, target: int = FUSION_OPSET) -> ir.Model:
    """A new model: ``model`` converted to default-domain opset ``target`` with onnx's version
    converter. It shares the weights (external tensors are not read). Raises ValueError (or the
    converter's error) when some op has no adapter or the result would differ in interface."""
    # Weights travel as placeholders: converting never needs their bytes, and copying a
    # BERT-base worth of them through protobuf twice cost seconds.
    proto = skeleton_from_ir(model, placeholders=True)
    converted = onnx.version_converter.convert_version(proto, target)
    changed = _interface_change(proto, converted)
    if changed:
        raise ValueError(f"the conversion would change the model's interface: {changed}")
    _restore_interface(proto, converted)
    _restore_value_info(proto, converted)
    check_structure(skeleton_from_proto(converted))
    new = ir.serde.deserialize_model(converted)
    restore_placeholders(new, model)
    return new


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


class UpgradeOpsetPass(FusePass):
    """Raise the model's default-domain opset to ``target`` in place (``upgraded_copy``).

    Models already at or above ``target``, or that fail to convert or to check, are left
    unchanged with the reason in ``stats_reason``. The pipeline itself converts on demand
    (``OpsetOnDemandRewritePass``); this pass serves ``rules explain`` and tests.
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
            new = upgraded_copy(model, self.target)
        except Exception as exc:  # the converter lacks an adapter, or its output is invalid
            self.stats_reason = f"kept opset {current}: cannot convert to {self.target} ({_first_line(exc)})"
            return ir.passes.PassResult(model, False)
        _adopt(model, new)
        self.stats[f"opset {current}->{self.target}"] += 1
        return ir.passes.PassResult(model, True)


def _adopt(model: ir.Model, new: ir.Model) -> None:
    model.graph = new.graph
    model.functions.clear()
    model.functions.update(new.functions)


class OpsetOnDemandRewritePass(RewritePass):
    """The rule packs, with the model raised to ``FUSION_OPSET`` only when an emitted op needs it.

    A model older than the opset some rules require (``opset: {min: N}``) is converted on a copy
    and the rules run there first. The copy is kept when a rule that needed the newer opset fired
    on it: the result is then what the rules give on the upgraded model. Otherwise the copy is
    dropped and the rules run on the model at its own opset. Models at or above the opset, and
    models in which no such rule could fire (some op of its pattern is missing, see
    ``_could_fire``), take the single ordinary run. The cost of the trial is paid only by old
    models that have every op of an opset-gated pattern.
    """

    def __init__(self, rule_set, *, fusion_opset: int = FUSION_OPSET, **kwargs) -> None:
        super().__init__(rule_set, **kwargs)
        self.fusion_opset = fusion_opset

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # -O4 trt: an Optimum merged decoder is tried with its If resolved to the cache branch,
        # so that its KV cache can be paged (targets/trt_merged_decoder.py)
        from onnx_fuse.targets.trt_merged_decoder import PAGED_RULE, fuse_merged_decoder

        if PAGED_RULE in self.rule_set:
            result = fuse_merged_decoder(self, model)
            if result is not None:
                return result
        return self.fuse(model)

    def fuse(self, model: ir.Model) -> ir.passes.PassResult:
        """The rules on ``model``, upgraded to the fusion opset on demand (class docstring)."""
        current = default_opset(model)
        if current is None or current >= self.fusion_opset:
            return super().call(model)
        rules = self.rule_set.ordered()
        possible = _could_fire(rules, model)
        # rules the trial can enable: gated above the model's opset, at or below the ceiling
        gated = {r.name for r in rules if r.opset_min is not None and current < r.opset_min <= self.fusion_opset}
        if not gated & possible:
            return super().call(model)
        try:
            trial = upgraded_copy(model, self.fusion_opset)
        except Exception as exc:
            result, left_out = self._without_leftovers(model)
            note = f"kept opset {current}: cannot convert to {self.fusion_opset} ({_first_line(exc)})"
            if left_out:
                note += (f"; left out {', '.join(left_out)} (no lowering at opset {current} took their "
                         "canonical ops)")
            self.stats_reason = "; ".join(x for x in (note, self.stats_reason) if x)
            return result
        before = collections.Counter(self.stats)
        result = super().call(trial)
        fired = {name for name, n in (self.stats - before).items() if n > 0}
        if fired & gated:
            _adopt(model, trial)
            note = (f"opset {current}->{self.fusion_opset} for "
                    f"{', '.join(sorted(fired & gated))}")
            self.stats_reason = "; ".join(x for x in (note, self.stats_reason) if x)
            return ir.passes.PassResult(model, True)
        kept = self._outcome()
        self.stats.clear()
        self.stats.update(before)
        try:
            return self._without_fallbacks(model)
        except CanonicalLeftover as exc:
            # the run at the model's own opset left a canonical op that only a lowering gated on
            # the fusion opset takes, where the trial lowered every one (the two runs can differ:
            # a graph_io rule that fired on the converted copy only, as GPT-2's paged KV did once
            # a stale reader of present.N.key refused it): the trial is the result, not a crash
            _adopt(model, trial)
            self._restore(kept)
            note = (f"opset {current}->{self.fusion_opset}: at opset {current} no lowering took "
                    f"{exc.op_type} (from {exc.rule})")
            self.stats_reason = "; ".join(x for x in (note, self.stats_reason) if x)
            return ir.passes.PassResult(model, True)

    def _without_fallbacks(self, model: ir.Model) -> ir.passes.PassResult:
        """The rules at the model's own opset, less those the trial could not run (``opset: {max}``
        below the fusion opset: lower_plain.yaml's attention). The two runs can differ (a graph_io
        rule that fired on the converted copy only); where the own run then leaves a canonical op
        the fallback lowering would have taken, the trial is the better result (paged KV, not
        plain attention), so the CanonicalLeftover goes to the caller, which keeps the trial."""
        fallbacks = [r.name for r in self.rule_set.ordered()
                     if r.opset_max is not None and r.opset_max < self.fusion_opset]
        if not fallbacks:
            return super().call(model)
        rule_set = self.rule_set
        self.rule_set = type(rule_set)(r for r in rule_set.ordered() if r.name not in fallbacks)
        try:
            return super().call(model)
        finally:
            self.rule_set = rule_set

    def _without_leftovers(self, model: ir.Model) -> tuple[ir.passes.PassResult, list[str]]:
        """The rules at the model's own opset where no conversion is possible: the lowerings gated on
        the fusion opset cannot fire, so a rule whose canonical op no other lowering took is left out
        and the rules run again on the model as it was (a valid graph with that idiom unfused, not an
        InternalError). The copy (ir's clone: weights shared) is made on this path only."""
        pristine = model.clone()
        before = collections.Counter(self.stats)
        rule_set, left_out = self.rule_set, []
        try:
            while True:
                try:
                    return super().call(model), left_out
                except CanonicalLeftover as exc:
                    if exc.rule not in self.rule_set or exc.rule in left_out:
                        raise
                    left_out.append(exc.rule)
                    _adopt(model, pristine.clone())
                    self.stats.clear()
                    self.stats.update(before)
                    self.rule_set = type(rule_set)(r for r in rule_set.ordered() if r.name not in left_out)
        finally:
            self.rule_set = rule_set

    def _outcome(self) -> dict:
        """What a run leaves on the pass (its counts and notes), to restore a run that is kept."""
        return {"stats": collections.Counter(self.stats), "stats_reason": self.stats_reason,
                "plugin_notes": list(self.plugin_notes), "rejected": list(self.rejected),
                "unsettled": list(getattr(self, "unsettled", []))}

    def _restore(self, kept: dict) -> None:
        self.stats.clear()
        self.stats.update(kept["stats"])
        self.stats_reason, self.plugin_notes = kept["stats_reason"], kept["plugin_notes"]
        self.rejected, self.unsettled = kept["rejected"], kept["unsettled"]


def _normal_key(domain: str, op_type: str) -> tuple[str, str]:
    return ("" if domain == "ai.onnx" else domain, op_type)


def _could_fire(rules, model: ir.Model) -> set[str]:
    """Names of the rules whose every non-optional pattern statement finds its op in the model,
    counting ops that rules which could fire emit (canonical ops the lowerings match). A cheap
    over-approximation: a rule outside it cannot fire, so no trial upgrade is made for it."""
    present = {_normal_key(n.domain, n.op_type) for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    possible: set[str] = set()
    grew = True
    while grew:
        grew = False
        for rule in rules:
            if rule.name in possible:
                continue
            needed = _required_statements(rule)
            if all(any(_normal_key(*alt.key) in present for alt in stmt.alternatives) for stmt in needed):
                possible.add(rule.name)
                emitted = {_normal_key(st.op.domain, st.op.op_type) for st in rule.rewrite
                           if st.kind == "op" and st.op is not None}
                present |= emitted
                grew = True  # another pass: what it emits may complete other patterns
    return possible


def _required_statements(rule) -> list:
    """The match statements every match needs: those reached from the pattern outputs through
    present nodes. A statement that only feeds an optional node (``isn = IsNaN(p)`` under
    ``Where?(isn, 0, p, pass=p)``) is not required: the optional node may be absent."""
    producer = {o: st for st in rule.match for o in st.outputs if o}
    required, seen, stack = [], set(), list(rule.outputs)
    while stack:
        st = producer.get(stack.pop())
        if st is None or id(st) in seen:
            continue
        seen.add(id(st))
        if st.optional:   # absent: the pattern goes on at its pass-through input only
            alt = st.alternatives[0]
            stack.append(alt.passthrough or next((i for i in alt.inputs if i), None))
            continue
        required.append(st)
        stack.extend(set.intersection(*({i for i in alt.inputs if i} for alt in st.alternatives)))
    return required


def _interface_change(before: onnx.ModelProto, after: onnx.ModelProto) -> str:
    """'' when inputs and outputs keep names, dtypes and shapes; else what changed. Some adapters
    do change them (Scan-8 -> 9 drops the batch axis of every scan input): refuse those. A dim
    the model left unknown (no value, no name) may come back named or sized: the converter's
    shape inference fills it (``unk__N``), which changes nothing (``_restore_interface``). So may
    an output's named dim come back sized: inference computed it from the graph, where torch.export
    declares the size of a boolean index it folded to constant indices by its data-dependent
    symbol (``u0``; Gemma 4's vision pooler); an input's stays as declared or is refused."""
    for kind, a, b in (("inputs", before.graph.input, after.graph.input),
                       ("outputs", before.graph.output, after.graph.output)):
        if len(a) != len(b):
            return f"{kind} differ (count)"
        for x, y in zip(a, b):
            if x.name != y.name or not _same_type(x.type, y.type, sized_ok=kind == "outputs"):
                return f"{kind} differ ({x.name})"
    return ""


def _same_type(before: onnx.TypeProto, after: onnx.TypeProto, sized_ok: bool = False) -> bool:
    """sized_ok: a named dim may come back as a size (an output's, which inference computed)."""
    if before.SerializeToString() == after.SerializeToString():
        return True
    if not (before.HasField("tensor_type") and after.HasField("tensor_type")):
        return False
    a, b = before.tensor_type, after.tensor_type
    if a.elem_type != b.elem_type or a.HasField("shape") != b.HasField("shape"):
        return False
    if not a.HasField("shape"):
        return True
    if len(a.shape.dim) != len(b.shape.dim):
        return False
    for x, y in zip(a.shape.dim, b.shape.dim):
        if sized_ok and x.HasField("dim_param") and y.HasField("dim_value"):
            continue
        known = x.HasField("dim_value") or x.HasField("dim_param")
        if known and (x.dim_value, x.dim_param) != (y.dim_value, y.dim_param):
            return False
    return True


def _restore_interface(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    """The graph inputs and outputs keep exactly the types the model declared."""
    for a, b in ((before.graph.input, after.graph.input), (before.graph.output, after.graph.output)):
        for x, y in zip(a, b):
            y.type.CopyFrom(x.type)


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
    """Passes to run right before the rule packs: none (the opset is raised on demand)."""
    return []


def post_fusion_passes(level: int) -> list[ir.passes.PassBase]:
    """Passes to run right after the rule packs: sibling projections packed into one MatMul, ORT's
    int4 MatMulNBits as blocked DequantizeLinear + MatMul (passes/matmul_nbits.py), the quantized
    embedding GatherBlockQuantized as Gather + Cast + Mul (passes/gather_block_quantized.py), int8 activation
    Q/DQ as uint8 where the opset is >= 21 (passes/qdq_uint8.py: ORT refuses int8 there)."""
    from onnx_fuse.passes.gather_block_quantized import LowerGatherBlockQuantizedPass
    from onnx_fuse.passes.matmul_nbits import LowerMatMulNBitsPass
    from onnx_fuse.passes.pack_matmul import PackSiblingMatMulsPass
    from onnx_fuse.passes.qdq_uint8 import Int8QdqToUint8Pass

    from onnx_fuse.passes.quantized_attention import QuantizedAttentionNotePass

    return [PackSiblingMatMulsPass(), LowerMatMulNBitsPass("onnx"), LowerGatherBlockQuantizedPass("onnx"),
            Int8QdqToUint8Pass(),
            *((QuantizedAttentionNotePass(),) if level >= 3 else ())] if level >= 2 else []
