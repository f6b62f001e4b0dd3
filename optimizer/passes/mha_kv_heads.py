"""MultiHeadAttention reads k / v in heads-first layout [B, N, L, H] instead of merged back to [B, L, N*H].

The ort lowering (rules/attention/lower.yaml, qkv-merge) writes k and v as
``Reshape(Transpose(x, [0, 2, 1, 3]), [0, 0, -1])`` from the canonical [B, N, L, H]. That glue
cancels against an exporter's head split (rules/layout/heads.yaml), but where k and v come in
heads-first on their own (a decoder's cross-attention cache fed as an input, a packed q/k/v split
into heads, Hiera's and SAM's window attention) it stays: a Transpose copy and a Reshape per
tensor. ONNX Runtime's MultiHeadAttention takes key and value as [B, N, L, H] directly (its
cross-attention form, Q_K_V_BSNH_BNSH_BNSH; ORT 1.32 checks key dim 1 == num_heads, key dim 3 ==
the query's head size, value 4-D too), so the glue is dropped there.

Only where both k and v carry the glue (ORT refuses a 4-D key with a 3-D value, and splitting a
3-D value into heads would cost what it saves), without a past (the cache form needs 3-D k / v)
and without a packed bias (ORT adds it to the 3-D form only), a key_padding_mask only as [B, L]
(the form checked in ORT), with the heads axis proven equal to ``num_heads``. A Transpose whose permutation, composed with the merge's, is not the identity
stays as one Transpose to [B, N, L, H]. Not where k and v are both the end of a Reshape / Flatten /
Transpose chain that takes the glue's Transpose into its own (LongT5's block keys: read 3-D they are
[B, N, L, H, D] merged, no Transpose; fold-layout-chains folds them). Exact: the same elements reach
the same kernel.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_fuse.passes._attention_3d import chain_absorbs_transpose, chain_steps
from onnx_fuse.passes._chain_atoms import atoms
from onnx_fuse.passes._chain_reads import LAYOUT_OPS
from onnx_fuse.passes._consts import node_axes
from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op
from onnx_fuse.passes._scoped_names import free_name
from onnx_fuse.passes.constant_folding import constant_tensor

_MERGE = [0, 2, 1, 3]  # [B, N, L, H] <-> [B, L, N, H]


def _glue(value: ir.Value | None, heads: int) -> tuple[ir.Value, list[int]] | None:
    """(x, p) when ``value`` is Reshape(Transpose(x, p)) merging the Transpose output's last two
    axes and Transpose(x, p o merge) is [B, N, L, H] with N == ``heads``; else None."""
    reshape = value.producer() if value is not None else None
    if not is_default_op(reshape, "Reshape") or len(reshape.inputs) != 2:
        return None
    t = reshape.inputs[0]
    transpose = t.producer() if t is not None else None
    if not is_default_op(transpose, "Transpose"):
        return None
    perm = attr_value(transpose, "perm", None)
    x = transpose.inputs[0]
    if perm is None or len(perm) != 4 or x is None or x.shape is None or len(x.shape) != 4:
        return None
    target = constant_tensor(reshape.inputs[1])
    if target is None or not target.dtype.is_integer() or target.size != 3:
        return None
    dims = list(t.shape) if t.shape is not None and len(t.shape) == 4 else [x.shape[p] for p in perm]
    entries = [int(e) for e in target.numpy().reshape(-1)]
    allowzero = attr_value(reshape, "allowzero", 0)
    # axes 0 and 1 kept (copied by 0, or the same int), 2 and 3 merged (-1, or their product)
    for i in (0, 1):
        if not ((entries[i] == 0 and allowzero == 0) or (isinstance(dims[i], int) and entries[i] == dims[i])):
            return None
    if not (entries[2] == -1 or (all(isinstance(d, int) for d in dims[2:]) and entries[2] == dims[2] * dims[3])):
        return None
    bnsh = [int(perm[p]) for p in _MERGE]
    if x.shape[bnsh[1]] != heads:
        return None
    return x, bnsh


def _one_head_source(x: ir.Value, bnsh: list[int], heads: int) -> ir.Value | None:
    """y where ``heads`` is 1 and x (the glue's [B, N, L, H] source read by ``bnsh``) is
    Unsqueeze(y, heads axis) with y's axes in the order B, L, H: the glue's merge is then y."""
    node = x.producer()
    if heads != 1 or not is_default_op(node, "Unsqueeze") or not node.inputs or node.inputs[0] is None:
        return None
    y = node.inputs[0]
    axes = node_axes(node, 4)  # x is 4-D
    if axes != [bnsh[1]] or y.shape is None or len(y.shape) != 3:
        return None
    rest = [bnsh[0], bnsh[2], bnsh[3]]
    return y if rest == sorted(rest) else None


def _merge_is_one_transpose(value: ir.Value, depth: int = 24) -> bool:
    """``value`` (the glue's merged [B, L, N*H]) ends a Reshape / Flatten / Transpose chain, each value
    read once, that moves whole axes of its source (known dims): fold-layout-chains writes it as one
    Transpose of that source, no dearer than the heads-first form's Transpose. fairseq's / torch
    MHA's time-first keys respelled heads-first (heads-split-time-first): [T, B, C] split to
    [T, B, H, D], moved to [B, H, T, D], merged back by the glue: Transpose(x, [1, 0, 2])."""
    chain, node = [], value.producer()
    while is_default_op(node, *LAYOUT_OPS) and len(chain) < depth:
        out = node.outputs[0]
        # beside the next link only Shape reads (the lowering's key length: shape CSE reads it from
        # the inputs before the fold, which runs in the same cleanup to a fixed point)
        if out.is_graph_output() or sum(not is_default_op(u.node, "Shape") for u in out.uses()) != 1:
            return False
        chain.insert(0, node)
        x = node.inputs[0] if node.inputs else None
        node = x.producer() if x is not None else None
    read = chain_steps(chain)
    if read is None:
        return False
    dims, steps = read
    plan = atoms(dims, steps)
    # the atoms, merged where they stay adjacent, are the source's own axes, each an axis of the
    # result: a permutation of them (a 3-D source, so the heads-first form costs at least the split)
    return plan is not None and (1, ()) not in dims and plan[0] == dims and len(plan[2]) == len(dims)


class MhaHeadsFirstKvPass(FusePass):
    """com.microsoft MultiHeadAttention reads k / v as [B, N, L, H] (module docstring)."""

    name = "mha-heads-first-kv"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        if node.op_type != "MultiHeadAttention" or node.domain != "com.microsoft":
            return False
        ins = list(node.inputs)
        heads = attr_value(node, "num_heads", None)
        if heads is None or len(ins) < 3 or ins[0] is None or ins[0].shape is None or len(ins[0].shape) != 3:
            return False
        if (len(ins) > 3 and ins[3] is not None) or any(v is not None for v in ins[6:]):
            return False  # a packed bias, or past / past_sequence_length / cache indirection
        kpm = ins[4] if len(ins) > 4 else None
        if kpm is not None and (kpm.shape is None or len(kpm.shape) != 2):
            return False  # key_padding_mask's other forms (lengths, [3B]...) were not checked heads-first
        k, v = _glue(ins[1], int(heads)), _glue(ins[2], int(heads))
        if k is None or v is None:
            return False
        ys = [_one_head_source(x, perm, int(heads)) for x, perm in (k, v)]
        if ys[0] is not None and ys[1] is not None:
            node.replace_input_with(1, ys[0])
            node.replace_input_with(2, ys[1])
            self.stats["one-head-3d"] += 1
            return True
        if all(chain_absorbs_transpose(x, [perm[p] for p in _MERGE]) for x, perm in (k, v)):
            return False  # the glue folds into their own layout chains: fewer Transposes left 3-D
        if _merge_is_one_transpose(ins[1]) and _merge_is_one_transpose(ins[2]):
            return False  # 3-D they fold to one Transpose each of their sources
        for idx, (x, perm) in ((1, k), (2, v)):
            if perm != [0, 1, 2, 3]:
                shape = ir.Shape([x.shape[p] for p in perm])
                t = ir.node("Transpose", [x], attributes={"perm": perm})
                graph.insert_before(node, t)
                taken = {v.name for v in graph.inputs} | set(graph.initializers) | {o.name for n in graph for o in n.outputs}
                t.outputs[0].name = free_name(f"{ins[idx].name or 'kv'}_heads_first", taken, "_")
                t.outputs[0].dtype, t.outputs[0].shape = x.dtype, shape
                x = t.outputs[0]
            node.replace_input_with(idx, x)
        self.stats["MultiHeadAttention"] += 1
        return True
