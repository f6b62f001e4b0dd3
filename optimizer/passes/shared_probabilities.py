"""Attention probabilities read by several P.V MatMuls become one MatMul on the values side by side,
then a Split: softmax(s) @ [v1 | v2] = [softmax(s) @ v1 | softmax(s) @ v2].

Differential attention (DiffLlama) makes two attention calls with the same q and k over the two
halves of V; the exporter's CSE merges their score and softmax nodes, so one probability tensor
feeds two MatMuls and no attention rule can take it (its intermediates would escape). After this
pass the softmax has one reader, which the attention rules fuse as attention with a wider V (v's
head size the sum); the Split gives each caller its part. Exact: each output column is the same
dot product as before. At trt -O4, where the FusedAttention plugin needs one head size, the rule
attention-split-value-heads (rules/attention/split_value.yaml) makes two attentions over V's
halves again, as fused ops.

Merged only: probabilities that are a Softmax output (through the sdpa NaN guard
Where(IsNaN(p), 0, p) and a Cast, as the attention fragment allows), read as the left operand of
two or more MatMuls whose right operands are not constants, have one dtype and rank and the same
dims but the last, which is static. The MatMul outputs must not be graph outputs. Main graph and
subgraphs alike. Runs at O3, before the attention rules.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._dim_products import same_dim
from onnx_fuse.passes._infra import FusePass, is_default_op
from onnx_fuse.passes._new_values import fresh_name, graph_names
from onnx_fuse.passes.constant_folding import constant_tensor


def _from_softmax(value: ir.Value) -> bool:
    """The value is softmax probabilities, perhaps through the NaN guard's Where and a Cast."""
    for _ in range(3):
        node = value.producer()
        if is_default_op(node, "Softmax"):
            return True
        if is_default_op(node, "Cast"):
            value = node.inputs[0]
        elif is_default_op(node, "Where") and len(node.inputs) == 3:
            value = node.inputs[2]  # where(isnan(p), 0, p): the kept branch
        else:
            return False
    return False


def _rhs_key(node: ir.Node):
    """(dtype, rank) of a P.V MatMul's values when it can join a merge, else None."""
    if not is_default_op(node, "MatMul") or len(node.inputs) != 2 or node.outputs[0].is_graph_output():
        return None
    v = node.inputs[1]
    if v is None or constant_tensor(v) is not None or v.shape is None or v.type is None:
        return None
    if len(v.shape) < 2 or not isinstance(v.shape[-1], int):
        return None
    return v.type.dtype, len(v.shape)


class MergeSharedProbabilitiesPass(FusePass):
    """One MatMul on concatenated values for probabilities read by several MatMuls (module docstring)."""

    name = "merge-shared-probabilities"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        if model.opset_imports.get("", 0) < 13:  # Split's sizes as an input
            return ir.passes.PassResult(model, modified=False)
        for graph in model.graphs():
            shared = [n.outputs[0] for n in graph if is_default_op(n, "Softmax")]
            probs = {id(v): v for p in shared for v in self._probabilities(p)}
            for p in probs.values():
                modified |= self._merge(graph, p)
        return ir.passes.PassResult(model, modified=modified)

    @staticmethod
    def _probabilities(p: ir.Value) -> list[ir.Value]:
        """p and the guarded / cast values below it that MatMuls may read."""
        out, todo = [], [p]
        while todo:
            v = todo.pop()
            out.append(v)
            for use in v.uses():
                n = use.node
                if (is_default_op(n, "Cast") and use.idx == 0) or (is_default_op(n, "Where") and use.idx == 2):
                    todo.append(n.outputs[0])
        return out

    def _merge(self, graph: ir.Graph, p: ir.Value) -> bool:
        if not _from_softmax(p):
            return False
        groups: dict[tuple, list[ir.Node]] = {}
        for use in p.uses():
            if use.idx == 0 and use.node.graph is graph and (key := _rhs_key(use.node)) is not None:
                groups.setdefault(key, []).append(use.node)
        modified = False
        for members in groups.values():
            ref = members[0].inputs[1].shape
            members = [m for m in members if all(same_dim(a, b) for a, b in
                                                 zip(list(m.inputs[1].shape)[:-1], list(ref)[:-1]))]
            if len(members) < 2:
                continue
            order = {n: i for i, n in enumerate(graph)}
            members.sort(key=lambda n: order[n])
            self._rewrite(graph, p, members)
            self.stats["MatMul"] += len(members)
            modified = True
        return modified

    def _rewrite(self, graph: ir.Graph, p: ir.Value, members: list[ir.Node]) -> None:
        values = [m.inputs[1] for m in members]
        widths = [int(v.shape[-1]) for v in values]
        dtype = values[0].type.dtype
        stem = members[0].name or members[0].outputs[0].name or "matmul"
        taken = graph_names(graph)

        def wide(shape):
            return None if shape is None else ir.Shape([*list(shape)[:-1], sum(widths)])

        cat = ir.Value(name=fresh_name(f"{stem}_values", taken), type=ir.TensorType(dtype), shape=wide(values[0].shape))
        out = ir.Value(name=fresh_name(f"{stem}_merged", taken), type=ir.TensorType(dtype),
                       shape=wide(members[0].outputs[0].shape))
        sizes = ir.Value(name=fresh_name(f"{stem}_merged_split", taken), type=ir.TensorType(ir.DataType.INT64),
                         shape=ir.Shape([len(widths)]), const_value=ir.tensor(np.array(widths, np.int64)))
        graph.register_initializer(sizes)
        olds = [m.outputs[0] for m in members]
        news = [ir.Value(name=fresh_name(f"{o.name}_merged", taken) if o.name else None, type=o.type, shape=o.shape)
                for o in olds]
        nodes = [ir.Node("", "Concat", values, attributes=[ir.AttrInt64("axis", -1)], outputs=[cat],
                         name=f"{stem}_values"),
                 ir.Node("", "MatMul", [p, cat], outputs=[out], name=f"{stem}_merged"),
                 ir.Node("", "Split", [out, sizes], attributes=[ir.AttrInt64("axis", -1)], outputs=news,
                         name=f"{stem}_merged_split")]
        # every member's values exist before the last member; readers of an earlier member's
        # output may come before it too, so the graph is sorted again afterwards
        graph.insert_before(members[-1], nodes)
        for old, new in zip(olds, news):
            old.replace_all_uses_with(new)
        for m in members:
            graph.remove(m, safe=True)
        graph.sort()
