"""Dead-code elimination: remove nodes, initializers and functions nothing reaches.

Graph inputs and outputs are kept. Subgraphs (If/Loop/Scan bodies) are cleaned too; a node with
a subgraph is kept whenever any of its outputs is used. Built on onnx-ir's unused-node removal.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedFunctionsPass, RemoveUnusedNodesPass, RemoveUnusedOpsetsPass

from onnx_fuse.passes._infra import FusePass, count_nodes


def _keep_present_outputs(model: ir.Model) -> bool:
    """onnx-ir drops unused optional outputs, but ONNX Runtime's Attention-23 refuses a past_key
    without a present_key ("does not support past_key provided and present_key being null"):
    an Attention fed a past gets its present outputs back, unread (a decoder whose present is
    not a graph output, e.g. inside an If branch)."""
    changed = False
    for graph in model.graphs():
        for node in graph:
            if node.op_type != "Attention" or node.domain not in ("", "ai.onnx"):
                continue
            if len(node.inputs) < 5 or node.inputs[4] is None:
                continue
            if len(node.outputs) < 3:
                node.resize_outputs(3)
            for i, what in ((1, "present_key"), (2, "present_value")):
                out = node.outputs[i]
                if not out.name:
                    out.name = f"{node.outputs[0].name}_{what}"
                    changed = True
    return changed


class DeadCodeEliminationPass(FusePass):
    name = "dead-code"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before_nodes = count_nodes(model)
        before_inits = sum(len(g.initializers) for g in model.graphs())
        modified = RemoveUnusedNodesPass()(model).modified
        modified |= _keep_present_outputs(model)
        modified |= RemoveUnusedFunctionsPass()(model).modified
        modified |= RemoveUnusedOpsetsPass()(model).modified
        removed_nodes = before_nodes - count_nodes(model)
        removed_inits = before_inits - sum(len(g.initializers) for g in model.graphs())
        if removed_nodes:
            self.stats["nodes-removed"] += removed_nodes
        if removed_inits:
            self.stats["initializers-removed"] += removed_inits
        return ir.passes.PassResult(model, modified=bool(modified or removed_nodes or removed_inits))
