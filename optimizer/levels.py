"""Optimization levels O0..O4 as ordered pass lists, in one place.

O0  load and save only (still validates and re-serializes).
O1  cleanup: shape inference, constant folding, inlining of If with a constant condition,
    sequences of a SequenceConstruct as tensor ops (sequence-ops: torch.hstack's SequenceMap /
    SequenceAt, ConcatFromSequence), identity/no-op removal, slice writes of a tensor's own values
    (self-write-elimination: M-RoPE's text-only tables), CSE, dead code, to a fixed point.
    Folding runs before identity removal so a Reshape whose shape became constant can be recognised
    as a no-op; If inlining runs right
    after folding made a condition constant (ORT would otherwise inline the branch on load, after
    our folding, and trip over what it exposes); CSE runs after both so that folded twins
    collapse; DCE runs last to drop what the others orphaned.
O2  O1 + rule packs of level 2 (normalizations, GELU family, Gemm/bias forms, RoPE).
O3  O2 + rule packs of level 3 (attention), after einsum-to-matmul (batched-matmul Einsums as
    Transpose -> MatMul -> Transpose: attention written with einsum) and merge-shared-probabilities
    (softmax probabilities read by several P.V MatMuls become one MatMul on the values side by
    side, so the attention rules see one reader: DiffLlama's two calls over halves of V), and
    qkv-columns (a fused q / k / v projection whose heads interleave q, k and v gets its columns
    permuted, the per-head picks one Split: GPT-NeoX, BLOOM, Falcon, CodeGen). All
    rules of the chosen levels run in ONE rewrite
    pass: by stage (fuse, then lower, then simplify), and inside a stage by priority, highest
    first, which puts attention recognition (100) ahead of most norm rules (layer-norm 60). The
    stage repeats rounds until nothing fires, so an attention pattern written against ops another
    rule fuses (RotaryEmbedding, a norm) matches in the round after that rule fired.
O4  O3 + level-4 rules: target-specific rewrites (paged KV, plugin ops, precision conversion).
Cleanup runs again after the rules, since rewrites leave dead nodes and foldable constants behind;
there it also folds layout chains (fold-layout-chains, before identity removal, which then drops
the identity Transposes and no-op Reshapes it leaves): Transpose pairs through elementwise ops and
Reshapes of Reshapes, the glue between an exporter's head split and a lowering's; and cast-of-select
takes the attention rewrite's Cast of a constant-select mask to q's dtype (passes/cast_of_select.py).
Precision (``precision="fp16"|"bf16"``, any level) runs last, after the final cleanup: rules match
the float32 patterns exporters write, and folding must not compute constants in 16 bits. It leaves
nothing dead behind, so no cleanup follows it. Only ``kv_cache_dtype="fp8"`` (O4, trt) comes after
it: the fp8 pools' float32 scale inputs must not be lowered with the rest.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from collections.abc import Iterable, Sequence

from typing import TYPE_CHECKING

from onnx_fuse.errors import UserError

if TYPE_CHECKING:  # kept light: the CLI imports TARGETS to build its --help
    import onnx_ir as ir

LEVELS = (0, 1, 2, 3, 4)
#: The one list of targets (CLI choices, rule files, API checks all read it).
TARGETS = ("ort", "onnx", "trt")
DEFAULT_LEVEL = 3
DEFAULT_TARGET = "ort"


@dataclasses.dataclass(frozen=True)
class Stage:
    """A named group of passes run together to a fixed point."""

    name: str
    passes: tuple[ir.passes.PassBase, ...]
    fixed_point: bool = True


def cleanup_passes() -> tuple[ir.passes.PassBase, ...]:
    from onnx_fuse.passes.constant_folding import ConstantFoldingPass
    from onnx_fuse.passes.constant_if import InlineConstantIfPass
    from onnx_fuse.passes.covering_writes import CoveringWritesPass
    from onnx_fuse.passes.cse import CommonSubexpressionEliminationPass
    from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
    from onnx_fuse.passes.identity_elimination import IdentityEliminationPass
    from onnx_fuse.passes.reduce_keepdims import ReduceKeepdimsPass
    from onnx_fuse.passes.self_writes import SelfWriteEliminationPass
    from onnx_fuse.passes.sequence_ops import SequenceOpsPass
    from onnx_fuse.passes.uniform_sections import UniformSectionsPass

    # sequence-ops after If inlining: a SequenceMap's copied bodies (atleast_1d's rank If) fold and
    # inline in the next round; self-write-elimination (a ScatterND / ScatterElements putting a tensor's
    # own values back: M-RoPE's slice writes) before CSE / DCE, which drop what it orphans; covering-writes
    # (ScatterND writes that fill a buffer's first axis in order: the Concat of their updates) after it;
    # uniform-sections (XD-RoPE's per-section stream Gathers of one Expand'ed stream) beside them;
    # reduce-keepdims (a keepdims=0 reduction viewed back to its kept-axes shape: torch's var) before CSE,
    # which merges its result with a twin that kept the axes itself
    return (
        ConstantFoldingPass(),
        InlineConstantIfPass(),
        SequenceOpsPass(),
        IdentityEliminationPass(),
        SelfWriteEliminationPass(),
        UniformSectionsPass(),
        CoveringWritesPass(),
        ReduceKeepdimsPass(),
        CommonSubexpressionEliminationPass(),
        DeadCodeEliminationPass(),
    )


def check_level_target(level: int, target: str) -> None:
    if level not in LEVELS:
        raise UserError(f"unknown optimization level {level!r}; choose one of 0..4")
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")


def as_list(value, what: str) -> list:
    """``rules=``/``disable=`` as a list: one str (or path) is a one-element list, not its
    characters; anything but strings and paths is refused."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise UserError(f"{what} must be a name or a list of names, not {type(value).__name__}")
    items = list(value)
    bad = [v for v in items if not isinstance(v, (str, os.PathLike))]
    if bad:
        raise UserError(f"{what} must hold names (str), got {type(bad[0]).__name__} {bad[0]!r}")
    return items


def build_stages(level: int, target: str, *, rule_files: Sequence[str] = (),
                 disable: Sequence[str] = (), precision: str | None = None,
                 kv_cache_dtype: str | None = None, float32_plugins: bool = False,
                 opset: int | None = None) -> list[Stage]:
    """The ordered stages for ``level`` and ``target``; user rules join the built-in packs.

    Plugin ops (-O4 trt) are made on float32 only where ``precision`` lowers them afterwards or
    ``float32_plugins`` asks for them (the NumPy reference runs them, TensorRT does not build
    them): otherwise a float32 match keeps the target's own ops (docs/tensorrt.md).

    ``opset``: the highest default-domain opset the fusion may raise the model to (default 23, the
    fusion opset); below 23 attention takes the plain-ops lowering (rules/attention/lower_plain.yaml).

    Every ``disable`` name must be a pass that runs at ``level`` or a rule (built-in or from
    ``rule_files``, for any target); anything else is a UserError naming it."""
    check_level_target(level, target)
    rule_files = as_list(rule_files, "rules")
    disable = [str(d) for d in as_list(disable, "disable")]
    from onnx_fuse.passes.precision import precision_pass

    if precision not in (None, "fp16", "bf16"):
        raise UserError(f"unknown precision {precision!r}; choose fp16 or bf16")
    final = [Stage("precision", tuple(precision_pass(precision)), fixed_point=False)]
    if kv_cache_dtype is not None:
        # After precision: it would lower the fp8 pools' float32 scale inputs with the op's T.
        from onnx_fuse.passes.kv_cache_fp8 import KV_CACHE_DTYPES, KvCacheFp8Pass

        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise UserError(f"unknown KV cache dtype {kv_cache_dtype!r}; choose fp8")
        if level < 4 or target != "trt":
            raise UserError(f"--kv-cache-dtype {kv_cache_dtype} converts the paged KV pools, which "
                            "only -O4 --target trt emits")
        kept = precision is None and not float32_plugins
        final.append(Stage("kv-cache-dtype", (KvCacheFp8Pass(float32_kept=kept),), fixed_point=False))
    if level == 0:
        return [s for s in final if s.passes]
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    def keep(passes) -> tuple[ir.passes.PassBase, ...]:
        return tuple(p for p in passes if getattr(p, "display_name", None) not in disable)

    # a declared symbol a Reshape's element count pins (a tracer's constant length: TorchScript's torch
    # MHA key / value views) takes its value in the inner shapes (passes/traced_lengths.py)
    from onnx_fuse.passes.traced_lengths import TracedLengthsPass

    pass_names = {p.display_name for p in (*cleanup_passes(), ShapeInferencePass(), TracedLengthsPass())}
    pass_names |= {"precision"}
    stages = [Stage("shape-inference", keep((ShapeInferencePass(), TracedLengthsPass())), fixed_point=False),
              Stage("cleanup", keep(cleanup_passes()))]
    if level >= 2:
        from onnx_fuse.rewrite import load_rule_set
        from onnx_fuse.targets.onnx import FUSION_OPSET, OpsetOnDemandRewritePass

        # The target prepares the model for its rules and fixes up what they emitted afterwards.
        # The rules themselves run through OpsetOnDemandRewritePass: a model is raised to opset 23
        # only when a rule that needs it fires (docs/rules.md, "Targets, levels, opsets").
        target_module = importlib.import_module(f"onnx_fuse.targets.{target}")
        pre = tuple(target_module.pre_fusion_passes(level))
        post = tuple(target_module.post_fusion_passes(level))
        for p in post:   # a post-fusion pass that converts the model keeps under the ceiling too
            if hasattr(p, "max_opset"):
                p.max_opset = min(opset, FUSION_OPSET) if opset else FUSION_OPSET
        # O3: batched-matmul Einsums become MatMuls (Funnel's attention), and probabilities read by
        # several P.V MatMuls (DiffLlama) get one reader, before the attention rules
        from onnx_fuse.passes.einsum_matmul import EinsumToMatMulPass
        from onnx_fuse.passes.shared_probabilities import MergeSharedProbabilitiesPass

        # and tf2onnx's einsum decomposition loses its size-1 axes (passes/size_one_axes.py)
        from onnx_fuse.passes.size_one_axes import SizeOneAxesPass

        # and a fused q / k / v projection whose heads interleave q, k and v (GPT-NeoX, BLOOM, Falcon,
        # CodeGen) gets its weight's columns permuted so that the picks are one Split, the form the
        # attention rules read (passes/qkv_columns.py)
        from onnx_fuse.passes.qkv_columns import QkvColumnsPass

        # (as one MatMul per piece where pack-matmul packs what the rules leave: ort's packed Attention takes
        # the projections whole; trt keeps one MatMul and the Split)
        attention_prepare = (EinsumToMatMulPass(), MergeSharedProbabilitiesPass(), SizeOneAxesPass(),
                             QkvColumnsPass(as_matmuls=target != "trt")) if level >= 3 else ()
        # O2: inference BatchNorms become the weights of the Conv / Gemm / MatMul before them
        from onnx_fuse.passes.batch_norm_fold import FoldBatchNormPass

        # and a constant zero Pad before a Conv becomes its pads (TorchScript's F.pad; passes/pad_conv_fold.py)
        from onnx_fuse.passes.pad_conv_fold import FoldPadIntoConvPass

        # then Conv branches of one input summed with an identity BN as one Conv (RepVGG blocks; passes/conv_branches.py)
        from onnx_fuse.passes.conv_branches import MergeConvBranchesPass

        bn_fold = (FoldPadIntoConvPass(), FoldBatchNormPass(), MergeConvBranchesPass())
        # O2: a projection with unmerged adapter branches (LoRA, DoRA, LoKr) of one activation as one
        # MatMul, so the rules see the plain projection (passes/linear_branches.py)
        from onnx_fuse.passes.linear_branches import MergeLinearBranchesPass

        # and a per-channel constant scale on a projection's head view (TimesFM's per-dim query scale) too,
        # which attention-q-scale cannot take (one number only; passes/head_view_scales.py)
        from onnx_fuse.passes.head_view_scales import FoldHeadViewScalesPass

        linear_branches = (FoldHeadViewScalesPass(), MergeLinearBranchesPass())
        from onnx_fuse.passes.layout_chains import TRT_MAX_RANK, FoldLayoutChainsPass

        # after the rules too: a Cast of a select between constants (the attention rewrite's Cast of a float32
        # mask to q's float16) as a select of the cast constants; before them it would rewrite mask Casts they read
        from onnx_fuse.passes.cast_of_select import CastOfSelectPass

        # onnx / ort write Attention-23 4-D; where the export's layout is [B, S, H*D] its 3-D form
        # saves the Transposes around it (trt lowers to 3-D itself)
        layout_chains = FoldLayoutChainsPass(max_rank=TRT_MAX_RANK if target == "trt" else None,
                                             attention_3d=target != "trt")
        # O2: ORT's FusedMatMul and default-domain SimplifiedLayerNormalization (a graph ORT optimized
        # offline) back into the MatMul and scale / the RMSNorm the rules match and onnx / trt run
        from onnx_fuse.passes.fused_matmul import ExpandFusedMatMulPass
        from onnx_fuse.passes.ort_contrib import ExpandSimplifiedLayerNormPass

        from onnx_fuse.passes.ort_contrib import ExpandOrtFusionsPass

        # onnx / trt cannot run ORT's norm and GELU fusions either: back to standard ops
        from onnx_fuse.passes.ort_contrib import ShapeSplitToGatherPass

        # ORT's Split of rotate_half's two Slices (GatherSliceToSplitFusion) back into the Slices
        from onnx_fuse.passes.split_rotate_half import SplitRotateHalfPass
        # pairs picked from x viewed as [..., D/2, 2] (Flux's rotate_every_two) as Slice(x, k::2)
        from onnx_fuse.passes.unbind_pairs import UnbindPairsPass

        # keras-hub's rotate_half, stack([-x2, x1], axis=-2) viewed as x, as the Concat split-rotate-half reads
        from onnx_fuse.passes.stack_merge import StackMergePass

        # the builder's symbolic KV head size, fixed by its GroupQueryAttention (onnx / trt recognize it)
        from onnx_fuse.passes.contrib_head_size import BindContribHeadSizePass

        # ORT's inserted float32 Casts of a float16 value and of its view as one Cast, viewed
        from onnx_fuse.passes.shared_cast_views import SharedCastViewsPass
        # ...and K^T / V of a float32-q attention cast up after their views: the Cast above the views
        from onnx_fuse.passes.cast_up_views import CastUpViewsPass

        contrib = (ExpandFusedMatMulPass(), ExpandSimplifiedLayerNormPass(), ShapeSplitToGatherPass(),
                   StackMergePass(), SharedCastViewsPass(), CastUpViewsPass(), SplitRotateHalfPass(),
                   *((ExpandOrtFusionsPass(), BindContribHeadSizePass()) if target != "ort" else ()))
        # after the shape refresh: it reads the view's dims, which inference may only give once
        # folding made the shape arithmetic before it constant (Flux's TorchScript export)
        pair_picks = (UnbindPairsPass(),)
        from onnx_fuse.passes.shape_cse import ScalarTwinReadsPass

        scalar_twins = ScalarTwinReadsPass()
        pass_names |= {p.display_name for p in (*pre, *post, *attention_prepare, *bn_fold, *linear_branches,
                                                layout_chains, CastOfSelectPass(), *contrib,
                                                *pair_picks, scalar_twins) if hasattr(p, "display_name")}
        # A pass of this target at a higher level (trt-paged-kv at O4) is known, merely idle here.
        # (so are the O3 attention-prepare passes at O2)
        idle = ({p.display_name for p in (*target_module.pre_fusion_passes(max(LEVELS)),
                                         *target_module.post_fusion_passes(max(LEVELS)))
                if hasattr(p, "display_name")}
                | {EinsumToMatMulPass.name, MergeSharedProbabilitiesPass.name, SizeOneAxesPass.name,
                   QkvColumnsPass.name}) - pass_names
        # Names that are not passes must be rules, of any target or level (a script that
        # disables gelu-ort keeps working with --target onnx); anything else is a typo.
        rule_set = load_rule_set(user_files=rule_files)
        for name in (d for d in disable if d not in pass_names | idle):
            if name not in rule_set:
                close = difflib.get_close_matches(name, [*rule_set.names(), *pass_names], n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else "; see `onnx-fuse rules list`"
                raise UserError(f"--disable {name!r}: no rule or pass of that name{hint}")
            rule_set.remove(name)
        rule_set = rule_set.select(target=target, max_level=level)
        stages.append(Stage("expand-contrib", keep(contrib), fixed_point=False))
        # Folding turned shape arithmetic into constants: infer again so the rules see the dims
        # it proves (TorchScript rotate-half Slices: head counts, passes/shape_inference.py), and
        # fold what those dims make constant (GPT-NeoX's rotate_half(x[..., :rd]) slices at
        # Shape(x_rot)[-1] // 2), to a fixed point
        # (traced-lengths again: a view's input is often sized only once folding made the views before it constant)
        stages.append(Stage("shape-refresh", keep((ShapeInferencePass(), TracedLengthsPass(), *cleanup_passes()))))
        stages.append(Stage("pair-picks", keep(pair_picks), fixed_point=False))
        # after the refresh: the BN's channel is followed back through Reshapes by their inferred dims
        stages.append(Stage("batch-norm-fold", keep(bn_fold), fixed_point=False))
        stages.append(Stage("linear-branches", keep(linear_branches), fixed_point=False))
        if attention_prepare:
            stages.append(Stage("attention-prepare", keep(attention_prepare), fixed_point=False))
        stages.append(Stage("target-prepare", keep(pre), fixed_point=False))
        fusion = OpsetOnDemandRewritePass(rule_set, float32_plugins=float32_plugins or precision is not None,
                                          fusion_opset=min(opset, FUSION_OPSET) if opset else FUSION_OPSET)
        stages.append(Stage("fusion", (fusion,), fixed_point=False))
        stages.append(Stage("target-finish", keep(post), fixed_point=False))
        # after the rules the norms are fused, so a per-column scale of a projection's input (IA3's on the
        # feed-forward) joins its weight too; before them it may be a norm's gamma (passes/linear_branches.py)
        stages.append(Stage("input-scales", keep((MergeLinearBranchesPass(pre_scales=True),)), fixed_point=False))
        # after the rules only: the lowerings' layout glue cancels against the exporter's once the
        # cleanup has dropped the shape reads beside it; before the rules it would rewrite the
        # exporters' head splits and merges that the attention rules match
        cleanup = cleanup_passes()
        stages.append(Stage("cleanup", keep((*cleanup[:2], layout_chains, CastOfSelectPass(), *cleanup[2:]))))
        # once, after it: a scalar Gather(Shape(x), j) as Squeeze of its [1] twin where the whole Shape(x) then
        # dies (passes/shape_cse.py; inside the fixed point a later round brought the whole Shape back)
        stages.append(Stage("scalar-twins", keep((scalar_twins,)), fixed_point=False))
    elif unknown := [d for d in disable if d not in pass_names]:
        raise UserError(f"--disable {unknown[0]!r}: no pass of that name runs at O{level}")
    stages += [Stage(s.name, keep(s.passes), s.fixed_point) for s in final]
    return [s for s in stages if s.passes]
