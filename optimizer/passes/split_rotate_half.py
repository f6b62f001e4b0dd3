"""rotate_half written with one Split back into the two Slices the exporters write.

``rotate_half(x) = Concat(-x[..., h:], x[..., :h])`` reaches us as two Slices of x. ONNX Runtime's
offline optimizer (GatherSliceToSplitFusion, at EXTENDED; the transformers optimizer and Optimum at
O2+) merges the two Slices into one ``Split(x, [h, h'])`` whose second part is negated and put first
by the Concat. The RoPE rules read the halves as Slices, so a model ORT optimized first lost its
RoPE fusion (hold-out 13: LLaMA and GPT-NeoX after ORT EXTENDED and Optimum -O2 / -O3). The idiom is
recognized on its structure, not on a name: a two-way Split of known part sizes whose first part is
read only by a Concat, whose second part is read only by a Neg that this Concat reads, as
``Concat(Neg(second), first)`` on the Split's axis. Other two-way Splits (q / k / v, gate / up, a
sin | cos table) are left as they are. Exact: the Slices select the same elements.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_fuse.passes._infra import FusePass, attr_value, is_default_op
from onnx_fuse.passes.ort_contrib import split_sizes


def _only_reader(v: ir.Value) -> ir.Node | None:
    uses = list(v.uses())
    return uses[0].node if len(uses) == 1 and not v.is_graph_output() else None


class SplitRotateHalfPass(FusePass):
    """The rotate-half Split as two Slices (module docstring)."""

    name = "split-rotate-half"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if is_default_op(node, "Split") and len(node.outputs) == 2 and node.inputs:
                    modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified=modified)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        x = node.inputs[0]
        first, second = node.outputs
        sizes = split_sizes(node)
        rank = x.shape.rank() if x is not None and x.shape is not None else None
        if sizes is None or len(sizes) != 2 or min(sizes) <= 0 or rank is None:
            return False
        axis = int(attr_value(node, "axis", 0)) % rank
        neg, cat = _only_reader(second), _only_reader(first)
        if neg is None or cat is None or not is_default_op(neg, "Neg") or not is_default_op(cat, "Concat"):
            return False
        if _only_reader(neg.outputs[0]) is not cat or list(cat.inputs) != [neg.outputs[0], first]:
            return False
        if int(attr_value(cat, "axis", 0)) % rank != axis:
            return False
        stem = node.name or first.name or "split_rotate_half"
        bounds = ((0, sizes[0]), (sizes[0], sizes[0] + sizes[1]))
        new_nodes, parts = [], []
        for (start, end), part, tag in zip(bounds, (first, second), ("lo", "hi")):
            consts = []
            for what, value in (("starts", start), ("ends", end), ("axes", axis)):
                c = ir.Value(name=f"{stem}_{tag}_{what}", const_value=ir.tensor(np.array([value], np.int64)))
                graph.register_initializer(c)
                consts.append(c)
            y = ir.Value(name=f"{stem}_{tag}", type=part.type, shape=part.shape)
            new_nodes.append(ir.Node("", "Slice", [x, *consts], outputs=[y], name=f"{stem}_{tag}"))
            parts.append((part, y))
        graph.insert_before(node, new_nodes)
        for part, y in parts:
            part.replace_all_uses_with(y)
        graph.remove(node, safe=True)
        self.stats["Split"] += 1
        return True
