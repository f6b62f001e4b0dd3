"""Layout chains: a Transpose sunk into the next Transpose, a Reshape of a Reshape read from its source.

Cases handled (each counted in ``stats``):
- ``transpose-sunk``: Transposes by p1 -> ops that do not care about layout -> Transposes by p2
  become the ops on the first Transposes' inputs -> Transposes by p1[p2] (passes/_transpose_region.py
  collects the region: elementwise ops, last-axis norms whose axes p1 keeps, Concat / Softmax / Split
  with their axis moved, projections by a 2-D weight, Expands whose target p1 keeps, constants
  permuted, Shape reads picked by p1); identity-elimination then drops an
  identity permutation, so an inverse pair cancels. Done only when fewer Transposes are left.
- ``reshape-of-reshape``: Reshape(Reshape(x, s1), s2) reads x directly when s2 does not copy (0) a dim
  of the middle value that x does not have at the same axis; identity-elimination then drops a
  Reshape to x's own shape, so a head split undone by its merge cancels.
- ``cast-between-views``: Reshape(Cast(view(x)), s2) as Cast(Reshape(x, s2)) where reshape-of-reshape
  would merge the views without the Cast (passes/_cast_between_views.py: a float16 export's float32
  island that starts between a head view and its merge).

- ``gemm-view``: Reshape(Gemm(Reshape(t, [-1, K])), t's leading dims + [N]) as MatMul (+ Add) on t,
  where a Transpose reads or feeds the views (passes/_gemm_view.py: torch MHA's out-projection), so
  the projection joins a transpose-sunk region, or where the views only drop and restore size-1 axes
  (the probe query's [B, 1, C] viewed [B, C]).
- ``picks-through-transpose`` / ``picks-as-split``: constant Gathers of a Transpose read its input
  (the Transposes after them take the perm), and constant Gathers of a Reshape splitting the last
  axis into [G, C] are one Split of it (passes/_packed_picks.py: torch MHA's packed q / k / v).
- ``view-chain``: Reshape / Unsqueeze / Squeeze / Flatten views ending in a Reshape, Squeeze or
  Unsqueeze that provably gives the chain's start its own dims read the start (passes/_view_chain.py:
  torch MHA's merged key padding mask viewed back per head; one-head attention's MultiHeadAttention
  output viewed [N, 1, S, D] and squeezed back).
- ``view-factor``: Reshape(Mul(Reshape(x [B,S,N], [B,S,H,D]), f [..,1,1]), x's dims) is
  Mul(x, Squeeze(f, [-1])) (passes/_view_factor.py: Ministral 3's per-position query factor).

- ``layout-chain``: a chain of Reshapes, Flattens (a Reshape to [prod(dims[:axis]), prod(dims[axis:])])
  and Transposes from known (int or symbolic) dims as at most Reshape, Transpose, Reshape on x's
  own dims where it moves whole axes; a symbolic dim is split only into exact factors (3*n as n and
  3); a target with two symbolic entries no 0 copies is the chain's own computed last target, or
  Flatten + a Reshape copying the merged leading dims (LongT5's [B*N, H, L, D] block views).

A Reshape chain's values must have that one reader and must not be a graph output: a second reader
would need the old layout, so it blocks the rewrite (a transposed region's readers are its own);
Shape reads beside it keep the nodes up to the value they read (their cost counted). Runs in the
cleanup after the rules (levels.py): the lowerings' layout glue meets the exporter's there, once the
cleanup has dropped the shape reads the rules left beside it (LayoutLM's TorchScript export at
trt-O4: 8 Transposes, and the Reshapes around them, cancel in pairs).

Modules: _transpose_sink.py (with _transpose_region.py), _reshape_of_reshape.py, _cast_between_views.py,
_static_chain.py (with _chain_reads.py, _chain_atoms.py), _attention_3d.py; _new_values.py names what
they add.
"""


from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes import _attention_3d
from onnx_fuse.passes._cast_between_views import cast_between_views
from onnx_fuse.passes._chain_reads import LAYOUT_OPS
from onnx_fuse.passes._gemm_view import gemm_view
from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes._packed_picks import picks_as_split, picks_through_transpose
from onnx_fuse.passes._reshape_of_reshape import reshape_of_reshape
from onnx_fuse.passes._static_chain import fold_static_chain
from onnx_fuse.passes._transpose_sink import sink_transpose
from onnx_fuse.passes._view_chain import view_chain
from onnx_fuse.passes._view_factor import view_factor

# the most axes a Transpose of the folded chain may have at trt (TensorRT's dims hold 8); ONNX and
# ONNX Runtime take any rank, so other targets fold without a cap (Hiera's unroll: one Transpose of
# 10 axes for three rounds of 6, half the time in ORT at batch 4, docs/holdout.md)
TRT_MAX_RANK = 8


class FoldLayoutChainsPass(FusePass):
    """Transposes sunk into the next Transpose, Reshapes of Reshapes read from the source (module docstring)."""

    name = "fold-layout-chains"

    def __init__(self, max_rank: int | None = TRT_MAX_RANK, attention_3d: bool = False) -> None:
        super().__init__()
        self.max_rank = max_rank  # None: any rank
        self.attention_3d = attention_3d  # Attention-23 read 3-D where that saves Transposes

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        graph = model.graph  # permuted constants become initializers: main graph only
        opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
        if self.attention_3d:
            for node in list(graph):
                plan = _attention_3d.candidate(node, opset)
                if plan is not None and plan[0]:
                    _attention_3d.to_3d(graph, node, plan[1])
                    self.stats["attention-3d"] += 1
                    modified = True
        for node in list(graph):
            if node.graph is not graph:  # removed by an earlier rewrite of this sweep
                continue
            if is_default_op(node, *LAYOUT_OPS) and fold_static_chain(graph, node, self.max_rank):
                self.stats["layout-chain"] += 1
                modified = True
            elif is_default_op(node, "Transpose"):
                if sink_transpose(graph, node, opset):
                    self.stats["transpose-sunk"] += 1
                    modified = True
                elif picks_through_transpose(graph, node):
                    self.stats["picks-through-transpose"] += 1
                    modified = True
            elif is_default_op(node, "Reshape"):
                if gemm_view(graph, node):
                    self.stats["gemm-view"] += 1
                    modified = True
                elif picks_as_split(graph, node, opset):
                    self.stats["picks-as-split"] += 1
                    modified = True
                elif reshape_of_reshape(node):
                    self.stats["reshape-of-reshape"] += 1
                    modified = True
                elif cast_between_views(graph, node):
                    self.stats["cast-between-views"] += 1
                    modified = True
                elif view_chain(node):
                    self.stats["view-chain"] += 1
                    modified = True
                elif view_factor(graph, node, opset):
                    self.stats["view-factor"] += 1
                    modified = True
            elif is_default_op(node, "Squeeze", "Unsqueeze") and view_chain(node):
                self.stats["view-chain"] += 1
                modified = True
        return ir.passes.PassResult(model, modified=modified)
