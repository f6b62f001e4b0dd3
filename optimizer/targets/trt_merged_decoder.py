"""Paged KV (O4, target trt) for Optimum's merged decoders: the If resolved to its cache branch.

``optimum.onnx.merge_decoders`` puts decoder_model (no past in) and decoder_with_past_model in the
two branches of a main-graph If on a bool input (``use_cache_branch``). The paged-KV lowering
(rule trt-paged-kv) changes the main graph's interface, so it never fires inside a branch, and
such a model kept its contiguous cache.

With a paged pool the If has nothing left to choose: the pools, block_tables and seq_lens replace
the past inputs entirely, and a prefill is the cache branch at past length 0 (PagedAttention takes
the S new tokens and seq_lens = S; docs/ops.md), which is what the no-cache branch computes (both
branches are exports of one model). So the fusion runs first on a copy whose If is replaced by its
cache branch (the condition made a constant, then the cleanup inlines it), and that copy is kept
only when trt-paged-kv fired on it: the model is then paged in every layer and no past input is
left (the rule's all-or-none contract). Otherwise the copy is dropped, the rules run on the
merged model as before (If kept, contiguous cache in its branch), and the report says why the
cache branch was not paged. The cost of the trial, one extra fusion run, is paid only by merged
decoders that cannot be paged. verify checks both branches of the original against the paged
model (the no-cache one at past length 0).

A merged decoder here: a main-graph If whose condition is a bool graph input nothing else reads,
one branch reading float graph inputs of rank 4 (the past) that the other branch does not read.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import onnx_ir as ir

from onnx_fuse.targets.onnx import _adopt

PAGED_RULE = "trt-paged-kv"


@dataclasses.dataclass
class CacheBranch:
    node: ir.Node          # the If
    condition: ir.Value    # its bool graph input
    take: bool             # the condition's value that selects the branch reading the past
    pasts: list[ir.Value]  # the past graph inputs that branch reads


def _outer_reads(branch: ir.Graph) -> set[int]:
    """ids of values defined outside ``branch`` that a node of it (or of a nested body) reads."""
    inside = {id(v) for v in (*branch.inputs, *branch.initializers.values())}
    reads: set[int] = set()
    for node in ir.traversal.RecursiveGraphIterator(branch):
        inside.update(id(o) for o in node.outputs)
        reads.update(id(v) for v in node.inputs if v is not None)
    return reads - inside


def _is_past(v: ir.Value) -> bool:
    return (v.dtype is not None and v.dtype.is_floating_point() and v.shape is not None
            and len(v.shape) == 4)


def find_cache_branch(model: ir.Model) -> CacheBranch | None:
    """The merged decoder's If and the branch that reads the past (module docstring), or None."""
    graph = model.graph
    inputs = {id(v) for v in graph.inputs}
    found = None
    for node in graph:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        cond = node.inputs[0]
        if (cond is None or id(cond) not in inputs or cond.dtype != ir.DataType.BOOL
                or len(cond.uses()) != 1):
            continue
        then_reads = _outer_reads(node.attributes["then_branch"].as_graph())
        else_reads = _outer_reads(node.attributes["else_branch"].as_graph())
        for take, reads, other in ((True, then_reads, else_reads), (False, else_reads, then_reads)):
            pasts = [v for v in graph.inputs if id(v) in reads and _is_past(v)]
            if pasts and not any(id(v) in other for v in pasts):
                if found is not None:
                    return None   # two such Ifs: not the merged decoder's one choice
                found = CacheBranch(node, cond, take, pasts)
    return found


def resolved_copy(model: ir.Model, cb: CacheBranch) -> ir.Model:
    """A copy of ``model`` with the If replaced by its cache branch and the condition input
    gone (cleanup folds, inlines and removes the Identity glue, as at O1; shape inference runs
    again on the main graph). Shares the weights."""
    from onnx_fuse.levels import cleanup_passes
    from onnx_fuse.passes._infra import run_to_fixed_point
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    index = [i for i, n in enumerate(model.graph) if n is cb.node][0]
    trial = model.clone()
    graph = trial.graph
    node = graph.node(index)
    cond = node.inputs[0]
    const = ir.Value(name=f"{cond.name}__resolved", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]),
                     const_value=ir.tensor(np.array(cb.take)))
    graph.register_initializer(const)
    node.replace_input_with(0, const)
    graph.inputs.remove(cond)
    # the branch's values were inferred in the If's scope: infer them again in the main graph,
    # as the shape-refresh stage does before the rules (the head views' dims come from there)
    run_to_fixed_point((ShapeInferencePass(), *cleanup_passes()), trial)
    return trial


def fuse_merged_decoder(fusion, model: ir.Model) -> ir.passes.PassResult | None:
    """The fusion pass ``fusion`` (OpsetOnDemandRewritePass, whose rule set holds trt-paged-kv)
    on a merged decoder: the trial on the resolved copy, kept when paged, else the rules on the
    model as it is with the cache branch's refusal in the report (module docstring). None: not a
    merged decoder (the caller runs the rules as usual)."""
    cb = find_cache_branch(model)
    if cb is None:
        return None
    before = collections.Counter(fusion.stats)
    try:
        trial = resolved_copy(model, cb)
    except Exception as exc:  # noqa: BLE001 -- the trial is an option; the model runs as it is
        why = f"its If could not be inlined ({(str(exc).splitlines() or [type(exc).__name__])[0][:200]})"
    else:
        fusion.fuse(trial)
        if fusion.stats[PAGED_RULE] > before[PAGED_RULE]:
            _adopt(model, trial)
            note = (f"merged decoder: the If on {cb.condition.name!r} resolved to its cache branch (paged KV "
                    "replaces the past inputs; a prefill is that branch at past length 0)")
            fusion.stats_reason = "; ".join(x for x in (note, fusion.stats_reason) if x)
            return ir.passes.PassResult(model, True)
        # the rule's refusal, or a plugin op the pipeline keeps off float32 (the pass's plugin_notes)
        why = next((u.split(_REFUSED, 1)[1] for u in fusion.unsettled if u.startswith(PAGED_RULE + _REFUSED)),
                   next((n for n in getattr(fusion, "plugin_notes", ()) if "PagedAttention" in n),
                        "the rule did not fire"))
        fusion.stats.clear()
        fusion.stats.update(before)
    result = fusion.fuse(model)
    # the merged model's own refusal (no AttentionKV in the main graph) would mislead: say the branch's
    mine = f"{PAGED_RULE}{_REFUSED}merged decoder, If on {cb.condition.name!r} kept: in its cache branch, {why}"
    idle = next((u for u in fusion.unsettled if u.startswith(PAGED_RULE + _REFUSED)), None)
    reason = fusion.stats_reason or ""
    fusion.stats_reason = (reason.replace(idle, mine) if idle and idle in reason
                           else "; ".join(x for x in (reason, mine) if x))
    return result


_REFUSED = ": not rewritten: "
